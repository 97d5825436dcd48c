"""A read-write --bind the sandbox cannot write is refused before the run, with the fix; `idmap`
writes as the source's owner (issue 32, item 4).

On the previous binary, as root, `--bind DIR:/w:rw` of a root-owned 0755 directory ran and the
program failed inside ("Permission denied", files that did get written belonged to host uid
1879048192), and `idmap` was not a bind option ("bad bind")."""
import json
import os
import subprocess
import unittest

from sbxtest import MODE, SbxTestCase, sbx


def idmapped(trace, dst):
    for m in trace["image"]["mounts"]:
        if m.get("op") == "bind" and m.get("dst") == dst:
            return m.get("idmap")
    raise AssertionError(f"no bind at {dst} in the record's image.mounts")


class BindWrite(SbxTestCase):
    def writable_dir(self, name, uid, gid, mode=0o755):
        d = self.path(name)
        os.mkdir(d)
        os.chown(d, uid, gid)
        os.chmod(d, mode)
        return d

    @unittest.skipUnless(MODE == "root", "as root: rootless the sandbox writes as its caller")
    def test_root_owned_rw_bind_is_refused_with_the_fix(self):
        d = self.writable_dir("out", 0, 0)
        r = sbx(["run", "--bind", f"{d}:/w:rw", "--", "sh", "-c", "echo x > /w/f"])
        line = self.assertRefused(r, d, "owned by uid 0", "mode 0755", "host uid ", "chown it to an ordinary user",
                                  "chmod/chown it for uid")
        print(f"\n  {line}")
        self.assertFalse(os.path.exists(os.path.join(d, "f")))
        # Writable through "others": no refusal.
        os.chmod(d, 0o777)
        self.assertExit(sbx(["run", "--bind", f"{d}:/w:rw", "--", "sh", "-c", "echo x > /w/f"]), 0)

    @unittest.skipUnless(MODE == "root", "as root: rootless the sandbox writes as its caller")
    def test_workspace_of_the_sudo_user_is_idmapped_others_only_warn(self):
        """--workspace in the project of the user who ran `sudo sbx` is idmapped without being
        asked: the program writes as that user (issue 33, item 6; before, it warned and every
        write failed). Without sudo, or in another user's project, or root's, it only warns: it is
        also the program's cwd and project to read (a refusal broke `sbx run --workspace -- ls`)."""
        d = self.writable_dir("proj", 4242, 4343)
        open(os.path.join(d, "seen"), "w").close()
        r = sbx(["run", "--workspace", "--", "sh", "-c", "ls && echo x > made"], cwd=d,
                env=dict(os.environ, SUDO_UID="4242"))
        self.assertExit(r, 0)
        self.assertIn("seen", r.out)
        self.assertNotIn("cannot write", r.err)
        st = os.stat(os.path.join(d, "made"))
        self.assertEqual((st.st_uid, st.st_gid), (4242, 4343), "the file belongs to the project's owner")
        for env in (dict(os.environ, SUDO_UID="4343"), {k: v for k, v in os.environ.items() if k != "SUDO_UID"}):
            r = sbx(["run", "--workspace", "--", "ls"], cwd=d, env=env)
            self.assertExit(r, 0)
            self.assertIn(f"--workspace {d}: {d} is owned by uid 4242", r.err)
            self.assertIn(f"--bind {d}:{d}:rw,idmap --workdir {d}", r.err)
        os.chown(d, 0, 0)
        r = sbx(["run", "--workspace", "--", "ls"], cwd=d, env=dict(os.environ, SUDO_UID="4242"))
        self.assertExit(r, 0)
        self.assertIn("chmod/chown it for uid", r.err)
        self.assertNotIn("idmap", r.err)

    @unittest.skipUnless(MODE == "root", "as root: rootless the sandbox writes as its caller")
    def test_rw_bind_of_the_sudo_users_repository_works_for_git(self):
        """As root through sudo, a `:rw` bind of the user's own git repository: git inside sees the
        files as the program's own (no "dubious ownership"), and what it writes is the user's on
        the host (issue 33, item 6: before, the run was refused with "add idmap")."""
        d = self.writable_dir("repo", 4242, 4343)
        subprocess.run(["git", "init", "-q", d], check=True)
        for root, dirs, files in os.walk(d):
            for n in dirs + files:
                os.chown(os.path.join(root, n), 4242, 4343, follow_symlinks=False)
        r = self.run_sbx(["sh", "-c", "git -C /w status --short && echo x > /w/made && stat -c '%u %g' /w/made"],
                         ["--bind", f"{d}:/w:rw"], env=dict(os.environ, SUDO_UID="4242"))
        self.assertExit(r, 0)
        self.assertNotIn("dubious", r.err)
        self.assertEqual(r.out.split()[-2:], ["0", "0"], r.describe())
        st = os.stat(os.path.join(d, "made"))
        self.assertEqual((st.st_uid, st.st_gid), (4242, 4343))
        self.assertEqual(idmapped(self.need_trace(r), "/w"), {"uid": 4242, "gid": 4343})

    @unittest.skipUnless(MODE == "root", "as root: rootless the sandbox writes as its caller")
    def test_no_idmap_without_asking_for_another_account_or_through_a_symlink(self):
        """The owner's rights are given without asking only over what the sudo user named and owns:
        another account's directory (postgres's, www-data's) is refused as before, and so is the
        user's own directory reached through a symlink (a checkout's `out -> ~/.ssh`)."""
        d = self.writable_dir("theirs", 4242, 4343)
        for env, src in ((dict(os.environ, SUDO_UID="4343"), d),
                         ({k: v for k, v in os.environ.items() if k != "SUDO_UID"}, d)):
            r = sbx(["run", "--bind", f"{src}:/w:rw", "--", "sh", "-c", "echo x > /w/f"], env=env)
            self.assertRefused(r, "add idmap to write as its owner")
        link = self.path("out")
        os.symlink(d, link)
        r = sbx(["run", "--bind", f"{link}:/w:rw", "--", "sh", "-c", "echo x > /w/f"],
                env=dict(os.environ, SUDO_UID="4242"))
        self.assertRefused(r, "add idmap to write as its owner")
        self.assertFalse(os.path.exists(os.path.join(d, "f")))

    @unittest.skipUnless(MODE == "root", "idmapped mounts are made by sbx as root")
    def test_idmap_of_a_root_owned_source_is_refused(self):
        """As root's, the program could leave a setuid-root file on the host (nosuid holds only on
        the sandbox's copy of the mount): the attack, refused before anything is mounted."""
        for uid, gid in ((0, 0), (4242, 0), (0, 4343)):
            with self.subTest(owner=(uid, gid)):
                d = self.writable_dir(f"rootish-{uid}-{gid}", uid, gid)
                r = sbx(["run", "--bind", f"{d}:/w:rw,idmap", "--", "sh", "-c",
                         "cp /bin/sh /w/x && chmod 4755 /w/x"])
                self.assertRefused(r, d, "idmap would let the program write as root", "ordinary user")
                self.assertFalse(os.path.exists(os.path.join(d, "x")))
        # Read-only too: it would read root's 0600 files as root.
        d = self.writable_dir("rootish-ro", 0, 0)
        self.assertRefused(sbx(["run", "--bind", f"{d}:/r:idmap", "--", "true"]), d, "idmap would let")

    @unittest.skipUnless(MODE == "root", "idmapped mounts are made by sbx as root")
    def test_idmap_setuid_stays_the_owners(self):
        """What idmap grants on an ordinary user's directory is that user's, as rootless already:
        a setuid bit the program sets makes a setuid-4242 file, never a root one."""
        d = self.writable_dir("owned-suid", 4242, 4343)
        r = sbx(["run", "--bind", f"{d}:/w:rw,idmap", "--", "sh", "-c", "cp /bin/true /w/x && chmod 4755 /w/x"])
        self.assertExit(r, 0)
        st = os.stat(os.path.join(d, "x"))
        self.assertEqual((st.st_uid, st.st_gid), (4242, 4343))

    @unittest.skipUnless(MODE == "root", "idmapped mounts are made by sbx as root")
    def test_idmap_writes_as_the_owner(self):
        for uid, gid in ((4242, 4343), (4343, 4242)):
            with self.subTest(owner=uid):
                d = self.writable_dir(f"owned-{uid}", uid, gid)
                r = self.run_sbx(["sh", "-c", "echo x > /w/made && stat -c '%u %g' /w /w/made"],
                                 ["--bind", f"{d}:/w:rw,idmap"])
                self.assertExit(r, 0)
                # Inside, the owner is the program (root of the sandbox); on the host, the owner.
                self.assertEqual(r.out.split(), ["0", "0", "0", "0"], r.describe())
                st = os.stat(os.path.join(d, "made"))
                self.assertEqual((st.st_uid, st.st_gid), (uid, gid), "the file belongs to the directory's owner")
                self.assertEqual(idmapped(self.need_trace(r), "/w"), {"uid": uid, "gid": gid})

    @unittest.skipUnless(MODE == "root", "idmapped mounts are made by sbx as root")
    def test_idmap_read_only_stays_read_only(self):
        d = self.writable_dir("ro", 4242, 4242, 0o700)
        r = sbx(["run", "--bind", f"{d}:/r:idmap", "--", "sh", "-c", "ls -ld /r; echo x > /r/f"])
        self.assertNotEqual(r.rc, 0, r.describe())
        self.assertFalse(os.path.exists(os.path.join(d, "f")))

    @unittest.skipUnless(MODE == "rootless", "rootless only")
    def test_rootless_idmap_of_the_callers_own_directory_changes_nothing(self):
        d = self.path("mine")
        os.mkdir(d)
        r = sbx(["run", "--bind", f"{d}:/w:rw,idmap", "--", "sh", "-c", "echo x > /w/f"])
        self.assertExit(r, 0)
        self.assertEqual(os.stat(os.path.join(d, "f")).st_uid, os.getuid())

    def test_unknown_bind_option_suggests(self):
        r = sbx(["run", "--bind", f"{self.tmp}:/w:rw,idmpa", "--", "true"])
        self.assertRefused(r, "option 'idmpa' not known", "did you mean 'idmap'?")


if __name__ == "__main__":
    unittest.main()
