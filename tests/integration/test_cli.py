"""--dry-run, profiles and argument handling."""
import json
import os
import unittest

from sbxtest import SbxTestCase, sbx


class DryRun(SbxTestCase):
    def test_dry_run_prints_merged_spec_and_runs_nothing(self):
        state = self.path("state")
        flag = self.path("ran")
        r = sbx(["--state-dir", state, "run", "--dry-run", "--timeout", "2s", "--env", "A=B", "--uid", "7",
                 "--tmpfs", "/scratch:1M", "--", "sh", "-c", f"touch {flag}; echo RAN"])
        self.assertExit(r, 0, "--dry-run")
        spec = json.loads(r.out)
        self.assertEqual(spec["argv"], ["sh", "-c", f"touch {flag}; echo RAN"])
        self.assertEqual(spec["limits"]["timeout_ms"], 2000)
        self.assertEqual(spec["env"].get("A"), "B")
        self.assertEqual(spec["uid"], 7)
        self.assertEqual(spec["profile"], "untrusted")
        self.assertEqual(spec["workdir"], "/tmp")
        self.assertEqual(spec["network"]["mode"], "none")
        self.assertIn({"dst": "/scratch", "size_bytes": 1 << 20}, spec["tmpfs"])
        self.assertFalse(os.path.exists(flag), "--dry-run ran the command")
        traces = os.path.join(state, "traces")
        self.assertFalse(os.path.isdir(traces) and os.listdir(traces), "--dry-run recorded a run")

    def test_flags_override_profile(self):
        prof = self.path("mine.json")
        with open(prof, "w") as f:
            json.dump({"limits": {"timeout_ms": "1s", "output_limit_bytes": 100}, "env": {"X": "profile"}}, f)
        r = sbx(["run", "--dry-run", "--profile", prof, "--timeout", "250ms", "--", "true"])
        self.assertExit(r, 0)
        spec = json.loads(r.out)
        self.assertEqual(spec["limits"]["timeout_ms"], 250, "flags win over the profile")
        self.assertEqual(spec["limits"]["output_limit_bytes"], 100, "the profile wins over defaults")
        self.assertEqual(spec["env"]["X"], "profile")

    def test_trusted_profile_merges(self):
        r = sbx(["run", "--dry-run", "--profile", "trusted", "--", "true"])
        self.assertExit(r, 0)
        self.assertEqual(json.loads(r.out)["profile"], "trusted")


