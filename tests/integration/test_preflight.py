"""--dry-run makes the run's own checks and shows what would enforce each limit; flags clear a
profile's limit; errors say what to do. Runs as root and rootless."""
import json
import os
import re
import unittest

from sbxtest import MODE, SbxTestCase, note, sbx

LIMIT_FLAGS = {"memory": "--memory", "pids": "--pids", "cpus": "--cpus", "cpu_time": "--cpu-time",
               "timeout": "--timeout", "output": "--output-limit"}


def limit_entries(plan):
    return {e["limit"]: e for e in plan["enforcement"]["limits"]}


class DryRunEnforcement(SbxTestCase):
    def test_dry_run_shows_what_the_run_enforces(self):
        """Every limit of the dry run carries the mechanism the real run's trace records (or none,
        with why), and the layer that set it."""
        opts = ["--memory", "64M", "--cpus", "0.5", "--cpu-time", "5s"]
        r = sbx(["run", "--dry-run"] + opts + ["--", "true"])
        self.assertExit(r, 0)
        plan = json.loads(r.out)
        self.assertEqual(plan["limits"]["cpus"], 0.5, "the spec's members stay where they were")
        got = limit_entries(plan)
        real = self.run_sbx(["true"], opts)
        self.assertExit(real, 0)
        enf = self.need_trace(real)["enforcement"]
        applied = enf["limits_applied"]
        not_applied = {e["limit"]: e for e in enf["limits_not_applied"]}
        for name in ("memory", "cpus", "cpu_time", "pids", "timeout", "output"):
            e = got[name]
            self.assertIn(name, applied.keys() | not_applied.keys())
            self.assertEqual(e["enforced"], name in applied, f"{name}: dry run {e} vs run {enf}")
            if name in applied:
                self.assertEqual(e["mechanism"], applied[name]["mechanism"], name)
                self.assertEqual(e["degraded"], applied[name].get("degraded", False), name)
            else:
                self.assertIsNone(e["mechanism"])
                self.assertTrue(e["reason"], f"{name}: a limit not enforced says why")
        self.assertEqual(got["cpus"]["set_by"], "flag --cpus")
        self.assertEqual(got["pids"]["set_by"], "profile 'untrusted'")
        self.assertIn("seccomp", plan["enforcement"])
        self.assertIn("identity", plan["enforcement"])
        note(f"cpus: {got['cpus']['mechanism'] or 'not enforced: ' + got['cpus']['reason']}")

    def same_failure(self, opts, what):
        """The dry run fails exactly as the run does, and the run never starts the program."""
        flag = self.path("ran")
        cmd = ["--", "sh", "-c", f"touch {flag}"]
        dry = sbx(["run", "--dry-run"] + opts + cmd)
        real = sbx(["run"] + opts + cmd)
        self.assertExit(real, 125, what)
        self.assertExit(dry, 125, f"--dry-run with {what}")
        self.assertEqual(self.assertOneSbxLine(dry), self.assertOneSbxLine(real), what)
        self.assertEqual(dry.out, "")
        self.assertFalse(os.path.exists(flag))
        return dry.err

    def test_missing_image(self):
        self.assertIn("nosuch", self.same_failure(["--image", "nosuch"], "--image nosuch"))

    def test_missing_bind_source(self):
        err = self.same_failure(["--bind", "/nonexistent-sbx-src:/x"], "--bind /nonexistent")
        self.assertIn("/nonexistent-sbx-src", err)
        self.assertIn("No such file", err)

    def test_missing_seccomp_file(self):
        self.assertIn("/nonexistent-sbx.json", self.same_failure(["--seccomp", "/nonexistent-sbx.json"], "--seccomp"))

    def test_missing_trace_file_directory(self):
        err = self.same_failure(["--trace-file", "/nonexistent-sbx-dir/t.json"], "--trace-file")
        self.assertIn("/nonexistent-sbx-dir", err)

    def test_output_directory(self):
        full = self.path("full")
        os.mkdir(full)
        open(os.path.join(full, "x"), "w").close()
        self.assertIn("not empty", self.same_failure(["--output", full], "--output a non-empty directory"))
        r = sbx(["run", "--dry-run", "--output", self.path("new"), "--", "true"])
        self.assertExit(r, 0)
        self.assertFalse(os.path.exists(self.path("new")), "a dry run creates nothing")
        self.same_failure(["--output", "/nonexistent-sbx-dir/out"], "--output in a missing directory")

    def test_tmpfs_mounts_that_do_not_fit_the_memory_limit(self):
        # Without a cgroup charging tmpfs pages (this host's cgroup v2 has no memory controller,
        # and rootless has none either), the tmpfs sizes must fit under --memory: the caller's own
        # --tmpfs size is never scaled, so the run refuses, and the dry run must say the same.
        probe = self.run_sbx(["true"], ["--memory", "64M"])
        self.assertExit(probe, 0)
        if "memory_fallback" not in self.need_trace(probe)["enforcement"]:
            self.skipTest("memory is bounded by a cgroup here: tmpfs pages are charged to it, nothing to refuse")
        err = self.same_failure(["--memory", "16M", "--tmpfs", "/x:64M"], "--tmpfs larger than --memory")
        self.assertIn("the tmpfs mounts need", err)
        # What fits is scaled, and the dry run shows the sizes the run will mount.
        plan = json.loads(sbx(["run", "--dry-run", "--memory", "32M", "--", "true"]).out)
        def tmpfs_sizes(enforcement):
            mech = [m for m in enforcement["memory_fallback"]["mechanisms"] if m["mechanism"] == "tmpfs size options"]
            self.assertEqual(len(mech), 1, enforcement["memory_fallback"])
            return {t["path"]: t["size_bytes"] for t in mech[0]["mounts"]}
        sizes = tmpfs_sizes(plan["enforcement"])
        self.assertLessEqual(sum(sizes.values()), 32 << 20, sizes)
        real = self.run_sbx(["true"], ["--memory", "32M"])
        self.assertExit(real, 0)
        self.assertEqual(tmpfs_sizes(self.need_trace(real)["enforcement"]), sizes)

    def test_require_limits_gives_the_runs_answer(self):
        dry = sbx(["run", "--dry-run", "--require-limits", "--", "true"])
        real = sbx(["run", "--require-limits", "--", "true"])
        self.assertEqual(dry.rc, real.rc, f"dry run:\n{dry.describe()}\nrun:\n{real.describe()}")
        if real.rc == 125:
            self.assertEqual(self.assertOneSbxLine(dry), self.assertOneSbxLine(real))
        note(f"--require-limits with the default profile: exit {real.rc}")

    def test_pack_run_dry_run(self):
        d = self.path("pk")
        self.assertExit(sbx(["pack", "init", d]), 0)
        os.chmod(d, 0o755)
        r = sbx(["pack", "run", d, "--input", d + "/records.json", "--dry-run", "--memory", "32M"])
        self.assertExit(r, 0)
        plan = json.loads(r.out)
        self.assertIn({"src": os.path.realpath(d), "dst": "/pack", "rw": False}, plan["binds"])
        self.assertEqual(limit_entries(plan)["memory"]["set_by"], "flag --memory")
        self.assertEqual(limit_entries(plan)["timeout"]["set_by"], d + "/pack.json")
        with open(self.path("bad.json"), "w") as f:
            f.write('[{"nope": 1}]')
        r = sbx(["pack", "run", d, "--input", self.path("bad.json"), "--dry-run"])
        self.assertExit(r, 65, "input records are checked as a run checks them")

    def test_exec_dry_run(self):
        req = json.dumps({"language": "sh", "code": "echo hi", "limits": {"memory": "32M"}}).encode()
        r = sbx(["exec", "--dry-run"], input=req)
        self.assertExit(r, 0)
        plan = json.loads(r.out)
        self.assertEqual(plan["argv"], ["/bin/sh", "/code/main.sh"])
        self.assertEqual(limit_entries(plan)["memory"]["set_by"], "exec request")
        r = sbx(["exec", "--dry-run", "--trace-file", "/nonexistent-sbx-dir/t.json"], input=req)
        self.assertExit(r, 125)
        self.assertIn("/nonexistent-sbx-dir", r.err)


