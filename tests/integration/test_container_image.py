"""Container images: OCI image layouts and docker save archives imported and run. Root and rootless.

Every layout here is built by the test itself (no registry, no skopeo): two layers over the busybox
tree, the second deleting a file with a whiteout and emptying a directory with an opaque marker, and
a config whose Env, Entrypoint, Cmd, WorkingDir and User become the run's defaults.
"""
import gzip
import hashlib
import io
import json
import os
import tarfile
import unittest

from sbxtest import SbxTestCase, busybox_tree, note, sbx

PASSWD = b"root:x:0:0:root:/root:/bin/sh\napp:x:1234:2345::/app:/bin/sh\n"
SCRIPT = ("echo $GREETING; id -u; id -g; pwd; ls /data; "
          "cat /app/secret.txt 2>/dev/null || echo secret-gone; cat /app/keep.txt")


def sha(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


def add_bytes(tf, name, data, mode=0o644):
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 1700000000
    tf.addfile(info, io.BytesIO(data))


def add_dir(tf, name):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 1700000000
    tf.addfile(info)


def layer_tar(build):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        build(tf)
    return buf.getvalue()


def lower_layer():
    def build(tf):
        tf.add(busybox_tree(), arcname=".", filter=lambda i: None if i.name in ("./etc/passwd",) else i)
        add_bytes(tf, "etc/passwd", PASSWD)
        add_dir(tf, "app")
        add_bytes(tf, "app/secret.txt", b"lower-layer secret\n")
        add_bytes(tf, "app/keep.txt", b"kept\n")
        add_dir(tf, "data")
        add_dir(tf, "data/old")
        add_bytes(tf, "data/old/a.txt", b"old\n")
    return layer_tar(build)


def upper_layer(extra=None):
    def build(tf):
        add_bytes(tf, "app/.wh.secret.txt", b"")
        add_dir(tf, "data")
        add_bytes(tf, "data/.wh..wh..opq", b"")
        add_bytes(tf, "data/new.txt", b"new\n")
        if extra:
            extra(tf)
    return layer_tar(build)


def config(arch, diff_ids):
    return json.dumps({
        "architecture": arch, "os": "linux",
        "config": {"Env": ["PATH=/bin:/usr/bin:/sbin", "GREETING=hello from the image"],
                   "Entrypoint": ["/bin/sh", "-c"], "Cmd": [SCRIPT],
                   "WorkingDir": "/app", "User": "app"},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }).encode()


def write_oci_layout(d, layers=None, platforms=("amd64", "arm64"), gzip_all=False):
    """An OCI layout: index → one manifest per platform → config + (gzip, plain) layers, or with
    gzip_all every layer gzip-compressed (any number of them)."""
    os.makedirs(f"{d}/blobs/sha256", exist_ok=True)

    def blob(data):
        digest = sha(data)
        with open(f"{d}/blobs/sha256/{digest[7:]}", "wb") as f:
            f.write(data)
        return digest

    lower, upper = (layers or (lower_layer(), upper_layer()))[:2]
    gz = gzip.compress(lower, mtime=0)
    descs = [
        {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": blob(gz), "size": len(gz)},
        {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": blob(upper), "size": len(upper)},
    ]
    if gzip_all:
        descs = []
        for raw in layers:
            z = gzip.compress(raw, mtime=0)
            descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": blob(z), "size": len(z)})
    manifests = []
    for arch in platforms:
        cfg = config(arch, [sha(lower), sha(upper)])
        manifest = json.dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": blob(cfg), "size": len(cfg)},
            "layers": descs}).encode()
        manifests.append({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": blob(manifest),
                          "size": len(manifest), "platform": {"architecture": arch, "os": "linux"}})
    with open(f"{d}/index.json", "w") as f:
        json.dump({"schemaVersion": 2, "manifests": manifests}, f)
    with open(f"{d}/oci-layout", "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    return manifests[0]["digest"], descs


def write_docker_archive(path, shared_layer=False):
    """A classic `docker save` tarball: manifest.json, <hex>.json config, <id>/layer.tar. With
    shared_layer, the upper layer is listed twice, the second time through the relative symlink
    docker writes for a layer two images share."""
    lower, upper = lower_layer(), upper_layer()
    layers = ["aaaa/layer.tar", "bbbb/layer.tar"] + (["cccc/layer.tar"] if shared_layer else [])
    cfg = config("amd64", [sha(lower), sha(upper)] + ([sha(upper)] if shared_layer else []))
    with tarfile.open(path, "w") as tf:
        add_bytes(tf, f"{sha(cfg)[7:]}.json", cfg)
        add_bytes(tf, "aaaa/layer.tar", lower)
        add_bytes(tf, "bbbb/layer.tar", upper)
        if shared_layer:
            link = tarfile.TarInfo("cccc/layer.tar")
            link.type, link.linkname = tarfile.SYMTYPE, "../bbbb/layer.tar"
            tf.addfile(link)
        add_bytes(tf, "manifest.json", json.dumps([{"Config": f"{sha(cfg)[7:]}.json", "RepoTags": ["demo:1"],
                                                    "Layers": layers}]).encode())
    return sha(cfg)


class ContainerImages(SbxTestCase):
    def import_ok(self, source, name, *extra):
        r = sbx(["image", "import", source, "--name", name, *extra], timeout=120)
        self.assertExit(r, 0)
        r = sbx(["image", "inspect", name])
        self.assertExit(r, 0)
        return json.loads(r.out)

    def check_default_run(self, name):
        r = sbx(["run", "--image", name], timeout=60)
        self.assertExit(r, 0)
        self.assertEqual(r.out.splitlines(),
                         ["hello from the image", "1234", "2345", "/app", "new.txt", "secret-gone", "kept"],
                         "Env, User (from the image's passwd), WorkingDir, the opaque directory and the whiteout")
        return r

    def test_oci_layout_directory_and_tarball(self):
        layout = self.path("layout")
        manifest_digest, layers = write_oci_layout(layout)
        meta = self.import_ok(layout, "oci-demo")
        self.assertEqual(meta["format"], "oci-layout")
        self.assertEqual(meta["container"]["manifest_digest"], manifest_digest)
        self.assertEqual(meta["container"]["platform"], "linux/amd64")
        self.assertEqual(meta["container"]["layers"], [d["digest"] for d in layers])
        self.assertEqual(meta["normalised"]["whiteouts"], 2)
        self.assertEqual(meta["config"]["User"], "app")
        r = self.check_default_run("oci-demo")
        note(f"OCI layout imported as {meta['digest']} (manifest {manifest_digest}); default run printed "
             f"{r.out.splitlines()}")
        # The layout as a tarball (what `docker save` writes since Docker 25): the same image.
        tarball = self.path("layout.tar")
        with tarfile.open(tarball, "w") as tf:
            tf.add(layout, arcname=".")
        meta2 = self.import_ok(tarball, "oci-demo-tar")
        self.assertEqual(meta2["digest"], meta["digest"])

    def test_docker_save_archive(self):
        archive = self.path("saved.tar")
        config_digest = write_docker_archive(archive)
        meta = self.import_ok(archive, "docker-demo")
        self.assertEqual(meta["format"], "docker-archive")
        self.assertEqual(meta["container"]["config_digest"], config_digest)
        self.assertIsNone(meta["container"]["manifest_digest"])
        self.check_default_run("docker-demo")
        # The same content as the OCI layout gives the same sbx digest.
        layout = self.path("layout")
        write_oci_layout(layout)
        self.assertEqual(self.import_ok(layout, "oci-same")["digest"], meta["digest"])
        note(f"docker save archive imported as {meta['digest']} (config {config_digest})")

    def test_docker_save_with_a_shared_layer_symlink(self):
        archive = self.path("shared.tar")
        write_docker_archive(archive, shared_layer=True)
        meta = self.import_ok(archive, "docker-shared")
        self.assertEqual(len(meta["container"]["layers"]), 3)
        self.check_default_run("docker-shared")

    def test_a_digest_reference_gets_no_image_defaults(self):
        layout = self.path("layout")
        write_oci_layout(layout)
        digest = self.import_ok(layout, "oci-bydigest")["digest"]
        # By name the Entrypoint (sh -c) is in front; by digest the command runs as given.
        r = sbx(["run", "--image", digest, "--", "/bin/echo", "as given"], timeout=60)
        self.assertExit(r, 0)
        self.assertEqual(r.out, "as given\n")

    def test_one_decompression_budget_for_all_layers(self):
        # A layer that decompresses to ~0.9 MiB of data nobody extracts (an unknown member type),
        # listed three times: each would fit a per-layer budget, together they do not.
        def bomb(tf):
            info = tarfile.TarInfo("skipped")
            info.type, info.size = b"Z", 900 * 1024
            tf.addfile(info, io.BytesIO(b"\0" * info.size))
        lower = layer_tar(bomb)
        layout = self.path("bombs")
        write_oci_layout(layout, layers=(lower, lower, lower), platforms=("amd64",), gzip_all=True)
        r = sbx(["image", "import", layout, "--name", "bombs", "--max-bytes", "1M", "--max-entries", "50"])
        self.assertExit(r, 125)
        self.assertOneSbxLine(r)
        self.assertIn("decompresses to more than", r.err)

    def test_flags_override_the_image_config(self):
        layout = self.path("layout")
        write_oci_layout(layout)
        self.import_ok(layout, "oci-flags")
        # A command replaces Cmd and keeps the Entrypoint (sh -c); --workdir and --uid/--gid win.
        r = sbx(["run", "--image", "oci-flags", "--workdir", "/data", "--uid", "0", "--gid", "0",
                 "--env", "GREETING=from the flag", "--", "echo $GREETING; id -u; pwd"], timeout=60)
        self.assertExit(r, 0)
        self.assertEqual(r.out.splitlines(), ["from the flag", "0", "/data"])

    def test_platform_is_chosen_and_a_missing_one_is_named(self):
        layout = self.path("layout")
        write_oci_layout(layout)
        meta = self.import_ok(layout, "oci-arm", "--platform", "linux/arm64")
        self.assertEqual(meta["container"]["platform"], "linux/arm64")
        r = sbx(["image", "import", layout, "--name", "oci-s390x", "--platform", "linux/s390x"])
        self.assertExit(r, 125)
        self.assertOneSbxLine(r)
        self.assertIn("no image for linux/s390x", r.err)
        self.assertIn("linux/amd64, linux/arm64", r.err)

    def test_a_blob_that_does_not_match_its_digest_is_refused(self):
        layout = self.path("layout")
        _, layers = write_oci_layout(layout)
        before = sbx(["image", "ls", "--json"]).out
        victim = f"{layout}/blobs/sha256/{layers[1]['digest'][7:]}"
        with open(victim, "r+b") as f:
            data = bytearray(f.read())
            data[600] ^= 1
            f.seek(0)
            f.write(data)
        r = sbx(["image", "import", layout, "--name", "tampered"])
        self.assertExit(r, 125)
        self.assertOneSbxLine(r)
        self.assertIn("does not match its digest", r.err)
        self.assertEqual(sbx(["image", "ls", "--json"]).out, before, "nothing was stored")

    def test_layers_with_dotdot_or_absolute_names_are_refused(self):
        for bad, why in (("../escape.txt", "'..' component"), ("/etc/abs.txt", "absolute name")):
            with self.subTest(member=bad):
                def extra(tf, bad=bad):
                    add_bytes(tf, bad, b"x\n")
                layout = self.path("layout-" + why.split()[0].strip("'."))
                write_oci_layout(layout, layers=(lower_layer(), upper_layer(extra)))
                r = sbx(["image", "import", layout, "--name", "bad-layer"])
                self.assertExit(r, 125)
                self.assertOneSbxLine(r)
                self.assertIn(why, r.err)
                self.assertIn("layer 2 of 2", r.err)

    def test_format_rootfs_imports_a_layout_literally(self):
        layout = self.path("layout")
        write_oci_layout(layout, platforms=("amd64",))
        meta = self.import_ok(layout, "literal", "--format", "rootfs")
        self.assertEqual(meta["format"], "rootfs")
        self.assertNotIn("config", meta)
        r = sbx(["image", "import", busybox_tree(), "--name", "nope", "--format", "oci-layout"])
        self.assertExit(r, 125)
        self.assertIn("is not an OCI image layout", r.err)


def write_two_tag_layout(d):
    """An OCI layout holding two tagged images (skopeo copy ... oci:DIR:v1, then oci:DIR:v2): the
    same layers, configs that differ in GREETING."""
    write_oci_layout(d, platforms=("amd64",))
    with open(f"{d}/index.json") as f:
        first = json.load(f)["manifests"][0]
    with open(f"{d}/blobs/sha256/{first['digest'][7:]}") as f:
        manifest = json.load(f)
    with open(f"{d}/blobs/sha256/{manifest['config']['digest'][7:]}") as f:
        cfg = json.load(f)
    cfg["config"]["Env"] = ["PATH=/bin:/usr/bin:/sbin", "GREETING=the second tag"]

    def blob(data):
        with open(f"{d}/blobs/sha256/{sha(data)[7:]}", "wb") as f:
            f.write(data)
        return sha(data)
    cfg_bytes = json.dumps(cfg).encode()
    manifest["config"] = dict(manifest["config"], digest=blob(cfg_bytes), size=len(cfg_bytes))
    m2 = json.dumps(manifest).encode()
    second = {"mediaType": first["mediaType"], "digest": blob(m2), "size": len(m2), "platform": first["platform"]}
    first["annotations"] = {"org.opencontainers.image.ref.name": "v1"}
    second["annotations"] = {"org.opencontainers.image.ref.name": "v2"}
    with open(f"{d}/index.json", "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [first, second]}, f)


class ImportEdges(SbxTestCase):
    """sbx image import: DIR:TAG, stdin, the docker-dir layout, GNU sparse members (issue 33, item 4)."""

    def test_a_layout_with_two_tags_is_refused_without_a_tag_and_imports_the_one_named(self):
        layout = self.path("two-tags")
        write_two_tag_layout(layout)
        r = sbx(["image", "import", layout, "--name", "which"])
        self.assertExit(r, 125, "two tagged images and no tag: refused, not the first one silently")
        self.assertOneSbxLine(r)
        self.assertIn("holds 2 tagged images", r.err)
        self.assertIn('"v1", "v2"', r.err)
        self.assertIn(f"{layout}:TAG", r.err)
        for tag, greeting in (("v1", "hello from the image"), ("v2", "the second tag")):
            r = sbx(["image", "import", f"{layout}:{tag}", "--name", f"tagged:{tag}"], timeout=120)
            self.assertExit(r, 0)
            meta = json.loads(sbx(["image", "inspect", f"tagged:{tag}"]).out)
            self.assertIn(f"GREETING={greeting}", meta["config"]["Env"])
        r = sbx(["image", "import", f"{layout}:v3", "--name", "nope"])
        self.assertExit(r, 125)
        self.assertIn('no image tagged "v3"', r.err)
        # A directory whose own name has a ':' is a path, not DIR:TAG.
        colon = self.path("dir:v1")
        write_oci_layout(colon, platforms=("amd64",))
        self.assertExit(sbx(["image", "import", colon, "--name", "colon"], timeout=120), 0)

    def test_import_from_stdin(self):
        layout = self.path("layout")
        write_oci_layout(layout, platforms=("amd64",))
        tarball = self.path("layout.tar")
        with tarfile.open(tarball, "w") as tf:
            tf.add(layout, arcname=".")
        with open(tarball, "rb") as f:
            data = f.read()
        r = sbx(["image", "import", "-", "--name", "from-stdin", "--json"], input=data, timeout=120)
        self.assertExit(r, 0)
        meta = json.loads(r.out)
        self.assertEqual(meta["format"], "oci-layout")
        self.assertEqual(meta["digest"], json.loads(sbx(["image", "import", tarball, "--name", "from-file", "--json"],
                                                        timeout=120).out)["digest"])
        # The stream is bounded by what an archive within the limits can be (1K + 10 x 3K here).
        before = sbx(["image", "ls", "--json"]).out
        r = sbx(["image", "import", "-", "--name", "too-big", "--max-bytes", "1K", "--max-entries", "10"],
                input=data, timeout=120)
        self.assertExit(r, 125)
        self.assertOneSbxLine(r)
        self.assertIn("stdin holds more than 31744 bytes", r.err)
        self.assertEqual(sbx(["image", "ls", "--json"]).out, before, "nothing was stored")
        self.assertEqual(os.listdir(os.path.join(self.images_dir(), "tmp")), [], "no spool file left behind")

    def images_dir(self):
        meta = json.loads(sbx(["image", "inspect", "from-stdin"]).out)
        return os.path.dirname(os.path.dirname(os.path.dirname(meta["rootfs"])))

    def test_a_docker_dir_layout_is_named_with_how_to_convert_it(self):
        d = self.path("docker-dir")
        os.makedirs(d)
        lower = lower_layer()
        cfg = config("amd64", [sha(lower)])
        for data in (lower, cfg):
            with open(f"{d}/{sha(data)[7:]}", "wb") as f:
                f.write(data)
        with open(f"{d}/manifest.json", "w") as f:
            json.dump({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                       "config": {"digest": sha(cfg), "size": len(cfg)},
                       "layers": [{"digest": sha(lower), "size": len(lower)}]}, f)
        with open(f"{d}/version", "w") as f:
            f.write("Directory Transport Version: 1.1\n")
        r = sbx(["image", "import", d, "--name", "dd"])
        self.assertExit(r, 125)
        self.assertOneSbxLine(r)
        self.assertIn("podman save --format docker-dir", r.err)
        self.assertIn(f"skopeo copy dir:{d} oci:", r.err)
        self.assertIn("--format oci-archive", r.err)

    def test_a_gnu_sparse_member_is_named_with_how_to_avoid_it(self):
        tarball = self.path("sparse.tar")
        with tarfile.open(tarball, "w", format=tarfile.GNU_FORMAT) as tf:
            info = tarfile.TarInfo("var/holes.img")
            info.type, info.size, info.mode = tarfile.GNUTYPE_SPARSE, 0, 0o644
            tf.addfile(info)
            add_bytes(tf, "etc/ok.txt", b"ok\n")
        r = sbx(["image", "import", tarball, "--name", "sparse"])
        self.assertExit(r, 125)
        self.assertOneSbxLine(r)
        self.assertIn("var/holes.img", r.err)
        self.assertIn("GNU sparse file", r.err)
        self.assertIn("without --sparse", r.err)
        self.assertNotIn("neither a directory nor a tar archive", r.err, "the first member: still a tar")


class ImageRunsAsDocker(SbxTestCase):
    """--uid's group, --entrypoint and /etc/hosts of image runs (issue 33, item 3)."""

    def setUp(self):
        super().setUp()
        layout = self.path("layout")
        write_oci_layout(layout, platforms=("amd64",))
        r = sbx(["image", "import", layout, "--name", "docker-like"], timeout=120)
        self.assertExit(r, 0)

    def test_uid_alone_takes_that_users_group(self):
        # The image's User is app (1234:2345); docker's --user N runs with N's primary group.
        for uid, gid in (("0", "0"), ("1234", "2345"), ("777", "777")):
            r = sbx(["run", "--image", "docker-like", "--uid", uid, "--", "id -u; id -g"], timeout=60)
            self.assertExit(r, 0)
            self.assertEqual(r.out.splitlines(), [uid, gid], f"--uid {uid}")
        r = sbx(["run", "--image", "docker-like", "--uid", "0", "--gid", "5", "--", "id -g"], timeout=60)
        self.assertEqual(r.out, "5\n", "--gid given wins")

    def test_entrypoint_replaces_the_images(self):
        # The image's Entrypoint is ["/bin/sh", "-c"]: without --entrypoint a command is a script.
        r = self.run_sbx(["one", "two"], opts=["--image", "docker-like", "--entrypoint", "/bin/echo"], timeout=60)
        self.assertExit(r, 0)
        self.assertEqual(r.out, "one two\n")
        self.assertEqual(self.need_trace(r)["image"]["entrypoint"], ["/bin/echo"])
        r = self.run_sbx(["/bin/echo", "cleared"], opts=["--image", "docker-like", "--entrypoint", ""], timeout=60)
        self.assertExit(r, 0)
        self.assertEqual(r.out, "cleared\n")
        self.assertEqual(self.need_trace(r)["image"]["entrypoint"], [])
        r = sbx(["run", "--image", "docker-like", "--entrypoint", ""], timeout=60)
        self.assertExit(r, 125)
        self.assertIn("no command", r.err)
        r = sbx(["run", "--entrypoint", "/bin/echo", "--", "x"], timeout=60)
        self.assertExit(r, 125)
        self.assertIn("it needs --image", r.err)

    def test_etc_hosts_names_localhost_and_the_hostname(self):
        r = sbx(["run", "--image", "docker-like", "--", "cat /etc/hosts; hostname"], timeout=60)
        self.assertExit(r, 0)
        lines = r.out.splitlines()
        host = lines[-1]
        self.assertIn(f"127.0.0.1\tlocalhost {host}", lines)
        self.assertIn("::1\tlocalhost ip6-localhost ip6-loopback", lines)

    def test_an_image_whose_etc_hosts_is_a_symlink_keeps_it_and_runs(self):
        """The generated /etc/hosts is bound only over a plain file: an image whose /etc/hosts is
        a symlink (to /run/hosts, as some base images have) kept running as before it existed."""
        def link(tf):
            info = tarfile.TarInfo("etc/hosts")
            info.type, info.linkname = tarfile.SYMTYPE, "/run/hosts"
            tf.addfile(info)
        layout = self.path("linked")
        write_oci_layout(layout, layers=(lower_layer(), upper_layer(link)), platforms=("amd64",))
        self.assertExit(sbx(["image", "import", layout, "--name", "hosts-link"], timeout=120), 0)
        r = sbx(["run", "--image", "hosts-link", "--", "readlink /etc/hosts; echo ran"], timeout=60)
        self.assertExit(r, 0)
        self.assertEqual(r.out.split(), ["/run/hosts", "ran"], r.describe())


if __name__ == "__main__":
    unittest.main()
