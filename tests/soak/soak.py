#!/usr/bin/env python3
"""Soak and kill test of sbx (`make soak`; not part of `make test` or CI).

Runs many sandboxes, some in parallel, kills sbx with SIGKILL or SIGTERM at random moments (half of
the kills aimed at the first milliseconds, where init is cloned and its id map written), drives an
`sbx mcp` server with calls of which some are cancelled while they run, and then checks what must
hold whatever the timing:

  orphans        no process of a run outlives its sbx: after sbx is gone, its stdout and stderr
                 reach EOF (nothing holds them) and no process with the run's tag remains
  records        every run that ended on its own or by a SIGTERM that sbx handled has exactly one
                 record in the ledger (a SIGKILL may leave none); every MCP call cancelled while
                 running has one too
  results        no result without a record: every run that printed its result and exited 0, every
                 `sbx exec` that printed a result, every MCP call answered, has its record
  ledger         `sbx trace verify` passes (a torn tail of an append killed midway is reported)
  gc             after `sbx gc`, nothing is left in <state>/blobs/tmp

It prints one line per fault found and a summary of counts; exit 0 when every invariant held, 1 when
one did not, 2 on bad usage. It stops by itself: each run has a timeout, and --max-seconds bounds
the whole soak (jobs not started by then are counted as skipped). Processes it finds orphaned are
killed (they are its own runs' descendants) after being counted.

The defaults finish in about five minutes on two cores. The figures of issue 30 (10,000 runs,
1,320 SIGKILLs, 990 SIGTERMs, 300 concurrent runs, 2,000 MCP calls with cancellations):

    tests/soak/soak.py --sbx build/sbx --runs 10000 --kills 1320 --terms 990 \\
        --concurrency 300 --mcp-calls 2000 --mcp-cancels 145 --max-seconds 14400

Run it as root and as an unprivileged user (e.g. `sudo -u sbxtest tests/soak/soak.py ...`) for the
rootless paths. See tests/soak/README.md.
"""
import argparse
import concurrent.futures
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

RUN_TIMEOUT = 60.0       # seconds one run may take before it counts as hung and is killed
EOF_GRACE = 5.0          # seconds a killed sbx's pipes have to reach EOF
ORPHAN_GRACE = 5.0       # seconds its processes have to be gone


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sbx", default=os.environ.get("SBX_BIN", "build/sbx"), help="the sbx binary (default: build/sbx)")
    p.add_argument("--runs", type=int, default=300, help="sbx processes started in all, kills included (default 300)")
    p.add_argument("--kills", type=int, default=60, help="of the runs, how many get a SIGKILL at a random moment (default 60)")
    p.add_argument("--terms", type=int, default=40, help="of the runs, how many get a SIGTERM at a random moment (default 40)")
    p.add_argument("--exec-share", type=float, default=0.2,
                   help="share of the other runs made with `sbx exec` instead of `sbx run` (default 0.2)")
    p.add_argument("--concurrency", type=int, default=4, help="runs at once (default 4)")
    p.add_argument("--mcp-calls", type=int, default=40, help="run_code calls to one `sbx mcp` server (default 40)")
    p.add_argument("--mcp-cancels", type=int, default=10, help="of those, how many are cancelled while running (default 10)")
    p.add_argument("--max-seconds", type=float, default=600, help="stop starting jobs after this long (default 600)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: time; printed)")
    p.add_argument("--state-dir", default=None, help="sbx state dir to use (default: a fresh temporary one, removed after)")
    p.add_argument("--keep", action="store_true", help="keep the temporary state dir")
    p.add_argument("--verbose", action="store_true", help="print each job as it ends")
    a = p.parse_args(argv)
    if a.kills + a.terms > a.runs or min(a.runs, a.kills, a.terms, a.concurrency - 1, a.mcp_calls, a.mcp_cancels) < 0:
        p.error("need 0 <= kills + terms <= runs, concurrency >= 1, counts >= 0")
    if a.mcp_cancels > a.mcp_calls:
        p.error("--mcp-cancels must not exceed --mcp-calls")
    if not (0 <= a.exec_share <= 1):
        p.error("--exec-share is a share between 0 and 1")
    return a


