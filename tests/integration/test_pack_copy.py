"""A hostile pack owner (issue 30, items 2 and 3): a pack run mounts a private copy of the pack and
its contexts, hashed as it was made, so the program runs exactly the bytes the record's digest (and
a tenant's allowlist) names, however the owner swaps files meanwhile; packs are read within bounds
(size, entries, depth), streaming, never following a link nor blocking on a FIFO. Root and
rootless."""
import hashlib
import json
import os
import resource
import subprocess
import time
import unittest

# ASan's shadow memory and quarantine add ~170 MiB to any process (tests/sanitize.sh); the bounds
# stay far below the 2 GiB an unbounded read of the sparse file costs.
RSS_SCALE = 8 if os.environ.get("ASAN_OPTIONS") else 1

from sbxtest import MODE, SBX, SbxTestCase, note, sbx, shared_tmp, validate_trace

ROOT = MODE == "root"
OUT_SCHEMA = {"type": "object", "required": ["v"], "additionalProperties": False,
              "properties": {"v": {"enum": ["good", "evil"]}}}
IN_SCHEMA = {"type": "object"}

# The swapper: renames one of two prepared entries (a hard link of a file, a symlink, or a new FIFO
# for a name ending in .fifo) over TARGET in a tight loop until killed. A rename is atomic, so at
# every moment TARGET is whole: either version, never a torn file.
SWAPPER = r"""
import os, sys
target, a, b = sys.argv[1:4]
tmp = a + ".swap"  # beside the versions, outside the pack (whose every entry is hashed)
while True:
    for src in (a, b):
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if os.path.islink(src):
            os.symlink(os.readlink(src), tmp)
        elif src.endswith(".fifo"):
            os.mkfifo(tmp, 0o644)
        else:
            os.link(src, tmp)
        os.rename(tmp, target)
"""


