"""What the program can see and touch inside the sandbox."""
import json
import os
import socket
import subprocess
import sys
import threading
import unittest

from sbxtest import INIT_VIEW_PROBE, MODE, SBX, SbxTestCase, busybox_digest, check_init_view, note, sbx, unique

PY = "/usr/bin/python3"
# find(1) over the sandbox's root without the big read-only system trees and pseudo filesystems.
PRUNE = ("\\( -path /proc -o -path /sys -o -path /usr -o -path /dev -o -path /lib -o -path /lib64 "
         "-o -path /lib32 -o -path /libx32 -o -path /bin -o -path /sbin \\) -prune")


class Identity(SbxTestCase):
    def test_root_of_own_user_namespace_by_default(self):
        r = self.run_sbx(["sh", "-c", "id -u; id -g"])
        self.assertExit(r, 0)
        self.assertEqual(r.out.split(), ["0", "0"], r.describe())

    def test_uid_gid_flags(self):
        r = self.run_sbx(["sh", "-c", "id -u; id -g"], ["--uid", "1000", "--gid", "1001"])
        self.assertExit(r, 0)
        self.assertEqual(r.out.split(), ["1000", "1001"], r.describe())

    def test_sandbox_uid_maps_to_an_unprivileged_host_uid(self):
        r = self.run_sbx(["cat", "/proc/self/uid_map", "/proc/self/gid_map"])
        self.assertExit(r, 0)
        rows = [line.split() for line in r.out.strip().splitlines()]
        self.assertTrue(rows, r.describe())
        for inside, outside, count in rows:
            if int(inside) <= 0 < int(inside) + int(count):
                host = int(outside) - int(inside)
                if MODE == "root":
                    self.assertNotEqual(host, 0, "run as host root, sandbox uid/gid 0 must not map to host 0\n" + r.out)
                else:
                    self.assertIn(host, (os.getuid(), os.getgid()),
                                  "rootless: sandbox 0 maps to the caller\n" + r.out)
        for inside, outside, count in rows:
            o, c = int(outside), int(count)
            self.assertFalse(o <= 0 < o + c, f"host uid/gid 0 must not be mapped into the sandbox: {r.out}")

    def test_host_root_file_stays_unwritable_through_rw_bind(self):
        # A file owned by the caller (host root in root mode), mode 0644, bound rw: the sandbox's
        # root is not the host's root (root mode) / is the caller (rootless).
        d = self.path("bindro")
        os.mkdir(d)
        os.chmod(d, 0o755)
        f = os.path.join(d, "owned")
        with open(f, "w") as fh:
            fh.write("original\n")
        os.chmod(f, 0o644)
        r = self.run_sbx(["sh", "-c", "echo changed > /data/owned"], ["--bind", f"{d}:/data:rw"])
        with open(f) as fh:
            content = fh.read()
        if MODE == "root":
            self.assertNotEqual(r.rc, 0, "sandbox root wrote a host-root-owned 0644 file\n" + r.describe())
            self.assertEqual(content, "original\n")
        else:
            self.assertExit(r, 0, "rootless: the caller's own file is writable through an rw bind")
            self.assertEqual(content, "changed\n")


class Hostname(SbxTestCase):
    def test_hostname_is_sbx(self):
        r = self.run_sbx(["cat", "/proc/sys/kernel/hostname"])
        self.assertExit(r, 0)
        self.assertEqual(r.out.strip(), "sbx")
        r = self.run_sbx(["uname", "-n"])
        self.assertEqual(r.out.strip(), "sbx")


PROC_SCRIPT = r"""
import json, os
me = os.getpid()
ps = {}
for d in os.listdir('/proc'):
    if d.isdigit():
        try:
            cl = open('/proc/%s/cmdline' % d, 'rb').read().split(b'\0')
            st = open('/proc/%s/stat' % d).read()
        except OSError:
            continue
        ppid = int(st.rsplit(')', 1)[1].split()[1])
        ps[int(d)] = {'cmdline': [a.decode(errors='replace') for a in cl if a], 'ppid': ppid}
print(json.dumps({'me': me, 'ppid': os.getppid(), 'procs': ps}))
"""


