#!/bin/sh
# Runs INSIDE the qemu guest (tests/vm/run.sh boots it): real cgroup v2 with memory/pids/cpu.
# usage: guest-tests.sh BUILD_DIR [ONLY]  (host paths work unchanged: the host's / is the guest's)
#   ONLY: run only the tests whose function name contains one of these comma-separated words
# Prints each test's output to the console and a one-line-per-test summary to /results/summary.
# Exit status: 0 if every test passed (skips do not fail), else 1.
BUILD=${1:?usage: guest-tests.sh BUILD_DIR}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
SBX=$BUILD/sbx
SUMMARY=/results/summary
[ -d /results ] || SUMMARY=/tmp/summary
: >"$SUMMARY"
CG=/sys/fs/cgroup
FAILED=0

pass() { echo "PASS $1" | tee -a "$SUMMARY"; }
fail() { echo "FAIL $1${2:+: $2}" | tee -a "$SUMMARY"; FAILED=1; }
skip() { echo "SKIP $1: $2" | tee -a "$SUMMARY"; }
note() { echo "     $*" | tee -a "$SUMMARY"; }
ONLY=${2:-}
# run NAME FUNCTION: one test; its return status decides (77 = skipped, reason on its last line).
run() {
  if [ -n "$ONLY" ]; then
    hit=0; for o in $(echo "$ONLY" | tr ',' ' '); do case $2 in *"$o"*) hit=1 ;; esac; done
    [ $hit = 1 ] || return 0
  fi
  echo "---- $1"
  out=$("$2" 2>&1); rc=$?
  [ -n "$out" ] && printf '%s\n' "$out"
  case $rc in
    0) pass "$1" ;;
    77) skip "$1" "$(printf '%s\n' "$out" | tail -1)" ;;
    *) fail "$1" "exit $rc" ;;
  esac
}

echo "guest: kernel $(uname -r), cgroup2 root controllers: $(cat $CG/cgroup.controllers), subtree_control: $(cat $CG/cgroup.subtree_control)" | tee -a "$SUMMARY"

# ---- the RunCgroup unit tests against the real cgroup v2 (tests/unit/test_cgroup.cpp)
unit_cgroup_from_root() {
  # sbx in the root cgroup: exempt from the no-internal-processes rule. Streamed as it runs, and
  # bounded: once in CI this step hung with nothing printed until the guest's own timeout.
  { SBX_CGROUP_TESTS=1 timeout -k 10 300 "$BUILD/sbx_unit_tests" -tc='*cgroup*' 2>&1; echo "unit rc=$?"; } |
    tee /tmp/unit-cgroup.log
  rc=$(sed -n 's/^unit rc=//p' /tmp/unit-cgroup.log)
  [ "$rc" = 124 ] && echo "the cgroup unit tests did not end within 300 s"
  [ "$rc" = 0 ] || return 1
  # Every "cgroup v2 (real)" case must have run here, not skipped.
  ! grep -q 'skipped:' /tmp/unit-cgroup.log || { echo "real cgroup tests skipped in the guest"; return 1; }
}

unit_cgroup_from_nonroot_cgroup() {
  # As root, started in a non-root cgroup that holds other processes too (a login shell's, a CI
  # job's, a service's): run cgroups go under the root's sbx subtree ($CG/sbx), nothing moves, and
  # the session's cgroup is left as it was (no sbx-supervisor leaf, no controllers enabled there).
  mkdir -p $CG/guest-session || return 1
  sh -c "echo \$\$ > $CG/guest-session/cgroup.procs && exec sleep 300" & other=$!
  sleep 0.2
  sh -c "echo \$\$ > $CG/guest-session/cgroup.procs && SBX_CGROUP_TESTS=1 exec '$BUILD/sbx_unit_tests' -tc='*cgroup v2 (real)*limits*'"; rc=$?
  procs=$(cat $CG/guest-session/cgroup.procs | tr '\n' ' '); ctl=$(cat $CG/guest-session/cgroup.subtree_control)
  kill $other; wait $other 2>/dev/null
  echo "guest-session/: children '$(ls -d $CG/guest-session/*/ 2>/dev/null | xargs -n1 basename 2>/dev/null | tr '\n' ' ')', procs while sbx ran: $procs, subtree_control '$ctl'"
  rmdir $CG/guest-session 2>/dev/null
  [ $rc = 0 ] || return 1
  [ -z "$ctl" ] || { echo "sbx enabled controllers in the caller's cgroup"; return 1; }
  [ -d $CG/sbx ] || { echo "no $CG/sbx subtree"; return 1; }
  return 0
}

sbx_run_from_busy_cgroup() {  # sbx run as root from a cgroup with other processes: cgroup v2, not rlimits
  sbx_run_ready || return $?
  mkdir -p $CG/guest-login || return 1
  sh -c "echo \$\$ > $CG/guest-login/cgroup.procs && exec sleep 300" & other=$!
  sleep 0.2
  sh -c 'echo $$ > "$0" && exec "$@"' $CG/guest-login/cgroup.procs \
    "$SBX" run --memory 32M --timeout 60s --trace-file $T -- python3 -c "$HOG"; rc=$?
  kill $other; wait $other 2>/dev/null; rmdir $CG/guest-login 2>/dev/null
  status=$(tr_get 't["result"]["status"]'); mech=$(tr_get 't["enforcement"]["limits_applied"]["memory"]["mechanism"]')
  under=$(tr_get 't["host"]["cgroup"]["run_cgroups_under"]'); self=$(tr_get 't["host"]["cgroup"]["self_path"]')
  echo "from /guest-login (with a sleep beside sbx): exit $rc, status $status, mechanism '$mech', self_path $self, run cgroups under $under"
  [ $rc = 137 ] && [ "$status" = oom ] && [ "$under" = "$CG/sbx" ] && echo "$mech" | grep -q "memory.max"
}

unit_cgroup_rootless_delegated() {
  # sbx as an unprivileged user (uid 1001) in a subtree delegated to it the way systemd's
  # Delegate=yes does: the directory and its cgroup.procs, cgroup.subtree_control, cgroup.threads
  # chowned. RunCgroup must work there without root, and never write above the delegation point.
  command -v setpriv >/dev/null || { echo "no setpriv in the guest"; return 77; }
  D=$CG/deleg-1001
  mkdir -p $D && chown 1001:1001 $D $D/cgroup.procs $D/cgroup.subtree_control $D/cgroup.threads || return 1
  sh -c "echo \$\$ > $D/cgroup.procs && SBX_CGROUP_TESTS=1 exec setpriv --reuid=1001 --regid=1001 --clear-groups '$BUILD/sbx_unit_tests' -tc='*cgroup v2 (real)*'" >/tmp/unit-rootless.log 2>&1; rc=$?
  cat /tmp/unit-rootless.log
  [ $rc = 0 ] || return 1
  ! grep -q 'skipped:' /tmp/unit-rootless.log || { echo "real cgroup tests skipped as uid 1001"; return 1; }
  echo "$D/: $(ls -d $D/*/ | xargs -n1 basename | tr '\n' ' ')owned by $(stat -c %u $D/sbx)"
  [ -z "$(ls -d $D/sbx/run-* 2>/dev/null)" ] || { echo "run cgroups left in $D/sbx"; return 1; }
  rmdir $D/sbx $D/sbx-supervisor $D 2>/dev/null
  return 0
}

nothing_left_in_subtree() {
  left=$(ls -d $CG/sbx/run-* 2>/dev/null)
  [ -z "$left" ] || { echo "left behind: $left"; return 1; }
  echo "no run-* cgroup under $CG/sbx"
}

