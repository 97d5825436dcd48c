# The stateful Python interpreter of an sbx session (runtime/session/session_agent.cpp starts it
# as `python3 -u -c <this text>`, compiled into sbx). It runs inside the sandbox with the
# session's restrictions, as the calls' code does: it is no boundary, only a loop that keeps one
# globals dict from call to call.
#   fd 3  code in: a 4-byte big-endian length, then that many bytes of UTF-8 source, per call
#   fd 4  status out: one line per call, "ok", "error", "interrupted" or "exit N" (sys.exit(N)), written after stdout and
#         stderr are flushed (the agent then reads what is left in their pipes)
# stdout and stderr are the call's: what the code and its subprocesses write. A SIGINT (the
# agent's interrupt) raises KeyboardInterrupt in the call; between calls it is ignored.
import ast
import os
import signal
import sys
import traceback

CODE_FD, STATUS_FD = 3, 4


def read_exact(fd, n):
    data = b""
    while len(data) < n:
        try:
            chunk = os.read(fd, n - len(data))
        except KeyboardInterrupt:
            continue
        if not chunk:
            return None
        data += chunk
    return data


def report(error):
    # The call's frames only: the driver's own (this file, "<string>") are not the caller's.
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != "<session>":
        tb = tb.tb_next
    traceback.print_exception(type(error), error, tb)


def run(source, scope):
    tree = ast.parse(source, "<session>", "exec")
    last = None
    # A last bare expression is shown as a REPL shows it (its repr, unless None).
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, "<session>", "exec"), scope)
    if last is not None:
        value = eval(compile(last, "<session>", "eval"), scope)
        if value is not None:
            print(repr(value))


def main():
    signal.signal(signal.SIGINT, signal.default_int_handler)
    scope = {"__name__": "__main__", "__builtins__": __builtins__}
    sys.argv = [""]
    while True:
        head = read_exact(CODE_FD, 4)
        if head is None:
            return
        body = read_exact(CODE_FD, int.from_bytes(head, "big"))
        if body is None:
            return
        status = "ok"
        try:
            run(body.decode("utf-8", "replace"), scope)
        except KeyboardInterrupt as e:
            report(e)
            status = "interrupted"
        except SystemExit as e:  # a call's exit() ends the call, not the interpreter
            if isinstance(e.code, int) and not isinstance(e.code, bool):
                status = "exit %d" % (e.code & 0xFF)
            elif e.code is not None:
                print(e.code, file=sys.stderr)
                status = "error"
        except BaseException as e:
            report(e)
            status = "error"
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        while True:
            try:
                os.write(STATUS_FD, (status + "\n").encode())
                break
            except KeyboardInterrupt:
                continue


main()