class Profiles(SbxTestCase):
    def write(self, name, obj):
        p = self.path(name)
        with open(p, "w") as f:
            f.write(obj if isinstance(obj, str) else json.dumps(obj))
        return p

    def check_bad(self, p, key):
        for extra in (["--dry-run"], []):
            r = sbx(["run", "--profile", p] + extra + ["--", "echo", "RAN"])
            self.assertExit(r, 125, f"bad profile {p}")
            line = self.assertOneSbxLine(r)
            self.assertIn(p, line, "the error names the file")
            self.assertIn(key, line, "the error names the key")
            self.assertNotIn(b"RAN", r.stdout)

    def test_unknown_top_level_key(self):
        self.check_bad(self.write("bad1.json", {"limits": {"timeout_ms": "1s"}, "bogus_key": 1}), "bogus_key")

    def test_unknown_nested_key(self):
        self.check_bad(self.write("bad2.json", {"limits": {"timeout_ms": "1s", "nope_limit": 3}}), "nope_limit")

    def test_bad_value(self):
        self.check_bad(self.write("bad3.json", {"limits": {"timeout_ms": "soon"}}), "timeout_ms")

    def test_not_json(self):
        p = self.write("bad4.json", "{ not json")
        r = sbx(["run", "--profile", p, "--", "echo", "RAN"])
        self.assertExit(r, 125)
        self.assertIn(p, self.assertOneSbxLine(r))

    def test_profile_values_apply_to_the_run(self):
        p = self.write("envprof.json", {"env": {"FROM_PROFILE": "yes"}, "limits": {"timeout_ms": "300ms"}})
        r = self.run_sbx(["sh", "-c", "echo $FROM_PROFILE; sleep 5"], ["--profile", p])
        self.assertExit(r, 124, "the profile's timeout applies")
        self.assertEqual(r.out, "yes\n")
        t = self.need_trace(r)
        self.assertEqual(t["invocation"]["profile"]["name"], "envprof")
        import hashlib
        with open(p, "rb") as f:
            self.assertEqual(t["invocation"]["profile"]["sha256"], hashlib.sha256(f.read()).hexdigest(),
                             "the trace hashes the profile file that was used")

    def test_exec_profile_is_the_requests_ceiling(self):
        """`sbx exec --profile` (issue 32): the profile's limits bind the request, which may lower
        them, never raise them; the refusal names a fix exec has (--profile), never --timeout."""
        p = self.write("short.json", {"limits": {"timeout": "2s"}})

        def req(code, **limits):
            return json.dumps({"language": "sh", "code": code, **({"limits": limits} if limits else {})}).encode()

        r = sbx(["exec", "--profile", p], input=req("sleep 5; echo late"), timeout=60)
        self.assertExit(r, 0)
        resp = json.loads(r.out)
        self.assertEqual(resp["status"], "timeout", "the profile's 2s ends the request's sleep 5")
        self.assertNotIn("late", resp["stdout"])
        r = sbx(["exec", "--profile", p], input=req("true", timeout="3s"))
        self.assertExit(r, 125)
        msg = json.loads(r.out)["error"]["message"]
        self.assertEqual(msg, "exec request: /limits/timeout: 3s is above the ceiling of profile 'short' (2s): a "
                              "manifest or request may lower a limit, never raise it; the operator may pass --profile "
                              "with a profile whose limits.timeout is higher")
        self.assertIn("whose limits.timeout is higher", r.err)
        r = sbx(["exec", "--profile", p], input=req("echo ok", timeout="1s"), timeout=60)
        self.assertExit(r, 0)
        self.assertEqual(json.loads(r.out)["status"], "ok", "a request may lower the profile's limit")
        r = sbx(["exec"], input=req("echo ok", timeout="3s"), timeout=60)
        self.assertEqual(json.loads(r.out)["status"], "ok", "without --profile: untrusted's 30s, as before")
        r = sbx(["exec", "--profile", "no-such-profile"], input=req("true"))
        self.assertExit(r, 125)
        self.assertIn("unknown profile 'no-such-profile'", json.loads(r.out)["error"]["message"])

    def test_limits_have_one_spelling_everywhere(self):
        """Profiles, pack manifests and exec requests take the flag spelling (timeout, memory,
        cpu_time, ...) and the run spec's (timeout_ms, ...) as an alias; errors name the key as
        written, never the other spelling."""
        p = self.write("public.json", {"limits": {"timeout": "300ms", "memory": "256M", "cpu_time": "2s",
                                                  "output_limit": "1M", "tmp_size": "8M"}})
        r = sbx(["run", "--profile", p, "--dry-run", "--", "true"])
        self.assertExit(r, 0)
        lim = json.loads(r.out)["limits"]
        self.assertEqual((lim["timeout_ms"], lim["memory_bytes"], lim["cpu_time_ms"], lim["output_limit_bytes"],
                          lim["tmp_size_bytes"]), (300, 256 << 20, 2000, 1 << 20, 8 << 20))
        self.assertExit(self.run_sbx(["sleep", "5"], ["--profile", p]), 124, "the profile's timeout applies")
        r = sbx(["profile", "show", p])
        self.assertIn('"timeout": "300ms"', r.out, "the profile is shown as written")
        self.check_bad(self.write("both.json", {"limits": {"timeout": "1s", "timeout_ms": 5}}), "'timeout' and 'timeout_ms'")
        bad = self.write("badpublic.json", {"limits": {"timeout": "soon"}})
        self.check_bad(bad, "/limits/timeout:")
        self.assertNotIn("timeout_ms", sbx(["run", "--profile", bad, "--", "true"]).err)
        # An exec request: the alias works, and a bad value is reported under the key as written.
        r = sbx(["exec"], input=json.dumps({"language": "sh", "code": "echo ok",
                                            "limits": {"timeout_ms": 5000, "memory_bytes": "128M"}}).encode(), timeout=60)
        self.assertExit(r, 0)
        self.assertEqual(json.loads(r.out)["status"], "ok")
        r = sbx(["exec"], input=json.dumps({"language": "sh", "code": "true", "limits": {"timeout": "soon"}}).encode())
        self.assertExit(r, 125)
        msg = json.loads(r.out)["error"]["message"]
        self.assertIn("/limits/timeout: bad value", msg)
        self.assertNotIn("timeout_ms", msg)
        for name in ("untrusted", "trusted"):
            shown = json.loads(sbx(["profile", "show", name]).out)["profile"]["limits"]
            self.assertIn("timeout", shown, "the shipped profiles use the public spelling")

    def test_profile_ls_and_show(self):
        r = sbx(["profile", "ls"])
        self.assertExit(r, 0)
        self.assertIn("untrusted", r.out)
        self.assertIn("trusted", r.out)
        r = sbx(["profile", "ls", "--json"])
        self.assertExit(r, 0)
        listed = {p["name"]: p for p in json.loads(r.out)}
        self.assertEqual(listed["untrusted"]["origin"], "built-in")
        self.assertTrue(listed["untrusted"]["valid"])
        self.assertTrue(listed["trusted"]["description"])
        r = sbx(["profile", "show", "untrusted"])
        self.assertExit(r, 0)
        self.assertIn("untrusted", r.out)


