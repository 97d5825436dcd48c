"""What is checked is what is mounted (issue 30): a read-write --bind source is refused when it is,
is inside or holds sbx's state (check_binds_spare_state), and init must then mount that very
directory, not whatever its path leads to by the time init mounts it.

On the previous binary the source was checked by its path and init bound the path again later:
a directory on the way swapped for a symlink in between (a concurrent sandbox of the same user
with `--bind /tmp:/tmp:rw` can do it) bound sbx's state dir read-write into the sandbox after the
check passed, and the program wrote there (as root its mapped uid could still see the state dir's
inode). The window is held open with the test hook SBX_TEST_STOP_BEFORE_CLONE=1 (sbx stops itself
with SIGSTOP once its checks are made and its mount plan is final), and both the shared and the
forked init are tried. Root and rootless."""
import os
import signal
import subprocess
import time

from sbxtest import SBX, SbxTestCase, note, sbx, wait_for

# Prints the inode of what is mounted at /data, then writes there.
PROGRAM = "stat -c 'ino=%i' /data; echo pwned > /data/pwned && echo wrote"


def stopped(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


class BindSwap(SbxTestCase):
    def setUp(self):
        super().setUp()
        self.state = self.path("state")
        os.mkdir(self.state, 0o700)
        self.env = dict(os.environ, SBX_STATE_DIR=self.state, XDG_CONFIG_HOME=self.path("cfg"))
        # The state dir as a run leaves it (the seccomp cache, the ledger).
        self.assertExit(sbx(["run", "--", "true"], env=self.env, timeout=60), 0)

    def layout(self):
        """b/p/state, an innocent directory named like the state dir, which the caller names
        through the symlink b/link (followed once, when sbx opens it)."""
        base = self.path("b")
        os.makedirs(base + "/p/state")
        os.chmod(base + "/p/state", 0o777)  # as root the sandbox's mapped uid writes there too
        os.symlink("p/state", base + "/link")
        return base

    def stopped_run(self, base, env):
        """sbx run with the hook, stopped before the clone: the Popen, once it is stopped."""
        p = subprocess.Popen([SBX, "run", "--bind", f"{base}/link:/data:rw", "--", "sh", "-c", PROGRAM],
                             env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if not wait_for(lambda: stopped(p.pid) or p.poll() is not None, 30):
            p.kill()
            p.communicate()
            self.fail("sbx never stopped: a binary without the hook SBX_TEST_STOP_BEFORE_CLONE")
        if p.poll() is not None:
            out, err = p.communicate()
            self.fail(f"sbx ended before the clone (rc {p.returncode}): {err.decode(errors='replace')}")
        return p

    def resume(self, p):
        os.kill(p.pid, signal.SIGCONT)
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            self.fail("sbx did not finish after SIGCONT")
        return p.returncode, out.decode(errors="replace"), err.decode(errors="replace")

    def swap(self, base, kind):
        """What the attacker does while sbx is stopped: a relative symlink (it resolves under
        init's /oldroot as on the host) where a directory of the checked path was."""
        if kind == "last component":
            os.rename(base + "/p/state", base + "/p/state.old")
            os.symlink(os.path.relpath(self.state, base + "/p"), base + "/p/state")
        elif kind == "another directory":  # no symlink: only the inode tells them apart
            os.rename(base + "/p/state", base + "/p/state.old")
            os.mkdir(base + "/p/state", 0o777)
        else:  # a parent: b/p/state now leads to the real state dir
            os.rename(base + "/p", base + "/p.old")
            os.symlink(os.path.relpath(os.path.dirname(self.state), base), base + "/p")

    def test_a_source_swapped_after_the_check_is_not_mounted(self):
        state_ino = os.stat(self.state).st_ino
        for forked in (False, True):
            for kind in ("last component", "parent", "another directory"):
                init = "forked init" if forked else "shared init"
                with self.subTest(init=init, swap=kind):
                    for leftover in ("b", "b.old"):
                        subprocess.run(["rm", "-rf", self.path(leftover)], check=True)
                    base = self.layout()
                    env = dict(self.env, SBX_TEST_STOP_BEFORE_CLONE="1")
                    if forked:
                        env["SBX_BENCH_FORKED_INIT"] = "1"
                    p = self.stopped_run(base, env)
                    self.swap(base, kind)
                    rc, out, err = self.resume(p)
                    if kind == "another directory":
                        self.assertFalse(os.path.exists(base + "/p/state/pwned"), "another directory was mounted")
                        self.assertIn("another file is at that path now", err)
                    note(f"{init}, {kind} swapped: rc {rc}, stdout {out.strip()!r}, stderr {err.strip()[-300:]!r}")
                    self.assertFalse(os.path.exists(self.state + "/pwned"), "the program wrote into sbx's state dir")
                    self.assertNotIn(f"ino={state_ino}\n", out, "sbx's state dir was mounted at /data")
                    self.assertEqual(rc, 125, f"the run went on with a swapped bind source\n{err}")
                    self.assertIn("replaced after sbx checked it", err)
                    self.assertIn("nothing was mounted", err)

    def test_unswapped_the_bind_is_the_directory_that_was_checked(self):
        base = self.layout()
        for forked in (False, True):
            with self.subTest(init="forked init" if forked else "shared init"):
                env = dict(self.env, SBX_TEST_STOP_BEFORE_CLONE="1")
                if forked:
                    env["SBX_BENCH_FORKED_INIT"] = "1"
                p = self.stopped_run(base, env)
                time.sleep(0.1)
                rc, out, err = self.resume(p)
                self.assertEqual(rc, 0, err)
                self.assertIn(f"ino={os.stat(base + '/p/state').st_ino}\n", out)
                self.assertIn("wrote", out)
                self.assertTrue(os.path.exists(base + "/p/state/pwned"))
                os.unlink(base + "/p/state/pwned")

    def test_the_state_dir_through_a_symlink_is_refused(self):
        # The caller's symlinks are followed when the source is opened; what is checked is the
        # directory opened, so a link to the state dir (or above it) is no way around the guard.
        os.symlink(self.state, self.path("to-state"))
        os.symlink(os.path.dirname(self.state), self.path("to-above"))
        for src, rel in ((self.path("to-state"), "is sbx's state dir"), (self.path("to-above"), "holds sbx's state dir"),
                         (self.path("to-state") + "/traces", "is inside sbx's state dir")):
            with self.subTest(src=src):
                r = self.run_sbx(["true"], ["--bind", f"{src}:/s:rw"], trace=False, env=self.env)
                self.assertExit(r, 125)
                line = self.assertOneSbxLine(r)
                self.assertIn(rel, line)
                self.assertIn("read-only", line)
