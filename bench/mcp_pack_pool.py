#!/usr/bin/env python3
"""Usage: bench/mcp_pack_pool.py [SBX_BINARY] [--calls N] [--gap SECONDS]      (default: build/sbx, 30, 0.3)

A pack tool's call through `sbx mcp`, cold (--pool 0) and from the pack's own pool (--pool 2), in
ONE run, the two modes' calls interleaved. The pack is a shell one (its program's own time is a
few ms: what is measured is sbx's), with a context file, four input records and an output schema:

  start latency   = request written -> the program's execve returned, as sbx's init saw it (the
                    record's program_started_at)
  call            = request written -> response read: the records validated, the pack and its
                    context copied and hashed (cold) or re-hashed against the copies the pooled
                    sandbox was built with (pooled), the output validated, the record durable

Calls are sequential (--max-concurrent 1), --gap seconds apart so that the pool has refilled; a
pooled call that found no sandbox ready runs cold and is counted. Prints p50 and p99 in ms, and
pooled/cold."""
import json
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import mcp_pool  # noqa: E402  (its Mcp client, pct and unix_ns)

SCRIPT = """set -eu
n=$(grep -o '"id"' /in/records.json | wc -l)
printf '{"count": %s, "limit": %s}' "$n" "$(cat /ctx/limit)" > /out/result.json
"""


def make_pack(d):
    os.makedirs(os.path.join(d, "schemas"))
    manifest = {"name": "bench-pack", "version": "1.0.0", "entrypoint": ["/bin/sh", "/pack/run.sh"],
                "input_schema": "schemas/in.json", "output_schema": "schemas/out.json",
                "limits": {"timeout": "20s"}, "network": {"mode": "none"},
                "context": [{"name": "limit", "path": "/ctx/limit", "required": True}]}
    files = {"pack.json": json.dumps(manifest), "run.sh": SCRIPT,
             "schemas/in.json": json.dumps({"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}}),
             "schemas/out.json": json.dumps({"type": "object", "required": ["count", "limit"]})}
    for rel, text in files.items():
        with open(os.path.join(d, rel), "w") as f:
            f.write(text)


def main():
    sbx, opts = mcp_pool.parse_args(sys.argv[1:], calls=30, gap=0.3)
    calls, gap = opts["calls"], opts["gap"]
    tmp = tempfile.mkdtemp(prefix="sbx-bench-pack-")
    os.chmod(tmp, 0o755)  # as root the sandbox runs as a mapped uid, which must reach the copies in the state dir
    try:
        pack = os.path.join(tmp, "pack")
        make_pack(pack)
        ctx = os.path.join(tmp, "limit")
        with open(ctx, "w") as f:
            f.write("7")
        extra = ("--packs", pack, "--context", f"bench-pack/limit={ctx}")
        modes = {"cold": 0, "pooled": 2}
        servers = {m: mcp_pool.Mcp(sbx, os.path.join(tmp, m), pool, extra) for m, pool in modes.items()}
        time.sleep(1.0)  # the pools' first builds
        records = [{"id": i} for i in range(4)]
        sent = {m: [] for m in modes}
        for _ in range(calls):
            for m, s in servers.items():
                t0, t1, msg = s.request("tools/call", {"name": "bench-pack", "arguments": {"records": records}})
                r = msg["result"]
                if r["isError"] or r["structuredContent"] != {"count": 4, "limit": 7}:
                    raise SystemExit(f"mcp_pack_pool.py: unexpected answer: {r}")
                sent[m].append((r["_meta"]["sbx/run_id"], t0, t1))
                time.sleep(gap)
        for s in servers.values():
            s.close()
        print(f"pack tool call (sh, one context, 4 records): {calls} calls per mode")
        p50 = {}
        for m in modes:
            at, cold_runs = {}, 0
            with open(os.path.join(tmp, m, "traces", "ledger.jsonl"), "rb") as f:
                for line in f:
                    rec = json.loads(line)["record"]
                    at[rec["run_id"]] = mcp_pool.unix_ns(rec["program_started_at"])
                    if m == "pooled" and not rec.get("pool", {}).get("hit"):
                        cold_runs += 1
            start = [(at[rid] - t0) / 1e6 for rid, t0, _ in sent[m]]
            call = [(t1 - t0) / 1e6 for _, t0, t1 in sent[m]]
            p50[m] = (mcp_pool.pct(start, 50), mcp_pool.pct(call, 50))
            print(f"  {m:7} start latency p50 {p50[m][0]:6.1f}  p99 {mcp_pool.pct(start, 99):6.1f}   "
                  f"call p50 {p50[m][1]:6.1f}  p99 {mcp_pool.pct(call, 99):6.1f}   (ms)"
                  + (f"   not served by the pool: {cold_runs}" if m == "pooled" else ""))
        print(f"  pooled/cold: start latency {p50['pooled'][0] / p50['cold'][0]:.2f}, call {p50['pooled'][1] / p50['cold'][1]:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
