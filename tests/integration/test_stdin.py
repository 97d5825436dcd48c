"""The caller's terminal and stdin: none of the caller's descriptors reaches the program; a pipe or
file stdin is relayed by sbx; -i/-t give the program a pty of the sandbox's own. Root and rootless."""
import errno
import fcntl
import hashlib
import json
import os
import select
import signal
import struct
import subprocess
import termios
import threading
import time
import unittest

from sbxtest import SBX, SbxTestCase, busybox_digest, note, validate_trace, wait_for

# Every way a program could touch the terminal it was handed on fd 0 (and 1, 2): write past
# --output-limit, switch echo off, resize the window, read what the user types.
ATTACK = r"""
import errno, fcntl, json, os, struct, sys, termios
res = {}
def err(e): return errno.errorcode.get(e.errno, str(e.errno))
for fd in (0, 1, 2):
    res[f'fd{fd}'] = os.readlink(f'/proc/self/fd/{fd}')
try:
    res['write0'] = os.write(0, b'A' * 1000)
except OSError as e:
    res['write0'] = err(e)
try:
    t = termios.tcgetattr(0)
    t[3] &= ~termios.ECHO
    termios.tcsetattr(0, termios.TCSANOW, t)
    res['echo_off'] = 'ok'
except (OSError, termios.error) as e:
    res['echo_off'] = errno.errorcode.get(e.args[0], str(e.args[0]))
try:
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack('HHHH', 7, 9, 0, 0))
    res['winsz'] = 'ok'
except OSError as e:
    res['winsz'] = err(e)
try:
    res['read0'] = os.read(0, 100).decode(errors='replace')
except OSError as e:
    res['read0'] = err(e)
os.write(1, b'B' * 5000)
sys.stderr.write(json.dumps(res) + '\n')
"""


def winsize(fd):
    return struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))[:2]


class Pty:
    """A pty pair with sbx running on its slave as the controlling terminal, like a shell job."""

    def __init__(self, rows=33, cols=101):
        self.master, self.slave = os.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.before = termios.tcgetattr(self.slave)
        self.output = b""
        self.proc = None
        self._lock = threading.Lock()
        self._stop = False
        self._reader = threading.Thread(target=self._read, daemon=True)

    def start(self, args, stderr=subprocess.PIPE):
        def child_setup():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        self.proc = subprocess.Popen([SBX] + args, stdin=self.slave, stdout=self.slave, stderr=stderr,
                                     preexec_fn=child_setup)
        self._reader.start()
        return self.proc

    def _read(self):
        while not self._stop:
            if not select.select([self.master], [], [], 0.05)[0]:
                continue
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            with self._lock:
                self.output += chunk

    def seen(self):
        with self._lock:
            return self.output

    def wait(self, timeout=30):
        try:
            _, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            raise AssertionError(f"sbx did not finish within {timeout}s; terminal: {self.seen()[-2000:]!r}")
        time.sleep(0.2)  # let the reader take what is left
        return self.proc.returncode, (err or b"").decode(errors="replace")

    def raw_now(self):
        return not (termios.tcgetattr(self.slave)[3] & termios.ECHO)

    def close(self):
        self._stop = True
        if self._reader.is_alive():
            self._reader.join(2)
        for fd in (self.master, self.slave):
            os.close(fd)


