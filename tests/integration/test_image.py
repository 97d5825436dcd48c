"""Images, the overlay root, --input and --output. Runs as root and rootless.

The busybox image is built once per suite run with rootfs/build-busybox.sh (offline, from
busybox-static) and imported into the suite's state dir, the way a user would.
"""
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
import threading
import time
import unittest

from sbxtest import MODE, SBX, BUILD_BUSYBOX, SbxTestCase, busybox_digest, busybox_tree, note, sbx, write_tree

def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def manifest_escape(b):
    return "".join(f"\\x{c:02x}" if c <= 0x20 or c >= 0x7f or c == 0x5c else chr(c) for c in b)


OWNER_ID_BASE, OWNER_ID_RANGE = 0x80000000, 65536  # image_import.hpp kOwnerIdBase, kOwnerIdRange


def manifest_lines(root):
    """(path, line without its newline, lstat) of every entry, sorted byte-wise by path."""
    lines = []
    for dirpath, dirnames, filenames in os.walk(os.fsencode(root)):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, os.fsencode(root))
            st = os.lstat(full)
            mode = f"{stat.S_IMODE(st.st_mode):04o}"
            if stat.S_ISDIR(st.st_mode):
                lines.append((rel, f"{manifest_escape(rel)}\tdir\t{mode}\t0\t-", st))
            elif stat.S_ISLNK(st.st_mode):
                t = os.readlink(full)
                lines.append((rel, f"{manifest_escape(rel)}\tsymlink\t{mode}\t{len(t)}\t{manifest_escape(t)}", st))
            elif stat.S_ISREG(st.st_mode):
                lines.append((rel, f"{manifest_escape(rel)}\tfile\t{mode}\t{st.st_size}\t{sha256_file(full)}", st))
    return sorted(lines, key=lambda l: l[0])


def manifest_digest(root):
    """An independent implementation of the sbx-manifest v1 digest (image_manifest.hpp): an input's."""
    return hashlib.sha256(("sbx-manifest v1\n" + "".join(l + "\n" for _, l, _ in manifest_lines(root))).encode()).hexdigest()


def image_owner(st, carried):
    if not carried:
        return "-"
    if all(OWNER_ID_BASE <= i < OWNER_ID_BASE + OWNER_ID_RANGE for i in (st.st_uid, st.st_gid)):
        return f"{st.st_uid - OWNER_ID_BASE}:{st.st_gid - OWNER_ID_BASE}"
    return "importer"


def image_digest(meta):
    """The same for an image (sbx-manifest v2): each line's owner too, as the import stored it."""
    carried = meta.get("owners", {}).get("carried", False)
    text = "".join(f"{l}\t{image_owner(st, carried)}\n" for _, l, st in manifest_lines(meta["rootfs"]))
    return hashlib.sha256(("sbx-manifest v2\n" + text).encode()).hexdigest()


