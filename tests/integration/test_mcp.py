"""sbx mcp at the wire: JSON-RPC framing and errors, version negotiation in both eras, isolation of
sbx's own stdin/stdout from every process it starts, cancellation, progress, queueing, and a client
that goes away. The official SDK's client drives the same server in tests/mcp/sdk_test.mjs.
Runs as root and rootless."""
import hashlib
import json
import os
import re
import select
import signal
import subprocess
import time
import uuid

from sbxtest import SBX, SbxTestCase, ledger_lines, note, procs, scaled, sbx, write_tree

# run.sh copies examples/packs beside the suite, where the rootless user can read it.
TOLERANCE_PACK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "packs", "tolerance-check")
CORROSION_PACK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "packs", "corrosion-grade")
MODERN = "2026-07-28"
SECRET = "mcp-s3cr3t-VALUE-5e1f0a"
MODERN_META = {"io.modelcontextprotocol/protocolVersion": MODERN,
               "io.modelcontextprotocol/clientCapabilities": {}}


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def descendants(pid):
    """Every process below `pid`, from the parent pids in /proc/*/stat (readable whatever the
    process's dumpable flag, unlike /proc/PID/task/*/children)."""
    parent = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        parent[int(d)] = int(stat[stat.rindex(b")") + 2:].split()[1])
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out



def pack_and_code_tools(server):
    """tools/list less the session tools every server offers (mcp_session.hpp): the packs and run_code."""
    return [t["name"] for t in server.request("tools/list")["result"]["tools"] if not t["name"].startswith("session_")]