class Ptys(SbxTestCase):
    def test_a_sandbox_takes_at_most_64_of_the_host_s_ptys(self):
        # The sandbox's devpts draws from the host's one pool (kernel.pty.max): before max=64
        # (mount_plan.hpp, kDevptsOptions) 300 opens of /dev/ptmx in one sandbox took 300 of it.
        script = ("import os\nfds = []\ntry:\n    while len(fds) < 300: fds.append(os.open('/dev/ptmx', os.O_RDWR))\n"
                  "except OSError as e:\n    print(len(fds), e.strerror)\nelse:\n    print(len(fds))\n")
        r = self.run_sbx([PY, "-c", script])
        self.assertExit(r, 0)
        self.assertEqual(r.out.split()[0], "64", r.describe())


class PidIsolation(SbxTestCase):
    def test_only_the_sandboxs_own_processes_are_visible(self):
        marker = unique("hostmarker")
        # A host process with a recognisable cmdline that must not show up inside.
        host = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
        try:
            r = self.run_sbx([PY, "-c", PROC_SCRIPT])
        finally:
            host.kill()
            host.wait()
        self.assertExit(r, 0)
        info = json.loads(r.out)
        procs = {int(k): v for k, v in info["procs"].items()}
        self.assertNotEqual(info["me"], 1, "the program must be a child of sbx's init, not pid 1")
        self.assertIn(1, procs, "pid 1 (sbx's init) must be visible in the sandbox's /proc")
        self.assertEqual(info["ppid"], 1, "the program's parent is the sandbox's init (pid 1)")
        for pid, p in procs.items():
            self.assertNotIn(marker, " ".join(p["cmdline"]), "a host process is visible inside")
        # Only init and the program itself (no host processes, no leftovers).
        self.assertEqual(sorted(procs), sorted({1, info["me"]}),
                         f"unexpected processes visible: {json.dumps(procs, indent=1)}")

    def test_ps_sees_only_sandbox(self):
        r = self.run_sbx(["ps", "-e", "-o", "pid=,comm="])
        self.assertExit(r, 0)
        rows = [line.split(None, 1) for line in r.out.strip().splitlines()]
        pids = sorted(int(p) for p, _ in rows)
        self.assertLessEqual(len(rows), 2, "ps shows more than init and itself:\n" + r.out)
        self.assertIn(1, pids, r.out)
        self.assertIn("ps", [c.strip() for _, c in rows], r.out)


# Every way a program could read sbx's init (pid 1), which holds the supervisor's memory: each
# must fail. Prints one line per attempt: name and errno name (or "READ" if it succeeded).
INIT_PEEK_SCRIPT = r"""
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, fn):
    try:
        ok = fn()
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno)); return
    print(name, "READ" if ok else errno.errorcode.get(ctypes.get_errno(), "?"))
def read(path):
    with open(path, "rb") as f:
        return len(f.read(64)) > 0
attempt("mem", lambda: read("/proc/1/mem"))
attempt("environ", lambda: read("/proc/1/environ"))
attempt("maps", lambda: read("/proc/1/maps"))
def fd_target():
    # Init keeps only its report pipe, under a number the program does not know: every number
    # that init has open must refuse; one that it has not is skipped.
    for n in range(64):
        try:
            return len(os.readlink(f"/proc/1/fd/{n}")) > 0
        except FileNotFoundError:
            continue
    raise FileNotFoundError(errno.ENOENT, "init has no fd below 64")
attempt("fd_target", fd_target)
attempt("cwd", lambda: len(os.readlink("/proc/1/cwd")) > 0)
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(64)
local = iovec(ctypes.cast(buf, ctypes.c_void_p), 64)
remote = iovec(0x400000, 64)  # sbx is a non-PIE static binary: its ELF header is mapped here
attempt("process_vm_readv", lambda: libc.process_vm_readv(1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) > 0)
attempt("ptrace_attach", lambda: libc.ptrace(16, 1, 0, 0) == 0)     # PTRACE_ATTACH
attempt("ptrace_seize", lambda: libc.ptrace(0x4206, 1, 0, 0) == 0)  # PTRACE_SEIZE
"""


