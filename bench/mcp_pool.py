#!/usr/bin/env python3
"""Usage: bench/mcp_pool.py [SBX_BINARY] [--calls N] [--gap SECONDS]      (default: build/sbx, 40, 0.4)

`sbx mcp` with and without its warm pool, and a cold `sbx exec`, in ONE run (so that the ratios
compare like with like on a noisy machine). Each call is run_code `exec date +%s%N` (sh): the
program's first act prints the realtime clock, so

  start latency   = the program's timestamp - the moment the request was written (request to
                    program start, including sh's own start and date's exec, the same in every mode)
  call overhead   = request written -> response read, minus nothing (the program's own time is
                    that one exec of date, ~1 ms, in every mode alike)

Calls are sequential (--max-concurrent 1); between two pooled calls the script waits --gap seconds
so that the pool has refilled (the refill is measured as waited_ms in the records: a call that
had to wait for its sandbox shows it). It prints p50 and p99 in ms for each mode and the ratios
pooled/cold (target: pooled p50 start latency <= 1/4 of cold), and the same program started on the
host without any sandbox (the measure's floor: sh's and date's own exec, which no mode removes)."""
import json
import os
import select
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


class Mcp:
    def __init__(self, sbx, state, pool):
        self.p = subprocess.Popen([sbx, "--state-dir", state, "mcp", "--pool", str(pool), "--max-concurrent", "1"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.buf = b""
        self.id = 0
        self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}})
        self.p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        self.p.stdin.flush()

    def request(self, method, params):
        self.id += 1
        line = json.dumps({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params}).encode() + b"\n"
        t0 = time.time_ns()
        self.p.stdin.write(line)
        self.p.stdin.flush()
        while True:
            while b"\n" not in self.buf:
                r, _, _ = select.select([self.p.stdout], [], [], 60)
                if not r:
                    raise SystemExit("mcp_pool.py: no answer from sbx mcp within 60 s")
                chunk = os.read(self.p.stdout.fileno(), 1 << 20)
                if not chunk:
                    raise SystemExit("mcp_pool.py: sbx mcp ended")
                self.buf += chunk
            msg, self.buf = self.buf.split(b"\n", 1)
            m = json.loads(msg)
            if m.get("id") == self.id:
                return t0, time.time_ns(), m

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=60)


CODE = "exec date +%s%N"


def mcp_series(sbx, pool, calls, gap, tmp):
    state = os.path.join(tmp, f"state-pool{pool}")
    s = Mcp(sbx, state, pool)
    time.sleep(max(gap, 1.0))  # the pool's first sandboxes
    start, total = [], []
    for _ in range(calls):
        t0, t1, m = s.request("tools/call", {"name": "run_code", "arguments": {"language": "sh", "code": CODE}})
        r = m["result"]
        if r.get("isError"):
            raise SystemExit(f"mcp_pool.py: call failed: {json.dumps(r)[:400]}")
        prog = int(r["structuredContent"]["stdout"].strip())
        start.append((prog - t0) / 1e6)
        total.append((t1 - t0) / 1e6)
        time.sleep(gap)
    s.close()
    hits = waited = 0
    with open(os.path.join(state, "traces", "ledger.jsonl"), "rb") as f:
        for line in f:
            pool_rec = json.loads(line)["record"].get("pool", {})
            hits += bool(pool_rec.get("hit"))
            waited += pool_rec.get("waited_ms", 0) > 0
    return start, total, hits, waited


def exec_series(sbx, calls, gap, tmp):
    env = dict(os.environ, SBX_STATE_DIR=os.path.join(tmp, "state-exec"))
    req = json.dumps({"language": "sh", "code": CODE}).encode()
    start, total = [], []
    for _ in range(calls):
        t0 = time.time_ns()
        p = subprocess.run([sbx, "exec"], input=req, capture_output=True, env=env)
        t1 = time.time_ns()
        if p.returncode != 0:
            raise SystemExit(f"mcp_pool.py: sbx exec failed ({p.returncode}): {p.stderr.decode()[:400]}")
        prog = int(json.loads(p.stdout)["stdout"].strip())
        start.append((prog - t0) / 1e6)
        total.append((t1 - t0) / 1e6)
        time.sleep(gap)
    return start, total


def host_series(calls, gap):
    """The measure's floor: the same program (sh, then date) started on the host, no sandbox, the
    way exec_series starts sbx (one subprocess per call). What no sandbox mode can go below."""
    start = []
    for _ in range(calls):
        t0 = time.time_ns()
        p = subprocess.run(["/bin/sh", "-c", CODE], capture_output=True)
        start.append((int(p.stdout.strip()) - t0) / 1e6)
        time.sleep(gap)
    return start


def main():
    args = sys.argv[1:]
    sbx = os.path.join(ROOT, "build", "sbx")
    calls, gap = 40, 0.4
    while args:
        a = args.pop(0)
        if a == "--calls":
            calls = int(args.pop(0))
        elif a == "--gap":
            gap = float(args.pop(0))
        else:
            sbx = os.path.abspath(a)
    if not os.access(sbx, os.X_OK):
        raise SystemExit(f"mcp_pool.py: no sbx binary at {sbx} (build it first, or pass its path)")
    with tempfile.TemporaryDirectory() as tmp:
        # Interleaved in one run: cold mcp, pooled mcp, cold exec.
        cold_s, cold_t, _, _ = mcp_series(sbx, 0, calls, gap, tmp)
        pool_s, pool_t, hits, waited = mcp_series(sbx, 2, calls, gap, tmp)
        exec_s, exec_t = exec_series(sbx, calls, gap, tmp)
        host_s = host_series(calls, gap)
    rows = [("mcp cold (--pool 0)", cold_s, cold_t), ("mcp pooled (--pool 2)", pool_s, pool_t), ("sbx exec (cold)", exec_s, exec_t)]
    print(f"{calls} sequential run_code calls each ({CODE!r}), {gap} s apart; ms")
    print(f"{'mode':24} {'start p50':>10} {'start p99':>10} {'call p50':>10} {'call p99':>10}")
    for name, s, t in rows:
        print(f"{name:24} {pct(s, 50):10.2f} {pct(s, 99):10.2f} {pct(t, 50):10.2f} {pct(t, 99):10.2f}")
    print(f"{'host sh, no sandbox':24} {pct(host_s, 50):10.2f} {pct(host_s, 99):10.2f}   (the floor: the program's own exec chain)")
    print(f"pooled calls served by the pool: {hits}/{calls} (of which {waited} waited for their sandbox)")
    print(f"start latency p50 pooled/cold: {pct(pool_s, 50) / pct(cold_s, 50):.3f} (target <= 0.25)")
    print(f"call overhead p50 pooled/cold mcp: {pct(pool_t, 50) / pct(cold_t, 50):.3f}; pooled mcp / cold sbx exec: "
          f"{pct(pool_t, 50) / pct(exec_t, 50):.3f}")


if __name__ == "__main__":
    main()
