"""sbx mcp --listen (runtime/server/mcp_http.cpp): MCP over Streamable HTTP with bearer tokens that
name tenants. A request without a token, or with a wrong one, is refused and runs nothing; a
session is usable only with the token that made it; a tenant's calls are recorded in its own
store; every refusal is an HTTP status with a JSON-RPC error body; the server's bounds
(connections, body and header sizes, a tenant's calls at once) hold; SIGTERM ends running calls
with their records; /healthz, /readyz and /metrics answer."""
import hashlib
import http.client
import json
import os
import select
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import unittest
import urllib.parse
import urllib.request

from sbxtest import MODE, SBX, SbxTestCase, find_program, ledger_lines, sbx, scaled, sleep_marker, wait_for

ROOT = MODE == "root"
TOKEN_A = "token-of-tenant-a-" + "x" * 20
TOKEN_B = "token-of-tenant-b-" + "y" * 20


class Server:
    """One `sbx mcp --listen 127.0.0.1:0` with its stderr in a file (its port is read from there)."""

    def __init__(self, tc, args, env):
        self.tc = tc
        self.log = tc.path(f"server-{time.monotonic_ns()}.log")
        self.errf = open(self.log, "w")
        self.p = subprocess.Popen([SBX, "mcp", "--listen", "127.0.0.1:0", "--pool", "0"] + list(args),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.errf, env=env)
        self.port = None
        ok = wait_for(lambda: self.p.poll() is not None or self._port(), scaled(20))
        if not (ok and self.port):
            self.p.kill()
            self.p.wait()
            tc.fail(f"the server did not listen: {self.stderr()}")

    def _port(self):
        for line in self.stderr().splitlines():
            if "://127.0.0.1:" in line and "listening on" in line:
                self.port = int(line.split("127.0.0.1:")[1].split("/")[0])
                return True
        return False

    def stderr(self):
        with open(self.log) as f:
            return f.read()

    def request(self, method, path, body=None, headers=None, timeout=60):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=scaled(timeout))
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        h.update(headers or {})
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        raw = r.read()
        c.close()
        return r.status, dict(r.getheaders()), raw

    def rpc(self, token, msg, session=None, timeout=60, headers=None):
        h = dict(headers or {})
        if token:
            h["Authorization"] = "Bearer " + token
        if session:
            h["Mcp-Session-Id"] = session
        status, hdrs, raw = self.request("POST", "/mcp", msg, h, timeout)
        return status, hdrs, (json.loads(raw) if raw else None)

    def initialize(self, token):
        status, hdrs, body = self.rpc(token, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}})
        self.tc.assertEqual(status, 200, body)
        sid = hdrs.get("Mcp-Session-Id")
        self.tc.assertRegex(sid or "", r"^[0-9a-f]{32}$")
        self.tc.assertEqual(self.rpc(token, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)[0], 202)
        return sid

    def call(self, token, sid, code, language="sh", id=2, timeout=60):
        return self.rpc(token, {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "run_code", "arguments": {"language": language, "code": code}}}, sid, timeout)

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            return self.p.wait(timeout=scaled(timeout))
        finally:
            self.errf.close()


class McpHttpCase(SbxTestCase):
    def setUp(self):
        super().setUp()
        self.tenants = self.path("tenants")
        os.mkdir(self.tenants)
        ids = "required" if ROOT else "preferred"
        for name, slot in (("A", 1), ("B", 2)):
            with open(os.path.join(self.tenants, name + ".json"), "w") as f:
                json.dump({"id_slot": slot, "separate_ids": ids, "limits": {"timeout": "60s"}}, f)
        self.tokens = self.path("tokens.json")
        with open(self.tokens, "w") as f:
            json.dump({"tokens": [{"sha256": hashlib.sha256(TOKEN_A.encode()).hexdigest(), "tenant": "A"},
                                  {"sha256": hashlib.sha256(TOKEN_B.encode()).hexdigest().upper(), "tenant": "B"}]}, f)
        # A state dir of each test's own: the server's children inherit it from the environment.
        self.state = self.path("state")
        os.mkdir(self.state, 0o700)
        self.env = dict(os.environ, SBX_TENANTS_DIR=self.tenants, SBX_STATE_DIR=self.state)
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            if s.p.poll() is None:
                s.stop(signal.SIGKILL)
        super().tearDown()

    def server(self, *args):
        s = Server(self, ["--tokens", self.tokens] + list(args), self.env)
        self.servers.append(s)
        return s

    def records(self, tenant):
        return [l["record"] for l in ledger_lines(os.path.join(self.state, "tenants", tenant))
                if l["record"].get("schema") == "sbx.trace/v1"]

    def assertRpcError(self, status, body, want_status):
        self.assertEqual(status, want_status, body)
        self.assertEqual(body.get("jsonrpc"), "2.0", body)
        self.assertIn("message", body.get("error", {}), body)