class InitProtection(SbxTestCase):
    """Init (pid 1) runs in the supervisor's address space (runtime/linux/clone.hpp, shared init), so
    reading init would read sbx itself. The kernel refuses because init holds capabilities the
    program lacks; proven here with seccomp off, so the filter is not what stops it. (Rootless,
    init and the program share the one mapped uid, so the program may list the fd *numbers* in
    /proc/1/fd; what they point to is ptrace-guarded like the rest, and checked.)"""

    def peek(self, opts):
        r = self.run_sbx([PY, "-c", INIT_PEEK_SCRIPT], opts=["--seccomp", "unconfined"] + opts)
        self.assertExit(r, 0)
        results = dict(line.split() for line in r.out.strip().splitlines())
        note(f"reading init {' '.join(opts) or '(as uid 0)'}: {results}")
        self.assertEqual(sorted(results), sorted(["mem", "environ", "maps", "fd_target", "cwd", "process_vm_readv",
                                                  "ptrace_attach", "ptrace_seize"]), r.out)
        for what, res in results.items():
            self.assertIn(res, ("EACCES", "EPERM"), f"{what} of init: {res}\n{r.out}")

    def test_program_as_namespace_root_cannot_read_or_trace_init(self):
        self.peek([])

    def test_program_as_other_uid_cannot_read_or_trace_init(self):
        self.peek(["--uid", "1000", "--gid", "1000"])


class InitView(SbxTestCase):
    """Init's /proc entries show nothing of the host: sbx's argv (the binary, the state dir, the
    bind and input sources) is replaced by a title (runtime/base/proc_title.hpp), and init's address
    space is non-dumpable (clone.hpp), so its /proc files belong to the host's root: the program
    can neither list init's fd numbers nor raise its oom_score_adj, even rootless where it shares
    init's one mapped uid. Seccomp off: the kernel's checks are what is proven."""

    def view(self, extra_opts):
        state, src, inp = self.path("statedir"), self.path("bindsrc"), self.path("inputsrc")
        for d in (state, src, inp):
            os.mkdir(d)
            os.chmod(d, 0o755)
        tpath = self.path("t.json")
        r = sbx(["run", "--state-dir", state, "--seccomp", "unconfined", "--trace-file", tpath,
                 "--bind", f"{src}:/b", "--input", f"{inp}:/i"] + extra_opts + ["--", PY, "-c", INIT_VIEW_PROBE])
        self.assertExit(r, 0)
        paths = [self.tmp, state, src, inp, SBX, os.path.realpath(SBX), os.path.dirname(os.path.realpath(SBX))]
        check_init_view(self, r.out, paths)
        with open(tpath) as f:
            argv = json.load(f)["invocation"]["argv"]
        self.assertIn(src + ":/b", argv, "the record keeps the full command line")

    def test_init_shows_no_host_path_and_resists_the_program(self):
        self.view([])

    def test_same_for_a_program_with_another_uid(self):
        self.view(["--uid", "1000", "--gid", "1000"])

    def test_same_for_a_forked_init(self):
        from sbxtest import busybox_digest
        # An image run keeps a forked init (sandbox.cpp): its own copy of the address space.
        busybox_digest(self)
        r = sbx(["run", "--image", "busybox", "--seccomp", "unconfined", "--", "/bin/sh", "-c",
                 "cat /proc/1/cmdline; echo; ls /proc/1/fd && echo LISTED;"
                 " echo 777 > /proc/1/oom_score_adj && echo RAISED; cat /proc/1/oom_score_adj"])
        self.assertExit(r, 0)
        self.assertNotIn(SBX, r.out)
        lines = r.out.splitlines()  # the first is the title, which holds the words too
        self.assertTrue(lines[0].startswith("sbx run -- /bin/sh"), r.out)
        self.assertNotIn("LISTED", lines[1:], r.out)
        self.assertNotIn("RAISED", lines[1:], r.out)
        self.assertEqual(lines[-1], "0", r.out)


