"""The image name `host` is reserved (issue 30, item 10): it means the host's own root, so no
stored image may take it (with any tag), and a tenant's "images": ["host"] admits the host root
only, never an image that a store from before the reservation holds under that name. Root and
rootless."""
import json
import os

from sbxtest import MODE, SbxTestCase, busybox_digest, busybox_tree, sbx

ROOT = MODE == "root"


class ReservedHostName(SbxTestCase):
    def test_an_image_cannot_be_named_host(self):
        busybox_digest(self)
        for name in ("host", "host:latest", "host:v1"):
            r = sbx(["image", "import", busybox_tree(), "--name", name, "--quiet"], timeout=120)
            self.assertExit(r, 125, name)
            line = self.assertOneSbxLine(r)
            self.assertIn("reserved", line)
            self.assertIn("host's own root", line)
        ls = sbx(["image", "ls", "--json"])
        self.assertExit(ls, 0)
        self.assertNotIn("host:", ls.out)

    def test_a_tenants_host_admits_the_host_root_only(self):
        digest = busybox_digest(self)
        # A store from before the reservation: busybox also named host:latest.
        names = os.path.join(os.environ["SBX_STATE_DIR"], "data", "images", "names")
        legacy = os.path.join(names, "host:latest")
        with open(legacy, "w") as f:
            f.write(digest + "\n")
        self.addCleanup(os.unlink, legacy)
        tenants = self.path("tenants")
        os.mkdir(tenants)
        with open(os.path.join(tenants, "T.json"), "w") as f:
            json.dump({"id_slot": 4, "separate_ids": "required" if ROOT else "preferred", "images": ["host"]}, f)
        env = dict(os.environ, SBX_TENANTS_DIR=tenants)
        # busybox's own ls prints its usage with "BusyBox": what ran if the image got through.
        r = sbx(["run", "--tenant", "T", "--image", "host:latest", "--", "/bin/ls", "--help"], env=env, timeout=60)
        self.assertExit(r, 125, "an image named host:latest is not the host root")
        self.assertNotIn("BusyBox", r.out + r.err)
        self.assertIn("host", self.assertOneSbxLine(r))
        r = sbx(["run", "--tenant", "T", "--", "true"], env=env, timeout=60)
        self.assertExit(r, 0, "the host root itself is admitted")
