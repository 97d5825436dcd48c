"""Live events (--events FILE|fd:N, the profile's "events" key) and provenance export
(`sbx trace export --format in-toto`), and `trace ls` filters. Runs as root and rootless."""
import fcntl
import json
import os
import platform
import re
import stat
import time
import unittest

from sbxtest import SBX, SbxTestCase, sbx, scaled

PY = "/usr/bin/python3"
CURL = "/usr/bin/curl"
# mount(2): refused with EPERM by the default policy, so each call is a violation.
MOUNT_NR = {"x86_64": 165, "aarch64": 40}.get(platform.machine(), 165)
REFUSE_LOOP = ("import ctypes, sys\nlibc = ctypes.CDLL(None, use_errno=True)\n"
               "n = int(sys.argv[1])\ni = 0\n"
               "while n < 0 or i < n:\n    libc.syscall({nr}, 0, 0, 0, 0, 0)\n    i += 1\n"
               "print('done', i)\n").format(nr=MOUNT_NR)
F_SETPIPE_SZ = 1031


def read_events(path):
    with open(path, "rb") as f:
        data = f.read()
    return parse_events(data)


def parse_events(data):
    events = []
    for line in data.splitlines():
        # Escaped JSON: every byte printable ASCII.
        assert all(0x20 <= b < 0x7f for b in line), line
        events.append(json.loads(line))
    return events


def make_pack(tc, name, script, version="1.0.0"):
    """A minimal rule pack (integer records in, an object out) under tc's scratch dir; returns (dir, input)."""
    d = tc.path("pack-" + name)
    os.makedirs(d + "/schemas")
    manifest = {"name": name, "version": version, "entrypoint": ["/bin/sh", "/pack/run.sh"],
                "input_schema": "schemas/in.json", "output_schema": "schemas/out.json",
                "limits": {"timeout": "20s"}, "network": {"mode": "none"}}
    files = {"pack.json": json.dumps(manifest), "schemas/in.json": json.dumps({"type": "integer"}),
             "schemas/out.json": json.dumps({"type": "object"}), "run.sh": script}
    for rel, content in files.items():
        with open(os.path.join(d, rel), "w") as f:
            f.write(content)
        os.chmod(os.path.join(d, rel), 0o644)
    for p in (d, d + "/schemas"):
        os.chmod(p, 0o755)
    inp = tc.path(name + "-in.json")
    with open(inp, "w") as f:
        f.write("[1, 2]")
    os.chmod(inp, 0o644)
    return d, inp