class ClearingLimits(SbxTestCase):
    def test_none_zero_and_unlimited_clear_a_profile_limit(self):
        for flag, key in (("--cpus", "cpus"), ("--memory", "memory_bytes"), ("--pids", "pids"),
                          ("--timeout", "timeout_ms"), ("--cpu-time", "cpu_time_ms")):
            for v in ("none", "unlimited") + (("0",) if flag == "--cpus" else ()):
                r = sbx(["run", "--dry-run", flag, v, "--", "true"])
                self.assertExit(r, 0, f"{flag} {v}")
                self.assertIsNone(json.loads(r.out)["limits"][key], f"{flag} {v}")
            if flag != "--cpus":
                r = sbx(["run", "--dry-run", flag, "0", "--", "true"])
                self.assertExit(r, 125, f"{flag} 0 is a slip, not 'no limit'")
                self.assertIn("or none", self.assertOneSbxLine(r))
        r = sbx(["run", "--dry-run", "--output-limit", "none", "--", "true"])
        self.assertIsNone(json.loads(r.out)["limits"]["output_limit_bytes"])
        r = sbx(["run", "--dry-run", "--output-limit", "0", "--", "true"])
        self.assertEqual(json.loads(r.out)["limits"]["output_limit_bytes"], 0, "0 bytes is a limit")

    def test_require_limits_names_the_layer_and_the_way_out(self):
        r = sbx(["run", "--require-limits", "--", "true"])
        if r.rc == 0:
            note("every limit of the default profile is enforceable here: the layer is checked by the unit test")
            r = sbx(["run", "--require-limits", "--cpus", "none", "--", "true"])
            self.assertExit(r, 0)
            return
        self.assertExit(r, 125)
        line = self.assertOneSbxLine(r)
        self.assertIn("set by profile 'untrusted'", line)
        clear = re.findall(r"clear it with (--[a-z-]+) none", line)
        self.assertTrue(clear, line)
        opts = []
        for flag in clear:
            opts += [flag, "none"]
        r2 = sbx(["run", "--require-limits"] + opts + ["--", "true"])
        self.assertExit(r2, 0, f"after {' '.join(opts)}")
        note(f"{line!r}; with {' '.join(opts)}: exit 0")