class PackCopy(SbxTestCase):
    def setUp(self):
        super().setUp()
        self.swappers = []

    def tearDown(self):
        for p in self.swappers:
            p.kill()
            p.wait()
        super().tearDown()

    def swap(self, target, a, b):
        p = subprocess.Popen(["/usr/bin/python3", "-c", SWAPPER, target, a, b])
        self.swappers.append(p)
        time.sleep(0.2)
        return p

    def make_pack(self, name="pk", run="good", context=()):
        d = self.path(name)
        os.makedirs(d + "/schemas")
        for x in (d, d + "/schemas"):
            os.chmod(x, 0o755)
        manifest = {"name": name, "version": "1", "entrypoint": ["/bin/sh", "/pack/run.sh"],
                    "input_schema": "schemas/in.json", "output_schema": "schemas/out.json",
                    "limits": {"timeout": "20s"}, "network": {"mode": "none"}, "context": list(context)}
        for rel, content in (("pack.json", json.dumps(manifest)), ("schemas/in.json", json.dumps(IN_SCHEMA)),
                             ("schemas/out.json", json.dumps(OUT_SCHEMA))):
            self.write(os.path.join(d, rel), content)
        # The two versions of run.sh live beside the pack (same file system, for the swapper's links).
        for v in ("good", "evil"):
            self.write(self.path(f"run-{v}.sh"), f"printf '{{\"v\": \"{v}\"}}' > /out/result.json\n")
        os.link(self.path(f"run-{run}.sh"), d + "/run.sh")
        return d

    def write(self, p, content, mode=0o644):
        with open(p, "w") as f:
            f.write(content)
        os.chmod(p, mode)
        return p

    def records(self):
        return self.write(self.path("records.json"), "[{}]")

    def digest(self, d):
        r = sbx(["pack", "validate", d])
        self.assertExit(r, 0)
        return r.out.split("(digest ")[1].split(")")[0]

    def pack_run(self, d, *extra, env=None):
        return self.sbx_traced(["pack", "run", d, "--input", self.records()], after=extra, timeout=60, env=env)

    def copies_dir(self):
        """Where sbx makes its private copies: <state>/tmp (guarded against rw binds), not $TMPDIR."""
        return os.path.join(os.environ["SBX_STATE_DIR"], "tmp")

    def leftovers(self):
        tmp = os.environ.get("TMPDIR", "/tmp")
        found = [n for n in os.listdir(tmp) if n.startswith("sbx-pack-") or n.startswith("sbx-context-")]
        if os.path.isdir(self.copies_dir()):
            found += [n for n in os.listdir(self.copies_dir()) if n.startswith(("pack-", "context-"))]
        return found

    # -- item 2: the program runs the bytes that were hashed -------------------------------------

    def test_tenant_runs_only_the_allowed_bytes_while_run_sh_is_swapped(self):
        d = self.make_pack()
        allowed = self.digest(d)
        tenants = self.path("tenants")
        os.mkdir(tenants)
        self.write(os.path.join(tenants, "T.json"), json.dumps(
            {"id_slot": 3, "separate_ids": "required" if ROOT else "preferred", "images": ["host"], "packs": [allowed]}))
        env = dict(os.environ, SBX_TENANTS_DIR=tenants)
        before = self.leftovers()
        self.swap(d + "/run.sh", self.path("run-good.sh"), self.path("run-evil.sh"))
        outcomes = {"ok": 0, "refused": 0}
        for i in range(24):
            r = self.pack_run(d, "--tenant", "T", env=env)
            if r.rc == 0:
                outcomes["ok"] += 1
                self.assertEqual(json.loads(r.out), {"v": "good"},
                                 f"run {i}: the tenant ran code not on its allowlist\n{r.describe()}")
                self.assertEqual(r.trace["invocation"]["pack"]["digest"], allowed)
            else:
                # Refused before anything ran: the copy's digest is not the tenant's, or a file
                # was replaced while it was copied.
                self.assertExit(r, 125, f"run {i}")
                self.assertRegex(r.err, "not among the tenant's packs|replaced|changed while")
                outcomes["refused"] += 1
        note(f"24 tenant runs while run.sh was swapped: {outcomes}")
        self.assertGreater(outcomes["ok"], 0, "no run got through: the test proves nothing")
        self.assertEqual(self.leftovers(), before, "the private copies are removed after each run")

    def test_every_run_ran_what_its_record_names(self):
        d = self.make_pack()
        good = self.digest(d)
        os.unlink(d + "/run.sh")
        os.link(self.path("run-evil.sh"), d + "/run.sh")
        evil = self.digest(d)
        self.swap(d + "/run.sh", self.path("run-good.sh"), self.path("run-evil.sh"))
        seen = set()
        for i in range(16):
            r = self.pack_run(d)
            if r.rc != 0:
                self.assertExit(r, 125, f"run {i}")
                continue
            ran = json.loads(r.out)["v"]
            named = r.trace["invocation"]["pack"]["digest"]
            self.assertEqual(named, {"good": good, "evil": evil}[ran],
                             f"run {i} ran the {ran} run.sh, its record names {named}")
            seen.add(ran)
        note(f"versions run (each named by its record): {sorted(seen)}")
        self.assertTrue(seen, "no run got through")

    def test_a_context_is_the_copy_its_record_digest_names(self):
        d = self.make_pack(context=[{"name": "data", "path": "/ctx/data", "required": True}])
        self.write(self.path("run-ctx.sh"), "printf '{\"v\": \"%s\"}' \"$(cat /ctx/data)\" > /out/result.json\n")
        os.unlink(d + "/run.sh")
        os.link(self.path("run-ctx.sh"), d + "/run.sh")
        good, evil = self.write(self.path("ctx-good"), "good"), self.write(self.path("ctx-evil"), "evil")
        ctx = self.path("ctx")
        os.link(good, ctx)
        self.swap(ctx, good, evil)
        seen = set()
        for i in range(12):
            r = self.pack_run(d, "--context", "data=" + ctx)
            if r.rc != 0:
                self.assertExit(r, 125, f"run {i}")
                self.assertRegex(r.err, "replaced|changed while")
                continue
            ran = json.loads(r.out)["v"]
            [c] = r.trace["invocation"]["pack"]["contexts"]
            self.assertEqual(c["source"], ctx)
            self.assertEqual(c.get("digest"), "sha256:" + hashlib.sha256(ran.encode()).hexdigest(),
                             f"run {i}: the program read {ran!r}; the record's context digest must be of that\n{c}")
            seen.add(ran)
        note(f"context versions read (each named by its digest): {sorted(seen)}")
        self.assertTrue(seen)

    def test_a_writable_file_is_not_writable_in_the_copy_and_the_run_replays(self):
        # A file the owner left group/other-writable: in the copy nobody but sbx may write it (the
        # copy's path in $TMPDIR is no secret), and the digest names the mode as mounted, so the
        # tree a replay rebuilds from the blobs has the recorded digest.
        d = self.make_pack()
        os.chmod(d + "/schemas/out.json", 0o666)
        self.write(self.path("run-mode.sh"), "stat -c %a /pack/schemas/out.json >&2; "
                   "printf '{\"v\": \"good\"}' > /out/result.json\n")
        os.unlink(d + "/run.sh")
        os.link(self.path("run-mode.sh"), d + "/run.sh")
        r = self.pack_run(d)
        self.assertExit(r, 0)
        self.assertIn("644", r.err)
        self.assertEqual(r.trace["invocation"]["pack"]["digest"], self.digest(d))
        rp = sbx(["replay", r.trace["run_id"]], timeout=60)
        self.assertExit(rp, 0)
        self.assertEqual(rp.out, "identical\n")

    # -- the copies themselves: out of reach of every sandbox, swept after a kill -----------------

    def test_a_concurrent_run_with_a_rw_tmp_bind_cannot_rewrite_the_copy(self):
        # A common flag, `--bind $TMPDIR:...:rw`, in a concurrent run of the same user: while the
        # copies were made in $TMPDIR (owned by the caller, rootless the sandbox's own uid), it
        # rewrote run.sh after its hash, and the pack run executed other code under the allowed
        # digest. Now the copies live under the state dir, which such a bind does not reach.
        d = self.make_pack()
        allowed = self.digest(d)
        tmp = os.environ.get("TMPDIR", "/tmp")
        shared_tmp(self, tmp)
        evil = "/t/" + os.path.relpath(self.path("run-evil.sh"), tmp)
        loop = ("while :; do for f in /t/sbx-pack-*/pack/run.sh; do "
                f"[ -f \"$f\" ] && cat {evil} > \"$f\" 2>/dev/null; done; done")
        attacker = subprocess.Popen([SBX, "run", "--bind", f"{tmp}:/t:rw", "--timeout", "60s", "--", "/bin/sh", "-c", loop],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            self.assertIsNone(attacker.poll(), "the attacking run did not start")
            ran = []
            for i in range(12):
                r = self.pack_run(d)
                ran.append(json.loads(r.out)["v"] if r.rc == 0 else f"exit {r.rc}: {r.err.strip()}")
                if r.trace:
                    self.assertEqual(r.trace["invocation"]["pack"]["digest"], allowed)
        finally:
            attacker.terminate()
            attacker.wait(timeout=30)
        note(f"12 pack runs beside a run binding {tmp} rw: {ran}")
        self.assertEqual(ran, ["good"] * 12, "a concurrent run rewrote the copy after its hash")

    def test_the_copies_dir_cannot_be_bound_rw_and_a_run_leaves_no_copy(self):
        d = self.make_pack()
        self.write(self.path("run-slow.sh"), "sleep 1; printf '{\"v\": \"good\"}' > /out/result.json\n")
        os.unlink(d + "/run.sh")
        os.link(self.path("run-slow.sh"), d + "/run.sh")
        before = self.leftovers()
        p = subprocess.Popen([SBX, "pack", "run", d, "--input", self.records()], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        seen = []
        deadline = time.monotonic() + 20
        while not seen and time.monotonic() < deadline and p.poll() is None:
            seen = [n for n in self.leftovers() if n not in before]
            time.sleep(0.02)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err.decode(errors="replace"))
        note(f"the copy while the run went on: {seen}")
        self.assertTrue(seen and all(n.startswith("pack-") for n in seen), f"no copy seen in {self.copies_dir()}: {seen}")
        self.assertEqual(self.leftovers(), before, "the private copy is removed after the run")
        # The directory where copies are made is sbx's own: no run may bind it (or a parent) rw.
        for src in (self.copies_dir(), os.path.dirname(os.environ["SBX_STATE_DIR"])):
            r = self.run_sbx(["true"], opts=["--bind", f"{src}:/c:rw"], trace=False)
            self.assertExit(r, 125)
            self.assertIn("sbx's state dir", r.err)

    def test_copies_a_killed_run_left_are_swept_by_the_next_pack_run(self):
        d = self.make_pack()
        base = self.copies_dir()
        os.makedirs(base, exist_ok=True)
        # What a SIGKILLed sbx leaves: its copy, named by its (now dead) pid and start time.
        dead = os.path.join(base, "pack-999999999-5-abcdef")
        os.makedirs(dead + "/pack")
        self.write(dead + "/pack/run.sh", "echo old\n")
        # A live owner's copy (this test process, its real start time) is in use: kept.
        with open("/proc/self/stat") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
        live = os.path.join(base, f"context-{os.getpid()}-{start}-ghijkl")
        os.makedirs(live)
        try:
            r = self.pack_run(d)
            self.assertExit(r, 0)
            self.assertFalse(os.path.exists(dead), "a dead run's copy was not swept")
            self.assertTrue(os.path.exists(live), "a live process's copy was swept")
        finally:
            subprocess.run(["rm", "-rf", live], check=False)

    def test_copies_a_killed_run_left_are_swept_by_gc(self):
        """A killed run's copy is not left until some later pack run: `sbx gc` sweeps it too."""
        base = self.copies_dir()
        os.makedirs(base, exist_ok=True)
        dead = os.path.join(base, "replay-999999999-5-abcdef")
        os.makedirs(dead + "/pack")
        with open("/proc/self/stat") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
        live = os.path.join(base, f"pack-{os.getpid()}-{start}-ghijkl")
        os.makedirs(live)
        try:
            r = sbx(["gc", "--dry-run"])
            self.assertExit(r, 0)
            self.assertTrue(os.path.exists(dead), "gc --dry-run deleted a copy")
            r = sbx(["gc"])
            self.assertExit(r, 0)
            self.assertFalse(os.path.exists(dead), "gc did not sweep a dead run's copy\n" + r.describe())
            self.assertIn("deleted 1 private copy dir(s) of runs that were killed", r.out)
            self.assertTrue(os.path.exists(live), "gc swept a live process's copy")
        finally:
            subprocess.run(["rm", "-rf", live], check=False)

    # -- item 3: bounded, streaming, no link followed, no FIFO waited on -------------------------

    def validate_bounded(self, d, as_limit=1 << 30, timeout=20):
        """sbx pack validate under an address-space limit, with its peak RSS (KiB)."""
        def limit():
            # ASan reserves terabytes of shadow address space at start: under tests/sanitize.sh
            # the bound is the measured peak RSS alone.
            if not os.environ.get("ASAN_OPTIONS"):
                resource.setrlimit(resource.RLIMIT_AS, (as_limit, as_limit))
        argv = ["/usr/bin/time", "-f", "maxrss=%M", SBX, "pack", "validate", d]
        start = time.monotonic()
        p = subprocess.run(argv, preexec_fn=limit, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
        wall = time.monotonic() - start
        err = p.stderr.decode(errors="replace")
        rss = [int(l.split("=")[1]) for l in err.splitlines() if l.startswith("maxrss=")]
        lines = [l for l in err.splitlines() if not l.startswith("maxrss=") and not l.startswith("Command ")]
        return p.returncode, p.stdout.decode(errors="replace"), "\n".join(lines), (rss[0] if rss else 0), wall

    @unittest.skipUnless(os.access("/usr/bin/time", os.X_OK), "needs /usr/bin/time")
    def test_sparse_2g_file_is_refused_quickly_in_bounded_memory(self):
        d = self.make_pack()
        with open(d + "/big", "wb") as f:
            f.truncate(2 << 30)  # 2 GiB, no block on disk
        rc, out, err, rss, wall = self.validate_bounded(d, as_limit=8 << 30)
        note(f"pack validate of a pack with a 2 GiB sparse file: exit {rc} in {wall:.2f}s, max RSS {rss // 1024} MiB: {err}")
        self.assertEqual(rc, 125, err)
        self.assertIn("more than 64M of file data", err)
        self.assertIn("big", err)
        self.assertIn("image", err)  # what to do about it
        self.assertLess(rss, RSS_SCALE * 64 * 1024, "max RSS must stay far below the file's size")
        self.assertLess(wall, 10)
        # pack run refuses it the same way, before anything runs.
        r = self.pack_run(d)
        self.assertExit(r, 125)
        self.assertIn("more than 64M of file data", r.err)

    def test_too_many_files_is_refused(self):
        d = self.make_pack()
        os.mkdir(d + "/many")
        for i in range(4100):
            open(f"{d}/many/{i}", "w").close()
        r = sbx(["pack", "validate", d])
        self.assertExit(r, 125)
        self.assertIn("more than 4096 files and directories", r.err)

    @unittest.skipUnless(os.access("/usr/bin/time", os.X_OK), "needs /usr/bin/time")
    def test_fifo_or_link_as_manifest_is_refused_without_a_hang(self):
        # pack.json was opened following links and blocking: a FIFO there hung `pack validate`
        # (and `pack run`, `mcp --packs`) forever.
        d = self.make_pack()
        os.unlink(d + "/pack.json")
        os.mkfifo(d + "/pack.json", 0o644)
        try:
            rc, out, err, rss, wall = self.validate_bounded(d, timeout=15)
        except subprocess.TimeoutExpired:
            self.fail("pack validate hung on a FIFO named pack.json")
        self.assertEqual(rc, 125, err)
        self.assertIn("pack.json", err)
        os.unlink(d + "/pack.json")
        os.symlink("/dev/zero", d + "/pack.json")
        rc, out, err, rss, wall = self.validate_bounded(d, timeout=15)
        self.assertEqual(rc, 125, err)
        self.assertIn("pack.json", err)
        self.assertIn("symlink", err)

    @unittest.skipUnless(os.access("/usr/bin/time", os.X_OK), "needs /usr/bin/time")
    def test_swapped_symlink_and_fifo_are_refused_without_a_hang(self):
        # A race: the window between a listing and an open is short, so this one seldom catches
        # an unsafe reader; the unit tests (test_pack_tree.cpp) pin the swapped cases down.
        d = self.make_pack()
        os.symlink("/dev/zero", self.path("zero.link"))
        self.write(self.path("in.json"), json.dumps(IN_SCHEMA))
        # run.sh: a regular file or a link to /dev/zero; schemas/in.json: a regular file or a FIFO.
        self.swap(d + "/run.sh", self.path("run-good.sh"), self.path("zero.link"))
        self.swap(d + "/schemas/in.json", self.path("in.json"), self.path("in.fifo"))
        outcomes = {}
        for i in range(30):
            try:
                rc, out, err, rss, wall = self.validate_bounded(d, timeout=15)
            except subprocess.TimeoutExpired:
                self.fail(f"run {i}: pack validate hung (a FIFO opened, or /dev/zero read)")
            self.assertIn(rc, (0, 125), f"run {i}: {err}")
            if rc == 125:
                self.assertRegex(err, "symlink|fifo|replaced|changed while|not a regular file|only regular files|No such file",
                                 f"run {i}")
            self.assertLess(rss, RSS_SCALE * 128 * 1024, f"run {i}")
            outcomes[rc] = outcomes.get(rc, 0) + 1
        note(f"30 validations while run.sh and schemas/in.json were swapped: {outcomes}")


if __name__ == "__main__":
    unittest.main()
