#!/usr/bin/env python3
"""Usage: bench/mcp_pool.py [SBX_BINARY] [--calls N] [--gap SECONDS]      (default: build/sbx, 40, 0.4)

`sbx mcp` with and without its warm pool, and a cold `sbx exec`, in ONE run (so that the ratios
compare like with like on a noisy machine). Two programs, their calls interleaved in every mode
(N calls of each), each printing the realtime clock as its first act.

  start latency   = request written -> the program's execve returned, as sbx's init saw it (the
                    record's program_started_at): what sbx does before the program runs
  first stamp     = request written -> the program's own first clock reading: the start latency
                    plus the program's own start (the interpreter's loading and set-up), which
                    is the same in every mode (the "host" row: that start with no sandbox)
  call overhead   = request written -> response read (the program's own time is that one
                    command, the same in every mode)

The programs:

  bash  run_code bash `echo ${EPOCHREALTIME/./}`: bash's first command reads the clock, with no
        further exec; the stamp is taken as soon as the program (/bin/bash, dynamically linked)
        has started: this is "request to program start"
  sh    run_code sh `exec date +%s%N`: the earlier measure, kept for comparison; it also holds
        sh's start and the exec and dynamic loading of date (the program's own exec chain)

Calls are sequential (--max-concurrent 1); between two calls the script waits --gap seconds so
that the pool has refilled (a call that had to wait for its sandbox shows as waited_ms in its
record, counted here). It prints p50 and p99 in ms for each mode and program, the ratios
pooled/cold (target: pooled p50 start latency <= 1/4 of cold), and each program started on the
host with no sandbox at all, the same way (the interpreter on a script file; the first stamp's
floor, which no mode removes)."""
import datetime
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


def parse_args(argv, **defaults):
    """[SBX_BINARY] [--NAME VALUE]...: the sbx binary (default build/sbx) and each option of
    `defaults` (--pool-max-idle is pool_max_idle), its value typed as its default's (a list: comma
    separated). The three MCP benchmarks share it."""
    sbx, opts, args = os.path.join(ROOT, "build", "sbx"), dict(defaults), list(argv)
    while args:
        a = args.pop(0)
        name = a[2:].replace("-", "_") if a.startswith("--") else None
        if name in opts:
            v, d = args.pop(0), opts[name]
            opts[name] = [m for m in v.split(",") if m] if isinstance(d, list) else type(d)(v)
        else:
            sbx = a
    return sbx, opts


def read_message(client, timeout=60):
    """The next JSON-RPC line from client.p (an `sbx mcp`), with client.buf holding what was read
    beyond it (bench/mcp_throughput.py's clients use it too)."""
    while b"\n" not in client.buf:
        r, _, _ = select.select([client.p.stdout], [], [], timeout)
        if not r:
            raise SystemExit(f"{os.path.basename(sys.argv[0])}: no answer from sbx mcp within {timeout} s")
        chunk = os.read(client.p.stdout.fileno(), 1 << 20)
        if not chunk:
            raise SystemExit(f"{os.path.basename(sys.argv[0])}: sbx mcp ended")
        client.buf += chunk
    line, client.buf = client.buf.split(b"\n", 1)
    return json.loads(line)


class Mcp:
    """One `sbx mcp` (bench/mcp_warm.py uses it too, with its profile in `extra`)."""

    def __init__(self, sbx, state, pool, extra=()):
        self.p = subprocess.Popen([sbx, "--state-dir", state, "mcp", "--pool", str(pool), "--max-concurrent", "1",
                                   *extra],
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
            m = read_message(self)
            if m.get("id") == self.id:
                return t0, time.time_ns(), m

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=60)


# name -> (run_code language, code, the script's host interpreter)
PROGRAMS = {
    "bash": ("bash", "echo ${EPOCHREALTIME/./}", "/bin/bash"),
    "sh": ("sh", "exec date +%s%N", "/bin/sh"),
}


def stamp_ns(stdout):
    """The program's clock reading: nanoseconds (date +%s%N) or microseconds (EPOCHREALTIME
    without its dot), told apart by their digit count."""
    v = stdout.strip()
    return int(v) * 1000 if len(v) <= 16 else int(v)


