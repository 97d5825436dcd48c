// The client of deploy/podman-deploy.py: the official MCP TypeScript SDK's Streamable HTTP client
// (@modelcontextprotocol/sdk, pinned in tests/mcp/package.json; run from the directory it is
// installed in) against sbx mcp --listen deployed from deploy/k8s/mcp-server.yaml, from outside the
// pod's network namespace. Acts as the kubelet first (waits for the readiness probe).
//   TOKEN_ALPHA=... TOKEN_BETA=... node mcp-client.mjs BASE_URL READY_PATH LIVE_PATH
// Prints one line per check, a /metrics excerpt, and "N passed, N failed"; exits 1 on a failure.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [, , base, readyPath, livePath] = process.argv;
const { TOKEN_ALPHA: tokenA, TOKEN_BETA: tokenB } = process.env;
const scale = Number(process.env.SBX_TEST_TIME_SCALE || "1") || 1;
const url = new URL(`${base}/mcp`);
let passed = 0, failed = 0;
function check(what, ok, detail = "") {
  if (ok) passed++;
  else failed++;
  console.log(`${ok ? "ok  " : "FAIL"} ${what}${!detail ? "" : ": " + String(detail).slice(0, 600)}`);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const connect = async (token) => {
  const transport = new StreamableHTTPClientTransport(url, { requestInit: { headers: { Authorization: `Bearer ${token}` } } });
  const client = new Client({ name: "sbx-deploy-test", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
};
const code = (language, source) => ({ name: "run_code", arguments: { language, code: source } });

try {
  let ready = 0, t0 = Date.now();
  for (let i = 0; i < 600 * scale && ready !== 200; i++) {
    ready = await fetch(`${base}${readyPath}`).then((r) => r.status, () => 0);
    if (ready !== 200) await sleep(100);
  }
  check(`readiness probe GET ${readyPath}: 200`, ready === 200, `${ready} after ${Date.now() - t0} ms`);
  const live = await fetch(`${base}${livePath}`).then((r) => r.status, (e) => e.message);
  check(`liveness probe GET ${livePath}: 200`, live === 200, live);

  const a = await connect(tokenA);
  check("initialize over the pod's network: a session id", /^[0-9a-f]{32}$/.test(a.transport.sessionId || ""), a.transport.sessionId);
  const names = (await a.client.listTools()).tools.map((t) => t.name);
  check("tools/list: the image's pack and run_code", names.includes("tolerance-check") && names.includes("run_code"), names.join(", "));
  const pr = await a.client.callTool({ name: "tolerance-check", arguments: { records: [
    { feature: "bore-A", measured_depth_mm: 12.03 }, { feature: "bore-B", measured_depth_mm: 8.47 }] } });
  check("pack call: structuredContent validated by the pack's schema", !pr.isError && pr.structuredContent?.features?.length === 2,
        JSON.stringify(pr.structuredContent ?? pr).slice(0, 300));
  const rc = await a.client.callTool(code("python", "print(6 * 7)"));
  check("run_code (python): its output", !rc.isError && rc.structuredContent?.stdout === "42\n", JSON.stringify(rc).slice(0, 400));
  let progress = 0;
  const lr = await a.client.callTool(code("sh", "sleep 2.5; echo done"), undefined, { onprogress: () => progress++ });
  check("progress over server-sent events", !lr.isError && progress >= 1, `${progress} notification(s)`);

  const ac = new AbortController();
  const started = Date.now();
  const long = a.client.callTool(code("sh", "sleep 60; echo late"), undefined, { signal: ac.signal, timeout: 120000 });
  setTimeout(() => ac.abort("the test cancels it"), 1500);
  const cancelled = await long.then(() => "completed", (e) => e);
  check("cancellation: the call ends when the client cancels it", cancelled !== "completed" && Date.now() - started < 30000,
        `${cancelled?.message ?? cancelled} after ${Date.now() - started} ms`);

  const b = await connect(tokenB);
  const calls = [];
  for (let i = 0; i < 10; i++) {
    calls.push(a.client.callTool(code("sh", `echo alpha-${i}`)).then((r) => [r, `alpha-${i}\n`]));
    calls.push(b.client.callTool(code("sh", `echo beta-${i}`)).then((r) => [r, `beta-${i}\n`]));
  }
  const done = await Promise.allSettled(calls);
  const good = done.filter((d) => d.status === "fulfilled" && !d.value[0].isError && d.value[0].structuredContent?.stdout === d.value[1]);
  check("20 concurrent calls across two tenants: each its own output", good.length === 20,
        `${good.length} of 20; first other: ${String(JSON.stringify(done.find((d) => !good.includes(d)))).slice(0, 400)}`);

  const foreign = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream",
    Authorization: `Bearer ${tokenB}`, "Mcp-Session-Id": a.transport.sessionId, "MCP-Protocol-Version": a.transport.protocolVersion ?? "2025-06-18" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 9, method: "tools/call", params: code("sh", "echo x") }) });
  check("tenant beta's token with alpha's session id: 404", foreign.status === 404, foreign.status);
  let refused = null;
  try {
    await connect("not-a-token");
  } catch (e) {
    refused = e;
  }
  check("a wrong token: refused with 401", refused?.code === 401, `${refused?.code}: ${refused?.message}`);

  const deleted = a.transport.sessionId;
  await a.transport.terminateSession();
  check("DELETE: alpha's session ended", a.transport.sessionId === undefined, a.transport.sessionId);
  const gone = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream",
    Authorization: `Bearer ${tokenA}`, "Mcp-Session-Id": deleted, "MCP-Protocol-Version": a.transport.protocolVersion ?? "2025-06-18" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 10, method: "tools/list" }) });
  check("the deleted session's id is not found: 404", gone.status === 404, gone.status);
  await a.client.close();
  await b.transport.terminateSession();
  await b.client.close();

  const metrics = await fetch(`${base}/metrics`).then((r) => r.text());
  const lines = metrics.split("\n").filter((l) => /^sbx_mcp_(calls_total|records_written_total|sandboxes_total|sessions) /.test(l)
                                                 || /^sbx_mcp_(calls_total|records_written_total|sandboxes_total)\{/.test(l));
  check("/metrics: calls counted per tenant", lines.some((l) => /tenant="alpha"/.test(l)) && lines.some((l) => /tenant="beta"/.test(l)),
        lines.join(" | "));
  console.log("/metrics excerpt:\n  " + lines.slice(0, 16).join("\n  "));
} catch (e) {
  check("no exception", false, e?.stack || e);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