class Server:
    """One `sbx mcp` process and a line-oriented JSON-RPC client to it."""

    def __init__(self, tc, args=(), initialize="2025-11-25"):
        self.tc = tc
        self.err_path = tc.path(f"mcp-stderr-{uuid.uuid4().hex[:6]}")
        self.err = open(self.err_path, "wb")
        self.state = tc.path(f"state-{uuid.uuid4().hex[:6]}")
        self.p = subprocess.Popen([SBX, "--state-dir", self.state, "mcp"] + list(args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err)
        self.buf = b""
        self.lines = []  # every line the server wrote, for the "only MCP on stdout" check
        self.next_id = 1
        if initialize:
            r = self.request("initialize", {"protocolVersion": initialize, "capabilities": {},
                                            "clientInfo": {"name": "test_mcp.py", "version": "1"}})
            tc.assertEqual(r["result"]["protocolVersion"], initialize if initialize != "2024-11-05" else "2025-11-25")
            self.notify("notifications/initialized")

    def close(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.close()
            except OSError:
                pass
            try:
                self.p.wait(timeout=scaled(20))
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.err.close()
        for line in self.lines:  # nothing but JSON-RPC 2.0 messages ever reached stdout
            msg = json.loads(line)
            for m in msg if isinstance(msg, list) else [msg]:
                self.tc.assertEqual(m.get("jsonrpc"), "2.0", line)

    def stderr(self):
        with open(self.err_path, "rb") as f:
            return f.read().decode(errors="replace")

    def send_raw(self, data):
        self.p.stdin.write(data)
        self.p.stdin.flush()

    def send(self, msg):
        self.send_raw(json.dumps(msg).encode() + b"\n")

    def notify(self, method, params=None):
        m = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            m["params"] = params
        self.send(m)

    def start(self, method, params=None, id=None):
        if id is None:
            id = self.next_id
            self.next_id += 1
        m = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            m["params"] = params
        self.send(m)
        return id

    def read(self, timeout=30):
        """The next message, or None at EOF; fails on a timeout."""
        deadline = time.monotonic() + scaled(timeout)
        # Linear in the line's size: a bytearray grown in place, and only each new chunk searched
        # for the newline. (Bytes joined and searched whole at each pipe read were quadratic: a
        # 60 MiB batch response arrives in ~1,000 reads, ~60 GB copied and scanned, which took
        # past the timeout on a loaded 2-core machine.)
        buf = bytearray(self.buf)
        end = buf.find(b"\n")
        while end < 0:
            left = deadline - time.monotonic()
            if left <= 0:
                self.buf = bytes(buf)
                self.tc.fail(f"no message from sbx mcp within {timeout}s; stderr:\n{self.stderr()}")
            r, _, _ = select.select([self.p.stdout], [], [], left)
            if r:
                chunk = os.read(self.p.stdout.fileno(), 1 << 20)
                if not chunk:
                    self.buf = bytes(buf)
                    return None
                found = chunk.find(b"\n")
                end = -1 if found < 0 else len(buf) + found
                buf += chunk
        line, self.buf = bytes(buf[:end]), bytes(buf[end + 1:])
        self.lines.append(line)
        return json.loads(line)

    def wait_for(self, id, timeout=30, others=None):
        while True:
            m = self.read(timeout)
            self.tc.assertIsNotNone(m, f"EOF while waiting for id {id}; stderr:\n{self.stderr()}")
            if isinstance(m, dict) and m.get("id") == id and "method" not in m:
                return m
            if others is not None:
                others.append(m)

    def request(self, method, params=None, id=None, timeout=30):
        return self.wait_for(self.start(method, params, id), timeout)


class McpCase(SbxTestCase):
    def server(self, *a, **kw):
        s = Server(self, *a, **kw)
        self.addCleanup(s.close)
        return s

    def call(self, s, name, arguments, meta=None, timeout=60):
        params = {"name": name, "arguments": arguments}
        if meta:
            params["_meta"] = meta
        return s.request("tools/call", params, timeout=timeout)

    # --- framing and protocol errors ---------------------------------------------------------

    def test_protocol_errors_are_jsonrpc_errors_and_the_server_survives_them(self):
        s = self.server()
        s.send_raw(b"{this is not json\n")
        m = s.read()
        self.assertEqual((m["error"]["code"], m["id"]), (-32700, None))
        s.send_raw(b"[" * 5000 + b"\n")  # past the depth bound: refused before any DOM exists
        self.assertEqual(s.read()["error"]["code"], -32700)
        s.send({"jsonrpc": "1.0", "id": 7, "method": "ping"})
        m = s.read()
        self.assertEqual((m["error"]["code"], m["id"]), (-32600, 7))
        s.send({"jsonrpc": "2.0", "id": {"obj": 1}, "method": "ping"})
        self.assertEqual(s.read()["error"]["code"], -32600)
        self.assertEqual(s.request("no/such/method")["error"]["code"], -32601)
        self.assertEqual(s.request("tools/call", {"arguments": {}})["error"]["code"], -32602)
        r = s.request("tools/call", {"name": "no_such_tool", "arguments": {}})
        self.assertEqual(r["error"]["code"], -32602)
        self.assertEqual(s.request("tools/call", {"name": "run_code", "arguments": [1]})["error"]["code"], -32602)
        # Batches belong to 2025-03-26 only.
        s.send([{"jsonrpc": "2.0", "id": 90, "method": "ping"}])
        self.assertEqual(s.read()["error"]["code"], -32600)
        self.assertEqual(s.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                                  "clientInfo": {"name": "x", "version": "1"}})["error"]["code"], -32600)
        # A notification, even a malformed or unknown one, is never answered.
        s.notify("notifications/whatever", {"x": 1})
        s.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": [1]})
        r = s.request("ping")
        self.assertEqual(r["result"], {})
        self.assertEqual(r["id"], s.next_id - 1)

    def test_an_oversized_message_is_refused_without_holding_it(self):
        s = self.server()
        big = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"a" * (66 << 20) + b'"}}\n'
        s.send_raw(big)
        m = s.read()
        self.assertEqual((m["error"]["code"], m["id"]), (-32600, None))
        self.assertIn("longer than", m["error"]["message"])
        self.assertEqual(s.request("ping")["result"], {})

    def test_requests_before_initialize_are_refused_but_ping_is_answered(self):
        s = self.server(initialize=None)
        self.assertEqual(s.request("ping")["result"], {})
        self.assertEqual(s.request("tools/list")["error"]["code"], -32600)

    # --- versions ------------------------------------------------------------------------------

    def test_initialize_negotiates_each_supported_legacy_version_and_falls_back_to_the_latest(self):
        for v in ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"):
            s = self.server(initialize=v)  # the constructor checks the answer
            r = s.request("tools/list")
            self.assertNotIn("resultType", r["result"])
            s.close()

    def test_modern_requests_are_served_statelessly_and_unknown_versions_refused(self):
        s = self.server(initialize=None)
        r = s.request("server/discover", {"_meta": MODERN_META})["result"]
        self.assertEqual(r["resultType"], "complete")
        self.assertEqual(r["supportedVersions"], [MODERN, "2025-11-25", "2025-06-18", "2025-03-26"])
        self.assertIn("tools", r["capabilities"])
        self.assertEqual(r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "sbx")
        self.assertIn("ttlMs", r)
        r = s.request("tools/list", {"_meta": MODERN_META})["result"]
        self.assertEqual(r["resultType"], "complete")
        self.assertIn("run_code", [t["name"] for t in r["tools"]])
        e = s.request("tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": "1900-01-01"}})["error"]
        self.assertEqual(e["code"], -32022)
        self.assertEqual(e["data"]["requested"], "1900-01-01")
        self.assertIn(MODERN, e["data"]["supported"])
        e = s.request("server/discover", {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}})["error"]
        self.assertEqual(e["code"], -32602)  # clientCapabilities is required
        # server/discover without the modern _meta: an error, which a dual-era client reads as "legacy".
        self.assertLess(s.request("server/discover")["error"]["code"], 0)
        r = self.call(s, "run_code", {"language": "sh", "code": "echo modern"}, meta=MODERN_META)["result"]
        self.assertEqual(r["resultType"], "complete")
        self.assertEqual(r["structuredContent"]["stdout"], "modern\n")

    def test_a_2025_03_26_batch_is_answered_as_one_array(self):
        s = self.server(initialize="2025-03-26")
        s.send([{"jsonrpc": "2.0", "id": "a", "method": "ping"},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": "b", "method": "tools/call",
                 "params": {"name": "run_code", "arguments": {"language": "sh", "code": "echo in-batch"}}},
                {"jsonrpc": "2.0", "id": "c", "method": "nope"}])
        m = s.read(60)
        self.assertIsInstance(m, list)
        by_id = {x["id"]: x for x in m}
        self.assertEqual(sorted(by_id), ["a", "b", "c"])
        self.assertEqual(by_id["b"]["result"]["structuredContent"]["stdout"], "in-batch\n")
        self.assertEqual(by_id["c"]["error"]["code"], -32601)

    # --- tools -----------------------------------------------------------------------------------

    def test_pack_tool_returns_the_validated_result_and_refuses_invalid_input_as_a_tool_error(self):
        s = self.server(["--packs", TOLERANCE_PACK,
                         "--context", "tolerance-check/tolerances=" + TOLERANCE_PACK + "/tolerances.json"])
        tools = {t["name"]: t for t in s.request("tools/list")["result"]["tools"]}
        t = tools["tolerance-check"]
        self.assertEqual(t["inputSchema"]["type"], "object")
        self.assertEqual(t["inputSchema"]["properties"]["records"]["items"]["required"],
                         ["feature", "measured_depth_mm"])
        self.assertEqual(t["outputSchema"]["required"], ["drawing", "features"])
        r = self.call(s, "tolerance-check", {"records": [{"feature": "bore-A", "measured_depth_mm": 12.03}]})["result"]
        self.assertFalse(r["isError"], r)
        self.assertEqual(r["structuredContent"]["features"][0]["feature"], "bore-A")
        self.assertEqual(json.loads(r["content"][0]["text"]), r["structuredContent"])
        self.assertTrue(r["_meta"]["sbx/run_id"])
        self.assertTrue(r["_meta"]["sbx/trace"].endswith("ledger.jsonl"))
        r = self.call(s, "tolerance-check", {"records": [{"feature": "", "measured_depth_mm": -1}]})["result"]
        self.assertTrue(r["isError"])
        self.assertIn("input_invalid", r["content"][0]["text"])
        self.assertTrue(r["_meta"]["sbx/run_id"])  # refused input is still a recorded run
        r = self.call(s, "tolerance-check", {"rows": []})["result"]
        self.assertTrue(r["isError"])

    def test_an_invalid_pack_is_skipped_with_one_warning_and_the_others_are_served(self):
        """Issue 32: one invalid pack in --packs took the whole server down (a client saw only
        "Connection closed")."""
        bad = self.path("broken-pack")
        os.mkdir(bad)
        with open(os.path.join(bad, "pack.json"), "w") as f:
            f.write('{"name": "broken", "version": ')
        s = self.server(["--packs", bad, "--packs", TOLERANCE_PACK,
                         "--context", "tolerance-check/tolerances=" + TOLERANCE_PACK + "/tolerances.json"])
        names = sorted(pack_and_code_tools(s))
        self.assertEqual(names, ["run_code", "tolerance-check"])
        warned = [l for l in s.stderr().splitlines() if bad in l]
        self.assertEqual(len(warned), 1, s.stderr())
        self.assertIn("not offered", warned[0])
        self.assertIn("run_code", warned[0])
        self.assertIn("sbx pack validate " + bad, warned[0])
        note("mcp: " + warned[0])
        # No valid pack at all: run_code is still served.
        s = self.server(["--packs", bad])
        self.assertEqual(pack_and_code_tools(s), ["run_code"])
        r = self.call(s, "run_code", {"language": "sh", "code": "echo served"})["result"]
        self.assertEqual(r["structuredContent"]["stdout"], "served\n")

    def test_a_pack_call_that_fails_in_setup_says_why_in_its_result(self):
        """Issue 32: the result said only "setup_error"; the cause (no image named busybox) went to
        the server's stderr, which MCP clients hide."""
        s = self.server(["--packs", CORROSION_PACK])
        r = self.call(s, "corrosion-grade", {"records": [{"asset": "a", "nominal_mm": 10, "corrosion_allowance_mm": 1,
                                                          "measurements_mm": [9.5]}]})["result"]
        self.assertTrue(r["isError"], r)
        text = r["content"][0]["text"]
        self.assertIn("setup_error", text)
        self.assertIn("no image named busybox", text)
        self.assertIn("sbx image", text)  # how to fix it
        self.assertTrue(r["_meta"]["sbx/run_id"])
        # As fields in _meta too; no structuredContent, which a client would check against the
        # pack's outputSchema (the TypeScript SDK does, isError or not) and throw.
        self.assertNotIn("structuredContent", r)
        self.assertEqual(r["_meta"]["sbx/status"], "setup_error")
        self.assertIn("no image named busybox", r["_meta"]["sbx/error"])
        self.assertFalse(r["_meta"]["sbx/error_truncated"])
        note("mcp: setup_error result: " + text.splitlines()[0])

    def secret_pack(self, name="secret-check", secrets=None):
        """A pack that exits 3 unless its file secret `token` and env secret TOK hash to SECRET's
        digest (the pack's own files never hold the value: its copy lands in the state dir)."""
        d = self.path(f"pack-{uuid.uuid4().hex[:6]}")
        os.makedirs(d + "/schemas")
        digest = hashlib.sha256(SECRET.encode()).hexdigest()
        script = ("set -eu\n"
                  f"[ \"$(sha256sum < /run/secrets/token | cut -d' ' -f1)\" = {digest} ] || exit 3\n"
                  f"[ \"$(printf %s \"$TOK\" | sha256sum | cut -d' ' -f1)\" = {digest} ] || exit 4\n"
                  "printf '{\"count\": 1}' > /out/result.json\n")
        manifest = {"name": name, "version": "1.0.0", "entrypoint": ["/bin/sh", "/pack/run.sh"],
                    "input_schema": "schemas/in.json", "output_schema": "schemas/out.json",
                    "limits": {"timeout": "20s"}, "network": {"mode": "none"},
                    "secrets": secrets if secrets is not None else
                    [{"name": "token", "required": True, "delivery": "file"},
                     {"name": "TOK", "required": True, "delivery": "env"}]}
        files = {"pack.json": json.dumps(manifest), "run.sh": script, "schemas/in.json": json.dumps({"type": "object"}),
                 "schemas/out.json": json.dumps({"type": "object", "required": ["count"]})}
        write_tree(d, files)
        return d

    def test_a_pack_gets_its_secrets_from_secret_and_they_show_nowhere(self):
        """Issue 32: `sbx mcp` had no way to give a pack its secret (such a pack was never offered).
        --secret PACK/NAME=@FILE|env:VAR, as `sbx pack run --secret NAME=...`; the value reaches
        neither the server's stderr, nor a tool result, nor the state directory (ledger, copies)."""
        d = self.secret_pack()
        sfile = self.path("secret.txt")
        with open(sfile, "w") as f:
            f.write(SECRET)
        os.chmod(sfile, 0o600)
        os.environ["SBX_TEST_MCP_TOK"] = SECRET
        self.addCleanup(os.environ.pop, "SBX_TEST_MCP_TOK", None)
        s = self.server(["--packs", d, "--secret", "secret-check/token=@" + sfile,
                         "--secret", "secret-check/TOK=env:SBX_TEST_MCP_TOK"])
        names = sorted(pack_and_code_tools(s))
        self.assertEqual(names, ["run_code", "secret-check"], s.stderr())
        r = self.call(s, "secret-check", {"records": [{}]})["result"]
        self.assertFalse(r["isError"], r)
        self.assertEqual(r["structuredContent"], {"count": 1})
        s.close()
        self.assertNotIn(SECRET, s.stderr())
        self.assertFalse(any(SECRET.encode() in line for line in s.lines), "a tool result holds the secret")
        hits = []
        for root, _, files in os.walk(s.state):
            for fn in files:
                with open(os.path.join(root, fn), "rb") as f:
                    if SECRET.encode() in f.read():
                        hits.append(os.path.join(root, fn))
        self.assertEqual(hits, [], "the state directory holds the secret")
        # A pack that requires a secret it is not given is not offered, and the warning says how.
        s = self.server(["--packs", d, "--secret", "secret-check/token=@" + sfile])
        self.assertEqual(pack_and_code_tools(s), ["run_code"])
        self.assertIn("--secret secret-check/TOK=@FILE|env:VAR", s.stderr())
        # Refused at start, as pack run refuses them: undeclared, twice, a source that is no source
        # (never echoed: it may be the value itself), a file that cannot be read.
        for args, want in ((["secret-check/nope=@" + sfile], "declares no such secret"),
                           (["secret-check/token=@" + sfile, "secret-check/token=@" + sfile], "given twice"),
                           (["secret-check/token=plain-value-here"], "@FILE or env:VAR"),
                           (["secret-check/token=@" + self.path("missing")], "cannot read secret file"),
                           (["token=@" + sfile], "PACK/NAME=@FILE")):
            r = sbx(["mcp", "--packs", d] + [a for x in args for a in ("--secret", x)])
            self.assertExit(r, 125)
            self.assertIn(want, self.assertOneSbxLine(r))
            self.assertNotIn("plain-value-here", r.err)
        note("mcp --secret: " + s.stderr().splitlines()[0])

    def test_a_pack_named_like_another_tool_is_skipped_and_the_server_serves(self):
        """Issue 32: two packs of one name, or a pack named run_code, stopped the server. Neither
        pack of a shared name is offered: the first in path order would otherwise win, so whoever
        adds a directory that sorts first takes the tool and the operator's --secret for it."""
        first, second = self.secret_pack("dup", []), self.secret_pack("dup", [])
        third = self.secret_pack("dup", [])
        own = self.secret_pack("run_code", [])
        s = self.server(["--packs", first, "--packs", second, "--packs", third, "--packs", own])
        names = sorted(pack_and_code_tools(s))
        self.assertEqual(names, ["run_code"], s.stderr())
        warned = [l for l in s.stderr().splitlines() if "not offered" in l]
        self.assertEqual(len(warned), 4, s.stderr())
        self.assertIn(second, warned[0])
        self.assertIn("also the name of the pack in " + first, warned[0])
        self.assertIn(first, warned[1].split(" is not offered")[0])
        self.assertIn("also the name of the pack in " + second, warned[1])
        self.assertIn(third, warned[2].split(" is not offered")[0])
        self.assertIn(own, warned[3])
        self.assertIn("sbx's own tool", warned[3])
        r = s.request("tools/call", {"name": "dup", "arguments": {"records": [{}]}})
        self.assertIn("error", r, r)  # no such tool
        note("mcp: " + warned[0])

    def test_a_pack_that_needs_a_context_is_not_offered_without_one(self):
        s = self.server(["--packs", TOLERANCE_PACK])
        names = pack_and_code_tools(s)
        self.assertEqual(names, ["run_code"])
        self.assertIn("not offered", s.stderr())

    def test_run_code_errors_are_tool_results_and_limits_cannot_pass_the_profile(self):
        s = self.server()
        r = self.call(s, "run_code", {"language": "cobol", "code": "x"})["result"]
        self.assertTrue(r["isError"])
        self.assertIn("not supported", r["content"][0]["text"])
        r = self.call(s, "run_code", {"language": "sh", "code": "sleep 5", "limits": {"timeout": "1s"}})["result"]
        self.assertTrue(r["isError"])
        self.assertEqual(r["structuredContent"]["status"], "timeout")
        r = self.call(s, "run_code", {"language": "sh", "code": "true", "limits": {"timeout": "100000h"}})["result"]
        self.assertTrue(r["isError"], r)
        r = self.call(s, "run_code", {"language": "python", "code": "import json; json.dump({'n': 41 + 1}, open('/out/result.json', 'w'))",
                                      "output_schema": {"type": "object", "required": ["n"]}})["result"]
        self.assertFalse(r["isError"], r)
        self.assertEqual(r["structuredContent"]["result"], {"n": 42})

    # --- isolation of sbx's own stdio ----------------------------------------------------------

    def test_no_process_sbx_starts_holds_its_stdin_or_stdout(self):
        s = self.server()
        stdin_pipe = "pipe:[%d]" % os.fstat(s.p.stdin.fileno()).st_ino
        stdout_pipe = "pipe:[%d]" % os.fstat(s.p.stdout.fileno()).st_ino
        # The program reads its stdin to the end and writes to every stdio fd: were it sbx's, it
        # would eat the next request or corrupt the JSON-RPC stream.
        code = "cat >/dev/null; readlink /proc/self/fd/0 /proc/self/fd/1; echo NOT-JSON >&1; echo NOT-JSON >&2; sleep 3"
        id = s.start("tools/call", {"name": "run_code", "arguments": {"language": "sh", "code": code}})
        seen = []
        deadline = time.monotonic() + scaled(15)
        while time.monotonic() < deadline:
            kids = descendants(s.p.pid)
            if any(cmdline(k).startswith(b"sleep") for k in kids):
                seen = kids
                break
            time.sleep(0.05)
        self.assertTrue(seen, "the call's sandbox never started")
        checked = 0
        for pid in seen:
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                checked += 1
                self.assertNotIn(target, (stdin_pipe, stdout_pipe), f"pid {pid} fd {fd} is sbx's own stdio")
        self.assertGreater(checked, 0)
        self.assertEqual(s.request("ping")["result"], {})  # the next request was not eaten
        r = s.wait_for(id)["result"]
        self.assertFalse(r["isError"], r)
        self.assertIn("NOT-JSON", r["structuredContent"]["stdout"])
        self.assertNotIn(stdin_pipe, r["structuredContent"]["stdout"])

    # --- cancellation, progress, queueing, disconnect ---------------------------------------------

    def marker_procs(self, marker):
        return [pid for pid, (cmd, _) in procs().items() if any(marker in a for a in cmd)]

    def wait_marker(self, marker, present, timeout):
        deadline = time.monotonic() + scaled(timeout)
        while time.monotonic() < deadline:
            if bool(self.marker_procs(marker)) == present:
                return time.monotonic()
            time.sleep(0.02)
        self.fail(f"processes with marker {marker}: expected {'some' if present else 'none'} within {timeout}s")

    def test_cancelled_call_has_its_sandbox_killed_and_no_response(self):
        s = self.server()
        marker = "1%d.5" % (uuid.uuid4().int % 10**8)
        id = s.start("tools/call", {"name": "run_code", "arguments": {"language": "sh", "code": f"trap '' TERM INT; sleep {marker}"}})
        self.wait_marker(marker, True, 20)
        t0 = time.monotonic()
        s.notify("notifications/cancelled", {"requestId": id, "reason": "test"})
        gone = self.wait_marker(marker, False, 10)
        note(f"mcp: cancelled sandbox gone {1000 * (gone - t0):.0f} ms after notifications/cancelled")
        self.assertLess(gone - t0, scaled(3))
        # No response for the cancelled request: the next message is the ping's.
        pid = s.start("ping")
        m = s.read()
        self.assertEqual(m.get("id"), pid, m)
        deadline = time.monotonic() + scaled(10)
        while "cancelled: no response" not in s.stderr() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIn("cancelled: no response", s.stderr())
        # The cancelled run is still recorded: killed by sbx after the forwarded signal.
        recs = [e["record"] for e in ledger_lines(s.state)]
        self.assertEqual(len(recs), 1, recs)
        self.assertIn("mcp-worker", recs[0]["invocation"]["argv"] if "invocation" in recs[0] else json.dumps(recs[0]))
        note("mcp: cancelled run's record: status %s" % recs[0].get("result", {}).get("status"))
        self.assertIn(recs[0].get("result", {}).get("status"), ("signaled", "setup_error"), recs[0].get("result"))

    def test_progress_notifications_for_a_long_call_with_a_progress_token(self):
        s = self.server()
        others = []
        id = s.start("tools/call", {"name": "run_code", "arguments": {"language": "sh", "code": "sleep 2.5"},
                                    "_meta": {"progressToken": "tok-1"}})
        r = s.wait_for(id, others=others)
        self.assertFalse(r["result"]["isError"])
        prog = [m["params"] for m in others if m.get("method") == "notifications/progress"]
        self.assertGreaterEqual(len(prog), 1, others)
        self.assertTrue(all(p["progressToken"] == "tok-1" for p in prog))
        self.assertEqual([p["progress"] for p in prog], sorted({p["progress"] for p in prog}))  # increasing

    def test_calls_beyond_max_concurrent_wait_in_order(self):
        s = self.server(["--max-concurrent", "2"])
        t0 = time.monotonic()
        ids = [s.start("tools/call", {"name": "run_code", "arguments": {"language": "sh", "code": "sleep 1; echo %d" % i}})
               for i in range(4)]
        peak = 0
        results = {}
        while len(results) < 4:
            peak = max(peak, sum(1 for k in descendants(s.p.pid) if cmdline(k).startswith(b"sleep\x001\x00")))
            r, _, _ = select.select([s.p.stdout], [], [], 0.05)
            if r or b"\n" in s.buf:
                m = s.read()
                results[m["id"]] = m
        wall = time.monotonic() - t0
        for i, id in enumerate(ids):
            self.assertEqual(results[id]["result"]["structuredContent"]["stdout"], f"{i}\n")
        self.assertLessEqual(peak, 2)
        self.assertGreaterEqual(wall, 2.0)  # two rounds of two one-second calls

    def test_max_queued_bounds_the_waiting_calls_only(self):
        # --max-queued 0: no call waits, but one that finds a free slot runs (it had been refused).
        s = self.server(["--max-concurrent", "1", "--max-queued", "0", "--pool", "0"])
        r = s.request("tools/call", {"name": "run_code", "arguments": {"language": "sh", "code": "echo one"}})
        self.assertEqual(r["result"]["structuredContent"]["stdout"], "one\n", r)
        first = s.start("tools/call", {"name": "run_code", "arguments": {"language": "sh", "code": "sleep 2; echo two"}})
        time.sleep(scaled(0.5))
        r = s.request("tools/call", {"name": "run_code", "arguments": {"language": "sh", "code": "echo three"}})
        self.assertEqual(r["error"]["code"], -32000, r)
        self.assertIn("--max-queued", r["error"]["message"])
        m = s.read()
        self.assertEqual((m["id"], m["result"]["structuredContent"]["stdout"]), (first, "two\n"), m)

    def test_a_client_that_disappears_leaves_nothing_running(self):
        s = self.server()
        marker = "2%d.5" % (uuid.uuid4().int % 10**8)
        for _ in range(2):
            s.start("tools/call", {"name": "run_code", "arguments": {"language": "sh", "code": f"trap '' TERM INT; sleep {marker}"}})
        self.wait_marker(marker, True, 20)
        t0 = time.monotonic()
        s.p.stdin.close()
        s.p.stdout.close()  # the client is gone: EOF on stdin, EPIPE on stdout
        rc = s.p.wait(timeout=scaled(20))
        self.assertEqual(rc, 0, s.stderr())
        self.assertEqual(self.marker_procs(marker), [])
        note(f"mcp: server exited {1000 * (time.monotonic() - t0):.0f} ms after its client went away, nothing left")
        self.assertIn("shutting down: stdin closed", s.stderr())

    def test_sigterm_to_the_server_cancels_and_waits(self):
        s = self.server()
        marker = "3%d.5" % (uuid.uuid4().int % 10**8)
        s.start("tools/call", {"name": "run_code", "arguments": {"language": "sh", "code": f"sleep {marker}"}})
        self.wait_marker(marker, True, 20)
        s.p.terminate()
        self.assertEqual(s.p.wait(timeout=scaled(20)), 0, s.stderr())
        self.assertEqual(self.marker_procs(marker), [])

    # --- issue 30 -----------------------------------------------------------------------------

    def vm_hwm_kib(self, pid):
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        return 0

    def test_a_client_that_does_not_read_cannot_grow_the_server(self):
        """Issue 30 #4: one run_code printing 16 MiB on each stream was a 436 MB response line
        (escaped, and twice: structuredContent and text); three unread ones took the server to
        1.6 GiB. Now a response is the worker's text spliced in once, the text block a summary, and
        past kQueuedResponseBudget (64 MiB) unwritten the server takes no further response."""
        s = self.server(["--pool", "0", "--max-concurrent", "4"])
        code = ("import os, sys\n"
                "sys.stdout.buffer.write(os.urandom(16 << 20)); sys.stdout.flush()\n"
                "sys.stderr.buffer.write(os.urandom(16 << 20)); sys.stderr.flush()\n")
        n = 4
        ids = [s.start("tools/call", {"name": "run_code", "arguments": {"language": "python", "code": code}}) for _ in range(n)]
        # The client reads nothing until every call's program has ended (each worker exited,
        # reaped or waiting to be) and the server has had time to take what it would.
        def stat(pid):
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    return f.read().rsplit(b") ", 1)[1].split()
            except OSError:
                return [b"Z"] + [b"0"] * 20

        deadline, quiet, last = time.monotonic() + scaled(180), 0, None
        while time.monotonic() < deadline and s.p.poll() is None:
            started = s.stderr().count("started worker")
            # Not the server's fork server, which lives as long as the server
            # (runtime/server/fork_server.hpp).
            live = [k for k in descendants(s.p.pid)
                    if stat(k)[0] != b"Z" and not cmdline(k).startswith(b"sbx mcp-fork-server")]
            cpu = stat(s.p.pid)[11:13]  # utime, stime: the server still working on responses
            quiet = quiet + 1 if (started == n and not live and cpu == last) else 0
            last = cpu
            if quiet >= 4:
                break
            time.sleep(0.5)
        hwm = self.vm_hwm_kib(s.p.pid)
        note(f"mcp: {n} unread run_code calls of 2 x 16 MiB random bytes: server VmHWM {hwm // 1024} MiB")
        # The bound: the queued budget (64 MiB), one response of this size (~170 MB: 32 MiB of
        # random bytes, each invalid one escaped as \\xHH), its summary and the server itself.
        # Under ASan (tests/sanitize.sh) shadow memory, redzones and the 256 MiB free quarantine
        # add to every allocation: the bound is widened, still far below main's linear growth
        # (2.3 GiB for 4 calls without the sanitizer).
        bound_mib = 1200 if os.environ.get("ASAN_OPTIONS") else 400
        self.assertLess(hwm, bound_mib * 1024, f"server peak RSS {hwm} KiB; stderr:\n{s.stderr()[-2000:]}")
        # Now a client that reads (in large chunks: the lines are ~170 MB each).
        buf, got = bytearray(s.buf), {}
        deadline = time.monotonic() + scaled(300)
        while len(got) < n:
            nl = buf.find(b"\n")
            if nl >= 0:
                m = json.loads(bytes(buf[:nl]))
                del buf[:nl + 1]
                if "id" in m:
                    got[m["id"]] = m
                continue
            self.assertLess(time.monotonic(), deadline, s.stderr()[-2000:])
            r, _, _ = select.select([s.p.stdout], [], [], 5)
            if r:
                chunk = os.read(s.p.stdout.fileno(), 64 << 20)
                self.assertTrue(chunk, s.stderr()[-2000:])
                buf += chunk
        s.buf = bytes(buf)
        for id in ids:
            r = got[id]["result"]
            sc = r["structuredContent"]
            self.assertIn(sc["status"], ("ok", "output_limit"), sc.get("error"))
            self.assertGreaterEqual(len(sc["stdout"]), 16 << 20)
            # The text block is a summary: the streams are not carried twice.
            self.assertLess(len(r["content"][0]["text"]), 64 << 10)
            summary = json.loads(r["content"][0]["text"])
            self.assertEqual(summary["run_id"], sc["run_id"])
            self.assertIn("stdout", summary["cut"])

    def vm_kib(self, pid, field):
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return 0

    def wait_log(self, s, text, n, timeout=60):
        """Until the server's stderr holds `text` n times."""
        deadline = time.monotonic() + scaled(timeout)
        while s.stderr().count(text) < n:
            self.assertLess(time.monotonic(), deadline, f"{n} x {text!r} awaited; stderr:\n{s.stderr()[-3000:]}")
            self.assertIsNone(s.p.poll(), s.stderr()[-3000:])
            time.sleep(0.1)

    def test_calls_waiting_for_a_slot_hold_a_bounded_number_of_bytes(self):
        """A waiting call held its arguments as a parsed tree, copied twice on the way, and a message
        could hold 4M values: with the one slot busy, each 14 MB line of run_code inputs
        [{"":0},...] (2M values) took the server ~360 MB more (7.7 MB, then 1.8 GB after three);
        256 waiting would be ~95 GB. Now a message holds at most 262,144 values (kMaxMessageValues)
        and waiting calls hold their jobs as text, at most 64 MiB of it (kQueuedRequestBudget)."""
        s = self.server(["--pool", "0", "--max-concurrent", "1"])
        slot = s.start("tools/call", {"name": "run_code", "arguments": {"language": "sh", "code": "sleep 60"}})
        self.wait_log(s, "started worker", 1)
        before = self.vm_kib(s.p.pid, "VmRSS")
        # Many small values: a parse error, refused before a tree of them exists.
        inputs = b"[" + b",".join([b'{"":0}'] * 2_000_000) + b"]"  # 4M values: within kMaxJsonValues
        for i in range(3):
            s.send_raw(b'{"jsonrpc":"2.0","id":"values-%d","method":"tools/call","params":{"name":"run_code",'
                       b'"arguments":{"language":"sh","code":"true","inputs":%s}}}\n' % (i, inputs))
        # Large requests: two wait (48 MiB), a third would take the waiting calls past 64 MiB.
        pad = "# " + "x" * (24 << 20) + "\necho waited\n"
        for i in range(3):
            s.start("tools/call", {"name": "run_code", "arguments": {"language": "sh", "code": pad}}, id=f"big-{i}")
        got = []
        s.wait_for(s.start("ping"), 120, others=got)  # lines are handled in order: the others are in
        hwm, rss = self.vm_kib(s.p.pid, "VmHWM"), self.vm_kib(s.p.pid, "VmRSS")
        note(f"mcp: 3 lines of 2M values and 3 of 24 MiB behind a busy slot: server VmRSS "
             f"{before // 1024} -> {rss // 1024} MiB, VmHWM {hwm // 1024} MiB")
        by_id = {m.get("id"): m for m in got if isinstance(m, dict) and "id" in m}
        # A parse error has no id to give back (JSON-RPC 2.0 §5): three of them, one per line.
        parse_errors = [m["error"]["message"] for m in got if isinstance(m, dict) and m.get("id") is None
                        and m.get("error", {}).get("code") == -32700]
        self.assertEqual(len(parse_errors), 3, f"values lines answered: {[str(m)[:300] for m in got]}")
        for e in parse_errors:
            self.assertIn("more than 262144 values", e)
        self.assertNotIn("big-0", by_id)  # waiting
        self.assertNotIn("big-1", by_id)
        e = by_id.get("big-2", {}).get("error", {})
        self.assertEqual(e.get("code"), -32000, f"big-2: {str(by_id.get('big-2'))[:500]}")
        self.assertIn("would pass the 67108864 bytes waiting calls may hold", e["message"])
        # The bound: 48 MiB waiting, one 24 MiB line being handled (its text, its tree, its job's
        # text, each with the room a growing string leaves) and the server itself: 210 MiB
        # measured, 1,794 MiB before. Under ASan shadow memory and quarantine add to it.
        bound_mib = 900 if os.environ.get("ASAN_OPTIONS") else 300
        self.assertLess(hwm, bound_mib * 1024, s.stderr()[-2000:])
        # The waiting calls run once the slot is free, their requests as they were sent.
        s.notify("notifications/cancelled", {"requestId": slot})
        for i in range(2):
            r = s.wait_for(f"big-{i}", 120)["result"]
            self.assertEqual(r["structuredContent"]["stdout"], "waited\n", json.dumps(r)[:2000])

    def test_held_batches_share_one_response_budget(self):
        """Each 2025-03-26 batch had 64 MiB of held responses of its own, outside the server's
        budget: three batches of two 30 MiB responses and a call still running, to a client that
        reads nothing, held 180 MiB. Now every held batch counts against the one 64 MiB
        (kQueuedResponseBudget), and a member past it is answered with a tool error."""
        s = self.server(["--pool", "0", "--max-concurrent", "9"], initialize="2025-03-26")
        code = ("import sys\n"
                "sys.stdout.write('a' * (15 << 20)); sys.stdout.flush()\n"
                "sys.stderr.write('b' * (15 << 20)); sys.stderr.flush()\n")

        def member(id, arguments):
            return {"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "run_code", "arguments": arguments}}
        outs = [f"{b}-out-{i}" for b in range(3) for i in range(2)]
        for b in range(3):
            s.send([member(f"{b}-out-0", {"language": "python", "code": code}),
                    member(f"{b}-out-1", {"language": "python", "code": code}),
                    member(f"{b}-sleep", {"language": "sh", "code": "sleep 60"})])
        # Every output call answered (held in its batch, or refused); the sleeps hold the batches.
        deadline = time.monotonic() + scaled(120)
        while len(set(re.findall(r'call "(\d-out-\d)" \(run_code\): worker \d+ ended', s.stderr()))) < 6:
            self.assertLess(time.monotonic(), deadline, s.stderr()[-3000:])
            self.assertIsNone(s.p.poll(), s.stderr()[-3000:])
            time.sleep(0.2)
        time.sleep(1)
        hwm, rss = self.vm_kib(s.p.pid, "VmHWM"), self.vm_kib(s.p.pid, "VmRSS")
        note(f"mcp: 3 unread batches of 2 x 30 MiB responses: server VmRSS {rss // 1024} MiB, VmHWM {hwm // 1024} MiB")
        # What stays held: at most 64 MiB of batch responses and the server itself (~8 MiB), where
        # each batch holding its own took 187 MiB. Only noted: the RSS also keeps what the
        # allocator has not returned of the refused responses read meanwhile (68 MiB measured on a
        # quiet machine, 151 beside a build). The shared budget itself is proven below: of six
        # 30 MiB members at most two are held (each batch had its own 64 MiB before: all six).
        for b in range(3):
            s.notify("notifications/cancelled", {"requestId": f"{b}-sleep"})
        answers = {}
        while len(answers) < 6:
            m = s.read(120)
            self.assertIsNotNone(m, s.stderr()[-2000:])
            for x in m if isinstance(m, list) else [m]:
                if x.get("id") in outs:
                    answers[x["id"]] = x["result"]
        held = [k for k, r in answers.items() if not r["isError"]]
        refused = [k for k, r in answers.items() if r["isError"]]
        for k in held:
            self.assertEqual(len(answers[k]["structuredContent"]["stdout"]), 15 << 20)
        for k in refused:
            self.assertIn("bytes that held batch responses share", answers[k]["content"][0]["text"])
        self.assertLessEqual(len(held), 2, f"held {held}, refused {refused}")
        self.assertGreaterEqual(len(held), 1)

    def test_a_result_nested_as_deep_as_a_run_accepts_reaches_the_client(self):
        """Issue 30: a valid result.json nested 128 deep (kMaxJsonDepth, what a run accepts) was
        dropped by the server, which read the worker's response one level short."""
        s = self.server(["--pool", "0"])
        code = "d = 128\nopen('/out/result.json', 'w').write('[' * d + ']' * d)\n"
        r = self.call(s, "run_code", {"language": "python", "code": code})["result"]
        self.assertFalse(r["isError"], json.dumps(r)[:2000])
        v, depth = r["structuredContent"]["result"], 0
        while isinstance(v, list):
            depth += 1
            v = v[0] if v else None
        self.assertEqual(depth, 128)
        code = "d = 129\nopen('/out/result.json', 'w').write('[' * d + ']' * d)\n"
        r = self.call(s, "run_code", {"language": "python", "code": code})["result"]
        self.assertEqual(r["structuredContent"]["status"], "output_invalid", json.dumps(r)[:2000])

    def test_a_message_with_a_repeated_member_name_is_a_parse_error(self):
        """Issue 30: duplicate JSON keys were accepted (last wins)."""
        s = self.server()
        s.send_raw(b'{"jsonrpc": "2.0", "id": 7, "method": "ping", "method": "tools/list"}\n')
        m = s.read()
        self.assertIn("error", m, "a message with a repeated member name was served")
        self.assertEqual(m["error"]["code"], -32700, m)
        self.assertIn('/method: duplicate member name "method"', m["error"]["message"])
        r = self.call(s, "run_code", {"language": "sh", "code": "echo fine"})["result"]
        self.assertEqual(r["structuredContent"]["stdout"], "fine\n")

    def test_a_cancelled_call_whose_worker_is_slow_still_leaves_its_record(self):
        """Issue 30 #16: a cancelled call's worker still running kill_wait_ms (10 s) later was
        SIGKILLed, and its run left no record (1 of 145 under load). The worker is stopped here for
        longer than that, as load would slow it; the run must still be recorded."""
        s = self.server(["--pool", "0"])
        marker = "4%d.5" % (uuid.uuid4().int % 10**8)
        id = s.start("tools/call", {"name": "run_code", "arguments": {"language": "sh", "code": f"sleep {marker}"}})
        self.wait_marker(marker, True, 20)
        import re
        worker = int(re.search(r"started worker (\d+)", s.stderr()).group(1))
        os.kill(worker, signal.SIGSTOP)
        try:
            s.notify("notifications/cancelled", {"requestId": id, "reason": "test"})
            time.sleep(11.5)  # past the server's kill_wait_ms
        finally:
            try:
                os.kill(worker, signal.SIGCONT)
            except ProcessLookupError:
                pass  # killed meanwhile: what this test is about
        deadline = time.monotonic() + scaled(20)
        while "cancelled: no response" not in s.stderr() and time.monotonic() < deadline:
            time.sleep(0.1)
        recs = [e["record"] for e in ledger_lines(s.state)]
        self.assertEqual(len(recs), 1, s.stderr())
        self.assertIn("waiting for its record", s.stderr())

    def test_every_started_call_has_a_record_whatever_the_moment_of_its_cancellation(self):
        """Issue 30 #16: calls cancelled at random moments (queued, starting, running, ending);
        each one that started a worker has a record. Bounded: 24 calls, then the server is closed."""
        import random
        rnd = random.Random(30)
        s = self.server(["--max-concurrent", "3"])
        pending = []
        for i in range(24):
            id = s.start("tools/call", {"name": "run_code", "arguments": {"language": "sh", "code": "sleep 0.%d; echo %d" % (rnd.randrange(4), i)}})
            pending.append((time.monotonic() + rnd.uniform(0, 0.6), id))
            time.sleep(rnd.uniform(0, 0.1))
            for at, cid in [p for p in pending if p[0] <= time.monotonic()]:
                s.notify("notifications/cancelled", {"requestId": cid})
                pending.remove((at, cid))
        for at, cid in pending:
            time.sleep(max(0, at - time.monotonic()))
            s.notify("notifications/cancelled", {"requestId": cid})
        time.sleep(1)
        s.p.stdin.close()
        self.assertEqual(s.p.wait(timeout=scaled(60)), 0, s.stderr())
        import re
        started = set(re.findall(r"call (\d+) \(run_code\): started worker", s.stderr()))
        deadline = time.monotonic() + scaled(30)  # workers the server left finish their records
        while len(ledger_lines(s.state)) < len(started) and time.monotonic() < deadline:
            time.sleep(0.2)
        recs = ledger_lines(s.state)
        note(f"mcp: 24 calls cancelled at random moments: {len(started)} started, {len(recs)} records")
        self.assertEqual(len(recs), len(started), s.stderr())

    def test_bad_server_flags_are_usage_errors(self):
        r = sbx(["mcp", "--packs", self.path("nope")])
        self.assertExit(r, 125)
        self.assertIn("mcp: --packs", self.assertOneSbxLine(r))
        r = sbx(["mcp", "--context", "x"])
        self.assertExit(r, 125)
        self.assertIn("PACK/NAME=PATH", r.err)
        r = sbx(["mcp", "--profile", "no-such-profile"])
        self.assertExit(r, 125)