class McpHttp(McpHttpCase):
    def test_no_token_or_a_wrong_one_is_401_and_nothing_runs(self):
        s = self.server()
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "run_code", "arguments": {"language": "sh", "code": "touch /tmp/x"}}}
        for token in (None, "wrong", TOKEN_A + "x", TOKEN_A[:-1], "Basic " + TOKEN_A):
            status, hdrs, body = s.rpc(token, call)
            self.assertRpcError(status, body, 401)
            self.assertEqual(hdrs.get("WWW-Authenticate"), "Bearer")
        status, _, body = s.rpc(None, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
        self.assertRpcError(status, body, 401)
        self.assertNotIn("session server", s.stderr())
        self.assertNotIn("serving run_code on stdio", s.stderr(), "a session's server was started for no token")
        self.assertEqual(self.records("A") + self.records("B"), [])
        self.assertEqual(s.stop(), 0)

    def test_a_tenant_s_session_is_its_token_s_own_and_its_records_its_store_s(self):
        s = self.server()
        sid = s.initialize(TOKEN_A)
        status, _, body = s.call(TOKEN_A, sid, "echo hello; id -u")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["id"], 2)
        self.assertFalse(body["result"].get("isError"), body)
        self.assertIn("hello", body["result"]["structuredContent"]["stdout"])
        run_id = body["result"]["_meta"]["sbx/run_id"]
        self.assertEqual([r["run_id"] for r in self.records("A")], [run_id])
        self.assertEqual(self.records("A")[0]["tenant"]["name"], "A")
        self.assertEqual(self.records("B"), [])
        # Tenant B's token does not reach A's session: not found, as an id nobody made.
        status, _, body = s.call(TOKEN_B, sid, "echo from-b")
        self.assertRpcError(status, body, 404)
        status, _, _ = s.request("DELETE", "/mcp", headers={"Authorization": "Bearer " + TOKEN_B, "Mcp-Session-Id": sid})
        self.assertEqual(status, 404)
        self.assertRpcError(*s.call(TOKEN_A, "0" * 32, "true")[::2], 404)
        self.assertEqual(len(self.records("A")), 1)
        # B's own session runs as B.
        sid_b = s.initialize(TOKEN_B)
        self.assertNotEqual(sid_b, sid)
        status, _, body = s.call(TOKEN_B, sid_b, "echo b")
        self.assertEqual(status, 200, body)
        self.assertEqual(self.records("B")[0]["tenant"]["name"], "B")
        # DELETE ends A's session; its id is unknown from then on, while its server still winds down.
        status, _, _ = s.request("DELETE", "/mcp", headers={"Authorization": "Bearer " + TOKEN_A, "Mcp-Session-Id": sid})
        self.assertEqual(status, 200)
        self.assertEqual(s.call(TOKEN_A, sid, "true")[0], 404)
        self.assertEqual(s.stop(), 0)
        self.assertEqual(sbx(["trace", "verify", "--tenant", "A"], env=self.env).rc, 0)

    def test_modern_requests_need_no_session_and_run_as_their_token_s_tenant(self):
        s = self.server("--max-sessions", "2")
        meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}
        for token, tenant in ((TOKEN_A, "A"), (TOKEN_B, "B")):
            status, hdrs, body = s.rpc(token, {"jsonrpc": "2.0", "id": "d", "method": "server/discover",
                                               "params": {"_meta": meta}})
            self.assertEqual(status, 200, body)
            self.assertNotIn("Mcp-Session-Id", hdrs)
            self.assertIn("2026-07-28", body["result"]["supportedVersions"])
            status, _, body = s.rpc(token, {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
                "name": "run_code", "arguments": {"language": "sh", "code": "echo modern"}, "_meta": meta}})
            self.assertEqual(status, 200, body)
            self.assertEqual(body["id"], 7)
            self.assertEqual(body["result"]["structuredContent"]["stdout"], "modern\n")
            self.assertEqual(len(self.records(tenant)), 1)
        # Each token's stateless server counts against --max-sessions: a session now is one too many.
        status, _, body = s.rpc(TOKEN_A, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        self.assertRpcError(status, body, 429)
        self.assertEqual(s.stop(), 0)

    def test_a_body_of_many_small_values_is_refused_before_it_is_a_tree(self):
        # Within --max-body, but past the stdio server's 262,144 values (mcp_protocol.hpp): the
        # general 4M let a 14 MB body of "[{"":0},...]" be a ~300 MB tree held until answered.
        s = self.server()
        sid = s.initialize(TOKEN_A)
        auth = {"Authorization": "Bearer " + TOKEN_A, "Mcp-Session-Id": sid}
        body = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                "params": {"name": "run_code", "arguments": {"language": "sh", "code": "true", "inputs": [0] * 300000}}}
        status, _, raw = s.request("POST", "/mcp", body, auth)
        self.assertEqual(status, 400, raw)
        self.assertEqual(json.loads(raw)["error"]["code"], -32700, raw)
        status, _, body = s.rpc(TOKEN_A, {"jsonrpc": "2.0", "id": 4, "method": "ping"}, sid)
        self.assertEqual(status, 200, body)
        self.assertEqual(s.stop(), 0)

    def test_every_refusal_is_an_http_status_with_a_json_rpc_error(self):
        s = self.server("--max-body", "65536")
        sid = s.initialize(TOKEN_A)
        auth = {"Authorization": "Bearer " + TOKEN_A, "Mcp-Session-Id": sid}
        big = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
               "params": {"name": "run_code", "arguments": {"language": "sh", "code": "#" * 70000}}}
        cases = [
            ("body over --max-body", "POST", "/mcp", big, auth, 413),
            ("a batch", "POST", "/mcp", [{"jsonrpc": "2.0", "id": 4, "method": "ping"}], auth, 400),
            ("not JSON", "POST", "/mcp", "{nope", auth, 400),
            ("not JSON-RPC", "POST", "/mcp", {"id": 5}, auth, 400),
            ("another content type", "POST", "/mcp", "x", dict(auth, **{"Content-Type": "text/plain"}), 415),
            ("a foreign Origin", "POST", "/mcp", {"jsonrpc": "2.0", "id": 6, "method": "ping"},
             dict(auth, Origin="http://evil.example"), 403),
            ("an unknown protocol version", "POST", "/mcp", {"jsonrpc": "2.0", "id": 7, "method": "ping"},
             dict(auth, **{"MCP-Protocol-Version": "1999-01-01"}), 400),
            ("no session id", "POST", "/mcp", {"jsonrpc": "2.0", "id": 8, "method": "tools/list"},
             {"Authorization": "Bearer " + TOKEN_A}, 400),
            ("GET (no server stream)", "GET", "/mcp", None, auth, 405),
            ("PUT", "PUT", "/mcp", None, auth, 405),
            ("another path", "POST", "/other", None, auth, 404),
        ]
        for what, method, path, body, headers, want in cases:
            with self.subTest(what):
                status, hdrs, raw = s.request(method, path, body, headers)
                self.assertEqual(status, want, raw)
                doc = json.loads(raw)
                self.assertEqual(doc["jsonrpc"], "2.0")
                self.assertIn("code", doc["error"])
        # Headers over 16 KiB: 431, the connection closed.
        status, _, raw = s.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 9, "method": "ping"},
                                   dict(auth, **{"X-Pad": "p" * 20000}))
        self.assertEqual(status, 431, raw)
        # The loopback Origin of a local tool passes; so does the server's own.
        status, _, body = s.rpc(TOKEN_A, {"jsonrpc": "2.0", "id": 10, "method": "ping"}, sid,
                                headers={"Origin": "http://localhost:3000"})
        self.assertEqual(status, 200, body)
        # The session survived every refusal.
        self.assertEqual(s.call(TOKEN_A, sid, "echo still")[0], 200)
        self.assertEqual(len(self.records("A")), 1, "a refused request ran something")
        self.assertEqual(s.stop(), 0)

    def sse_call(self, s, sid, code, token="p1", id=40):
        """A tools/call that asks for progress on a connection that takes text/event-stream."""
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=scaled(60))
        c.request("POST", "/mcp", body=json.dumps({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "run_code", "arguments": {"language": "sh", "code": code}, "_meta": {"progressToken": token}}}),
            headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                     "Authorization": "Bearer " + TOKEN_A, "Mcp-Session-Id": sid})
        return c

    def test_progress_streams_as_events_and_a_client_that_stops_reading_cancels_its_call(self):
        s = self.server()
        sid = s.initialize(TOKEN_A)
        c = self.sse_call(s, sid, "sleep 2.2; echo done")
        r = c.getresponse()
        self.assertEqual(r.getheader("Content-Type"), "text/event-stream")
        events = [json.loads(l[len("data: "):]) for l in r.read().decode().splitlines() if l.startswith("data: ")]
        c.close()
        progress = [e for e in events if e.get("method") == "notifications/progress"]
        self.assertGreaterEqual(len(progress), 1, events)
        self.assertTrue(all(e["params"]["progressToken"] == "p1" for e in progress), progress)
        self.assertEqual(events[-1]["id"], 40)
        self.assertIn("done", events[-1]["result"]["structuredContent"]["stdout"])
        # A client that goes away mid-stream: the next event's write fails, and its call is cancelled.
        marker = sleep_marker()
        c = self.sse_call(s, sid, f"sleep {marker}", id=41)
        self.assertTrue(wait_for(lambda: find_program(marker), scaled(10)), s.stderr())
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()
        self.assertTrue(wait_for(lambda: not find_program(marker), scaled(20)), "the call of a client that left still runs")
        self.assertTrue(wait_for(lambda: len(self.records("A")) == 2, scaled(10)))
        self.assertIn(self.records("A")[-1]["result"]["status"], ("signaled", "setup_error"))
        self.assertEqual(s.call(TOKEN_A, sid, "echo after")[0], 200)
        self.assertEqual(s.stop(), 0)

    def test_connections_past_the_maximum_get_503_and_slots_come_back(self):
        # Two connections busy with a call each: nothing to make room with, so a third gets 503.
        s = self.server("--max-connections", "2")
        sid = s.initialize(TOKEN_A)
        marker = sleep_marker(3)
        answers = []
        calls = [threading.Thread(target=lambda i=i: answers.append(s.call(TOKEN_A, sid, f"sleep {marker}", id=60 + i)))
                 for i in range(2)]
        for t in calls:
            t.start()
        self.assertTrue(wait_for(lambda: len(find_program(marker)) == 2, scaled(10)), s.stderr())
        status, _, raw = s.request("GET", "/healthz")
        self.assertEqual(status, 503, raw)
        self.assertEqual(json.loads(raw)["error"]["code"], -32000)
        for t in calls:
            t.join(scaled(30))
        self.assertEqual([a[0] for a in answers], [200, 200])
        self.assertTrue(wait_for(lambda: s.request("GET", "/healthz")[0] == 200, scaled(5)))
        self.assertEqual(s.stop(), 0)

    def test_idle_connections_cannot_lock_clients_out(self):
        # At the bound, a newcomer takes the place of the connection that waited longest for its
        # next request, one that never sent a token first: sockets that connect and say nothing,
        # or ask /healthz once and keep the connection, lock nobody out.
        s = self.server("--max-connections", "4")
        silent = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(4)]
        time.sleep(0.3)
        sid = s.initialize(TOKEN_A)  # its connection takes a silent one's place
        kept = []
        for _ in range(4):
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=scaled(10))
            c.request("GET", "/healthz")
            r = c.getresponse()
            self.assertEqual(r.status, 200)
            r.read()
            kept.append(c)
        self.assertEqual(s.call(TOKEN_A, sid, "echo served")[0], 200)
        # A connection that never sent a valid token is closed 5 s after its last answer, not 60.
        c = socket.create_connection(("127.0.0.1", s.port))
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        c.settimeout(scaled(10))
        self.assertTrue(c.recv(4096).startswith(b"HTTP/1.1 200"))
        t0 = time.monotonic()
        self.assertEqual(c.recv(4096), b"", "the server kept an unauthenticated idle connection")
        self.assertLess(time.monotonic() - t0, scaled(8))
        c.close()
        _, _, raw = s.request("GET", "/metrics")
        self.assertIn('sbx_http_refusals_total{reason="idle_evicted"}', raw.decode())
        self.assertNotIn('sbx_http_refusals_total{reason="connections"}', raw.decode())
        for c in silent + [k.sock for k in kept if k.sock]:
            c.close()
        self.assertEqual(s.stop(), 0)

    def test_a_tenant_s_calls_at_once_are_bounded_429_past_it(self):
        s = self.server("--max-calls-per-tenant", "1")
        sid = s.initialize(TOKEN_A)
        first = {}
        t = threading.Thread(target=lambda: first.update(r=s.call(TOKEN_A, sid, "sleep 3; echo slept", id=20)))
        t.start()
        self.assertTrue(wait_for(lambda: "call 20" in s.stderr() or "started worker" in s.stderr(), scaled(10)))
        status, _, body = s.call(TOKEN_A, sid, "echo second", id=21)
        self.assertRpcError(status, body, 429)
        self.assertEqual(body["id"], 21)
        # Another tenant is not held up by A's calls.
        sid_b = s.initialize(TOKEN_B)
        self.assertEqual(s.call(TOKEN_B, sid_b, "echo b")[0], 200)
        t.join(scaled(30))
        self.assertEqual(first["r"][0], 200)
        self.assertIn("slept", first["r"][2]["result"]["structuredContent"]["stdout"])
        self.assertEqual(s.stop(), 0)

    def test_sigterm_ends_running_calls_with_their_records_and_leaves_no_process(self):
        s = self.server()
        sid = s.initialize(TOKEN_A)
        answer = {}
        marker = sleep_marker()  # unique: a sanitizer pass runs the root and rootless suites side by side
        t = threading.Thread(target=lambda: answer.update(r=s.call(TOKEN_A, sid, f"sleep {marker}", id=30, timeout=90)))
        t.start()
        self.assertTrue(wait_for(lambda: "started worker" in s.stderr(), scaled(10)))
        time.sleep(0.5)
        t0 = time.monotonic()
        self.assertEqual(s.stop(), 0, s.stderr())
        self.assertLess(time.monotonic() - t0, scaled(30))
        t.join(scaled(10))
        recs = self.records("A")
        self.assertEqual(len(recs), 1, s.stderr())
        self.assertIn(recs[0]["result"]["status"], ("signaled", "setup_error"), recs[0]["result"])
        self.assertEqual(find_program(marker), {})

    def test_health_readiness_and_metrics(self):
        s = self.server()
        self.assertEqual(s.request("GET", "/healthz")[0], 200)
        # Ready once a throwaway sandbox was built with the server's profile, in its state dir,
        # where that run is recorded like any other.
        self.assertTrue(wait_for(lambda: s.request("GET", "/readyz")[0] == 200, scaled(30)), s.stderr())
        self.assertIn("readiness check: a throwaway sandbox ran: ready", s.stderr())
        checks = [l["record"] for l in ledger_lines(self.state) if l["record"].get("schema") == "sbx.trace/v1"]
        self.assertEqual([(r["invocation"]["spec"]["argv"], r["result"]["status"]) for r in checks], [(["/bin/true"], "ok")])
        sid = s.initialize(TOKEN_A)
        s.call(TOKEN_A, sid, "echo m")
        s.call(TOKEN_A, sid, "exit 3", id=3)
        # A limit event: a call its own 1 s timeout ends.
        s.rpc(TOKEN_A, {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "run_code", "arguments": {
            "language": "sh", "code": "sleep 30", "limits": {"timeout": "1s"}}}}, sid)
        s.rpc(None, {"jsonrpc": "2.0", "id": 1, "method": "ping"})
        status, hdrs, raw = s.request("GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertTrue(hdrs["Content-Type"].startswith("text/plain; version=0.0.4"))
        text = raw.decode()
        self.assertIn('sbx_mcp_calls_total{tool="run_code",tenant="A",outcome="ok"} 1', text)
        self.assertIn('sbx_mcp_calls_total{tool="run_code",tenant="A",outcome="tool_error"} 2', text)
        self.assertIn('sbx_mcp_call_seconds_count{tool="run_code",tenant="A"} 3', text)
        # From each call's record, through its result's _meta: every call recorded, each sandbox
        # made cold (no --pool), the timeout a limit event; nothing refused, no store error.
        records = len(self.records("A"))
        self.assertEqual(records, 3)
        self.assertIn(f'sbx_mcp_records_written_total{{tenant="A"}} {records}', text)
        self.assertIn('sbx_mcp_sandboxes_total{made_by="cold"} 3', text)
        self.assertIn('sbx_mcp_limit_events_total{tenant="A",status="timeout"} 1', text)
        self.assertNotIn("sbx_mcp_violations_total{", text)
        self.assertIn("sbx_mcp_store_errors_total 0", text)
        self.assertIn('sbx_http_refusals_total{reason="unauthorized"} 1', text)
        self.assertIn("sbx_mcp_sessions 1", text)
        self.assertIn('sbx_mcp_session_start_seconds_bucket{le="+Inf"} 1', text)
        self.assertEqual(s.stop(), 0)

    def test_not_ready_while_no_sandbox_can_be_built_with_its_profile(self):
        # A profile whose image is not in the store: every call would fail, so the server is never
        # ready (a load balancer keeps it out of rotation), and /readyz says why.
        profiles = self.path("profiles")
        os.mkdir(profiles)
        with open(os.path.join(profiles, "broken.json"), "w") as f:
            json.dump({"extends": "untrusted", "image": "no-such-image:1"}, f)
        self.env["SBX_PROFILE_PATH"] = profiles
        s = self.server("--profile", "broken")
        self.assertTrue(wait_for(lambda: "readiness check:" in s.stderr(), scaled(30)), s.stderr())
        status, _, body = s.request("GET", "/readyz")
        self.assertEqual(status, 503, body)
        self.assertIn(b"a sandbox cannot be built here", body)
        self.assertIn(b"no image named no-such-image:1", body)
        self.assertEqual(s.request("GET", "/healthz")[0], 200)  # alive: restarting would not help
        self.assertIn("(again in 5 s)", s.stderr())
        # The check is tried again: once the profile is fixed, the server becomes ready.
        with open(os.path.join(profiles, "broken.json"), "w") as f:
            json.dump({"extends": "untrusted"}, f)
        self.assertTrue(wait_for(lambda: s.request("GET", "/readyz")[0] == 200, scaled(30)), s.stderr())
        self.assertEqual(s.stop(), 0)

    def test_not_ready_while_a_token_s_tenant_could_not_run(self):
        # Every check of a run (--dry-run) for each token's tenant: here one allows no image the
        # server's profile runs, so each of its calls would fail.
        with open(os.path.join(self.tenants, "C.json"), "w") as f:
            json.dump({"id_slot": 3, "separate_ids": "preferred", "images": ["sha256:" + "0" * 64]}, f)
        tokens = self.path("tokens-c.json")
        with open(tokens, "w") as f:
            json.dump({"tokens": [{"sha256": hashlib.sha256(TOKEN_A.encode()).hexdigest(), "tenant": "A"},
                                  {"sha256": hashlib.sha256(TOKEN_B.encode()).hexdigest(), "tenant": "C"}]}, f)
        s = Server(self, ["--tokens", tokens], self.env)
        self.servers.append(s)
        self.assertTrue(wait_for(lambda: "readiness check:" in s.stderr(), scaled(30)), s.stderr())
        status, _, body = s.request("GET", "/readyz")
        self.assertEqual(status, 503, body)
        self.assertIn(b"tenant C: a run would fail: tenant 'C': image 'host'", body)
        self.assertEqual(s.stop(), 0)

    @unittest.skipUnless(shutil.which("prometheus"), "Debian's prometheus package is needed (make deps-test installs it)")
    def test_a_real_prometheus_scrapes_the_metrics(self):
        s = self.server()
        sid = s.initialize(TOKEN_A)
        s.call(TOKEN_A, sid, "echo m")
        s.rpc("wrong", {"jsonrpc": "2.0", "id": 1, "method": "ping"})
        with socket.socket() as probe:  # a free port for Prometheus's own web API
            probe.bind(("127.0.0.1", 0))
            web = probe.getsockname()[1]
        conf = self.path("prometheus.yml")
        with open(conf, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"
                    f"  - job_name: sbx\n    static_configs:\n      - targets: ['127.0.0.1:{s.port}']\n")
        log = open(self.path("prometheus.log"), "w")
        prom = subprocess.Popen(["prometheus", f"--config.file={conf}", f"--storage.tsdb.path={self.path('tsdb')}",
                                 f"--web.listen-address=127.0.0.1:{web}"], stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL)

        def query(q):
            url = f"http://127.0.0.1:{web}/api/v1/query?" + urllib.parse.urlencode({"query": q})
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    return json.load(r)["data"]["result"]
            except (OSError, ValueError, KeyError):
                return []

        try:
            ok = wait_for(lambda: query('up{job="sbx"} == 1') and query("sbx_mcp_calls_total"), scaled(60), 0.5)
            with open(self.path("prometheus.log")) as f:
                self.assertTrue(ok, "Prometheus did not scrape sbx: " + f.read()[-3000:])
            calls = query('sbx_mcp_calls_total{tool="run_code",tenant="A",outcome="ok"}')
            self.assertEqual([c["value"][1] for c in calls], ["1"])
            self.assertEqual(query('sbx_http_refusals_total{reason="unauthorized"}')[0]["value"][1], "1")
            self.assertEqual(query('sbx_mcp_call_seconds_count{tool="run_code",tenant="A"}')[0]["value"][1], "1")
            # The histogram is one Prometheus can compute with.
            self.assertTrue(query('histogram_quantile(0.5, sbx_mcp_call_seconds_bucket)'))
        finally:
            prom.terminate()
            prom.wait(scaled(20))
            log.close()
        self.assertEqual(s.stop(), 0)

    def test_tls_with_a_certificate_and_nothing_older_than_1_2(self):
        cert, key = self.path("cert.pem"), self.path("key.pem")
        r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                            "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost",
                            "-addext", "subjectAltName=IP:127.0.0.1"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        s = Server(self, ["--tokens", self.tokens, "--tls-cert", cert, "--tls-key", key], self.env)
        self.servers.append(s)
        self.assertIn("listening on https://", s.stderr())
        ctx = ssl.create_default_context(cafile=cert)
        c = http.client.HTTPSConnection("127.0.0.1", s.port, context=ctx, timeout=scaled(60))
        body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        c.request("POST", "/mcp", json.dumps(body), {"Content-Type": "application/json", "Authorization": "Bearer " + TOKEN_A})
        r = c.getresponse()
        r.read()
        self.assertEqual(r.status, 200)
        sid = r.getheader("Mcp-Session-Id")
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "run_code", "arguments": {"language": "sh", "code": "echo over-tls"}}}
        c.request("POST", "/mcp", json.dumps(call), {"Content-Type": "application/json", "Authorization": "Bearer " + TOKEN_A,
                                                     "Mcp-Session-Id": sid})
        r = c.getresponse()
        self.assertIn("over-tls", json.loads(r.read())["result"]["structuredContent"]["stdout"])
        c.close()
        # Plain HTTP to the TLS port: no answer, and the server goes on.
        with self.assertRaises((http.client.HTTPException, OSError)):
            s.request("GET", "/healthz")
        # TLS 1.1 is refused.
        old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        old.load_verify_locations(cert)
        try:
            old.minimum_version = old.maximum_version = ssl.TLSVersion.TLSv1_1
        except (ValueError, ssl.SSLError):
            old = None
        if old is not None:
            with self.assertRaises(ssl.SSLError):
                with socket.create_connection(("127.0.0.1", s.port)) as raw, old.wrap_socket(raw, server_hostname="127.0.0.1"):
                    pass
        c = http.client.HTTPSConnection("127.0.0.1", s.port, context=ctx, timeout=scaled(10))
        c.request("GET", "/healthz")
        self.assertEqual(c.getresponse().status, 200)
        c.close()
        self.assertEqual(s.stop(), 0)
        for args, words in [(["--tls-cert", cert], "go together"), (["--tls-cert", self.path("none"), "--tls-key", key], "--tls-cert")]:
            r = sbx(["mcp", "--listen", "127.0.0.1:0", "--tokens", self.tokens] + args, env=self.env, timeout=20)
            self.assertEqual(r.rc, 125, r.describe())
            self.assertIn(words, r.err)

    def test_usage_errors_are_one_line_and_125(self):
        bad = self.path("bad.json")
        with open(bad, "w") as f:
            json.dump({"tokens": [{"sha256": "abc", "tenant": "A"}]}, f)
        unknown = self.path("unknown.json")
        with open(unknown, "w") as f:
            json.dump({"tokens": [{"sha256": "a" * 64, "tenant": "nosuch"}]}, f)
        for args, words in [
            (["--listen", "127.0.0.1:0"], "--tokens FILE"),
            (["--listen", "0.0.0.0:0", "--no-auth"], "loopback"),
            (["--listen", "127.0.0.1:0", "--tokens", bad], "/tokens/0/sha256"),
            (["--listen", "127.0.0.1:0", "--tokens", unknown], "tenant nosuch"),
            (["--listen", "127.0.0.1:0", "--tokens", self.tokens, "--tenant", "A"], "each token names its tenant"),
            (["--listen", "example.com:80", "--no-auth"], "not an IP address"),
        ]:
            with self.subTest(args=args):
                r = sbx(["mcp"] + args, env=self.env, timeout=20)
                self.assertEqual(r.rc, 125, r.describe())
                self.assertIn(words, r.err)
                self.assertEqual(len(r.err.strip().splitlines()), 1, r.err)