# ---- sbx run with limits, end to end: the binary users run, its exit status and its trace.
# Each function returns 0 (pass), 77 with a reason as its last line (skip), anything else (fail).
# $SBX is the built binary; the guest runs as root, cgroup v2 at /sys/fs/cgroup.
export SBX_STATE_DIR=/tmp/sbx-guest-state
T=/tmp/sbx-guest-trace.json
# jq-like: field F (python expression over the record `t`) of the last trace.
tr_get() { python3 -c "import json,sys; t=json.load(open('$T')); print($1)"; }
HOG="import sys
b=[]
while True: b.append(b'x' * (1 << 20))"

sbx_run_ready() { [ -x "$SBX" ] || { echo "no $SBX"; return 1; }; }

sbx_run_memory() {   # --memory 32M on a hog -> status oom, exit 137, memory.peak near 32M
  sbx_run_ready || return $?
  "$SBX" run --memory 32M --timeout 60s --trace-file $T -- python3 -c "$HOG"; rc=$?
  status=$(tr_get 't["result"]["status"]'); peak=$(tr_get 't["usage"]["memory_peak_bytes"]')
  kills=$(tr_get 't["usage"]["oom_kills"]'); mech=$(tr_get 't["enforcement"]["limits_applied"]["memory"]["mechanism"]')
  echo "memory: exit $rc, status $status, memory_peak_bytes $peak, oom_kills $kills, mechanism '$mech'"
  [ $rc = 137 ] && [ "$status" = oom ] && [ "$kills" -ge 1 ] || return 1
  # "near the limit": within 75%..100% (plus one page of slack) of 32 MiB
  [ "$peak" -ge $((24 * 1048576)) ] && [ "$peak" -le $((32 * 1048576 + 4096)) ] || { echo "peak not near 32M"; return 1; }
}
sbx_run_events_oom() {  # --events of a run that hits a violation, then its memory limit: limit events from memory.events
  sbx_run_ready || return $?
  EV=/tmp/sbx-guest-events.jsonl
  # mount(2) is refused by the default policy (a violation), then the hog meets --memory.
  "$SBX" run --memory 32M --timeout 60s --events $EV --trace-file $T -- python3 -c "import ctypes
ctypes.CDLL(None).syscall(165, 0, 0, 0, 0, 0)
$HOG"; rc=$?
  echo "events stream (exit $rc):"; sed 's/^/     /' $EV | tee -a "$SUMMARY"
  python3 - "$EV" "$T" <<'EOF' || return 1
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
t = json.load(open(sys.argv[2]))
kinds = [e["event"] for e in ev]
assert kinds[0] == "started" and kinds[-1] == "exited", kinds
assert any(e["event"] == "violation" and e.get("name") == "mount" for e in ev), "no mount violation"
lim = [e for e in ev if e["event"] == "limit" and e.get("source") == "memory.events"]
assert any(e["counter"] in ("oom", "oom_kill") for e in lim), ("no oom limit event", lim)
assert ev[-1]["status"] == "oom", ev[-1]
assert t["events"]["dropped"] == 0 and t["events"]["written"] == len(ev), t["events"]
print("events: %d lines, limit events %s, record events %s" % (len(ev), [e["counter"] for e in lim], t["events"]))
EOF
}
sbx_run_pids() {     # --pids 8 on a fork loop -> forks fail inside, trace pids_peak 8
  sbx_run_ready || return $?
  out=$("$SBX" run --pids 8 --timeout 60s --trace-file $T -- sh -c 'n=0; for i in $(seq 30); do sleep 3 & n=$((n+1)); done 2>&1; wait; echo started $n'); rc=$?
  peak=$(tr_get 't["usage"]["pids_peak"]')
  echo "pids: exit $rc, pids_peak $peak, program said: $(printf '%s' "$out" | tr '\n' ' ' | cut -c1-160)"
  [ "$peak" = 8 ] || return 1
  printf '%s' "$out" | grep -qi "fork" || { echo "no failed fork reported inside"; return 1; }
}
sbx_run_cpus() {     # --cpus 0.2 on a busy loop -> CPU ~ 20% of wall; tolerance 12-28 % (TCG is noisy)
  sbx_run_ready || return $?
  "$SBX" run --cpus 0.2 --timeout 3s --trace-file $T -- sh -c 'while :; do :; done'; rc=$?
  cpu=$(tr_get 't["usage"]["cpu_usage_ms"]'); wall=$(tr_get 't["usage"]["wall_ms"]'); thr=$(tr_get 't["usage"]["cpu_throttled_periods"]')
  pct=$((cpu * 100 / wall))
  echo "cpus 0.2: exit $rc, cpu ${cpu} ms in ${wall} ms wall = ${pct}% (tolerance 12-28%), throttled periods $thr"
  [ $rc = 124 ] && [ $pct -ge 12 ] && [ $pct -le 28 ]
}
sbx_run_cpu_time() { # --cpu-time 1s on a busy loop -> status timeout, reason cpu, well before --timeout
  sbx_run_ready || return $?
  "$SBX" run --cpu-time 1s --timeout 30s --trace-file $T -- sh -c 'while :; do :; done'; rc=$?
  status=$(tr_get 't["result"]["status"]'); reason=$(tr_get 't["result"]["reason"]')
  cpu=$(tr_get 't["usage"]["cpu_usage_ms"]'); wall=$(tr_get 't["usage"]["wall_ms"]')
  echo "cpu-time 1s: exit $rc, status $status, reason $reason, cpu ${cpu} ms, wall ${wall} ms"
  [ $rc = 124 ] && [ "$status" = timeout ] && [ "$reason" = cpu ] && [ "$cpu" -ge 1000 ] && [ "$wall" -lt 30000 ]
}
sbx_run_timeout_cleans() {  # --timeout on sleepers -> no process and no run cgroup left
  sbx_run_ready || return $?
  "$SBX" run --timeout 500ms -- sh -c 'sleep 4321 & sleep 4321 & sleep 4321'; rc=$?
  left=$(ls -d $CG/sbx/run-* 2>/dev/null); procs=$(pgrep -f 'sleep 4321')
  echo "timeout: exit $rc, run cgroups left: '${left}', sleepers left: '${procs}'"
  [ $rc = 124 ] && [ -z "$left" ] && [ -z "$procs" ]
}
sbx_session_cgroup() {  # sbx session: one run cgroup for the session's whole life, its limits on all calls, gone at stop
  sbx_run_ready || return $?
  export SBX_STATE_DIR=/tmp/sessvm; rm -rf $SBX_STATE_DIR; mkdir -m 700 $SBX_STATE_DIR
  id=$("$SBX" session start --memory 64M --pids 16) || { echo "session start failed"; return 1; }
  cg=$(ls -d $CG/sbx/run-* 2>/dev/null | head -1)
  echo "session $id: run cgroup ${cg:-none}, memory.max $(cat $cg/memory.max 2>/dev/null), pids.max $(cat $cg/pids.max 2>/dev/null)"
  "$SBX" session exec $id -- sh -c 'for i in $(seq 8); do sleep 3600 & done; echo started'
  "$SBX" session exec $id -- sh -c 'for i in $(seq 12); do sleep 3600 & done 2>/dev/null; wait' ; prc=$?
  pids=$(cat $cg/pids.current 2>/dev/null)
  echo "after 8 sleepers kept and 12 more asked: pids.current $pids (max 16), second call exit $prc"
  "$SBX" session exec $id --language python --code 'b = bytearray(200 << 20); print(len(b))'; mrc=$?
  state=$("$SBX" session show $id | python3 -c 'import json,sys; m=json.load(sys.stdin); print(m["state"], m.get("ended_by",""))')
  echo "200 MB in a 64M session: exit $mrc, session $state"
  "$SBX" session stop $id >/dev/null 2>&1
  sleep 1
  left=$(ls -d $CG/sbx/run-* 2>/dev/null); procs=$(pgrep -f 'sleep 3600')
  rec=$("$SBX" trace ls --json 2>/dev/null | python3 -c 'import json,sys; r=[x for x in json.load(sys.stdin) if "session-agent" in x.get("command","")]; print(r[0]["run_id"] if r else "")')
  peak=$("$SBX" trace show "$rec" 2>/dev/null | python3 -c 'import json,sys; t=json.load(sys.stdin); print(t["usage"]["memory_peak_bytes"], t["session"]["ended_by"])')
  echo "after stop: run cgroups left '${left}', sleepers left '${procs}', record $rec: memory peak and ended_by $peak"
  unset SBX_STATE_DIR
  [ -n "$cg" ] && [ "$pids" -le 16 ] && [ $mrc != 0 ] && [ -z "$left" ] && [ -z "$procs" ] && [ -n "$rec" ]
}
sbx_mcp_pool_killed_worker_leaves_no_cgroup() {  # sbx mcp --pool: a worker killed at discard -> the server removes its run cgroup
  sbx_run_ready || return $?
  [ -z "$(ls -d $CG/sbx/run-* 2>/dev/null)" ] || { echo "run cgroups before: $(ls -d $CG/sbx/run-*)"; return 1; }
  fifo=/tmp/mcp-pool-in; rm -f $fifo; mkfifo $fifo || return 1
  "$SBX" mcp --pool 1 <$fifo >/dev/null 2>/tmp/mcp-pool.err & srv=$!
  exec 9>$fifo
  i=0; while [ -z "$(ls -d $CG/sbx/run-* 2>/dev/null)" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
  cg=$(ls -d $CG/sbx/run-* 2>/dev/null)
  [ -n "$cg" ] || { echo "no pooled run cgroup appeared"; exec 9>&-; wait $srv; return 1; }
  sleep 2  # the worker's sandbox is built and it has named its run cgroup to the server
  w=$(pgrep -P $srv | head -1)
  kill -STOP "$w"  # it cannot discard its own sandbox now: the server has to kill it
  exec 9>&-        # EOF: the server discards its idle sandboxes and exits
  wait $srv; rc=$?
  left=$(ls -d $CG/sbx/run-* 2>/dev/null)
  echo "server exit $rc; pooled run cgroup was $cg; left: '$left'"
  grep 'pool' /tmp/mcp-pool.err | tail -3
  [ $rc = 0 ] && [ -z "$left" ]
}
sbx_mcp_pool_worker_killed_while_building_leaves_no_cgroup() {  # killed before it named its run cgroup -> swept at the server's end
  sbx_run_ready || return $?
  [ -z "$(ls -d $CG/sbx/run-* 2>/dev/null)" ] || { echo "run cgroups before: $(ls -d $CG/sbx/run-*)"; return 1; }
  fifo=/tmp/mcp-pool-in2; rm -f $fifo; mkfifo $fifo || return 1
  "$SBX" mcp --pool 1 <$fifo >/dev/null 2>/tmp/mcp-pool2.err & srv=$!
  exec 9>$fifo
  w=""; i=0; while [ -z "$w" ] && [ $i -lt 3000 ]; do w=$(pgrep -P $srv | head -1); sleep 0.01; i=$((i+1)); done
  # A busy wait with builtins only (no fork per round): the kill must land between the run
  # cgroup's mkdir and the worker's "ready" note, a few milliseconds of its build.
  found=""; i=0
  while [ -z "$found" ] && [ $i -lt 2000000 ]; do
    for d in $CG/sbx/run-*; do [ -d "$d" ] && found=$d; done
    i=$((i+1))
  done
  kill -KILL "$w"  # its run cgroup exists, its sandbox is still being built: no "ready" note yet
  cg=$(ls -d $CG/sbx/run-* 2>/dev/null)
  [ -n "$cg" ] || { echo "no pooled run cgroup appeared"; exec 9>&-; wait $srv; return 1; }
  exec 9>&-        # EOF: the server ends; no pooled build follows that would sweep it
  wait $srv; rc=$?
  left=$(ls -d $CG/sbx/run-* 2>/dev/null)
  echo "server exit $rc; killed worker's run cgroup was $cg; left: '$left'"
  [ $rc = 0 ] && [ -z "$left" ]
}
sbx_run_rootless_delegated() {  # as uid 1001 in a subtree delegated to it (chown, as Delegate=yes does)
  sbx_run_ready || return $?
  command -v setpriv >/dev/null || { echo "no setpriv in the guest"; return 77; }
  D=$CG/deleg-run-1001
  mkdir -p $D /tmp/st1001 && chown 1001:1001 $D $D/cgroup.procs $D/cgroup.subtree_control $D/cgroup.threads /tmp/st1001 || return 1
  sh -c "echo \$\$ > $D/cgroup.procs && exec setpriv --reuid=1001 --regid=1001 --clear-groups env SBX_STATE_DIR=/tmp/st1001 '$SBX' run --memory 32M --pids 16 --timeout 60s --trace-file /tmp/st1001/t.json -- python3 -c \"$HOG\""; rc=$?
  status=$(python3 -c "import json; print(json.load(open('/tmp/st1001/t.json'))['result']['status'])")
  mode=$(python3 -c "import json; print(json.load(open('/tmp/st1001/t.json'))['enforcement']['identity']['mode'])")
  cgp=$(python3 -c "import json; print(json.load(open('/tmp/st1001/t.json'))['enforcement']['cgroup'])")
  echo "rootless (uid 1001, $mode): exit $rc, status $status, cgroup '$cgp'"
  left=$(ls -d $D/sbx/run-* 2>/dev/null)
  [ $rc = 137 ] && [ "$status" = oom ] && [ -z "$left" ] || return 1
}
sbx_probe_rootless_delegated() {  # sbx probe as uid 1001 in a fresh delegated scope: the probe moves
  # itself into sbx-supervisor before its run (enter_supervisor_leaf), so the limits are cgroup v2's
  sbx_run_ready || return $?
  command -v setpriv >/dev/null || { echo "no setpriv in the guest"; return 77; }
  D=$CG/deleg-probe-1001
  mkdir -p $D /tmp/stp1001 && chown 1001:1001 $D $D/cgroup.procs $D/cgroup.subtree_control $D/cgroup.threads /tmp/stp1001 || return 1
  out=$(sh -c "echo \$\$ > $D/cgroup.procs && exec setpriv --reuid=1001 --regid=1001 --clear-groups env HOME=/tmp/stp1001 SBX_STATE_DIR=/tmp/stp1001 '$SBX' probe" 2>&1); rc=$?
  echo "$out" | grep -E "^limit\.|^cleanup\.cgroup|held, " | sed 's/^/     /'
  left=$(ls -d $D/sbx/run-* 2>/dev/null); ctl=$(cat $D/cgroup.subtree_control)
  echo "     $D: subtree_control '$ctl', left '$left'"
  [ $rc = 0 ] && echo "$out" | grep -Eq "^limit\.memory +held" && echo "$out" | grep -Eq "^limit\.pids +held" && [ -z "$left" ] \
    && echo "$ctl" | grep -qw memory || return 1
  # A shell that stays in the scope is not sbx's to move: the probe's run degrades, the shell stays.
  E=$CG/deleg-probe-shell-1001
  mkdir -p $E && chown 1001:1001 $E $E/cgroup.procs $E/cgroup.subtree_control $E/cgroup.threads || return 1
  out=$(sh -c "echo \$\$ > $E/cgroup.procs && exec setpriv --reuid=1001 --regid=1001 --clear-groups env HOME=/tmp/stp1001 SBX_STATE_DIR=/tmp/stp1001 sh -c 'cat $E/cgroup.procs > /tmp/stp1001/shell-before; \"\$0\" probe; cat $E/cgroup.procs > /tmp/stp1001/shell-after' '$SBX'" 2>&1)
  echo "$out" | grep -E "^limit\.memory|holds other processes" | cut -c1-200 | sed 's/^/     /'
  echo "     shell's cgroup before: $(tr '\n' ' ' < /tmp/stp1001/shell-before); after: $(tr '\n' ' ' < /tmp/stp1001/shell-after)"
  echo "$out" | grep -Eq "^limit\.memory +degraded" && [ -s /tmp/stp1001/shell-after ] || return 1
}
sbx_mcp_rootless_delegated() {  # sbx mcp --pool 2 as uid 1001, started by its client into a scope of
  # its own (as `systemd-run --user --scope -p Delegate=yes sbx mcp` does): the server moves itself to
  # sbx-supervisor, so its workers' run cgroups get memory.max, pooled and cold alike
  sbx_run_ready || return $?
  command -v setpriv >/dev/null || { echo "no setpriv in the guest"; return 77; }
  P=$CG/deleg-mcp-1001
  mkdir -p $P/client /tmp/stm1001 && echo "+memory +pids +cpu" > $P/cgroup.subtree_control &&
    chown 1001:1001 $P $P/cgroup.procs $P/cgroup.subtree_control $P/cgroup.threads /tmp/stm1001 || return 1
  sh -c "echo \$\$ > $P/client/cgroup.procs && exec setpriv --reuid=1001 --regid=1001 --clear-groups env HOME=/tmp/stm1001 python3 - '$SBX' $P/server" <<'PY'
import json, os, subprocess, sys, time
os.mkdir(sys.argv[2])
p = subprocess.Popen(["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', sys.argv[2], sys.argv[1], "--state-dir",
                      "/tmp/stm1001/st", "mcp", "--pool", "2"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE)
def call(i, method, params):
    p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n").encode())
    p.stdin.flush()
    while True:
        m = json.loads(p.stdout.readline())
        if m.get("id") == i:
            return m
call(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "guest", "version": "1"}})
p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'); p.stdin.flush()
time.sleep(2)
server_cg = open("/proc/%d/cgroup" % p.pid).read().strip()
ok = True
for i in (2, 3, 4):
    r = call(i, "tools/call", {"name": "run_code", "arguments": {"language": "sh", "code": "cat /proc/self/cgroup"}})
    sc = r["result"]["structuredContent"]
    t = None
    for line in open("/tmp/stm1001/st/traces/ledger.jsonl"):
        rec = json.loads(line)["record"]
        if rec["run_id"] == sc["run_id"]:
            t = rec
    mech = t["enforcement"]["limits_applied"].get("memory", {}).get("mechanism")
    hit = (t.get("pool") or {}).get("hit")
    print("     call %d: exit %s, pool hit %s, memory %r, run cgroup %s" % (i, sc["exit_code"], hit, mech, t["enforcement"].get("cgroup")))
    if "memory.max" not in (mech or ""):
        print("     error %r, host.cgroup %r" % (t["enforcement"].get("cgroup_error"), t["host"].get("cgroup")))
    ok = ok and sc["exit_code"] == 0 and "memory.max" in (mech or "")
    time.sleep(0.5)
p.stdin.close(); p.wait(timeout=60)
print("     server's cgroup: %s; exit %d" % (server_cg, p.returncode))
sys.exit(0 if ok and server_cg.endswith("/server/sbx-supervisor") and p.returncode == 0 else 1)
PY
  rc=$?
  left=$(ls -d $P/server/sbx/run-* 2>/dev/null)
  [ $rc = 0 ] && [ -z "$left" ]
}
sbx_mcp_template_calls_own_cgroup() {  # warm templates: each forked call in its own run cgroup, its limits held
  sbx_run_ready || return $?
  mkdir -p /tmp/tplvm && cat >/tmp/tplvm/p.json <<'EOF2'
{"limits": {"timeout": "60s", "memory": "64M", "pids": 16, "tmp_size": "16M"}, "network": {"mode": "none"},
 "warm": {"interpreter": "python3", "preload": ["json"], "mode": "template"}}
EOF2
  python3 - "$SBX" <<'PY'
import json, subprocess, sys, time
p = subprocess.Popen([sys.argv[1], "--state-dir", "/tmp/tplvm/st", "mcp", "--pool", "2", "--profile", "/tmp/tplvm/p.json"],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open("/tmp/tplvm/err", "wb"))
def call(i, method, params):
    p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n").encode())
    p.stdin.flush()
    while True:
        m = json.loads(p.stdout.readline())
        if m.get("id") == i:
            return m
def record(run_id):
    for line in open("/tmp/tplvm/st/traces/ledger.jsonl"):
        rec = json.loads(line)["record"]
        if rec["run_id"] == run_id:
            return rec
call(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "guest", "version": "1"}})
p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'); p.stdin.flush()
codes = {"cgroup": "print(open('/proc/self/cgroup').read().strip())",
         "hog": "x = bytearray(256 << 20)",
         "forks": "import os, time\nn = 0\nwhile n < 100:\n    try:\n        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\n        n += 1\n    except OSError:\n        break\nprint(n)"}
