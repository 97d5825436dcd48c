"""Limits on a host without usable cgroup v2 controllers: the degradation is
reported honestly in the trace, the rlimit stand-ins actually bite, and --require-limits refuses.
Real cgroup v2 enforcement is proven in the qemu guest (tests/vm)."""
import json
import os
import unittest

from sbxtest import SbxTestCase

HYBRID_NOTE = None


def cgroup_v2_has_controllers():
    """True when this host's cgroup v2 offers memory+pids+cpu to us (then these tests don't apply)."""
    try:
        with open("/proc/self/cgroup") as f:
            path = next((l[3:].strip() for l in f if l.startswith("0::")), None)
        mount = None
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if parts[2] == "cgroup2":
                    mount = parts[1]
                    break
        if not mount or path is None:
            return False
        with open(os.path.join(mount, path.lstrip("/"), "cgroup.controllers")) as f:
            ctl = f.read().split()
        return all(c in ctl for c in ("memory", "pids", "cpu"))
    except OSError:
        return False


@unittest.skipIf(cgroup_v2_has_controllers(),
                 "this host's cgroup v2 offers memory/pids/cpu: enforcement is covered by tests/vm and the trace shows cgroup v2")
class DegradedLimits(SbxTestCase):
    def test_trace_says_which_limit_is_enforced_how(self):
        r = self.run_sbx(["true"], ["--memory", "256M", "--pids", "32", "--cpus", "0.5", "--cpu-time", "5s",
                                    "--timeout", "20s"])
        self.assertExit(r, 0)
        t = self.need_trace(r)
        enf = t["enforcement"]
        self.assertTrue(enf["cgroup"].startswith("unavailable"), enf["cgroup"])
        applied = enf["limits_applied"]
        self.assertEqual(applied["memory"]["mechanism"], "rlimit RLIMIT_DATA, tmpfs sizes, ipc namespace shmall")
        self.assertIs(applied["memory"]["degraded"], True)
        self.assertEqual(applied["memory"]["value"], 256 << 20)
        self.assertEqual(applied["pids"]["mechanism"], "rlimit RLIMIT_NPROC")
        self.assertEqual(applied["cpu_time"]["mechanism"], "rlimit RLIMIT_CPU")
        self.assertIn("timerfd", applied["timeout"]["mechanism"])
        self.assertIs(applied["timeout"]["degraded"], False)
        not_applied = {e["limit"]: e for e in enf["limits_not_applied"]}
        self.assertIn("cpus", not_applied)
        self.assertIn("cgroup", not_applied["cpus"]["reason"])
        # One warning line on stderr, naming what is missing and what is degraded.
        warnings = [l for l in r.err.splitlines() if l.startswith("sbx: warning:")]
        self.assertEqual(len(warnings), 1, r.describe())
        self.assertIn("cpus", warnings[0])
        self.assertIn("memory", warnings[0])

    def test_memory_rlimit_bites(self):
        alloc = "b = bytearray(200 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); print('allocated')"
        r = self.run_sbx(["python3", "-c", alloc], ["--memory", "96M"])
        self.assertNotEqual(r.rc, 0, r.describe())
        self.assertIn(b"MemoryError", r.stderr, r.describe())
        r = self.run_sbx(["python3", "-c", alloc], ["--memory", "1G"])
        self.assertExit(r, 0, "the same allocation fits a bigger limit")
        self.assertIn(b"allocated", r.stdout)

    def test_pids_rlimit_bites(self):
        spawn = "n=0; for i in 1 2 3 4 5 6 7 8 9 10; do sleep 2 & n=$((n+1)); done; echo spawned; kill $(jobs -p) 2>/dev/null; true"
        r = self.run_sbx(["sh", "-c", spawn], ["--pids", "4"])
        self.assertIn(b"fork", r.stderr.lower(), "forks past the limit fail inside\n" + r.describe())
        r = self.run_sbx(["sh", "-c", spawn], ["--pids", "64"])
        self.assertExit(r, 0)
        self.assertNotIn(b"fork", r.stderr.lower(), r.describe())

    def test_cpu_time_rlimit_bites(self):
        r = self.run_sbx(["sh", "-c", "while :; do :; done"], ["--cpu-time", "1s", "--timeout", "20s"], timeout=30)
        t = self.need_trace(r)
        self.assertEqual(t["result"]["status"], "timeout", r.describe())
        self.assertEqual(t["result"]["reason"], "cpu")
        self.assertExit(r, 124)
        self.assertLess(t["usage"]["wall_ms"], 15000, "killed by the CPU budget, not the wall-time limit")

    def test_require_limits_refuses_before_running(self):
        marker = self.path("ran")
        r = self.run_sbx(["sh", "-c", "echo ran"], ["--require-limits", "--cpus", "1"])
        self.assertExit(r, 125)
        line = [l for l in r.err.splitlines() if not l.startswith("sbx: warning:")]
        self.assertEqual(len(line), 1, r.describe())
        self.assertIn("--require-limits", line[0])
        self.assertIn("cpus", line[0])
        self.assertNotIn(b"ran", r.stdout)
        t = self.need_trace(r)
        self.assertEqual(t["result"]["status"], "setup_error")
        self.assertEqual(t["result"]["error"]["stage"], "limits")
        self.assertFalse(os.path.exists(marker))

    def test_require_limits_accepts_what_can_be_enforced(self):
        # No memory limit and no CPU share: pids and timeout have bounds that hold in total here
        # (memory in the fallback does not: test_memory_fallback).
        prof = self.path("nomem.json")
        with open(prof, "w") as f:
            json.dump({"limits": {"memory_bytes": None, "cpus": None, "pids": 64}}, f)
        r = self.run_sbx(["true"], ["--profile", prof, "--require-limits"])
        self.assertExit(r, 0)

if __name__ == "__main__":
    unittest.main()
