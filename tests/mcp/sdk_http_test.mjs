// sbx mcp --listen driven by the official MCP TypeScript SDK's Streamable HTTP client
// (@modelcontextprotocol/sdk, pinned in tests/mcp/package.json). Run by tests/mcp/run.sh (ctest `mcp`):
//   node sdk_http_test.mjs SBX REPO_ROOT
// Starts the server itself on a loopback port with a token file naming two tenants (a tenants
// directory of its own), then: initialize, tools/list, a pack call, run_code, a session that
// another token cannot use, a wrong token refused with 401, the session's DELETE. Prints one line
// per check and "N passed, N failed"; exits 1 on any failure.
import { spawn, execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, writeFileSync, readFileSync, existsSync, mkdirSync, rmSync, chmodSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [, , sbx, root] = process.argv;
const scale = Number(process.env.SBX_TEST_TIME_SCALE || "1") || 1;
const toleranceDir = `${root}/examples/packs/tolerance-check`;
let passed = 0, failed = 0;
function check(what, ok, detail = "") {
  if (ok) passed++;
  else failed++;
  console.log(`${ok ? "ok  " : "FAIL"} ${what}${ok || !detail ? "" : ": " + String(detail).slice(0, 600)}`);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const work = mkdtempSync(join(tmpdir(), "sbx-mcp-http-"));
// Searchable by a tenant's host uids (as root, each tenant's sandboxes run as ids of its own
// slice): a pack call binds its copy from under the state directory.
chmodSync(work, 0o711);
const state = join(work, "state");
mkdirSync(state, { mode: 0o711 });
const tenants = join(work, "tenants");
mkdirSync(tenants);
const ids = process.getuid() === 0 ? "required" : "preferred";
// A tenant allows a pack by its digest (`sbx pack validate --json` prints it).
const digest = JSON.parse(execFileSync(sbx, ["pack", "validate", "--json", toleranceDir], { encoding: "utf8" })).digest;
writeFileSync(join(tenants, "alpha.json"), JSON.stringify({ id_slot: 1, separate_ids: ids, packs: [digest] }));
writeFileSync(join(tenants, "beta.json"), JSON.stringify({ id_slot: 2, separate_ids: ids }));
const tokenA = "alpha-" + createHash("sha256").update(String(Math.random())).digest("hex");
const tokenB = "beta-" + createHash("sha256").update(String(Math.random())).digest("hex");
const sha = (t) => createHash("sha256").update(t).digest("hex");
const tokens = join(work, "tokens.json");
writeFileSync(tokens, JSON.stringify({ tokens: [{ sha256: sha(tokenA), tenant: "alpha" }, { sha256: sha(tokenB), tenant: "beta" }] }));
chmodSync(tokens, 0o600);

const env = { ...process.env, SBX_STATE_DIR: state, SBX_TENANTS_DIR: tenants };
const server = spawn(sbx, ["mcp", "--listen", "127.0.0.1:0", "--tokens", tokens, "--pool", "1", "--packs", toleranceDir,
  "--context", `tolerance-check/tolerances=${toleranceDir}/tolerances.json`], { env, stdio: ["ignore", "ignore", "pipe"] });
let stderr = "";
server.stderr.on("data", (d) => { stderr += d; });
let port = 0;
for (let i = 0; i < 200 * scale && !port; i++) {
  const m = /listening on http:\/\/127\.0\.0\.1:(\d+)\/mcp/.exec(stderr);
  if (m) port = Number(m[1]);
  else await sleep(50);
}
const url = new URL(`http://127.0.0.1:${port}/mcp`);
const connect = async (token) => {
  const transport = new StreamableHTTPClientTransport(url, { requestInit: { headers: { Authorization: `Bearer ${token}` } } });
  const client = new Client({ name: "sbx-http-test", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
};
const records = (tenant) => {
  const p = join(state, "tenants", tenant, "traces", "ledger.jsonl");
  if (!existsSync(p)) return [];
  return readFileSync(p, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l).record).filter((r) => r.schema === "sbx.trace/v1");
};

try {
  check("the server listens", port > 0, stderr);
  const { client, transport } = await connect(tokenA);
  check("initialize: a session id from the server", /^[0-9a-f]{32}$/.test(transport.sessionId || ""), transport.sessionId);
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  check("tools/list: the pack and run_code", names.includes("tolerance-check") && names.includes("run_code"), names.join(", "));
  const pr = await client.callTool({ name: "tolerance-check", arguments: { records: [
    { feature: "bore-A", measured_depth_mm: 12.03 }, { feature: "bore-B", measured_depth_mm: 8.47 }] } });
  check("pack call: the validated result", !pr.isError && pr.structuredContent?.features?.length === 2, JSON.stringify(pr).slice(0, 600));
  const rc = await client.callTool({ name: "run_code", arguments: { language: "python", code: "print(6 * 7)" } });
  check("run_code: its output", !rc.isError && rc.structuredContent?.stdout === "42\n", JSON.stringify(rc).slice(0, 600));
  let progress = 0;
  const lr = await client.callTool({ name: "run_code", arguments: { language: "sh", code: "sleep 2.5; echo done" } }, undefined,
                                   { onprogress: () => progress++ });
  check("progress: notifications for a long call, streamed as server-sent events", !lr.isError && progress >= 1,
        `${progress} notification(s)`);
  const ran = records("alpha").map((r) => r.run_id);
  check("both calls recorded in tenant alpha's store", ran.includes(pr._meta?.["sbx/run_id"]) && ran.includes(rc._meta?.["sbx/run_id"]), ran.join(", "));
  check("nothing in tenant beta's store", records("beta").length === 0);

  // Tenant beta's token, alpha's session id: not found.
  const foreign = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream",
    Authorization: `Bearer ${tokenB}`, "Mcp-Session-Id": transport.sessionId },
    body: JSON.stringify({ jsonrpc: "2.0", id: 9, method: "tools/call", params: { name: "run_code", arguments: { language: "sh", code: "echo x" } } }) });
  check("another tenant's token with this session id: 404", foreign.status === 404, foreign.status);

  // A wrong token: the SDK's connect fails with the server's 401.
  let refused = null;
  try {
    await connect("not-a-token");
  } catch (e) {
    refused = e;
  }
  check("a wrong token: connect refused with 401", refused?.code === 401, `${refused?.code}: ${refused?.message}`);

  await transport.terminateSession();
  check("terminateSession: the session id is forgotten", transport.sessionId === undefined, transport.sessionId);
  await client.close();
} catch (e) {
  check("no exception", false, e?.stack || e);
} finally {
  server.kill("SIGTERM");
  const code = await new Promise((r) => server.on("exit", (c) => r(c)));
  check("SIGTERM: the server exits 0", code === 0, `${code}: ${stderr.slice(-2000)}`);
  rmSync(work, { recursive: true, force: true });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
