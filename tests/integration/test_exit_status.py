"""Every row of the exit-status table (man/sbx.1, EXIT STATUS; runtime/launch/outcome.hpp) plus setup-failure reporting."""
import os
import re
import unittest

from sbxtest import SbxTestCase, find_procs, kill_tree_by_marker, note, sbx, sanitizer_start_s, scaled, sleep_marker, unique


class ProgramExit(SbxTestCase):
    def test_zero_exit_is_ok(self):
        r = self.run_sbx(["/bin/true"])
        self.assertExit(r, 0)
        t = self.need_trace(r)
        self.assertEqual(t["result"]["status"], "ok")
        self.assertEqual(t["result"]["exit_code"], 0)
        self.assertIsNone(t["result"]["signal"])
        self.assertIsNone(t["result"]["error"])

    def test_own_exit_code_passes_through(self):
        for code in (1, 3, 42, 255):
            r = self.run_sbx(["sh", "-c", f"exit {code}"])
            self.assertExit(r, code)
            t = self.need_trace(r)
            self.assertEqual(t["result"]["status"], "exit_nonzero")
            self.assertEqual(t["result"]["exit_code"], code)
            self.assertIsNone(t["result"]["signal"])

    def test_program_exiting_with_sbx_codes_is_still_the_program(self):
        # The trace status is authoritative: a program may exit 124-127 itself.
        for code in (124, 125, 126, 127):
            r = self.run_sbx(["sh", "-c", f"exit {code}"])
            self.assertExit(r, code)
            t = self.need_trace(r)
            self.assertEqual(t["result"]["status"], "exit_nonzero", f"program exited {code} itself")
            self.assertEqual(t["result"]["exit_code"], code)
            self.assertIsNone(t["result"]["error"])

    def test_killed_by_signal_is_128_plus_n(self):
        for sig, name in ((9, "KILL"), (15, "TERM"), (11, "SEGV")):
            r = self.run_sbx(["sh", "-c", f"kill -{name} $$"])
            self.assertExit(r, 128 + sig, f"program killed by SIG{name}")
            t = self.need_trace(r)
            self.assertEqual(t["result"]["status"], "signaled")
            self.assertEqual(t["result"]["signal"], sig)
            self.assertIsNone(t["result"]["exit_code"])


