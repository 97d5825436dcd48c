#!/usr/bin/env python3
"""Usage: bench/call_path_counts.py SBX [SBX...] [--calls N] [--mode template|pool] [--preload MOD,...]
                                                                       (default: 5, template, json)

What a call's start costs in work rather than in time: the system calls, page faults and
context switches of every process on a call's path, from the request's write to the call's first
line, counted from a kernel trace. A count does not move with the machine's load or with a
hypervisor's stalls, which on some days are longer than the whole start (bench/README.md,
Spawn), so two binaries can be compared on a VM that cannot time them.

For each binary: one `sbx mcp --pool 2` under a profile with "warm": {"interpreter": "python3",
"preload": [...], "mode": MODE}, five calls to warm it, then N `run_code` calls (each prints one
line), 0.5 s apart, under `perf record -a -k CLOCK_MONOTONIC` with the events raw_syscalls:sys_enter,
sched:sched_switch, sched:sched_waking and exceptions:page_fault_user. A call's window opens
at the client's monotonic clock just before its request's write and closes at the program's first
write to fd 1 (a python3 process other than this script). Printed per binary: the medians over the
calls of the window's totals, and per process on the path (its comm and its role: the first
process each one woke), so that where a cut went shows. Needs root and perf (linux-perf)."""
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcp_warm  # noqa: E402

EVENTS = "raw_syscalls:sys_enter,sched:sched_switch,sched:sched_waking,exceptions:page_fault_user"


def parse(argv):
    binaries, opts, args = [], {"calls": 5, "mode": "template", "preload": ["json"]}, list(argv)
    while args:
        a = args.pop(0)
        if a == "--calls":
            opts["calls"] = int(args.pop(0))
        elif a == "--mode":
            opts["mode"] = args.pop(0)
        elif a == "--preload":
            opts["preload"] = [m for m in args.pop(0).split(",") if m]
        else:
            binaries.append(a)
    if not binaries or opts["mode"] not in ("template", "pool") or opts["calls"] < 1:
        raise SystemExit(__doc__)
    return binaries, opts


def record(sbx, opts, tmp):
    profile = os.path.join(tmp, "profile.json")
    with open(profile, "w") as f:
        json.dump({"limits": mcp_warm.LIMITS, "network": {"mode": "none"},
                   "warm": {"interpreter": "python3", "preload": opts["preload"], "mode": opts["mode"]}}, f)
    m = mcp_warm.Mcp(sbx, os.path.join(tmp, "state"), 2, profile)
    code = {"language": "python", "code": "print(1)\n"}
    try:
        time.sleep(3)
        for _ in range(5):
            m.call(code)
            time.sleep(0.3)
        data = os.path.join(tmp, "perf.data")
        perf = subprocess.Popen(["perf", "record", "-q", "-a", "-k", "CLOCK_MONOTONIC", "-o", data, "-e", EVENTS],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.5)  # perf's own start-up, out of the windows
        marks = []
        for _ in range(opts["calls"]):
            marks.append(time.clock_gettime_ns(time.CLOCK_MONOTONIC))
            _, resp, _ = m.call(code)
            if resp["result"]["structuredContent"].get("status") != "ok":
                raise SystemExit(f"call_path_counts.py: a call failed: {json.dumps(resp)[:400]}")
            time.sleep(0.5)
        perf.send_signal(signal.SIGINT)  # perf record ends with the signal's status: its data is what tells
        perf.wait(timeout=60)
        if not os.path.exists(data) or os.path.getsize(data) == 0:
            raise SystemExit(f"call_path_counts.py: perf record failed: {perf.stderr.read().decode()[:400]}")
    finally:
        m.close()
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,pid,time,event,trace"],
                         capture_output=True, text=True, check=True).stdout
    return marks, out.splitlines()


def events(lines):
    # (time in ns, comm, pid, event, rest); perf's own events left out.
    for line in lines:
        head, sep, rest = line.partition(": ")
        if not sep:
            continue
        parts = head.split()
        if len(parts) < 3 or parts[0] == "perf":
            continue
        try:
            t = round(float(parts[-1].rstrip(":")) * 1e9)
            pid = int(parts[-2])
        except ValueError:
            continue
        event, _, trace = rest.partition(": ")
        yield t, " ".join(parts[:-2]), pid, event.strip(), trace


