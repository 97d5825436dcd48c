"""Tests of the Python client against the real sbx binary ($SBX, default build/sbx).

Run by ctest ("python_client") in `make test`; by hand:
    SBX=build/sbx python3 -m unittest discover -s clients/python/tests -v
"""
import json
import os
import shutil
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(HERE, ".."))

from sbx_client import ContractError, ExecResult, PackResult, RunFailed, Sbx, SbxError  # noqa: E402

SBX = os.path.abspath(os.environ.get("SBX", os.path.join(ROOT, "build", "sbx")))
PACK = os.path.join(ROOT, "examples", "packs", "tolerance-check")


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.state = tempfile.mkdtemp(prefix="sbx-client-test-")
        os.chmod(cls.state, 0o755)
        cls.sbx = Sbx(SBX, state_dir=cls.state, timeout=120)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.state, ignore_errors=True)

    def test_exec_returns_a_typed_result(self):
        r = self.sbx.exec(
            code="import json\nv = json.load(open('/in/input.json'))\nprint(sum(x['v'] for x in v))\n"
                 "json.dump({'total': sum(x['v'] for x in v)}, open('/out/result.json', 'w'))\n",
            inputs=[{"v": 1}, {"v": 41}], limits={"timeout": "10s"},
            output_schema={"type": "object", "required": ["total"], "properties": {"total": {"type": "integer"}}})
        self.assertIsInstance(r, ExecResult)
        self.assertTrue(r.ok, r)
        self.assertEqual(r.exit_code, 0)
        self.assertEqual(r.stdout, "42\n")
        self.assertEqual(r.result, {"total": 42})
        self.assertRegex(r.run_id, r"^\d{8}T")
        self.assertGreaterEqual(r.usage.wall_ms, 0)
        self.assertTrue(os.path.exists(r.trace_path), "the trace path names the stored record")

    def test_the_programs_failure_is_a_status_not_an_exception(self):
        r = self.sbx.exec(code="import sys; print('oops', file=sys.stderr); sys.exit(3)")
        self.assertFalse(r.ok)
        self.assertEqual(r.exit_code, 3)
        self.assertEqual(r.stderr, "oops\n")
        with self.assertRaises(RunFailed) as cm:
            r.raise_for_status()
        self.assertIs(cm.exception.result, r)
        t = self.sbx.exec(code="import time; time.sleep(30)", limits={"timeout": "300ms"})
        self.assertEqual(t.status, "timeout")

    def test_a_result_that_breaks_the_schema_raises_with_sbxs_message(self):
        with self.assertRaises(ContractError) as cm:
            self.sbx.exec(code="import json; json.dump({'total': 'many'}, open('/out/result.json', 'w'))",
                          output_schema={"type": "object", "properties": {"total": {"type": "integer"}}})
        self.assertEqual(cm.exception.result.status, "output_invalid")
        self.assertIn("total", cm.exception.message)

    def test_a_request_sbx_refuses_raises_sbx_error(self):
        with self.assertRaises(SbxError) as cm:
            self.sbx.exec(code="print(1)", limits={"timeout": "100h"})  # above the profile's ceiling
        self.assertEqual(cm.exception.exit_status, 125)
        self.assertIn("timeout", cm.exception.message)
        with self.assertRaises(SbxError):
            Sbx("/nonexistent/sbx").exec(code="print(1)")

    def test_exec_runs_under_the_clients_profile_and_allowed_hosts(self):
        # The profile was once passed to run_pack only: exec ran under `untrusted` whatever the client said.
        prof = os.path.join(self.state, "short.json")
        with open(prof, "w") as f:
            f.write('{"limits": {"timeout": "2s"}}')
        for client, kwargs in ((Sbx(SBX, state_dir=self.state, profile=prof, timeout=120), {}),
                               (self.sbx, {"profile": prof})):
            with self.assertRaises(SbxError) as cm:
                client.exec(code="print(1)", limits={"timeout": "5s"}, **kwargs)
            self.assertIn("whose limits.timeout is higher", cm.exception.message)
            self.assertEqual(client.exec(code="import time; time.sleep(5)", **kwargs).status, "timeout")
        with self.assertRaises(SbxError) as cm:  # the rule reaches sbx's own --allow-host check
            self.sbx.exec(code="print(1)", allow_hosts=["localhost:8080"])
        self.assertIn("--allow-host 'localhost:8080'", cm.exception.message)
        self.assertEqual(self.sbx.exec(code="print(1)", allow_hosts=["example.com"]).stdout, "1\n")

    def test_a_bare_number_for_a_duration_or_size_is_refused_in_exec_and_run_pack(self):
        # "timeout": 10 used to be 10 ms in a request and 10 s as run_pack's flag: now refused in both.
        with self.assertRaises(SbxError) as cm:
            self.sbx.exec(code="print(1)", limits={"timeout": 10})
        self.assertEqual(cm.exception.exit_status, 125)
        self.assertIn('/limits/timeout: a bare number is ambiguous; write a duration with its unit: "10s" or "10000ms"',
                      cm.exception.message)
        with self.assertRaises(SbxError) as cm:
            self.sbx.run_pack(PACK, [], limits={"memory": 256})
        self.assertIn('/limits/memory: a bare number is ambiguous; write a size with its unit: "256M"',
                      cm.exception.message)

    def test_run_pack(self):
        import json
        with open(os.path.join(PACK, "records.json")) as f:
            records = json.load(f)
        r = self.sbx.run_pack(PACK, records, contexts={"tolerances": os.path.join(PACK, "tolerances.json")})
        self.assertIsInstance(r, PackResult)
        self.assertTrue(r.ok, r.stderr)
        self.assertIn("features", r.result)
        self.assertEqual(r.trace["run_id"], r.run_id)
        with self.assertRaises(ContractError):
            self.sbx.run_pack(PACK, [{"not": "a record"}], contexts={"tolerances": os.path.join(PACK, "tolerances.json")})
        with self.assertRaises(SbxError) as cm:
            self.sbx.run_pack(os.path.join(ROOT, "nonexistent-pack"), [])
        self.assertEqual(cm.exception.exit_status, 125)

    def test_secrets_reach_the_pack_but_not_argv(self):
        pack = tempfile.mkdtemp(prefix="sbx-client-pack-")
        os.chmod(pack, 0o755)
        os.makedirs(os.path.join(pack, "schemas"))
        import json
        schema = {"type": "object"}
        for n in ("input", "output"):
            with open(os.path.join(pack, "schemas", n + ".json"), "w") as f:
                json.dump(schema, f)
        with open(os.path.join(pack, "pack.json"), "w") as f:
            json.dump({"name": "secret-echo", "version": "1.0.0", "description": "reports a secret's length",
                       "entrypoint": ["/bin/sh", "-c",
                                      "printf '{\"len\": %s}' $(wc -c < /run/secrets/token) > /out/result.json"],
                       "input_schema": "schemas/input.json", "output_schema": "schemas/output.json",
                       "secrets": [{"name": "token", "required": True}]}, f)
        for root, dirs, files in os.walk(pack):
            for n in dirs:
                os.chmod(os.path.join(root, n), 0o755)
            for n in files:
                os.chmod(os.path.join(root, n), 0o644)
        try:
            r = self.sbx.run_pack(pack, [{}], secrets={"token": "s3cret-value"})
            self.assertTrue(r.ok, r.stderr)
            self.assertEqual(r.result, {"len": 12})
            self.assertNotIn("s3cret-value", json.dumps(r.trace), "the record never holds the value")
        finally:
            shutil.rmtree(pack, ignore_errors=True)