class WallTimeLimit(SbxTestCase):
    def test_timeout_300ms_returns_124_within_300_to_400ms(self):
        # Noise on a loaded 2-core machine only ever adds time, so up to three tries may be made to
        # land inside the window; every try must exit 124 and none may finish before 300 ms.
        walls = []
        # 400 ms; wider only for a sanitizer build, whose start and teardown are the slowest of any
        # run and whose pass runs two suites at once on 2 cores (tests/sanitize.sh): 610-650 ms
        # were measured there, so it gets the slack of time scale 5 at least, and its own start
        # as measured now (910-1060 ms were seen with a --version of ~0.6-0.9 s).
        upper = scaled(0.400, 0.300, sanitizer_scale=5) + sanitizer_start_s()
        for _ in range(3):
            r = self.run_sbx(["sleep", "10"], ["--timeout", "300ms"], timeout=15)
            self.assertExit(r, 124, "--timeout 300ms -- sleep 10")
            walls.append(r.wall * 1000)
            self.assertGreaterEqual(r.wall, 0.300, f"sbx returned before the limit: {walls} ms")
            t = self.need_trace(r)
            self.assertEqual(t["result"]["status"], "timeout")
            if r.wall <= upper:
                break
        note(f"--timeout 300ms wall times around the sbx process: {', '.join(f'{w:.1f}' for w in walls)} ms")
        self.assertLessEqual(min(walls), upper * 1000, f"no run finished within 300-{upper * 1000:.0f} ms: {walls}")

    def test_timeout_kills_the_whole_sandbox(self):
        m = sleep_marker()
        try:
            r = self.run_sbx(["sh", "-c", f"sleep {m} & sleep 10"], ["--timeout", "300ms"], timeout=15)
            self.assertExit(r, 124)
            left = find_procs(m)
            self.assertEqual(left, {}, "a process of the timed-out sandbox is still running")
        finally:
            kill_tree_by_marker(m)

    def test_a_timed_out_busy_loop_is_recorded_with_its_cpu_time(self):
        # SIGKILL to init alone lost the tree's CPU time (a dying pid namespace's init reaps its
        # children with SIGCHLD ignored): 1 ms was recorded for 2 s of busy loop. Now init kills and
        # reaps the tree itself and reports its usage (kEndSandboxSignal, handshake.hpp). Well over
        # init's 1 ms and under what a loaded 2-core host gives the loop (its neighbour below got
        # under half its wall time in CI, with both suites and a build beside it).
        r = self.run_sbx(["sh", "-c", "while :; do :; done"], ["--timeout", "2s"], timeout=15)
        self.assertExit(r, 124)
        t = self.need_trace(r)
        self.assertEqual(t["result"]["status"], "timeout")
        self.assertEqual(t["result"]["limits_hit"], ["timeout"])
        cpu = t["usage"]["cpu_user_ms"] + t["usage"]["cpu_sys_ms"]
        note(f"2 s busy loop killed at --timeout 2s: cpu_user_ms {t['usage']['cpu_user_ms']}, "
             f"cpu_sys_ms {t['usage']['cpu_sys_ms']}, wall_ms {t['usage']['wall_ms']}")
        self.assertGreaterEqual(cpu, 300, "the program tree's CPU time, not init's\n" + r.describe())

    def test_a_program_keeping_init_busy_still_has_its_cpu_time_recorded(self):
        """sigtimedwait hands out the lowest pending signal first: a program sending SIGUSR1 to
        pid 1 in a loop starved the supervisor's end request (64) until the fallback SIGKILL, and
        the record fell back to init's 1 ms. Init looks for it first on every pass now."""
        prog = ("trap '' USR1; (while :; do kill -USR1 1 2>/dev/null; done) & "
                "while :; do :; done")
        r = self.run_sbx(["sh", "-c", prog], ["--timeout", "2s"], timeout=15)
        self.assertExit(r, 124)
        t = self.need_trace(r)
        cpu = t["usage"]["cpu_user_ms"] + t["usage"]["cpu_sys_ms"]
        # The tree's CPU, not init's ~1 ms: a bound well under the 2 s of two busy processes, which
        # got 958 ms of it in CI with both suites and a build beside them.
        self.assertGreaterEqual(cpu, 300, r.describe())
        self.assertLess(r.wall, scaled(3.5, 2.0), "ended at the timeout, not 2 s later by the fallback SIGKILL")

    def test_the_program_cannot_end_the_run_through_inits_end_signal(self):
        """Init obeys signal 64 only from the supervisor (outside its pid namespace, SI_USER):
        neither kill -64 1 nor a forged rt_sigqueueinfo with si_pid 0 from inside ends the run."""
        forge = ("import ctypes,struct\n"
                 "info = struct.pack('iii', 64, 0, -1) + b'\\0' * 4 + struct.pack('ii', 0, 0) + b'\\0' * 104\n"
                 "print('forged', ctypes.CDLL(None, use_errno=True).syscall(129, 1, 64, info))\n")
        r = self.run_sbx(["sh", "-c", f"kill -64 1; printf '{forge}' > /tmp/f.py; python3 /tmp/f.py; "
                          "sleep 0.5; echo alive"], timeout=15)
        self.assertExit(r, 0)
        self.assertIn("alive", r.out, r.describe())
        self.assertEqual(self.need_trace(r)["result"]["status"], "ok")

    def test_timeout_with_seconds_unit(self):
        r = self.run_sbx(["sleep", "10"], ["--timeout", "1s"], timeout=15)
        self.assertExit(r, 124)
        self.assertTrue(1.0 <= r.wall < scaled(2.0, 1.0, sanitizer_scale=5), f"--timeout 1s took {r.wall:.3f}s")

    def test_timeout_running_out_during_setup(self):
        # 1 ms is over before the sandbox is built (setup takes several ms): sbx kills init while
        # it sets up, and the run is a timeout like any other, with a record and nothing left.
        m = sleep_marker()
        try:
            r = self.run_sbx(["sh", "-c", f"sleep {m}"], ["--timeout", "1ms"], timeout=15)
            self.assertExit(r, 124)
            t = self.need_trace(r)
            self.assertEqual(t["result"]["status"], "timeout")
            self.assertEqual(t["result"]["reason"], "wall")
            self.assertEqual(find_procs(m), {}, "a process of the timed-out sandbox is still running")
        finally:
            kill_tree_by_marker(m)

    def test_fast_program_under_timeout_is_not_a_timeout(self):
        r = self.run_sbx(["sh", "-c", "exit 4"], ["--timeout", "5s"])
        self.assertExit(r, 4)
        self.assertEqual(self.need_trace(r)["result"]["status"], "exit_nonzero")


