"""Output streaming, --output-limit, and terminal-injection protection."""
import errno
import fcntl
import hashlib
import json
import os
import select
import subprocess
import termios
import time
import tty
import unittest

from sbxtest import SBX, SbxTestCase, note, sbx, scaled


class OutputLimit(SbxTestCase):
    def test_output_limit_truncates_stdout(self):
        r = self.run_sbx(["sh", "-c", "head -c 1000 /dev/zero"], ["--output-limit", "10"])
        self.assertExit(r, 0, "the program itself exits 0")
        self.assertEqual(r.stdout, b"\0" * 10, "exactly 10 bytes pass through")
        t = self.need_trace(r)
        self.assertIs(t["stdout"]["truncated"], True)
        self.assertIs(t["stderr"]["truncated"], False)
        self.assertEqual(t["result"]["exit_code"], 0)
        self.assertEqual(t["result"]["limits_hit"], ["output"], "the record names the limit hit")
        self.assertIn(t["stdout"]["bytes"], (10, 1000), "stdout.bytes: what the program wrote or what passed")
        note(f"with --output-limit 10 and 1000 bytes written, trace stdout.bytes = {t['stdout']['bytes']} "
             f"({'bytes the program wrote' if t['stdout']['bytes'] == 1000 else 'bytes passed through'}); "
             f"result.status = {t['result']['status']!r}")
        if t["stdout"]["bytes"] == 10:
            self.assertEqual(t["stdout"]["sha256"], hashlib.sha256(b"\0" * 10).hexdigest())

    def test_output_limit_is_per_stream_and_program_keeps_running(self):
        # head must not die of SIGPIPE: past the cap output is dropped, the program keeps running.
        r = self.run_sbx(["sh", "-c", "head -c 100000 /dev/zero; echo \"head=$?\" >&2; echo tail-ok >&2"],
                         ["--output-limit", "20"])
        self.assertExit(r, 0)
        self.assertEqual(len(r.stdout), 20)
        self.assertEqual(r.program_stderr, b"head=0\ntail-ok\n", "stderr has its own cap; the program ran to the end")
        t = self.need_trace(r)
        self.assertTrue(t["stdout"]["truncated"])
        self.assertFalse(t["stderr"]["truncated"])

    def test_stderr_truncated(self):
        r = self.run_sbx(["sh", "-c", "head -c 5000 /dev/zero >&2; echo out"], ["--output-limit", "100"])
        self.assertExit(r, 0)
        self.assertEqual(r.stdout, b"out\n")
        self.assertEqual(r.program_stderr, b"\0" * 100)
        t = self.need_trace(r)
        self.assertTrue(t["stderr"]["truncated"])
        self.assertFalse(t["stdout"]["truncated"])

    def test_zero_limit_passes_nothing(self):
        r = self.run_sbx(["echo", "hello"], ["--output-limit", "0"])
        self.assertExit(r, 0)
        self.assertEqual(r.stdout, b"")
        self.assertTrue(self.need_trace(r)["stdout"]["truncated"])

    def test_stdout_hash_and_size_in_trace(self):
        payload = b"hello, sandbox\n" * 1000
        r = self.run_sbx(["sh", "-c", "i=0; while [ $i -lt 1000 ]; do echo 'hello, sandbox'; i=$((i+1)); done"])
        self.assertExit(r, 0)
        self.assertEqual(r.stdout, payload)
        t = self.need_trace(r)
        self.assertEqual(t["stdout"]["bytes"], len(payload))
        self.assertEqual(t["stdout"]["sha256"], hashlib.sha256(payload).hexdigest())
        self.assertEqual(t["stderr"]["bytes"], 0)
        self.assertFalse(t["stdout"]["truncated"])

    def test_large_binary_output_passes_intact(self):
        r = self.run_sbx(["sh", "-c", "head -c 3000000 /dev/urandom | tee /tmp/x | sha256sum >&2; cat /tmp/x"],
                         timeout=60)
        self.assertExit(r, 0)
        self.assertEqual(len(r.stdout), 3000000)
        self.assertEqual(r.program_stderr.split()[0].decode(), hashlib.sha256(r.stdout).hexdigest())

    def test_output_streams_live(self):
        # The bound on the first line stays under the sleep in a sanitizer pass too (scaled).
        p = subprocess.Popen([SBX, "run", "--", "sh", "-c", "echo first; sleep 4; echo second"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            t0 = time.monotonic()
            first = p.stdout.readline()
            took = time.monotonic() - t0
            self.assertEqual(first, b"first\n")
            self.assertLess(took, scaled(1.2), f"first line arrived after {took:.2f}s: output is buffered, not live")
            rest, _ = p.communicate(timeout=10)
            self.assertEqual(rest, b"second\n")
            self.assertEqual(p.returncode, 0)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()

    def test_stdin_reaches_the_program(self):
        r = self.run_sbx(["sh", "-c", "tr a-z A-Z"], input=b"piped in\n")
        self.assertExit(r, 0)
        self.assertEqual(r.out, "PIPED IN\n")


TIOCSTI_SCRIPT = r"""
import errno, fcntl, json, os, sys, termios
res = {'isatty0': os.isatty(0), 'results': []}
for c in 'id; echo INJECTED\n':
    try:
        fcntl.ioctl(0, termios.TIOCSTI, c.encode())
        res['results'].append('ok')
    except OSError as e:
        res['results'].append(errno.errorcode.get(e.errno, str(e.errno)))
# Also try through fd 1 (the terminal too) and /dev/tty, if any.
for path in ('/dev/tty',):
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
    except OSError as e:
        res['devtty'] = errno.errorcode.get(e.errno, str(e.errno))
        continue
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b'X')
        res['devtty'] = 'ok'
    except OSError as e:
        res['devtty'] = errno.errorcode.get(e.errno, str(e.errno))
sys.stderr.write(json.dumps(res) + '\n')
"""


class TerminalInjection(SbxTestCase):
    def test_tiocsti_cannot_inject_into_the_callers_terminal(self):
        try:
            with open("/proc/sys/dev/tty/legacy_tiocsti") as f:
                legacy = f.read().strip()
        except OSError:
            legacy = "unknown"
        if legacy == "0":
            note("dev.tty.legacy_tiocsti=0 on this host: the kernel refuses TIOCSTI itself, "
                 "so this test cannot tell sbx's protection from the kernel's")
        master, slave = os.openpty()
        tty.setraw(slave)
        try:
            # Show that the attack works outside sbx on this terminal (so the test can fail).
            pid = os.fork()
            if pid == 0:
                try:
                    os.setsid()
                    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
                    fcntl.ioctl(slave, termios.TIOCSTI, b"Z")
                    os._exit(0)
                except OSError:
                    os._exit(1)
            _, st = os.waitpid(pid, 0)
            control_works = os.waitstatus_to_exitcode(st) == 0
            injected_control = self.drain(slave)
            if control_works:
                self.assertEqual(injected_control, b"Z", "control injection outside sbx")

            def child_setup():
                # sbx runs in its own session with the pty as its controlling terminal, like a shell job.
                os.setsid()
                fcntl.ioctl(0, termios.TIOCSCTTY, 0)

            p = subprocess.Popen([SBX, "run", "--", "/usr/bin/python3", "-c", TIOCSTI_SCRIPT],
                                 stdin=slave, stdout=slave, stderr=subprocess.PIPE, preexec_fn=child_setup)
            try:
                _, err = p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                self.fail("sbx hung with stdin on a terminal")
            injected = self.drain(slave)
            out_on_terminal = self.drain(master)
            self.assertEqual(p.returncode, 0, f"stderr: {err!r}\nterminal: {out_on_terminal!r}")
            # The last line but sbx's own (the run ends with a summary of what the sandbox was refused).
            report = json.loads([x for x in err.decode().strip().splitlines() if not x.startswith("sbx: ")][-1])
            note(f"TIOCSTI inside sbx: {report}; host legacy_tiocsti={legacy}; control outside sbx "
                 f"{'injected' if control_works else 'refused'}")
            self.assertEqual(injected, b"", "sbx let the program inject input into the caller's terminal")
            self.assertNotIn(b"INJECTED", out_on_terminal)
            # ENOTTY: the program's stdin is the sandbox's /dev/null, not the terminal
            # (test_stdin.py); EPERM/EIO where a terminal is reachable but not controlling.
            for res in report["results"]:
                self.assertIn(res, ("EPERM", "EIO", "ENOTTY"), f"TIOCSTI must fail: {report}")
            if "devtty" in report:
                self.assertNotEqual(report["devtty"], "ok", f"TIOCSTI through /dev/tty worked: {report}")
        finally:
            os.close(master)
            os.close(slave)

    @staticmethod
    def drain(fd):
        fl = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, fl | os.O_NONBLOCK)
        data = b""
        try:
            while select.select([fd], [], [], 0.2)[0]:
                try:
                    chunk = os.read(fd, 4096)
                except OSError as e:
                    if e.errno in (errno.EAGAIN, errno.EIO):
                        break
                    raise
                if not chunk:
                    break
                data += chunk
        finally:
            fcntl.fcntl(fd, fcntl.F_SETFL, fl)
        return data


if __name__ == "__main__":
    unittest.main()


# 60 directories of 250-byte names, then files of 245-byte names at the bottom: each path is
# ~15 KB, and --output lists every exported file (10,000 entries by default). On the old main
# this made a 152 MB record, and every reader of the ledger then refused it (exit 125).
DEEP_OUT = r"""
import os, sys
os.chdir("/out")
d = "d" * 250
for _ in range(60):
    os.mkdir(d)
    os.chdir(d)
f = "f" * 240
for i in range(int(sys.argv[1])):
    open(f + "%05d" % i, "w").close()
print("made")
"""


class OutputRecordBound(SbxTestCase):
    def test_exported_outputs_with_long_nested_names_keep_the_record_bounded_and_the_ledger_readable(self):
        state = self.path("state")
        dest = self.path("exported")
        # 10,200 files: more than the 10,000 entries --output takes, so export.skipped grows too.
        r = self.run_sbx(["/usr/bin/python3", "-c", DEEP_OUT, "10200"], ["--output", dest],
                         env=dict(os.environ, SBX_STATE_DIR=state), timeout=300)
        self.assertEqual(r.out.strip(), "made", r.describe())
        t = self.need_trace(r)
        self.assertEqual(t["result"]["status"], "output_limit", "the entry cap was hit")
        s = t["outputs_summary"]
        self.assertTrue(s["truncated"], json.dumps(s))
        self.assertEqual(s["outputs"], t["export"]["files"])
        self.assertEqual(s["listed"], len(t["outputs"]))
        self.assertEqual(s["listed"] + s["unlisted_outputs"], s["outputs"])
        self.assertGreater(s["unlisted_outputs"], 0)
        self.assertGreater(s["listed"], 0, "what fits is still listed, with its hash")
        self.assertLessEqual(len(json.dumps(t["outputs"], separators=(",", ":"))), s["listed_bytes_cap"])
        self.assertTrue(t["export"]["skipped_truncated"], json.dumps({k: v for k, v in t["export"].items() if k != "skipped"}))
        self.assertLess(len(t["export"]["skipped"]), t["export"]["skipped_count"])
        # The stored line: far under what readers take (64 MiB), and every reader reads the ledger.
        with open(os.path.join(state, "traces", "ledger.jsonl"), "rb") as f:
            lines = f.read().split(b"\n")
        self.assertLess(max(len(l) for l in lines), 16 << 20)
        ls = sbx(["--state-dir", state, "trace", "ls", "--json"], timeout=60)
        self.assertEqual(ls.rc, 0, ls.describe())
        self.assertIn(t["run_id"], [e["run_id"] for e in json.loads(ls.out)])
        show = sbx(["--state-dir", state, "trace", "show", t["run_id"], "--json"], timeout=60)
        self.assertEqual(show.rc, 0, show.describe())
        self.assertTrue(json.loads(show.out)["outputs_summary"]["truncated"])
        v = sbx(["--state-dir", state, "trace", "verify"], timeout=60)
        self.assertEqual(v.rc, 0, v.describe())
        note(f"--output of {s['outputs']} files with ~15 KB paths: record line {max(len(l) for l in lines)} bytes, "
             f"outputs listed {s['listed']} of {s['outputs']}, skipped listed {len(t['export']['skipped'])} of {t['export']['skipped_count']}")