class Arguments(SbxTestCase):
    def test_options_after_double_dash_belong_to_the_program(self):
        r = self.run_sbx(["echo", "--timeout", "x", "--", "-v"])
        self.assertExit(r, 0)
        self.assertEqual(r.out, "--timeout x -- -v\n")

    def test_command_without_double_dash(self):
        r = sbx(["run", "echo", "no-dashes", "--flag-of-echo"])
        self.assertExit(r, 0)
        self.assertEqual(r.out, "no-dashes --flag-of-echo\n")

    def test_quiet_by_default(self):
        r = self.run_sbx(["echo", "only this"])
        self.assertExit(r, 0)
        self.assertEqual(r.out, "only this\n")
        self.assertEqual(r.err, "", "a successful run prints only the program's output")

    def test_verbose_logs_to_stderr(self):
        r = sbx(["-v", "-v", "run", "--", "echo", "hi"])
        self.assertExit(r, 0)
        self.assertEqual(r.out, "hi\n", "logs never go to stdout")
        self.assertNotEqual(r.err, "", "-v -v should log something on stderr")

    def test_list_options_take_one_value_each(self):
        # Every --bind, --env, --allow-host takes one value: the words after it are the command,
        # with or without "--" (issue 32, item 8).
        d = self.path("d")
        os.mkdir(d)
        with open(os.path.join(d, "f"), "w") as f:
            f.write("x")
        r = sbx(["run", "--bind", d + ":/d", "--env", "A=1", "--env", "B=2", "ls", "/d"])
        self.assertExit(r, 0)
        self.assertEqual(r.out, "f\n")
        r = sbx(["run", "--env", "A=1", "--env", "B=2", "sh", "-c", "echo $A$B"])
        self.assertExit(r, 0)
        self.assertEqual(r.out, "12\n")

    def test_run_help_shows_the_command(self):
        r = sbx(["run", "--help"])
        self.assertExit(r, 0)
        self.assertIn("Usage: sbx run [OPTIONS] [--] CMD [ARGS...]", r.out)

    def test_help_and_version_words(self):
        # `sbx help [COMMAND]` is `sbx [COMMAND] --help`, `sbx version` is `sbx --version` (item 13).
        self.assertEqual(sbx(["help"]).out, sbx(["--help"]).out)
        r = sbx(["help", "trace", "ls"])
        self.assertExit(r, 0)
        self.assertEqual(r.out, sbx(["trace", "ls", "--help"]).out)
        self.assertIn("Usage: sbx trace ls", r.out)
        r = sbx(["version"])
        self.assertExit(r, 0)
        self.assertEqual(r.out, sbx(["--version"]).out)
        self.assertTrue(r.out.startswith("sbx "))
        r = sbx(["help", "rnu"])
        self.assertExit(r, 125)
        self.assertOneSbxLine(r)
        self.assertIn("unknown command 'rnu'", r.err)
        self.assertIn("run", r.err)

    def test_docker_habits_are_mapped(self):
        # docker's -v SRC:DST is never sbx's -v (verbose) plus a program named SRC:DST (item 7).
        r = sbx(["run", "-v", os.getcwd() + ":/work", "-w", "/work", "--", "true"])
        self.assertExit(r, 125)
        self.assertOneSbxLine(r)
        self.assertIn("docker's -v SRC:DST is --bind SRC:DST:rw here", r.err)
        for argv, want in ((["run", "-e", "A=1", "--", "true"], "docker's -e is --env NAME=VALUE here"),
                           (["run", "--rm", "--", "true"], "docker's --rm is what every sbx run does"),
                           (["run", "--network", "none", "--", "true"], "docker's --network is not needed"),
                           (["run", "--network=none", "true"], "docker's --network is not needed"),
                           (["run", "--chdir", "/tmp", "--", "true"], "bwrap's --chdir is --workdir DIR here"),
                           (["run", "--ro-bind", "/a", "/b", "--", "true"], "bwrap's --ro-bind SRC DST is --bind"),
                           (["probe", "--user", "1000"], "docker's --user UID[:GID] is --uid UID --gid GID here")):
            r = sbx(argv)
            self.assertExit(r, 125, argv)
            self.assertOneSbxLine(r)
            self.assertIn(want, r.err, argv)
        # -v is still --verbose before a command (a program's name has no ":/").
        r = sbx(["run", "-v", "--", "echo", "hi"])
        self.assertExit(r, 0)
        self.assertEqual(r.out, "hi\n")

    def test_size_and_tmpfs_forms_of_docker_and_kubernetes(self):
        r = sbx(["run", "--memory", "512Mi", "--tmpfs", "/run:size=8m,noexec", "--dry-run", "--", "true"])
        self.assertExit(r, 0)
        spec = json.loads(r.out)
        self.assertEqual(spec["limits"]["memory_bytes"], 512 << 20)
        self.assertEqual(spec["tmpfs"], [{"dst": "/run", "size_bytes": 8 << 20, "noexec": True}])
        r = sbx(["run", "--tmpfs", "/run:size=1m,noexec", "--", "sh", "-c",
                 "cp /bin/true /run/t && /run/t; echo $?; grep ' /run ' /proc/mounts"])
        self.assertExit(r, 0)
        lines = r.out.splitlines()
        self.assertEqual(lines[0], "126", "a program on a noexec tmpfs must not run")
        self.assertIn("noexec", lines[1])


if __name__ == "__main__":
    unittest.main()