class UsageErrors(SbxTestCase):
    """Every usage or input error: exit 125, one line on stderr starting 'sbx: ', nothing run."""

    def check_usage(self, args, mention=None):
        r = sbx(args)
        self.assertExit(r, 125, f"usage error: sbx {' '.join(args)}")
        line = self.assertOneSbxLine(r)
        if mention:
            self.assertIn(mention, line, "the error line should say what was wrong")
        self.assertEqual(r.stdout, b"", "nothing may run on a usage error")
        return line

    def test_unknown_flag(self):
        self.check_usage(["run", "--no-such-flag", "--", "/bin/true"], "--no-such-flag")

    def test_unknown_flag_before_subcommand(self):
        self.check_usage(["--no-such-flag", "run", "--", "/bin/true"], "--no-such-flag")

    def test_unknown_subcommand(self):
        self.check_usage(["frobnicate"])

    def test_bad_duration(self):
        for bad in ("5parsecs", "abc", "-1s", "0", "1.5.3s"):
            self.check_usage(["run", "--timeout", bad, "--", "echo", "RAN"], "--timeout")

    def test_empty_duration(self):
        self.check_usage(["run", "--timeout", "", "--", "echo", "RAN"], "--timeout")

    def test_bad_output_limit(self):
        self.check_usage(["run", "--output-limit", "lots", "--", "echo", "RAN"], "--output-limit")

    def test_missing_command(self):
        self.check_usage(["run"])
        self.check_usage(["run", "--"])
        self.check_usage(["run", "--timeout", "1s"])

    def test_missing_option_value(self):
        self.check_usage(["run", "--timeout"])

    def test_unreadable_profile(self):
        missing = self.path("no-such-profile.json")
        self.check_usage(["run", "--profile", missing, "--", "echo", "RAN"], missing)

    def test_unknown_profile_name(self):
        self.check_usage(["run", "--profile", "no-such-profile-xyz", "--", "echo", "RAN"], "no-such-profile-xyz")

    def test_bad_env_flag(self):
        self.check_usage(["run", "--env", "NOEQUALS", "--", "echo", "RAN"])

    def test_usage_error_writes_no_trace_store_record_of_a_run(self):
        state = self.path("state")
        os.mkdir(state)
        r = sbx(["--state-dir", state, "run", "--no-such-flag", "--", "/bin/true"])
        self.assertExit(r, 125)
        traces = os.path.join(state, "traces")
        left = os.listdir(traces) if os.path.isdir(traces) else []
        self.assertEqual([f for f in left if f.endswith(".json") or f == "ledger.jsonl"], [], "a usage error ran nothing")


