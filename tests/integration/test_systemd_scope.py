"""--systemd-scope: rootless without a delegated cgroup, sbx re-executes itself
under `systemd-run --user --scope -p Delegate=yes`. This host has no systemd user session, so a
stand-in systemd-run on PATH records its arguments and runs the command, the way --scope does."""
import os
import stat

from sbxtest import MODE, SbxTestCase

FAKE = """#!/bin/sh
echo "$@" > "$FAKE_SD_ARGS"
while [ "$1" != "--" ]; do shift; done; shift
exec "$@"
"""


class SystemdScope(SbxTestCase):
    def fake_env(self):
        d = self.path("fakesd")
        os.makedirs(os.path.join(d, "rt"))
        with open(os.path.join(d, "systemd-run"), "w") as f:
            f.write(FAKE)
        os.chmod(os.path.join(d, "systemd-run"), 0o755)
        open(os.path.join(d, "rt", "bus"), "w").close()
        env = dict(os.environ, PATH=d + ":/usr/bin:/bin", XDG_RUNTIME_DIR=os.path.join(d, "rt"),
                   FAKE_SD_ARGS=os.path.join(d, "args"))
        return env, os.path.join(d, "args")

    def test_reexec_under_a_delegated_scope(self):
        env, args = self.fake_env()
        r = self.run_sbx(["sh", "-c", "exit 7"], ["--systemd-scope"], env=env)
        self.assertExit(r, 7, "the program's exit status passes through the re-exec")
        if MODE == "root":
            self.assertFalse(os.path.exists(args), "as root no scope is needed: systemd-run must not run")
            return
        with open(args) as f:
            line = f.read().split()
        self.assertEqual(line[:5], ["--user", "--scope", "-p", "Delegate=yes", "--quiet"], line)
        self.assertNotIn("--systemd-scope", line, "the re-exec must not loop")
        self.assertIn("run", line)
        self.assertEqual(line[-4:], ["sh", "-c", "exit", "7"], "the command follows unchanged")
        t = self.need_trace(r)
        self.assertEqual(t["result"]["exit_code"], 7)

    def test_without_a_user_session_it_is_an_sbx_error(self):
        if MODE == "root":
            self.skipTest("as root --systemd-scope is a no-op (root needs no delegation)")
        env = dict(os.environ, PATH="/usr/bin:/bin")
        env.pop("XDG_RUNTIME_DIR", None)
        env.pop("DBUS_SESSION_BUS_ADDRESS", None)
        r = self.run_sbx(["true"], ["--systemd-scope"], env=env, trace=False)
        self.assertExit(r, 125)
        self.assertIn("--systemd-scope", self.assertOneSbxLine(r))