def window(evs, start, me):
    """The events of one call: from `start` to the program's first write to fd 1."""
    out = []
    for ev in evs:
        t, comm, pid, event, trace = ev
        if t < start:
            continue
        out.append(ev)
        if (comm == "python3" and pid != me and event == "raw_syscalls:sys_enter"
                and trace.startswith("NR 1 (1,")):
            return out
    return None


def count(win, me):
    """Per process of the window: [comm, syscalls, faults, switches in, its place on the path]. The
    path is the chain of wake-ups from this script: the process it woke (the server) is 1, the
    first one that woke is 2 (the worker), and so on; a process no link woke is off the path (0)."""
    per, chain = {}, {me: 0}
    # Kernel threads (rcu, kworkers) are woken on the way but make no system call: never a link.
    user = {pid for t, comm, pid, event, trace in win if event == "raw_syscalls:sys_enter"}
    for t, comm, pid, event, trace in win:
        if event == "sched:sched_waking":
            woken = int(trace.split(" pid=", 1)[1].split()[0])
            comm_w = trace.split("comm=", 1)[1].split(" pid=")[0]
            if pid in chain and woken in user and woken not in chain and chain[pid] == max(chain.values()):
                chain[woken] = chain[pid] + 1
                per.setdefault(woken, [comm_w, 0, 0, 0])
            continue
        if event == "sched:sched_switch":
            nxt = trace.rsplit("next_pid=", 1)[-1].split()[0]
            if nxt.isdigit() and int(nxt) in per:
                per[int(nxt)][3] += 1
            continue
        p = per.setdefault(pid, [comm, 0, 0, 0])
        if event == "raw_syscalls:sys_enter":
            p[1] += 1
        elif event == "exceptions:page_fault_user":
            p[2] += 1
    # The program's first write closes the window: it is on the path even when it was woken by
    # a process off it.
    for pid, p in per.items():
        p.append(chain.get(pid, 0))
    return per


def main(argv):
    binaries, opts = parse(argv)
    if os.geteuid() != 0:
        raise SystemExit("call_path_counts.py: run as root (perf record -a)")
    me = os.getpid()
    print(f"{opts['mode']} calls, {', '.join(opts['preload'])} preloaded, {opts['calls']} per binary: "
          "medians from the request's write to the call's first line")
    for sbx in binaries:
        tmp = tempfile.mkdtemp(prefix="sbx-bench-counts-")
        try:
            marks, lines = record(sbx, opts, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        evs = list(events(lines))
        calls = [count(w, me) for w in (window(evs, s, me) for s in marks) if w]
        if not calls:
            raise SystemExit(f"call_path_counts.py: {sbx}: no call's first line found in the trace")
        med = lambda xs: statistics.median(xs) if xs else 0  # noqa: E731
        on_path = [[p for pid, p in c.items() if pid != me and p[4]] for c in calls]
        off_path = [[p for pid, p in c.items() if pid != me and not p[4]] for c in calls]
        tot = lambda rows, i: med([sum(p[i] for p in r) for r in rows])  # noqa: E731
        print(f"  {sbx}: on the path: syscalls {tot(on_path, 1):g}  faults {tot(on_path, 2):g}"
              f"  switches {tot(on_path, 3):g}   ({len(calls)} calls; off it: syscalls {tot(off_path, 1):g}"
              f"  faults {tot(off_path, 2):g})")
        for place in range(1, 1 + max(p[4] for r in on_path for p in r)):
            ps = [p for r in on_path for p in r if p[4] == place]
            print(f"      {place} {ps[0][0]:16} syscalls {med([p[1] for p in ps]):g}  faults {med([p[2] for p in ps]):g}"
                  f"  switches {med([p[3] for p in ps]):g}   (in {len(ps)} calls)")

if __name__ == "__main__":
    main(sys.argv[1:])