class ImageStore(SbxTestCase):
    def test_import_ls_inspect_verify_rm(self):
        digest = busybox_digest(self)
        self.assertRegex(digest, r"^sha256:[0-9a-f]{64}$")
        # A second build of the same input gives the same digest.
        other = self.path("bb2")
        subprocess.run([BUILD_BUSYBOX, other], check=True, capture_output=True)
        r = sbx(["image", "import", other, "--name", "bb-again:v1"])
        self.assertExit(r, 0)
        self.assertIn(digest, r.out)
        note(f"busybox image built twice: {digest} both times")
        # The same tree as a gzip tarball: same digest.
        tarball = self.path("bb.tar.gz")
        subprocess.run(["tar", "-czf", tarball, "-C", busybox_tree(), "."], check=True)
        r = sbx(["image", "import", tarball, "--name", "bb-tar"])
        self.assertExit(r, 0)
        self.assertIn(digest, r.out)
        r = sbx(["image", "ls"])
        self.assertExit(r, 0)
        for n in ("busybox:latest", "bb-again:v1", "bb-tar:latest"):
            self.assertIn(n, r.out)
        # The same listing for scripts: one object per image, all names on it.
        r = sbx(["image", "ls", "--json"])
        self.assertExit(r, 0)
        listed = {i["digest"]: i for i in json.loads(r.out)}
        self.assertEqual(sorted(listed[digest]["names"]), ["bb-again:v1", "bb-tar:latest", "busybox:latest"])
        self.assertGreater(listed[digest]["entries"], 100)
        self.assertGreater(listed[digest]["bytes"], 0)
        self.assertRegex(listed[digest]["imported_at"], r"^\d{4}-\d\d-\d\dT")
        r = sbx(["image", "inspect", digest[:15]])
        self.assertExit(r, 0)
        meta = json.loads(r.out)
        self.assertEqual(meta["digest"], digest)
        self.assertIn("busybox:latest", meta["names"])
        started = time.monotonic()
        r = sbx(["image", "verify", "busybox", "--full"])
        took = time.monotonic() - started
        self.assertExit(r, 0)
        self.assertIn("content: ok", r.out)
        # Progress goes to stderr, one line a second, only after a second: a small image verifies
        # silently (stderr here is a pipe: whole lines, no terminal control).
        for line in r.err.splitlines():
            self.assertRegex(line, r"^verifying busybox: hashing, \d+ entries, [0-9.]+ (B|KiB|MiB|GiB)$")
        if took < 0.9:
            self.assertEqual(r.err, "", "a verify under a second prints no progress")
        # rm of one name keeps the image; the digest of a missing image is an error.
        r = sbx(["image", "rm", "bb-again:v1", "bb-tar"])
        self.assertExit(r, 0)
        self.assertIn("untagged bb-again:v1", r.out)
        self.assertNotIn("deleted", r.out)
        r = sbx(["image", "inspect", "bb-again:v1"])
        self.assertExit(r, 125)
        self.assertOneSbxLine(r)

    def test_import_normalises_and_drops_specials(self):
        src = self.path("weird")
        os.makedirs(src + "/bin")
        with open(src + "/bin/suid", "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(src + "/bin/suid", 0o4777)
        os.mkfifo(src + "/fifo")
        r = sbx(["image", "import", src, "--name", "weird"])
        self.assertExit(r, 0)
        self.assertIn("dropped 1", r.out)
        meta = json.loads(sbx(["image", "inspect", "weird"]).out)
        st = os.lstat(meta["rootfs"] + "/bin/suid")
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o555)
        self.assertEqual(meta["digest"][7:], image_digest(meta), "independent manifest digest")
        # The digest an older sbx gave the same content (v1: no owners) is answered with today's,
        # never resolved to it (two images may share it).
        self.assertEqual(meta["digest_v1"][7:], manifest_digest(meta["rootfs"]))
        r = sbx(["image", "inspect", meta["digest_v1"][:19]])
        self.assertExit(r, 125)
        self.assertOneSbxLine(r)
        self.assertIn("pin the image's digest now: " + meta["digest"], r.err)
        sbx(["image", "rm", "weird"])

    def test_a_deep_tree_imports_or_is_refused_never_a_crash(self):
        # A tar member may have 256 components; the seal's walk put 32 KiB of stack on each level
        # and a 252-deep member crashed the import with SIGSEGV (its tree left in the store with no
        # image.json, beyond `image rm`). Now it imports; a directory source deeper than 256 levels
        # (which nothing bounded) is refused with one line; an incomplete digest is removable.
        import io
        import tarfile
        deep = self.path("deep.tar")
        with tarfile.open(deep, "w") as tf:
            info = tarfile.TarInfo("a/" * 251 + "f")
            info.size = 3
            tf.addfile(info, io.BytesIO(b"hi\n"))
        r = sbx(["image", "import", deep, "--name", "deep", "-q"], timeout=120)
        self.assertExit(r, 0)
        self.assertExit(sbx(["image", "verify", "--full", "deep"], timeout=120), 0)
        tree = self.path("deeper")
        os.makedirs(os.path.join(tree, *["d"] * 300))
        r = sbx(["image", "import", tree, "--name", "deeper"], timeout=120)
        self.assertExit(r, 125)
        self.assertOneSbxLine(r)
        self.assertIn("more than 256 directories deep", r.err)
        meta = json.loads(sbx(["image", "inspect", "deep"]).out)
        digest = meta["digest"]
        os.unlink(os.path.join(os.path.dirname(meta["rootfs"]), "image.json"))
        r = sbx(["image", "rm", digest[:19]])
        self.assertExit(r, 0)
        self.assertIn("incomplete", r.out)
        self.assertFalse(os.path.exists(os.path.dirname(meta["rootfs"])))

    def test_bad_references_and_sources(self):
        for args in (["image", "import", self.path("missing"), "--name", "x"],
                     ["image", "import", "/etc", "--name", "Bad/Name"],
                     ["image", "import", "/etc/hostname", "--name", "not-a-tarball"],
                     ["image", "inspect", "no-such-image"],
                     ["image", "rm", "sha256:zz"],
                     ["run", "--image", "no-such-image", "--", "/bin/true"]):
            r = sbx(args)
            self.assertExit(r, 125, " ".join(args))
            self.assertOneSbxLine(r)

    def test_archive_bombs_are_refused_and_nothing_is_stored(self):
        """A 100 KB tar.gz that expands to 100 MB, and a tar of 3,000 empty files, against
        --max-bytes/--max-entries: exit 125 with the limit named, no image, no staging left."""
        src = self.path("bomb")
        os.makedirs(src + "/d")
        with open(src + "/d/zeros", "wb") as f:
            f.write(bytes(100 * 1024 * 1024))
        bomb = self.path("bomb.tar.gz")
        subprocess.run(["tar", "-C", src, "-czf", bomb, "d"], check=True)
        self.assertLess(os.path.getsize(bomb), 1024 * 1024)
        many = self.path("many")
        os.makedirs(many)
        for i in range(3000):
            open(os.path.join(many, f"f{i}"), "w").close()
        many_tar = self.path("many.tar")
        subprocess.run(["tar", "-C", many, "-cf", many_tar, "."], check=True)
        images = os.path.join(os.environ["SBX_STATE_DIR"], "images")
        before = sbx(["image", "ls"]).out
        cases = ((["image", "import", bomb, "--name", "bomb", "--max-bytes", "10M"], "--max-bytes"),
                 (["image", "import", src, "--name", "bomb-dir", "--max-bytes", "10M"], "--max-bytes"),
                 (["image", "import", many_tar, "--name", "many", "--max-entries", "1000"], "--max-entries"),
                 (["image", "import", many, "--name", "many-dir", "--max-entries", "1000"], "--max-entries"))
        for args, limit in cases:
            with self.subTest(args=args[2]):
                r = sbx(args, timeout=120)
                self.assertExit(r, 125, "a bomb over the limit must be refused")
                errors = [l for l in r.err.splitlines() if l.startswith("sbx:")]
                self.assertEqual(len(errors), 1, "one error line (progress lines may precede it)\n" + r.describe())
                self.assertIn(limit, r.err)
                self.assertIn("nothing was stored", r.err)
                self.assertEqual(sbx(["image", "ls"]).out, before, "the store lists the same images")
                staging = os.path.join(images, "tmp")
                self.assertEqual(os.listdir(staging) if os.path.isdir(staging) else [], [], "no staging left")
        r = sbx(["image", "import", many_tar, "--name", "many", "--max-entries", "5000", "-q"], timeout=120)
        self.assertExit(r, 0, "under the limit the same archive imports")
        for bad in (["--max-bytes", "lots"], ["--max-entries", "0"]):
            r = sbx(["image", "import", many_tar, "--name", "x"] + bad)
            self.assertExit(r, 125)
            self.assertOneSbxLine(r)

    def test_tampered_store_refuses_the_run(self):
        busybox_digest(self)
        # Its own content (the same content would share busybox's stored tree).
        tree = self.path("tamper-tree")
        shutil.copytree(busybox_tree(), tree, symlinks=True)
        with open(tree + "/etc/marker", "w") as f:
            f.write("tamper test\n")
        r = sbx(["image", "import", tree, "--name", "tamper"])
        self.assertExit(r, 0)
        meta = json.loads(sbx(["image", "inspect", "tamper"]).out)
        self.assertEqual(self.run_sbx(["/bin/true"], ["--image", "tamper"]).rc, 0)
        victim = meta["rootfs"] + "/etc/passwd"
        st = os.lstat(victim)
        os.chmod(victim, 0o644)
        with open(victim, "a") as f:
            f.write("evil::0:0::/:/bin/sh\n")
        os.chmod(victim, stat.S_IMODE(st.st_mode))
        os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back: ctime still tells
        r = self.run_sbx(["/bin/true"], ["--image", "tamper"])
        self.assertExit(r, 125)
        self.assertIn("was modified in the store", r.err)
        self.assertEqual(self.need_trace(r)["result"]["status"], "setup_error")
        self.assertEqual(self.need_trace(r)["image"]["seal"], "mismatch")
        r = sbx(["image", "verify", "tamper", "--full"])
        self.assertExit(r, 1)
        self.assertIn("changed: etc/passwd", r.out)
        note("tamper: " + r.out.strip().replace("\n", " | "))
        # Another image's tree is untouched.
        self.assertEqual(sbx(["image", "verify", "busybox"]).rc, 0)
        # What the error says to do repairs it: the same content imported again replaces the
        # modified tree (it used to report success and leave the mismatch in place).
        r = sbx(["image", "import", tree, "--name", "tamper"])
        self.assertExit(r, 0)
        self.assertIn("repaired " + meta["digest"], r.out)
        r = sbx(["image", "verify", "tamper", "--full"])
        self.assertExit(r, 0, "verify after the re-import")
        self.assertNotIn("MISMATCH", r.out)
        self.assertEqual(self.run_sbx(["/bin/true"], ["--image", "tamper"]).rc, 0)
        with open(json.loads(sbx(["image", "inspect", "tamper"]).out)["rootfs"] + "/etc/passwd") as f:
            self.assertNotIn("evil", f.read())
        # An intact image imported again is left as it is.
        r = sbx(["image", "import", tree, "--name", "tamper"])
        self.assertExit(r, 0)
        self.assertNotIn("repaired", r.out)
        sbx(["image", "rm", meta["digest"]])


