// sbx mcp driven by the official MCP TypeScript SDK's client (@modelcontextprotocol/sdk, pinned in
// tests/mcp/package.json; installed by `make mcp-test-deps`). Run by tests/mcp/run.sh (ctest `mcp`):
//   node sdk_test.mjs SBX REPO_ROOT
// Prints the session transcript (every JSON-RPC message each way, long strings cut), one line per
// check, and "N passed, N failed"; exits 1 on any failure.
import { spawn } from "node:child_process";
import { readdirSync, readFileSync, existsSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [, self, sbx, root, mode, marker] = process.argv;
const scale = Number(process.env.SBX_TEST_TIME_SCALE || "1") || 1;
const toleranceDir = `${root}/examples/packs/tolerance-check`;
const serverArgs = ["mcp", "--packs", toleranceDir, "--context", `tolerance-check/tolerances=${toleranceDir}/tolerances.json`];

// Every `sleep` process whose command line contains `text` (the markers below are unique per run;
// only sleep counts: the child client below has the marker in its own argv).
function procsWith(text) {
  const out = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const argv = readFileSync(`/proc/${d}/cmdline`, "utf8").split("\0");
      if (argv[0].split("/").pop() === "sleep" && argv.some((a) => a.includes(text))) out.push(Number(d));
    } catch {}
  }
  return out;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(pred, ms) {
  const end = Date.now() + ms * scale;
  while (Date.now() < end) {
    if (pred()) return true;
    await sleep(20);
  }
  return pred();
}
const uniq = () => `${Math.floor(Math.random() * 1e8) + 1e8}.5`;

// A transport that logs what passes through it, around the SDK's own StdioClientTransport.
class LoggingTransport {
  constructor(inner, log) {
    this.inner = inner;
    this.log = log;
  }
  async start() {
    this.inner.onmessage = (m) => {
      this.log("<-", m);
      this.onmessage?.(m);
    };
    this.inner.onclose = () => this.onclose?.();
    this.inner.onerror = (e) => this.onerror?.(e);
    return this.inner.start();
  }
  async send(m, o) {
    this.log("->", m);
    return this.inner.send(m, o);
  }
  async close() {
    return this.inner.close();
  }
  get pid() {
    return this.inner.pid;
  }
  setProtocolVersion(v) {
    this.inner.setProtocolVersion?.(v);
  }
}

function cut(v) {
  return JSON.stringify(v, (k, x) => (typeof x === "string" && x.length > 160 ? x.slice(0, 160) + "..." : x));
}