# Until a call is served by a fork made ahead of it (man sbx-mcp, Templates), then time to refill:
# the "cgroup" call below is one, its fork placed in the run cgroup of the worker it waited for.
for i in range(100, 160):
    sc = call(i, "tools/call", {"name": "run_code", "arguments": {"language": "python", "code": "pass"}})
    if record(sc["result"]["structuredContent"]["run_id"])["pool"]["hit"]:
        break
    time.sleep(1)
time.sleep(3)
ok = True
got = {}
for i, (name, code) in enumerate(codes.items(), 2):
    sc = call(i, "tools/call", {"name": "run_code", "arguments": {"language": "python", "code": code,
                                                                  **({"limits": {"timeout": "5s"}} if name == "forks" else {})}})["result"]["structuredContent"]
    t = record(sc["run_id"])
    got[name] = (sc, t)
    mem = t["enforcement"]["limits_applied"].get("memory", {}).get("mechanism")
    print("     %s: made_by %s, forked ahead %s, status %s, exit %s, stdout %r, cgroup %s, memory %s, peak %s, oom_kills %s, pids_peak %s"
          % (name, t["sandbox"]["made_by"], t["pool"]["hit"], sc["status"], sc["exit_code"], sc["stdout"].strip()[:40], t["enforcement"].get("cgroup"),
             mem, t["usage"].get("memory_peak_bytes"), t["usage"].get("oom_kills"), t["usage"].get("pids_peak")))
    ok = ok and t["sandbox"]["made_by"] == "template" and "memory.max" in (mem or "")
