#!/usr/bin/env python3
"""Usage: bench/mcp_warm.py [SBX_BINARY] [--calls N] [--gap SECONDS] [--preload MOD,...]
                                                           (default: build/sbx, 30, 0.4, numpy)

A Python `run_code` call that uses a library, through `sbx mcp`, three ways in ONE run (calls
interleaved, so that the ratios compare like with like on a noisy machine):

  cold    --pool 0: a sandbox made for the call, python3 started in it, the import at the call
  pooled  --pool 2: the sandbox built ahead, python3 and the import at the call
  warm    --pool 2 under a profile with "warm": {"interpreter": "python3", "preload": [...]}:
          the sandbox built ahead and python3 started in it with the modules imported
          (man sbx-mcp, Prepared interpreters)
  template  the same key with "mode": "template", --pool 2: every call a copy-on-write fork of
          one prepared interpreter, made ahead of the call (man sbx-mcp, Templates)
  host    the same program run by python3 directly, no sandbox, no sbx (the floor of cold)

The program imports the preloads, draws random numbers from each generator it seeded (Python's
random; numpy's when numpy is preloaded) and prints them. Measured: request written -> response
read (what an agent waits), p50 and p99 in ms, and the ratio to cold; and the start: request
written -> the call's first line of code (it prints time.time_ns()). Each warm call's record must
say pool.hit with pool.warm, each template call's sandbox.made_by "template", else the script
says how many were not. Every call's
printed numbers must differ (each interpreter seeded itself): the script fails otherwise.
Between two calls it waits --gap seconds so that the pool has refilled."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMITS = {"timeout": "30s", "memory": "1G", "pids": 64, "output_limit": "16M", "tmp_size": "64M"}


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcp_pool  # noqa: E402  (its Mcp client and pct)

pct = mcp_pool.pct


class Mcp(mcp_pool.Mcp):
    def __init__(self, sbx, state, pool, profile):
        super().__init__(sbx, state, pool, ["--profile", profile])
        self.state = state

    def call(self, arguments):
        """Request written -> response read, in ms, the response, and the realtime clock (ns) when
        the request was written."""
        t0, t1, m = self.request("tools/call", {"name": "run_code", "arguments": arguments})
        return (t1 - t0) / 1e6, m, t0

    def records(self):
        with open(os.path.join(self.state, "traces", "ledger.jsonl"), "rb") as f:
            return [json.loads(line)["record"] for line in f]


def main(argv):
    sbx, opts = mcp_pool.parse_args(argv, calls=30, gap=0.4, preload=["numpy"])
    calls, gap, preload = opts["calls"], opts["gap"], opts["preload"]
    code = "import time\nprint(time.time_ns())\nimport random\n" + "".join(f"import {m}\n" for m in preload)
    code += "print(random.random()" + (", numpy.random.rand()" if "numpy" in preload else "") + ")\n"
    tmp = tempfile.mkdtemp(prefix="sbx-bench-warm-")
    profiles = {}
    for name, warm in (("plain", None), ("warm", {"interpreter": "python3", "preload": preload}),
                       ("template", {"interpreter": "python3", "preload": preload, "mode": "template"})):
        profiles[name] = os.path.join(tmp, name + ".json")
        with open(profiles[name], "w") as f:
            json.dump({"limits": LIMITS, "network": {"mode": "none"}, **({"warm": warm} if warm else {})}, f)
    modes = {"cold": Mcp(sbx, os.path.join(tmp, "cold"), 0, profiles["plain"]),
             "pooled": Mcp(sbx, os.path.join(tmp, "pooled"), 2, profiles["plain"]),
             "warm": Mcp(sbx, os.path.join(tmp, "warm"), 2, profiles["warm"]),
             "template": Mcp(sbx, os.path.join(tmp, "template"), 2, profiles["template"])}
    time.sleep(2)  # the pools are built (and the warm one's preloads imported)
    script = os.path.join(tmp, "main.py")
    with open(script, "w") as f:
        f.write(code)
    took = {m: [] for m in list(modes) + ["host"]}
    started = {m: [] for m in modes}
    printed = []
    for _ in range(calls):
        for name, m in modes.items():
            ms, resp, wall = m.call({"language": "python", "code": code})
            out = resp["result"]["structuredContent"]
            if out.get("status") != "ok":
                raise SystemExit(f"mcp_warm.py: a {name} call failed: {json.dumps(out)[:400]}")
            took[name].append(ms)
            first, _, rest = out["stdout"].partition("\n")
            started[name].append((int(first) - wall) / 1e6)
            printed.append(rest)
            time.sleep(gap)
        t0 = time.monotonic()
        subprocess.run(["/usr/bin/python3", script], check=True, stdout=subprocess.DEVNULL)
        took["host"].append((time.monotonic() - t0) * 1000)
    not_warm = sum(1 for r in modes["warm"].records() if not (r["pool"].get("hit") and "warm" in r["pool"]))
    not_forked = sum(1 for r in modes["template"].records() if r["sandbox"]["made_by"] != "template")
    # Forked at the call, not ahead of it (man sbx-mcp, Templates: forks made ahead).
    on_demand = sum(1 for r in modes["template"].records() if not r["pool"].get("hit"))
    for m in modes.values():
        m.close()
    shutil.rmtree(tmp, ignore_errors=True)
    if len(set(printed)) != len(printed):
        raise SystemExit("mcp_warm.py: two calls printed the same random numbers")
    print(f"run_code python importing {', '.join(preload)}: {calls} calls per mode, request -> response (ms)")
    cold50 = pct(took["cold"], 50)
    for name, xs in took.items():
        start = (f"  start p50 {pct(started[name], 50):6.2f} p99 {pct(started[name], 99):6.2f}"
                 if name in started else "")
        print(f"  {name:8} p50 {pct(xs, 50):7.1f}  p99 {pct(xs, 99):7.1f}  p50/cold {pct(xs, 50) / cold50:5.2f}{start}")
    print(f"  warm calls not served by a prepared interpreter: {not_warm} of {calls}")
    print(f"  template calls not forked from the template: {not_forked} of {calls}, "
          f"forked at the call rather than ahead: {on_demand}")
    print(f"  all {len(printed)} calls printed distinct random numbers")


if __name__ == "__main__":
    main(sys.argv[1:])
