#!/usr/bin/env python3
"""Usage: bench/template_pss.py [SBX_BINARY] [--pool N] [--preload MOD,...]   (build/sbx, 4, numpy)

What an idle prepared sandbox costs in memory (issue 34's target: <= 2 MiB proportional set size
with templates). Starts `sbx mcp --pool N` under a profile with
"warm": {"interpreter": "python3", "preload": [...], "mode": "template"}, waits until its N forks
made ahead are ready (man sbx-mcp, Templates: forks made ahead), then reads each process's Pss
from /proc/PID/smaps_rollup: the template (its worker, its init, the process that waits for the
driver and the driver), the server's fork
server (which forks every worker, one per server), and for each fork
its pooled worker (`sbx mcp-worker`, which will supervise the call) and the two processes of the
call (its pid 1, which the driver forked, and the program waiting for its call, which pid 1 forked).
Printed: the template's total, each fork's total and parts, and the per-fork mean, with the part
of it each fork holds alone (Private_Clean + Private_Dirty: the pages mapped by that process
alone; for a Python process forked from the template, those it wrote after its fork). Run as root
(or as the user sbx runs as) to read every process's smaps_rollup."""
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcp_pool  # noqa: E402
import mcp_warm  # noqa: E402


def rollup_kib(pid, keys):
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in keys:
                    total += int(v.split()[0])
    except OSError:
        return 0
    return total


def pss_kib(pid):
    return rollup_kib(pid, ("Pss",))


def private_kib(pid):
    # What the process holds alone: the pages it wrote after its fork (and its own mappings).
    return rollup_kib(pid, ("Private_Clean", "Private_Dirty"))


def children(pid):
    out = []
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def started(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def comm(pid):
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


def main(argv):
    sbx, opts = mcp_pool.parse_args(argv, pool=4, preload=["numpy"])
    pool = opts["pool"]
    tmp = tempfile.mkdtemp(prefix="sbx-bench-pss-")
    profile = os.path.join(tmp, "template.json")
    with open(profile, "w") as f:
        json.dump({"limits": mcp_warm.LIMITS, "network": {"mode": "none"},
                   "warm": {"interpreter": "python3", "preload": opts["preload"], "mode": "template"}}, f)
    m = mcp_warm.Mcp(sbx, os.path.join(tmp, "state"), pool, profile)
    deadline = time.monotonic() + 60
    while True:
        # The server's children: its fork server (one per server, runtime/server/fork_server.hpp)
        # and the workers it forked, the template's host worker first.
        kids = children(m.p.pid)
        forkserver = [k for k in kids if cmdline(k).startswith(b"sbx mcp-fork-server")][:1]
        workers = sorted((k for k in kids if k not in forkserver), key=started)
        if not workers:
            time.sleep(0.5)
            continue
        host, pooled = workers[0], workers[1:]
        # The template's driver: host worker -> init -> python3 (the sandbox's program, which waits)
        # -> python3 (the template, pid 1 of its own pid namespace: warm_template.py,
        # _pid_no_call_has); each fork made ahead is one of its children (the call's pid 1) with
        # the program below it.
        chain = [host]
        while children(chain[-1]) and len(chain) < 4:
            chain.append(sorted(children(chain[-1]), key=started)[0])
        driver = chain[-1]
        forks = [[p] + children(p) for p in children(driver)]
        if len(pooled) >= pool and len(forks) >= pool and all(len(f) == 2 for f in forks):
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"template_pss.py: {len(forks)} of {pool} forks ready after 60 s")
        time.sleep(0.5)
    time.sleep(1)  # settled: each fork's program has reseeded and waits
    template = sum(pss_kib(p) for p in chain)
    print(f"sbx mcp --pool {pool}, template preloading {', '.join(opts['preload'])}: Pss in KiB")
    print(f"  template (worker, init, waiter, driver): {template}  ({' + '.join(str(pss_kib(p)) for p in chain)})")
    if forkserver:
        print(f"  the server's fork server: {pss_kib(forkserver[0])} (one per server, not per fork)")
    totals, privates = [], []
    for w, f in zip(pooled, forks):
        parts = [pss_kib(w)] + [pss_kib(p) for p in f]
        own = [private_kib(p) for p in [w] + f]
        totals.append(sum(parts))
        privates.append(sum(own))
        print(f"  fork: {sum(parts):6}  (worker {parts[0]}, pid 1 {parts[1]}, program {parts[2]}; "
              f"private {' + '.join(map(str, own))})")
    print(f"  per idle fork, mean: {sum(totals) / len(totals) / 1024:.2f} MiB "
          f"(of which its own: {sum(privates) / len(privates) / 1024:.2f} MiB)")
    m.close()
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