class Filesystem(SbxTestCase):
    def test_root_filesystem_is_read_only(self):
        name = unique("sbxit-ro-")
        for target in (f"/usr/{name}", f"/etc/{name}", f"/{name}", f"/usr/bin/{name}", f"/lib/{name}"):
            r = self.run_sbx(["sh", "-c", f"touch {target} && echo WROTE"])
            try:
                self.assertNotEqual(r.rc, 0, f"touch {target} succeeded inside the sandbox\n" + r.describe())
                self.assertNotIn("WROTE", r.out)
                self.assertFalse(os.path.lexists(target), f"{target} appeared on the host")
            finally:
                if os.path.lexists(target):
                    os.unlink(target)

    def test_tmp_is_a_writable_tmpfs_and_default_workdir(self):
        r = self.run_sbx(["sh", "-c", "pwd; echo hello > /tmp/f && cat /tmp/f; "
                                      "awk '$5 == \"/tmp\" {print $0}' /proc/self/mountinfo"])
        self.assertExit(r, 0)
        lines = r.out.splitlines()
        self.assertEqual(lines[0], "/tmp", "default workdir is /tmp")
        self.assertEqual(lines[1], "hello")
        self.assertTrue(any(" - tmpfs " in line for line in lines[2:]), "/tmp is not a tmpfs:\n" + r.out)

    def test_tmp_is_empty_in_the_next_run(self):
        m = unique("left-")
        r = self.run_sbx(["sh", "-c", f"echo x > /tmp/{m} && mkdir /tmp/{m}.d"])
        self.assertExit(r, 0)
        r = self.run_sbx(["ls", "-A", "/tmp"])
        self.assertExit(r, 0)
        self.assertEqual(r.out, "", "/tmp of the previous run is still there")
        self.assertFalse(os.path.exists(f"/tmp/{m}"), "the sandbox's /tmp file landed in the host's /tmp")

    def test_tmp_is_size_capped(self):
        # The default profile caps /tmp (64M); writing 100M must fail.
        r = self.run_sbx(["sh", "-c", "head -c 100000000 /dev/zero > /tmp/big"], timeout=60)
        self.assertNotEqual(r.rc, 0, "wrote 100 MB into the sandbox's /tmp\n" + r.describe())

    def test_host_home_cwd_and_private_dirs_are_invisible(self):
        marker = unique("sbxit-marker-")
        cwd = self.path("caller-cwd")
        os.mkdir(cwd)
        os.chmod(cwd, 0o755)
        cwd_marker = os.path.join(cwd, marker)
        home = os.path.expanduser("~")
        home_marker = os.path.join(home, marker + "-home")
        open(cwd_marker, "w").close()
        created_home = False
        try:
            try:
                open(home_marker, "w").close()
                created_home = True
            except OSError as e:
                note(f"cannot create a marker in $HOME={home} ({e}); checking the cwd marker only")
            script = ("for p in \"$@\"; do [ -e \"$p\" ] && echo \"VISIBLE $p\"; done; "
                      f"find / {PRUNE} "
                      f"-o -name '{marker}*' -print 2>/dev/null; true")
            paths = [cwd_marker, home_marker, cwd, "/var/lib/dpkg/status", "/run/systemd", "/etc/shadow"]
            r = self.run_sbx(["sh", "-c", script, "sh"] + paths, cwd=cwd, timeout=60)
            self.assertExit(r, 0)
            self.assertEqual(r.out, "", "host files visible inside the sandbox:\n" + r.describe())
            if MODE == "root":
                r = self.run_sbx(["sh", "-c", "ls -A /root 2>/dev/null"])
                self.assertEqual(r.out, "", "/root contents are visible:\n" + r.describe())
        finally:
            os.unlink(cwd_marker)
            if created_home:
                os.unlink(home_marker)

    def test_var_run_home_contents_invisible(self):
        # Same (st_dev, st_ino) inside as on the host means the host's object itself is visible;
        # an empty dir that sbx creates with a host-like name (e.g. /run/lock) does not count.
        dirs = ("/var", "/run", "/home", "/root", "/srv", "/opt", "/mnt", "/media")
        host = {}
        for d in dirs:
            try:
                names = os.listdir(d)
            except OSError:
                continue
            for n in names:
                try:
                    st = os.lstat(os.path.join(d, n))
                except OSError:
                    continue
                host[(st.st_dev, st.st_ino)] = os.path.join(d, n)
        script = ("import json, os\nout = []\n"
                  f"for d in {dirs!r}:\n"
                  "    try: names = os.listdir(d)\n"
                  "    except OSError: continue\n"
                  "    for n in names:\n"
                  "        try: st = os.lstat(os.path.join(d, n))\n"
                  "        except OSError: continue\n"
                  "        out.append([os.path.join(d, n), st.st_dev, st.st_ino])\n"
                  "print(json.dumps(out))\n")
        r = self.run_sbx([PY, "-c", script])
        self.assertExit(r, 0)
        leaked = sorted(p for p, dev, ino in json.loads(r.out) if (dev, ino) in host)
        self.assertEqual(leaked, [], "host entries visible inside the sandbox")

    def test_no_host_sockets(self):
        # A listening unix socket of the caller's (in its temp dir) and whatever the host has.
        cwd = self.path("sockdir")
        os.mkdir(cwd)
        os.chmod(cwd, 0o755)
        srv = socket.socket(socket.AF_UNIX)
        srv.bind(os.path.join(cwd, "host.sock"))
        srv.listen(1)
        try:
            r = self.run_sbx(["sh", "-c", f"find / {PRUNE} -o -type s -print 2>/dev/null; true"],
                             cwd=cwd, timeout=60)
        finally:
            srv.close()
        self.assertExit(r, 0)
        self.assertEqual(r.out, "", "unix sockets visible inside:\n" + r.out)

    def test_dev_is_minimal(self):
        r = self.run_sbx(["sh", "-c", "ls -A /dev"])
        self.assertExit(r, 0)
        names = set(r.out.split())
        for need in ("null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx", "shm"):
            self.assertIn(need, names, f"/dev/{need} missing: {sorted(names)}")
        for bad in ("sda", "vda", "nvme0", "mem", "kmsg", "kvm"):
            self.assertNotIn(bad, names, f"/dev/{bad} must not be in the sandbox")

    def test_dev_is_read_only_but_shm_and_pts_are_not(self):
        r = self.run_sbx(["sh", "-c", "echo x > /dev/new 2>/dev/null && echo DEV-WRITABLE;"
                          " rm -f /dev/null 2>/dev/null; test -c /dev/null || echo NULL-GONE;"
                          " echo x > /dev/shm/ok && echo SHM-OK; echo x > /dev/null && echo NULL-OK"])
        self.assertExit(r, 0)
        self.assertNotIn("DEV-WRITABLE", r.out, "/dev is read-only once set up")
        self.assertNotIn("NULL-GONE", r.out, "/dev/null cannot be removed or replaced")
        self.assertIn("SHM-OK", r.out)
        self.assertIn("NULL-OK", r.out)

    def test_bind_read_only_and_rw(self):
        d = self.path("data")
        os.mkdir(d)
        # World-writable so that the sandbox's (possibly unprivileged, root mode) uid may write.
        os.chmod(d, 0o777)
        with open(os.path.join(d, "in.txt"), "w") as f:
            f.write("from host\n")
        r = self.run_sbx(["sh", "-c", "cat /data/in.txt; echo x > /data/new && echo WROTE"],
                         ["--bind", f"{d}:/data"])
        self.assertIn("from host", r.out, r.describe())
        self.assertNotIn("WROTE", r.out, "a read-only bind was writable\n" + r.describe())
        self.assertFalse(os.path.exists(os.path.join(d, "new")))
        r = self.run_sbx(["sh", "-c", "echo x > /data/new && echo WROTE"], ["--bind", f"{d}:/data:rw"])
        self.assertExit(r, 0)
        self.assertIn("WROTE", r.out)
        self.assertTrue(os.path.exists(os.path.join(d, "new")), "an rw bind write did not reach the host")

    @unittest.skipIf(MODE != "root", "needs host mounts below the bound directory: the rootless suite cannot make "
                     "mounts on the host, and a user namespace of its own would not be sbx's host")
    def test_read_only_bind_is_read_only_through_its_submounts(self):
        """A read-only bind of a directory with a tmpfs, a bind and a nested tmpfs below it: every
        level refuses writes, every mount under it is ro,nosuid,nodev, and the host is unchanged.
        The host mounts live in a private mount namespace this test creates (unshare -m)."""
        d, side, inp = self.path("tree"), self.path("side"), self.path("input")
        for x in (d, side, inp):
            os.mkdir(x)
            os.chmod(x, 0o777)
        for sub in ("sub", "bsub", "nested"):
            os.mkdir(os.path.join(d, sub))
        os.mkdir(os.path.join(inp, "sub"))
        targets = ["/d/top", "/d/sub/x", "/d/bsub/x", "/d/nested/deeper/x", "/i/sub/x"]
        prog = ("for p in " + " ".join(targets) + "; do if echo x > $p 2>/dev/null; then echo WROTE $p; "
                "else echo refused $p; fi; done; grep -E ' /(d|i)[ /]' /proc/self/mountinfo")
        tpath = self.path("trace.json")
        script = f"""set -e
mount -t tmpfs -o mode=1777 t {d}/sub
mount --bind {side} {d}/bsub
mount -t tmpfs -o mode=1777 t {d}/nested; mkdir -m 1777 {d}/nested/deeper
mount -t tmpfs -o mode=1777 t {d}/nested/deeper
mount -t tmpfs -o mode=1777 t {inp}/sub
set +e
"$SBX" run --trace-file {tpath} --bind {d}:/d --input {inp}:/i -- sh -c "$PROG"
echo "sbx exit $?"
echo "host sub: $(ls -A {d}/sub {d}/nested/deeper {inp}/sub | tr '\n' ' ')"
"""
        env = dict(os.environ, SBX=os.environ["SBX_BIN"], PROG=prog)
        p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                           capture_output=True, text=True, timeout=60, env=env)
        out = p.stdout
        self.assertIn("sbx exit 0", out, out + p.stderr)
        for t in targets:
            self.assertIn(f"refused {t}", out, f"a write to {t} went through a read-only bind\n{out}{p.stderr}")
        self.assertNotIn("WROTE", out)
        mounts = [l for l in out.splitlines() if l[:1].isdigit()]  # the mountinfo lines
        self.assertGreaterEqual(len(mounts), 6, out)
        for m in mounts:
            opts = m.split()[5].split(",")
            for flag in ("ro", "nosuid", "nodev"):
                self.assertIn(flag, opts, f"mount without {flag}: {m}")
        self.assertEqual(os.listdir(side), [], "the host directory bound below was written")
        host_line = [l for l in out.splitlines() if l.startswith("host sub:")]
        self.assertTrue(host_line and "x" not in host_line[0].split(":", 1)[1].split(), out)

    def test_bind_same_path_when_dst_omitted(self):
        d = self.path("same")
        os.mkdir(d)
        os.chmod(d, 0o755)
        open(os.path.join(d, "f"), "w").close()
        r = self.run_sbx(["ls", d], ["--bind", d])
        self.assertExit(r, 0)
        self.assertEqual(r.out.split(), ["f"])

    def test_tmpfs_and_workdir(self):
        r = self.run_sbx(["sh", "-c", "pwd; echo ok > f && cat f; head -c 2000000 /dev/zero > big || echo FULL"],
                         ["--tmpfs", "/scratch:1M", "--workdir", "/scratch"])
        self.assertEqual(r.out.split(), ["/scratch", "ok", "FULL"], r.describe())


