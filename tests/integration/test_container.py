"""sbx in a container (runtime/linux/cgroup_ns.hpp, deploy/): `sbx cgroup-init`'s refusals where it has
no business, the doctor's cgroupns row, the trace's host.cgroup.namespace_root, and deploy/test.sh
(the container recipe's root assembled without a registry, sbx run in it in new namespaces).
That cgroup-init makes limits real in a cgroup namespace whose root holds processes needs cgroup v2
controllers, which this host lacks: tests/vm/guest-tests.sh proves it in the qemu guest."""
import json
import os
import subprocess

from sbxtest import MODE, SbxTestCase, sbx

# The suite runs from a copy: the repository comes from run.sh (SBX_REPO).
REPO = os.environ.get("SBX_REPO") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cgroup2_mount():
    with open("/proc/self/mounts") as f:
        for line in f:
            w = line.split()
            if len(w) > 2 and w[2] == "cgroup2":
                return w[1]
    return ""


class CgroupInit(SbxTestCase):
    def test_nothing_to_do_outside_a_cgroup_namespace_and_creates_nothing(self):
        mount = cgroup2_mount()
        before = sorted(os.listdir(mount)) if mount else []
        r = sbx(["cgroup-init"])
        self.assertExit(r, 0, "not in a container: nothing to do, said on stdout (an entrypoint runs it anywhere)")
        self.assertEqual(r.err, "")
        self.assertTrue(r.out.startswith("nothing to do: "), r.out)
        self.assertIn("real root", r.out)
        j = json.loads(sbx(["cgroup-init", "--json"]).out)
        self.assertEqual(j["moved"], [])
        self.assertIn("real root", j["nothing_to_do"])
        if mount:
            self.assertEqual(sorted(os.listdir(mount)), before, "cgroup-init created something in the host's hierarchy")

    def test_bad_leaf_is_a_usage_error(self):
        for leaf in ("../escape", "a/b", "sbx", "", "x\x1b[31m"):
            r = sbx(["cgroup-init", "--leaf", leaf])
            self.assertExit(r, 125, f"--leaf {leaf!r}")
            line = self.assertOneSbxLine(r)
            self.assertIn("invalid leaf", line)
            self.assertNotIn("\x1b", r.err, "the caller's bytes reach the terminal escaped")

    def test_doctor_has_a_cgroupns_row_after_cgroup(self):
        r = sbx(["doctor", "--json"])
        doc = json.loads(r.out)
        names = [c["name"] for c in doc["checks"]]
        self.assertIn("cgroupns", names, r.out)
        self.assertEqual(names.index("cgroupns"), names.index("cgroup") + 1)
        row = doc["checks"][names.index("cgroupns")]
        self.assertFalse(row["required"])
        # This host's cgroup2 shows its real root: not a container's namespace.
        self.assertEqual(row["status"], "ok", row)
        table = sbx(["doctor"]).out
        self.assertIn("cgroupns", table)

    def test_trace_records_the_namespace_root(self):
        r = self.run_sbx(["true"])
        self.assertExit(r, 0)
        cg = self.need_trace(r)["host"]["cgroup"]
        self.assertIn("namespace_root", cg)
        self.assertIsNone(cg["namespace_root"], "this host's cgroup2 mount shows the real root")


class DeployRecipe(SbxTestCase):
    def test_recipe_root_runs_sbx_container_like(self):
        if MODE != "root":
            self.skipTest("deploy/test.sh needs root: unshare of mount/pid/cgroup namespaces, pivot_root")
        p = subprocess.run([os.path.join(REPO, "deploy", "test.sh"), os.environ["SBX_BIN"]],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        out = p.stdout.decode(errors="replace")
        if p.returncode == 77:
            self.skipTest(out.strip().splitlines()[-1])
        self.assertEqual(p.returncode, 0, out)
        self.assertIn("hello from the sandbox", out)
        self.assertTrue(out.rstrip().endswith("PASS"), out)
