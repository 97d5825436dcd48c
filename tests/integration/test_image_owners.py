"""An image's file owners in the sandbox (issue 33, item 3). As host root, `sbx image import`
stores each entry with its image uid/gid and a run reads the tree through an idmapped mount with
the run's own maps, so image id N is sandbox id N, as under podman (runtime/linux/mounts.hpp,
make_idmapped_image). Before, every file belonged to the importer (host root), which the sandbox
does not map: /root and /etc/shadow were unreadable even under `trusted`, and a user's own home
was not theirs. Rootless, the store is the caller's and every file the sandbox user's; the record
says which applies (image.root.owners).

The multi-user image is compared file by file with podman's view of the same tarball, where
podman is installed and can start a container here (`make test` installs it)."""
import glob
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import unittest

from sbxtest import MODE, SbxTestCase, busybox_tree, note, sbx

# (path, type, mode, uid, gid, data or link target). u is 1000, group shadow 42, mail 8.
MEMBERS = [
    ("etc", "d", 0o755, 0, 0, None),
    ("etc/passwd", "f", 0o644, 0, 0, b"root:x:0:0:root:/root:/bin/sh\nu:x:1000:1000::/home/u:/bin/sh\n"),
    ("etc/group", "f", 0o644, 0, 0, b"root:x:0:\nmail:x:8:\nshadow:x:42:\nu:x:1000:\n"),
    ("etc/shadow", "f", 0o640, 0, 42, b"root:*:19000:0:99999:7:::\nu:!:19000::::::\n"),
    ("root", "d", 0o700, 0, 0, None),
    ("root/.profile", "f", 0o600, 0, 0, b"root's own\n"),
    ("home", "d", 0o755, 0, 0, None),
    ("home/u", "d", 0o700, 1000, 1000, None),
    ("home/u/notes", "f", 0o600, 1000, 1000, b"u's own\n"),
    ("home/u/link", "l", 0o777, 1000, 1000, "notes"),
    ("srv", "d", 0o750, 0, 42, None),
    ("srv/shared", "f", 0o640, 0, 42, b"group shadow's\n"),
    ("var", "d", 0o755, 0, 0, None),
    ("var/mail", "d", 0o775, 0, 8, None),
    ("var/mail/u", "f", 0o660, 1000, 8, b"u's mail\n"),
]
# What the store does to modes (runtime/image/image_import.cpp normalise_mode): no setuid/setgid/
# sticky, no group/other write; files read-only, directories owner-writable.
def normalised(kind, mode):
    return (mode & 0o755) | 0o700 if kind == "d" else (mode & 0o555) | 0o400


def image_tar(path, extra=(), members=MEMBERS):
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        ours = {"./" + m[0] for m in members}  # podman refuses a layer naming a path twice
        tf.add(busybox_tree(), arcname=".",
               filter=lambda i: None if i.name in ours or i.name.startswith("./etc/") else i)
        for name, kind, mode, uid, gid, data in list(members) + list(extra):
            info = tarfile.TarInfo(name)
            info.mode, info.uid, info.gid, info.mtime = mode, uid, gid, 1700000000
            if kind == "d":
                info.type = tarfile.DIRTYPE
                tf.addfile(info)
            elif kind == "l":
                info.type, info.linkname = tarfile.SYMTYPE, data
                tf.addfile(info)
            else:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))


PATHS = " ".join("/" + m[0] for m in MEMBERS)
STAT = f"for p in {PATHS}; do stat -c '%u %g %a %n' $p; done"
# What a user can read (files) or list (directories) of the image.
ACCESS = ("for p in " + PATHS + "; do if [ -d $p ]; then ls $p >/dev/null 2>&1 && echo list $p; "
          "elif [ ! -L $p ]; then cat $p >/dev/null 2>&1 && echo read $p; fi; done")


class Podman:
    """podman with a storage of its own under `tmp` (vfs: works on any file system), as root."""

    def __init__(self, tmp):
        self.argv = ["podman", "--root", tmp + "/root", "--runroot", tmp + "/runroot", "--storage-driver", "vfs"]
        # With the cgroupfs manager, root podman makes libpod_parent (and its conmon) in each cgroup
        # v1 hierarchy and leaves them behind, empty: cleanup() removes those it made.
        self.cgroups_before = set(glob.glob("/sys/fs/cgroup/*/libpod_parent"))
        with open("/proc/self/mounts") as f:
            if not any(l.split()[1:3] == ["/sys/fs/cgroup", "cgroup2"] for l in f):
                # crun refuses a hybrid cgroup layout; runc with cgroupfs takes it (deploy/test.sh).
                self.argv += ["--runtime", "runc", "--cgroup-manager", "cgroupfs"]

    def cleanup(self):
        for _ in range(20):  # conmon can outlive `podman run --rm` for a moment
            left = set(glob.glob("/sys/fs/cgroup/*/libpod_parent")) - self.cgroups_before
            for d in left:
                for root, _, _ in os.walk(d, topdown=False):
                    try:
                        os.rmdir(root)
                    except OSError:
                        pass
            if not set(glob.glob("/sys/fs/cgroup/*/libpod_parent")) - self.cgroups_before:
                return
            time.sleep(0.5)

    def __call__(self, *args, timeout=120):
        return subprocess.run(self.argv + list(args), capture_output=True, text=True, timeout=timeout)

    def run(self, image, script, *opts):
        return self("run", "--rm", "--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit",
                    "nproc=4096:4096", *opts, image, "sh", "-c", script)


