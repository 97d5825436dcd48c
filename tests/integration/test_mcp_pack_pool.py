"""sbx mcp --pool N for pack tools (issue 34 items 1 and 2): each pack tool gets sandboxes built ahead for
that pack (its private copy at /pack, its contexts' copies, its image and limits); a call's records
arrive at hand-out. A pooled pack call answers exactly as a cold one, and its record says how the
sandbox was made (pool.key.pack: the pack's name and the digest of the copy it was built with).
Nothing of one call is seen by the next. What is checked at hand-out makes the call run cold, its
record saying why: the pack or a context edited since the build (the cold run gets the tree as it
is now, and the pool's next sandbox is built from it), records invalid against the input schema (the
cold run refuses them, as ever), a pack given secrets (never pooled: a secret is read at each call).
A pooled pack call replays identically. A pack's own `warm` key prepares its interpreter (the
preloads imported before the call, which then runs its script as __main__); a preload the image
lacks stops the server at its start, naming the pack; an entrypoint a prepared interpreter would
not run is refused when the pack is loaded. Runs as root and rootless."""
import json
import os
import subprocess
import time
import uuid

from sbxtest import MODE, SBX, SbxTestCase, ledger_lines, note, procs, scaled, validate_trace, write_tree
from test_mcp import Server, cmdline
from test_mcp_pool import descendants, pooled_workers

# The pack's program: what it saw (the records, /tmp as it found it, its context, its pid
# namespace), then it leaves things behind (a file in /tmp and /out, a background process) that
# the next call must not see.
SCRIPT = r"""set -eu
n=$(grep -o '"id"' /in/records.json | wc -l)
left=$( (ls -A /tmp; ls -A /out) | tr '\n' ' ')
ctx=$(cat /ctx/data 2>/dev/null || echo none)
sleeps=$(for p in /proc/[0-9]*; do cat $p/cmdline 2>/dev/null | tr '\0' ' '; echo; done | grep -c '^sleep' || true)
printf '{"count": %s, "left": "%s", "ctx": "%s", "sleeps": %s, "pidns": "%s", "version": "VERSION"}' \
  "$n" "$left" "$ctx" "$sleeps" "$(readlink /proc/self/ns/pid)" > /out/result.json
echo leftover > /tmp/left-behind
(sleep MARKER >/dev/null 2>&1 &)
"""