class Events(SbxTestCase):
    def assertOrdered(self, events):
        seqs = [e["seq"] for e in events]
        self.assertEqual(seqs, sorted(seqs), seqs)
        times = [e["time_ms"] for e in events]
        self.assertEqual(times, sorted(times), times)

    def test_seccomp_violations_stream_as_they_happen(self):
        ev = self.path("events.jsonl")
        r = self.run_sbx([PY, "-c", REFUSE_LOOP, "3"], ["--events", ev])
        self.assertExit(r, 0)
        events = read_events(ev)
        kinds = [e["event"] for e in events]
        self.assertEqual(kinds[0], "started", kinds)
        self.assertEqual(kinds[-1], "exited", kinds)
        t = self.need_trace(r)
        self.assertEqual(events[0]["run_id"], t["run_id"])
        self.assertIsInstance(events[0]["pid"], int)
        viol = [e for e in events if e["event"] == "violation"]
        self.assertEqual(len(viol), 3, events)
        self.assertEqual({v["name"] for v in viol}, {"mount"})
        self.assertEqual([v["count"] for v in viol], [1, 2, 3])
        self.assertEqual(viol[0]["kind"], "seccomp")
        self.assertEqual(viol[0]["action"], "SCMP_ACT_ERRNO(EPERM)")
        self.assertEqual(events[-1]["status"], "ok")
        self.assertEqual(events[-1]["exit_code"], 0)
        self.assertIsInstance(events[-1]["wall_ms"], int)
        self.assertOrdered(events)
        self.assertEqual(t["events"]["destination"], ev)
        self.assertEqual(t["events"]["emitted"], len(events))
        self.assertEqual(t["events"]["written"], len(events))
        self.assertEqual(t["events"]["dropped"], 0)
        self.assertEqual(stat.S_IMODE(os.stat(ev).st_mode), 0o600)

    @unittest.skipUnless(os.path.exists(CURL), "curl is not installed")
    def test_network_denial_is_an_event_with_the_host_escaped(self):
        ev = self.path("events.jsonl")
        r = self.run_sbx(["sh", "-c", f"{CURL} -sS --max-time 10 -o /dev/null -w '%{{http_code}}' http://127.0.0.1:9/x; "
                                      f"{CURL} -sS --max-time 10 -o /dev/null -x http://127.0.0.1:3128 "
                                      "'http://bad%1b.example/' || true"],
                         ["--events", ev, "--allow-host", "allowed.invalid", "--env", "NO_PROXY=", "--env", "no_proxy="])
        self.assertExit(r, 0)
        self.assertEqual(r.out[:3], "403", r.describe())
        events = read_events(ev)
        net = [e for e in events if e["event"] == "violation" and e.get("kind") == "network"]
        self.assertGreaterEqual(len(net), 1, events)
        self.assertEqual(net[0]["host"], "127.0.0.1")
        self.assertEqual(net[0]["port"], 9)
        self.assertIn("reason", net[0])
        self.assertNotIn("time_ms", {k for k in net[0] if k != "time_ms"})
        t = self.need_trace(r)
        self.assertEqual(len([v for v in t["violations"] if v["kind"] == "network"]), len(net))

    def test_the_events_file_is_capped_and_ends_with_a_truncated_event(self):
        # Every refused call is an event: a loop of them used to grow the file without bound
        # (15 MB in 3 s). The cap is the run's output limit (64 KiB at least, 64 MiB at most).
        ev = self.path("events.jsonl")
        r = self.run_sbx([PY, "-c", REFUSE_LOOP, "4000"], ["--events", ev, "--output-limit", "1K"], timeout=60)
        self.assertExit(r, 0)
        self.assertIn("done 4000", r.out, "the run goes on past the cap")
        size = os.path.getsize(ev)
        self.assertLessEqual(size, 64 * 1024)
        events = read_events(ev)
        self.assertEqual(events[0]["event"], "started")
        last = events[-1]
        self.assertEqual(last["event"], "truncated", events[-3:])
        self.assertEqual(last["limit_bytes"], 64 * 1024)
        self.assertEqual(last["first_dropped_seq"], len(events))
        self.assertGreater(last["dropped"], 0)
        self.assertOrdered(events)
        t = self.need_trace(r)
        rec = t["events"]
        self.assertTrue(rec["truncated"], json.dumps(rec))
        self.assertEqual(rec["max_bytes"], 64 * 1024)
        self.assertEqual(rec["dropped_over_limit"], last["dropped"])
        self.assertEqual(rec["written"], len(events))
        self.assertEqual(rec["written"] + rec["dropped"], rec["emitted"])
        self.assertEqual(last["seq"], rec["emitted"])
        self.assertEqual(t["violations_summary"]["seccomp"]["calls"], 4000)

    def test_fifo_nobody_reads_does_not_delay_the_timeout_and_drops_are_counted(self):
        fifo = self.path("events.fifo")
        os.mkfifo(fifo, 0o600)
        # Held open (so sbx finds a reader) and never read; its pipe shrunk to one page.
        holder = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        try:
            fcntl.fcntl(holder, F_SETPIPE_SZ, 4096)
            start = time.monotonic()
            r = self.run_sbx([PY, "-c", REFUSE_LOOP, "-1"], ["--events", fifo, "--timeout", "2s"], timeout=60)
            elapsed = time.monotonic() - start
        finally:
            os.close(holder)
        self.assertExit(r, 124, "the wall-time limit ends the run")
        # 2 s of limit; sbx's start and record add well under a second. A supervisor blocked on the
        # FIFO would never reach the timeout at all.
        self.assertLess(elapsed, scaled(4.0, 2.0), r.describe())
        t = self.need_trace(r)
        ev = t["events"]
        self.assertGreater(ev["dropped"], 0, json.dumps(ev))
        self.assertEqual(ev["written"] + ev["dropped"], ev["emitted"], json.dumps(ev))
        self.assertGreater(ev["emitted"], 500, json.dumps(ev))
        self.assertGreater(t["violations_summary"]["seccomp"]["calls"], 500)

    def test_fifo_without_any_reader_is_not_waited_for(self):
        fifo = self.path("events.fifo")
        os.mkfifo(fifo, 0o600)
        r = self.run_sbx(["true"], ["--events", fifo], timeout=20)
        self.assertExit(r, 0)
        ev = self.need_trace(r)["events"]
        self.assertEqual(ev["dropped"], 0)
        self.assertEqual(ev["written"], ev["emitted"])

    def test_fd_form_and_output_truncated_and_artifact_export(self):
        rfd, wfd = os.pipe()
        fdnum = wfd
        out = self.path("out")
        try:
            r = self.run_sbx(["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' x; echo a > /out/a; echo b > /out/b"],
                             ["--events", f"fd:{wfd}", "--output-limit", "100", "--output", out], pass_fds=(wfd,))
            os.close(wfd)
            wfd = -1
            os.set_blocking(rfd, False)
            data = b""
            try:
                while chunk := os.read(rfd, 65536):
                    data += chunk
            except BlockingIOError:
                pass
        finally:
            if wfd >= 0:
                os.close(wfd)
            os.close(rfd)
        events = parse_events(data)
        kinds = [e["event"] for e in events]
        self.assertIn("output_truncated", kinds, events)
        trunc = next(e for e in events if e["event"] == "output_truncated")
        self.assertEqual(trunc["stream"], "stdout")
        self.assertEqual(trunc["limit_bytes"], 100)
        exp = next(e for e in events if e["event"] == "artifact_export")
        self.assertEqual(exp["files"], 2)
        self.assertEqual(exp["dir"], out)
        self.assertEqual(kinds[-1], "exited")
        self.assertLess(kinds.index("output_truncated"), kinds.index("artifact_export"))
        self.assertEqual(self.need_trace(r)["events"]["destination"], f"fd:{fdnum}")

    def test_events_profile_key_and_bad_destinations(self):
        ev = self.path("from-profile.jsonl")
        prof = self.path("p.json")
        with open(prof, "w") as f:
            json.dump({"limits": {"timeout": "10s"}, "events": ev}, f)
        os.chmod(prof, 0o644)
        r = self.run_sbx(["true"], ["--profile", prof])
        self.assertExit(r, 0)
        self.assertEqual([e["event"] for e in read_events(ev)], ["started", "exited"])
        for bad, why in (("fd:x", "fd:"), ("fd:987", "not open"), (self.path("no/such/dir/ev"), "cannot open")):
            with self.subTest(bad=bad):
                r = self.run_sbx(["true"], ["--events", bad], trace=False)
                self.assertExit(r, 125)
                line = self.assertOneSbxLine(r)
                self.assertIn(why, line)

    def test_pack_run_and_exec_take_events(self):
        d, inp = make_pack(self, "ev", "printf '{\"n\": 1}' > /out/result.json\n")
        ev = self.path("pack-events.jsonl")
        r = sbx(["pack", "run", d, "--input", inp, "--events", ev], timeout=60)
        self.assertEqual(r.rc, 0, r.describe())
        events = read_events(ev)
        self.assertEqual(events[0]["event"], "started")
        self.assertEqual(events[0]["pack"], "ev")
        self.assertEqual(events[-1]["event"], "exited")
        ev2 = self.path("exec-events.jsonl")
        req = json.dumps({"language": "sh", "code": "echo hi"}).encode()
        r = sbx(["exec", "--events", ev2], input=req, timeout=60)
        self.assertEqual(r.rc, 0, r.describe())
        self.assertEqual([e["event"] for e in read_events(ev2)][-1], "exited")