sc, t = got["cgroup"]
ok = ok and sc["stdout"].strip() == "0::/" and t["pool"]["hit"]
sc, t = got["hog"]
ok = ok and sc["status"] == "oom" and (t["usage"].get("oom_kills") or 0) >= 1 and t["usage"]["memory_peak_bytes"] <= 80 << 20
sc, t = got["forks"]
ok = ok and (t["usage"].get("pids_peak") or 99) <= 16 and 0 < int(sc["stdout"] or 0) < 16
p.stdin.close(); p.wait(timeout=60)
sys.exit(0 if ok and p.returncode == 0 else 1)
PY
  rc=$?
  grep template /tmp/tplvm/err | tail -3
  left=$(ls -d $CG/sbx/run-* 2>/dev/null)
  [ -n "$left" ] && echo "run cgroups left: $left"
  [ $rc = 0 ] && [ -z "$left" ]
}
sbx_run_int80() {  # a 32-bit int 0x80 syscall (this guest kernel has IA-32 emulation) -> killed, 159
  sbx_run_ready || return $?
  mkdir -p /tmp/attack && cc -O1 -o /tmp/attack/attack "$REPO/tests/attacks/attack.c" || { echo "cannot compile attack.c in the guest"; return 1; }
  /tmp/attack/attack int80 >/tmp/int80-host.txt 2>&1; host_rc=$?
  "$SBX" run --bind /tmp/attack:/attack --trace-file $T -- /attack/attack int80; rc=$?
  status=$(tr_get 't["result"]["status"]'); viol=$(tr_get '[(v["name"], v["arch"], v["action"]) for v in t["violations"]]')
  echo "int 0x80: outside the sandbox exit $host_rc ($(cat /tmp/int80-host.txt)); inside exit $rc, status $status, violations $viol"
  # attack.c exits 0 when the attack was blocked: outside the sandbox it must succeed (exit 1).
  grep -q SUCCEEDED /tmp/int80-host.txt || { echo "this guest kernel does not run int 0x80 either: nothing to prove"; return 77; }
  [ $rc = 159 ] && [ "$status" = seccomp_violation ] && printf '%s' "$viol" | grep -q "x86'"
}
sbx_run_gpu_memory() {  # --gpu on stand-in nodes with a real cgroup: memory from memory.max, node usable
  sbx_run_ready || return $?
  G=/tmp/sbx-guest-gpu
  rm -rf $G
  "$REPO/tests/integration/gpu_fixture.sh" $G || return 1
  SBX_TEST_GPU_HOST=$G/discovery "$SBX" run --gpu 0 --memory 32M --timeout 60s --trace-file $T -- \
    sh -c 'echo x > /dev/nvidia0 && echo NODE_OK; python3 -c "$0"' "$HOG"; rc=$?
  status=$(tr_get 't["result"]["status"]'); mech=$(tr_get 't["enforcement"]["limits_applied"]["memory"]["mechanism"]')
  gpus=$(tr_get '[d["uuid"] for d in t["enforcement"]["gpu"]["devices"]]')
  echo "gpu + memory: exit $rc, status $status, memory mechanism '$mech', gpus $gpus"
  rm -rf $G
  [ $rc = 137 ] && [ "$status" = oom ] && [ "$mech" = "cgroup v2 memory.max" ]
}
sbx_run_100_runs() {  # nothing left under the sbx subtree after 100 runs
  sbx_run_ready || return $?
  i=0; bad=0
  while [ $i -lt 100 ]; do
    "$SBX" run --memory 64M --pids 16 --timeout 10s -- true || bad=$((bad + 1))
    i=$((i + 1))
  done
  left=$(ls -d $CG/sbx/run-* 2>/dev/null | wc -l)
  echo "100 runs: $bad failed, run cgroups left: $left"
  [ $bad = 0 ] && [ "$left" = 0 ]
}

