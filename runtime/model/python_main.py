# How a prepared Python interpreter runs its call: as `python3 FILE` (or `python3 -c CODE`) runs
# a script, in a fresh __main__, and ends as it ends but for the teardown of every module
# (man/sbx-mcp.1). One definition for both drivers that run a call in an interpreter made before
# it: a pool's (runtime/model/warm.cpp, kPythonDriver) and a template's (warm_template.py), each
# embedded after this text (CMakeLists.txt, sbx_embed_text).


def _sbx_ready():
    # What _sbx_main needs that no call changes, made once before any call (a pool's interpreter
    # before its ok, a template before its forks): the modules it imports (atexit alone was ~0.1
    # ms of CPU per call) and a process's first compile of source, which makes the compiler's
    # state (~1 ms here; bench/README.md, Prepared interpreters).
    import atexit, builtins, importlib.machinery, types
    compile(b'pass\n', '/', 'exec', dont_inherit=True)


def _sbx_exit_code(code):
    # SystemExit's code as `python3 FILE` turns it into an exit status (Python/pythonrun.c).
    import sys
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xff if -2**63 <= code < 2**63 else 255
    if sys.stderr is not None:
        try:
            print(code, file=sys.stderr)
        except Exception:
            pass
    return 1


def _sbx_report(e, code):
    # The traceback as `python3 FILE` prints it: from the call's module frame (`code`, its
    # compiled code) on, none of the driver's (whose own frames are '<string>' too, as a
    # `python3 -c` call's are); none at all for a SyntaxError in it (code is None), which then
    # prints as Python prints one. Through sys.excepthook.
    import sys
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code is not code:
        tb = tb.tb_next
    e = e.with_traceback(tb)
    del tb
    sys.excepthook(type(e), e, e.__traceback__)


def _sbx_read(path):
    # The call's file, as bytes: os.open and os.read rather than open(), whose buffered file
    # object costs four more system calls (an isatty ioctl, two lseeks, another fstat) and its
    # objects on the call's start (bench/README.md, Spawn). Read to EOF, so a file that grows
    # while it is read is read as open() would.
    import os
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks, size = [], os.fstat(fd).st_size + 1
        while True:
            chunk = os.read(fd, size)
            if not chunk:
                return b''.join(chunks)
            chunks.append(chunk)
            size = 4096  # a small read finds EOF: 64 KiB made the heap grow, and a fault
    except OSError as e:
        if e.filename is None:  # as open() says it: "[Errno 21] Is a directory: '/code'"
            e.filename = path
        raise
    finally:
        os.close(fd)


def _sbx_module(path, from_file=True):
    # The call's __main__ as Python makes a script's: __builtins__ the module, __loader__ a
    # SourceFileLoader (`python3 -c`'s: no __file__, BuiltinImporter).
    import builtins, importlib.machinery, types
    main = types.ModuleType('__main__')
    main.__builtins__ = builtins
    if from_file:
        main.__file__ = path
        main.__cached__ = None
        main.__loader__ = importlib.machinery.SourceFileLoader('__main__', path)
    else:
        main.__loader__ = importlib.machinery.BuiltinImporter
    return main


def _sbx_main(path, source=None, start=None):
    # The file runs as Python runs a script: a fresh __main__ module (sys.modules['__main__']),
    # its code compiled from the file's bytes (its coding cookie honoured) without the driver's
    # compiler flags. source: `python3 -c`'s code instead, a str (path is then '<string>'). start: what
    # the driver does as the call's code starts (a template's: the signals held for it), whose
    # exceptions (a KeyboardInterrupt) are the call's.
    import os, sys
    main = _sbx_module(path, source is None)
    sys.modules['__main__'] = main
    code, interrupted, compiled = 0, False, None
    try:
        if start is not None:
            start()
        if source is None:
            source = _sbx_read(path)
        compiled = compile(source, path, 'exec', dont_inherit=True)
        exec(compiled, main.__dict__)
    except SystemExit as e:
        code = _sbx_exit_code(e.code)
    except KeyboardInterrupt as e:
        _sbx_report(e, compiled)
        interrupted = True
    except BaseException as e:
        _sbx_report(e, compiled)
        code = 1
    # The end of `python3 FILE` (Py_FinalizeEx) without the teardown of every module, numpy's
    # alone ~12 ms here: non-daemon threads joined, atexit handlers run, the main module's
    # globals released (its open files are closed, and so flushed), stdout flushed (120 if that
    # fails), then the exit; a KeyboardInterrupt ends by SIGINT, as Python does (130 if the call
    # blocked SIGINT: CPython's exit_sigint).
    if 'threading' in sys.modules:
        sys.modules['threading']._shutdown()
    import atexit
    atexit._run_exitfuncs()
    main.__dict__.clear()
    for stream in (sys.stdout, sys.stderr):
        if stream is None or getattr(stream, 'closed', False):
            continue
        try:
            stream.flush()
        except Exception:
            if stream is sys.stdout:
                code = 120
    if interrupted:
        import signal
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    os._exit(code)
