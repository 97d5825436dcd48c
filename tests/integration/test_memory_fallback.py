"""The memory limit where cgroup v2 cannot bound it (the rlimit fallback): RLIMIT_DATA for private
memory, RLIMIT_FSIZE for every file (memfds included), the tmpfs sizes summed against the limit,
SysV shm capped in the run's ipc namespace; the trace says what stays unbounded and
--require-limits refuses memory. And the runtimes people run still run: a 64 GiB PROT_NONE
reservation and headless Chromium (runtime/linux/limits_plan.cpp fallback_memory, memory_fallback.hpp)."""
import json
import os
import shutil
import unittest

from sbxtest import MODE, SbxTestCase
from test_limits_host import cgroup_v2_has_controllers

MiB = 1 << 20
CHROMIUM = "/usr/lib/chromium/chromium"

# Writes up to 2 GiB into one memfd in 1 MiB steps (then tries ftruncate to 2 GiB), reporting how
# far it got and how much the host's Shmem grew meanwhile (/proc/meminfo is not namespaced).
# Python ignores SIGXFSZ, so RLIMIT_FSIZE shows as EFBIG rather than a kill.
MEMFD_ONE = r"""
import os, json
def shmem():
    for l in open('/proc/meminfo'):
        if l.startswith('Shmem:'): return int(l.split()[1]) * 1024
base = shmem(); fd = os.memfd_create('big'); chunk = b'x' * (1 << 20); n = 0; err = None
try:
    while n < (2 << 30): n += os.write(fd, chunk)
except OSError as e: err = e.errno
grown = shmem() - base
try: os.ftruncate(fd, 2 << 30); trunc = None
except OSError as e: trunc = e.errno
print(json.dumps({'written': n, 'errno': err, 'shmem_grown': grown, 'ftruncate_errno': trunc}))
"""

# Four memfds, each written up to 256 MiB and all kept open: each stops at RLIMIT_FSIZE.
MEMFD_MANY = r"""
import os, json
fds = [os.memfd_create('m%d' % i) for i in range(4)]; chunk = b'x' * (1 << 20); sizes = []
for fd in fds:
    n = 0
    try:
        while n < (256 << 20): n += os.write(fd, chunk)
    except OSError: pass
    sizes.append(n)
print(json.dumps({'sizes': sizes}))
"""

SYSV = r"""
import ctypes, json, sys
libc = ctypes.CDLL(None, use_errno=True)
out = []
if "--raise-first" in sys.argv:  # the program, uid 0 in the sandbox, tries to lift the cap first
    for knob in ("shmmax", "shmall"):
        try:
            with open("/proc/sys/kernel/" + knob, "w") as f: f.write("18446744073692774399")
        except OSError as e: out.append("refused " + knob + ": " + e.strerror)
for size in (256 << 20, 48 << 20, 48 << 20, 48 << 20):
    r = libc.shmget(0, ctypes.c_size_t(size), 0o1600)
    out.append(r if r >= 0 else -ctypes.get_errno())
print(json.dumps(out))
"""

TMPFS_SIZES = r"""
import os, json
def size(p):
    s = os.statvfs(p); return s.f_blocks * s.f_frsize
print(json.dumps({p: size(p) for p in ('/tmp', '/dev/shm', '/out')}))
"""

RESERVE = r"""
import mmap
m = mmap.mmap(-1, 64 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=0)
print('reserved 64G')
b = bytearray(512 << 20)
print('allocated 512M')
"""


def last_json(r):
    lines = [l for l in r.out.splitlines() if l.strip()]
    if not lines:
        raise AssertionError("no output\n" + r.describe())
    return json.loads(lines[-1])


@unittest.skipIf(cgroup_v2_has_controllers(),
                 "this host's cgroup v2 bounds memory in total (memory.max charges shmem too): no fallback to test")