# A container's view: a cgroup namespace rooted at $CG/guest-ctr, cgroup2 mounted afresh at
# /sys/fs/cgroup in a mount namespace of its own (so the namespace root shows as "/"), and the
# "container's" processes — the shell below and a sleep — at that root. Without `sbx cgroup-init`
# a run degrades to rlimits with the fix named; after it, --memory gives oom with cgroup v2 under
# the namespace root's sbx subtree. (The container recipe in deploy/ relies on exactly this.)
cgroupns_procs_at_root() {
  sbx_run_ready || return $?
  command -v unshare >/dev/null || { echo "no unshare in the guest"; return 77; }
  echo "+memory +pids +cpu" > $CG/cgroup.subtree_control || return 1
  C=$CG/guest-ctr; mkdir -p $C || return 1
  cat >/tmp/ctr.sh <<'CTR'
set -u
# A fresh mount, as a container runtime makes one (mount(8) refuses a second "none" on the same
# target, hence the unmount first: this is our own mount namespace).
umount /sys/fs/cgroup 2>/dev/null; mount -t cgroup2 cgroup2 /sys/fs/cgroup || { echo "cannot mount cgroup2 in the namespace"; exit 1; }
echo "in the container: /proc/self/cgroup $(cat /proc/self/cgroup | tr '\n' ' '), root procs: $(cat /sys/fs/cgroup/cgroup.procs | wc -l)"
sleep 300 & other=$!
"$SBX" run --memory 32M --timeout 60s --trace-file /tmp/ctr-t1.json -- python3 -c "$HOG" 2>/tmp/ctr-e1.txt; rc1=$?
echo "without the mode: exit $rc1, stderr ($(wc -l </tmp/ctr-e1.txt) lines):"; sed 's/^/  | /' /tmp/ctr-e1.txt
"$SBX" doctor | grep -A1 '^cgroupns' | sed 's/^/  doctor: /'
"$SBX" cgroup-init; rci=$?
echo "cgroup-init: exit $rci; root procs now $(cat /sys/fs/cgroup/cgroup.procs | wc -l), subtree_control '$(cat /sys/fs/cgroup/cgroup.subtree_control)'"
"$SBX" doctor | grep -A1 '^cgroupns' | sed 's/^/  doctor: /'
"$SBX" run --memory 32M --timeout 60s --trace-file /tmp/ctr-t2.json -- python3 -c "$HOG" 2>/tmp/ctr-e2.txt; rc2=$?
echo "with the mode: exit $rc2, stderr ($(wc -l </tmp/ctr-e2.txt) lines)"; sed 's/^/  | /' /tmp/ctr-e2.txt
"$SBX" cgroup-init --json >/tmp/ctr-again.json; rca=$?
kill $other; wait $other 2>/dev/null
echo "$rc1 $rci $rc2 $rca" > /tmp/ctr-rcs
CTR
  export SBX HOG  # (the hog has quotes of its own: through the environment, not a command line)
  sh -c "echo \$\$ > $C/cgroup.procs && exec unshare --cgroup --mount --propagation private sh /tmp/ctr.sh"; rc=$?
  set -- $(cat /tmp/ctr-rcs 2>/dev/null); rc1=${1:-x}; rci=${2:-x}; rc2=${3:-x}; rca=${4:-x}
  t1() { python3 -c "import json; t=json.load(open('/tmp/ctr-t1.json')); print($1)"; }
  t2() { python3 -c "import json; t=json.load(open('/tmp/ctr-t2.json')); print($1)"; }
  echo "run 1 trace: status $(t1 't["result"]["status"]'), enforcement.cgroup '$(t1 't["enforcement"]["cgroup"]')', memory mechanism '$(t1 't["enforcement"]["limits_applied"]["memory"]["mechanism"]')', host.cgroup.namespace_root $(t1 't["host"]["cgroup"]["namespace_root"]')"
  echo "run 2 trace: status $(t2 't["result"]["status"]'), enforcement.cgroup '$(t2 't["enforcement"]["cgroup"]')', memory mechanism '$(t2 't["enforcement"]["limits_applied"]["memory"]["mechanism"]')', host.cgroup.namespace_root $(t2 't["host"]["cgroup"]["namespace_root"]'), run_cgroups_under '$(t2 't["host"]["cgroup"]["run_cgroups_under"]')', memory_peak_bytes $(t2 't["usage"]["memory_peak_bytes"]')"
  echo "cgroup-init again: $(tr -d '\n ' </tmp/ctr-again.json)"
  echo "on the host side: $C/ holds $(ls -d $C/*/ 2>/dev/null | xargs -n1 basename 2>/dev/null | tr '\n' ' ')"
  for d in init sbx sbx-supervisor; do rmdir $C/$d 2>/dev/null; done; rmdir $C 2>/dev/null
  [ $rc = 0 ] || return 1
  # Without the mode: the run still runs, on rlimits, and says so in one warning naming the fix.
  t1 't["enforcement"]["cgroup"]' | grep -q '^unavailable' || { echo "run 1 used a cgroup"; return 1; }
  grep -q 'sbx cgroup-init' /tmp/ctr-e1.txt || { echo "run 1's warning does not name the fix"; return 1; }
  [ "$(t1 't["host"]["cgroup"]["namespace_root"]["procs"] > 0')" = True ] || return 1
  # With it: oom under memory.max, in the namespace root's sbx subtree, the root empty.
  [ "$rci" = 0 ] && [ "$rc2" = 137 ] && [ "$rca" = 0 ] || return 1
  [ "$(t2 't["result"]["status"]')" = oom ] || return 1
  t2 't["enforcement"]["cgroup"]' | grep -q '^v2 /sys/fs/cgroup/sbx/run-' || return 1
  t2 't["enforcement"]["limits_applied"]["memory"]["mechanism"]' | grep -q 'memory.max' || return 1
  [ "$(t2 't["host"]["cgroup"]["namespace_root"]["procs"]')" = 0 ] || return 1
  grep -q '"moved":\[\]' /tmp/ctr-again.json 2>/dev/null || tr -d '\n ' </tmp/ctr-again.json | grep -q '"moved":\[\]' || { echo "cgroup-init is not idempotent"; return 1; }
}

