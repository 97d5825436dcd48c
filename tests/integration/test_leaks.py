"""Nothing is left behind: after 200 runs no mounts, scratch dirs or processes remain; sbx passes the
program only fds 0, 1, 2 and does not hold a growing set of its own."""
import glob
import json
import os
import subprocess
import tempfile
import time
import unittest

from sbxtest import MODE, SBX, SbxTestCase, find_procs, find_program, ledger_lines, mountinfo, note, procs, sbx, scaled, sleep_marker, unique, wait_for

RUNS = 200


def scratch_roots(xdg):
    roots = ["/run/sbx"] + sorted(glob.glob("/tmp/sbx-*"))
    if xdg:
        roots.append(os.path.join(xdg, "sbx"))
    elif os.environ.get("XDG_RUNTIME_DIR"):
        roots.append(os.path.join(os.environ["XDG_RUNTIME_DIR"], "sbx"))
    return roots


def environ(pid):
    """/proc/PID/environ as a set of "K=V" strings; None when it cannot be read (another user's
    process, or one of ours that is not dumpable, as sbx is while it supervises a shared init)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return {e.decode(errors="replace") for e in f.read().split(b"\0") if e}
    except OSError:
        return None


def our_processes(before, marker, tags):
    """The processes new since `before` that these runs started: the marker in their command line
    (sbx sets its process title to "sbx run -- ... MARKER", and the program has it), or one of
    `tags` in their environment (every process sbx forks or re-executes inherits it; the scope
    keeper gets the private XDG_RUNTIME_DIR). Any other process running the sbx binary is someone
    else's (another suite run in parallel from the same path, a concurrent test): the sbx binary
    alone said nothing, and counting it failed this test once, under ASan with the rootless suite
    running beside it, whose sbx processes still carry the binary's path as argv[0] until their
    title is set. One of our uid whose environment cannot be read still counts (cannot tell)."""
    me, uid = os.getpid(), os.getuid()
    out = {}
    for pid, (cl, owner) in procs().items():
        if pid in before or pid == me or not cl:
            continue
        env = environ(pid)
        if (any(marker in a for a in cl) or (env is not None and env & tags)
                or (cl[0] == SBX and owner == uid and env is None)):
            out[pid] = cl
    return out


def stat(pid):
    """State and parent pid, from /proc/PID/stat ("?" when gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return f"state {fields[0].decode()}, ppid {int(fields[1])}"
    except (OSError, IndexError, ValueError):
        return "?"


def listing(roots):
    out = set()
    for root in roots:
        out.add(root if os.path.exists(root) else None)
        try:
            for name in os.listdir(root):
                out.add(os.path.join(root, name))
        except OSError:
            pass
    out.discard(None)
    # /tmp/sbx-* top-level entries themselves (per-user fallback dirs may be created once).
    return out


class NothingLeftBehind(SbxTestCase):
    def test_200_runs_leave_nothing(self):
        marker = unique("leak")
        # A private XDG_RUNTIME_DIR: everything sbx leaves there is ours, so it is checked exactly.
        xdg = tempfile.mkdtemp(prefix="sbxit-xdg-")
        os.chmod(xdg, 0o700)
        env = dict(os.environ, XDG_RUNTIME_DIR=xdg, SBX_IT_LEAK_RUN=marker)
        tags = {f"SBX_IT_LEAK_RUN={marker}", f"XDG_RUNTIME_DIR={xdg}"}
        state = self.path("state")
        env["SBX_STATE_DIR"] = state
        mounts_before = mountinfo()
        scratch_before = listing(scratch_roots(None))
        procs_before = set(procs())
        failures = []
        t0 = time.monotonic()
        for i in range(RUNS):
            r = sbx(["run", "--", "/bin/true", marker], env=env, timeout=30)
            if r.rc != 0:
                failures.append(f"run {i}: {r.describe()}")
                if len(failures) > 3:
                    break
        took = time.monotonic() - t0
        note(f"{RUNS} runs of /bin/true took {took:.1f}s ({took / RUNS * 1000:.1f} ms per run around sbx)")
        self.assertEqual(failures, [], "runs of /bin/true failed")

        run_ids = [e["run_id"] for e in ledger_lines(state)]
        self.assertEqual(len(run_ids), RUNS, "one trace record per run")

        # Mounts: the host's mount table is unchanged.
        mounts_after = mountinfo()
        new_mounts = sorted(set(mounts_after) - set(mounts_before))
        self.assertEqual(new_mounts, [], "mounts left in the host's mount namespace")

        # Processes: nothing of ours. Every run was waited for, so what is there now is a leak; a
        # bounded wait still lets a process that is only ending (on a loaded machine) be gone,
        # while one that stays is reported with its state and parent.
        wait_for(lambda: not our_processes(procs_before, marker, tags), scaled(10), interval=0.1)
        self.assertEqual(find_procs(marker), {}, "sandbox processes left running")
        left = our_processes(procs_before, marker, tags)
        self.assertEqual({pid: (cl, stat(pid)) for pid, cl in left.items()}, {}, "sbx processes left running")
        others = {pid: cl[0] for pid, (cl, _) in procs().items() if pid not in procs_before and cl and cl[0] == SBX}
        if others:
            note(f"sbx processes not ours (another suite's or test's, from the same binary): {others}")

        # Scratch: the private XDG dir holds nothing but (at most) an empty sbx/ base dir.
        xdg_left = []
        for dirpath, dirnames, filenames in os.walk(xdg):
            for n in dirnames + filenames:
                rel = os.path.relpath(os.path.join(dirpath, n), xdg)
                if rel != "sbx":
                    xdg_left.append(rel)
        self.assertEqual(sorted(xdg_left)[:20], [], f"scratch left under $XDG_RUNTIME_DIR ({xdg})")
        # Shared roots (/run/sbx, /tmp/sbx-*): other users of this machine may run sbx concurrently,
        # so only entries that carry one of our run ids count as ours; other new entries are reported.
        new = listing(scratch_roots(None)) - scratch_before
        ours = sorted(p for p in new if any(rid in p for rid in run_ids))
        self.assertEqual(ours[:20], [], "scratch dirs of our runs left behind")
        if new:
            note(f"new entries under shared scratch roots (not named after our run ids; possibly other "
                 f"users' runs or a per-user base dir): {sorted(new)[:20]}")
        subprocess.run(["rm", "-rf", xdg], check=False)

    def test_program_sees_only_fds_0_1_2(self):
        # An fd sbx inherits (not CLOEXEC) must not reach the program, nor any of sbx's own.
        rfd, wfd = os.pipe()
        os.set_inheritable(rfd, True)
        os.set_inheritable(wfd, True)
        script = ("import os, json, resource\n"
                  "fds = {}\n"
                  "for fd in range(resource.getrlimit(resource.RLIMIT_NOFILE)[0] if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 65536 else 65536):\n"
                  "    try:\n"
                  "        os.fstat(fd)\n"
                  "    except OSError:\n"
                  "        continue\n"
                  "    try:\n"
                  "        fds[fd] = os.readlink('/proc/self/fd/%d' % fd)\n"
                  "    except OSError as e:\n"
                  "        fds[fd] = '?'\n"
                  "print(json.dumps(fds))\n")
        try:
            r = self.run_sbx(["/usr/bin/python3", "-c", script], pass_fds=(rfd, wfd))
        finally:
            os.close(rfd)
            os.close(wfd)
        self.assertExit(r, 0)
        fds = {int(k): v for k, v in json.loads(r.out).items()}
        self.assertEqual(sorted(fds), [0, 1, 2], f"fds open in the program: {fds}")

    def test_ls_proc_self_fd(self):
        r = self.run_sbx(["sh", "-c", "ls /proc/$$/fd"])
        self.assertExit(r, 0)
        self.assertEqual(r.out.split(), ["0", "1", "2"], r.describe())

    def test_sbx_own_fds_are_few_and_closed_at_exit(self):
        m = sleep_marker()
        rfd, wfd = os.pipe()
        os.set_inheritable(wfd, True)
        opts = []
        if MODE == "rootless":
            # A shared init makes sbx non-dumpable while it runs (runtime/linux/clone.hpp): its /proc/PID/fd
            # is root's. An image run keeps a forked init, and sbx's /proc stays its user's.
            from sbxtest import busybox_digest
            busybox_digest(self)
            opts = ["--image", "busybox"]
        p = subprocess.Popen([SBX, "run"] + opts + ["--", "sleep", m], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=(wfd,))
        os.close(wfd)
        try:
            self.assertTrue(wait_for(lambda: find_program(m), 10), "sandbox did not start")
            try:
                fds = {int(fd): os.readlink(f"/proc/{p.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{p.pid}/fd")}
            except OSError as e:
                self.skipTest(f"cannot read /proc/{p.pid}/fd of sbx: {e}")
            note(f"sbx's own fds while supervising one program: {len(fds)}: {fds}")
            self.assertLess(len(fds), 32, f"sbx holds many fds: {fds}")
        finally:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            from sbxtest import kill_tree_by_marker
            kill_tree_by_marker(m)
        # With sbx gone, every copy of the pipe's write end (sbx's and the sandbox's) is closed.
        import select
        self.assertTrue(select.select([rfd], [], [], 2)[0], "write end of the inherited pipe still open")
        self.assertEqual(os.read(rfd, 1), b"", "pipe still has a writer after sbx exited")
        os.close(rfd)


if __name__ == "__main__":
    unittest.main()