class MemoryFallback(SbxTestCase):
    def test_memfd_of_2gib_fails_under_128m(self):
        r = self.run_sbx(["python3", "-c", MEMFD_ONE], ["--memory", "128M"], timeout=120)
        self.assertExit(r, 0)
        got = last_json(r)
        self.assertLessEqual(got["written"], 128 * MiB, "a memfd is capped by RLIMIT_FSIZE\n" + r.describe())
        self.assertEqual(got["errno"], 27, "EFBIG (Python ignores SIGXFSZ)")
        self.assertEqual(got["ftruncate_errno"], 27, "ftruncate past RLIMIT_FSIZE fails too")
        # Other processes on the host move Shmem too: the margin is wide, the attack is 2 GiB.
        self.assertLess(got["shmem_grown"], 768 * MiB, "host Shmem must not grow by GBs\n" + r.describe())
        mf = self.need_trace(r)["enforcement"]["memory_fallback"]
        fsize = [m for m in mf["mechanisms"] if m["mechanism"] == "rlimit RLIMIT_FSIZE"][0]
        self.assertEqual(got["written"], fsize["value"], "the last write is cut short exactly at the cap")

    def test_a_program_killed_by_sigxfsz_is_told_apart(self):
        # Python ignores SIGXFSZ by default; with the default disposition the kernel kills the
        # program at the cap, and the trace says which limit did it.
        r = self.run_sbx(["python3", "-c", "import os, signal; signal.signal(signal.SIGXFSZ, signal.SIG_DFL); "
                                            "fd = os.memfd_create('m'); os.ftruncate(fd, 1 << 30)"], ["--memory", "128M"])
        t = self.need_trace(r)
        self.assertEqual(t["result"]["status"], "signaled", r.describe())
        self.assertEqual(t["result"]["signal"], 25)
        self.assertIn("RLIMIT_FSIZE", t["result"]["reason"])

    def test_many_memfds_each_capped_and_the_rest_named(self):
        r = self.run_sbx(["python3", "-c", MEMFD_MANY], ["--memory", "128M"], timeout=120)
        self.assertExit(r, 0)
        sizes = last_json(r)["sizes"]
        for s in sizes:
            self.assertLessEqual(s, 128 * MiB, f"no memfd grows past the memory limit: {sizes}")
        t = self.need_trace(r)
        mf = t["enforcement"]["memory_fallback"]
        fsize = [m for m in mf["mechanisms"] if m["mechanism"] == "rlimit RLIMIT_FSIZE"][0]["value"]
        self.assertLessEqual(fsize, 128 * MiB)
        for s in sizes:
            self.assertLessEqual(s, fsize, f"each memfd stops at RLIMIT_FSIZE: {sizes}")
        # The count is what no rlimit bounds: the trace says so, and --require-limits refuses.
        self.assertIs(mf["bounded_in_total"], False)
        self.assertTrue(any("memfd" in u for u in mf["unbounded"]), mf["unbounded"])
        self.assertIn("memfds", t["enforcement"]["limits_applied"]["memory"]["note"])

    def test_sysv_shm_is_capped_by_the_memory_limit(self):
        r = self.run_sbx(["python3", "-c", SYSV], ["--memory", "128M"])
        self.assertExit(r, 0)
        got = last_json(r)
        self.assertEqual(got[0], -22, f"a 256M segment exceeds shmmax: {got}")
        self.assertGreaterEqual(got[1], 0)
        self.assertGreaterEqual(got[2], 0)
        self.assertEqual(got[3], -28, f"the third 48M segment exceeds shmall (128M in total): {got}")

    def test_the_program_cannot_lift_the_sysv_cap(self):
        # /proc/sys is read-only in the sandbox: the namespace's root (which the program is) could
        # otherwise write shmall/shmmax back up, the kernel checking its euid, not a capability.
        r = self.run_sbx(["python3", "-c", SYSV, "--raise-first"], ["--memory", "128M"])
        self.assertExit(r, 0)
        got = last_json(r)
        self.assertEqual(got[:2], ["refused shmmax: Read-only file system", "refused shmall: Read-only file system"])
        self.assertEqual(got[2], -22, f"the 256M segment still exceeds shmmax: {got}")
        self.assertEqual(got[5], -28, f"the third 48M segment still exceeds shmall: {got}")

    def test_a_program_uid_without_namespace_root_still_runs_and_the_gap_is_named(self):
        # Rootless --uid N maps no uid 0, and only that uid may set the ipc namespace's shmall: the
        # run goes on, and the trace names SysV shm as unbounded. As root, uid 0 is mapped: capped.
        r = self.run_sbx(["python3", "-c", SYSV], ["--memory", "128M", "--uid", "1000", "--gid", "1000"])
        self.assertExit(r, 0)
        mf = self.need_trace(r)["enforcement"]["memory_fallback"]
        sysv = [m for m in mf["mechanisms"] if "shmall" in m["mechanism"]][0]
        got = last_json(r)
        if MODE == "rootless":
            self.assertEqual(sysv["bounds"], "")
            self.assertTrue(any("SysV" in u for u in mf["unbounded"]), mf["unbounded"])
        else:
            self.assertEqual(sysv["value"], 128 * MiB)
            self.assertEqual(got[0], -22, f"capped as for uid 0: {got}")

    def test_tmpfs_sizes_are_scaled_into_the_limit(self):
        r = self.run_sbx(["python3", "-c", TMPFS_SIZES], ["--memory", "128M"])
        self.assertExit(r, 0)
        sizes = last_json(r)
        self.assertLessEqual(sum(sizes.values()), 128 * MiB, f"/tmp + /dev/shm + /out fit the limit: {sizes}")
        tm = [m for m in self.need_trace(r)["enforcement"]["memory_fallback"]["mechanisms"]
              if m["mechanism"] == "tmpfs size options"][0]
        self.assertIs(tm["scaled"], True)
        self.assertEqual(tm["asked_bytes"], 192 * MiB)
        self.assertEqual({m["path"] for m in tm["mounts"]}, {"/tmp", "/dev/shm", "/out"})
        # Defaults that fit stay as they are.
        r = self.run_sbx(["python3", "-c", TMPFS_SIZES], [])
        self.assertExit(r, 0)
        self.assertEqual(last_json(r)["/tmp"], 64 * MiB)

    def test_tmpfs_the_caller_sized_beyond_the_limit_is_refused(self):
        r = self.run_sbx(["sh", "-c", "echo ran"], ["--memory", "128M", "--tmpfs", "/scratch:200M"])
        self.assertExit(r, 125)
        line = self.assertOneSbxLine(r)
        self.assertIn("/scratch 200M (tmpfs)", line)
        self.assertIn("memory limit 128M", line)
        self.assertNotIn(b"ran", r.stdout)

    def test_require_limits_refuses_memory_that_is_not_bounded_in_total(self):
        r = self.run_sbx(["sh", "-c", "echo ran"], ["--profile", "trusted", "--require-limits"])
        self.assertExit(r, 125)
        line = [l for l in r.err.splitlines() if not l.startswith("sbx: warning:")]
        self.assertEqual(len(line), 1, r.describe())
        self.assertIn("cannot enforce memory in total", line[0])
        self.assertNotIn(b"ran", r.stdout)

    def test_reservations_run_and_private_memory_is_bounded(self):
        # RLIMIT_AS would refuse the 64 GiB PROT_NONE reservation Go, JVMs and V8 make.
        r = self.run_sbx(["python3", "-c", RESERVE], ["--memory", "128M"])
        self.assertIn(b"reserved 64G", r.stdout, r.describe())
        self.assertNotIn(b"allocated 512M", r.stdout, "RLIMIT_DATA still bounds real memory\n" + r.describe())
        self.assertIn(b"MemoryError", r.stderr, r.describe())
        applied = self.need_trace(r)["enforcement"]["limits_applied"]["memory"]
        self.assertIn("RLIMIT_DATA", applied["mechanism"])


