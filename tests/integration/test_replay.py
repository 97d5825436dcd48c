"""What a replay needs is kept (the blob store beside the ledger), `sbx replay RUN` and `sbx gc`.
Runs as root and rootless.

On the previous binary none of this exists: `sbx replay` and `sbx gc` are unknown commands (exit
125), `run --keep-inputs` is an unknown option, and no record names any blob."""
import fcntl
import glob
import hashlib
import json
import os
import shutil
import subprocess
import time
import unittest

from sbxtest import SBX, SbxTestCase, busybox_tree, ledger_lines, note, sbx, shared_tmp, validate_trace

RECORD_SCHEMA = {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}}
OUTPUT_SCHEMA = {"type": "object", "required": ["count"], "additionalProperties": False,
                 "properties": {"count": {"type": "integer", "minimum": 0}, "when": {"type": "string"}}}
COUNT = "set -eu\nn=$(grep -o '\"id\"' /in/records.json | wc -l)\nprintf '{\"count\": %d}' \"$n\" > /out/result.json\n"
# Differs on every run: the time in nanoseconds, as a string under /when.
CLOCK = ("set -eu\nn=$(grep -o '\"id\"' /in/records.json | wc -l)\n"
         "printf '{\"count\": %d, \"when\": \"%s\"}' \"$n\" \"$(date +%s%N)\" > /out/result.json\n")


class ReplayCase(SbxTestCase):
    def setUp(self):
        super().setUp()
        self.state = self.path("state")
        self.env = dict(os.environ, SBX_STATE_DIR=self.state)

    def sbx(self, args, **kw):
        kw.setdefault("env", self.env)
        kw.setdefault("timeout", 60)
        return sbx(args, **kw)

    def make_pack(self, script, name="p"):
        d = self.path(name)
        os.makedirs(d + "/schemas")
        for p in (d, d + "/schemas"):
            os.chmod(p, 0o755)
        manifest = {"name": "t-" + name, "version": "1.0.0", "entrypoint": ["/bin/sh", "/pack/run.sh"],
                    "input_schema": "schemas/in.json", "output_schema": "schemas/out.json",
                    "limits": {"timeout": "20s"}}
        for rel, content in (("pack.json", json.dumps(manifest)), ("schemas/in.json", json.dumps(RECORD_SCHEMA)),
                             ("schemas/out.json", json.dumps(OUTPUT_SCHEMA)), ("run.sh", script)):
            with open(os.path.join(d, rel), "w") as f:
                f.write(content)
            os.chmod(os.path.join(d, rel), 0o644)
        inp = self.path(name + "-records.json")
        with open(inp, "w") as f:
            json.dump([{"id": "a"}, {"id": "b"}], f)
        os.chmod(inp, 0o644)
        return d, inp

    def records(self):
        return [e["record"] for e in ledger_lines(self.state)]

    def blob_file(self, sha):
        return os.path.join(self.state, "blobs", "sha256", sha[:2], sha)

    def blobs(self, record, role):
        return [b for b in record.get("blobs", []) if b["role"] == role]