class CallerTerminal(SbxTestCase):
    def setUp(self):
        super().setUp()
        self.pty = Pty()

    def tearDown(self):
        if self.pty.proc and self.pty.proc.poll() is None:
            self.pty.proc.kill()
            self.pty.proc.wait()
        self.pty.close()
        super().tearDown()

    def trace_of(self, path):
        if not os.path.exists(path):
            self.fail("no trace written")
        with open(path) as f:
            t = json.load(f)
        validate_trace(self, t)
        return t

    def test_program_cannot_touch_the_callers_terminal(self):
        tpath = self.path("trace.json")
        os.write(self.pty.master, b"typed-by-the-user\n")  # waiting on the terminal before sbx starts
        echo = b""
        while select.select([self.pty.master], [], [], 0.3)[0]:  # the terminal's own echo of it
            echo += os.read(self.pty.master, 4096)
        self.assertEqual(echo, b"typed-by-the-user\r\n")
        self.pty.start(["run", "--output-limit", "2000", "--trace-file", tpath, "--", "/usr/bin/python3", "-c", ATTACK])
        rc, err = self.pty.wait()
        self.assertEqual(rc, 0, err)
        # The last line of the program's (after sbx's own warning that stdout was cut at 2000 bytes).
        report = json.loads([l for l in err.strip().splitlines() if not l.startswith("sbx: warning: ")][-1])
        note(f"attack from inside: {report}")
        self.assertEqual(termios.tcgetattr(self.pty.slave), self.pty.before, "the caller's termios changed")
        self.assertEqual(winsize(self.pty.slave), (33, 101), "the caller's window size changed")
        self.assertNotIn(b"A", self.pty.seen(), "the program wrote to the caller's terminal directly")
        self.assertEqual(self.pty.seen(), b"B" * 2000, "only the capped stdout relay reaches the terminal")
        self.assertEqual(report["fd0"], "/dev/null")
        for fd in ("fd1", "fd2"):
            self.assertTrue(report[fd].startswith("pipe:"), f"{fd} must be sbx's pipe: {report}")
        self.assertNotEqual(report["read0"], "typed-by-the-user\n", "the program read the user's typing")
        t = self.trace_of(tpath)
        self.assertEqual(t["stdin"]["mode"], "null")
        self.assertEqual(t["stdin"]["source"], "terminal")

    def test_interactive_shell_on_its_own_pty(self):
        tpath = self.path("trace.json")
        self.pty.start(["run", "-it", "--trace-file", tpath, "--", "sh"])
        self.assertTrue(wait_for(self.pty.raw_now, 20), "the caller's terminal is in raw mode during -it")
        os.write(self.pty.master, b"tty; stty size; echo hi-$((6*7)); exit 3\n")
        rc, err = self.pty.wait()
        out = self.pty.seen()
        self.assertEqual(rc, 3, f"stderr: {err}\nterminal: {out!r}")
        self.assertIn(b"hi-42", out)
        self.assertIn(b"/dev/pts/0", out, "the program's terminal is the sandbox's devpts")
        self.assertIn(b"33 101", out, "the initial window size reached the pty")
        self.assertEqual(termios.tcgetattr(self.pty.slave), self.pty.before, "settings restored after the run")
        t = self.trace_of(tpath)
        self.assertEqual(t["stdin"]["mode"], "pty")
        self.assertGreater(t["stdin"]["bytes"], 0)
        self.assertGreater(t["stdout"]["bytes"], 0, "the pty's output is the stdout stream")

    def test_ctrl_c_reaches_the_program_through_its_pty(self):
        # In raw mode ^C is a byte for the sandbox's pty, whose line discipline signals the
        # program's foreground process group; sbx itself is not interrupted.
        self.pty.start(["run", "-it", "--", "sh", "-c", "echo ready; exec sleep 30"])
        self.assertTrue(wait_for(lambda: b"ready" in self.pty.seen(), 20), self.pty.seen())
        os.write(self.pty.master, b"\x03")
        rc, err = self.pty.wait()
        self.assertEqual(rc, 128 + signal.SIGINT, err)
        self.assertEqual(termios.tcgetattr(self.pty.slave), self.pty.before)

    def test_forwarded_ctrl_c_reaches_the_ptys_foreground_job(self):
        # -t without -i: the caller's terminal is cooked, so its ^C signals sbx, which forwards it.
        # Inside, a "shell" with job control ignores SIGINT and has made its job the pty's
        # foreground group, as an interactive shell does: the ^C must reach that job, as the
        # pty's own ^C would, not the shell's group (where it would be ignored until sbx's grace
        # period ran out and the sandbox was killed). The job says it is running Python code before
        # the shell says ready: a SIGINT that reached it inside CPython's after-fork code would be
        # wiped there (the job would sleep on; seen in CI under load, 1 run in 3 with both cores busy).
        job_control = (
            "import os, signal, time\n"
            "r, w = os.pipe()\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    os.setpgid(0, 0)\n"
            "    os.write(w, b'1')\n"
            "    time.sleep(30)\n"
            "    os._exit(0)\n"
            "os.setpgid(pid, pid)\n"
            "os.read(r, 1)\n"
            "signal.signal(signal.SIGTTOU, signal.SIG_IGN)\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "os.tcsetpgrp(0, pid)\n"
            "print('ready', flush=True)\n"
            "_, st = os.waitpid(pid, 0)\n"
            "print('job-ended', 'by-SIGINT' if os.WIFSIGNALED(st) and os.WTERMSIG(st) == signal.SIGINT else st, flush=True)\n"
        )
        self.pty.start(["run", "-t", "--", "python3", "-c", job_control])
        self.assertTrue(wait_for(lambda: b"ready" in self.pty.seen(), 20), self.pty.seen())
        os.write(self.pty.master, b"\x03")  # the caller's terminal signals sbx's group
        rc, err = self.pty.wait()
        self.assertIn(b"job-ended by-SIGINT", self.pty.seen(), f"exit {rc}; stderr: {err}")

    def test_reader_gone_hangs_up_the_pty(self):
        # `sbx run -t -- yes | head -1`: with a pty there is no pipe whose closing gives the
        # program EPIPE; sbx hangs the pty up instead (SIGHUP, as a terminal that goes away),
        # instead of leaving the program blocked on a full pty until the wall-time limit.
        tpath = self.path("trace.json")
        def child_setup():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        p = subprocess.Popen([SBX, "run", "-t", "--timeout", "20s", "--trace-file", tpath, "--", "yes"],
                             stdin=self.pty.slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=child_setup)
        t0 = time.monotonic()
        self.assertEqual(p.stdout.read(4), b"y\r\ny")
        p.stdout.close()
        try:
            p.wait(timeout=15)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stderr.close()
        self.assertLess(time.monotonic() - t0, 10, "the program ran on until the wall-time limit")
        self.assertEqual(p.returncode, 128 + signal.SIGHUP)
        t = self.trace_of(tpath)
        self.assertTrue(t["stdout"]["reader_closed"])
        self.assertEqual(t["result"]["signal"], signal.SIGHUP)

    def test_tty_without_interactive_gets_a_pty_but_no_input(self):
        tpath = self.path("trace.json")
        self.pty.start(["run", "-t", "--trace-file", tpath, "--", "sh", "-c", "tty; echo err >&2"])
        rc, err = self.pty.wait()
        self.assertEqual(rc, 0, err)
        self.assertIn(b"/dev/pts/0", self.pty.seen())
        self.assertIn(b"err", self.pty.seen(), "stderr is merged onto the pty")
        self.assertEqual(termios.tcgetattr(self.pty.slave), self.pty.before, "no raw mode without -i")
        t = self.trace_of(tpath)
        self.assertEqual((t["stdin"]["mode"], t["stdin"]["relayed"]), ("pty", False))
        self.assertEqual(t["stderr"]["bytes"], 0)

    def test_interactive_shell_on_an_image(self):
        # An image root (init forked, not shared) has the same private devpts.
        digest = busybox_digest(self)
        self.pty.start(["run", "-it", "--image", digest, "--", "sh"])
        self.assertTrue(wait_for(self.pty.raw_now, 30), "raw mode during the run")
        os.write(self.pty.master, b"tty; echo bb-$((2+3)); exit 4\n")
        rc, err = self.pty.wait()
        self.assertEqual(rc, 4, f"{err}\n{self.pty.seen()!r}")
        self.assertIn(b"/dev/pts/0", self.pty.seen())
        self.assertIn(b"bb-5", self.pty.seen())
        self.assertEqual(termios.tcgetattr(self.pty.slave), self.pty.before)

    def test_window_size_forwarded(self):
        self.pty.start(["run", "-it", "--", "sh", "-c", "stty size; read x; stty size"])
        self.assertTrue(wait_for(lambda: b"33 101" in self.pty.seen(), 20), self.pty.seen())
        fcntl.ioctl(self.pty.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # SIGWINCH to sbx
        time.sleep(0.5)
        os.write(self.pty.master, b"\n")
        rc, err = self.pty.wait()
        self.assertEqual(rc, 0, err)
        self.assertIn(b"40 120", self.pty.seen(), "SIGWINCH forwarded as the pty's new size")

    def test_output_cap_applies_to_the_pty(self):
        self.pty.start(["run", "-it", "--output-limit", "100", "--", "sh", "-c", "head -c 100000 /dev/zero | tr '\\0' Q"])
        rc, err = self.pty.wait()
        self.assertEqual(rc, 0, err)
        self.assertEqual(self.pty.seen().count(b"Q"), 100)

    def settings_restored_after(self, opts, end):
        self.pty.start(["run", "-it"] + opts + ["--", "sleep", "30"])
        self.assertTrue(wait_for(self.pty.raw_now, 20), "raw mode during the run")
        end()
        rc, err = self.pty.wait()
        self.assertEqual(termios.tcgetattr(self.pty.slave), self.pty.before, f"settings restored (exit {rc})")
        return rc, err

    def test_settings_restored_after_timeout(self):
        rc, err = self.settings_restored_after(["--timeout", "1500ms"], lambda: None)
        self.assertEqual(rc, 124, err)

    def test_settings_restored_after_sigterm(self):
        rc, err = self.settings_restored_after([], lambda: self.pty.proc.send_signal(signal.SIGTERM))
        self.assertIn(rc, (143, 137), err)

    def test_settings_restored_after_a_setup_error(self):
        # The program child fails at execve, after the terminal went raw.
        self.pty.start(["run", "-it", "--", "/nonexistent/program"])
        rc, err = self.pty.wait()
        self.assertEqual(rc, 127, err)
        self.assertIn("/nonexistent/program", err)
        self.assertEqual(termios.tcgetattr(self.pty.slave), self.pty.before)

    def test_tty_without_a_terminal_is_a_usage_error(self):
        r = subprocess.run([SBX, "run", "-t", "--", "true"], stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 125, r.stderr)
        lines = r.stderr.decode().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("-t/--tty needs a terminal on stdin", lines[0])

    def test_interactive_without_tty_relays_the_terminal_through_a_pipe(self):
        self.pty.start(["run", "-i", "--", "sh", "-c", "readlink /proc/self/fd/0; read x; echo got-$x"])
        self.assertTrue(wait_for(lambda: b"pipe:" in self.pty.seen(), 20), self.pty.seen())
        os.write(self.pty.master, b"word\n")
        rc, err = self.pty.wait()
        self.assertEqual(rc, 0, err)
        self.assertIn(b"got-word", self.pty.seen())
        self.assertEqual(termios.tcgetattr(self.pty.slave), self.pty.before)


class PipeStdin(SbxTestCase):
    def test_ten_megabytes_intact(self):
        data = os.urandom(10 * 1024 * 1024)
        r = self.run_sbx(["sha256sum"], input=data, timeout=60)
        self.assertExit(r, 0)
        self.assertEqual(r.out.split()[0], hashlib.sha256(data).hexdigest())
        t = self.need_trace(r)
        self.assertEqual(t["stdin"]["mode"], "pipe")
        self.assertEqual(t["stdin"]["bytes"], len(data))
        self.assertIs(t["stdin"]["eof"], True)

    def test_writable_stdin_file_is_not_the_programs(self):
        # `sbx run ... <> file`: the caller's fd 0 is open read-write.
        victim = self.path("victim")
        with open(victim, "wb") as f:
            f.write(b"original\n")
        fd = os.open(victim, os.O_RDWR)
        try:
            tpath = self.path("trace.json")
            p = subprocess.run([SBX, "run", "--trace-file", tpath, "--", "sh", "-c", "cat; echo PWNED >&0"],
                               stdin=fd, capture_output=True, timeout=30)
        finally:
            os.close(fd)
        with open(victim, "rb") as f:
            self.assertEqual(f.read(), b"original\n", "the program wrote into the caller's stdin file")
        self.assertEqual(p.stdout, b"original\n", p.stderr)

    def test_an_epoll_fd_on_stdin_is_no_input_not_a_wait_for_the_wall_limit(self):
        # An anonymous inode (here an epoll fd, which never polls readable) was relayed: `cat`
        # then read nothing until --timeout ended the run. It is empty input, as /dev/null is.
        ep = select.epoll()
        try:
            tpath = self.path("trace.json")
            start = time.monotonic()
            p = subprocess.run([SBX, "run", "-i", "--timeout", "60s", "--trace-file", tpath, "--",
                                "sh", "-c", "cat; readlink /proc/self/fd/0"],
                               stdin=ep.fileno(), capture_output=True, timeout=120)
            took = time.monotonic() - start
        finally:
            ep.close()
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, b"/dev/null\n", p.stderr)
        self.assertLess(took, 30, "the run waited on its stdin")
        with open(tpath) as f:
            t = json.load(f)
        validate_trace(self, t)
        self.assertEqual((t["stdin"]["source"], t["stdin"]["mode"]), ("anonymous inode", "null"))

    def test_exec_program_gets_no_caller_stdin(self):
        req = self.path("req.json")
        with open(req, "w") as f:
            json.dump({"language": "sh", "code": "x=PW; echo ${x}NED >&0; readlink /proc/self/fd/0 /proc/self/fd/1 /proc/self/fd/2"}, f)
        fd = os.open(req, os.O_RDWR)
        try:
            p = subprocess.run([SBX, "exec"], stdin=fd, capture_output=True, timeout=60)
        finally:
            os.close(fd)
        with open(req) as f:
            self.assertNotIn("PWNED", f.read(), "the exec'd program wrote into the caller's request file")
        resp = json.loads(p.stdout)
        fds = resp["stdout"].splitlines()
        self.assertEqual(fds[0], "/dev/null", resp)
        for fd in fds[1:]:
            self.assertTrue(fd.startswith("pipe:"), f"fds 1 and 2 are sbx's pipes: {resp}")
        self.assertEqual(len(fds), 3, resp)

    def test_stalled_reader_does_not_block_sbx(self):
        # The program never reads; the caller keeps writing. The wall-time limit holds and sbx
        # does not wait for the caller's pipe either.
        start = time.monotonic()
        p = subprocess.Popen([SBX, "run", "--timeout", "2s", "--", "sleep", "60"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)

        def feed():
            try:
                while True:
                    p.stdin.write(b"x" * 65536)
            except (BrokenPipeError, ValueError, OSError):
                pass
        threading.Thread(target=feed, daemon=True).start()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            self.fail("sbx blocked on a program that never reads its stdin")
        wall = time.monotonic() - start
        self.assertEqual(p.returncode, 124)
        self.assertLess(wall, 15, "the wall-time limit held")

    def test_program_closing_stdin_stops_the_relay(self):
        data = b"y" * (4 * 1024 * 1024)
        r = self.run_sbx(["sh", "-c", "exec 0<&-; echo closed; sleep 0.5"], input=data, timeout=60)
        self.assertExit(r, 0)
        self.assertEqual(r.out, "closed\n")
        t = self.need_trace(r)
        self.assertLess(t["stdin"]["bytes"], len(data))
        self.assertIs(t["stdin"]["closed_by_program"], True)


if __name__ == "__main__":
    unittest.main()
