"""The trace store as an append-only, hash-chained ledger: `sbx trace verify` names the first
edited, deleted, inserted or reordered record; `trace head` anchors the chain; appends are safe
under concurrency and after an append killed midway; a run whose record cannot be stored releases
no result (pack run, exec, run --require-record). Runs as root and rootless.

On the previous store (one JSON file per run) none of this exists: `sbx trace verify` and
`sbx trace head` are unknown subcommands (exit 125), there is no ledger.jsonl, and pack run / exec
print their result with a warning when the record cannot be stored."""
import hashlib
import json
import os
import random
import signal
import subprocess
import time
import unittest

from sbxtest import SBX, SbxTestCase, ledger_lines, note, sbx, stored_records, write_tree

HEAD = b'{"record":'
SEQ_KEY = b',"seq":'


def ledger_hash(seq, run_id, prev, record_bytes):
    """The hash a ledger line must carry (runtime/record/trace_ledger.hpp)."""
    h = hashlib.sha256(f"sbx.ledger/v1\n{seq}\n{run_id}\n{prev}\n".encode())
    h.update(record_bytes)
    return h.hexdigest()


def split_line(line):
    """(raw record bytes, envelope dict) of one ledger line."""
    at = line.rfind(SEQ_KEY)
    return line[len(HEAD):at], json.loads(b"{" + line[at + 1:])


def make_line(record_bytes, seq, run_id, prev):
    h = ledger_hash(seq, run_id, prev, record_bytes)
    env = f',"seq":{seq},"run_id":"{run_id}","prev":"{prev}","hash":"{h}"}}'.encode()
    return HEAD + record_bytes + env, h


class LedgerCase(SbxTestCase):
    def setUp(self):
        super().setUp()
        self.state = self.path("state")
        self.env = dict(os.environ, SBX_STATE_DIR=self.state)
        self.ledger = os.path.join(self.state, "traces", "ledger.jsonl")

    def runs(self, n):
        ids = []
        for i in range(n):
            r = sbx(["run", "--", "sh", "-c", f"exit {i}"], env=self.env)
            self.assertExit(r, i)
        ids = [e["run_id"] for e in ledger_lines(self.state)]
        self.assertEqual(len(ids), n)
        return ids

    def lines(self):
        with open(self.ledger, "rb") as f:
            data = f.read()
        self.assertTrue(data.endswith(b"\n"))
        return data[:-1].split(b"\n")

    def write_lines(self, lines, tail=b"\n"):
        with open(self.ledger, "wb") as f:
            f.write(b"\n".join(lines) + tail)

    def verify(self, *extra):
        return sbx(["trace", "verify"] + list(extra), env=self.env)

    def assertBroken(self, needles):
        r = self.verify()
        self.assertExit(r, 1, "trace verify on a broken ledger")
        line = self.assertOneSbxLine(r)
        for n in needles:
            self.assertIn(n, line)
        note("verify: " + line)
        return line