class Export(SbxTestCase):
    """The document is checked against the published field definitions: in-toto attestation
    spec/v1 (statement.md, resource_descriptor.md, digest_set.md, field_types.md) and SLSA
    provenance v1 (docs/spec/v1.0/provenance.md)."""

    def setUp(self):
        super().setUp()
        # A state dir of its own: `trace export` reads the index, which must not appear in the
        # suite's shared store (test_trace checks that runs leave only the ledger there).
        self.state = self.path("state")
        os.makedirs(self.state)

    RFC3339_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")
    URI = re.compile(r"^[a-z][a-z0-9+.-]*:\S+$")

    def check_descriptor(self, rd, digest_required):
        self.assertIsInstance(rd, dict)
        self.assertTrue({"uri", "digest", "content"} & rd.keys(), rd)
        if digest_required:
            self.assertIn("digest", rd)
        for alg, v in rd.get("digest", {}).items():
            self.assertIsInstance(v, str)
            if alg == "sha256":
                self.assertRegex(v, r"^[0-9a-f]{64}$")
        if "uri" in rd:
            self.assertRegex(rd["uri"], self.URI)

    def check_statement(self, s):
        self.assertEqual(s["_type"], "https://in-toto.io/Statement/v1")
        self.assertEqual(s["predicateType"], "https://slsa.dev/provenance/v1")
        self.assertIsInstance(s["subject"], list)
        self.assertGreater(len(s["subject"]), 0)
        names = [x.get("name") for x in s["subject"]]
        self.assertEqual(len(names), len(set(names)), "subject names SHOULD be unique")
        for sub in s["subject"]:
            self.check_descriptor(sub, True)
        p = s["predicate"]
        bd, rd = p["buildDefinition"], p["runDetails"]
        self.assertRegex(bd["buildType"], self.URI)
        self.assertIsInstance(bd["externalParameters"], dict)
        self.assertIsInstance(bd.get("internalParameters", {}), dict)
        for d in bd.get("resolvedDependencies", []):
            self.check_descriptor(d, False)
        self.assertRegex(rd["builder"]["id"], self.URI)
        for k in ("startedOn", "finishedOn"):
            self.assertRegex(rd["metadata"][k], self.RFC3339_UTC)
        for b in rd.get("byproducts", []):
            self.check_descriptor(b, False)
        # Extension fields carry an underscore (<vendor>_<field>); standard names never do.
        for k in list(p) + list(bd) + list(rd):
            self.assertTrue("_" not in k or k.startswith("sbx_"), k)

    def test_pack_run_exports_its_result_as_subject(self):
        d, inp = make_pack(self, "prov", "printf '{\"n\": 7}' > /out/result.json\n", "2.0.0")
        tpath = self.path("t.json")
        r = sbx(["--state-dir", self.state, "pack", "run", d, "--input", inp, "--trace-file", tpath], timeout=60)
        self.assertEqual(r.rc, 0, r.describe())
        with open(tpath) as f:
            t = json.load(f)
        out = self.path("statement.json")
        r = sbx(["--state-dir", self.state, "trace", "export", t["run_id"][:22], "--format", "in-toto", "-o", out])
        self.assertEqual(r.rc, 0, r.describe())
        with open(out) as f:
            s = json.load(f)
        self.check_statement(s)
        import hashlib
        self.assertEqual(s["subject"], [{"name": "/out/result.json",
                                         "digest": {"sha256": hashlib.sha256(b'{"n": 7}').hexdigest()},
                                         "annotations": {"bytes": 8}}])
        bd = s["predicate"]["buildDefinition"]
        self.assertEqual(bd["externalParameters"]["pack"]["name"], "prov")
        self.assertEqual(bd["externalParameters"]["argv"], t["invocation"]["argv"])
        self.assertEqual(bd["externalParameters"]["profile"]["sha256"], t["invocation"]["profile"]["sha256"])
        deps = {x["name"]: x for x in bd["resolvedDependencies"]}
        self.assertEqual("sha256:" + deps["pack"]["digest"]["sha256"], t["invocation"]["pack"]["digest"])
        self.assertEqual(deps[t["inputs"][0]["path"]]["digest"]["sha256"], hashlib.sha256(b"[1, 2]").hexdigest())
        rd = s["predicate"]["runDetails"]
        self.assertEqual(rd["metadata"]["invocationId"], t["run_id"])
        self.assertEqual(rd["builder"]["id"], f"pkg:generic/sbx@{t['sbx']['version']}?checksum=sha256:{t['sbx']['binary_sha256']}")
        # stdout instead of -o: the same document.
        r2 = sbx(["--state-dir", self.state, "trace", "export", t["run_id"], "--format", "in-toto"])
        self.assertEqual(r2.rc, 0, r2.describe())
        self.assertEqual(json.loads(r2.out), s)

    def test_plain_run_attests_stdout_and_bad_selectors_are_usage_errors(self):
        r = self.run_sbx(["echo", "hello"], env=dict(os.environ, SBX_STATE_DIR=self.state))
        self.assertExit(r, 0)
        t = self.need_trace(r)
        r2 = sbx(["--state-dir", self.state, "trace", "export", t["run_id"]])
        self.assertEqual(r2.rc, 0, r2.describe())
        s = json.loads(r2.out)
        self.check_statement(s)
        self.assertEqual(s["subject"][0]["name"], "stdout")
        self.assertEqual(s["subject"][0]["digest"]["sha256"], t["stdout"]["sha256"])
        for args in (["trace", "export", "no-such-run"], ["trace", "export", t["run_id"], "--format", "spdx"]):
            r3 = sbx(["--state-dir", self.state] + args)
            self.assertEqual(r3.rc, 125, r3.describe())


