#!/usr/bin/env python3
"""Usage: bench/mcp_throughput.py [SBX_BINARY] [--calls N] [--clients K] [--pool P] [--concurrent C]
                                  [--warm template]   (defaults: build/sbx, 1000, 2, 4, 2, none)

Sustained throughput of trivial calls (issue 34's target: 1,000 calls through one server, 2 clients,
>= 200 calls/s, each with its own durable record, `sbx trace verify` clean afterwards). K clients,
each an `sbx mcp --pool P --max-concurrent C` of its own on stdio (the transport's one client per
server) over ONE shared state dir, so every record goes to one ledger; each client keeps C
run_code calls (sh `true`) in flight until its share of N is done. Printed: calls/s over the whole
run (first request written -> last response read), the per-call latency p50/p99, how many calls the
pool served (from the records' pool.hit), then `sbx trace verify --json` of the ledger and its record count (must be N: each
call's record is durable before its response is written). With --warm template each server's profile has
"warm": {"interpreter": "python3", "preload": ["json"], "mode": "template"} and the calls are Python `pass`,
each a fork of the server's template (man sbx-mcp, Templates); each template's own record is in the ledger too."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcp_pool  # noqa: E402  (its argument parser, read_message and pct)


class Client:
    """One `sbx mcp` with up to `concurrent` requests in flight."""

    def __init__(self, sbx, state, pool, concurrent, profile=None):
        self.p = subprocess.Popen([sbx, "--state-dir", state, "mcp", "--pool", str(pool), "--max-concurrent",
                                   str(concurrent)] + (["--profile", profile] if profile else []),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.code = {"language": "python", "code": "pass"} if profile else {"language": "sh", "code": "true"}
        self.buf, self.next_id, self.sent = b"", 0, {}
        self.send("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                 "clientInfo": {"name": "bench", "version": "1"}})
        self.receive()
        self.p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        self.p.stdin.flush()

    def send(self, method, params):
        self.next_id += 1
        self.sent[self.next_id] = time.monotonic_ns()
        self.p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                                       "params": params}).encode() + b"\n")
        self.p.stdin.flush()

    def receive(self):
        """The next response: (latency in ms, the message)."""
        while True:
            m = mcp_pool.read_message(self, timeout=120)
            if "id" in m and m["id"] in self.sent:
                return (time.monotonic_ns() - self.sent.pop(m["id"])) / 1e6, m

    def run(self, calls, concurrent, out):
        done = 0
        call = {"name": "run_code", "arguments": self.code}
        while done < calls:
            while len(self.sent) < concurrent and done + len(self.sent) < calls:
                self.send("tools/call", call)
            ms, m = self.receive()
            res = m.get("result", {})
            ok = not res.get("isError") and (res.get("structuredContent") or {}).get("exit_code") == 0
            out.append((ms, ok))
            done += 1

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=120)


def main(argv):
    sbx, o = mcp_pool.parse_args(argv, calls=1000, clients=2, pool=4, concurrent=2, warm="")
    tmp = tempfile.mkdtemp(prefix="sbx-throughput-")
    try:
        state = os.path.join(tmp, "state")
        profile = None
        if o["warm"] == "template":
            profile = os.path.join(tmp, "template.json")
            with open(profile, "w") as f:
                json.dump({"network": {"mode": "none"},
                           "warm": {"interpreter": "python3", "preload": ["json"], "mode": "template"}}, f)
        elif o["warm"]:
            raise SystemExit("mcp_throughput.py: --warm takes only 'template'")
        clients = [Client(sbx, state, o["pool"], o["concurrent"], profile) for _ in range(o["clients"])]
        time.sleep(1.0)  # each pool built before the clock starts
        shares = [o["calls"] // o["clients"] + (1 if i < o["calls"] % o["clients"] else 0) for i in range(o["clients"])]
        results = [[] for _ in clients]
        threads = [threading.Thread(target=c.run, args=(n, o["concurrent"], r)) for c, n, r in zip(clients, shares, results)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        for c in clients:
            c.close()
        allr = [x for r in results for x in r]
        lat = [ms for ms, _ in allr]
        ok = sum(1 for _, good in allr if good)
        # The pool's hits, from the records (a pooled call's record says pool.hit).
        with open(os.path.join(state, "traces", "ledger.jsonl"), "rb") as f:
            hits = sum(1 for line in f if (json.loads(line)["record"].get("pool") or {}).get("hit"))
        what = "python 'pass', forked from a template" if profile else "sh 'true'"
        print(f"{len(allr)} run_code calls ({what}), {o['clients']} clients x --max-concurrent {o['concurrent']}, "
              f"--pool {o['pool']}; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}")
        print(f"  {len(allr) / wall:.1f} calls/s over {wall:.2f} s (target >= 200)   latency p50 {mcp_pool.pct(lat, 50):.1f} ms, "
              f"p99 {mcp_pool.pct(lat, 99):.1f} ms   ok {ok}/{len(allr)}   served by the pool {hits}")
        v = subprocess.run([sbx, "--state-dir", state, "trace", "verify", "--json"], capture_output=True, text=True)
        try:
            vj = json.loads(v.stdout)
        except ValueError:
            vj = {"output": v.stdout.strip() or v.stderr.strip()}
        print(f"  sbx trace verify: exit {v.returncode}, intact {vj.get('intact')}, records {vj.get('records')}, "
              f"problem {vj.get('problem')}")
        templates = len(clients) if profile else 0  # each template's own record, written at its server's end
        good = ok == len(allr) and v.returncode == 0 and vj.get("records") == len(allr) + templates
        return 0 if good else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