bench_cgroup_placement() {  # per-run cost of run cgroup placement (bench/cgroup_placement.sh); TCG numbers
  sbx_run_ready || return $?
  "$REPO/bench/cgroup_placement.sh" "$SBX" 10 >/tmp/bench-placement.txt 2>&1; rc=$?
  cat /tmp/bench-placement.txt
  return $rc
}



# ---- callers' cgroups as systemd makes them. The guest's init is busybox, not systemd: the tree
# above a service or a user manager is built here the way systemd (PID 1) and logind would build
# it (system.slice/NAME.service; user.slice/user-UID.slice/user@UID.service with memory, pids and
# cpu enabled down to it and the service's directory and cgroup.procs/subtree_control/threads
# chowned to the user, which is what Delegate=yes does). What runs inside is real: the host's
# own `systemd --user` binary as uid 1001, and the host's systemd-run talking to it.

sbx_run_from_service_cgroup() {  # root from system.slice/x.service holding the service's own process
  sbx_run_ready || return $?
  S=$CG/system.slice/x.service
  mkdir -p $S || return 1
  sh -c "echo \$\$ > $S/cgroup.procs && exec sleep 300" & daemon=$!
  sleep 0.2
  sh -c 'echo $$ > "$0" && exec "$@"' $S/cgroup.procs \
    "$SBX" run --memory 32M --pids 16 --timeout 60s --trace-file $T -- python3 -c "$HOG" 2>/tmp/svc-err.txt; rc=$?
  status=$(tr_get 't["result"]["status"]'); mech=$(tr_get 't["enforcement"]["limits_applied"]["memory"]["mechanism"]')
  how=$(tr_get 't["host"]["cgroup"]["obtained_by"]'); cgp=$(tr_get 't["enforcement"]["cgroup"]'); self=$(tr_get 't["host"]["cgroup"]["self_path"]')
  echo "from $self (a sleep beside sbx): exit $rc, status $status, mechanism '$mech', obtained_by '$how', cgroup '$cgp'"
  ok=1; [ $rc = 137 ] && [ "$status" = oom ] && [ "$how" = "root subtree" ] && echo "$mech" | grep -q "memory.max" && ok=0
  # pids: a fork loop from the same service cgroup stops at the limit.
  out=$(sh -c 'echo $$ > "$0" && exec "$@"' $S/cgroup.procs \
    "$SBX" run --pids 8 --timeout 60s --trace-file $T -- sh -c 'for i in $(seq 30); do sleep 3 & done 2>&1; wait'); prc=$?
  peak=$(tr_get 't["usage"]["pids_peak"]'); pm=$(tr_get 't["enforcement"]["limits_applied"]["pids"]["mechanism"]')
  echo "pids 8 from $self: exit $prc, pids_peak $peak, mechanism '$pm'"
  procs=$(cat $S/cgroup.procs | wc -l); ctl=$(cat $S/cgroup.subtree_control)
  kill $daemon; wait $daemon 2>/dev/null; rmdir $S $CG/system.slice 2>/dev/null
  echo "x.service while sbx ran: $procs process(es) after, subtree_control '$ctl' (left as it was)"
  [ $ok = 0 ] && [ "$peak" = 8 ] && echo "$pm" | grep -q "pids.max" && [ -z "$ctl" ]
}

U=1001
UM=$CG/user.slice/user-$U.slice/user@$U.service
URT=/run/user/$U
UHOG="b=[b'x'*(1<<20) for _ in range(10**6)]"  # the memory hog on one line, for sh -c in sh -c
# As uid 1001 with the user manager's environment (what pam_systemd gives a login).
as_user() { setpriv --reuid=$U --regid=$U --clear-groups env -i PATH=/usr/bin:/bin HOME=/tmp/home$U XDG_RUNTIME_DIR=$URT SBX_STATE_DIR=/tmp/home$U/sbx "$@"; }

# in_user_session NAME 'COMMAND': runs COMMAND with sh in a service of uid 1001's manager (as a
# desktop terminal runs: its processes are in user@1001.service/app.slice/NAME.service, started
# by the manager itself); stderr to /tmp/home1001/NAME.err; returns COMMAND's exit status.
# (systemd-run --scope from the guest's root cgroup would need PID 1's help to move the caller in,
# AttachProcessesToUnit over D-Bus, and the guest has no system manager.)
in_user_session() {
  rm -f /tmp/home$U/$1.rc
  as_user systemd-run --user --quiet --unit="$1" -p StandardError=file:/tmp/home$U/$1.err sh -c "$2; echo \$? > /tmp/home$U/$1.rc" || return 1
  i=0; while [ ! -s /tmp/home$U/$1.rc ] && [ $i -lt 600 ]; do sleep 0.2; i=$((i + 1)); done
  [ -s /tmp/home$U/$1.rc ] || { echo "$1 did not finish"; tail -20 /tmp/systemd-user.log; return 1; }
  return "$(cat /tmp/home$U/$1.rc)"
}

