"""sbx doctor names the common host blockers, each in a row of its own with the live value
(runtime/linux/host_blockers.hpp; each detection is unit-tested on fixture trees in
tests/unit/test_host_blockers.cpp). Here: the rows exist on this host, agree with /proc/sys, and
doctor changes nothing."""
import json
import os

from sbxtest import MODE, SbxTestCase, sbx

ROWS = ["apparmor-userns", "max-user-namespaces", "userns-clone", "cgroup2", "subid", "user-manager"]


def sysctl(path):
    try:
        with open("/proc/sys/" + path) as f:
            return f.read().strip()
    except OSError:
        return None


class DoctorBlockers(SbxTestCase):
    def test_rows_with_the_live_values(self):
        before = {p: sysctl(p) for p in ("user/max_user_namespaces", "kernel/unprivileged_userns_clone",
                                         "kernel/apparmor_restrict_unprivileged_userns")}
        r = sbx(["doctor", "--json"], timeout=60)
        self.assertIn(r.rc, (0, 1), r.describe())
        doc = json.loads(r.out)
        checks = {c["name"]: c for c in doc["checks"]}
        for name in ROWS:
            self.assertIn(name, checks, r.out)
            self.assertFalse(checks[name]["required"], name)
        self.assertIn("user.max_user_namespaces=" + before["user/max_user_namespaces"],
                      checks["max-user-namespaces"]["detail"])
        if before["kernel/unprivileged_userns_clone"] is None:
            self.assertIn("not present", checks["userns-clone"]["detail"])
        else:
            self.assertIn("=" + before["kernel/unprivileged_userns_clone"], checks["userns-clone"]["detail"])
        if before["kernel/apparmor_restrict_unprivileged_userns"] is None:
            self.assertIn("not present", checks["apparmor-userns"]["detail"])
        with open("/proc/self/mounts") as f:
            has_v2 = any(l.split()[2] == "cgroup2" for l in f if len(l.split()) > 2)
        self.assertEqual(checks["cgroup2"]["status"], "ok" if has_v2 else "missing", checks["cgroup2"])
        if MODE == "rootless":
            self.assertTrue(checks["subid"]["detail"].startswith("not needed"), checks["subid"])
        else:
            self.assertEqual(checks["user-manager"]["detail"], "root: run cgroups need no delegation")
        # Only read: every knob as it was.
        self.assertEqual(before, {p: sysctl(p) for p in before})
        # The table shows the same rows, each problem with its fix.
        t = sbx(["doctor"], timeout=60)
        for name in ROWS:
            self.assertIn(name, t.out)
