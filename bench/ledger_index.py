#!/usr/bin/env python3
"""Usage: bench/ledger_index.py [SBX_BINARY] [N]     (defaults: build/sbx, 100000)

`sbx trace ls` with filters over a ledger of N records, through the query index
(traces/index.sqlite). One real run's record is the template; N records are written as a valid
hash chain (distinct run ids and times, a mix of statuses), so the ledger is what N real runs leave
(about 7 KiB a record). Then, in a fresh state dir: the first `trace ls` (which builds the index
from the ledger), `trace verify` (the whole chain), and the medians of 20 runs each of
`trace ls --status timeout -n 20`, `trace ls --since <late time> --json`, `trace ls -n 20` and
`trace show <an old run id>`, and of 5 of `trace ls` (every run, each read back from its ledger
line): each is a whole sbx process, start-up included."""
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sbx = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/sbx")
n = int(sys.argv[2]) if len(sys.argv) > 2 else 100000
tmp = tempfile.mkdtemp()
env = dict(os.environ, SBX_STATE_DIR=os.path.join(tmp, "state"))
tf = os.path.join(tmp, "t.json")
subprocess.run([sbx, "run", "--trace-file", tf, "--", "/bin/true"], env=env, check=True,
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
template = json.load(open(tf))
os.remove(os.path.join(tmp, "state", "traces", "ledger.jsonl"))

statuses = ["ok"] * 8 + ["exit_nonzero", "timeout"]
prev = "0" * 64
t0 = time.monotonic()
with open(os.path.join(tmp, "state", "traces", "ledger.jsonl"), "wb") as f:
    for i in range(n):
        sec = 1_700_000_000 + i
        ts = time.strftime("%Y%m%dT%H%M%S", time.gmtime(sec))
        iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        run_id = f"{ts}.000Z-{i:08x}"
        template["run_id"] = run_id
        template["started_at"] = iso + ".000Z"
        template["result"]["status"] = statuses[i % len(statuses)]
        rec = json.dumps(template, separators=(",", ":"), sort_keys=True).encode()
        h = hashlib.sha256(f"sbx.ledger/v1\n{i + 1}\n{run_id}\n{prev}\n".encode() + rec).hexdigest()
        f.write(b'{"record":' + rec + f',"seq":{i + 1},"run_id":"{run_id}","prev":"{prev}","hash":"{h}"}}\n'.encode())
        prev = h
size = os.path.getsize(os.path.join(tmp, "state", "traces", "ledger.jsonl"))
print(f"ledger: {n} records, {size / 2**20:.0f} MiB, written in {time.monotonic() - t0:.1f} s")


def timed(args, runs=1):
    times = []
    for _ in range(runs):
        t = time.monotonic()
        r = subprocess.run([sbx] + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        times.append(time.monotonic() - t)
        if r.returncode != 0:
            sys.exit(f"{args}: exit {r.returncode}: {r.stderr.decode()}")
    return statistics.median(times) * 1000, r.stdout


ms, _ = timed(["trace", "ls", "-n", "1"])
print(f"first trace ls (builds the index from the ledger): {ms:.0f} ms")
ms, out = timed(["trace", "verify"])
print(f"trace verify (every record): {ms:.0f} ms: {out.decode().strip()}")
late = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(1_700_000_000 + n - 50))
old_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime(1_700_000_000 + 7)) + ".000Z-00000007"
for args in (["trace", "ls", "--status", "timeout", "-n", "20"], ["trace", "ls", "--since", late, "--json"],
             ["trace", "ls", "-n", "20"], ["trace", "show", old_id]):
    ms, out = timed(args, 20)
    print(f"{' '.join(args)}: median {ms:.1f} ms over 20 runs ({len(out.splitlines())} lines of output)")
# Every run listed is read back from its ledger line (man sbx-trace, trace reindex): a listing of
# all of them reads the whole ledger.
ms, out = timed(["trace", "ls"], 5)
print(f"trace ls (every run): median {ms:.0f} ms over 5 runs ({len(out.splitlines())} lines of output)")
subprocess.run(["rm", "-rf", tmp])