class KeepAndReplay(ReplayCase):
    def test_pack_keeps_what_it_consumed_and_replays_identically(self):
        d, inp = self.make_pack(COUNT)
        r = self.sbx(["pack", "run", d, "--input", inp])
        self.assertExit(r, 0)
        rec = self.records()[-1]
        validate_trace(self, rec)
        files = sorted(b["path"] for b in self.blobs(rec, "pack_file"))
        self.assertEqual(files, ["pack.json", "run.sh", "schemas/in.json", "schemas/out.json"])
        self.assertEqual([b["path"] for b in self.blobs(rec, "pack_dir")], ["schemas"])
        for role in ("records", "profile", "result"):
            self.assertEqual(len(self.blobs(rec, role)), 1, role)
        # Every blob is there, under its own sha256, with its recorded size.
        for b in rec["blobs"]:
            if "sha256" not in b or b["role"] == "pack_dir":
                continue
            with open(self.blob_file(b["sha256"]), "rb") as f:
                data = f.read()
            self.assertEqual(hashlib.sha256(data).hexdigest(), b["sha256"], b)
            self.assertEqual(len(data), b["bytes"], b)
        with open(inp, "rb") as f:
            self.assertEqual(self.blobs(rec, "records")[0]["sha256"], hashlib.sha256(f.read()).hexdigest())
        self.assertEqual(self.blobs(rec, "result")[0]["sha256"], rec["outputs"][0]["sha256"])

        rp = self.sbx(["replay", rec["run_id"]])
        note(f"replay of a deterministic pack: rc {rp.rc}, stdout {rp.out!r}, stderr {rp.err.strip()!r}")
        self.assertExit(rp, 0)
        self.assertEqual(rp.out, "identical\n")
        lines = ledger_lines(self.state)
        orig = next(e for e in lines if e["run_id"] == rec["run_id"])
        new = lines[-1]["record"]
        validate_trace(self, new)
        self.assertEqual(new["replay_of"], {"run_id": rec["run_id"], "seq": orig["seq"], "record_hash": orig["hash"]})
        self.assertEqual(new["invocation"]["pack"]["digest"], rec["invocation"]["pack"]["digest"])
        self.assertEqual(new["invocation"]["profile"]["sha256"], rec["invocation"]["profile"]["sha256"])
        self.assertEqual(new["invocation"]["spec"]["limits"], rec["invocation"]["spec"]["limits"])
        # The pack's own directory may change or go: the replay runs from the blobs.
        shutil.rmtree(d)
        rp2 = self.sbx(["replay", rec["run_id"], "--json"])
        self.assertExit(rp2, 0)
        self.assertTrue(json.loads(rp2.out)["identical"])

    def test_pack_that_prints_the_time_differs_and_names_the_pointer(self):
        d, inp = self.make_pack(CLOCK)
        self.assertExit(self.sbx(["pack", "run", d, "--input", inp]), 0)
        rp = self.sbx(["replay", "last"])
        note(f"replay of a pack that prints the time: rc {rp.rc}, stdout:\n{rp.out}")
        self.assertExit(rp, 1)
        lines = rp.out.splitlines()
        self.assertTrue(lines[0].startswith("different: "), rp.out)
        self.assertTrue(any(l.startswith("  output /out/result.json: original {\"sha256\":") for l in lines), rp.out)
        self.assertTrue(any(l.startswith("  result #/when: original \"") and ", replay \"" in l for l in lines), rp.out)
        self.assertFalse(any("#/count" in l for l in lines), rp.out)
        j = self.sbx(["replay", "-2", "--json"])  # the same original again (the replay is now last)
        self.assertExit(j, 1)
        doc = json.loads(j.out)
        self.assertFalse(doc["identical"])
        whens = [x for x in doc["differences"] if x["what"] == "result"]
        self.assertEqual([x["where"] for x in whens], ["/when"])
        self.assertNotEqual(whens[0]["original"], whens[0]["replay"])

    def test_replay_json_escapes_what_it_quotes(self):
        # A difference quotes the pack's output: a C1 control in it (U+009B, a one-byte CSI for many
        # terminals) is printed as \u009b, never raw.
        c1 = ("set -eu\nprintf '{\"count\": 2, \"when\": \"\\302\\233%s\"}' \"$(date +%s%N)\" > /out/result.json\n")
        d, inp = self.make_pack(c1)
        self.assertExit(self.sbx(["pack", "run", d, "--input", inp]), 0)
        j = self.sbx(["replay", "last", "--json"])
        self.assertExit(j, 1)
        self.assertTrue(all(b < 0x80 for b in j.stdout), j.stdout)
        self.assertIn(b"\\u009b", j.stdout)
        whens = [x for x in json.loads(j.out)["differences"] if x["what"] == "result"]
        self.assertTrue(whens[0]["original"].startswith("\u009b"), whens)

    def test_missing_blob_is_125_and_named(self):
        d, inp = self.make_pack(COUNT)
        self.assertExit(self.sbx(["pack", "run", d, "--input", inp]), 0)
        rec = self.records()[-1]
        sha = self.blobs(rec, "records")[0]["sha256"]
        os.unlink(self.blob_file(sha))
        rp = self.sbx(["replay", rec["run_id"]])
        note(f"replay with a deleted blob: rc {rp.rc}, stderr {rp.err.strip()!r}")
        self.assertExit(rp, 125)
        line = self.assertOneSbxLine(rp)
        self.assertIn("blob sha256:" + sha, line)
        self.assertIn("records", line)
        self.assertIn("missing", line)
        self.assertEqual(len(self.records()), 1, "nothing ran, nothing was recorded")

    def test_changed_blob_is_refused(self):
        d, inp = self.make_pack(COUNT)
        self.assertExit(self.sbx(["pack", "run", d, "--input", inp]), 0)
        sha = next(b for b in self.blobs(self.records()[-1], "pack_file") if b["path"] == "run.sh")["sha256"]
        p = self.blob_file(sha)
        os.chmod(p, 0o600)
        with open(p, "a") as f:
            f.write("echo tampered\n")
        rp = self.sbx(["replay", "last"])
        self.assertExit(rp, 125)
        self.assertIn("does not hold the bytes of its name", self.assertOneSbxLine(rp))

    def test_keep_ceiling_skips_and_says_why(self):
        d, inp = self.make_pack(COUNT)
        env = dict(self.env, SBX_KEEP_MAX_BYTES="20")
        self.assertExit(self.sbx(["pack", "run", d, "--input", inp], env=env), 0)
        rec = self.records()[-1]
        skipped = self.blobs(rec, "records")[0]
        self.assertIn("keep ceiling", skipped["skipped"])
        # The hash is recorded (what was consumed), the bytes are not kept.
        self.assertFalse(os.path.exists(self.blob_file(skipped["sha256"])))
        rp = self.sbx(["replay", "last"])
        self.assertExit(rp, 125)
        self.assertIn("was not kept", self.assertOneSbxLine(rp))

    def test_run_keep_inputs_never_follows_a_symlink_and_replays(self):
        secret = self.path("outside-secret")
        with open(secret, "w") as f:
            f.write("host secret\n")
        tree = self.path("tree")
        os.makedirs(tree + "/sub")
        for p in (tree, tree + "/sub"):
            os.chmod(p, 0o755)
        with open(tree + "/sub/a.txt", "w") as f:
            f.write("alpha\n")
        os.chmod(tree + "/sub/a.txt", 0o644)
        os.symlink(secret, tree + "/link")
        single = self.path("one.txt")
        with open(single, "w") as f:
            f.write("one\n")
        os.chmod(single, 0o644)
        cmd = ["run", "--keep-inputs", "--input", tree + ":/in/tree", "--input", single, "--",
               "sh", "-c", "cat /in/tree/sub/a.txt /in/one.txt"]
        r = self.sbx(cmd)
        self.assertExit(r, 0)
        rec = self.records()[-1]
        validate_trace(self, rec)
        by_path = {b["path"]: b for b in rec["blobs"]}
        self.assertIn("sha256", by_path["/in/tree/sub/a.txt"])
        self.assertIn("sha256", by_path["/in/one.txt"])
        self.assertEqual(by_path["/in/tree/link"]["role"], "input_link")
        self.assertEqual(by_path["/in/tree/link"]["target"], secret)
        self.assertNotIn("sha256", by_path["/in/tree/link"])
        for b in rec["blobs"]:
            if "sha256" in b and "skipped" not in b:
                with open(self.blob_file(b["sha256"]), "rb") as f:
                    self.assertNotIn(b"host secret", f.read())
        rp = self.sbx(["replay", "last"])
        note(f"replay of a run with --keep-inputs: rc {rp.rc}, stdout {rp.out!r}")
        self.assertExit(rp, 0)
        self.assertEqual(rp.out, "identical\n")
        self.assertIn(b"alpha\none\n", rp.stderr, "the program's output goes to stderr")
        # A plain run without --keep-inputs kept nothing: say so.
        self.assertExit(self.sbx(["run", "--", "true"]), 0)
        rp = self.sbx(["replay", "last"])
        self.assertExit(rp, 125)
        self.assertIn("--keep-inputs", self.assertOneSbxLine(rp))

    def test_an_edited_record_is_not_replayed_and_a_recorded_link_is_never_followed(self):
        """The record decides what replay mounts and writes, and anyone who can write the ledger
        can edit it: an edit that breaks the chain is refused outright, and one whose hashes were
        recomputed still cannot make the rebuilt tree reach outside its directory through a
        recorded link ("x" -> a host directory, then an entry "x/zz")."""
        from test_ledger import make_line, split_line
        outside = self.path("outside")
        os.makedirs(outside)
        tree = self.path("tree")
        os.makedirs(tree)
        os.chmod(tree, 0o755)
        with open(tree + "/a.txt", "w") as f:
            f.write("alpha\n")
        os.chmod(tree + "/a.txt", 0o644)
        os.symlink(outside, tree + "/x")
        r = self.sbx(["run", "--keep-inputs", "--input", tree + ":/in/tree", "--", "cat", "/in/tree/a.txt"])
        self.assertExit(r, 0)
        ledger = os.path.join(self.state, "traces", "ledger.jsonl")
        with open(ledger, "rb") as f:
            lines = [l for l in f.read().split(b"\n") if l]
        record_bytes, env = split_line(lines[-1])
        record = json.loads(record_bytes)
        self.assertIn("/in/tree/x", {b["path"] for b in record["blobs"] if b["role"] == "input_link"})
        record["blobs"].append({"role": "input_link", "path": "/in/tree/x/zz", "target": "/etc/passwd"})
        edited = json.dumps(record, separators=(",", ":")).encode()
        # 1. Edited in place: the line's hash no longer matches.
        with open(ledger, "wb") as f:
            f.write(b"\n".join(lines[:-1] + [lines[-1].replace(record_bytes, edited)]) + b"\n")
        rp = self.sbx(["replay", "last"])
        self.assertExit(rp, 125)
        self.assertIn("chain is broken", self.assertOneSbxLine(rp))
        # 2. Edited with its hash recomputed (no anchor, no key: the chain holds).
        line, _ = make_line(edited, env["seq"], env["run_id"], env["prev"])
        with open(ledger, "wb") as f:
            f.write(b"\n".join(lines[:-1] + [line]) + b"\n")
        self.assertExit(self.sbx(["trace", "verify"]), 0)
        rp = self.sbx(["replay", "last"])
        note(f"replay of a rechained record with a link escape: rc {rp.rc}, {rp.err.strip()[:200]!r}")
        self.assertExit(rp, 125)
        self.assertIn("never follows a link", self.assertOneSbxLine(rp))
        self.assertEqual(os.listdir(outside), [], "replay created something outside its tree")

    def test_plain_run_that_prints_the_time_differs_on_stdout(self):
        self.assertExit(self.sbx(["run", "--keep-inputs", "--", "sh", "-c", "date +%s%N"]), 0)
        rp = self.sbx(["replay", "last"])
        self.assertExit(rp, 1)
        self.assertIn("  output stdout: original {", rp.out)

    def test_exec_replays(self):
        req = {"language": "sh", "code": "printf '{\"n\": 3}' > /out/result.json; echo done",
               "output_schema": {"type": "object"}}
        r = self.sbx(["exec"], input=json.dumps(req).encode())
        self.assertExit(r, 0)
        rec = self.records()[-1]
        self.assertEqual(len(self.blobs(rec, "exec_request")), 1)
        self.assertEqual(len(self.blobs(rec, "result")), 1)
        rp = self.sbx(["replay", "last"])
        self.assertExit(rp, 0)
        self.assertEqual(rp.out, "identical\n")
        self.assertEqual(self.records()[-1]["replay_of"]["run_id"], rec["run_id"])

    def test_replay_last_after_a_replay_replays_the_original(self):
        self.assertExit(self.sbx(["run", "--keep-inputs", "--", "sh", "-c", "echo same"]), 0)
        original = self.records()[-1]["run_id"]
        self.assertExit(self.sbx(["replay", "last"]), 0)
        again = self.sbx(["replay", "last"])  # 'last' is now the replay's record, which kept nothing
        self.assertExit(again, 0)
        self.assertEqual(again.out, "identical\n")
        self.assertIn("is itself a replay: replaying the run it re-ran, " + original, again.err)
        self.assertEqual(self.records()[-1]["replay_of"]["run_id"], original)

    def test_image_gone_or_changed_is_125(self):
        r = self.sbx(["image", "import", busybox_tree(), "--name", "bbreplay", "--quiet"], timeout=120)
        self.assertExit(r, 0)
        digest = r.out.strip()
        self.assertExit(self.sbx(["run", "--keep-inputs", "--image", "bbreplay", "--", "sh", "-c", "echo hi"]), 0)
        rid = self.records()[-1]["run_id"]
        rp = self.sbx(["replay", rid])
        self.assertExit(rp, 0)
        self.assertEqual(rp.out, "identical\n")
        self.assertEqual(self.records()[-1]["image"]["digest"], digest)
        # A file of the stored tree changed: its seal fails.
        rootfs = glob.glob(os.path.join(self.state, "data", "images", "sha256", digest[7:], "rootfs"))
        self.assertEqual(len(rootfs), 1, rootfs)
        os.utime(os.path.join(rootfs[0], "bin"), None, follow_symlinks=False)
        rp = self.sbx(["replay", rid])
        self.assertExit(rp, 125)
        self.assertIn("fails its seal", self.assertOneSbxLine(rp))
        self.assertExit(self.sbx(["image", "rm", "bbreplay"]), 0)
        rp = self.sbx(["replay", rid])
        note(f"replay after the image was deleted: rc {rp.rc}, stderr {rp.err.strip()!r}")
        self.assertExit(rp, 125)
        line = self.assertOneSbxLine(rp)
        self.assertIn(digest, line)
        self.assertIn("no longer in the image store", line)


