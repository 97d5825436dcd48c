"""sbx doctor names the common host blockers, each in a row of its own with the live value
(runtime/linux/host_blockers.hpp; each detection is unit-tested on fixture trees in
tests/unit/test_host_blockers.cpp). Here: the rows exist on this host, agree with /proc/sys, and
doctor changes nothing. And the "sandbox" row: doctor runs a throwaway sandbox, so that a host
where every run fails (a container's masked /proc) is not reported green."""
import json
import os
import subprocess
import unittest

from sbxtest import MODE, SbxTestCase, ledger_lines, sbx

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


# A masked /proc as container runtimes make it: /dev/null bound over a /proc file.
MASKED_PROC = """set -e
for p in /proc/keys /proc/timer_list /proc/kcore; do [ -e $p ] && {{ mount --bind /dev/null $p; echo "covered $p"; break; }}; done
set +e
"$SBX" run -- true; echo "run exit $?"
"$SBX" doctor --json > {doc}; echo "doctor exit $?"
"""


class DoctorSandbox(SbxTestCase):
    def test_sandbox_row_runs_a_throwaway_sandbox_outside_the_ledger(self):
        state = os.environ["SBX_STATE_DIR"]
        before = len(ledger_lines(state))
        r = sbx(["doctor", "--json"], timeout=60)
        self.assertEqual(r.rc, 0, r.describe())
        row = {c["name"]: c for c in json.loads(r.out)["checks"]}["sandbox"]
        self.assertEqual((row["status"], row["required"]), ("ok", True), row)
        self.assertIn("/bin/true", row["detail"])
        self.assertEqual(len(ledger_lines(state)), before, "doctor's throwaway run landed in the ledger")

    @unittest.skipIf(MODE != "root", "needs a mount over /proc in a mount namespace of the test's own")
    def test_masked_proc_fails_the_run_with_the_fix_and_the_doctor_row(self):
        """The host's mounts are untouched: the cover lives in a private mount namespace (unshare -m)."""
        doc = self.path("doctor.json")
        p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", MASKED_PROC.format(doc=doc)],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ, SBX=os.environ["SBX_BIN"]))
        out, err = p.stdout, p.stderr
        self.assertIn("covered /proc/", out, out + err)
        covered = out.split("covered ")[1].split()[0]
        self.assertIn("run exit 125", out, out + err)
        line = [l for l in err.splitlines() if "proc on /proc" in l]
        self.assertTrue(line, err)
        for words in (covered, "procMount: Unmasked", "--security-opt systempaths=unconfined", "deploy/README.md",
                      "--security-opt unmask=ALL", "seccomp=deploy/seccomp-sbx.json"):
            self.assertIn(words, line[0])
        self.assertIn("doctor exit 1", out, out + err)
        with open(doc) as f:
            row = {c["name"]: c for c in json.load(f)["checks"]}["sandbox"]
        self.assertEqual(row["status"], "missing", row)
        self.assertIn("proc on /proc", row["detail"])
        self.assertIn("procMount: Unmasked", row["detail"])
        self.assertIn("--security-opt unmask=ALL", row["detail"])


# No procfs at /proc at all, as under `bwrap --bind ROOT /` without --proc or in a bare chroot: an
# empty tmpfs where /proc was, in a mount namespace of the test's own.
NO_PROC = """mount -t tmpfs none /proc && echo "proc hidden"
"$SBX" run -- true; echo "run exit $?"
"$SBX" doctor --json > {doc}; echo "doctor exit $?"
"""


class DoctorNoProc(SbxTestCase):
    @unittest.skipIf(MODE != "root", "needs a mount over /proc in a mount namespace of the test's own")
    def test_no_proc_fails_the_run_with_the_fix_and_the_doctor_row(self):
        doc = self.path("doctor.json")
        p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", NO_PROC.format(doc=doc)],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ, SBX=os.environ["SBX_BIN"]))
        out, err = p.stdout, p.stderr
        self.assertIn("proc hidden", out, out + err)
        self.assertIn("run exit 125", out, out + err)
        # One line: what failed (a /proc path missing) and how to fix it (mount one; bwrap's --proc).
        line = [l for l in err.splitlines() if "/proc/" in l and "No such file" in l]
        self.assertTrue(line, err)
        for words in ("no /proc is mounted where sbx runs", "bwrap: --proc /proc", "procMount: Unmasked"):
            self.assertIn(words, line[0])
        self.assertIn("doctor exit 1", out, out + err)
        with open(doc) as f:
            row = {c["name"]: c for c in json.load(f)["checks"]}["sandbox"]
        self.assertEqual(row["status"], "missing", row)
        self.assertIn("no /proc is mounted where sbx runs", row["detail"])
