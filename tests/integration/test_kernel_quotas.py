"""The three per-user kernel quotas a user namespace does not separate (runtime/linux/limits_plan.hpp,
fixed_rlimits): queued signals (RLIMIT_SIGPENDING), POSIX message queue bytes (RLIMIT_MSGQUEUE)
and SysV shared memory locked with SHM_LOCK (RLIMIT_MEMLOCK). The kernel counts a sandbox's use at
every level of its user namespace chain, so, unbounded, it is also the host user's who ran sbx: a
program that filled its quota left none to that user's other processes (root's too for the first
two, when root runs sbx) for as long as it ran. The attack here fills the sandbox's quota and
holds it while the test, as the same host user, queues a signal, opens a message queue, locks a
segment of its own: each must still work. Without the bound they failed with EAGAIN, EMFILE and
ENOMEM (cold runs as root and rootless, and template calls). Seventeen sandboxes at once, each
within its share, held the whole quota between them until sbx held its own soft limit at half
(hold_kernel_quotas): the kernel checks each level of the chain against the limit of the
namespace's creator, so all of sbx's sandboxes together now stop at half. Also the one host-wide
count the default policy allowed a sandbox to take whole, Linux AIO contexts (fs.aio-max-nr):
io_setup is refused. Runs as root and rootless."""
import ctypes
import json
import os
import resource
import select
import subprocess
import sys
import time
import unittest
import uuid

from sbxtest import SBX, SbxTestCase, scaled

HOLD_S = 3
HOST_KEEPS, SHARE = 2, 8  # kHostKeeps, kKernelQuotaShare (limits_plan.hpp)

# Blocks a real-time signal and queues it to itself until the kernel refuses, then holds what it
# queued (all pending) while the host tries.
SIGNAL_FLOOD = r'''
import ctypes, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
class V(ctypes.Union): _fields_ = [("i", ctypes.c_int), ("p", ctypes.c_void_p)]
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
n = 0
while n < 1 << 21 and libc.sigqueue(os.getpid(), signal.SIGRTMIN, V(i=1)) == 0:
    n += 1
print("queued", n, ctypes.get_errno(), time.time_ns(), flush=True)
time.sleep(float(sys.argv[1]))
print("released", time.time_ns(), flush=True)
'''

# Opens message queues (10 messages of 8192 bytes, the default, then ever smaller ones) until the
# kernel refuses even the smallest, then holds them.
QUEUE_FLOOD = r'''
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
class Attr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]
n, size, used = 0, 8192, 0
while size >= 16 and n < 1000:
    a = Attr(0, 10, size, 0)
    if libc.mq_open(f"/flood{n}".encode(), os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(a)) >= 0:
        n, used = n + 1, used + 10 * size
    else:
        size //= 2
print("queues", n, used, ctypes.get_errno(), flush=True)
time.sleep(float(sys.argv[1]))
'''

# Makes SysV segments and locks them in memory (SHM_LOCK), 1 MiB each, then ever smaller ones,
# until the kernel refuses even a page, then holds them (they go with the sandbox's ipc namespace).
LOCK_FLOOD = r'''
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
IPC_PRIVATE, IPC_CREAT, IPC_RMID, SHM_LOCK = 0, 0o1000, 0, 11
n, size, locked = 0, 1 << 20, 0
while size >= 4096 and n < 1000:
    sid = libc.shmget(IPC_PRIVATE, ctypes.c_size_t(size), IPC_CREAT | 0o600)
    if sid >= 0 and libc.shmctl(sid, SHM_LOCK, None) == 0:
        n, locked = n + 1, locked + size
        continue
    err = ctypes.get_errno()
    if sid >= 0:
        libc.shmctl(sid, IPC_RMID, None)
    size //= 2
print("locked", n, locked, err, flush=True)
time.sleep(float(sys.argv[1]))
'''


def host_can_queue_a_signal():
    """As the test's own user, outside any sandbox: one real-time signal queued (and left pending
    in a child that then exits)."""
    code = ("import ctypes, os, signal\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "class V(ctypes.Union): _fields_ = [('i', ctypes.c_int), ('p', ctypes.c_void_p)]\n"
            "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])\n"
            "print(libc.sigqueue(os.getpid(), signal.SIGRTMIN, V(i=1)), ctypes.get_errno())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30).stdout.split()
    return out == ["0", "0"], out


def host_can_open_a_message_queue():
    """As the test's own user: one message queue with the default attributes, removed again."""
    libc = ctypes.CDLL(None, use_errno=True)
    name = f"/sbx-test-{uuid.uuid4().hex[:12]}".encode()
    fd = libc.mq_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600, None)
    err = ctypes.get_errno()
    if fd >= 0:
        os.close(fd)
        libc.mq_unlink(name)
    return fd >= 0, err