class ImageRun(SbxTestCase):
    def setUp(self):
        super().setUp()
        self.digest = busybox_digest(self)

    def test_runs_on_the_image_and_records_its_digest(self):
        r = self.run_sbx(["/bin/sh", "-c", "cat /etc/os-release-sbx; test ! -e /usr/lib/x86_64-linux-gnu && echo no-host-libs"],
                         ["--image", "busybox"])
        self.assertExit(r, 0)
        self.assertIn("sbx busybox image", r.out)
        self.assertIn("no-host-libs", r.out)
        t = self.need_trace(r)
        self.assertEqual(t["image"]["digest"], self.digest)
        self.assertEqual(t["image"]["name"], "busybox")
        self.assertEqual(t["image"]["root"]["type"], "overlay")

    def test_root_is_read_only_and_tmp_vanishes(self):
        marker = "m-" + os.urandom(4).hex()
        r = self.run_sbx(["/bin/sh", "-c",
                          f"for p in /x /bin/busybox /etc/passwd /pack; do (echo x > $p) 2>/dev/null && echo WROTE $p; done;"
                          f" mkdir /newdir 2>/dev/null && echo WROTE /newdir;"
                          f" echo {marker} > /tmp/{marker} && cat /tmp/{marker}; echo ok > /out/f && echo out-ok"],
                         ["--image", "busybox"])
        self.assertExit(r, 0)
        self.assertNotIn("WROTE", r.out)
        self.assertIn(marker, r.out)
        self.assertIn("out-ok", r.out)
        r = self.run_sbx(["/bin/sh", "-c", f"ls /tmp; test -e /tmp/{marker} && echo STILL-THERE; true"], ["--image", "busybox"])
        self.assertExit(r, 0)
        self.assertNotIn("STILL-THERE", r.out)
        self.assertEqual(sbx(["image", "verify", "busybox", "--full"]).rc, 0, "the store is unchanged")

    def test_concurrent_runs_do_not_see_each_other(self):
        results = {}

        def one(tag):
            results[tag] = self.run_sbx(["/bin/sh", "-c",
                                         f"echo {tag} > /tmp/who; echo {tag} > /out/who; sleep 1;"
                                         f" cat /tmp/who /out/who; ls /tmp /out"], ["--image", "busybox"])
        threads = [threading.Thread(target=one, args=(t,)) for t in ("alpha", "bravo")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for tag, other in (("alpha", "bravo"), ("bravo", "alpha")):
            self.assertExit(results[tag], 0)
            self.assertEqual(results[tag].out.split()[:2], [tag, tag])
            self.assertNotIn(other, results[tag].out)

    def test_host_image_is_still_the_default_and_says_so(self):
        r = self.run_sbx(["/bin/true"])
        self.assertExit(r, 0)
        t = self.need_trace(r)
        self.assertEqual(t["image"]["name"], "host")
        self.assertIsNone(t["image"]["digest"])
        self.assertTrue(any(m["dst"] == "/usr" for m in t["image"]["mounts"]))


class Inputs(SbxTestCase):
    def test_inputs_are_read_only_and_hashed(self):
        f = self.path("data.csv")
        with open(f, "wb") as fh:
            fh.write(os.urandom(300000))
        d = self.path("ctx")
        os.makedirs(d + "/sub")
        for rel, content in (("a.txt", b"alpha"), ("sub/b.txt", b"bravo")):
            with open(os.path.join(d, rel), "wb") as fh:
                fh.write(content)
        for p in (f, d, d + "/sub", d + "/a.txt", d + "/sub/b.txt"):
            os.chmod(p, 0o755 if os.path.isdir(p) else 0o644)
        for image in ("host", "busybox"):
            busybox_digest(self)
            r = self.run_sbx(["/bin/sh", "-c",
                              "cat /in/data.csv | wc -c; cat /data/sub/b.txt; echo;"
                              " (echo x >> /in/data.csv) 2>/dev/null && echo WROTE;"
                              " (touch /data/new) 2>/dev/null && echo WROTE; true"],
                             ["--image", image, "--input", f, "--input", d + ":/data"])
            self.assertExit(r, 0, image)
            self.assertIn("300000", r.out)
            self.assertIn("bravo", r.out)
            self.assertNotIn("WROTE", r.out)
            ins = {i["path"]: i for i in self.need_trace(r)["inputs"]}
            self.assertEqual(ins["/in/data.csv"]["sha256"], sha256_file(f))
            self.assertEqual(ins["/in/data.csv"]["bytes"], 300000)
            self.assertEqual(ins["/data"]["type"], "directory")
            self.assertEqual(ins["/data"]["sha256"], manifest_digest(d))
            self.assertEqual(ins["/data"]["bytes"], 10)

    def test_missing_input_is_a_usage_error(self):
        r = self.run_sbx(["/bin/true"], ["--input", self.path("nope")])
        self.assertExit(r, 125)
        self.assertIn("--input", r.err)


class Export(SbxTestCase):
    def export(self, script, *opts, image="busybox", timeout=120):
        busybox_digest(self)
        dest = self.path("export-" + str(self._n + 1))
        r = self.run_sbx(["/bin/sh", "-c", script], ["--image", image, "--output", dest] + list(opts), timeout=timeout)
        return r, dest

    def test_regular_files_and_dirs_are_exported_with_hashes(self):
        r, dest = self.export("mkdir -p /out/a/b; echo hello > /out/a/b/c.txt; printf x > /out/top; ln /out/top /out/top-link")
        self.assertExit(r, 0)
        with open(dest + "/a/b/c.txt") as f:
            self.assertEqual(f.read(), "hello\n")
        self.assertFalse(os.path.islink(dest + "/top-link"))
        t = self.need_trace(r)
        outs = {o["path"]: o for o in t["outputs"]}
        self.assertEqual(outs["/out/a/b/c.txt"]["sha256"], hashlib.sha256(b"hello\n").hexdigest())
        self.assertEqual(outs["/out/top-link"]["bytes"], 1)
        self.assertEqual(t["export"]["skipped_count"], 0)
        self.assertEqual(t["result"]["status"], "ok")

    def test_output_dir_must_be_new_or_empty(self):
        d = self.path("full")
        os.makedirs(d)
        open(d + "/keep", "w").close()
        r = self.run_sbx(["/bin/true"], ["--output", d])
        self.assertExit(r, 125)
        self.assertOneSbxLine(r)
        self.assertIn("not empty", r.err)

    def test_hostile_entries_are_skipped(self):
        dest_parent = self.tmp
        script = ("ln -s /etc/shadow /out/shadow; ln -s .. /out/up; ln -s " + dest_parent + " /out/parent;"
                  " mkdir /out/d; ln -s ../../../.. /out/d/escape;"
                  " mkfifo /out/fifo;"
                  " mknod /out/null c 1 3 2>/dev/null && echo MKNOD-OK;"
                  " ln /etc/passwd /out/hard 2>/dev/null && echo HARDLINK-OK;"
                  " ln /tmp/../etc/passwd /out/hard2 2>/dev/null && echo HARDLINK-OK;"
                  " echo x > /tmp/t; ln /tmp/t /out/hard3 2>/dev/null && echo HARDLINK-OK;"
                  " printf nl > \"/out/new$(printf '\\nline')\";"
                  " printf bad > \"/out/bad$(printf '\\377')\";"
                  # A C1 control (U+009B) and a direction override (U+202E): valid UTF-8, still refused.
                  " printf c1 > \"/out/c1$(printf '\\302\\233')x\"; printf rlo > \"/out/rlo$(printf '\\342\\200\\256')txt\";"
                  " mkdir -p /out/x/../y; printf dots > /out/...; printf dd > '/out/..dots';"
                  # Without cgroup v2, RLIMIT_FSIZE (the largest tmpfs) kills the 10G truncate
                  # (SIGXFSZ): a sparse file just under it is over the export cap all the same.
                  " truncate -s 10G /out/sparse 2>/dev/null || truncate -s 48M /out/sparse; echo ok")
        r, dest = self.export(script, "--output-max-bytes", "32M")
        self.assertNotIn("MKNOD-OK", r.out)
        self.assertNotIn("HARDLINK-OK", r.out)
        t = self.need_trace(r)
        self.assertEqual(t["result"]["status"], "output_limit", "the sparse file is over --output-max-bytes")
        self.assertEqual(r.rc, 0, "the program's own exit status is kept\n" + r.describe())
        exported = sorted(os.listdir(dest))
        self.assertEqual(exported, sorted(["...", "..dots", "d", "x", "y"]), exported)
        self.assertEqual(os.listdir(dest + "/d"), [])
        for root, dirs, files in os.walk(dest):
            for n in dirs + files:
                self.assertFalse(os.path.islink(os.path.join(root, n)))
        skipped = {s["path"]: s["reason"] for s in t["export"]["skipped"]}
        for p in ("/out/shadow", "/out/up", "/out/parent", "/out/d/escape"):
            self.assertIn("symlink", skipped[p])
        self.assertEqual(skipped["/out/fifo"], "fifo")
        self.assertIn("unsafe name", skipped["/out/new\\x0aline"])
        self.assertIn("unsafe name", skipped["/out/bad\\xff"])
        self.assertIn("unsafe name", skipped["/out/c1\\u009bx"])
        self.assertIn("unsafe name", skipped["/out/rlo\\u202etxt"])
        self.assertIn("--output-max-bytes", skipped["/out/sparse"])
        note("hostile export skipped: " + json.dumps(t["export"]["skipped"]))

    def test_sparse_file_exports_as_holes(self):
        """A 200 MB sparse file in the 64 MiB /out: under --output-max-bytes (256 MiB), exported with
        its holes, so the host gets its apparent size but not 200 MB of zeros on disk."""
        r, dest = self.export("printf head > /out/sparse; truncate -s 200M /out/sparse;"
                              " printf tail >> /out/sparse; echo ok", image="host")
        self.assertExit(r, 0)
        st = os.stat(dest + "/sparse")
        size = 200 * 1024 * 1024 + 4
        self.assertEqual(st.st_size, size)
        self.assertLess(st.st_blocks * 512, 8 * 1024 * 1024, f"the export wrote the holes as data: {st.st_blocks * 512} bytes on disk")
        h = hashlib.sha256()
        with open(dest + "/sparse", "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        t = self.need_trace(r)
        outs = {o["path"]: o for o in t["outputs"]}
        self.assertEqual(outs["/out/sparse"]["bytes"], size)
        self.assertEqual(outs["/out/sparse"]["sha256"], h.hexdigest(), "the hash is of the content, holes included")

    def test_many_tiny_files_hit_the_file_cap(self):
        # /out holds one inode per KiB of its size (mount_plan.hpp, kTmpfsBytesPerInode): a
        # million empty files cost the host ~1 GB of kernel memory and an export that listed
        # every name before that bound. The default 64 MiB /out takes 65,535 files (and its root).
        script = ("cd /out && seq 1 100000 | xargs touch 2>/tmp/err; ls | wc -l; grep -c 'No space' /tmp/err;"
                  " cd /tmp && seq 1 70000 | xargs touch 2>/dev/null || echo tmp-full")
        r, dest = self.export(script)
        made, nospace = (int(x) for x in r.out.split()[:2])
        self.assertEqual(made, 65535, r.describe())
        self.assertGreater(nospace, 0, r.describe())
        self.assertIn("tmp-full", r.out)
        t = self.need_trace(r)
        self.assertEqual(t["result"]["status"], "output_limit")
        self.assertEqual(len(os.listdir(dest)), 10000)
        self.assertEqual(t["export"]["skipped_count"], made - 10000)
        self.assertEqual(len(t["export"]["skipped"]), 1000, "the list is capped; the count is not")
        # A larger /out takes more, and --output-max-files lets them all out.
        profile = self.path("big-out.json")
        with open(profile, "w") as f:
            json.dump({"extends": "untrusted", "limits": {"out_size_bytes": 128 << 20}}, f)
        start = time.monotonic()
        r, dest = self.export("cd /out && seq 1 100000 | xargs touch", "--profile", profile,
                              "--output-max-files", "100000")
        self.assertEqual(self.need_trace(r)["result"]["status"], "ok", r.describe())
        self.assertEqual(len(os.listdir(dest)), 100000)
        note(f"100,000 files: run + export {time.monotonic() - start:.1f} s")

    def test_writer_is_dead_before_export(self):
        # A background writer keeps appending after the main program exits: by the time sbx
        # exports, the whole pid namespace is gone, so the exported file matches its trace
        # hash and does not change afterwards.
        r, dest = self.export("(while :; do echo x >> /out/grow; done) & sleep 0.3; exit 0")
        self.assertExit(r, 0)
        t = self.need_trace(r)
        outs = {o["path"]: o for o in t["outputs"]}
        size = os.path.getsize(dest + "/grow")
        self.assertGreater(size, 0)
        self.assertEqual(outs["/out/grow"]["bytes"], size)
        self.assertEqual(outs["/out/grow"]["sha256"], sha256_file(dest + "/grow"))
        time.sleep(0.5)
        self.assertEqual(os.path.getsize(dest + "/grow"), size)

    def test_out_is_size_capped(self):
        r, dest = self.export("dd if=/dev/zero of=/out/big bs=1M count=100 2>&1; echo rc=$?")
        self.assertIn("No space left", r.out)
        self.assertLessEqual(os.path.getsize(dest + "/big"), 64 << 20)


if __name__ == "__main__":
    unittest.main()


class PackOnImage(SbxTestCase):
    def test_pack_runs_on_the_busybox_image_without_host_scratch(self):
        digest = busybox_digest(self)
        d = self.path("pack")
        os.makedirs(d + "/schemas")
        manifest = {"name": "bb-count", "version": "1.0.0", "entrypoint": ["/bin/sh", "/pack/run.sh"],
                    "image": "busybox", "input_schema": "schemas/in.json", "output_schema": "schemas/out.json"}
        files = {"pack.json": json.dumps(manifest),
                 "schemas/in.json": json.dumps({"type": "object"}),
                 "schemas/out.json": json.dumps({"type": "object", "required": ["count"],
                                                 "properties": {"count": {"type": "integer"}}}),
                 "run.sh": "n=$(grep -o '{' /in/records.json | wc -l); test -e /usr/bin/python3 && n=-1;"
                           " printf '{\"count\": %d}' \"$n\" > /out/result.json\n"}
        write_tree(d, files)
        recs = self.path("recs.json")
        with open(recs, "w") as f:
            json.dump([{"a": 1}, {"b": 2}, {"c": 3}], f)
        os.chmod(recs, 0o644)
        before = set(os.listdir(tempfile.gettempdir())) | set(os.listdir("/tmp"))
        tpath = self.path("t.json")
        r = sbx(["pack", "run", d, "--input", recs, "--trace-file", tpath], timeout=60)
        self.assertExit(r, 0)
        self.assertEqual(json.loads(r.out), {"count": 3}, "ran on busybox (no python3 there)")
        with open(tpath) as f:
            t = json.load(f)
        self.assertEqual(t["image"]["digest"], digest)
        self.assertEqual(t["outputs"][0]["path"], "/out/result.json")
        after = set(os.listdir(tempfile.gettempdir())) | set(os.listdir("/tmp"))
        self.assertEqual([n for n in after - before if n.startswith("sbx-io-")], [], "no host scratch for /in or /out")