start_user_manager() {  # the host's systemd --user as uid 1001 in user@1001.service; 0 once it answers
  [ -S $URT/systemd/private ] && return 0
  [ -f /tmp/systemd-user.failed ] && { cat /tmp/systemd-user.failed; return 1; }
  command -v setpriv >/dev/null || { echo "no setpriv in the guest"; return 77; }
  [ -x /lib/systemd/systemd ] && command -v systemd-run >/dev/null || { echo "no systemd on the host"; return 77; }
  # systemd --user refuses to start unless the system "booted with systemd" (sd_booted(): the
  # directory /run/systemd/system exists). The guest's init is busybox: say so, as PID 1 would.
  mkdir -p $UM /tmp/home$U $URT /run/systemd/system || return 1
  echo "+memory +pids +cpu" > $CG/user.slice/cgroup.subtree_control || return 1
  echo "+memory +pids +cpu" > $CG/user.slice/user-$U.slice/cgroup.subtree_control || return 1
  chown $U:$U $UM $UM/cgroup.procs $UM/cgroup.subtree_control $UM/cgroup.threads /tmp/home$U $URT && chmod 700 $URT || return 1
  t0=$(date +%s)
  sh -c "echo \$\$ > $UM/cgroup.procs && exec setpriv --reuid=$U --regid=$U --clear-groups env -i PATH=/usr/bin:/bin HOME=/tmp/home$U XDG_RUNTIME_DIR=$URT /lib/systemd/systemd --user" >/tmp/systemd-user.log 2>&1 &
  echo $! >/tmp/systemd-user.pid
  i=0; while [ ! -S $URT/systemd/private ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i + 1)); done
  [ -S $URT/systemd/private ] || { tail -20 /tmp/systemd-user.log; echo "systemd --user did not come up in 120 s" | tee /tmp/systemd-user.failed; return 1; }
  echo "systemd --user (uid $U) answers on $URT/systemd/private after $(( $(date +%s) - t0 )) s; its cgroup: $(ls $UM | grep -E 'scope|slice' | tr '\n' ' ')"
}

sbx_run_rootless_user_manager() {  # uid 1001, no flag: from a busy scope of its own session -> automatic delegated scope
  sbx_run_ready || return $?
  start_user_manager || return $?
  rm -rf /tmp/home$U/sbx; rm -f /tmp/home$U/t.json /tmp/home$U/t0.json
  # The "terminal": a scope of the user manager (as a desktop session's terminal has), holding a
  # shell's other process beside sbx. Its cgroup is the user's but has processes, so cgroup v2
  # gives no controllers below it: before, sbx fell back to rlimits here.
  in_user_session term1 "sleep 300 & SBX_SCOPE_REUSE=0 '$SBX' run --memory 32M --pids 16 --timeout 60s --trace-file /tmp/home$U/t.json -- python3 -c \"$UHOG\""; rc=$?
  cp /tmp/home$U/term1.err /tmp/um-err.txt 2>/dev/null
  TT=/tmp/home$U/t.json
  status=$(python3 -c "import json; print(json.load(open('$TT'))['result']['status'])")
  how=$(python3 -c "import json; print(json.load(open('$TT'))['host']['cgroup']['obtained_by'])")
  why=$(python3 -c "import json; print(json.load(open('$TT'))['host']['cgroup'].get('systemd_scope'))")
  cgp=$(python3 -c "import json; print(json.load(open('$TT'))['enforcement']['cgroup'])")
  mech=$(python3 -c "import json; print(json.load(open('$TT'))['enforcement']['limits_applied']['memory']['mechanism'])")
  mode=$(python3 -c "import json; print(json.load(open('$TT'))['enforcement']['identity']['mode'])")
  echo "rootless (uid $U, $mode) under a user manager, no flag: exit $rc, status $status, obtained_by '$how', cgroup '$cgp', mechanism '$mech'"
  echo "stderr: $(cat /tmp/um-err.txt)"
  ok=1; [ $rc = 137 ] && [ "$status" = oom ] && [ "$how" = "systemd user scope (automatic)" ] && echo "$mech" | grep -q "memory.max" \
    && case $cgp in "v2 $UM/"*) true ;; *) false ;; esac && ok=0
  # The opt-out: same place, --no-systemd-scope -> rlimits, and at most one short warning line.
  in_user_session term2 "sleep 300 & '$SBX' run --no-systemd-scope --memory 32M --timeout 60s --trace-file /tmp/home$U/t0.json -- true"; rc0=$?
  cp /tmp/home$U/term2.err /tmp/um-err0.txt 2>/dev/null
  mech0=$(python3 -c "import json; print(json.load(open('/tmp/home$U/t0.json'))['enforcement']['limits_applied']['memory']['mechanism'])")
  lines=$(grep -c . /tmp/um-err0.txt); longest=$(awk '{ if (length($0) > m) m = length($0) } END { print m + 0 }' /tmp/um-err0.txt)
  echo "--no-systemd-scope: exit $rc0, mechanism '$mech0', stderr $lines line(s), longest $longest chars: $(cat /tmp/um-err0.txt)"
  [ $ok = 0 ] && [ $rc0 = 0 ] && echo "$mech0" | grep -q rlimit && [ "$lines" -le 1 ] && [ "$longest" -le 200 ]
}

sbx_run_rootless_user_manager_pids() {  # the same, --pids 8 on a fork loop: stops at 8 through pids.max
  sbx_run_ready || return $?
  start_user_manager || return $?
  in_user_session term3 "sleep 300 & SBX_SCOPE_REUSE=0 '$SBX' run --pids 8 --timeout 60s --trace-file /tmp/home$U/tp.json -- sh -c 'for i in \$(seq 30); do sleep 3 & done 2>&1; wait'"; rc=$?
  TT=/tmp/home$U/tp.json
  peak=$(python3 -c "import json; print(json.load(open('$TT'))['usage']['pids_peak'])")
  how=$(python3 -c "import json; print(json.load(open('$TT'))['host']['cgroup']['obtained_by'])")
  pm=$(python3 -c "import json; print(json.load(open('$TT'))['enforcement']['limits_applied']['pids']['mechanism'])")
  echo "rootless --pids 8 under a user manager: exit $rc, pids_peak $peak, obtained_by '$how', mechanism '$pm'"
  [ "$peak" = 8 ] && [ "$how" = "systemd user scope (automatic)" ] && echo "$pm" | grep -q "pids.max"
}