def host_can_lock_a_segment():
    """As the test's own user: one page of SysV shared memory locked with SHM_LOCK, removed again
    at once (root locks whatever its quota: CAP_IPC_LOCK)."""
    libc = ctypes.CDLL(None, use_errno=True)
    sid = libc.shmget(0, ctypes.c_size_t(4096), 0o1000 | 0o600)
    if sid < 0:
        return False, ctypes.get_errno()
    ok = libc.shmctl(sid, 11, None) == 0
    err = ctypes.get_errno()
    libc.shmctl(sid, 0, None)
    return ok, err


def own_soft_limit(res):
    """What a sandbox's share is taken from: the soft limit sbx holds (hold_kernel_quotas), at
    most half its hard limit; None where this process's is unlimited (the kernel's default is
    shared out then: not checked here)."""
    soft, hard = resource.getrlimit(res)
    if soft == resource.RLIM_INFINITY or hard == resource.RLIM_INFINITY:
        return None
    return min(soft, hard // HOST_KEEPS)


class KernelQuotas(SbxTestCase):
    def flood(self, res, code, word):
        """sbx run of a flood of quota `res` (the test is skipped where sbx's own is unlimited):
        the flood, its first line (starting with `word`) once it holds what it took, and sbx's
        own soft limit."""
        own = own_soft_limit(res)
        if own is None:
            self.skipTest(f"resource {res} is unlimited here: no quota for a sandbox to take")
        p = subprocess.Popen([SBX, "run", "--", "python3", "-c", code, str(scaled(HOLD_S))], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: p.poll() is None and (p.kill(), p.wait()))
        ready, _, _ = select.select([p.stdout], [], [], scaled(30))
        self.assertTrue(ready, "the flood said nothing")
        line = p.stdout.readline().split()
        self.assertEqual(line[:1], [word], line)
        return p, line, own

    def test_the_program_and_init_have_their_shares_and_the_record_says_so(self):
        # Init too (ChildConfig::init_rlimits): it shares the program's uid, and the kernel checks
        # a queued signal against the receiver's limit, so with sbx's own limit init would let the
        # program queue past its share to init's blocked end signal (seen: 9,652 of 6,022).
        r = self.run_sbx(["sh", "-c", "cat /proc/self/limits; echo init; cat /proc/1/limits"])
        self.assertExit(r, 0)
        rows = {"sigpending": ("Max pending signals", resource.RLIMIT_SIGPENDING),
                "msgqueue": ("Max msgqueue size", resource.RLIMIT_MSGQUEUE),
                "memlock": ("Max locked memory", resource.RLIMIT_MEMLOCK)}
        if any(own_soft_limit(res) is None for _, res in rows.values()):
            self.skipTest("a quota is unlimited here: its share is the kernel's default, not checked")
        want = {k: own_soft_limit(res) // SHARE for k, (_, res) in rows.items()}
        self.assertEqual(self.need_trace(r)["enforcement"]["kernel_quotas"], want)
        program, init = r.out.split("\ninit\n")
        for key, (row, _) in rows.items():
            for limits in (program, init):
                line = next(l for l in limits.splitlines() if l.startswith(row))
                self.assertEqual(line[len(row):].split()[:2], [str(want[key])] * 2, line)

    def test_a_program_cannot_take_its_users_queued_signals(self):
        p, line, own = self.flood(resource.RLIMIT_SIGPENDING, SIGNAL_FLOOD, "queued")
        ok, out = host_can_queue_a_signal()
        self.assertTrue(ok, f"the host user could not queue a signal while the sandbox held {line[1]}: {out}")
        # It queued its share, and no more (less what init or anything else of the sandbox's user
        # had queued meanwhile): the kernel said EAGAIN (11) at the bound.
        self.assertTrue(own // SHARE - 16 <= int(line[1]) <= own // SHARE, line)
        self.assertEqual(line[2], "11", line)
        self.assertEqual(p.wait(timeout=scaled(30)), 0, p.stderr.read())

    def test_seventeen_sandboxes_at_once_cannot_take_their_users_queued_signals(self):
        # Each within its share, seventeen shares are more than the whole quota (16 x 6022 <
        # 96367 < 17 x 6022 here): before sbx held its own soft limit at half, the host user's
        # sigqueue failed with EAGAIN while they held. All sbx's sandboxes together now stop at
        # what sbx holds: the kernel checks the host user's count against it (the limit the
        # namespace's creator had), while the user's own processes check it against theirs.
        held = own_soft_limit(resource.RLIMIT_SIGPENDING)
        if held is None:
            self.skipTest("RLIMIT_SIGPENDING is unlimited here: no quota for a sandbox to take")
        code = SIGNAL_FLOOD.replace("time.sleep(float(sys.argv[1]))", "sys.stdin.read()")
        floods = []
        for _ in range(17):
            p = subprocess.Popen([SBX, "run", "-i", "--", "python3", "-c", code], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.addCleanup(lambda p=p: p.poll() is None and (p.kill(), p.wait()))
            floods.append(p)
        queued = []
        for p in floods:
            ready, _, _ = select.select([p.stdout], [], [], scaled(60))
            self.assertTrue(ready, "a flood said nothing")
            line = p.stdout.readline().split()
            self.assertEqual(line[:1], ["queued"], (line, p.stderr.read() if p.poll() is not None else ""))
            queued.append(int(line[1]))
        ok, out = host_can_queue_a_signal()
        self.assertTrue(ok, f"the host user could not queue a signal while 17 sandboxes held {sum(queued)}: {out}")
        self.assertLessEqual(sum(queued), held, queued)
        self.assertTrue(all(n <= held // SHARE for n in queued), queued)
        for p in floods:
            p.stdin.close()
            self.assertEqual(p.wait(timeout=scaled(30)), 0, p.stderr.read())

    def test_a_program_cannot_take_its_users_message_queues(self):
        p, line, own = self.flood(resource.RLIMIT_MSGQUEUE, QUEUE_FLOOD, "queues")
        ok, err = host_can_open_a_message_queue()
        self.assertTrue(ok, f"the host user could not open a message queue while the sandbox held {line[2]} bytes "
                            f"of them: errno {err}")
        # What its queues hold stays within its share (their bookkeeping counts too), and it was
        # stopped by the quota (EMFILE, 24), not by the number of queues.
        self.assertLessEqual(int(line[2]), own // SHARE, line)
        self.assertEqual(line[3], "24", line)
        p.wait(timeout=scaled(30))

    def test_a_program_cannot_take_its_users_locked_memory(self):
        p, line, own = self.flood(resource.RLIMIT_MEMLOCK, LOCK_FLOOD, "locked")
        ok, err = host_can_lock_a_segment()
        self.assertTrue(ok, f"the host user could not lock a page while the sandbox held {line[2]} bytes locked: "
                            f"errno {err}")
        # Within its share, stopped by the quota (ENOMEM, 12) at its last page.
        self.assertLessEqual(int(line[2]), own // SHARE, line)
        self.assertGreater(int(line[2]), own // SHARE - 4096 * 2, line)
        self.assertEqual(line[3], "12", line)
        p.wait(timeout=scaled(30))

    def test_a_program_cannot_take_the_hosts_aio_contexts(self):
        # Linux AIO contexts count against fs.aio-max-nr, one number for the whole host: a review
        # took all 65536 from a sandbox, and host root's io_setup failed with EAGAIN. The default
        # policy answers io_setup with ENOSYS (38), as a kernel without AIO does; the record
        # lists the refusal.
        code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nctx = ctypes.c_ulong(0)\n"
                "print(libc.syscall(206, 4096, ctypes.byref(ctx)), ctypes.get_errno())\n")  # io_setup, x86_64
        r = self.run_sbx(["python3", "-c", code])
        self.assertExit(r, 0)
        self.assertEqual(r.out.split(), ["-1", "38"], r.describe())
        names = [v.get("name") for v in self.need_trace(r)["violations"] if v["kind"] == "seccomp"]
        self.assertIn("io_setup", names)

    def test_a_template_call_cannot_take_its_users_queued_signals(self):
        # A template's calls take their rlimits from the job (warm_template.py, _set_rlimits), not
        # from init: the same bound, checked through the MCP server. The call's output comes at its
        # end, so the host tries over and over until then, and at least once while the call held.
        own = own_soft_limit(resource.RLIMIT_SIGPENDING)
        if own is None:
            self.skipTest("RLIMIT_SIGPENDING is unlimited here: no quota for a sandbox to take")
        from test_mcp import Server
        from test_mcp_warm import LIMITS
        profile = self.path("template.json")
        with open(profile, "w") as f:
            json.dump({"limits": LIMITS, "network": {"mode": "none"},
                       "warm": {"interpreter": "python3", "preload": ["json"], "mode": "template"}}, f)
        s = Server(self, ["--pool", "1", "--profile", profile])
        self.addCleanup(s.close)
        code = SIGNAL_FLOOD.replace("float(sys.argv[1])", str(scaled(HOLD_S)))
        call = s.start("tools/call", {"name": "run_code", "arguments": {"language": "python", "code": code}})
        tries = []
        deadline = time.monotonic() + scaled(60)
        while not select.select([s.p.stdout], [], [], 0)[0] and not s.buf and time.monotonic() < deadline:
            tries.append((time.time_ns(), host_can_queue_a_signal()))
            time.sleep(0.02)
        r = s.wait_for(call, timeout=60)["result"]["structuredContent"]
        self.assertEqual(r["status"], "ok", r)
        queued, released = r["stdout"].splitlines()
        queued, released = queued.split(), int(released.split()[1])
        during = [t for t in tries if int(queued[3]) <= t[0] <= released]
        self.assertTrue(during, f"the host never tried while the call held its signals ({len(tries)} tries)")
        self.assertEqual([t for t in during if not t[1][0]], [], f"the call held {queued[1]} signals")
        # The calls of the template, its pid 1s and the template itself count together (man sbx-mcp).
        self.assertTrue(own // SHARE - 16 <= int(queued[1]) <= own // SHARE, r["stdout"])
        self.assertEqual(queued[2], "11", r["stdout"])


if __name__ == "__main__":
    unittest.main()