# Bytes each /proc entry gives the program, and whether it can be opened for writing: one line each.
PROC_PROBE = ("for f in diskstats interrupts timer_list stat; do"
              " n=$(cat /proc/$f 2>/dev/null | wc -c); w=no; (: >> /proc/$f) 2>/dev/null && w=yes;"
              " echo \"$f $n $w\"; done; nproc")


class ProcSideChannels(SbxTestCase):
    """Host-wide /proc counters show what the host and concurrent sandboxes do as it happens
    (issue 30): diskstats and interrupts are covered by an empty read-only file in every profile,
    with Docker's default list (timer_list, ...); /proc/stat stays (get_nprocs reads it)."""

    def covered(self, opts=()):
        r = self.run_sbx(["sh", "-c", PROC_PROBE], list(opts))
        self.assertExit(r, 0)
        lines = r.out.splitlines()
        seen = {l.split()[0]: l.split()[1:] for l in lines if len(l.split()) == 3}
        for f in ("diskstats", "interrupts", "timer_list"):
            try:
                with open("/proc/" + f, "rb") as h:
                    if not h.read(1):
                        continue  # nothing on this host to hide
            except OSError:
                continue  # not readable by this user on the host either (timer_list may be 0400)
            self.assertEqual(seen.get(f), ["0", "no"], f"/proc/{f} must read empty and be unwritable\n" + r.describe())
        self.assertNotEqual(seen.get("stat", ["0"])[0], "0", "/proc/stat stays readable\n" + r.describe())
        self.assertGreaterEqual(int(lines[-1]), 1, r.describe())
        ops = [(m["op"], m["dst"]) for m in self.need_trace(r)["image"]["mounts"]]
        self.assertIn(("mask", "/proc/diskstats"), ops)
        self.assertIn(("mask", "/proc/interrupts"), ops)
        self.assertNotIn(("mask", "/proc/stat"), ops)
        return r

    def test_untrusted(self):
        self.covered()

    def test_trusted(self):
        self.covered(["--profile", "trusted"])

    def test_image_root(self):
        busybox_digest(self)
        self.covered(["--image", "busybox"])

    def test_python_still_counts_cpus(self):
        # glibc's get_nprocs reads /proc/stat where /sys is absent: what covering it would break.
        r = self.run_sbx([PY, "-c", "import os; print(os.cpu_count())"])
        self.assertExit(r, 0)
        self.assertEqual(r.out.strip(), str(os.cpu_count()), r.describe())


