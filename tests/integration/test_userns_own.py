"""sbx as root of a user namespace (a pod with `hostUsers: false`, a podman --uidmap container):
the sandbox's range is taken from the ids that namespace maps, never including its own root, and
where it maps no other id, a single-id map that the record and stderr name
(runtime/linux/userns.hpp; the planner is unit-tested in tests/unit/test_userns.cpp). The
namespaces are made by in_userns.py and vanish with the test's processes. Before this, every run
there failed: `write '0 1879048192 65536' to uid_map: Operation not permitted`."""
import json
import os
import sys
import unittest

from sbxtest import MODE, SBX, SbxTestCase, Result

import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# Exactly 65536 ids, as a pod gets: its root is host root (so that the harness's files stay
# reachable), its other ids an unprivileged host range.
POD = "0 0 1,1 2000001 65535"
SINGLE = "0 0 1"  # `unshare -r`: nothing but our own id


def in_userns(id_map, args, timeout=60, env=None):
    argv = [sys.executable, os.path.join(HERE, "in_userns.py"), id_map, "--", SBX] + list(args)
    start = time.monotonic()
    p = subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL,
                       env=dict(os.environ, **(env or {})))
    return Result(argv, p.returncode, p.stdout, p.stderr, time.monotonic() - start)


@unittest.skipIf(MODE != "root", "making a user namespace with a range of ids needs root")
class OwnUserNamespace(SbxTestCase):
    def traced_run(self, id_map, opts, cmd):
        trace = self.path(f"trace-{len(os.listdir(self.tmp))}.json")
        r = in_userns(id_map, ["run", "--trace-file", trace] + list(opts) + ["--"] + list(cmd))
        self.assertEqual(r.rc, 0, r.describe())
        with open(trace) as f:
            return r, json.load(f)["enforcement"]["identity"]

    def test_pod_with_65536_ids_maps_the_sandbox_to_its_ids_but_root(self):
        r, ident = self.traced_run(POD, [], ["id"])
        self.assertIn("uid=0(root) gid=0(root)", r.out)
        self.assertEqual(r.err, "", r.describe())  # no warning: a range of its own
        self.assertEqual(ident["mode"], "root")
        self.assertEqual(ident["range_source"], "own user namespace (65535 ids)")
        self.assertEqual(ident["uid_map"], [{"inside": 0, "outside": 1, "count": 65535}])
        self.assertEqual(ident["gid_map"], [{"inside": 0, "outside": 1, "count": 65535}])
        # A file written through a :rw bind lands as the sandbox root's host id: 2000001, not 0.
        work = self.path("work")
        os.mkdir(work)
        os.chown(work, 2000001, 2000001)
        r, _ = self.traced_run(POD, ["--bind", work + ":/work:rw"], ["sh", "-c", "echo hi > /work/f && id -u"])
        st = os.stat(os.path.join(work, "f"))
        self.assertEqual((st.st_uid, st.st_gid), (2000001, 2000001))
        # An idmapped bind cannot be made there (the host's namespace owns the file system): refused
        # with what to do instead, never silently a plain bind.
        r = in_userns(POD, ["run", "--bind", work + ":/w:rw,idmap", "--", "true"])
        self.assertEqual(r.rc, 125, r.describe())
        self.assertIn("drop idmap and chown it to this namespace's uid 1", r.err)
        # --uid past the 65535 ids: refused with the reason.
        r = in_userns(POD, ["run", "--uid", "65535", "--", "true"])
        self.assertEqual(r.rc, 125, r.describe())
        self.assertIn("below 65535", r.err)

    def test_a_tenant_in_a_pod_too_small_for_its_slice(self):
        # Slot N needs (N+1) x 65536 ids; the pod has 65536. "required": refused, naming what it needs.
        # "preferred": runs in the pod's own range and the record says the ids are shared, and why.
        tenants = self.path("tenants")
        os.mkdir(tenants)
        with open(os.path.join(tenants, "strict.json"), "w") as f:
            json.dump({"id_slot": 1}, f)
        with open(os.path.join(tenants, "lenient.json"), "w") as f:
            json.dump({"id_slot": 2, "separate_ids": "preferred"}, f)
        env = {"SBX_TENANTS_DIR": tenants}
        r = in_userns(POD, ["run", "--tenant", "strict", "--", "true"], env=env)
        self.assertEqual(r.rc, 125, r.describe())
        self.assertIn("tenant id slot 1 needs 131072 ids", r.err)
        trace = self.path("tenant-trace.json")
        r = in_userns(POD, ["run", "--tenant", "lenient", "--trace-file", trace, "--", "id", "-u"], env=env)
        self.assertEqual((r.rc, r.out.strip()), (0, "0"), r.describe())
        with open(trace) as f:
            t = json.load(f)
        self.assertEqual(t["enforcement"]["identity"]["uid_map"], [{"inside": 0, "outside": 1, "count": 65535}])
        sep = t["tenant"]["separation"]
        self.assertIs(sep["ids"], False)
        self.assertIn("no room for the tenant's slice", sep["why"])
        self.assertIn("needs 196608 ids", sep["why"])

    def test_single_id_namespace_runs_with_a_single_id_map_and_says_so(self):
        r, ident = self.traced_run(SINGLE, [], ["sh", "-c", "id -u; echo hi > /tmp/f && cat /tmp/f"])
        self.assertEqual(r.out.split(), ["0", "hi"], r.describe())
        self.assertEqual(ident["mode"], "rootless")
        self.assertEqual(ident["range_source"], "single id: own user namespace maps no other id")
        self.assertEqual(ident["uid_map"], [{"inside": 0, "outside": 0, "count": 1}])
        warn = [l for l in r.err.splitlines() if "single-id map" in l]
        self.assertEqual(len(warn), 1, r.describe())
        self.assertIn("--uidmap", warn[0])

    def test_single_id_namespace_drops_the_containers_groups_where_it_may(self):
        """A container's root may hold supplementary groups (host gid 4242 here) that reach host
        files by group. The single-id map once kept them for the program, as rootless; they are
        dropped wherever our namespace allows setgroups, and kept, said on stderr, only where it
        denies it (unshare -r), where nothing in that namespace could drop them anyway."""
        secret = self.path("group-only")
        with open(secret, "w") as f:
            f.write("group-secret\n")
        os.chown(secret, 12345, 4242)
        os.chmod(secret, 0o040)
        run = ["run", "--bind", secret + ":/g", "--", "sh", "-c", "cat /g; echo rc=$?"]
        r = in_userns(SINGLE, run, env={"IN_USERNS_GROUPS": "4242"})
        self.assertEqual(r.rc, 0, r.describe())
        self.assertNotIn("group-secret", r.out, r.describe())
        self.assertIn("rc=1", r.out, r.describe())
        self.assertNotIn("groups stay", r.err, r.describe())
        r = in_userns(SINGLE, run, env={"IN_USERNS_GROUPS": "4242", "IN_USERNS_SETGROUPS": "deny"})
        self.assertEqual(r.rc, 0, r.describe())
        self.assertIn("group-secret", r.out, "setgroups denied: the groups cannot be dropped")
        self.assertIn("supplementary groups stay", r.err, r.describe())

    def test_doctor_reports_what_runs_there(self):
        for id_map, status, words in ((POD, "ok", "own user namespace (65535 ids)"),
                                      (SINGLE, "degraded", "single-id map")):
            r = in_userns(id_map, ["doctor", "--json"], timeout=90)
            self.assertIn(r.rc, (0, 1), r.describe())
            doc = json.loads(r.out)
            rows = {c["name"]: c for c in doc["checks"]}
            self.assertEqual(rows["identity"]["status"], status, rows["identity"])
            self.assertIn(words, rows["identity"]["detail"])
            if status != "ok":
                self.assertIn("--uidmap", rows["identity"]["hint"])
            # The throwaway run works there, and doctor says so only because it does.
            self.assertEqual(rows["sandbox"]["status"], "ok", rows["sandbox"])


if __name__ == "__main__":
    unittest.main()