class Chain(LedgerCase):
    def test_intact_chain_and_head(self):
        ids = self.runs(3)
        entries = ledger_lines(self.state)
        self.assertEqual([e["seq"] for e in entries], [1, 2, 3])
        self.assertEqual(entries[0]["prev"], "0" * 64)
        for a, b in zip(entries, entries[1:]):
            self.assertEqual(b["prev"], a["hash"])
        # The hash is over the exact record bytes on the line (checked independently here).
        for line, e in zip(self.lines(), entries):
            rec, env = split_line(line)
            self.assertEqual(ledger_hash(env["seq"], env["run_id"], env["prev"], rec), env["hash"])
            self.assertEqual(json.loads(rec)["run_id"], env["run_id"])
        self.assertEqual(os.stat(self.ledger).st_mode & 0o777, 0o600)
        r = self.verify()
        self.assertExit(r, 0)
        self.assertIn("intact: 3 record(s)", r.out)
        h = sbx(["trace", "head"], env=self.env)
        self.assertExit(h, 0)
        self.assertEqual(h.out.split(), ["3", entries[2]["hash"], ids[2]])
        hj = json.loads(sbx(["trace", "head", "--json"], env=self.env).out)
        self.assertEqual(hj, {"seq": 3, "hash": entries[2]["hash"], "run_id": ids[2]})
        # trace show reads records back from the ledger.
        r = sbx(["trace", "show", ids[1]], env=self.env)
        self.assertExit(r, 0)
        self.assertEqual(json.loads(r.out), stored_records(self.state)[ids[1]])

    def test_empty_ledger(self):
        r = self.verify()
        self.assertExit(r, 0)
        self.assertIn("no records", r.out)
        self.assertEqual(sbx(["trace", "head"], env=self.env).out.split(), ["0", "-", "-"])

    def test_edited_record(self):
        ids = self.runs(3)
        lines = self.lines()
        lines[1] = lines[1].replace(b'"exit_code":1', b'"exit_code":0', 1)
        self.write_lines(lines)
        self.assertBroken(["line 2", ids[1], "seq 2", "edited"])

    def test_edited_record_with_recomputed_hash_breaks_the_next_link(self):
        ids = self.runs(3)
        lines = self.lines()
        rec, env = split_line(lines[1])
        lines[1], _ = make_line(rec.replace(b'"exit_code":1', b'"exit_code":0', 1), 2, env["run_id"], env["prev"])
        self.write_lines(lines)
        self.assertBroken(["line 3", ids[2], "chains to", ids[1], "replaced"])

    def test_deleted_record(self):
        ids = self.runs(4)
        lines = self.lines()
        del lines[1]
        self.write_lines(lines)
        self.assertBroken(["line 2", ids[2], "seq 3 where 2 was expected", ids[0], "record seq 2 is missing"])

    def test_reordered_records(self):
        ids = self.runs(4)
        lines = self.lines()
        lines[1], lines[2] = lines[2], lines[1]
        self.write_lines(lines)
        self.assertBroken(["line 2", ids[2], "seq 3 where 2 was expected"])

    def test_inserted_record(self):
        ids = self.runs(3)
        lines = self.lines()
        # A forged record that links correctly to line 2 and takes seq 3: line 4 (the real seq 3)
        # then no longer fits.
        rec, env = split_line(lines[2])
        forged, _ = make_line(rec.replace(ids[2].encode(), b"20000101T000000.000Z-0badf00d"), 3,
                              "20000101T000000.000Z-0badf00d", split_line(lines[1])[1]["hash"])
        lines.insert(2, forged)
        self.write_lines(lines)
        self.assertBroken(["line 4", ids[2], "seq 3 where 4 was expected", "inserted"])

    def test_anchor_finds_a_rewritten_or_cut_chain(self):
        self.runs(3)
        head = sbx(["trace", "head"], env=self.env).out.split()
        anchor = f"{head[0]}:{head[1]}"
        self.assertExit(self.verify("--anchor", anchor), 0)
        lines = self.lines()
        # Rewrite the whole chain from seq 2 with recomputed hashes: links hold, the anchor does not.
        prev = split_line(lines[0])[1]["hash"]
        for i in (1, 2):
            rec, env = split_line(lines[i])
            lines[i], prev = make_line(rec.replace(b'"exit_code":', b'"exit_code": ', 1), env["seq"], env["run_id"], prev)
        self.write_lines(lines)
        self.assertExit(self.verify(), 0, "a consistently rewritten chain verifies without an anchor")
        r = self.verify("--anchor", anchor)
        self.assertExit(r, 1)
        self.assertIn("anchored head", self.assertOneSbxLine(r))
        self.write_lines(lines[:2])
        r = self.verify("--anchor", anchor)
        self.assertExit(r, 1)
        self.assertIn("before the anchored head seq 3: records were cut off its end", self.assertOneSbxLine(r))
        self.assertExit(self.verify("--anchor", "3:nothex"), 125)