class HostileClients(McpHttpCase):
    """What the front end holds under attack: slow clients (slowloris) hold only their own
    connection, an oversized body is refused before or while it is read, and memory stays bounded
    while a legitimate client is served in between."""

    def test_slow_clients_and_oversized_bodies_leave_the_server_bounded_and_serving(self):
        s = self.server("--max-body", "65536")
        slow = []
        for _ in range(200):
            c = socket.create_connection(("127.0.0.1", s.port))
            c.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\n")
            slow.append(c)

        def dribble():
            for c in slow:
                try:
                    c.sendall(b"X")
                except OSError:
                    pass

        refused = {"declared": 0, "chunked": 0}
        for i in range(40):
            # A declared length past --max-body: refused before a byte of the body is read.
            c = socket.create_connection(("127.0.0.1", s.port))
            c.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN_A.encode() +
                      b"\r\nContent-Type: application/json\r\nContent-Length: 104857600\r\n\r\n" + b"[" * 1000)
            if c.recv(64).startswith(b"HTTP/1.1 413"):
                refused["declared"] += 1
            c.close()
            # A chunked body that grows past it: refused once it does.
            c = socket.create_connection(("127.0.0.1", s.port))
            c.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN_A.encode() +
                      b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"%x\r\n%s\r\n" % (16384, b"a" * 16384)
            try:
                for _ in range(8):
                    c.sendall(chunk)
            except OSError:
                pass
            c.settimeout(scaled(10))
            try:
                if c.recv(64).startswith(b"HTTP/1.1 413"):
                    refused["chunked"] += 1
            except OSError:
                pass
            c.close()
            if i % 10 == 0:
                dribble()
        self.assertEqual(refused, {"declared": 40, "chunked": 40})
        # Meanwhile a client with a token is served at once.
        t0 = time.monotonic()
        sid = s.initialize(TOKEN_A)
        status, _, body = s.call(TOKEN_A, sid, "echo served")
        self.assertEqual(status, 200, body)
        self.assertLess(time.monotonic() - t0, scaled(10))
        with open(f"/proc/{s.p.pid}/status") as f:
            peak_kib = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))
        _, _, raw = s.request("GET", "/metrics")
        self.assertIn('sbx_http_refusals_total{reason="body_size"} 80', raw.decode())
        self.assertIn("sbx_http_connections 201", raw.decode())  # the 200 slow ones and /metrics's
        print(f"\n    note: 200 slow clients and 80 oversized bodies: the server's peak RSS {peak_kib // 1024} MiB",
              flush=True)
        # Under ASan (tests/sanitize.sh) a process's RSS is its shadow memory and a 256 MiB quarantine of
        # freed blocks: the bound there is only that it stays within those.
        bound_mib = 512 if "ASAN_OPTIONS" in os.environ else 64
        self.assertLess(peak_kib, bound_mib * 1024, "the server's memory grew with its hostile clients")
        for c in slow:
            c.close()
        self.assertEqual(s.stop(), 0)

    def test_malformed_messages_and_a_closing_session_under_load_leave_the_server_up(self):
        s = self.server("--max-connections", "4")
        # A non-string "jsonrpc" (a parse that would throw): 400, and no connection slot is kept.
        for _ in range(6):
            status, _, raw = s.request("POST", "/mcp", {"jsonrpc": 2, "id": 1, "method": "initialize"},
                                       {"Authorization": "Bearer " + TOKEN_A})
            self.assertEqual(status, 400, raw)
        self.assertEqual(s.request("GET", "/healthz")[0], 200)
        # Large notifications written to a session's server while another connection ends it.
        big = {"jsonrpc": "2.0", "method": "notifications/progress",
               "params": {"progressToken": "x", "progress": 1, "message": "m" * 300000}}
        for _ in range(8):
            sid = s.initialize(TOKEN_A)
            senders = [threading.Thread(target=lambda: s.rpc(TOKEN_A, big, sid)) for _ in range(3)]
            for t in senders:
                t.start()
            s.request("DELETE", "/mcp", headers={"Authorization": "Bearer " + TOKEN_A, "Mcp-Session-Id": sid})
            for t in senders:
                t.join(scaled(20))
            self.assertIsNone(s.p.poll(), "the server died: " + s.stderr()[-2000:])
        self.assertEqual(s.request("GET", "/healthz")[0], 200)
        self.assertEqual(s.stop(), 0)

    def test_an_unauthenticated_request_is_refused_before_its_body_is_read(self):
        s = self.server()
        c = socket.create_connection(("127.0.0.1", s.port))
        c.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 4000000\r\n\r\n")
        c.settimeout(scaled(5))
        self.assertTrue(c.recv(64).startswith(b"HTTP/1.1 401"), "the server waited for the body of a request without a token")
        c.close()
        self.assertEqual(s.stop(), 0)

    def send_until_answered(self, s, head, piece, most):
        """`head`, then `piece` again and again (at most `most` bytes), until the server answers: the
        answer's first bytes, or b"" when it never did (or reset the connection before a byte)."""
        c = socket.create_connection(("127.0.0.1", s.port))
        c.settimeout(scaled(5))
        try:
            c.sendall(head)
            sent = 0
            while sent < most and not select.select([c], [], [], 0)[0]:
                c.sendall(piece)
                sent += len(piece)
        except OSError:
            pass  # the server stopped reading: its answer, if any, is there to read
        try:
            return c.recv(64)
        except OSError:
            return b""
        finally:
            c.close()

    def peak_rss_kib(self, s):
        with open(f"/proc/{s.p.pid}/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))

    def test_a_chunk_size_line_that_never_ends_is_refused_and_memory_stays_bounded(self):
        # Boost 1.74 bounds no chunk extension: "1;" and then bytes without end, no CRLF. The
        # connection's read buffer has a bound of its own: past it, 400, and the server stays small.
        s = self.server()
        head = (b"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN_A.encode() +
                b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1;")
        answer = self.send_until_answered(s, head, b"a" * 65536, 48 << 20)
        self.assertTrue(answer.startswith(b"HTTP/1.1 400"), answer)
        # Without a token, on a path that takes no body: refused before the body.
        head = (b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n1;")
        answer = self.send_until_answered(s, head, b"a" * 65536, 48 << 20)
        self.assertTrue(answer.startswith(b"HTTP/1.1 413"), answer)
        self.assertLess(self.peak_rss_kib(s), (512 if "ASAN_OPTIONS" in os.environ else 48) * 1024,
                        "the server's memory grew with a chunk's size line")
        _, _, raw = s.request("GET", "/metrics")
        self.assertIn('sbx_http_refusals_total{reason="chunk_header"} 1', raw.decode())
        self.assertEqual(s.stop(), 0)

    def test_no_path_but_mcp_takes_a_body_and_none_is_read_without_a_token(self):
        s = self.server()
        for path in (b"/healthz", b"/readyz", b"/metrics", b"/other", b"/mcp/x"):
            for framing in (b"Content-Length: 4000000", b"Transfer-Encoding: chunked"):
                with self.subTest(path=path, framing=framing):
                    c = socket.create_connection(("127.0.0.1", s.port))
                    c.sendall(b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + framing + b"\r\n\r\n")
                    c.settimeout(scaled(5))
                    try:
                        answer = c.recv(64)
                    except OSError as e:
                        answer = repr(e).encode()
                    c.close()
                    self.assertTrue(answer.startswith(b"HTTP/1.1 413"),
                                    b"the server waited for a body nobody asked for: " + answer)
        # No body (or an empty one) is still served.
        self.assertEqual(s.request("GET", "/healthz")[0], 200)
        self.assertEqual(s.request("POST", "/healthz", b"")[0], 200)
        self.assertEqual(s.stop(), 0)

    def test_a_client_cannot_answer_for_the_session_s_server(self):
        # A message with the client's id and no method would be answered by the session's server
        # with an error carrying that id: in its id space, the id of another request of the
        # server's own. Refused, so no running call is finished early and its slot stays taken.
        s = self.server("--max-calls-per-tenant", "1")
        sid = s.initialize(TOKEN_A)
        marker = sleep_marker(25)
        answer = {}
        t = threading.Thread(target=lambda: answer.update(r=s.call(TOKEN_A, sid, f"sleep {marker}", id=50, timeout=90)))
        t.start()
        self.assertTrue(wait_for(lambda: find_program(marker), scaled(10)), s.stderr())
        forged = [{"jsonrpc": "2.0", "id": n} for n in range(1, 8)]
        forged += [{"jsonrpc": "2.0", "id": n, "result": {}} for n in range(1, 8)]
        forged += [{"jsonrpc": "2.0", "id": n, "error": {"code": 1, "message": "x"}} for n in range(1, 8)]
        forged += [{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, {"jsonrpc": "2.0", "id": None, "method": "ping"},
                   {"jsonrpc": "2.0", "id": 3, "method": 7}]
        for msg in forged:
            status, _, body = s.rpc(TOKEN_A, msg, sid)
            self.assertRpcError(status, body, 400)
        self.assertTrue(t.is_alive(), f"a forged answer finished the running call: {answer}")
        self.assertTrue(find_program(marker))
        status, _, body = s.call(TOKEN_A, sid, "echo second", id=51)
        self.assertRpcError(status, body, 429)
        # A notification named like a request makes no session.
        status, _, body = s.rpc(TOKEN_A, {"jsonrpc": "2.0", "method": "initialize", "params": {}})
        self.assertRpcError(status, body, 400)
        _, _, raw = s.request("GET", "/metrics")
        self.assertIn("sbx_mcp_sessions 1", raw.decode())
        self.assertEqual(s.stop(), 0)
        t.join(scaled(10))

    def session_servers(self, s):
        """The pids of the server's session servers (its `sbx mcp` children; the readiness check's
        helper, a fork of the server, is gone once the check has said so)."""
        kids = []
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
            except (OSError, ValueError, IndexError):
                continue
            if ppid == s.p.pid and b"mcp" in cmdline:
                kids.append(int(pid))
        return kids

    def test_an_ended_session_counts_against_its_tenant_until_its_server_exits(self):
        # A tenant's 16 sessions; one ended by DELETE whose server has not yet exited (stopped
        # here) still counts, so the tenant cannot start a 17th server meanwhile.
        s = self.server()
        self.assertTrue(wait_for(lambda: "readiness check:" in s.stderr(), scaled(30)), s.stderr())
        sids = [s.initialize(TOKEN_A) for _ in range(16)]
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        self.assertRpcError(*s.rpc(TOKEN_A, init)[::2], 429)
        kids = self.session_servers(s)
        self.assertEqual(len(kids), 16, kids)
        for pid in kids:
            os.kill(pid, signal.SIGSTOP)
        try:
            status, _, _ = s.request("DELETE", "/mcp", headers={"Authorization": "Bearer " + TOKEN_A,
                                                                "Mcp-Session-Id": sids[0]})
            self.assertEqual(status, 200)
            status, _, body = s.rpc(TOKEN_A, init)
            self.assertRpcError(status, body, 429)
            self.assertEqual(len(self.session_servers(s)), 16)
        finally:
            for pid in kids:
                os.kill(pid, signal.SIGCONT)
        # Once it has exited, its place is free.
        self.assertTrue(wait_for(lambda: s.rpc(TOKEN_A, init)[0] == 200, scaled(20)), s.stderr()[-2000:])
        self.assertEqual(s.stop(), 0)

    def test_what_a_client_sends_is_logged_as_an_excerpt(self):
        # A session's server logs the protocolVersion its client asked for: 2 MB of it, three
        # times, would have been 6 MB of stderr.
        s = self.server()
        for i in range(3):
            status, _, body = s.rpc(TOKEN_A, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "v" * (2 << 20), "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
            self.assertEqual(status, 200, body)
        self.assertTrue(wait_for(lambda: s.stderr().count("client asked for") == 3, scaled(10)), s.stderr()[-2000:])
        self.assertLess(len(s.stderr()), 64 << 10, "the server's log grew with what its clients sent")
        self.assertEqual(s.stop(), 0)

    def test_an_answer_left_unread_holds_its_tenant_s_call_slot(self):
        # A call's answer (here 12 MB of output) waits for its client to read it: until it is
        # written, it counts against the tenant's calls, so unread answers cannot pile up.
        s = self.server("--max-calls-per-tenant", "1")
        sid = s.initialize(TOKEN_A)
        c = socket.socket()
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.connect(("127.0.0.1", s.port))
        body = json.dumps({"jsonrpc": "2.0", "id": 70, "method": "tools/call", "params": {
            "name": "run_code", "arguments": {"language": "sh", "code": "head -c 12000000 /dev/zero | tr '\\0' a"}}})
        c.sendall(("POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer "
                   f"{TOKEN_A}\r\nMcp-Session-Id: {sid}\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
        self.assertTrue(wait_for(lambda: len(self.records("A")) == 1, scaled(30)), s.stderr()[-2000:])
        time.sleep(0.5)
        status, _, answer = s.call(TOKEN_A, sid, "echo second", id=71)
        self.assertRpcError(status, answer, 429)
        c.settimeout(scaled(30))
        r = http.client.HTTPResponse(c)
        r.begin()
        self.assertEqual(r.status, 200)
        self.assertEqual(len(json.loads(r.read())["result"]["structuredContent"]["stdout"]), 12000000)
        c.close()
        self.assertEqual(s.call(TOKEN_A, sid, "echo third", id=72)[0], 200)
        self.assertEqual(s.stop(), 0)

    def test_a_client_cancels_its_call_by_its_own_id(self):
        s = self.server("--max-calls-per-tenant", "1")
        sid = s.initialize(TOKEN_A)
        marker = sleep_marker()
        answer = {}
        t = threading.Thread(target=lambda: answer.update(r=s.rpc(TOKEN_A, {
            "jsonrpc": "2.0", "id": "mine-1", "method": "tools/call",
            "params": {"name": "run_code", "arguments": {"language": "sh", "code": f"sleep {marker}"}}}, sid)))
        t.start()
        self.assertTrue(wait_for(lambda: find_program(marker), scaled(10)), s.stderr())
        # An id the client never used cancels nothing.
        self.assertEqual(s.rpc(TOKEN_A, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                                         "params": {"requestId": 1}}, sid)[0], 202)
        time.sleep(0.3)
        self.assertTrue(find_program(marker))
        self.assertEqual(s.rpc(TOKEN_A, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                                         "params": {"requestId": "mine-1", "reason": "changed my mind"}}, sid)[0], 202)
        t.join(scaled(10))
        status, _, body = answer["r"]
        self.assertEqual(body["id"], "mine-1")
        self.assertEqual(body["error"]["code"], -32800, body)
        self.assertTrue(wait_for(lambda: not find_program(marker), scaled(20)))
        # The tenant's slot is free again.
        self.assertEqual(s.call(TOKEN_A, sid, "echo next")[0], 200)
        self.assertEqual(s.stop(), 0)

    def test_without_tokens_only_a_loopback_host_is_served_and_initialize_is_never_streamed(self):
        s = Server(self, ["--no-auth"], self.env)
        self.servers.append(s)
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"},
            "_meta": {"progressToken": "i"}}}
        # DNS rebinding: a page whose name now points at 127.0.0.1 sends its own Host (and Origin).
        status, _, raw = s.request("POST", "/mcp", init, {"Host": f"evil.example:{s.port}",
                                                           "Origin": f"http://evil.example:{s.port}"})
        self.assertEqual(status, 403, raw)
        status, hdrs, raw = s.request("POST", "/mcp", init)
        self.assertEqual(status, 200, raw)
        self.assertEqual(hdrs["Content-Type"], "application/json")
        self.assertRegex(hdrs.get("Mcp-Session-Id", ""), r"^[0-9a-f]{32}$")
        self.assertEqual(s.stop(), 0)