class TraceLsFilters(SbxTestCase):
    def test_pack_image_limit_and_json(self):
        state = self.path("state")
        os.makedirs(state)
        def run(*cmd):
            r = sbx(["--state-dir", state, "run", "--"] + list(cmd))
            self.assertEqual(r.rc, 0, r.describe())
        run("true")
        run("sh", "-c", "exit 0")
        run("true")
        d, inp = make_pack(self, "lsp", "printf '{}' > /out/result.json\n", "3.1.0")
        r = sbx(["--state-dir", state, "pack", "run", d, "--input", inp, "--trace-file", self.path("p.json")], timeout=60)
        self.assertEqual(r.rc, 0, r.describe())
        with open(self.path("p.json")) as f:
            pack_digest = json.load(f)["invocation"]["pack"]["digest"]
        def ls(*args):
            r = sbx(["--state-dir", state, "trace", "ls", "--json"] + list(args))
            self.assertEqual(r.rc, 0, r.describe())
            return json.loads(r.out)
        allruns = ls()
        self.assertEqual(len(allruns), 4)
        self.assertEqual(allruns[0]["pack"], {"name": "lsp", "version": "3.1.0", "digest": pack_digest})
        self.assertEqual(allruns[1]["image"], {"name": "host", "digest": None})
        self.assertIsNone(allruns[1]["pack"])
        for sel in ("lsp", "lsp@3.1.0", pack_digest, pack_digest[len("sha256:"):]):
            with self.subTest(pack=sel):
                got = ls("--pack", sel)
                self.assertEqual([x["run_id"] for x in got], [allruns[0]["run_id"]])
        self.assertEqual(ls("--pack", "lsp@9"), [])
        allruns = allruns[1:]
        self.assertEqual(len(ls("--limit", "2")), 2)
        self.assertEqual(len(ls("-n", "1")), 1)
        self.assertEqual(len(ls("--image", "host")), 4)
        self.assertEqual(ls("--image", "nosuch"), [])
        self.assertEqual(ls("--pack", "nosuch"), [])
        self.assertEqual(len(ls("--status", "ok", "--since", allruns[1]["started_at"])), 3)
        # The index is rebuilt from the ledger for the new columns, and answers the same after.
        r = sbx(["--state-dir", state, "trace", "reindex"])
        self.assertEqual(r.rc, 0, r.describe())
        self.assertEqual(len(ls("--image", "host", "--limit", "5")), 4)
        self.assertEqual(len(ls("--pack", "lsp", "--image", "host")), 1)


if __name__ == "__main__":
    unittest.main()