class Hints(SbxTestCase):
    def test_relative_program_not_in_the_sandbox(self):
        with open(self.path("local.sh"), "w") as f:
            f.write("#!/bin/sh\necho hi\n")
        os.chmod(self.path("local.sh"), 0o755)
        r = sbx(["run", "--", "./local.sh"], cwd=self.tmp)
        self.assertExit(r, 127)
        line = self.assertOneSbxLine(r)
        self.assertIn("No such file or directory", line)
        self.assertIn("current directory is not mounted", line)
        self.assertIn("--bind", line)
        self.assertIn("--input", line)

    def test_host_files_the_program_was_given_get_the_hint(self):
        """python3 script.py, make, an absolute host path: each fails inside, and sbx says why."""
        with open(self.path("script.py"), "w") as f:
            f.write("print('hi')\n")
        with open(self.path("Makefile"), "w") as f:
            f.write("all:\n\techo built\n")
        py = sbx(["run", "--", "python3", "script.py"], cwd=self.tmp)
        self.assertExit(py, 2)
        self.assertIn("sbx: hint: script.py is in " + os.path.realpath(self.tmp) + " on the host", py.err)
        self.assertIn("--workspace", py.err)
        mk = sbx(["run", "--", "make"], cwd=self.tmp)
        self.assertExit(mk, 2)
        self.assertIn("sbx: hint: make looks for Makefile", mk.err)
        ab = sbx(["run", "--", "sh", self.path("script.py")])
        self.assertExit(ab, 2)
        self.assertIn("is on the host but not in the sandbox; bind its directory", ab.err)
        missing = sbx(["run", "--", self.path("script.py")])
        self.assertExit(missing, 127)
        self.assertIn("is on the host but not in the sandbox", self.assertOneSbxLine(missing))

    def test_workspace_binds_the_directory_and_starts_there(self):
        os.mkdir(self.path(".git"))
        with open(self.path("script.py"), "w") as f:
            f.write("import os; print(os.getcwd()); open('made.txt', 'w').write('x')\n")
        os.chmod(self.tmp, 0o777)  # as root, the sandbox's mapped uid writes here
        r = sbx(["run", "--workspace", "--", "python3", "script.py"], cwd=self.tmp)
        self.assertExit(r, 0)
        self.assertEqual(r.out.strip(), os.path.realpath(self.tmp))
        self.assertTrue(os.path.exists(self.path("made.txt")), "the workspace is read-write")
        git = sbx(["run", "--workspace", "--", "touch", ".git/x"], cwd=self.tmp)
        self.assertNotEqual(git.rc, 0, ".git stays read-only")
        self.assertFalse(os.path.exists(self.path(".git/x")))
        ro = sbx(["run", "--bind", ".", "--", "cat", os.path.realpath(self.path("script.py"))], cwd=self.tmp)
        self.assertExit(ro, 0)
        root = sbx(["run", "--workspace", "--", "true"], cwd="/")
        self.assertExit(root, 125)
        self.assertIn("the whole host", self.assertOneSbxLine(root))

    def test_a_read_only_bind_below_the_workspace_stays_read_only(self):
        # The workspace is mounted first, the caller's own read-only bind of ./secrets on top of
        # it: mounted the other way round, the workspace would hide it under a writable copy.
        os.mkdir(self.path("secrets"))
        with open(self.path("secrets/key"), "w") as f:
            f.write("k\n")
        os.chmod(self.tmp, 0o777)
        os.chmod(self.path("secrets"), 0o777)  # writable to the sandbox's uid, were it mounted rw
        os.chmod(self.path("secrets/key"), 0o666)
        here = os.path.realpath(self.tmp)
        r = sbx(["run", "--bind", f"{here}/secrets:{here}/secrets", "--workspace", "--",
                 "sh", "-c", "echo w > made.txt; echo x > secrets/key"], cwd=self.tmp)
        self.assertNotEqual(r.rc, 0, r.describe())
        self.assertTrue(os.path.exists(self.path("made.txt")), "the workspace is read-write")
        with open(self.path("secrets/key")) as f:
            self.assertEqual(f.read(), "k\n", "the read-only bind below the workspace was written")

    @unittest.skipUnless(MODE == "root", "as root only: rootless, the sandbox reads what its caller can")
    def test_root_bind_source_the_mapped_uid_cannot_reach(self):
        private = self.path("private")
        os.mkdir(private, 0o700)
        with open(os.path.join(private, "f"), "w") as f:
            f.write("x")
        r = sbx(["run", "--bind", private + "/f:/f", "--", "cat", "/f"])
        self.assertExit(r, 125)
        line = self.assertOneSbxLine(r)
        dry = sbx(["run", "--dry-run", "--bind", private + "/f:/f", "--", "cat", "/f"])
        self.assertExit(dry, 125, "the dry run looks the source up as the sandbox's root too")
        self.assertEqual(self.assertOneSbxLine(dry), line)
        self.assertIn("Permission denied", line)
        self.assertRegex(line, r"host uid \d+")
        self.assertIn("rootless", line)
        self.assertIn("chmod o+x", line)

    def test_trace_file_directory_checked_before_the_run(self):
        flag = self.path("ran")
        r = sbx(["run", "--trace-file", self.path("missing/t.json"), "--", "sh", "-c", f"touch {flag}"])
        self.assertExit(r, 125)
        self.assertIn("missing", self.assertOneSbxLine(r))
        self.assertFalse(os.path.exists(flag), "the program ran before the --trace-file error")

    def test_timeout_says_so(self):
        r = sbx(["run", "--timeout", "300ms", "--", "sleep", "10"])
        self.assertExit(r, 124)
        self.assertIn("sbx: warning: wall-time limit of 300ms reached", self.assertOneSbxLine(r))

    def test_an_exec_timeout_names_the_fix_exec_takes(self):
        """Issue 32: `sbx exec` takes no --timeout, but its wall-time line told callers to use it."""
        prof = self.path("short.json")
        with open(prof, "w") as f:
            json.dump({"extends": "untrusted", "limits": {"timeout": "300ms"}}, f)
        r = sbx(["exec", "--profile", prof], input=json.dumps({"language": "sh", "code": "sleep 10"}).encode())
        self.assertExit(r, 0)  # exec answers with its response, whatever the run's end
        self.assertEqual(json.loads(r.out)["status"], "timeout", r.describe())
        line = [l for l in r.err.splitlines() if "wall-time limit" in l]
        self.assertEqual(len(line), 1, r.describe())
        self.assertNotIn("--timeout", line[0])
        self.assertIn("the operator may pass --profile with a profile whose limits.timeout is higher", line[0])

    def test_truncated_output_says_so(self):
        r = sbx(["run", "--output-limit", "10", "--", "sh", "-c", "echo 0123456789abcdefghij"])
        self.assertExit(r, 0)
        self.assertEqual(r.out, "0123456789")
        line = self.assertOneSbxLine(r)
        self.assertIn("stdout truncated", line)
        self.assertIn("11 more bytes dropped", line)