class ReplayWorkDir(ReplayCase):
    """Where a replay rebuilds the pack and inputs it mounts: <state>/tmp (pack_tree.hpp,
    PrivateDir), as a pack run's copy of its pack. On the previous binary it was
    $TMPDIR/sbx-replay-XXXXXX: listable, and rootless a concurrent sandbox of the same user with
    `--bind $TMPDIR:/t:rw` rewrote the rebuilt run.sh between its hash and its mount, so the replay
    ran other code than the record names."""

    def setUp(self):
        super().setUp()
        # The suite's state dir, outside $TMPDIR (a bind of $TMPDIR does not reach it), as in
        # test_pack_copy; its ledger is shared with other tests, so runs are named by id.
        self.state = os.environ["SBX_STATE_DIR"]
        self.env = dict(os.environ)

    def recorded_pack_run(self, script):
        d, inp = self.make_pack(script)
        r = self.sbx(["pack", "run", d, "--input", inp])
        self.assertExit(r, 0)
        return self.records()[-1]["run_id"]

    def work_dirs(self):
        tmp = os.environ.get("TMPDIR", "/tmp")
        copies = os.path.join(self.state, "tmp")
        found = [os.path.join(tmp, n) for n in os.listdir(tmp) if n.startswith("sbx-replay-")]
        if os.path.isdir(copies):
            found += [os.path.join(copies, n) for n in os.listdir(copies) if n.startswith("replay-")]
        return found

    def test_the_work_dir_is_under_the_state_dir_and_removed_after(self):
        run_id = self.recorded_pack_run("sleep 1\n" + COUNT)
        # What a killed replay left (its pid gone): swept by the next one.
        dead = os.path.join(self.state, "tmp", "replay-999999999-5-abcdef")
        os.makedirs(dead + "/pack")
        before = [w for w in self.work_dirs() if w != dead]
        p = subprocess.Popen([SBX, "replay", run_id], env=self.env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        seen = set()
        while p.poll() is None:
            seen.update(w for w in self.work_dirs() if w not in before and w != dead)
            time.sleep(0.02)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err.decode(errors="replace"))
        self.assertEqual(out.decode(), "identical\n")
        note(f"the replay's work dir while it ran: {sorted(seen)}")
        copies = os.path.join(self.state, "tmp")
        self.assertTrue(seen, "no work dir seen")
        for w in seen:
            self.assertEqual(os.path.dirname(w), copies, f"the replay worked in {w}, not under {copies}")
        self.assertEqual([w for w in self.work_dirs() if w not in before], [], "the work dir is removed after the replay")
        self.assertFalse(os.path.exists(dead), "a killed replay's work dir was not swept")

    def test_a_concurrent_run_with_a_rw_tmp_bind_cannot_rewrite_the_rebuilt_pack(self):
        run_id = self.recorded_pack_run(COUNT)
        tmp = os.environ.get("TMPDIR", "/tmp")
        shared_tmp(self, tmp)
        evil = self.path("evil.sh")
        with open(evil, "w") as f:
            f.write("printf '{\"count\": 99}' > /out/result.json\n")
        os.chmod(evil, 0o644)
        evil_in = "/t/" + os.path.relpath(evil, tmp)
        loop = ("while :; do for f in /t/sbx-replay-*/pack/run.sh; do "
                f"[ -f \"$f\" ] && cat {evil_in} > \"$f\" 2>/dev/null; done; done")
        attacker = subprocess.Popen([SBX, "run", "--bind", f"{tmp}:/t:rw", "--timeout", "90s", "--", "/bin/sh", "-c", loop],
                                    env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            self.assertIsNone(attacker.poll(), "the attacking run did not start")
            outcomes = []
            for i in range(8):
                rp = self.sbx(["replay", run_id])
                outcomes.append(rp.out.strip() if rp.rc in (0, 1) else f"exit {rp.rc}: {rp.err.strip()[-160:]}")
        finally:
            attacker.terminate()
            attacker.wait(timeout=30)
        note(f"8 replays beside a run binding {tmp} rw: {outcomes}")
        self.assertEqual(outcomes, ["identical"] * 8, "a concurrent run rewrote the rebuilt pack")


class Gc(ReplayCase):
    def test_gc_keeps_what_kept_records_need_and_says_so(self):
        d, inp = self.make_pack(COUNT)
        self.assertExit(self.sbx(["pack", "run", d, "--input", inp]), 0)
        rec = self.records()[-1]
        needed = {b["sha256"] for b in rec["blobs"] if "sha256" in b and "skipped" not in b}
        # A blob of no record, older than an hour: goes.
        orphan = hashlib.sha256(b"orphan").hexdigest()
        os.makedirs(os.path.dirname(self.blob_file(orphan)), exist_ok=True)
        with open(self.blob_file(orphan), "wb") as f:
            f.write(b"orphan")
        old = time.time() - 7200
        os.utime(self.blob_file(orphan), (old, old))

        g = self.sbx(["gc"])
        note(f"sbx gc:\n{g.out}")
        self.assertExit(g, 0)
        self.assertIn(f"deleted sha256:{orphan} (6): named by no record", g.out)
        for sha in needed:
            self.assertIn(f"kept sha256:{sha} ", g.out)
            self.assertTrue(os.path.exists(self.blob_file(sha)))
        self.assertIn("needed by kept run " + rec["run_id"], g.out)
        self.assertFalse(os.path.exists(self.blob_file(orphan)))

        # --dry-run deletes nothing; --keep-days 0 keeps no record.
        g = self.sbx(["gc", "--keep-days", "0", "--dry-run"])
        self.assertExit(g, 0)
        self.assertIn("would delete", g.out)
        for sha in needed:
            self.assertTrue(os.path.exists(self.blob_file(sha)))
        # Over --max-bytes, a kept record's blobs go, and each is said to.
        g = self.sbx(["gc", "--max-bytes", "0"])
        note(f"sbx gc --max-bytes 0:\n{g.out}")
        self.assertExit(g, 0)
        self.assertIn("WARNING deleted sha256:", g.out)
        self.assertIn("needs it: that run can no longer be replayed", g.out)
        for sha in needed:
            self.assertFalse(os.path.exists(self.blob_file(sha)))
        rp = self.sbx(["replay", rec["run_id"]])
        self.assertExit(rp, 125)

    def test_gc_spares_the_blobs_of_a_run_still_going(self):
        # Issue 30, item 9: a run keeps its --input blobs before it starts and names them only in
        # its record, written when it ends. gc judged such blobs by their age alone (an hour):
        # a run that outlasted it lost them. Here the blobs are made to look two hours old while
        # the run is still going; gc must keep them (the run's pin), and the record then names
        # only blobs that exist.
        tree = self.path("in-tree")
        os.makedirs(tree)
        content = f"input of a long run {time.time()}\n".encode()
        with open(os.path.join(tree, "a.txt"), "wb") as f:
            f.write(content)
        os.chmod(tree, 0o755)
        os.chmod(os.path.join(tree, "a.txt"), 0o644)
        sha = hashlib.sha256(content).hexdigest()
        run = subprocess.Popen([SBX, "run", "--keep-inputs", "--input", tree + ":/in/tree", "--", "sleep", "6"],
                               env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 30
            while not os.path.exists(self.blob_file(sha)) and time.monotonic() < deadline and run.poll() is None:
                time.sleep(0.02)
            self.assertTrue(os.path.exists(self.blob_file(sha)), "the run never kept its input")
            old = time.time() - 7200
            for path in glob.glob(os.path.join(self.state, "blobs", "sha256", "*", "*")):
                os.utime(path, (old, old))
            g = self.sbx(["gc"])
            still_running = run.poll() is None
            note(f"sbx gc while the run sleeps (still running: {still_running}):\n{g.out}{g.err}")
            self.assertTrue(still_running, "the run ended before gc: nothing was shown (a slow machine?)")
            self.assertExit(g, 0)
            self.assertIn(f"kept sha256:{sha} ", g.out)
            self.assertIn("pinned by a running sandbox", g.out)
            out, err = run.communicate(timeout=60)
            self.assertEqual(run.returncode, 0, err)
        finally:
            if run.poll() is None:
                run.kill()
                run.communicate()
        rec = self.records()[-1]
        kept = [b for b in rec["blobs"] if "sha256" in b and "skipped" not in b]
        self.assertIn(sha, {b["sha256"] for b in kept})
        missing = [b["path"] for b in kept if not os.path.exists(self.blob_file(b["sha256"]))]
        self.assertEqual(missing, [], "the record names blobs that gc deleted while the run went on")
        # Once the record names them, the run's pin is gone: nothing is left in pins/.
        pins = glob.glob(os.path.join(self.state, "blobs", "pins", "pin.*"))
        self.assertEqual(pins, [], "a finished run left its pin")

    def test_gc_and_the_next_keeper_remove_what_killed_writers_left_in_tmp(self):
        # Issue 30, item 12: a writer killed between its temporary file and the rename left
        # blobs/tmp/blob.XXXXXX for ever. A writer holds the store's lock (shared) while its
        # temporary file exists, gc holds it exclusively: so gc removes what is there, and the
        # first keeper of a process that finds the store unlocked does too. A live writer's file
        # (the lock held, as a put does) is not touched: gc waits for the lock.
        tmpdir = os.path.join(self.state, "blobs", "tmp")
        os.makedirs(tmpdir, exist_ok=True)
        dead = os.path.join(tmpdir, "blob.k1ll3d")
        with open(dead, "wb") as f:
            f.write(b"half of a blob")
        g = self.sbx(["gc"])
        note(f"sbx gc with a killed writer's tmp file:\n{g.out}")
        self.assertExit(g, 0)
        self.assertFalse(os.path.exists(dead), "gc left a killed writer's temporary file")
        self.assertIn("1 temporary file(s)", g.out)

        live = os.path.join(tmpdir, "blob.l1v3w1")
        with open(live, "wb") as f:
            f.write(b"being written")
        lock = os.open(os.path.join(self.state, "blobs", "lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_SH)  # what a put holds while its file exists
            gc = subprocess.Popen([SBX, "gc"], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            time.sleep(1.0)
            self.assertIsNone(gc.poll(), "gc did not wait for the writer")
            self.assertTrue(os.path.exists(live), "gc removed a live writer's temporary file")
            os.unlink(live)  # the writer's rename (its blob itself is not this test's)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            os.close(lock)
        gc.communicate(timeout=60)
        self.assertEqual(gc.returncode, 0)

        # Without gc: the next run that keeps a blob sweeps what a killed writer left.
        with open(dead, "wb") as f:
            f.write(b"half of another blob")
        self.assertExit(self.sbx(["run", "--keep-inputs", "--", "true"]), 0)
        self.assertFalse(os.path.exists(dead), "the next keeper left a killed writer's temporary file")

    def test_gc_bad_arguments(self):
        for args, what in ((["gc", "--max-bytes", "lots"], "--max-bytes"), (["gc", "--keep-days", "-3"], "--keep-days")):
            r = self.sbx(args)
            self.assertExit(r, 125)
            self.assertIn("gc: " + what, self.assertOneSbxLine(r))


if __name__ == "__main__":
    unittest.main()