class ImageOwners(SbxTestCase):
    def setUp(self):
        super().setUp()
        self.tar = self.path("multi-user.tar")
        image_tar(self.tar, extra=[("far", "f", 0o644, 70000, 70000, b"far\n")])
        r = sbx(["image", "import", self.tar, "--name", "multi-user"], timeout=120)
        self.assertExit(r, 0)
        self.imported = r

    def sbx_run(self, script, *opts):
        r = self.run_sbx(["sh", "-c", script], opts=["--image", "multi-user"] + list(opts), timeout=60)
        self.assertExit(r, 0)
        return r

    @unittest.skipIf(MODE != "root", "owners are carried as host root only (rootless: ImageOwnersRootless)")
    def test_image_ids_are_sandbox_ids_as_root(self):
        # Ids past the run's 65536 stay the importer's, counted and said.
        self.assertIn("1 entry owned by an id past 65535 kept the importer's owner", self.imported.out)
        r = self.sbx_run(STAT, "--profile", "trusted")  # root without capabilities cannot search /home/u
        self.assertEqual(self.need_trace(r)["image"]["root"]["owners"], "idmapped")
        # On the host the store holds no id of a host account: image id N is stored as 0x80000000 + N,
        # so the host's own user 1000 cannot rewrite u's files or plant a symlink in /home/u.
        lower = self.need_trace(r)["image"]["root"]["lower"]
        self.assertEqual(os.lstat(lower + "/home/u").st_uid, 0x80000000 + 1000)
        self.assertEqual(os.lstat(lower + "/etc/shadow").st_gid, 0x80000000 + 42)
        host_ids = set()
        for root, dirs, files in os.walk(lower):
            for n in dirs + files:
                st = os.lstat(os.path.join(root, n))
                host_ids |= {st.st_uid, st.st_gid} - {0}
        self.assertTrue(all(i >= 0x80000000 for i in host_ids), sorted(host_ids))
        want = [f"{uid} {gid} {oct(normalised(kind, mode))[2:] if kind != 'l' else '777'} /{name}"
                for name, kind, mode, uid, gid, _ in MEMBERS]
        self.assertEqual(r.out.splitlines(), want)
        # Who may read what: root with the trusted profile's capabilities reads everything (podman's
        # root), u its own files and mail and nothing of root's or group shadow's.
        r = self.sbx_run(ACCESS, "--profile", "trusted")
        self.assertEqual(len(r.out.splitlines()), len(MEMBERS) - 1, r.out)  # all but the symlink
        r = self.sbx_run(ACCESS + "; id -u", "--uid", "1000")
        got = r.out.splitlines()
        self.assertEqual(got[-1], "1000")
        self.assertIn("read /home/u/notes", got)
        self.assertIn("read /var/mail/u", got)
        for never in ("read /etc/shadow", "list /root", "read /root/.profile", "read /srv/shared"):
            self.assertNotIn(never, got)
        # The sandbox's root writes a file of u's in the overlay and it stays u's (no host id leaks).
        r = self.sbx_run("cp /home/u/notes /tmp/n && stat -c '%u %g' /home/u/notes /tmp/n", "--profile", "trusted")
        self.assertEqual(r.out.splitlines(), ["1000 1000", "0 0"])
        # --dry-run's plan says the same as the run's record, and keeps nothing mounted.
        d = self.run_sbx(["true"], opts=["--image", "multi-user", "--dry-run"], timeout=60)
        self.assertExit(d, 0)
        self.assertEqual(json.loads(d.out)["enforcement"]["image"]["owners"], "idmapped", d.out[:2000])

    @unittest.skipIf(MODE != "root", "owners are carried as host root only")
    def test_an_earlier_import_cannot_give_its_owners_to_a_later_image(self):
        # The same bytes with other owners: /etc/shadow given to uid 1000. Imported first, it once
        # had the later image's digest (owners did not enter the manifest), and the later import
        # was handed its stored tree: uid 1000 then read the later image's /etc/shadow.
        # Owners are part of an image's manifest (sbx-manifest v2, image_manifest.hpp).
        state = self.path("owners-state")
        evil, victim = self.path("evil.tar"), self.path("victim.tar")
        image_tar(evil, members=[m if m[0] != "etc/shadow" else m[:3] + (1000, 1000) + m[5:] for m in MEMBERS])
        image_tar(victim)
        first = sbx(["--state-dir", state, "image", "import", evil, "--name", "evil", "-q"], timeout=120)
        later = sbx(["--state-dir", state, "image", "import", victim, "--name", "victim", "-q"], timeout=120)
        self.assertExit(first, 0)
        self.assertExit(later, 0)
        self.assertNotEqual(first.out.strip(), later.out.strip(), "two owners, one digest")
        r = sbx(["--state-dir", state, "run", "--image", "victim", "--uid", "1000", "--", "sh", "-c",
                 "stat -c '%u' /etc/shadow; cat /etc/shadow || echo refused"], timeout=60)
        self.assertEqual(r.out.split()[:1], ["0"], r.describe())
        self.assertIn("refused", r.out, r.describe())
        for name in ("evil", "victim"):
            v = sbx(["--state-dir", state, "image", "verify", "--full", name], timeout=120)
            self.assertExit(v, 0)

    @unittest.skipIf(MODE != "root", "podman's view of the image is taken as root")
    def test_file_by_file_as_podman_sees_the_same_tarball(self):
        if not shutil.which("podman"):
            self.skipTest("podman is not installed (make test installs it: apt-get install podman runc)")
        store = tempfile.mkdtemp(prefix="sbxit-podman-", dir="/var/tmp")
        self.addCleanup(shutil.rmtree, store, True)
        podman = Podman(store)
        self.addCleanup(podman.cleanup)
        plain = self.path("podman.tar")
        image_tar(plain)
        r = podman("import", "-q", plain, "localhost/sbx-multi-user")
        self.assertEqual(r.returncode, 0, r.stderr)
        seen = {}
        for who, sbx_opts, podman_opts in (("root", ["--profile", "trusted"], []),
                                           ("u", ["--uid", "1000"], ["--user", "1000"])):
            p = podman.run("localhost/sbx-multi-user", STAT + "; " + ACCESS, *podman_opts)
            if p.returncode != 0 and "OCI" in p.stderr:
                self.skipTest(f"podman cannot start a container on this host: {p.stderr.strip()[:300]}")
            self.assertEqual(p.returncode, 0, p.stderr)
            s = self.sbx_run(STAT + "; " + ACCESS, *sbx_opts)
            for pl, sl in zip(p.stdout.splitlines(), s.out.splitlines()):
                if pl.count(" ") == 3:  # a stat line: owners equal, the mode as the store keeps it
                    puid, pgid, pmode, name = pl.split(" ")
                    kind = "d" if name in {"/" + m[0] for m in MEMBERS if m[1] == "d"} else "f"
                    if pmode != "777":
                        pmode = oct(normalised(kind, int(pmode, 8)))[2:]
                    pl = " ".join((puid, pgid, pmode, name))
                self.assertEqual(sl, pl, f"as {who}")
            self.assertEqual(len(s.out.splitlines()), len(p.stdout.splitlines()), f"as {who}")
            seen[who] = len(p.stdout.splitlines()) - len(MEMBERS)
        note(f"podman and sbx agree on the owners of {len(MEMBERS)} entries, and on what root reads or lists "
             f"({seen['root']}) and u ({seen['u']})")


@unittest.skipIf(MODE != "rootless", "rootless only")
class ImageOwnersRootless(SbxTestCase):
    def test_every_file_is_the_sandbox_users_and_the_record_says_so(self):
        tar = self.path("multi-user.tar")
        image_tar(tar)
        self.assertExit(sbx(["image", "import", tar, "--name", "multi-user-rl"], timeout=120), 0)
        r = self.run_sbx(["sh", "-c", "stat -c '%u' /root /home/u/notes; cat /etc/shadow >/dev/null && echo read"],
                         opts=["--image", "multi-user-rl"], timeout=60)
        self.assertExit(r, 0)
        self.assertEqual(r.out.split(), ["0", "0", "read"])
        self.assertTrue(self.need_trace(r)["image"]["root"]["owners"].startswith("the caller's"))
        d = self.run_sbx(["true"], opts=["--image", "multi-user-rl", "--dry-run"], timeout=60)
        self.assertExit(d, 0)
        self.assertTrue(json.loads(d.out)["enforcement"]["image"]["owners"].startswith("the caller's"), d.out[:2000])


if __name__ == "__main__":
    unittest.main()