class CliErrors(SbxTestCase):
    def test_unknown_command_suggests(self):
        r = sbx(["rn"])
        self.assertExit(r, 125)
        self.assertEqual(self.assertOneSbxLine(r),
                         "sbx: unknown command 'rn' (did you mean 'run'?); see 'sbx --help'")
        r = sbx(["pack", "rn"])
        self.assertExit(r, 125)
        self.assertEqual(self.assertOneSbxLine(r),
                         "sbx: unknown command 'rn' (did you mean 'run'?); see 'sbx pack --help'")

    def test_errors_point_to_the_subcommands_help(self):
        r = sbx(["run", "--timeout"])
        self.assertExit(r, 125)
        self.assertEqual(self.assertOneSbxLine(r), "sbx: run: --timeout needs a value (see 'sbx run --help')")
        r = sbx(["--bogus"])
        self.assertExit(r, 125)
        self.assertEqual(self.assertOneSbxLine(r), "sbx: unknown option '--bogus'; see 'sbx --help'")
        r = sbx(["image", "import"])
        self.assertExit(r, 125)
        self.assertIn("see 'sbx image import --help'", self.assertOneSbxLine(r))

    def test_allow_host_url(self):
        r = sbx(["run", "--allow-host", "http://example.com/", "--", "true"])
        self.assertExit(r, 125)
        line = self.assertOneSbxLine(r)
        self.assertIn("expected HOST[:PORT]", line)
        self.assertIn("not a URL", line)
        self.assertIn("--allow-host example.com", line)

    def test_profile_typos_all_reported_with_suggestions(self):
        p = self.path("typo.json")
        with open(p, "w") as f:
            json.dump({"limts": {"timeout_ms": "1s"}, "envv": {}, "network": {"allow_": []}}, f)
        r = sbx(["run", "--profile", p, "--", "true"])
        self.assertExit(r, 125)
        line = self.assertOneSbxLine(r)
        self.assertIn("/limts: unknown key (did you mean 'limits'?)", line)
        self.assertIn("/envv: unknown key (did you mean 'env'?)", line)
        self.assertIn("/network/allow_: unknown key (did you mean 'allow'?)", line)

    def test_json_syntax_error_has_line_and_column(self):
        p = self.path("syntax.json")
        with open(p, "w") as f:
            f.write('{\n  "limits": {\n    "timeout_ms": "1s",\n  }\n}\n')
        r = sbx(["run", "--profile", p, "--", "true"])
        self.assertExit(r, 125)
        line = self.assertOneSbxLine(r)
        self.assertIn("not valid JSON at line 4, column 3", line)
        self.assertNotIn("json.exception", line)

    def test_unreadable_profile_says_why(self):
        r = sbx(["run", "--profile", "/nonexistent-sbx/p.json", "--", "true"])
        self.assertExit(r, 125)
        self.assertIn("No such file or directory", self.assertOneSbxLine(r))
        d = self.path("profiles")
        os.makedirs(d + "/x.json")  # a profile by name that is a directory
        r = sbx(["run", "--profile", "x", "--", "true"], env=dict(os.environ, SBX_PROFILE_PATH=d))
        self.assertExit(r, 125)
        line = self.assertOneSbxLine(r)
        self.assertIn("cannot read profile", line)
        self.assertIn("Is a directory", line)


if __name__ == "__main__":
    unittest.main()