def ledger_records(state):
    import glob
    import json
    out = []
    for path in sorted(glob.glob(os.path.join(state, "traces", "*.jsonl"))):
        with open(path) as f:
            out += [json.loads(line)["record"] for line in f if line.strip()]
    return out


def server_children(pid):
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rindex(b")") + 2:].split()[1]) == pid:
                kids.append(int(d))
    return kids


class PooledTest(unittest.TestCase):
    """pool=N: exec calls served by one long-lived `sbx mcp --pool N` (issue 34, item 1), with the
    same results and errors as `sbx exec`, each call still its own sandbox and record."""

    def setUp(self):
        self.state = tempfile.mkdtemp(prefix="sbx-client-pool-")
        os.chmod(self.state, 0o755)
        self.sbx = Sbx(SBX, state_dir=self.state, timeout=120, pool=2)
        self.addCleanup(shutil.rmtree, self.state, True)
        self.addCleanup(self.sbx.close)

    def test_calls_share_one_server_and_each_has_its_own_pooled_record(self):
        code = ("import json, os\nv = json.load(open('/in/input.json'))\nprint(sorted(os.listdir('/tmp')))\n"
                "open('/tmp/mine', 'w').write('x')\njson.dump({'total': sum(v)}, open('/out/result.json', 'w'))\n")
        servers, runs = set(), []
        for i in range(4):
            r = self.sbx.exec(code=code, inputs=[i, 40], limits={"timeout": "10s"},
                              output_schema={"type": "object", "required": ["total"]})
            self.assertTrue(r.ok, r)
            self.assertEqual(r.result, {"total": 40 + i})
            self.assertEqual(r.stdout, "[]\n", "a call sees nothing of the one before")
            servers.add(self.sbx._server.p.pid)
            runs.append(r.run_id)
        self.assertEqual(len(servers), 1, "one sbx mcp for every call")
        recs = {rec["run_id"]: rec for rec in ledger_records(self.state)}
        self.assertEqual(sorted(recs), sorted(runs), "each call its own record")
        hits = [recs[r]["pool"]["hit"] for r in runs]
        self.assertTrue(all(hits[1:]), hits)  # the first may come before the pool is built

    def test_errors_are_the_same_as_one_shot_exec(self):
        with self.assertRaises(SbxError) as cm:
            self.sbx.exec(code="print(1)", limits={"timeout": "100h"})
        self.assertEqual(cm.exception.exit_status, 125)
        self.assertIn("timeout", cm.exception.message)
        with self.assertRaises(SbxError) as cm:
            self.sbx.exec(code="print(1)", limits={"timeout": 10})
        self.assertIn("a bare number is ambiguous", cm.exception.message)
        with self.assertRaises(ContractError) as cm:
            self.sbx.exec(code="import json; json.dump({'total': 'many'}, open('/out/result.json', 'w'))",
                          output_schema={"type": "object", "properties": {"total": {"type": "integer"}}})
        self.assertEqual(cm.exception.result.status, "output_invalid")
        r = self.sbx.exec(code="import sys; print('oops', file=sys.stderr); sys.exit(3)")
        self.assertEqual((r.status, r.exit_code, r.stderr), ("exit_nonzero", 3, "oops\n"))
        self.assertEqual(self.sbx.exec(code="import time; time.sleep(30)", limits={"timeout": "300ms"}).status,
                         "timeout")

    def test_a_dead_server_is_replaced_and_close_ends_it_with_its_sandboxes(self):
        import signal
        self.assertEqual(self.sbx.exec(code="print(1)").stdout, "1\n")
        first = self.sbx._server.p.pid
        os.kill(first, signal.SIGKILL)
        self.sbx._server.p.wait()
        self.assertEqual(self.sbx.exec(code="print(2)").stdout, "2\n")
        second = self.sbx._server.p.pid
        self.assertNotEqual(first, second)
        self.assertTrue(server_children(second), "the pool's sandboxes are the server's children")
        self.sbx.close()
        self.assertIsNone(self.sbx._server)
        self.assertFalse(os.path.exists(f"/proc/{second}"), "close() waited for the server")
        self.assertEqual(server_children(second), [])

    def test_a_call_with_its_own_hosts_runs_one_shot(self):
        r = self.sbx.exec(code="print(1)", allow_hosts=["example.com"])
        self.assertEqual(r.stdout, "1\n")
        self.assertIsNone(self.sbx._server, "no server started for it")
        self.assertNotIn("pool", ledger_records(self.state)[-1])