async function connect(args = serverArgs, log = () => {}) {
  const inner = new StdioClientTransport({ command: sbx, args, env: process.env, stderr: "pipe" });
  const stderr = [];
  inner.stderr?.on("data", (d) => stderr.push(d.toString()));
  const transport = new LoggingTransport(inner, log);
  const client = new Client({ name: "sbx-sdk-test", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport, stderr };
}

// --child-session: a client that starts a session and waits to be killed.
if (mode === "--child-session") {
  const { client } = await connect(["mcp"]);
  const st = await client.callTool({ name: "session_start", arguments: {} });
  console.log(`session ${st.structuredContent?.session}`);
  await sleep(600000);
  process.exit(0);
}

// --child-client: a client that connects, starts a long call, and waits to be killed.
if (mode === "--child-client") {
  const { client, transport } = await connect(["mcp"]);
  console.log(`server-pid ${transport.pid}`);
  client.callTool({ name: "run_code", arguments: { language: "sh", code: `sleep ${marker}` } }, undefined,
                  { timeout: 600000 }).catch(() => {});
  await sleep(600000);
  process.exit(0);
}

let passed = 0, failed = 0;
function check(name, ok, detail = "") {
  if (ok) passed++;
  else failed++;
  console.log(`${ok ? "ok  " : "FAIL"}  ${name}${detail ? ": " + detail : ""}`);
}

const transcript = [];
const { client, transport, stderr } = await connect(serverArgs, (dir, m) => transcript.push(`${dir} ${cut(m)}`));
try {
  const info = client.getServerVersion();
  check("initialize: server is sbx", info?.name === "sbx", cut(info));
  const init = transcript.find((l) => l.includes('"protocolVersion"') && l.startsWith("<-"));
  check("initialize: a supported protocol version was negotiated", /"protocolVersion":"2025-(11-25|06-18|03-26)"/.test(init || ""), init);

  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  check("tools/list: the pack and run_code", names.includes("tolerance-check") && names.includes("run_code"), names.join(", "));
  const tc = tools.find((t) => t.name === "tolerance-check");
  check("tools/list: inputSchema from the pack's input schema", tc?.inputSchema?.properties?.records?.items?.required?.includes("feature"));
  check("tools/list: outputSchema from the pack's output schema", tc?.outputSchema?.required?.includes("features"));

  // The SDK validates structuredContent against the tool's outputSchema itself (Ajv).
  const pr = await client.callTool({ name: "tolerance-check", arguments: { records: [
    { feature: "bore-A", measured_depth_mm: 12.03 }, { feature: "bore-B", measured_depth_mm: 8.47 }] } });
  check("pack call: structuredContent is the validated result", !pr.isError && pr.structuredContent?.features?.length === 2,
        cut(pr.structuredContent));
  check("pack call: run id and trace in _meta", !!pr._meta?.["sbx/run_id"] && /ledger\.jsonl$/.test(pr._meta?.["sbx/trace"] || ""),
        cut(pr._meta));

  const rc = await client.callTool({ name: "run_code", arguments: { language: "python",
    code: "import json\nd = json.load(open('/in/input.json'))\nprint('sum', sum(d))\njson.dump({'sum': sum(d)}, open('/out/result.json', 'w'))",
    inputs: [1, 2, 3, 4] } });
  check("run_code: stdout and result", !rc.isError && rc.structuredContent?.stdout === "sum 10\n" && rc.structuredContent?.result?.sum === 10,
        cut(rc.structuredContent));

  const bad = await client.callTool({ name: "tolerance-check", arguments: { records: [{ feature: 42 }] } });
  check("invalid input: a tool result with isError", bad.isError === true && /input_invalid/.test(bad.content?.[0]?.text || ""),
        cut(bad.content));

  let progress = 0;
  const lr = await client.callTool({ name: "run_code", arguments: { language: "sh", code: "sleep 2.5; echo done" } }, undefined,
                                   { onprogress: () => progress++ });
  check("progress: notifications for a long call", !lr.isError && progress >= 1, `${progress} notification(s)`);

  // Cancellation: the SDK sends notifications/cancelled when the signal aborts.
  {
    const m = uniq();
    const ac = new AbortController();
    const p = client.callTool({ name: "run_code", arguments: { language: "sh", code: `trap '' TERM INT; sleep ${m}` } }, undefined,
                              { signal: ac.signal });
    const started = await until(() => procsWith(m).length > 0, 20000);
    const t0 = Date.now();
    ac.abort("test cancels");
    let rejected = false;
    try { await p; } catch { rejected = true; }
    const gone = await until(() => procsWith(m).length === 0, 10000);
    const ms = Date.now() - t0;
    check("cancellation: the call's sandbox is gone quickly", started && rejected && gone && ms < 3000 * scale,
          `sandbox gone ${ms} ms after the abort`);
    const after = await client.callTool({ name: "run_code", arguments: { language: "sh", code: "echo still-serving" } });
    check("cancellation: the server goes on serving", after.structuredContent?.stdout === "still-serving\n");
  }

  // Ten calls at once: at most --max-concurrent (4) run, the rest wait; every one answered right.
  {
    const m = uniq();
    let peak = 0, polling = true;
    const poller = (async () => { while (polling) { peak = Math.max(peak, procsWith(`1.${m.split(".")[0]}`).length); await sleep(20); } })();
    const t0 = Date.now();
    // Each sleeps about a second under a command line unique to this run, which the poller counts.
    const m1 = `1.${m.split(".")[0]}`;
    const calls = Array.from({ length: 10 }, (_, i) =>
      client.callTool({ name: "run_code", arguments: { language: "sh", code: `sleep ${m1}; echo call-${i}` } }));
    const results = await Promise.all(calls);
    polling = false;
    await poller;
    const wall = Date.now() - t0;
    const good = results.every((r, i) => !r.isError && r.structuredContent.stdout.startsWith(`call-${i}`));
    const ids = new Set(results.map((r) => r._meta?.["sbx/run_id"]));
    console.log(`concurrency: 10 calls, wall ${wall} ms, peak ${peak} sandboxes at once, ${ids.size} distinct run ids`);
    for (const [i, r] of results.entries())
      console.log(`  call ${i}: ${r.structuredContent.status} ${JSON.stringify(r.structuredContent.stdout)} run ${r._meta?.["sbx/run_id"]} ` +
                  `wall ${r.structuredContent.usage?.wall_ms ?? "?"} ms`);
    check("ten concurrent calls: all answered, each with its own output and run", good && ids.size === 10);
    check("ten concurrent calls: at most 4 at once, the rest queued", peak >= 1 && peak <= 4 && wall >= 2500, `peak ${peak}, wall ${wall} ms`);
  }
  // Sessions (sbx session, man sbx-mcp): state across calls until session_stop.
  {
    const st = await client.callTool({ name: "session_start", arguments: { idle: "2m" } });
    const sid = st.structuredContent?.session;
    check("session_start: a session id", !st.isError && /^[0-9a-f]{32}$/.test(sid || ""), cut(st.structuredContent));
    const a = await client.callTool({ name: "session_exec", arguments: { session: sid, language: "python", code: "x = 41" } });
    const b = await client.callTool({ name: "session_exec", arguments: { session: sid, language: "python", code: "print(x + 1)" } });
    check("session_exec: Python globals stay between calls", !a.isError && !b.isError && b.structuredContent?.stdout === "42\n",
          cut(b.structuredContent));
    const f1 = await client.callTool({ name: "session_exec", arguments: { session: sid, language: "sh", code: "echo kept > note" } });
    const f2 = await client.callTool({ name: "session_exec", arguments: { session: sid, language: "sh", code: "cat /workspace/note" } });
    check("session_exec: files under /workspace stay", !f1.isError && f2.structuredContent?.stdout === "kept\n", cut(f2.structuredContent));
    const e = await client.callTool({ name: "session_exec", arguments: { session: sid, language: "python", code: "1/0" } });
    check("session_exec: an exception is the call's error", e.isError === true && e.structuredContent?.status === "exit_nonzero" &&
          /ZeroDivisionError/.test(e.structuredContent?.stderr || ""), cut(e.structuredContent));
    const foreign = await client.callTool({ name: "session_exec", arguments: { session: "0".repeat(32), language: "python", code: "1" } });
    check("session_exec: a session this client did not start is refused", foreign.isError === true &&
          /was started by this client/.test(foreign.content?.[0]?.text || ""), cut(foreign));
    const sp = await client.callTool({ name: "session_stop", arguments: { session: sid } });
    check("session_stop: the session ended, its calls counted", !sp.isError && sp.structuredContent?.ended_by === "stop" &&
          sp.structuredContent?.calls === 5, cut(sp.structuredContent));
    const gone = await client.callTool({ name: "session_exec", arguments: { session: sid, language: "python", code: "1" } });
    check("session_exec after session_stop: refused", gone.isError === true, cut(gone));
  }
} catch (e) {
  check("session", false, String(e?.stack || e));
} finally {
  await client.close();
}
console.log("--- SDK session transcript (-> client to sbx, <- sbx to client) ---");
for (const l of transcript) console.log(l);
console.log("--- end of transcript ---");

// A client that disappears mid-call: a second node process with its own server, killed outright.
{
  const m = uniq();
  const child = spawn(process.execPath, [self, sbx, root, "--child-client", m], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  const started = await until(() => procsWith(m).length > 0, 20000);
  const serverPid = Number((out.match(/server-pid (\d+)/) || [])[1]);
  const t0 = Date.now();
  child.kill("SIGKILL");
  const gone = await until(() => procsWith(m).length === 0 && !(serverPid && existsSync(`/proc/${serverPid}`)), 20000);
  check("client disappears mid-call: sandbox and server are gone", started && serverPid > 0 && gone,
        `${Date.now() - t0} ms after SIGKILL of the client (server pid ${serverPid})`);
}

// A client that disappears with a session open: its server stops the session (ended_by client_gone).
{
  const child = spawn(process.execPath, [self, sbx, root, "--child-session"], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  const started = await until(() => /session [0-9a-f]{32}/.test(out), 30000);
  const sid = (out.match(/session ([0-9a-f]{32})/) || [])[1];
  child.kill("SIGKILL");
  const tomb = `${process.env.SBX_STATE_DIR}/sessions/ended/${sid}.json`;
  const ended = await until(() => existsSync(tomb), 30000);
  const why = ended ? JSON.parse(readFileSync(tomb, "utf8")).ended_by : "(not ended)";
  check("client disappears with a session open: the session is stopped", started && ended && why === "client_gone", `ended_by ${why}`);
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
