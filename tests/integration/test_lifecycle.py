"""Process lifetime: leftovers are killed, sbx's death kills the sandbox, signals are forwarded."""
import signal
import subprocess
import time
import unittest

from sbxtest import SBX, SbxTestCase, find_procs, find_program, kill_tree_by_marker, scaled, sleep_marker, unique, wait_for


class Leftovers(SbxTestCase):
    def test_background_process_is_gone_after_the_run(self):
        m = sleep_marker()
        try:
            r = self.run_sbx(["sh", "-c", f"sleep {m} & echo started"], timeout=20)
            self.assertExit(r, 0)
            self.assertEqual(r.out, "started\n")
            # The background sleep holds the stdout pipe open: sbx must not wait for it.
            self.assertLess(r.wall, 5.0, "sbx waited for the background process")
            self.assertEqual(find_procs(m), {}, "the program's background process outlived the run")
        finally:
            kill_tree_by_marker(m)

    def test_daemonized_grandchild_is_gone(self):
        # setsid + double fork: reparented to the sandbox's init, still killed with the sandbox.
        m = sleep_marker()
        try:
            r = self.run_sbx(["sh", "-c", f"setsid sh -c 'sleep {m} </dev/null >/dev/null 2>&1 &' ; echo ok"],
                             timeout=20)
            self.assertExit(r, 0)
            self.assertEqual(find_procs(m), {}, "a daemonized process outlived the run")
        finally:
            kill_tree_by_marker(m)

    def test_zombies_are_reaped(self):
        # Orphans reparented to init must be reaped while the program runs.
        r = self.run_sbx(["sh", "-c", "for i in 1 2 3 4 5; do (sh -c 'exit 0' &) ; done; sleep 0.3; "
                                      "grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l"])
        self.assertExit(r, 0)
        self.assertEqual(r.out.strip(), "0", "zombies left unreaped inside the sandbox")


class SbxKilled(SbxTestCase):
    def test_sigkill_of_sbx_kills_the_sandbox(self):
        m = sleep_marker()
        p = subprocess.Popen([SBX, "run", "--", "sleep", m], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            found = wait_for(lambda: find_program(m), 10)
            if not found:
                p.kill()
                p.wait()
                self.fail(f"the sandboxed 'sleep {m}' never appeared: " + p.stderr.read().decode(errors="replace"))
            p.kill()
            p.wait()
            t0 = time.monotonic()
            gone = wait_for(lambda: not find_procs(m), 1.0)
            left = find_procs(m)
            self.assertTrue(gone, f"sandbox processes still alive {time.monotonic() - t0:.2f}s after "
                                  f"SIGKILL of sbx: {left}")
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            kill_tree_by_marker(m)

    def test_sigkill_of_sbx_kills_background_processes_too(self):
        m = sleep_marker()
        p = subprocess.Popen([SBX, "run", "--", "sh", "-c", f"sleep {m} & sleep {m}; wait"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            self.assertTrue(wait_for(lambda: len(find_program(m)) >= 2, 10), "sandbox did not start")
            p.kill()
            p.wait()
            self.assertTrue(wait_for(lambda: not find_procs(m), 1.0),
                            f"left after SIGKILL of sbx: {find_procs(m)}")
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            kill_tree_by_marker(m)


class SignalForwarding(SbxTestCase):
    def start(self, script, marker):
        p = subprocess.Popen([SBX, "run", "--", "sh", "-c", script, marker], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = p.stdout.readline()
        if line != b"ready\n":
            p.kill()
            out, err = p.communicate()
            self.fail(f"program did not start: {line + out!r} {err!r}")
        return p

    def finish(self, p, timeout):
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            self.fail(f"sbx still running {timeout}s after the signal: {err!r}")
        return out, err

    def test_sigterm_is_forwarded(self):
        m = unique("fwd-term-")
        p = self.start("trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done", m)
        try:
            p.send_signal(signal.SIGTERM)
            out, err = self.finish(p, 5)
            self.assertEqual(p.returncode, 7, f"the program's trap should exit 7; stderr {err!r}")
            self.assertIn(b"got-term", out)
        finally:
            kill_tree_by_marker(m)
        self.assertEqual(find_procs(m), {})

    def test_sigint_is_forwarded(self):
        m = unique("fwd-int-")
        p = self.start("trap 'exit 5' INT; echo ready; while :; do sleep 0.05; done", m)
        try:
            p.send_signal(signal.SIGINT)
            out, err = self.finish(p, 5)
            self.assertEqual(p.returncode, 5, f"stderr {err!r}")
        finally:
            kill_tree_by_marker(m)

    def test_program_ignoring_sigterm_is_killed_after_grace(self):
        m = unique("fwd-ignore-")
        p = self.start("trap '' TERM; echo ready; while :; do sleep 0.05; done", m)
        try:
            t0 = time.monotonic()
            p.send_signal(signal.SIGTERM)
            out, err = self.finish(p, 10)
            took = time.monotonic() - t0
            self.assertGreaterEqual(took, 1.8, f"killed before the 2 s grace period ({took:.2f}s)")
            self.assertLess(took, scaled(3.5, 2.0), f"grace period far longer than 2 s ({took:.2f}s)")
            self.assertEqual(p.returncode, 128 + signal.SIGKILL,
                             f"program killed by SIGKILL after the grace period: expected 137; stderr {err!r}")
            self.assertEqual(find_procs(m), {}, "the program survived")
        finally:
            kill_tree_by_marker(m)


if __name__ == "__main__":
    unittest.main()
