"""The systemd user scope (cli/systemd_scope.hpp): rootless without a delegated cgroup, sbx
re-executes itself under `systemd-run --user --scope -p Delegate=yes` — with --systemd-scope always,
by default where it helps (a pure cgroup v2 host; proven in the qemu guest with a real
`systemd --user`, tests/vm/guest-tests.sh). This host has no systemd user session, so a stand-in
systemd-run on PATH records its arguments and runs the command, the way --scope does, and a socket
the test listens on stands in for the user manager's $XDG_RUNTIME_DIR/systemd/private."""
import os
import socket
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
        os.makedirs(os.path.join(d, "rt", "systemd"))
        with open(os.path.join(d, "systemd-run"), "w") as f:
            f.write(FAKE)
        os.chmod(os.path.join(d, "systemd-run"), 0o755)
        # sbx connect()s to see that a manager answers: a listening socket, closed at cleanup.
        self.manager = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.manager.bind(os.path.join(d, "rt", "systemd", "private"))
        self.manager.listen(8)
        self.addCleanup(self.manager.close)
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
        # The stand-in ran sbx in no systemd scope: the variable alone does not make the trace
        # claim one.
        self.assertNotIn("systemd user scope", t["host"]["cgroup"]["obtained_by"])

    def test_without_a_user_session_it_is_an_sbx_error(self):
        if MODE == "root":
            self.skipTest("as root --systemd-scope is a no-op (root needs no delegation)")
        env = dict(os.environ, PATH="/usr/bin:/bin")
        env.pop("XDG_RUNTIME_DIR", None)
        env.pop("DBUS_SESSION_BUS_ADDRESS", None)
        r = self.run_sbx(["true"], ["--systemd-scope"], env=env, trace=False)
        self.assertExit(r, 125)
        self.assertIn("--systemd-scope", self.assertOneSbxLine(r))

    def test_a_stale_socket_file_is_no_user_manager(self):
        if MODE == "root":
            self.skipTest("as root --systemd-scope is a no-op (root needs no delegation)")
        env, args = self.fake_env()
        self.manager.close()  # the file stays, nobody listens: connect() is refused
        r = self.run_sbx(["true"], ["--systemd-scope"], env=env, trace=False)
        self.assertExit(r, 125)
        self.assertIn("no systemd user manager answers", self.assertOneSbxLine(r))
        self.assertFalse(os.path.exists(args))

    def test_automatic_only_where_a_scope_helps(self):
        # Default (no flag), a user manager answering: on this cgroup v1/v2 hybrid host a scope
        # would offer no controllers, so sbx does not re-execute, and the trace says why.
        env, args = self.fake_env()
        r = self.run_sbx(["sh", "-c", "exit 3"], ["--memory", "64M"], env=env)
        self.assertExit(r, 3)
        self.assertFalse(os.path.exists(args), "no re-exec where a scope cannot help")
        c = self.need_trace(r)["host"]["cgroup"]
        if MODE == "root":
            self.assertEqual(c["systemd_scope"], "root needs no delegation")
        elif c["layout"] != "v2":
            self.assertIn("a systemd scope would offer no controllers", c["systemd_scope"])
            self.assertEqual(c["obtained_by"], "none")
        # At most one warning line, and a short one, whatever degraded.
        lines = [l for l in r.err.splitlines() if l.startswith("sbx: ")]
        self.assertLessEqual(len(lines), 1, r.describe())
        for l in lines:
            self.assertLessEqual(len(l), 200, l)

    def test_opt_out(self):
        env, args = self.fake_env()
        r = self.run_sbx(["true"], ["--no-systemd-scope", "--memory", "64M"], env=env)
        self.assertExit(r, 0)
        self.assertFalse(os.path.exists(args))
        self.assertEqual(self.need_trace(r)["host"]["cgroup"]["systemd_scope"], "--no-systemd-scope")
        both = self.run_sbx(["true"], ["--no-systemd-scope", "--systemd-scope"], env=env, trace=False)
        self.assertExit(both, 125)
        self.assertIn("excludes", self.assertOneSbxLine(both))
