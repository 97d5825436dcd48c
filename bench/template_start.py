#!/usr/bin/env python3
"""Usage: bench/template_start.py SBX [SBX...] [--calls N] [--gap SECONDS] [--preload MOD,...]
                                   [--mode template|pool]      (default: 40, 0.3, json, template)

A template call's start, binaries side by side: for each binary one `sbx mcp --pool 2` under a
profile with "warm": {"interpreter": "python3", "preload": [...], "mode": "template"} (man
sbx-mcp, Templates), and N `run_code` calls to each, interleaved (so that a noisy machine
disturbs all of them alike), --gap seconds apart so that each pool has refilled. Printed per
binary: the start (request written -> the call's first line of code, which prints
time.time_ns()), p50 and p90 in ms, the call (request written -> response read) p50, and how
many calls a fork made ahead served (pool.hit; the rest were forked at the call). --mode pool
compares warm pools ("mode": "pool": a prepared interpreter per pooled sandbox) the same way. For
one binary against another (before and after a change), or one alone; bench/mcp_warm.py compares
the four ways a call can start with one binary."""
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcp_pool  # noqa: E402
import mcp_warm  # noqa: E402


def main(argv):
    binaries, opts, args = [], {"calls": 40, "gap": 0.3, "preload": ["json"], "mode": "template"}, list(argv)
    while args:
        a = args.pop(0)
        if a.startswith("--") and a[2:] in opts and args:
            v = args.pop(0)
            opts[a[2:]] = [m for m in v.split(",") if m] if a == "--preload" else type(opts[a[2:]])(v)
        else:
            binaries.append(a)
    binaries = binaries or [os.path.join(mcp_pool.ROOT, "build", "sbx")]
    tmp = tempfile.mkdtemp(prefix="sbx-bench-template-")
    profile = os.path.join(tmp, "template.json")
    with open(profile, "w") as f:
        json.dump({"limits": mcp_warm.LIMITS, "network": {"mode": "none"},
                   "warm": {"interpreter": "python3", "preload": opts["preload"], "mode": opts["mode"]}}, f)
    servers = [mcp_warm.Mcp(b, os.path.join(tmp, str(i)), 2, profile) for i, b in enumerate(binaries)]
    time.sleep(3)  # each template built and its forks made ahead
    code = "import time\nprint(time.time_ns())\n"
    started = [[] for _ in servers]
    took = [[] for _ in servers]
    for _ in range(opts["calls"]):
        for i, m in enumerate(servers):
            ms, resp, wall = m.call({"language": "python", "code": code})
            out = resp["result"]["structuredContent"]
            if out.get("status") != "ok":
                raise SystemExit(f"template_start.py: a call failed: {json.dumps(out)[:400]}")
            started[i].append((int(out["stdout"].split()[0]) - wall) / 1e6)
            took[i].append(ms)
            time.sleep(opts["gap"])
    print(f"{opts['mode']} calls, {', '.join(opts['preload'])} preloaded, {opts['calls']} per binary (ms)")
    for i, m in enumerate(servers):
        hits = sum(1 for r in m.records() if r["pool"].get("hit") and (opts["mode"] == "template" or "warm" in r["pool"]))
        total = len(m.records())
        m.close()
        print(f"  {binaries[i]}: start p50 {mcp_pool.pct(started[i], 50):.2f} p90 {mcp_pool.pct(started[i], 90):.2f}"
              f"   call p50 {mcp_pool.pct(took[i], 50):.2f}   {'forked ahead' if opts['mode'] == 'template' else 'served warm'} {hits} of {total}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