class MountTargets(SbxTestCase):
    """A mount point is resolved inside the new root: a symlink on its way (here in a host
    directory bound earlier in the same run, which a program of another run could have written
    with an rw bind) never leads the mount, or the directories and files made for it, out of the
    sandbox. sbx builds the root with the host's tree at /oldroot (runtime/linux/mounts.cpp), so the
    symlinks aim there: absolute, and relative with enough '..' to climb out of the new root."""

    def setUp(self):
        super().setUp()
        self.host = self.path("hostdir")  # what the symlinks aim at: must stay empty
        self.tree, self.other = self.path("tree"), self.path("other")
        for d in (self.host, self.tree, self.other, self.tree + "/real"):
            os.mkdir(d)
            os.chmod(d, 0o777)  # root mode: the sandbox's uids map to an unprivileged host uid
        with open(self.other + "/f", "w") as f:
            f.write("payload\n")
        os.symlink("/oldroot" + self.host, self.tree + "/abs")
        os.symlink("../" * 12 + "oldroot" + self.host, self.tree + "/rel")
        os.symlink("/src/real", self.tree + "/inside")  # resolved in the sandbox: stays inside

    def attack(self, image_opts):
        for link in ("abs", "rel"):
            for src, dst in ((self.other, f"/src/{link}/x"), (self.other + "/f", f"/src/{link}/f"),
                             (self.other + "/f", f"/src/{link}")):
                for rw in ("", ":rw"):
                    r = self.run_sbx(["true"], image_opts + ["--bind", f"{self.tree}:/src{rw}",
                                                             "--bind", f"{src}:{dst}"])
                    self.assertEqual(os.listdir(self.host), [],
                                     f"mount point for {dst} made on the host through /src/{link}\n" + r.describe())
                    self.assertExit(r, 125, f"{dst} through the symlink /src/{link}")
                    self.assertIn("symlink", self.assertOneSbxLine(r))
        # --input, --tmpfs are mounts too (packs' /pack and contexts are binds like --bind).
        for opt in (["--input", f"{self.other}:/src/abs/in"], ["--tmpfs", "/src/rel/t"]):
            r = self.run_sbx(["true"], image_opts + ["--bind", f"{self.tree}:/src:rw"] + opt)
            self.assertEqual(os.listdir(self.host), [], r.describe())
            if opt[0] == "--input":
                self.assertExit(r, 125)
        # A symlink that resolves inside the new root is followed there, as a container runtime does.
        r = self.run_sbx(["sh", "-c", "cat /src/real/x/f; test -L /src/inside && echo via-link"],
                         image_opts + ["--bind", f"{self.tree}:/src:rw", "--bind", f"{self.other}:/src/inside/x"])
        self.assertExit(r, 0)
        self.assertEqual(r.out.split(), ["payload", "via-link"])
        self.assertEqual(os.listdir(self.host), [])

    def test_symlink_in_a_bound_directory_cannot_aim_a_mount_at_the_host(self):
        self.attack([])

    def test_symlink_in_the_image_itself(self):
        """The image's own layer: refused before the overlay is mounted (mounts.cpp,
        precreate_in_upper), and resolved inside the root after it."""
        tree = self.path("img")
        os.makedirs(tree + "/etc")
        os.makedirs(tree + "/bin")
        os.symlink("/oldroot" + self.host, tree + "/etc/evil")
        os.symlink("../../../../../oldroot" + self.host, tree + "/etc/evil2")
        name = unique("evilimg")
        r = sbx(["image", "import", tree, "--name", name, "--quiet"], timeout=60)
        self.assertExit(r, 0)
        try:
            for link in ("evil", "evil2"):
                r = self.run_sbx(["/bin/true"], ["--image", name, "--bind", f"{self.other}:/etc/{link}/x"])
                self.assertEqual(os.listdir(self.host), [], r.describe())
                self.assertExit(r, 125)
                self.assertIn("symlink", self.assertOneSbxLine(r))
        finally:
            sbx(["image", "rm", name])

    def test_same_on_an_image_root(self):
        from sbxtest import busybox_digest
        busybox_digest(self)
        self.attack(["--image", "busybox"])