class EntrypointErrors(SbxTestCase):
    def check_exec_failure(self, r, code):
        self.assertExit(r, code)
        t = self.need_trace(r)
        self.assertEqual(t["result"]["status"], "setup_error")
        err = t["result"]["error"]
        self.assertIsInstance(err, dict, "result.error must describe the failure")
        self.assertEqual(err.get("stage"), "execve")
        self.assertIsNone(t["result"]["exit_code"])
        self.assertTrue(r.err.strip(), "a failed execve should be reported on stderr\n" + r.describe())
        for line in r.err.splitlines():
            self.assertTrue(line.startswith("sbx: "), "sbx's own error lines start with 'sbx: '\n" + r.describe())

    def test_not_found_absolute_is_127(self):
        self.check_exec_failure(self.run_sbx(["/no/such/program"]), 127)

    def test_not_found_in_path_is_127(self):
        self.check_exec_failure(self.run_sbx(["no-such-program-" + unique()]), 127)

    def test_not_executable_is_126(self):
        # /dev/null exists in the sandbox's /dev and is not executable.
        self.check_exec_failure(self.run_sbx(["/dev/null"]), 126)

    def test_directory_is_126(self):
        self.check_exec_failure(self.run_sbx(["/usr"]), 126)


class SetupFailure(SbxTestCase):
    STAGE_LINE = re.compile(r"^sbx: setup failed at (?P<stage>[a-z_]+): (?P<msg>.+): (?P<strerror>[^:]+)$")

    def test_missing_bind_source_fails_at_mounts(self):
        r = self.run_sbx(["echo", "RAN"], ["--bind", "/nonexistent/path:/x"])
        self.assertExit(r, 125, "--bind /nonexistent/path:/x")
        self.assertNotIn(b"RAN", r.stdout)
        lines = [ln for ln in r.err.splitlines() if ln.startswith("sbx: setup failed")]
        self.assertEqual(len(lines), 1, "expected one 'sbx: setup failed at ...' line\n" + r.describe())
        line = lines[0]
        m = self.STAGE_LINE.match(line)
        self.assertIsNotNone(m, f"expected 'sbx: setup failed at <stage>: <message>: <strerror>', got {line!r}")
        self.assertEqual(m["stage"], "mounts")
        self.assertIn("No such file or directory", m["strerror"])
        self.assertIn("/nonexistent/path", line, "the message should name the path that failed")
        t = self.need_trace(r)
        self.assertEqual(t["result"]["status"], "setup_error")
        self.assertIsInstance(t["result"]["error"], dict)
        self.assertEqual(t["result"]["error"].get("stage"), "mounts")
        self.assertIsNone(t["result"]["exit_code"])
        # Last, as it is the least specific: the failure is the only line sbx prints.
        self.assertOneSbxLine(r)


class ClosedStdio(SbxTestCase):
    def test_a_caller_with_fds_0_1_2_closed(self):
        # sbx reopens them on /dev/null first: otherwise its own pipes and sockets would take those
        # numbers, and the program's stdio, placed on 0-2 in init's shared fd table, would replace
        # them (the run then failed or wrote init's messages into the program's output).
        import json
        import subprocess
        from sbxtest import SBX
        trace = self.path("t.json")
        for closed in ("0<&-", "0<&- 2>&-", "0<&- 1>&- 2>&-"):
            with self.subTest(closed=closed):
                p = subprocess.run(["sh", "-c", f'exec "$0" run --trace-file "$1" -- sh -c "echo out; exit 7" {closed}',
                                    SBX, trace], capture_output=True, timeout=30)
                self.assertEqual(p.returncode, 7, p.stderr)
                if "1>&-" not in closed:
                    self.assertEqual(p.stdout, b"out\n")
                with open(trace) as f:
                    self.assertEqual(json.load(f)["result"]["exit_code"], 7)


if __name__ == "__main__":
    unittest.main()