class Soak:
    def __init__(self, args):
        self.a = args
        self.sbx = os.path.abspath(args.sbx)
        self.rng = random.Random(args.seed)
        self.lock = threading.Lock()
        self.faults = []            # one line each
        self.counts = {}
        self.jobs = []              # finished jobs: dicts
        self.tmp = tempfile.mkdtemp(prefix="sbx-soak-")
        os.chmod(self.tmp, 0o755)
        self.state = args.state_dir or os.path.join(self.tmp, "state")
        self.deadline = time.monotonic() + args.max_seconds

    # --- bookkeeping --------------------------------------------------------------------------

    def count(self, what, n=1):
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + n

    def fault(self, kind, text):
        with self.lock:
            self.faults.append(f"{kind}: {text}")
            self.counts["fault:" + kind] = self.counts.get("fault:" + kind, 0) + 1
        print(f"FAULT {kind}: {text}", flush=True)

    def sbx_cmd(self, *args):
        return [self.sbx, "--state-dir", self.state] + list(args)

    # --- processes ----------------------------------------------------------------------------

    @staticmethod
    def holders(inodes):
        """pids of processes holding a pipe with one of `inodes` open."""
        want = {f"pipe:[{i}]" for i in inodes}
        out = set()
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == os.getpid():
                continue
            try:
                for fd in os.listdir(f"/proc/{d}/fd"):
                    try:
                        if os.readlink(f"/proc/{d}/fd/{fd}") in want:
                            out.add(int(d))
                            break
                    except OSError:
                        pass
            except OSError:
                pass
        return out

    @staticmethod
    def tagged(tag):
        """pids of processes whose command line holds `tag` (the run's program carries it)."""
        out = set()
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == os.getpid():
                continue
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if tag.encode() in f.read():
                        out.add(int(d))
            except OSError:
                pass
        return out

    def reap_orphans(self, what, pids):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.count("orphans killed", len(pids))

    # --- one sbx run ----------------------------------------------------------------------------

    def job(self, i, kind):
        if time.monotonic() > self.deadline:
            self.count("skipped (time)")
            return
        tag = "soak%06d%04d" % (i, self.rng.randrange(10000))
        nap = "0.%03d%s" % (self.rng.randrange(20, 400), tag[-4:])  # unique: find the program by it
        code = f"echo START-{tag}; sleep {nap}; echo DONE-{tag}"
        use_exec = kind == "run" and self.rng.random() < self.a.exec_share
        if use_exec:
            cmd = self.sbx_cmd("exec")
            # The code lives in a blob; a file's name is in the record's mount list: the tag.
            stdin_data = json.dumps({"language": "sh", "code": code, "files": {tag + ".txt": tag}}).encode()
            kind = "exec"
        else:
            cmd = self.sbx_cmd("run", "--", "sh", "-c", code, tag)
            stdin_data = None
        # Half of the signals land in the first 20 ms (parsing, clone, the id map), half anywhere
        # in the run (start-up, the program's sleep, the record).
        delay = None
        if kind in ("kill", "term"):
            delay = self.rng.uniform(0, 0.02) if self.rng.random() < 0.5 else self.rng.uniform(0, 0.05 + float(nap[:5]))
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        inodes = [os.fstat(p.stdout.fileno()).st_ino, os.fstat(p.stderr.fileno()).st_ino]
        if stdin_data is not None:
            try:
                p.stdin.write(stdin_data)
                p.stdin.close()
            except OSError:
                pass
            p.stdin = None  # written and closed: communicate() below must not flush it again
        sig_sent = None
        if delay is not None:
            time.sleep(delay)
            sig = signal.SIGKILL if kind == "kill" else signal.SIGTERM
            if p.poll() is None:
                p.send_signal(sig)
                sig_sent = sig
            else:
                self.count(f"{kind}: sbx already gone")
        try:
            rc = p.wait(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.fault("hung", f"{kind} {tag}: sbx still running after {RUN_TIMEOUT:.0f}s")
            p.kill()
            rc = p.wait()
        # sbx is gone: its pipes must reach EOF, and nothing of its sandbox may stay.
        try:
            out, err = p.communicate(timeout=EOF_GRACE)
        except subprocess.TimeoutExpired:
            held = self.holders(inodes)
            self.fault("orphan", f"{kind} {tag} (rc {rc}): stdout/stderr held open {EOF_GRACE:.0f}s after sbx died, "
                                 f"by pids {sorted(held)}")
            self.reap_orphans(tag, held)
            out, err = p.communicate()
        end = time.monotonic() + ORPHAN_GRACE
        left = self.tagged(nap)
        while left and time.monotonic() < end:
            time.sleep(0.05)
            left = self.tagged(nap)
        if left:
            self.fault("orphan", f"{kind} {tag} (rc {rc}): sandbox processes {sorted(left)} outlived sbx")
            self.reap_orphans(tag, left)
        out = out.decode(errors="replace")
        res = {"i": i, "tag": tag, "kind": kind, "rc": rc, "signal": sig_sent,
               "started": f"START-{tag}" in out, "done": f"DONE-{tag}" in out,
               "stderr": err.decode(errors="replace")[-300:]}
        if kind == "exec":
            # A result is the JSON document sbx exec prints (its "stdout" member holds DONE-tag).
            try:
                doc = json.loads(out)
            except ValueError:
                doc = None
            res["result"] = isinstance(doc, dict) and doc.get("status") is not None
            res["run_id"] = doc.get("run_id") if isinstance(doc, dict) else None
        with self.lock:
            self.jobs.append(res)
        self.count(f"{kind}: rc {rc}")
        if self.a.verbose:
            print(f"{kind:5} {tag} rc={rc} sig={sig_sent} done={res['done']}", flush=True)

    # --- MCP --------------------------------------------------------------------------------------

    def mcp(self):
        n, cancels = self.a.mcp_calls, self.a.mcp_cancels
        if n == 0:
            return
        err = open(os.path.join(self.tmp, "mcp-stderr"), "wb")
        p = subprocess.Popen(self.sbx_cmd("mcp"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        buf = [b""]
        answered = {}

        def send(msg):
            p.stdin.write(json.dumps(msg).encode() + b"\n")
            p.stdin.flush()

        def read_until(pred, timeout):
            end = time.monotonic() + timeout
            while True:
                while b"\n" in buf[0]:
                    line, buf[0] = buf[0].split(b"\n", 1)
                    m = json.loads(line)
                    if isinstance(m, dict) and "id" in m and "method" not in m:
                        answered[m["id"]] = m
                if pred():
                    return True
                left = end - time.monotonic()
                if left <= 0:
                    return False
                r, _, _ = select.select([p.stdout], [], [], left)
                if r:
                    chunk = os.read(p.stdout.fileno(), 1 << 20)
                    if not chunk:
                        return pred()
                    buf[0] += chunk

        send({"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "soak", "version": "1"}}})
        if not read_until(lambda: 0 in answered, 30):
            self.fault("mcp", "no answer to initialize")
            p.kill()
            return
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        to_cancel = set(self.rng.sample(range(1, n + 1), cancels))
        self.mcp_calls = {}  # id -> (tag, cancelled)
        for cid in range(1, n + 1):
            if time.monotonic() > self.deadline:
                self.count("mcp: skipped (time)")
                continue
            tag = "soakmcp%05d%04d" % (cid, self.rng.randrange(10000))
            cancel = cid in to_cancel
            # A cancelled call sleeps long (it must be cancelled while running); the others briefly.
            nap = ("3%s.5" if cancel else "0.1%s") % tag[-4:]
            send({"jsonrpc": "2.0", "id": cid, "method": "tools/call",
                  "params": {"name": "run_code", "arguments": {"language": "sh", "code": f"echo {tag}; sleep {nap}",
                                                               "files": {tag + ".txt": tag}}}})
            self.mcp_calls[cid] = (tag, cancel)
            if cancel:
                end = time.monotonic() + 30
                while not self.tagged(nap) and time.monotonic() < end:
                    time.sleep(0.01)
                if not self.tagged(nap):
                    self.fault("mcp", f"call {cid} ({tag}) never started running")
                time.sleep(self.rng.uniform(0, 0.3))
                send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": cid, "reason": "soak"}})
                end = time.monotonic() + ORPHAN_GRACE
                while self.tagged(nap) and time.monotonic() < end:
                    time.sleep(0.02)
                left = self.tagged(nap)
                if left:
                    self.fault("orphan", f"mcp call {cid} ({tag}): sandbox {sorted(left)} alive {ORPHAN_GRACE:.0f}s after its cancel")
                    self.reap_orphans(tag, left)
            else:
                if not read_until(lambda: cid in answered, RUN_TIMEOUT):
                    self.fault("mcp", f"call {cid} ({tag}): no response in {RUN_TIMEOUT:.0f}s")
        ping = n + 1
        send({"jsonrpc": "2.0", "id": ping, "method": "ping"})
        if not read_until(lambda: ping in answered, 30):
            self.fault("mcp", "no answer to the closing ping")
        for cid, (tag, cancel) in self.mcp_calls.items():
            if cancel and cid in answered:
                self.count("mcp: cancelled call answered anyway (finished first)")
        self.mcp_answered = {cid for cid in answered if cid in self.mcp_calls}
        p.stdin.close()
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.fault("mcp", "sbx mcp did not exit within 60s of stdin's EOF")
            p.kill()
            p.wait()
        err.close()
        self.count("mcp: calls", len(self.mcp_calls))
        self.count("mcp: cancelled", sum(1 for _, c in self.mcp_calls.values() if c))

    # --- the checks -------------------------------------------------------------------------------

    def ledger(self):
        """{tag: number of records naming it}, run ids, and unreadable lines."""
        path = os.path.join(self.state, "traces", "ledger.jsonl")
        by_text = []
        run_ids = set()
        bad = 0
        if os.path.exists(path):
            with open(path, "rb") as f:
                for line in f.read().split(b"\n"):
                    if not line:
                        continue
                    try:
                        e = json.loads(line)
                    except ValueError:
                        bad += 1
                        continue
                    rec = e.get("record", {})
                    text = json.dumps(rec)
                    # An exec or MCP call's code and files are kept as a blob, not in the record.
                    for b in rec.get("blobs", []) if isinstance(rec, dict) else []:
                        if isinstance(b, dict) and b.get("role") == "exec_request" and isinstance(b.get("sha256"), str):
                            h = b["sha256"]
                            try:
                                with open(os.path.join(self.state, "blobs", "sha256", h[:2], h), "rb") as bf:
                                    text += bf.read(1 << 20).decode(errors="replace")
                            except OSError:
                                pass
                    by_text.append(text)
                    run_ids.add(e.get("run_id"))
        return by_text, run_ids, bad

    def check(self):
        texts, run_ids, bad = self.ledger()
        self.count("ledger: records", len(texts))
        if bad:
            self.count("ledger: unreadable lines", bad)

        def records_for(tag):
            return sum(1 for t in texts if tag in t)

        for j in self.jobs:
            n = records_for(j["tag"])
            if j["kind"] == "exec":
                # A response that names a run is a result: that run must be in the ledger, once.
                if j.get("result") and j.get("run_id"):
                    self.count("exec: results printed")
                    if j["run_id"] not in run_ids or n == 0:
                        self.fault("result-without-record", f"exec {j['tag']}: result printed (rc {j['rc']}), "
                                                            f"run {j['run_id']} not in the ledger")
                elif j["signal"] is None:
                    self.fault("failed", f"exec {j['tag']}: rc {j['rc']}, no result: {j['stderr']!r}")
                if n > 1:
                    self.fault("duplicate-record", f"exec {j['tag']}: {n} records")
                continue
            if n > 1:
                self.fault("duplicate-record", f"{j['kind']} {j['tag']}: {n} records")
            if j["rc"] == 0 and j["done"] and n == 0:
                self.fault("result-without-record", f"{j['kind']} {j['tag']}: exit 0 and its output, no record")
            if j["kind"] == "run" and j["signal"] is None and not (j["rc"] == 0 and j["done"]):
                self.fault("failed", f"run {j['tag']}: rc {j['rc']}: {j['stderr']!r}")
            if j["kind"] == "run" and n == 0:
                self.fault("record-lost", f"run {j['tag']}: ended on its own (rc {j['rc']}), no record")
            if j["kind"] == "term" and j["signal"] is not None:
                if j["rc"] == -signal.SIGTERM:
                    self.count("term: sbx died of it before its handlers (no record expected)")
                elif n == 0:
                    self.fault("record-lost", f"SIGTERM {j['tag']}: sbx handled it (rc {j['rc']}), no record")
            if j["kind"] == "kill" and j["signal"] is not None:
                self.count("kill: left a record" if n else "kill: left no record")
        for cid, (tag, cancel) in getattr(self, "mcp_calls", {}).items():
            n = records_for(tag)
            answered = cid in getattr(self, "mcp_answered", set())
            if n == 0 and (answered or cancel):
                kind = "result-without-record" if answered else "record-lost"
                self.fault(kind, f"mcp call {cid} ({tag}, {'cancelled' if cancel else 'answered'}): no record")
            if n > 1:
                self.fault("duplicate-record", f"mcp call {cid} ({tag}): {n} records")
        v = subprocess.run(self.sbx_cmd("trace", "verify"), capture_output=True, text=True, timeout=600)
        self.count("ledger: verify rc %d" % v.returncode)
        if v.returncode != 0:
            self.fault("ledger", "sbx trace verify: exit %d: %s" % (v.returncode, (v.stdout + v.stderr).strip()[-300:]))
        g = subprocess.run(self.sbx_cmd("gc"), capture_output=True, text=True, timeout=600)
        if g.returncode != 0:
            self.fault("gc", "sbx gc: exit %d: %s" % (g.returncode, (g.stdout + g.stderr).strip()[-300:]))
        tmpdir = os.path.join(self.state, "blobs", "tmp")
        left = sorted(os.listdir(tmpdir)) if os.path.isdir(tmpdir) else []
        self.count("gc: blobs/tmp entries left", len(left))
        if left:
            self.fault("gc", f"{len(left)} file(s) left in blobs/tmp after sbx gc (e.g. {left[0]})")

    # --- the whole soak -------------------------------------------------------------------------

    def run(self):
        a = self.a
        kinds = ["kill"] * a.kills + ["term"] * a.terms + ["run"] * (a.runs - a.kills - a.terms)
        self.rng.shuffle(kinds)
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.concurrency)) as pool:
            futs = [pool.submit(self.job, i, k) for i, k in enumerate(kinds)]
            mcp = threading.Thread(target=self.mcp_guarded)
            mcp.start()
            for f in concurrent.futures.as_completed(futs):
                e = f.exception()
                if e:
                    self.fault("soak", f"job raised {e!r}")
            mcp.join()
        took = time.monotonic() - t0
        self.check()
        return took

    def mcp_guarded(self):
        try:
            self.mcp()
        except Exception as e:  # a fault of the soak itself: reported, never hidden
            self.fault("soak", f"mcp driver raised {e!r}")


def main(argv):
    a = parse_args(argv)
    if a.seed is None:
        a.seed = int(time.time())
    if not os.access(a.sbx, os.X_OK):
        print(f"soak: {a.sbx} is not an executable sbx (build it, or pass --sbx)", file=sys.stderr)
        return 2
    s = Soak(a)
    print(f"soak: seed {a.seed}, {a.runs} runs ({a.kills} SIGKILL, {a.terms} SIGTERM), concurrency {a.concurrency}, "
          f"{a.mcp_calls} MCP calls ({a.mcp_cancels} cancelled), state {s.state}, uid {os.getuid()}", flush=True)
    try:
        took = s.run()
    finally:
        if not a.keep and not a.state_dir:
            shutil.rmtree(s.tmp, ignore_errors=True)
    print(f"soak: {took:.0f}s")
    for k in sorted(s.counts):
        print(f"  {k}: {s.counts[k]}")
    if s.faults:
        print(f"soak: {len(s.faults)} fault(s); the first ones:")
        for f in s.faults[:20]:
            print("  " + f)
        return 1
    print("soak: every invariant held")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