class Network(SbxTestCase):
    def test_only_loopback_and_it_is_up(self):
        script = r"""
import socket, json
names = [n for _, n in socket.if_nameindex()]
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)
c = socket.create_connection(s.getsockname(), timeout=2)
a, _ = s.accept(); c.sendall(b'ping'); got = a.recv(4)
print(json.dumps({'ifaces': names, 'echo': got.decode()}))
"""
        r = self.run_sbx([PY, "-c", script])
        self.assertExit(r, 0)
        info = json.loads(r.out)
        self.assertEqual(info["ifaces"], ["lo"], "only lo may exist")
        self.assertEqual(info["echo"], "ping", "lo must be up")
        r = self.run_sbx(["cat", "/proc/net/dev"])
        ifaces = [line.split(":")[0].strip() for line in r.out.splitlines()[2:]]
        self.assertEqual(ifaces, ["lo"], r.out)

    def test_host_loopback_server_unreachable(self):
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        port = srv.getsockname()[1]
        accepted = []
        stop = threading.Event()

        def serve():
            srv.settimeout(0.1)
            while not stop.is_set():
                try:
                    c, addr = srv.accept()
                except OSError:
                    continue
                accepted.append(addr)
                try:
                    c.sendall(b"HOST-SECRET\n")
                finally:
                    c.close()

        th = threading.Thread(target=serve, daemon=True)
        th.start()
        try:
            # Sanity: the server is reachable from the host, so "unreachable" below means something.
            with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
                self.assertEqual(c.recv(64), b"HOST-SECRET\n")
            host_conns = len(accepted)
            script = ("import socket, sys\n"
                      "try:\n"
                      f"    c = socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
                      "    print('CONNECTED', c.recv(64)); sys.exit(0)\n"
                      "except OSError as e:\n"
                      "    print('FAILED', type(e).__name__, e.errno); sys.exit(3)\n")
            r = self.run_sbx([PY, "-c", script])
            self.assertExit(r, 3, "connecting to the host's 127.0.0.1 server must fail")
            self.assertIn("FAILED", r.out)
            self.assertIn(r.out.split()[1], ("ConnectionRefusedError", "OSError", "TimeoutError"), r.out)
            self.assertEqual(len(accepted), host_conns, "the host server accepted a connection from the sandbox")
        finally:
            stop.set()
            th.join()
            srv.close()

    def test_no_dns_or_outside_route(self):
        r = self.run_sbx([PY, "-c", "import socket\ntry:\n socket.create_connection(('10.255.255.1', 80), timeout=2)\n print('CONNECTED')\nexcept OSError as e:\n print('FAILED', e.errno)"])
        self.assertExit(r, 0)
        self.assertTrue(r.out.startswith("FAILED"), r.describe())