# The long-lived scope (runtime/linux/scope_reuse.hpp): the first run starts sbx-runs-1001.scope with
# its keeper and joins it over D-Bus; the second joins the same scope (no systemd-run); killing
# the keeper ends the scope and the next run starts it again; with nothing to do the keeper
# leaves after its idle period (SBX_SCOPE_KEEPER_IDLE: 300 s, then 5 s for the keeper run 3 starts;
# a run takes tens of seconds on TCG) and the scope goes with it.
reuse_field() { python3 -c "import json,sys; t=json.load(open('$1')); print($2)"; }
reuse_run() {  # NAME IDLE: one oom run from a busy service cgroup; prints "rc status obtained_by|unit|why|mech"
  in_user_session $1 "sleep 300 & SBX_SCOPE_KEEPER_IDLE=$2 '$SBX' -v run --memory 32M --timeout 60s --trace-file /tmp/home$U/$1.json -- python3 -c \"$UHOG\""
  rc=$?; J=/tmp/home$U/$1.json
  grep -iE "scope|join|d-bus" /tmp/home$U/$1.err | head -5 >&2
  echo "$rc|$(reuse_field $J 't["result"]["status"]')|$(reuse_field $J 't["host"]["cgroup"]["obtained_by"]')|$(reuse_field $J 't["host"]["cgroup"].get("scope_unit")')|$(reuse_field $J 't["enforcement"]["limits_applied"]["memory"]["mechanism"]')|$(reuse_field $J 't["host"]["cgroup"].get("systemd_scope")')|$(reuse_field $J 't["enforcement"]["cgroup"]')"
}
reuse_ok() {  # LINE WORD: exit 137, oom, reused, unit, memory.max, and the reason names WORD
  echo "$1" | python3 -c "import sys; f=sys.stdin.read().strip().split('|'); sys.exit(0 if f[0]=='137' and f[1]=='oom' and f[2]=='systemd user scope (reused)' and f[3]=='sbx-runs-$U.scope' and 'memory.max' in f[4] and '$2' in f[5] and '/sbx-runs-$U.scope/run-' in f[6] else 1)"
}
scope_dir() { find $UM -maxdepth 3 -type d -name "sbx-runs-$U.scope" 2>/dev/null | head -1; }
sbx_run_rootless_reused_scope() {
  sbx_run_ready || return $?
  start_user_manager || return $?
  ok=0
  r1=$(reuse_run reuse1 300); echo "run 1: $r1"; reuse_ok "$r1" "started the scope" || ok=1
  SC=$(scope_dir); kp=$(cat "$SC/keeper/cgroup.procs" 2>/dev/null)
  echo "scope $SC, keeper pid '$kp' ($(cat /proc/$kp/cmdline 2>/dev/null | tr '\0' ' ')), subtree_control '$(cat $SC/cgroup.subtree_control)'"
  r2=$(reuse_run reuse2 300); echo "run 2: $r2"; reuse_ok "$r2" "(reused)" || ok=1
  [ "$(cat "$SC/keeper/cgroup.procs" 2>/dev/null)" = "$kp" ] || { echo "the keeper changed"; ok=1; }
  i=0; while ls -d $SC/run-* >/dev/null 2>&1 && [ $i -lt 40 ]; do sleep 0.25; i=$((i + 1)); done
  left=$(ls -d $SC/run-* 2>/dev/null | wc -l); echo "empty run-* cgroups left after the runs: $left"; [ "$left" = 0 ] || ok=1
  [ -n "$kp" ] && kill "$kp"; i=0; while [ -d "$SC" ] && [ $i -lt 40 ]; do sleep 0.25; i=$((i + 1)); done
  [ -d "$SC" ] && { echo "scope still there after its keeper was killed"; ok=1; } || echo "keeper killed: scope gone"
  r3=$(reuse_run reuse3 5); echo "run 3 (after kill): $r3"; reuse_ok "$r3" "started the scope" || ok=1
  SC=$(scope_dir); i=0; while [ -n "$SC" ] && [ -d "$SC" ] && [ $i -lt 80 ]; do sleep 0.25; i=$((i + 1)); done
  [ -n "$SC" ] && [ -d "$SC" ] && { echo "scope still there 20 s after the last run (idle 5 s)"; ok=1; } || echo "keeper idle: scope gone after ~$((i / 4)) s"
  r4=$(reuse_run reuse4 300); echo "run 4 (after idle): $r4"; reuse_ok "$r4" "started the scope" || ok=1
  [ $ok = 0 ] || grep -iE "sbx-runs|scope-keeper|attach" /tmp/systemd-user.log | tail -8
  echo "$r2" | cut -d'|' -f3,4 | sed 's/^/     second run: /' >>"$SUMMARY"
  return $ok
}

bench_systemd_scope() {  # the per-run cost of the automatic scope (bench/systemd_scope.sh), TCG timings
  sbx_run_ready || return $?
  start_user_manager || return $?
  in_user_session bench "sh '$REPO/bench/systemd_scope.sh' '$SBX' 3 >/tmp/home$U/bench.txt 2>&1"; rc=$?
  cp /tmp/home$U/bench.txt /tmp/bench-scope.txt
  cat /tmp/bench-scope.txt
  grep 'ratio' /tmp/bench-scope.txt | sed 's/^/     /' >>"$SUMMARY"
  return $rc
}

stop_user_manager() {
  [ -f /tmp/systemd-user.pid ] || return 0
  kill "$(cat /tmp/systemd-user.pid)" 2>/dev/null; sleep 1
  echo "systemd --user stopped"
}

run "unit: RunCgroup from the root cgroup" unit_cgroup_from_root
run "unit: RunCgroup as root from a busy non-root cgroup (root's sbx subtree)" unit_cgroup_from_nonroot_cgroup
run "unit: RunCgroup rootless (uid 1001) in a delegated subtree" unit_cgroup_rootless_delegated
run "sbx run --memory" sbx_run_memory
run "sbx run --events: violation and oom limit events" sbx_run_events_oom
run "sbx run as root from a cgroup holding other processes" sbx_run_from_busy_cgroup
run "sbx run as root from a service cgroup (system.slice/x.service)" sbx_run_from_service_cgroup
run "sbx run rootless under systemd --user, no flag (automatic scope)" sbx_run_rootless_user_manager
run "sbx run rootless under systemd --user, --pids" sbx_run_rootless_user_manager_pids
run "sbx run rootless under systemd --user: long-lived scope reused, keeper idle/kill" sbx_run_rootless_reused_scope
run "bench: cost of the automatic systemd scope" bench_systemd_scope
stop_user_manager >/dev/null
run "sbx run --pids" sbx_run_pids
run "sbx run --cpus" sbx_run_cpus
run "sbx run --cpu-time" sbx_run_cpu_time
run "sbx run --timeout leaves no process" sbx_run_timeout_cleans
run "sbx mcp --pool: a killed pooled worker's run cgroup is removed" sbx_mcp_pool_killed_worker_leaves_no_cgroup
run "sbx mcp --pool: a worker killed while building leaves no run cgroup" sbx_mcp_pool_worker_killed_while_building_leaves_no_cgroup
run "sbx run rootless, delegated subtree" sbx_run_rootless_delegated
run "sbx probe rootless, delegated subtree: limits held through cgroup v2" sbx_probe_rootless_delegated
run "sbx mcp --pool rootless, delegated subtree: calls get run cgroups" sbx_mcp_rootless_delegated
run "sbx mcp warm templates: each forked call in its own run cgroup, limits held" sbx_mcp_template_calls_own_cgroup
run "sbx session: one run cgroup for the session, its limits on every call, nothing left at stop" sbx_session_cgroup
run "cgroup namespace with processes at its root (sbx cgroup-init)" cgroupns_procs_at_root
run "sbx run: int 0x80 is refused (seccomp)" sbx_run_int80
run "sbx run --gpu (stand-in) keeps the cgroup v2 memory limit" sbx_run_gpu_memory
run "sbx run x100 leaves nothing" sbx_run_100_runs
run "bench: cgroup placement per-run cost" bench_cgroup_placement
run "nothing left under the sbx subtree" nothing_left_in_subtree

# The evidence lines the unit tests print (oom_kill, pids, cpu share) go into the summary too.
grep -E 'memory hog|pids.max=8|cpu.max 0.2|100 create' /tmp/unit-cgroup.log 2>/dev/null | sed 's/^ */     /' >>"$SUMMARY"
sed 's/^/     /' /tmp/bench-placement.txt >>"$SUMMARY" 2>/dev/null
[ $FAILED = 0 ] && echo "guest tests: all passed" | tee -a "$SUMMARY" || echo "guest tests: FAILED" | tee -a "$SUMMARY"
exit $FAILED