class Crashes(LedgerCase):
    def test_torn_tail_is_reported_then_cut_by_the_next_append(self):
        ids = self.runs(2)
        with open(self.ledger, "rb") as f:
            data = f.read()
        cut = len(data) - 300  # inside the last line: what an append killed midway leaves
        with open(self.ledger, "r+b") as f:
            f.truncate(cut)
        torn = cut - (data[:-1].rfind(b"\n") + 1)
        line = self.assertBroken(["torn tail", f"the last {torn} bytes", f"after seq 1 (run {ids[0]})"])
        self.assertIn("incomplete line", line)
        h = sbx(["trace", "head"], env=self.env)
        self.assertEqual(h.out.split()[:1], ["1"])
        self.assertIn("interrupted append", h.err)
        r = sbx(["run", "--require-record", "--", "/bin/true"], env=self.env)
        self.assertExit(r, 0)
        self.assertIn(f"cut {torn} bytes of an interrupted append", r.err)
        self.assertExit(self.verify(), 0)
        entries = ledger_lines(self.state)
        self.assertEqual([e["seq"] for e in entries], [1, 2])
        self.assertEqual(entries[1]["record"]["ledger_repair"]["torn_bytes"], torn)

    def test_a_broken_last_line_is_refused_not_buried(self):
        self.runs(1)
        with open(self.ledger, "ab") as f:
            f.write(b'{"record":{"not":"a ledger line"}}\n')
        r = self.verify()
        self.assertExit(r, 1)
        r = sbx(["run", "--require-record", "--", "/bin/echo", "ran"], env=self.env)
        self.assertExit(r, 125)
        self.assertIn("could not be stored durably", r.err)
        self.assertIn("sbx trace verify", r.err)
        self.assertEqual(len(self.lines()), 2, "nothing appended after a broken line")

    def test_killed_appenders_leave_a_ledger_verify_explains(self):
        """sbx processes SIGKILLed at random points (some in the record phase): the ledger is intact
        or ends in a torn tail, and the next append leaves it intact."""
        rng = random.Random(1234)
        procs = []
        for i in range(16):
            p = subprocess.Popen([SBX, "run", "--", "/bin/true"], env=self.env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
            time.sleep(rng.uniform(0.0, 0.03))
            procs.append(p)
            if i % 2:
                os.killpg(p.pid, signal.SIGKILL)
        for p in procs:
            p.wait(timeout=60)
        r = self.verify()
        if r.rc == 1:
            self.assertIn("torn tail", self.assertOneSbxLine(r))
            note("a killed append left a torn tail: " + r.err.strip())
        else:
            self.assertExit(r, 0)
        self.assertExit(sbx(["run", "--", "/bin/true"], env=self.env), 0)
        self.assertExit(self.verify(), 0)


class Concurrency(LedgerCase):
    def test_a_held_lock_neither_hangs_sbx_nor_delays_the_limits(self):
        """Another process holds the ledger's lock for good: the run's wall-time limit still holds
        (the store comes after supervision), and the append gives up after its bounded wait with
        one line instead of hanging."""
        import fcntl
        self.runs(1)
        fd = os.open(self.ledger, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            tf = self.path("t.json")
            t0 = time.monotonic()
            r = sbx(["run", "--require-record", "--timeout", "200ms", "--trace-file", tf, "--", "sleep", "30"],
                    env=self.env, timeout=60)
            took = time.monotonic() - t0
        finally:
            os.close(fd)
        self.assertExit(r, 125)
        self.assertIn("locked by another process for over 10 s", r.err)
        with open(tf) as f:
            t = json.load(f)
        self.assertEqual(t["result"]["status"], "timeout")
        self.assertLess(t["usage"]["wall_ms"], 5000, "the wall-time limit waited for the store")
        self.assertLess(took, 30, "sbx hung on the lock")
        note(f"held lock: sbx gave up after {took:.1f} s; the run was killed at {t['usage']['wall_ms']} ms")
        self.assertEqual(len(ledger_lines(self.state)), 1)

    def test_fifty_concurrent_runs_leave_an_intact_chain(self):
        procs = [subprocess.Popen([SBX, "run", "--", "/bin/true"], env=self.env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE) for _ in range(50)]
        errs = [p.communicate(timeout=120)[1] for p in procs]
        self.assertEqual([p.returncode for p in procs], [0] * 50, b"".join(errs).decode(errors="replace"))
        r = self.verify()
        self.assertExit(r, 0)
        self.assertIn("intact: 50 record(s)", r.out)
        entries = ledger_lines(self.state)
        self.assertEqual([e["seq"] for e in entries], list(range(1, 51)))
        self.assertEqual(len({e["run_id"] for e in entries}), 50)


class OldRecords(LedgerCase):
    """Records of the previous store (one pretty-printed <run_id>.json per run) stay listed and
    shown, and `trace import` moves them into the chain with the sha256 of the original file."""

    def legacy_store(self):
        tf = self.path("t.json")
        r = sbx(["run", "--trace-file", tf, "--", "sh", "-c", "exit 7"], env=dict(os.environ, SBX_STATE_DIR=self.path("other")))
        self.assertExit(r, 7)
        with open(tf, "rb") as f:
            data = f.read()
        rec = json.loads(data)
        os.makedirs(os.path.join(self.state, "traces"), mode=0o700)
        legacy = os.path.join(self.state, "traces", rec["run_id"] + ".json")
        with open(legacy, "wb") as f:
            f.write(data)
        os.chmod(legacy, 0o600)
        return rec, data

    def test_old_records_listed_shown_and_imported(self):
        old, data = self.legacy_store()
        new = self.runs(1)  # a ledger record beside the old file
        ls = json.loads(sbx(["trace", "ls", "--json"], env=self.env).out)
        self.assertEqual({e["run_id"] for e in ls}, {old["run_id"], new[0]})
        r = sbx(["trace", "show", old["run_id"]], env=self.env)
        self.assertExit(r, 0)
        self.assertEqual(json.loads(r.out), old)
        r = sbx(["trace", "import"], env=self.env)
        self.assertExit(r, 0)
        self.assertIn("imported 1 record(s)", r.out)
        self.assertExit(self.verify(), 0)
        entries = ledger_lines(self.state)
        self.assertEqual([e["run_id"] for e in entries], [new[0], old["run_id"]])
        imported = entries[1]["record"]
        self.assertEqual(imported["ledger_import"], {"file": old["run_id"] + ".json", "bytes": len(data),
                                                     "sha256": hashlib.sha256(data).hexdigest()})
        self.assertEqual({k: v for k, v in imported.items() if k != "ledger_import"}, old)
        self.assertNotIn(old["run_id"] + ".json", os.listdir(os.path.join(self.state, "traces")))
        self.assertTrue(os.path.exists(os.path.join(self.state, "traces", "imported", old["run_id"] + ".json")))
        r = sbx(["trace", "show", old["run_id"]], env=self.env)
        self.assertEqual(json.loads(r.out)["ledger_import"]["sha256"], hashlib.sha256(data).hexdigest())
        r = sbx(["trace", "import"], env=self.env)
        self.assertIn("imported 0 record(s)", r.out)

    def test_old_records_are_marked_outside_the_ledger_and_not_exported(self):
        # A hand-written file in the store lists and shows, but as what it is: outside the chain.
        old, _ = self.legacy_store()
        new = self.runs(1)
        r = sbx(["trace", "ls"], env=self.env)
        self.assertExit(r, 0)
        row = [l for l in r.out.splitlines() if l.startswith(old["run_id"])]
        self.assertEqual(len(row), 1)
        self.assertTrue(row[0].endswith("  [not in ledger]"), row[0])
        self.assertNotIn("[not in ledger]", [l for l in r.out.splitlines() if l.startswith(new[0])][0])
        self.assertIn("outside the hash-chained ledger", r.err)
        ls = json.loads(sbx(["trace", "ls", "--json"], env=self.env).out)
        self.assertEqual({e["run_id"]: e["in_ledger"] for e in ls}, {old["run_id"]: False, new[0]: True})
        r = sbx(["trace", "show", old["run_id"]], env=self.env)
        self.assertExit(r, 0)
        self.assertIn("previous store format, outside the hash-chained ledger", r.err)
        r = sbx(["trace", "export", old["run_id"]], env=self.env)
        self.assertExit(r, 125)
        self.assertEqual(r.out, "")
        self.assertIn("outside the hash-chained ledger: no provenance is exported for it (fix: 'sbx trace import'", r.err)
        self.assertExit(sbx(["trace", "export", new[0]], env=self.env), 0)

    def test_a_nul_in_a_record_s_field_is_indexed_whole(self):
        # The index once stored text up to its first NUL, so a record whose status held "\u0000"
        # (a planted old-format file, imported) never matched its row: every later listing warned,
        # rebuilt the index from the whole ledger and still disagreed.
        old, _ = self.legacy_store()
        path = os.path.join(self.state, "traces", old["run_id"] + ".json")
        old["result"]["status"] = "ok\u0000x"
        with open(path, "w") as f:
            json.dump(old, f)
        self.assertExit(sbx(["trace", "import"], env=self.env), 0)
        for _ in range(2):
            r = sbx(["trace", "ls", "--json"], env=self.env)
            self.assertExit(r, 0)
            self.assertNotIn("rebuilding", r.err)
            self.assertEqual([e["status"] for e in json.loads(r.out)], ["ok\u0000x"])

    def test_a_fifo_or_link_in_the_store_is_skipped_not_waited_on(self):
        self.runs(1)
        traces = os.path.join(self.state, "traces")
        os.mkfifo(os.path.join(traces, "20990101T000000.000Z-deadbeef.json"))
        target = self.path("elsewhere.json")
        with open(target, "w") as f:
            json.dump({"schema": "sbx.trace/v1", "run_id": "20990101T000000.000Z-0000beef"}, f)
        os.symlink(target, os.path.join(traces, "20990101T000000.000Z-0000beef.json"))
        r = sbx(["trace", "ls"], env=self.env, timeout=10)
        self.assertExit(r, 1)
        self.assertIn("20990101T000000.000Z-deadbeef.json: not a regular file", r.err)
        self.assertIn("20990101T000000.000Z-0000beef.json: a symbolic link, not a regular file", r.err)
        r = sbx(["trace", "show", "20990101T000000.000Z-deadbeef"], env=self.env, timeout=10)
        self.assertExit(r, 125)
        r = sbx(["trace", "import"], env=self.env, timeout=10)
        self.assertExit(r, 1)
        self.assertIn("not a regular file", r.err)

    def test_a_file_that_is_no_record_is_not_imported(self):
        os.makedirs(os.path.join(self.state, "traces"), mode=0o700)
        with open(os.path.join(self.state, "traces", "20000101T000000.000Z-00000000.json"), "w") as f:
            f.write('{"schema": "sbx.trace/v1", "run_id": "someone-else"}')
        r = sbx(["trace", "import"], env=self.env)
        self.assertExit(r, 1)
        self.assertIn("skipped 20000101T000000.000Z-00000000.json: its run_id is not its file name's", r.err)
        self.assertEqual(ledger_lines(self.state), [])

    def test_record_names_the_binary_by_sha256(self):
        self.runs(1)
        with open(SBX, "rb") as f:
            want = hashlib.sha256(f.read()).hexdigest()
        rec = ledger_lines(self.state)[0]["record"]
        self.assertEqual(rec["sbx"]["binary_sha256"], want)
        # The second run reads the cached digest, keyed by the binary's identity: still right.
        self.runs_more = sbx(["run", "--", "/bin/true"], env=self.env)
        self.assertEqual(ledger_lines(self.state)[1]["record"]["sbx"]["binary_sha256"], want)


class Signing(LedgerCase):
    def setUp(self):
        super().setUp()
        self.cfg = self.path("config")
        self.env["XDG_CONFIG_HOME"] = self.cfg
        self.pub = os.path.join(self.cfg, "sbx", "ledger-key.pub.pem")

    def key_init(self, env=None):
        r = sbx(["key", "init"], env=env or self.env)
        self.assertExit(r, 0)
        return r

    def test_signed_records_verify_and_forgeries_do_not(self):
        r = self.key_init()
        self.assertRegex(r.out, r"fingerprint sha256:[0-9a-f]{64}")
        priv = os.path.join(self.cfg, "sbx", "ledger-key.pem")
        self.assertEqual(os.stat(priv).st_mode & 0o777, 0o600)
        self.assertEqual(os.stat(os.path.dirname(priv)).st_mode & 0o777, 0o700)
        again = sbx(["key", "init"], env=self.env)
        self.assertExit(again, 125)
        self.assertIn("exists already", again.err)
        self.runs(3)
        r = self.verify("--pubkey", self.pub)
        self.assertExit(r, 0)
        self.assertIn("every record signed", r.out)
        entries = ledger_lines(self.state)
        # Independently of sbx: each signature is Ed25519 over the line's hash, under the public key.
        try:
            import base64
            from cryptography.hazmat.primitives.serialization import load_pem_public_key
            with open(self.pub, "rb") as f:
                key = load_pem_public_key(f.read())
            for e in entries:
                key.verify(base64.b64decode(e["sig"]), e["hash"].encode())
        except ImportError:
            note("python3-cryptography missing: signatures checked by sbx only")
        # A forger without the private key rewrites the last record and recomputes its hash: the
        # chain still links (nothing follows it), only the signature tells.
        lines = self.lines()
        rec, env = split_line(lines[2])
        forged, _ = make_line(rec.replace(b'"exit_code":2', b'"exit_code":0', 1), 3, env["run_id"], env["prev"])
        lines[2] = forged[:-1] + f',"sig":"{env["sig"]}"}}'.encode()
        self.write_lines(lines)
        self.assertExit(self.verify(), 0, "without --pubkey a recomputed last record goes unnoticed")
        r = self.verify("--pubkey", self.pub)
        self.assertExit(r, 1)
        self.assertIn("signature does not verify", self.assertOneSbxLine(r))
        # Another key's public half accepts nothing of this ledger.
        other = dict(self.env, XDG_CONFIG_HOME=self.path("config2"))
        self.key_init(other)
        r = self.verify("--pubkey", os.path.join(self.path("config2"), "sbx", "ledger-key.pub.pem"))
        self.assertExit(r, 1)
        self.assertIn("line 1", self.assertOneSbxLine(r))

    def test_unsigned_records_and_an_unusable_key(self):
        # `sbx key init` on a store with runs, then the verify it suggests: the records from before
        # the key are counted as not signed, not a break (it used to fail: "broken after 0").
        self.runs(1)
        r = self.key_init()
        self.assertIn(f"sbx trace verify --pubkey {self.pub}", r.out)
        self.assertExit(sbx(["run", "--", "/bin/true"], env=self.env), 0)
        self.assertExit(sbx(["run", "--", "/bin/true"], env=self.env), 0)
        r = self.verify("--pubkey", self.pub)
        self.assertExit(r, 0)
        self.assertIn("2 record(s) signed by the key", r.out)
        self.assertIn("the 1 before signing began are not signed", r.out)
        r = self.verify("--pubkey", self.pub, "--json")
        self.assertExit(r, 0)
        j = json.loads(r.out)
        self.assertEqual((j["intact"], j["records"], j["signatures"]),
                         (True, 3, {"signed": 2, "unsigned_before_signing": 1}), j)
        # An unsigned record after a signed one is a break: a signature stripped off the last line
        # (the hash does not cover it) must not pass as "before signing".
        lines = self.lines()
        rec, env = split_line(lines[2])
        lines[2] = lines[2].replace(f',"sig":"{env["sig"]}"'.encode(), b"")
        self.write_lines(lines)
        r = self.verify("--pubkey", self.pub)
        self.assertExit(r, 1)
        self.assertIn("line 3", r.err)
        self.assertIn("not signed", r.err)
        r = self.verify("--pubkey", self.pub, "--json")
        self.assertExit(r, 1)
        self.assertFalse(json.loads(r.out)["intact"])
        self.assertExit(self.verify("--pubkey", self.path("no-such.pem")), 125)
        with open(os.path.join(self.cfg, "sbx", "ledger-key.pem"), "w") as f:
            f.write("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n")
        r = sbx(["run", "--require-record", "--", "/bin/true"], env=self.env)
        self.assertExit(r, 125)
        self.assertIn("not an Ed25519 private key", r.err)


class QueryIndex(LedgerCase):
    """`trace ls` answers from traces/index.sqlite, caught up from the ledger; the index never
    answers for a ledger that changed under it, and a damaged index is rebuilt."""

    def ls(self, *args):
        r = sbx(["trace", "ls", "--json"] + list(args), env=self.env)
        self.assertExit(r, 0)
        return [e["run_id"] for e in json.loads(r.out)]

    def test_filters_and_catching_up(self):
        ids = self.runs(4)  # exit 0, 1, 2, 3
        self.assertEqual(self.ls(), ids[::-1])
        index = os.path.join(self.state, "traces", "index.sqlite")
        self.assertEqual(os.stat(index).st_mode & 0o777, 0o600)
        self.assertEqual(self.ls("--status", "exit_nonzero"), ids[3:0:-1])
        self.assertEqual(self.ls("--status", "ok"), [ids[0]])
        self.assertEqual(self.ls("--status", "exit_nonzero", "-n", "1"), [ids[3]])
        started = stored_records(self.state)[ids[2]]["started_at"]
        self.assertEqual(self.ls("--since", started), ids[:1:-1])
        self.assertEqual(self.ls("--since", "2999"), [])
        # Durations count back from now; a time or status sbx does not know is refused, not
        # read as a filter that matches everything (or nothing).
        self.assertEqual(self.ls("--since", "1h"), ids[::-1])
        self.assertEqual(self.ls("--since", "2000-01-01T00:00Z"), ids[::-1])
        for args, text in ((["--since", "garbage"], "use a duration before now (90s, 30m, 1h, 2d, 1w)"),
                           (["--status", "timout"], "did you mean 'timeout'?"),
                           (["-n", "0"], "leave -n out to list all runs")):
            r = sbx(["trace", "ls"] + args, env=self.env)
            self.assertExit(r, 125)
            self.assertIn(text, self.assertOneSbxLine(r))
            self.assertLess(len(r.err), 400, r.err)
        r = sbx(["run", "--", "/bin/true"], env=self.env)
        self.assertExit(r, 0)
        new = ledger_lines(self.state)[-1]["run_id"]
        self.assertEqual(self.ls("-n", "1"), [new], "the index caught up with the new run")

    def test_index_follows_a_rewritten_ledger_and_survives_damage(self):
        ids = self.runs(3)
        self.assertEqual(len(self.ls()), 3)
        # The ledger loses its last line and gains another run at the same offset: an index that
        # trusted its own rows would still list the lost run.
        lines = self.lines()
        self.write_lines(lines[:2])
        self.assertExit(sbx(["run", "--", "/bin/true"], env=self.env), 0)
        now = [e["run_id"] for e in ledger_lines(self.state)]
        self.assertNotIn(ids[2], now)
        self.assertEqual(sorted(self.ls(), reverse=True), sorted(now, reverse=True))
        with open(os.path.join(self.state, "traces", "index.sqlite"), "wb") as f:
            f.write(b"not a database" * 100)
        self.assertEqual(sorted(self.ls()), sorted(now))
        r = sbx(["trace", "reindex"], env=self.env)
        self.assertExit(r, 0)
        self.assertIn("indexed 3 ledger line(s)", r.out)
        r = sbx(["trace", "show", ids[0]], env=self.env)
        self.assertExit(r, 0)
        self.assertEqual(json.loads(r.out)["run_id"], ids[0])


class UnreadableLines(LedgerCase):
    """One line no reader takes in (a record over the size bound, or garbage) does not hide the
    rest of the store: readers skip it, name it (byte offset, size) and go on; `trace ls` exits 1
    after listing every readable run; `trace verify` fails naming it and checks what follows.
    On the previous main a line over 64 MiB made `trace ls/show/verify`, `replay` and `gc` exit
    125 for every record, and a garbage last line gave `trace ls` exit 0 without a word."""

    def run_kept(self, n):
        """n replayable runs; their run ids (read from the ledger's envelopes, not its records)."""
        for _ in range(n):
            self.assertExit(sbx(["run", "--keep-inputs", "--", "sh", "-c", "echo hi"], env=self.env), 0)
        with open(self.ledger, "rb") as f:
            return [json.loads(b"{" + ln[ln.rfind(SEQ_KEY) + 1:])["run_id"] for ln in f.read().split(b"\n") if ln]

    def ls_json(self, rc):
        r = sbx(["trace", "ls", "--json"], env=self.env)
        self.assertExit(r, rc, "trace ls")
        return r, [e["run_id"] for e in json.loads(r.out)]

    def test_a_line_over_the_size_bound_is_skipped_and_named(self):
        first = self.run_kept(1)
        lines = self.lines()
        rec, env = split_line(lines[0])
        # What a run with a 70 MiB record leaves: a well-formed, correctly chained line.
        big_id = "20261202T000000.000Z-0b16b16b"
        big = json.loads(rec)
        big["run_id"] = big_id
        big["pad"] = "x" * (70 << 20)
        big_line, _ = make_line(json.dumps(big, separators=(",", ":")).encode(), 2, big_id, env["hash"])
        del big
        offset = os.path.getsize(self.ledger)
        with open(self.ledger, "ab") as f:
            f.write(big_line + b"\n")
        size = len(big_line)
        del big_line
        ids = self.run_kept(2)  # appended after it by real runs, chained through its envelope
        self.assertEqual(ids[0], first[0])
        self.assertEqual(ids[1], big_id)
        good = [ids[0]] + ids[2:]
        where = f"at byte {offset} is {size} bytes"

        r, listed = self.ls_json(1)
        self.assertEqual(sorted(listed), sorted(good))
        self.assertIn(where, r.err)
        self.assertIn("1 ledger line(s) or record(s) could not be read", r.err)
        r = sbx(["trace", "show", big_id], env=self.env)
        self.assertExit(r, 125)
        self.assertIn(f"line at byte {offset} is {size} bytes, over the", self.assertOneSbxLine(r))
        for rid in good:
            self.assertExit(sbx(["trace", "show", rid], env=self.env), 0)
        self.assertExit(sbx(["trace", "export", ids[-1]], env=self.env), 0)

        r = self.verify()
        self.assertExit(r, 1)
        line = self.assertOneSbxLine(r)
        self.assertIn(f"line 2 (run {big_id}, seq 2) after seq 1 (run {ids[0]}): at byte {offset}, {size} bytes", line)
        self.assertIn("broken: 3 record(s) verified, 1 line(s) over the size bound not checked", r.out)
        note("verify: " + line)

        rp = sbx(["replay", ids[-1]], env=self.env)
        self.assertExit(rp, 0)
        self.assertEqual(rp.out, "identical\n")
        # (replay names it in the verify's words: one walk of the ledger)
        self.assertIn(f"at byte {offset}, {size} bytes, over the", rp.err)
        g = sbx(["gc"], env=self.env)
        self.assertExit(g, 0)
        self.assertIn(where, g.err)
        self.assertExit(sbx(["replay", ids[2]], env=self.env), 0)  # gc kept what the readable records need
        r = sbx(["trace", "reindex"], env=self.env)
        self.assertExit(r, 0)
        self.assertIn("indexed 6 ledger line(s)", r.out)  # three runs, the big line, two replays
        r, listed = self.ls_json(1)
        self.assertEqual(len(listed), 5)

    def test_a_garbage_last_line_is_named_and_ls_exits_1(self):
        ids = self.run_kept(2)
        offset = os.path.getsize(self.ledger)
        with open(self.ledger, "ab") as f:
            f.write(b"this is not a ledger line\n")
        for _ in range(2):  # built into the index, then answered from it: named both times
            r, listed = self.ls_json(1)
            self.assertEqual(listed, ids[::-1])
            self.assertIn(f"skipping ledger line 3 at byte {offset}: not a ledger line", r.err)
        r = sbx(["trace", "ls"], env=self.env)
        self.assertExit(r, 1)
        self.assertTrue(all(i in r.out for i in ids), r.out)
        self.assertExit(self.verify(), 1)
        # Cut off again, the store is whole: exit 0 and no warning.
        with open(self.ledger, "r+b") as f:
            f.truncate(offset)
        r, listed = self.ls_json(0)
        self.assertEqual(listed, ids[::-1])
        self.assertNotIn("skipping", r.err)


class Prune(LedgerCase):
    """`sbx trace prune` (unknown on the previous main: exit 125) and `sbx run --json`'s record seq."""

    def test_prune_leaves_a_verifiable_ledger_and_tampering_after_the_anchor_is_found(self):
        ids = self.runs(4)
        r = sbx(["trace", "prune", "--keep", "2", "--dry-run"], env=self.env)
        self.assertExit(r, 0)
        self.assertIn("would prune 2 record(s) through seq 2", r.out)
        self.assertEqual(len(self.lines()), 4, "a dry run changes nothing")
        r = sbx(["trace", "prune", "--keep", "2", "--json"], env=self.env)
        self.assertExit(r, 0)
        j = json.loads(r.out)
        self.assertEqual((j["pruned"], j["kept"], j["pruned_through"]["seq"], j["pruned_through"]["run_id"]),
                         (2, 2, 2, ids[1]), j)
        lines = self.lines()
        self.assertEqual(len(lines), 3)
        self.assertTrue(lines[0].startswith(b'{"pruned":"'), lines[0])
        r = self.verify()
        self.assertExit(r, 0)
        self.assertIn("pruned before seq 3", r.out)
        self.assertIn("intact: 2 record(s); head seq 4", r.out)
        ls = json.loads(sbx(["trace", "ls", "--json"], env=self.env).out)
        self.assertEqual(sorted(x["run_id"] for x in ls), sorted(ids[2:]), "the index dropped the pruned rows")
        # The chain goes on, and sbx run --json names the record's seq.
        r = sbx(["run", "--json", "--", "sh", "-c", "echo hi; exit 3"], env=self.env)
        self.assertExit(r, 3, "the exit status is the same as without --json")
        self.assertIn("hi", r.err, "the program's stdout goes to stderr")
        j = json.loads(r.out)
        self.assertEqual((j["result"]["status"], j["result"]["exit_code"], j["exit_status"]), ("exit_nonzero", 3, 3))
        self.assertEqual((j["record"]["stored"], j["record"]["seq"]), (True, 5), j)
        self.assertEqual(j["run_id"], ledger_lines(self.state)[-1]["run_id"])
        self.assertExit(self.verify(), 0)
        # Around the anchor, a deleted or edited record is still found.
        lines = self.lines()
        self.write_lines([lines[0]] + lines[2:])
        self.assertBroken(["record seq 3 is missing"])
        edited = lines[1].replace(b'"exit_code":2', b'"exit_code":0', 1)
        self.write_lines([lines[0], edited] + lines[2:])
        self.assertBroken(["seq 3", "edited"])
        # A broken ledger is not pruned: that would remove the evidence.
        r = sbx(["trace", "prune", "--keep", "1"], env=self.env)
        self.assertExit(r, 125)
        self.assertIn("does not verify", self.assertOneSbxLine(r))

    def test_prune_arguments_are_checked(self):
        self.assertExit(sbx(["trace", "prune"], env=self.env), 125)
        r = sbx(["trace", "prune", "--before", "garbage"], env=self.env)
        self.assertExit(r, 125)
        self.assertIn("--before 'garbage'", self.assertOneSbxLine(r))
        self.assertExit(sbx(["trace", "prune", "--keep", "-1"], env=self.env), 125)
        r = sbx(["trace", "prune", "--before", "1h"], env=self.env)
        self.assertExit(r, 0)
        self.assertIn("nothing to prune", r.out)


class NoResultWithoutRecord(LedgerCase):
    """The state dir's trace store cannot be created (a file where the directory should be): the
    record cannot be stored, so the validated result must not be released."""

    def block_store(self):
        os.makedirs(self.state)
        with open(os.path.join(self.state, "traces"), "w") as f:
            f.write("not a directory\n")

    def make_pack(self):
        d = self.path("pack")
        os.makedirs(d + "/schemas")
        manifest = {"name": "t-rec", "version": "1.0.0", "entrypoint": ["/bin/sh", "/pack/run.sh"],
                    "input_schema": "schemas/in.json", "output_schema": "schemas/out.json",
                    "limits": {"timeout": "20s"}, "network": {"mode": "none"}}
        files = {"pack.json": json.dumps(manifest), "schemas/in.json": '{"type": "object"}',
                 "schemas/out.json": '{"type": "object", "required": ["ok"]}',
                 "run.sh": "printf '{\"ok\": true}' > /out/result.json\n"}
        write_tree(d, files)
        inp = self.path("in.json")
        with open(inp, "w") as f:
            f.write("[{}]")
        os.chmod(inp, 0o644)
        return d, inp

    def test_pack_run_withholds_the_result(self):
        d, inp = self.make_pack()
        r = sbx(["pack", "run", d, "--input", inp], env=self.env, timeout=60)
        self.assertExit(r, 0, "the pack works while the store does")
        self.assertEqual(json.loads(r.out), {"ok": True})
        self.state = self.path("state-blocked")
        self.env = dict(os.environ, SBX_STATE_DIR=self.state)
        self.block_store()
        r = sbx(["pack", "run", d, "--input", inp], env=self.env, timeout=60)
        self.assertExit(r, 125)
        self.assertEqual(r.stdout, b"", "a result was released without its record")
        line = self.assertOneSbxLine(r)
        self.assertIn("could not be stored durably", line)
        self.assertIn("withheld", line)

    def test_exec_withholds_the_result(self):
        self.block_store()
        req = {"language": "sh", "code": "echo out; printf '{\"ok\": 1}' > /out/result.json"}
        r = sbx(["exec"], input=json.dumps(req).encode(), env=self.env, timeout=60)
        self.assertExit(r, 125)
        resp = json.loads(r.out)
        self.assertEqual(set(resp), {"error"}, "only an error comes back, no stdout or result")
        self.assertEqual(resp["error"]["stage"], "record")
        self.assertIn("withheld", resp["error"]["message"])
        self.assertIn("withheld", self.assertOneSbxLine(r))

    def test_run_require_record_flag_and_profile_key(self):
        self.block_store()
        r = sbx(["run", "--", "/bin/echo", "hi"], env=self.env)
        self.assertExit(r, 0, "plain sbx run: a warning (the default)")
        self.assertIn("could not store the trace record", r.err)
        r = sbx(["run", "--require-record", "--", "/bin/echo", "hi"], env=self.env)
        self.assertExit(r, 125)
        self.assertIn("could not be stored durably", r.err)
        prof = self.path("prof.json")
        with open(prof, "w") as f:
            json.dump({"require_record": True}, f)
        os.chmod(prof, 0o644)
        r = sbx(["run", "--profile", prof, "--", "/bin/echo", "hi"], env=self.env)
        self.assertExit(r, 125)
        self.assertIn("could not be stored durably", r.err)


if __name__ == "__main__":
    unittest.main()