FAKE_SERVER = r"""#!/usr/bin/env python3
import json, sys, time
mode = open(sys.argv[0] + ".mode").read().strip()
if mode == "dies":
    print("sbx: mcp: cannot open the state dir: the cause", file=sys.stderr, flush=True)
    sys.exit(2)
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        out = {"jsonrpc": "2.0", "id": msg["id"], "result": {"protocolVersion": "2025-11-25", "capabilities": {}}}
    elif mode == "stalls":
        sys.stdout.write('{"jsonrpc": "2.0", "id": ' + str(msg["id"]) + ', "resu'); sys.stdout.flush(); time.sleep(600)
    elif mode == "nonsense":
        out = {"jsonrpc": "2.0", "id": msg["id"], "result": ["not", "an", "object"]}
    print(json.dumps(out), flush=True)
"""


class WarmPooledTest(unittest.TestCase):
    """pool=N under a profile with a warm key (man sbx-mcp, Prepared interpreters): the client's
    calls run in interpreters that imported the profile's modules before the call."""

    def test_calls_run_in_prepared_interpreters(self):
        state = tempfile.mkdtemp(prefix="sbx-client-warm-")
        os.chmod(state, 0o755)
        self.addCleanup(shutil.rmtree, state, True)
        profile = os.path.join(state, "warm.json")
        with open(profile, "w") as f:
            json.dump({"extends": "untrusted", "warm": {"interpreter": "python3", "preload": ["decimal"]}}, f)
        os.chmod(profile, 0o644)
        outs = []
        with Sbx(SBX, state_dir=state, timeout=120, pool=2, profile=profile) as sbx:
            for _ in range(3):
                outs.append(sbx.exec(code="import sys\nprint('decimal' in sys.modules, __name__)"))
                time.sleep(0.5)  # the pool refills: a call with no prepared sandbox ready runs cold
        recs = {rec["run_id"]: rec for rec in ledger_records(state)}
        pools = [recs[r.run_id]["pool"] for r in outs]
        for r, pool in zip(outs, pools):
            self.assertEqual(r.stdout, "True __main__\n" if pool["hit"] else "False __main__\n", pools)
            if pool["hit"]:
                self.assertEqual(pool["warm"]["preload"], ["decimal"], pool)
        self.assertGreaterEqual(sum(p["hit"] for p in pools), 2, pools)