def unix_ns(rfc3339):
    """The record's program_started_at (RFC 3339 UTC, microseconds) as ns since the epoch."""
    d = datetime.datetime.strptime(rfc3339, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    return (int(d.timestamp()) * 1_000_000 + d.microsecond) * 1000


def exec_latencies(ledger, sent):
    """sent: [(program, run_id, t0)]. Request -> execve per program, from the ledger's records."""
    at = {}
    with open(ledger, "rb") as f:
        for line in f:
            r = json.loads(line)["record"]
            if "program_started_at" in r:
                at[r["run_id"]] = unix_ns(r["program_started_at"])
    out = {n: [] for n in PROGRAMS}
    for name, run_id, t0 in sent:
        if run_id not in at:
            raise SystemExit(f"mcp_pool.py: run {run_id} has no program_started_at in {ledger}")
        out[name].append((at[run_id] - t0) / 1e6)
    return out


def order(calls):
    """The programs' calls interleaved: bash, sh, bash, sh, ..."""
    return [name for _ in range(calls) for name in PROGRAMS]


def mcp_series(sbx, pool, calls, gap, tmp):
    state = os.path.join(tmp, f"state-pool{pool}")
    s = Mcp(sbx, state, pool)
    time.sleep(max(gap, 1.0))  # the pool's first sandboxes
    stamp = {n: [] for n in PROGRAMS}
    total = {n: [] for n in PROGRAMS}
    sent = []
    for name in order(calls):
        lang, code, _ = PROGRAMS[name]
        t0, t1, m = s.request("tools/call", {"name": "run_code", "arguments": {"language": lang, "code": code}})
        r = m["result"]
        if r.get("isError"):
            raise SystemExit(f"mcp_pool.py: call failed: {json.dumps(r)[:400]}")
        stamp[name].append((stamp_ns(r["structuredContent"]["stdout"]) - t0) / 1e6)
        total[name].append((t1 - t0) / 1e6)
        sent.append((name, r["_meta"]["sbx/run_id"], t0))
        time.sleep(gap)
    s.close()
    start = exec_latencies(os.path.join(state, "traces", "ledger.jsonl"), sent)
    hits = waited = 0
    legs = {"handout_us": [], "plan_us": []}
    with open(os.path.join(state, "traces", "ledger.jsonl"), "rb") as f:
        for line in f:
            pool_rec = json.loads(line)["record"].get("pool", {})
            hits += bool(pool_rec.get("hit"))
            waited += pool_rec.get("waited_ms", 0) > 0
            for k in legs:
                if k in pool_rec:
                    legs[k].append(pool_rec[k] / 1000)
    return start, stamp, total, hits, waited, legs


def exec_series(sbx, calls, gap, tmp):
    env = dict(os.environ, SBX_STATE_DIR=os.path.join(tmp, "state-exec"))
    stamp = {n: [] for n in PROGRAMS}
    total = {n: [] for n in PROGRAMS}
    sent = []
    for name in order(calls):
        lang, code, _ = PROGRAMS[name]
        req = json.dumps({"language": lang, "code": code}).encode()
        t0 = time.time_ns()
        p = subprocess.run([sbx, "exec"], input=req, capture_output=True, env=env)
        t1 = time.time_ns()
        if p.returncode != 0:
            raise SystemExit(f"mcp_pool.py: sbx exec failed ({p.returncode}): {p.stderr.decode()[:400]}")
        resp = json.loads(p.stdout)
        stamp[name].append((stamp_ns(resp["stdout"]) - t0) / 1e6)
        total[name].append((t1 - t0) / 1e6)
        sent.append((name, resp["run_id"], t0))
        time.sleep(gap)
    start = exec_latencies(os.path.join(tmp, "state-exec", "traces", "ledger.jsonl"), sent)
    return start, stamp, total


def host_series(calls, gap, tmp):
    """The measure's floor: each program started on the host, no sandbox, the way the sandbox
    starts it (its interpreter on the script file) and the way exec_series starts sbx (one
    subprocess per call). What no sandbox mode can go below."""
    start = {n: [] for n in PROGRAMS}
    scripts = {}
    for name, (_, code, _) in PROGRAMS.items():
        scripts[name] = os.path.join(tmp, f"main.{name}")
        with open(scripts[name], "w") as f:
            f.write(code)
    for name in order(calls):
        t0 = time.time_ns()
        p = subprocess.run([PROGRAMS[name][2], scripts[name]], capture_output=True)
        start[name].append((stamp_ns(p.stdout.decode()) - t0) / 1e6)
        time.sleep(gap)
    return start


def main():
    sbx, opts = parse_args(sys.argv[1:], calls=40, gap=0.4)
    sbx, calls, gap = os.path.abspath(sbx), opts["calls"], opts["gap"]
    if not os.access(sbx, os.X_OK):
        raise SystemExit(f"mcp_pool.py: no sbx binary at {sbx} (build it first, or pass its path)")
    with tempfile.TemporaryDirectory() as tmp:
        # In one run: cold mcp, pooled mcp, cold exec, the host floor.
        cold_s, cold_f, cold_t, _, _, _ = mcp_series(sbx, 0, calls, gap, tmp)
        pool_s, pool_f, pool_t, hits, waited, legs = mcp_series(sbx, 2, calls, gap, tmp)
        exec_s, exec_f, exec_t = exec_series(sbx, calls, gap, tmp)
        host_f = host_series(calls, gap, tmp)
    print(f"{calls} sequential run_code calls of each program, interleaved, {gap} s apart; ms; load {os.getloadavg()[0]:.2f}")
    for name, (lang, code, _) in PROGRAMS.items():
        print(f"\nprogram {name}: {lang} {code!r}")
        print(f"{'mode':24} {'start p50':>10} {'start p99':>10} {'stamp p50':>10} {'stamp p99':>10} {'call p50':>10} {'call p99':>10}")
        for mode, s, f_, t in (("mcp cold (--pool 0)", cold_s, cold_f, cold_t), ("mcp pooled (--pool 2)", pool_s, pool_f, pool_t),
                               ("sbx exec (cold)", exec_s, exec_f, exec_t)):
            print(f"{mode:24} {pct(s[name], 50):10.2f} {pct(s[name], 99):10.2f} {pct(f_[name], 50):10.2f} {pct(f_[name], 99):10.2f}"
                  f" {pct(t[name], 50):10.2f} {pct(t[name], 99):10.2f}")
        print(f"{'host, no sandbox':24} {'':10} {'':10} {pct(host_f[name], 50):10.2f} {pct(host_f[name], 99):10.2f}"
              "   (the program's own start: the stamp's floor)")
        print(f"start latency (request -> execve) p50 pooled/cold mcp: {pct(pool_s[name], 50) / pct(cold_s[name], 50):.3f}, "
              f"pooled/cold sbx exec: {pct(pool_s[name], 50) / pct(exec_s[name], 50):.3f} (target <= 0.25); "
              f"p99 {pct(pool_s[name], 99) / pct(cold_s[name], 99):.3f}, {pct(pool_s[name], 99) / pct(exec_s[name], 99):.3f}")
        print(f"first stamp p50 pooled/cold: {pct(pool_f[name], 50) / pct(cold_f[name], 50):.3f}; above the floor: "
              f"{(pct(pool_f[name], 50) - pct(host_f[name], 50)) / (pct(cold_f[name], 50) - pct(host_f[name], 50)):.3f}")
        print(f"call overhead p50 pooled/cold mcp: {pct(pool_t[name], 50) / pct(cold_t[name], 50):.3f}; pooled mcp / cold sbx exec: "
              f"{pct(pool_t[name], 50) / pct(exec_t[name], 50):.3f}")
    print(f"\npooled calls served by the pool: {hits}/{2 * calls} (of which {waited} waited for their sandbox)")
    print("pooled hand-out legs (records), p50/p99 ms: " + ", ".join(
        f"{k} {pct(v, 50):.3f}/{pct(v, 99):.3f}" for k, v in legs.items()))


if __name__ == "__main__":
    main()