class McpPackPoolTest(SbxTestCase):
    def server(self, args):
        s = Server(self, args)
        self.addCleanup(s.close)
        return s

    def call(self, s, name, arguments, timeout=60):
        return s.request("tools/call", {"name": name, "arguments": arguments}, timeout=timeout)

    def records(self, s):
        return [e["record"] for e in ledger_lines(s.state)]

    def make_pack(self, name, version="v1", context=True, secrets=None, script=SCRIPT, entrypoint=None, warm=None,
                  files=None):
        d = self.path(f"pack-{name}-{uuid.uuid4().hex[:6]}")
        self.marker = "3%d.5" % (uuid.uuid4().int % 10**8)
        manifest = {"name": name, "version": "1.0.0", "entrypoint": entrypoint or ["/bin/sh", "/pack/run.sh"],
                    "input_schema": "schemas/in.json", "output_schema": "schemas/out.json",
                    "limits": {"timeout": "20s", "pids": 32}, "network": {"mode": "none"}}
        if context:
            manifest["context"] = [{"name": "data", "path": "/ctx/data", "required": True}]
        if secrets:
            manifest["secrets"] = secrets
        if warm:
            manifest["warm"] = warm
        files = dict(files or {})
        files.update({"pack.json": json.dumps(manifest),
                 "run.sh": script.replace("VERSION", version).replace("MARKER", self.marker),
                 "schemas/in.json": json.dumps({"type": "object", "required": ["id"]}),
                 "schemas/out.json": json.dumps({"type": "object", "required": ["count"]})})
        write_tree(d, files)
        return d

    def context_file(self, text):
        path = self.path(f"ctx-{uuid.uuid4().hex[:6]}")
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o644)
        return path

    def pack_call(self, s, name, records):
        return self.call(s, name, {"records": records})["result"]

    def wait_workers(self, s, n, timeout=30):
        """Until n pooled workers (run_code's and each pack's) each have their sandbox's init."""
        deadline = time.monotonic() + scaled(timeout)
        while time.monotonic() < deadline:
            if len([w for w in pooled_workers(s.p.pid) if descendants(w)]) >= n:
                time.sleep(0.3)  # the init's setup up to its pause
                return
            time.sleep(0.05)
        self.fail(f"{n} pooled sandboxes not made within {timeout}s; stderr:\n{s.stderr()}")

    def test_a_pack_call_is_served_by_a_sandbox_built_for_its_pack(self):
        d = self.make_pack("pooled-pack")
        ctx = self.context_file("ctx-one")
        records = [{"id": i} for i in range(3)]
        answers = {}
        for pool in (0, 1):
            s = self.server(["--pool", str(pool), "--max-concurrent", "1", "--packs", d,
                             "--context", f"pooled-pack/data={ctx}"])
            if pool:
                self.wait_workers(s, 2)
            got = []
            for _ in range(3):
                if pool:
                    self.wait_workers(s, 2)  # the replacement built: every call finds one
                r = self.pack_call(s, "pooled-pack", records)
                self.assertFalse(r["isError"], r)
                got.append(r["structuredContent"])
            recs = self.records(s)
            self.assertEqual(len(recs), 3, recs)
            for rec in recs:
                validate_trace(self, rec)
                self.assertEqual(rec["result"]["status"], "ok")
                self.assertEqual(rec["validation"]["input"], {"status": "ok", "records": 3})
                self.assertEqual(rec["sandbox"]["made_by"], "pooled" if pool else "cold")
                blobs = sorted((b["role"], b.get("path", "")) for b in rec["blobs"])
                answers.setdefault("blobs", []).append(blobs)
            if pool:
                for rec in recs:
                    self.assertTrue(rec["pool"]["hit"], rec["pool"])
                    self.assertEqual(rec["pool"]["key"]["pack"],
                                     {"name": "pooled-pack", "digest": rec["invocation"]["pack"]["digest"]})
                note("pooled pack call's pool: " + json.dumps(recs[-1]["pool"]))
            # Nothing of one call reached the next: /tmp and /out were empty each time, no call saw the
            # previous one's background process, which died with its sandbox.
            for g in got:
                self.assertEqual((g["left"], g["sleeps"], g["ctx"], g["count"], g["version"]), ("", 0, "ctx-one", 3, "v1"), g)
            answers[pool] = [{k: v for k, v in g.items() if k != "pidns"} for g in got]
            self.assertEqual([p for p, (cl, _) in procs().items() if any(self.marker in x for x in cl)], [])
        self.assertEqual(answers[0], answers[1])
        self.assertEqual(len(set(map(tuple, answers["blobs"]))), 1, answers["blobs"])  # pooled keeps what cold keeps
        r = subprocess.run([SBX, "--state-dir", s.state, "trace", "verify"], capture_output=True, timeout=scaled(30))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_a_pack_or_context_edited_after_the_build_runs_cold_as_it_is_now(self):
        d = self.make_pack("edited-pack")
        ctx = self.context_file("ctx-one")
        s = self.server(["--pool", "1", "--max-concurrent", "1", "--packs", d,
                         "--context", f"edited-pack/data={ctx}"])
        self.wait_workers(s, 2)
        with open(os.path.join(d, "run.sh")) as f:
            script = f.read()
        with open(os.path.join(d, "run.sh"), "w") as f:
            f.write(script.replace('"v1"', '"v2"'))
        r = self.pack_call(s, "edited-pack", [{"id": 1}])
        self.assertFalse(r["isError"], r)
        self.assertEqual(r["structuredContent"]["version"], "v2")  # the tree as it is now
        rec = self.records(s)[-1]
        self.assertFalse(rec["pool"]["hit"], rec["pool"])
        self.assertIn("changed since the pooled sandbox was built", rec["pool"]["reason"])
        note("edited pack: " + rec["pool"]["reason"])
        # The pool's next sandbox is built from the pack as it is now: pooled again, the new digest.
        self.wait_workers(s, 2)
        r = self.pack_call(s, "edited-pack", [{"id": 1}])
        self.assertEqual(r["structuredContent"]["version"], "v2")
        rec = self.records(s)[-1]
        self.assertTrue(rec["pool"]["hit"], rec["pool"])
        self.assertEqual(rec["pool"]["key"]["pack"]["digest"], rec["invocation"]["pack"]["digest"])
        # A context edited after the build: cold, with the context as it is now.
        self.wait_workers(s, 2)
        with open(ctx, "w") as f:
            f.write("ctx-two")
        r = self.pack_call(s, "edited-pack", [{"id": 1}])
        self.assertEqual(r["structuredContent"]["ctx"], "ctx-two")
        rec = self.records(s)[-1]
        self.assertFalse(rec["pool"]["hit"], rec["pool"])
        self.assertIn("context data", rec["pool"]["reason"])
        self.assertIn("changed since the pooled sandbox was built", rec["pool"]["reason"])

    def test_invalid_records_are_refused_as_a_cold_call_refuses_them(self):
        d = self.make_pack("strict-pack", context=False)
        answers = []
        for pool in (0, 1):
            s = self.server(["--pool", str(pool), "--packs", d])
            if pool:
                self.wait_workers(s, 2)
            r = self.pack_call(s, "strict-pack", [{"id": 1}, {"no-id": 2}])
            rec = self.records(s)[-1]
            validate_trace(self, rec)
            self.assertEqual(rec["result"]["status"], "input_invalid")
            self.assertNotIn("program_started_at", rec)  # nothing ran
            if pool:
                self.assertFalse(rec["pool"]["hit"], rec["pool"])
                self.assertIn("not valid against the pack's input schema", rec["pool"]["reason"])
            sc = r.get("structuredContent")
            answers.append((r["isError"], [c["text"].split(" (run ")[0] for c in r["content"]],
                            sc and {k: v for k, v in sc.items() if k != "run_id"}))
        self.assertEqual(answers[0], answers[1])

    def test_a_pack_given_secrets_is_not_pooled_and_says_why(self):
        d = self.make_pack("secret-pack", context=False,
                           secrets=[{"name": "token", "required": True, "delivery": "file"}])
        sfile = self.context_file("s3cr3t-value")
        s = self.server(["--pool", "1", "--packs", d, "--secret", f"secret-pack/token=@{sfile}"])
        self.wait_workers(s, 1)  # run_code's only
        time.sleep(0.5)
        self.assertEqual(len(pooled_workers(s.p.pid)), 1)
        r = self.pack_call(s, "secret-pack", [{"id": 1}])
        self.assertFalse(r["isError"], r)
        rec = self.records(s)[-1]
        self.assertEqual(rec["sandbox"]["made_by"], "cold")
        self.assertFalse(rec["pool"]["hit"])
        self.assertIn("is given secrets", rec["pool"]["reason"])

    def test_a_pooled_pack_call_replays_identically(self):
        script = "set -eu\nprintf '{\"count\": %s}' $(grep -o '\"id\"' /in/records.json | wc -l) > /out/result.json\n"
        d = self.make_pack("replayed-pack", context=False, script=script)
        s = self.server(["--pool", "1", "--packs", d])
        self.wait_workers(s, 2)
        r = self.pack_call(s, "replayed-pack", [{"id": 7}, {"id": 8}])
        self.assertFalse(r["isError"], r)
        self.assertEqual(r["structuredContent"], {"count": 2})
        rec = self.records(s)[-1]
        self.assertTrue(rec["pool"]["hit"], rec["pool"])
        r = subprocess.run([SBX, "--state-dir", s.state, "replay", rec["run_id"]], capture_output=True,
                           timeout=scaled(60))
        note("replay of a pooled pack call: exit %d, %s" % (r.returncode, r.stdout.decode().strip()))
        self.assertEqual((r.returncode, r.stdout.decode().strip()), (0, "identical"), r.stderr)
        again = self.records(s)[-1]
        self.assertEqual(again["replay_of"]["run_id"], rec["run_id"])
        self.assertEqual(again["sandbox"]["made_by"], "cold")

    PY_MAIN = (
        "import json, sys\n"
        "records = json.load(open('/in/records.json'))\n"
        "json.dump({'count': len(records), 'preloaded': 'decimal' in sys.modules, 'argv': sys.argv,\n"
        "           'name': __name__}, open('/out/result.json', 'w'))\n")

    def warm_pack(self, name, preload, entrypoint=None):
        return self.make_pack(name, context=False, entrypoint=entrypoint or ["/usr/bin/python3", "/pack/main.py", "x"],
                              warm={"interpreter": "python3", "preload": preload}, files={"main.py": self.PY_MAIN})

    def test_a_pack_s_warm_key_prepares_its_interpreter_before_the_call(self):
        d = self.warm_pack("warm-pack", ["decimal", "json"])
        got = {}
        for pool in (0, 1):
            s = self.server(["--pool", str(pool), "--packs", d])
            if pool:
                self.wait_workers(s, 2)
                deadline = time.monotonic() + scaled(30)
                while "preparing python3 with decimal, json for pack warm-pack" not in s.stderr():
                    self.assertLess(time.monotonic(), deadline, s.stderr())
                    time.sleep(0.05)
            r = self.pack_call(s, "warm-pack", [{"id": 1}, {"id": 2}])
            self.assertFalse(r["isError"], r)
            got[pool] = r["structuredContent"]
            rec = self.records(s)[-1]
            validate_trace(self, rec)
            self.assertEqual(rec["validation"]["output"], {"status": "ok"})
            if pool:
                self.assertTrue(rec["pool"]["hit"], rec["pool"])
                self.assertEqual((rec["pool"]["warm"]["interpreter"], rec["pool"]["warm"]["preload"]),
                                 ("python3", ["decimal", "json"]), rec["pool"])
                note("warm pack call: %s; pool %s" % (json.dumps(got[pool]), json.dumps(rec["pool"])))
        # The same script, the same answer, but for what only a prepared interpreter has.
        self.assertEqual(got[0], {"count": 2, "preloaded": False, "argv": ["/pack/main.py", "x"], "name": "__main__"})
        self.assertEqual(got[1], dict(got[0], preloaded=True))

    def test_a_pack_s_missing_preload_stops_the_server_at_its_start(self):
        d = self.warm_pack("missing-preload", ["no_such_module_sbx"])
        r = subprocess.run([SBX, "--state-dir", self.path("state-missing"), "mcp", "--pool", "1", "--packs", d],
                           input=b"", capture_output=True, timeout=scaled(90))
        err = r.stderr.decode()
        self.assertEqual(r.returncode, 125, err)
        line = [l for l in err.splitlines() if "warm key" in l]
        self.assertTrue(line, err)
        self.assertIn("pack missing-preload's warm key", line[0])
        self.assertIn("no_such_module_sbx", line[0])
        note("pack with a missing preload: " + line[0])

    def test_a_warm_pack_whose_entrypoint_a_prepared_interpreter_would_not_run_is_refused(self):
        d = self.warm_pack("isolated", ["json"], entrypoint=["/usr/bin/python3", "-I", "/pack/main.py"])
        r = subprocess.run([SBX, "pack", "validate", d], capture_output=True, timeout=scaled(30))
        out = (r.stdout + r.stderr).decode()
        self.assertNotEqual(r.returncode, 0, out)
        self.assertIn("/warm/interpreter", out)
        self.assertIn("no option before the script", out)
        d = self.make_pack("bad-warm", context=False, warm={"interpreter": "python3", "preload": ["../x"]})
        r = subprocess.run([SBX, "pack", "validate", d], capture_output=True, timeout=scaled(30))
        out = (r.stdout + r.stderr).decode()
        self.assertNotEqual(r.returncode, 0, out)
        self.assertIn("/warm/preload/0", out)

    FACTS = r"""set -u
st=/proc/self/status
caps=$(grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' $st | awk '{print $2}' | tr '\n' ' ')
nnp=$(awk '/^NoNewPrivs/ {print $2}' $st)
sec=$(awk '/^Seccomp:/ {print $2}' $st)
net=$(awk -F: 'NR > 2 {gsub(/ /, "", $1); print $1}' /proc/net/dev | tr '\n' ' ')
usr=$( (touch /usr/sbx-probe 2>/dev/null && echo writable) || echo read-only)
root=$( (touch /sbx-probe 2>/dev/null && echo writable) || echo read-only)
tmp=$( (touch /tmp/sbx-probe 2>/dev/null && echo writable) || echo read-only)
pack=$( (touch /pack/sbx-probe 2>/dev/null && echo writable) || echo read-only)
ctx=$( (echo x >> /ctx/data 2>/dev/null && echo writable) || echo read-only)
procs=$(ls -d /proc/[0-9]* | wc -l)
printf '{"count": 0, "caps": "%s", "nnp": "%s", "seccomp": "%s", "net": "%s", "usr": "%s", "root": "%s", "tmp": "%s", "pack": "%s", "ctx": "%s", "uid": "%s", "host": "%s", "procs_at_most_8": %s}' \
  "$caps" "$nnp" "$sec" "$net" "$usr" "$root" "$tmp" "$pack" "$ctx" "$(id -u)" "$(hostname)" \
  "$([ "$procs" -le 8 ] && echo true || echo false)" > /out/result.json
"""

    def test_a_pooled_pack_sandbox_is_isolated_as_a_cold_one(self):
        """The facts a pack's program can read of its sandbox (capabilities, no_new_privs, seccomp,
        network interfaces, what is writable, its uid, hostname, the processes it sees) are the
        same whether the sandbox was built for the call or ahead of it."""
        d = self.make_pack("facts-pack", script=self.FACTS)
        ctx = self.context_file("ctx")
        facts = {}
        for pool in (0, 1):
            s = self.server(["--pool", str(pool), "--packs", d, "--context", f"facts-pack/data={ctx}"])
            if pool:
                self.wait_workers(s, 2)
            r = self.pack_call(s, "facts-pack", [{"id": 1}])
            self.assertFalse(r["isError"], r)
            facts[pool] = r["structuredContent"]
            self.assertEqual(self.records(s)[-1]["sandbox"]["made_by"], "pooled" if pool else "cold")
        note("pooled pack sandbox facts: " + json.dumps(facts[1]))
        self.assertEqual(facts[0], facts[1])
        f = facts[1]
        self.assertEqual((f["nnp"], f["seccomp"], f["usr"], f["root"], f["tmp"], f["pack"], f["ctx"]),
                         ("1", "2", "read-only", "read-only", "writable", "read-only", "read-only"), f)
        self.assertEqual(set(f["caps"].split()), {"0000000000000000"}, f)
        self.assertEqual(f["net"].split(), ["lo"], f)
        self.assertTrue(f["procs_at_most_8"], f)

    def test_a_tenant_s_pooled_pack_call_lands_in_its_store_and_the_tenant_is_applied_again_at_hand_out(self):
        """Under --tenant the response's ledger is the tenant's store (a pack's pointed at the
        untenanted one), and at hand-out the tenant is applied again: a change its policy file's
        digest cannot show (here another tenant's file now claims this tenant's store) makes the
        call run cold, where it is refused as a cold call is."""
        d = self.make_pack("tenant-pack", context=False)
        r = subprocess.run([SBX, "pack", "validate", d, "--json"], capture_output=True, timeout=scaled(30))
        digest = json.loads(r.stdout)["digest"]
        tenants = self.path("tenants")
        os.mkdir(tenants)
        old = os.environ.get("SBX_TENANTS_DIR")
        os.environ["SBX_TENANTS_DIR"] = tenants  # the server (and its workers) inherit it
        self.addCleanup(lambda: os.environ.pop("SBX_TENANTS_DIR") if old is None else os.environ.update(SBX_TENANTS_DIR=old))
        ids = "required" if MODE == "root" else "preferred"
        with open(os.path.join(tenants, "T.json"), "w") as f:
            json.dump({"id_slot": 7, "separate_ids": ids, "packs": [digest], "limits": {"timeout": "20s", "pids": 32}}, f)
        s = self.server(["--tenant", "T", "--pool", "1", "--max-concurrent", "1", "--packs", d])
        store = os.path.join(s.state, "tenants", "T")
        self.wait_workers(s, 2)
        r = self.pack_call(s, "tenant-pack", [{"id": 1}])
        self.assertFalse(r["isError"], r)
        self.assertTrue(r["_meta"]["sbx/trace"].startswith(store + "/"), r["_meta"])
        recs = [e["record"] for e in ledger_lines(store)]
        self.assertEqual(len(recs), 1, recs)
        self.assertTrue(recs[0]["pool"]["hit"], recs[0]["pool"])
        self.assertEqual(recs[0]["tenant"]["name"], "T")
        self.wait_workers(s, 2)
        with open(os.path.join(tenants, "N.json"), "w") as f:
            json.dump({"id_slot": 9, "separate_ids": "preferred", "store": store}, f)
        r = self.pack_call(s, "tenant-pack", [{"id": 2}])
        text = r["content"][0]["text"]
        note("a tenant's store claimed after the build: " + text[:300])
        self.assertTrue(r["isError"], r)
        self.assertIn("tenant 'N'", text)
        self.assertEqual(len(ledger_lines(store)), 1)  # nothing ran in the pooled sandbox

    def test_a_pack_whose_builds_fail_is_not_rebuilt_at_every_call(self):
        """A pack whose every build fails (its context is gone) would cost a whole pool of builds per
        call; after a failed build its pool waits (1 s, doubling) before it builds again, and its
        calls run cold meanwhile, each answered."""
        d = self.make_pack("gone-context")
        ctx = self.context_file("ctx-one")
        s = self.server(["--pool", "2", "--max-concurrent", "1", "--packs", d, "--context", f"gone-context/data={ctx}"])
        self.wait_workers(s, 4)
        os.unlink(ctx)
        for _ in range(3):
            # The two sandboxes built before serve two calls (cold: the context is gone at hand-out);
            # their replacements' builds fail meanwhile, and the third call finds them failed.
            r = self.pack_call(s, "gone-context", [{"id": 1}])
            self.assertTrue(r["isError"], r)  # the cold run: the context is gone
            self.assertIn("context data", r["content"][0]["text"])
            time.sleep(scaled(0.6))
        # run_code's two, and no pack sandbox rebuilt while its pool backs off (each one's build
        # would copy the pack and fail again).
        workers = pooled_workers(s.p.pid)
        self.assertEqual(len(workers), 2, [cmdline(w) for w in workers])
        self.assertIn("could not be built", s.stderr())