class Environment(SbxTestCase):
    ALLOWED = {"PATH", "HOME", "TERM", "LANG"}

    def env_inside(self, opts=(), env=None):
        r = self.run_sbx(["/usr/bin/env"], opts, env=env)
        self.assertExit(r, 0)
        out = {}
        for line in r.out.splitlines():
            k, _, v = line.partition("=")
            out[k] = v
        return out

    def test_cleared_by_default(self):
        env = dict(os.environ, SBX_IT_SECRET="hunter2", AWS_SECRET_ACCESS_KEY="nope", LD_PRELOAD="")
        inside = self.env_inside(env=env)
        extra = set(inside) - self.ALLOWED
        self.assertEqual(extra, set(), f"unexpected variables inside: {inside}")
        self.assertIn("PATH", inside)
        self.assertNotIn("hunter2", json.dumps(inside))

    def test_env_and_env_pass(self):
        env = dict(os.environ, SBX_IT_PASS="passed-value", SBX_IT_OTHER="no")
        inside = self.env_inside(["--env", "FOO=bar baz", "--env", "EMPTY=", "--env-pass", "SBX_IT_PASS"], env=env)
        self.assertEqual(inside.get("FOO"), "bar baz")
        self.assertEqual(inside.get("EMPTY"), "")
        self.assertEqual(inside.get("SBX_IT_PASS"), "passed-value")
        self.assertNotIn("SBX_IT_OTHER", inside)
        self.assertEqual(set(inside) - self.ALLOWED, {"FOO", "EMPTY", "SBX_IT_PASS"}, str(inside))

    def test_env_values_not_in_trace(self):
        # The trace embeds the spec: names and sources of passed variables, never a passed value.
        env = dict(os.environ, SBX_IT_PASS="s3cr3t-" + unique())
        r = self.run_sbx(["/bin/true"], ["--env-pass", "SBX_IT_PASS"], env=env)
        self.assertExit(r, 0)
        with open(r.trace_path) as f:
            self.assertNotIn(env["SBX_IT_PASS"], f.read(), "a passed-through value leaked into the trace")


if __name__ == "__main__":
    unittest.main()
