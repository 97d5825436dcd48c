"""The sbx.trace/v1 record: --trace-file, the trace store, `sbx trace ls|show`."""
import datetime
import hashlib
import json
import os
import time
import unittest

from sbxtest import (ALL_NAMESPACES, HEX64, SbxTestCase, ledger_lines, note, sbx, schema_missing_reason, stored_records,
                     validate_trace)


class TraceRecord(SbxTestCase):
    def test_schema_file_validates_a_record(self):
        reason = schema_missing_reason()
        if reason:
            self.skipTest(reason)
        r = self.run_sbx(["sh", "-c", "echo hi; exit 3"])
        self.assertExit(r, 3)
        validate_trace(self, self.need_trace(r))
        # And the schema is not vacuous: a record without its result must be rejected.
        from sbxtest import schema_validator
        broken = dict(self.need_trace(r))
        del broken["result"]
        self.assertTrue(list(schema_validator().iter_errors(broken)), "schema accepts a record without 'result'")
        broken = dict(self.need_trace(r), schema="sbx.trace/v0")
        self.assertTrue(list(schema_validator().iter_errors(broken)), "schema accepts schema='sbx.trace/v0'")

    def test_trace_file_is_private_like_the_store(self):
        r = self.run_sbx(["/bin/true"], ["--env", "TOKEN=not-for-others"])
        self.assertExit(r, 0)
        self.assertEqual(os.stat(r.trace_path).st_mode & 0o777, 0o600, "--trace-file holds --env values: 0600")
        store = os.path.join(os.environ["SBX_STATE_DIR"], "traces")
        self.assertEqual(os.stat(store).st_mode & 0o777, 0o700)
        for root, _, files in os.walk(store):
            for n in files:
                self.assertEqual(os.stat(os.path.join(root, n)).st_mode & 0o777, 0o600, n)

    def test_record_contents(self):
        cwd = self.path("cwd")
        os.mkdir(cwd)
        r = self.run_sbx(["sh", "-c", "echo hello; echo oops >&2; exit 2"], ["--timeout", "5s"], cwd=cwd)
        self.assertExit(r, 2)
        t = self.need_trace(r)
        self.assertEqual(t["schema"], "sbx.trace/v1")
        self.assertTrue(isinstance(t["run_id"], str) and t["run_id"], "run_id")
        for k in ("started_at", "ended_at"):
            self.assertRegex(t[k], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$", k + " RFC 3339")
        res = t["result"]
        self.assertEqual(res["status"], "exit_nonzero")
        self.assertEqual(res["exit_code"], 2)
        for k in ("status", "exit_code", "signal", "error", "reason"):
            self.assertIn(k, res, f"result.{k}")
        self.assertEqual(t["stdout"]["bytes"], 6)
        self.assertEqual(t["stdout"]["sha256"], hashlib.sha256(b"hello\n").hexdigest())
        self.assertIs(t["stdout"]["truncated"], False)
        self.assertEqual(t["stderr"]["bytes"], 5)
        self.assertEqual(t["stderr"]["sha256"], hashlib.sha256(b"oops\n").hexdigest())
        self.assertIsInstance(t["usage"]["wall_ms"], (int, float))
        self.assertGreaterEqual(t["usage"]["wall_ms"], 0)
        self.assertLess(t["usage"]["wall_ms"], r.wall * 1000 + 50, "wall_ms exceeds the wall time around sbx")
        # Where the time went (issue 34 item 5): each phase measured, within the time around sbx.
        self.assertEqual(t["sandbox"], {"made_by": "cold"})
        phases = t["usage"]["phases_us"]
        self.assertEqual(sorted(phases), ["prepare", "run", "start"], phases)
        self.assertTrue(all(isinstance(v, int) and v > 0 for v in phases.values()), phases)
        self.assertLess(sum(phases.values()), r.wall * 1e6, f"phases {phases} exceed the wall time around sbx")
        enf = t["enforcement"]
        self.assertEqual(sorted(enf["namespaces"]), sorted(ALL_NAMESPACES), "all seven namespaces")
        self.assertIn("limits_applied", enf)
        self.assertIn("limits_not_applied", enf)
        for item in enf["limits_not_applied"]:
            self.assertTrue(item.get("limit") and item.get("reason"), f"limits_not_applied entry {item}")
        applied = json.dumps(enf["limits_applied"])
        self.assertTrue("timeout" in applied or "wall" in applied,
                        f"--timeout is enforced by sbx itself and must be listed as applied: {applied}")
        inv = t["invocation"]
        self.assertEqual(inv["argv"][-4:], ["--", "sh", "-c", "echo hello; echo oops >&2; exit 2"])
        self.assertEqual(os.path.realpath(inv["cwd"]), os.path.realpath(cwd))
        self.assertEqual(inv["profile"]["name"], "untrusted")
        self.assertRegex(inv["profile"]["sha256"], HEX64)
        self.assertEqual(inv["spec"]["argv"], ["sh", "-c", "echo hello; echo oops >&2; exit 2"])
        self.assertEqual(inv["spec"]["limits"]["timeout_ms"], 5000)
        for k in ("sbx", "host", "image", "inputs", "outputs", "violations"):
            self.assertIn(k, t, f"trace.{k} must be present (null/empty with a reason if not yet filled)")

    def test_trace_store_has_one_file_per_run(self):
        state = os.environ["SBX_STATE_DIR"]
        r = self.run_sbx(["echo", "stored"])
        self.assertExit(r, 0)
        t = self.need_trace(r)
        stored = stored_records(state)
        self.assertIn(t["run_id"], stored, "no record of the run in the trace ledger")
        self.assertEqual(stored[t["run_id"]], t, "--trace-file and the ledger hold the same record")
        # The shared state dir may also hold the query index, made by any earlier test's `trace ls`.
        left = sorted(n for n in os.listdir(os.path.join(state, "traces")) if n != "index.sqlite")
        self.assertEqual(left, ["ledger.jsonl"], "temp files left in the trace store")

    def test_state_dir_flag_and_env(self):
        a = self.path("state-a")
        b = self.path("state-b")
        r = sbx(["--state-dir", a, "run", "--", "/bin/true"])
        self.assertExit(r, 0)
        self.assertEqual(len(ledger_lines(a)), 1)
        env = dict(os.environ, SBX_STATE_DIR=b)
        r = sbx(["run", "--", "/bin/true"], env=env)
        self.assertExit(r, 0)
        self.assertEqual(len(ledger_lines(b)), 1)

    def test_program_started_at_lies_between_start_and_end_and_only_when_it_started(self):
        # The program's execve, as init saw it: after the run's start, before its end, and before
        # the program's own first clock reading (what bench/mcp_pool.py builds on).
        def us(stamp):
            d = datetime.datetime.strptime(stamp.rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc)
            return int(d.timestamp()) * 1_000_000 + d.microsecond
        r = self.run_sbx(["sh", "-c", "date +%s%N"])
        self.assertExit(r, 0)
        t = self.need_trace(r)
        self.assertRegex(t["program_started_at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
        at = us(t["program_started_at"])
        self.assertLessEqual(us(t["started_at"]), at)  # started_at has milliseconds: truncated, never later
        self.assertLess(at, us(t["ended_at"]) + 1000)
        # The program's own reading comes after its execve (init may read the clock a little after
        # the program already runs: bounded by a scheduling delay, not by the program's run).
        self.assertLess(at, int(r.out.strip()) // 1000 + 50_000, (t["program_started_at"], r.out))
        note(f"start-up (started_at -> program_started_at): {(at - us(t['started_at'])) / 1000:.2f} ms (started_at in ms)")
        # A program that never started has none: its execve failed, or its child failed before
        # the execve (a name not found on PATH is looked up there).
        for cmd in (["/no/such/binary"], ["no-such-command-xyz"]):
            r = self.run_sbx(cmd)
            self.assertExit(r, 127)
            t = self.need_trace(r)
            self.assertFalse("program_started_at" in t, (cmd, t["result"], t.get("program_started_at")))

    def test_setup_error_and_timeout_are_recorded(self):
        r = self.run_sbx(["/no/such/binary"])
        self.assertExit(r, 127)
        self.assertEqual(self.need_trace(r)["result"]["status"], "setup_error")
        r = self.run_sbx(["sleep", "5"], ["--timeout", "100ms"])
        self.assertExit(r, 124)
        t = self.need_trace(r)
        self.assertEqual(t["result"]["status"], "timeout")
        self.assertGreaterEqual(t["usage"]["wall_ms"], 100)

    def test_trace_file_unwritable_is_reported(self):
        r = self.run_sbx(["echo", "x"], ["--trace-file", "/nonexistent-dir/t.json"], trace=False)
        note(f"unwritable --trace-file: exit {r.rc}")
        self.assertTrue(any(line.startswith("sbx: ") for line in r.err.splitlines()), r.describe())


class TraceCommands(SbxTestCase):
    def test_ls_newest_first_and_show(self):
        state = self.path("state")
        env = dict(os.environ, SBX_STATE_DIR=state)
        ids = []
        for i in range(3):
            tf = self.path(f"t{i}.json")
            r = sbx(["run", "--trace-file", tf, "--", "sh", "-c", f"exit {i}"], env=env)
            self.assertExit(r, i)
            with open(tf) as f:
                ids.append(json.load(f)["run_id"])
            time.sleep(0.02)
        r = sbx(["trace", "ls"], env=env)
        self.assertExit(r, 0, "sbx trace ls")
        lines = [line for line in r.out.splitlines() if line.strip()]
        found = [next((i for i in ids if i in line), None) for line in lines]
        found = [x for x in found if x]
        self.assertEqual(found, list(reversed(ids)), "trace ls lists runs newest first:\n" + r.out)
        line_of = {i: next(ln for ln in lines if i in ln) for i in ids}
        self.assertIn("ok", line_of[ids[0]], "the line shows the status")
        self.assertIn("exit_nonzero", line_of[ids[2]], "the line shows the status")
        r = sbx(["trace", "show", ids[1]], env=env)
        self.assertExit(r, 0, "sbx trace show ID")
        shown = json.loads(r.out)
        self.assertEqual(shown, stored_records(state)[ids[1]])
        validate_trace(self, shown)

    def test_last_and_counting_back_and_listing_for_scripts(self):
        """show last / -N, ls -n N and --json; a year prefix that matches two runs is ambiguous
        (the README used to suggest `trace show 2026`)."""
        state = self.path("state")
        env = dict(os.environ, SBX_STATE_DIR=state)
        ids = []
        for i in range(3):
            tf = self.path(f"t{i}.json")
            self.assertExit(sbx(["run", "--trace-file", tf, "--", "sh", "-c", f"exit {i}"], env=env), i)
            with open(tf) as f:
                ids.append(json.load(f)["run_id"])
            time.sleep(0.02)
        for sel, want in (("last", ids[2]), ("-1", ids[2]), ("-2", ids[1]), ("-3", ids[0])):
            r = sbx(["trace", "show", sel], env=env)
            self.assertExit(r, 0, sel)
            self.assertEqual(json.loads(r.out)["run_id"], want, sel)
        r = sbx(["trace", "show", "-1", "--format", "text"], env=env)
        self.assertExit(r, 0)
        self.assertIn(ids[2], r.out.splitlines()[0])
        r = sbx(["trace", "show", "last", "--json"], env=env)
        self.assertEqual(json.loads(r.out)["run_id"], ids[2])
        r = sbx(["trace", "show", "-4"], env=env)
        self.assertExit(r, 125)
        self.assertIn("holds 3 run(s)", r.err)
        r = sbx(["trace", "show", ids[0][:4]], env=env)
        self.assertExit(r, 125)
        self.assertIn("ambiguous", r.err)
        self.assertIn("'last'", r.err)
        r = sbx(["trace", "ls", "-n", "2"], env=env)
        self.assertExit(r, 0)
        rows = r.out.splitlines()[1:]
        self.assertEqual([row.split()[0] for row in rows], [ids[2], ids[1]])
        r = sbx(["trace", "ls", "--json"], env=env)
        self.assertExit(r, 0)
        listed = json.loads(r.out)
        self.assertEqual([e["run_id"] for e in listed], list(reversed(ids)))
        self.assertEqual(listed[0]["exit_code"], 2)
        self.assertEqual(listed[0]["status"], "exit_nonzero")
        self.assertEqual(listed[2]["command"], "sh -c 'exit 0'")
        r = sbx(["trace", "ls", "--json", "--newest", "1"], env=env)
        self.assertEqual([e["run_id"] for e in json.loads(r.out)], [ids[2]])
        self.assertExit(sbx(["trace", "ls", "-n", "0"], env=env), 125)

    def test_show_unknown_id(self):
        state = self.path("state")
        r = sbx(["--state-dir", state, "trace", "show", "no-such-run"])
        self.assertNotEqual(r.rc, 0)
        self.assertTrue(r.err.startswith("sbx: "), r.describe())

    def test_ls_empty_store(self):
        r = sbx(["--state-dir", self.path("empty"), "trace", "ls"])
        self.assertExit(r, 0)


if __name__ == "__main__":
    unittest.main()
