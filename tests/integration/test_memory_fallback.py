"""The memory limit where cgroup v2 cannot bound it (the rlimit fallback): RLIMIT_DATA for private
memory, the tmpfs sizes summed against the limit, no file-size limit (big files on rw binds work),
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

# SysV message queues and semaphores: kernel memory no rlimit counts (memory_fallback.hpp).
SYSV_IPC = r"""
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
queues = 0
while queues < 1000 and libc.msgget(0, 0o1600) >= 0:
    queues += 1
sets = 0
while sets < 100 and libc.semget(0, 32000, 0o1600) >= 0:
    sets += 1
print(json.dumps([queues, sets]))
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
    def test_a_file_bigger_than_the_limit_can_be_written_to_a_rw_bind(self):
        # RLIMIT_FSIZE at the memory limit used to kill this (SIGXFSZ): a file on disk costs no RAM.
        # 100 MB under --memory 64M, sparse (fast) and a real 1 MB write past the limit's offset.
        d = self.path("rw")
        os.mkdir(d)
        os.chmod(d, 0o777)
        r = self.run_sbx(["sh", "-c", "truncate -s 100M /w/sparse && dd if=/dev/zero of=/w/real bs=1M count=1 "
                                      "seek=99 status=none && echo written"],
                         ["--memory", "64M", "--bind", d + ":/w:rw"])
        self.assertExit(r, 0)
        self.assertIn("written", r.out)
        self.assertEqual(os.path.getsize(os.path.join(d, "sparse")), 100 * MiB)
        self.assertEqual(os.path.getsize(os.path.join(d, "real")), 100 * MiB)
        mf = self.need_trace(r)["enforcement"]["memory_fallback"]
        self.assertNotIn("rlimit RLIMIT_FSIZE", [m["mechanism"] for m in mf["mechanisms"]])
        # What RLIMIT_FSIZE capped one at a time, memfds, is named as unbounded, and why.
        self.assertIs(mf["bounded_in_total"], False)
        self.assertTrue(any(u.startswith("memfds: no RLIMIT_FSIZE") for u in mf["unbounded"]), mf["unbounded"])

    def test_sysv_shm_is_capped_by_the_memory_limit(self):
        r = self.run_sbx(["python3", "-c", SYSV], ["--memory", "128M"])
        self.assertExit(r, 0)
        got = last_json(r)
        self.assertEqual(got[0], -22, f"a 256M segment exceeds shmmax: {got}")
        self.assertGreaterEqual(got[1], 0)
        self.assertGreaterEqual(got[2], 0)
        self.assertEqual(got[3], -28, f"the third 48M segment exceeds shmall (128M in total): {got}")

    def test_sysv_message_queues_and_semaphores_are_capped_by_the_memory_limit(self):
        # Before: msgmni 32000 queues of 16384 empty messages (~64 bytes of slab each) let one 32M
        # run hold 180 MB (and up to ~32 GiB), 60 semaphore sets of 32000 another 123 MB.
        r = self.run_sbx(["python3", "-c", SYSV_IPC], ["--memory", "32M"])
        self.assertExit(r, 0)
        queues, sets = last_json(r)
        self.assertEqual(queues, 15, "32M / (16384 messages of at most 129 bytes each)")
        self.assertEqual(sets, 2, "32M / 2 / 256 = 65536 semaphores: two sets of 32000")
        mf = self.need_trace(r)["enforcement"]["memory_fallback"]
        sysv = [m for m in mf["mechanisms"] if "shmall" in m["mechanism"]][0]
        self.assertIn("msgmni", sysv["mechanism"])
        self.assertIn("message queues", sysv["bounds"])

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


WRAPPER = "/usr/bin/chromium"


@unittest.skipUnless(os.access(WRAPPER, os.X_OK) and os.path.isdir("/etc/chromium.d"),
                     f"Debian's chromium wrapper ({WRAPPER}, /etc/chromium.d) is not installed (package chromium)")
class BrowserAsInstalled(SbxTestCase):
    def test_the_browser_profile_runs_debians_chromium_wrapper(self):
        # The wrapper sources /etc/chromium.d, and fontconfig reads /etc/fonts: both bound
        # read-only where the host has them (mounts.cpp kEtcEntries). Without them the wrapper
        # failed and sans-serif rendered as serif.
        r = self.run_sbx(["sh", "-c", "ls /etc/fonts/fonts.conf /etc/chromium.d >/dev/null && "
                                      "exec chromium --headless --no-sandbox --dump-dom 'data:text/html,<p>hi-42</p>'"],
                         ["--profile", "browser"], timeout=180)
        self.assertExit(r, 0)
        self.assertIn(b"<p>hi-42</p>", r.stdout, r.describe())


if __name__ == "__main__":
    unittest.main()
