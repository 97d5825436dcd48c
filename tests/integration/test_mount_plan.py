"""The trace's image.mounts is the whole mount plan init ran (runtime/linux/mount_plan.hpp): checked
against the sandbox's own /proc/self/mountinfo, so the record cannot list what was not mounted or
leave out what was."""
import unittest

from sbxtest import SbxTestCase, busybox_digest


def parse_mountinfo(text):
    """{mount point: (per-mount options, fstype, super options)}; the last mount at a path wins."""
    out = {}
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        f = left.split()
        r = right.split()
        point = f[4].replace("\\040", " ")
        out[point] = (set(f[5].split(",")), r[0], set(r[2].split(",")) if len(r) > 2 else set())
    return out


class MountPlanInTrace(SbxTestCase):
    def check_against_mountinfo(self, t, info):
        ops = t["image"]["mounts"]
        self.assertTrue(all("op" in m for m in ops), ops)
        for m in ops:
            if m["op"] == "tmpfs":
                self.assertIn(m["dst"], info, m)
                opts, fstype, sopts = info[m["dst"]]
                self.assertEqual(fstype, "tmpfs", m)
                self.assertIn(f"size={m['size_bytes'] // 1024}k", sopts, m)
                for fl in m["flags"]:
                    self.assertIn({"rdonly": "ro"}.get(fl, fl), opts, m)
            elif m["op"] in ("bind", "proc", "devpts", "file", "mask"):
                self.assertIn(m["dst"], info, m)
            if (m["op"] in ("bind", "file") and m.get("rw") is False) or m["op"] == "mask":
                self.assertIn("ro", info[m["dst"]][0], m)
        # And the other way round: every mount inside is in the list (the root "/" aside).
        listed = {m["dst"] for m in ops}
        for point in info:
            if point != "/":
                self.assertIn(point, listed, f"{point} is mounted but not in image.mounts")

    def test_host_root_lists_every_mount_in_order(self):
        data = self.path("data")
        with open(data, "w") as f:
            f.write("x")
        r = self.run_sbx(["cat", "/proc/self/mountinfo"],
                         ["--tmpfs", "/scratch:8M", "--bind", f"{data}:/data"])
        self.assertExit(r, 0)
        t = self.need_trace(r)
        ops = t["image"]["mounts"]
        self.assertEqual(ops[0], {"op": "root", "dst": "/", "type": "tmpfs"})
        self.assertEqual(ops[-2], {"op": "remount_ro", "dst": "/", "flags": ["rdonly", "nosuid", "nodev"]})
        self.assertEqual(ops[-1], {"op": "bind", "src": "/proc/sys", "dst": "/proc/sys", "rw": False,
                                   "after_pivot": True, "flags": ["rdonly", "nosuid", "nodev", "noexec"]})
        kinds = [(m["op"], m["dst"]) for m in ops]
        self.assertLess(kinds.index(("tmpfs", "/tmp")), kinds.index(("tmpfs", "/scratch")))
        self.assertLess(kinds.index(("tmpfs", "/scratch")), kinds.index(("tmpfs", "/out")))
        self.assertLess(kinds.index(("tmpfs", "/out")), kinds.index(("bind", "/data")))
        self.assertIn(("write", "/etc/hosts"), kinds)
        self.assertIn(("remount_ro", "/dev"), kinds)
        scratch = next(m for m in ops if m["dst"] == "/scratch")
        self.assertEqual(scratch["size_bytes"], 8 << 20)
        self.assertEqual(scratch["mode"], "1777")
        self.check_against_mountinfo(t, parse_mountinfo(r.out))

    def test_image_root_lists_the_overlay_and_its_mount_points(self):
        busybox_digest(self)
        r = self.run_sbx(["cat", "/proc/self/mountinfo"], ["--image", "busybox", "--workdir", "/work/here"])
        self.assertExit(r, 0)
        t = self.need_trace(r)
        ops = t["image"]["mounts"]
        self.assertEqual(ops[0]["op"], "root")
        self.assertEqual(ops[0]["type"], "overlay")
        self.assertEqual(ops[0]["upper_size_bytes"], t["image"]["root"]["upper_size_bytes"])
        self.assertEqual(ops[1], {"op": "mount_point", "dst": "/work/here"})
        self.assertNotIn("write", [m["op"] for m in ops])  # an image brings its own /etc
        self.check_against_mountinfo(t, parse_mountinfo(r.out))


if __name__ == "__main__":
    unittest.main()