class PooledHostileServerTest(unittest.TestCase):
    """What the pooled mode does with a server that fails or answers nonsense: SbxError with the
    cause, within the client's timeout and the server's end, never a raw exception or a hang."""

    def fake(self, mode):
        d = tempfile.mkdtemp(prefix="sbx-client-fake-")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "sbx")
        with open(path, "w") as f:
            f.write(FAKE_SERVER)
        with open(path + ".mode", "w") as f:
            f.write(mode)
        os.chmod(path, 0o755)
        sbx = Sbx(path, pool=1, timeout=1)
        self.addCleanup(sbx.close)
        return sbx

    def test_a_server_that_dies_says_why(self):
        with self.assertRaises(SbxError) as cm:
            self.fake("dies").exec(code="print(1)")
        self.assertIn("exited (2)", cm.exception.message)
        self.assertIn("the cause", cm.exception.message, "the server's stderr is in the message")

    def test_a_server_that_stalls_mid_line_is_ended_after_the_timeout(self):
        import time
        sbx = self.fake("stalls")
        t = time.monotonic()
        with self.assertRaises(SbxError) as cm:
            sbx.exec(code="print(1)")
        self.assertIn("did not answer within the client's timeout", cm.exception.message)
        self.assertLess(time.monotonic() - t, 10, "1 s timeout, then end of input, SIGTERM after 2 s")
        self.assertIsNone(sbx._server)

    def test_an_answer_of_the_wrong_shape_is_an_sbx_error(self):
        with self.assertRaises(SbxError) as cm:
            self.fake("nonsense").exec(code="print(1)")
        self.assertIn("run_code failed", cm.exception.message)


class ReadmeTest(unittest.TestCase):
    """Every ```python block of clients/python/README.md runs as written from the repository root
    (only the binary is the one under test), so that the README's snippets cannot rot."""

    def test_readme_snippets_run_as_written(self):
        import re
        import subprocess
        with open(os.path.join(HERE, "..", "README.md")) as f:
            blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
        self.assertTrue(blocks, "no python block in clients/python/README.md")
        with tempfile.TemporaryDirectory(prefix="sbx-client-readme-") as state:
            os.chmod(state, 0o755)
            env = dict(os.environ, SBX_STATE_DIR=state)
            for code in blocks:
                code = code.replace('Sbx("build/sbx"', "Sbx(%r" % SBX)
                p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                                   timeout=120)
                self.assertEqual(p.returncode, 0, "README snippet failed:\n%s\n%s" % (code, p.stderr))


if __name__ == "__main__":
    unittest.main()