PAGE = """<!doctype html><html><body><p id="x">static</p>
<script>document.getElementById('x').textContent = 'rendered-by-js-' + (6 * 7);</script></body></html>"""


@unittest.skipUnless(os.access(CHROMIUM, os.X_OK),
                     f"{CHROMIUM} is not installed (Debian package chromium; `make test-deps` installs it)")
class Browser(SbxTestCase):
    """Headless Chromium under the `browser` profile, memory bounded (on this host by the rlimit
    fallback, elsewhere by cgroup v2). No flag beyond --headless --no-sandbox is needed: the
    default seccomp policy lets it run (only clone3 is refused, with ENOSYS, by design, and
    inotify_init: its file watcher logs the refusal and goes on)."""

    def render(self, opts):
        page = self.path("page.html")
        with open(page, "w") as f:
            f.write(PAGE)
        os.chmod(page, 0o644)
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--dump-dom", "file:///in/page.html"]
        return self.run_sbx(cmd, ["--profile", "browser", "--bind", f"{page}:/in/page.html"] + opts, timeout=180)

    def test_chromium_renders_a_page_with_memory_bounded(self):
        r = self.render([])
        self.assertExit(r, 0)
        self.assertIn(b'<p id="x">rendered-by-js-42</p>', r.stdout, "the DOM after its script ran\n" + r.describe())
        t = self.need_trace(r)
        mem = t["enforcement"]["limits_applied"]["memory"]
        self.assertEqual(mem["value"], 1 << 30)
        self.assertTrue(mem["mechanism"].startswith(("cgroup v2", "rlimit RLIMIT_DATA")), mem)
        names = {v.get("name") for v in t["violations"]}
        self.assertLessEqual(names, {"clone3", "inotify_init"}, t["violations"])

    @unittest.skipIf(cgroup_v2_has_controllers(), "the bound checked here is the rlimit fallback's")
    def test_the_bound_bites_chromium(self):
        r = self.render(["--memory", "192M"])
        self.assertNotIn(b"rendered-by-js-42", r.stdout, "192M of private memory is too little for Chromium: "
                         "the limit is real\n" + r.describe())


if __name__ == "__main__":
    unittest.main()
