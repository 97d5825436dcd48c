#!/bin/bash
# cgroup v2 limits on a real host (issue 38, item 2): `sbx run --memory 64M` -> oom, `--cpus 0.5` ->
# about half a CPU measured, `--pids 16` -> forks refused past 16, each run from a login shell's
# busy cgroup (a sleep beside the shell), as root and as an unprivileged user (uid 1001):
#   root          from /devcheck-login.scope: run cgroups under /sys/fs/cgroup/sbx (man sbx, LIMITS)
#   user-session  from the user's session scope, root-owned and busy as logind makes it: through
#                 sbx's automatic systemd user scope when a user manager runs; without one, the
#                 documented degradation (rlimits for memory and pids, cpus not enforced, a warning)
#   user-scope    from a fresh scope delegated to the user (what `systemd-run --user --scope -p
#                 Delegate=yes` gives: chown of the directory and its cgroup.procs,
#                 cgroup.subtree_control and cgroup.threads) beside that busy session
# The qemu guest runs the same limits on TCG (tests/vm/guest-tests.sh); this is the real-host copy.
#
#   tests/device/limits-check.sh [SBX [OUTDIR]]     (as root; defaults: build/sbx, /tmp/limits-check)
#
# Each check prints one line to OUTDIR/summary.txt: PASS or FAIL, the exit status and the trace's
# evidence. The cgroups it makes (CG/devcheck-*) are removed at the end; it enables the memory, pids
# and cpu controllers at the root, as systemd does: run it only where that is allowed
# (tests/device/README.md).
set -u
SBX=$(readlink -f "${1:-build/sbx}")
OUTDIR=${2:-/tmp/limits-check}
U=${DEVCHECK_UID:-1001}
CG=/sys/fs/cgroup
mkdir -p "$OUTDIR"
SUMMARY=$OUTDIR/summary.txt
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
[ "$(id -u)" = 0 ] || { say "limits-check: needs root (it makes the login cgroups)"; exit 2; }
PY=$(command -v python3)
tr_get() { "$PY" -c "import json,sys; t=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }

# shellcheck source=tests/device/common.sh
. "$(dirname "$0")/common.sh"
as_user_prefix "$U"  # AS_USER: runs a command as uid U

# The hogs use only the shell and coreutils (the sandbox's root is the host's /usr, whatever it holds).
MEM_HOG='x=$(head -c 400000000 /dev/zero | tr "\0" a); echo "held ${#x} bytes"'
CPU_HOG='for i in 1 2 3 4; do (while :; do :; done) & done; wait'
PIDS_HOG='n=0; for i in $(seq 40); do sleep 5 & n=$((n+1)); done 2>&1; wait; echo started $n'

# check WHO FROM STATE EXPECT: the three limits, each run from a shell that first joins the cgroup
# FROM; WHO is root or user; EXPECT is cgroup (limits through cgroup v2) or degraded (the documented
# fallback without a delegated cgroup: rlimits for memory and pids, cpus not enforced).
check() {
  local who=$1 from=$2 state=$3 expect=$4 t rc ok
  local pre=(env SBX_STATE_DIR="$state")
  [ "$who" != root ] && pre=("${AS_USER[@]}" env HOME="$state" SBX_STATE_DIR="$state" XDG_RUNTIME_DIR="/run/user/$U")
  # runin TRACE SBX-ARGS...: sbx run from the cgroup FROM; its stdout and stderr to TRACE.out
  # For user-scope, FROM is the slice: each run gets a fresh scope delegated to the user there, as
  # each `systemd-run --user --scope -p Delegate=yes` makes one (sbx enables controllers in it, after
  # which it takes no process of its own).
  runin() {
    local tr=$1 src=$from; shift
    if [ "$who" = user-scope ]; then
      src=$from/run-$(basename "$tr" .json).scope
      delegate_cgroup "$src" "$U"
    fi
    timeout --kill-after=5 90 sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$src" \
      "${pre[@]}" "$SBX" run --trace-file "$tr" "$@" > "$tr.out" 2>&1
  }
  verdict() { if [ "$1" = 0 ]; then echo PASS; else echo FAIL; fi; }
  t=$state/mem.json
  runin "$t" --memory 64M --timeout 60s -- sh -c "$MEM_HOG"; rc=$?
  local st mech peak kills how under
  st=$(tr_get "$t" 't["result"]["status"]'); mech=$(tr_get "$t" 't["enforcement"]["limits_applied"].get("memory",{}).get("mechanism")')
  peak=$(tr_get "$t" 't["usage"]["memory_peak_bytes"]'); kills=$(tr_get "$t" 't["usage"]["oom_kills"]')
  how=$(tr_get "$t" 't["host"]["cgroup"].get("obtained_by")'); under=$(tr_get "$t" 't["host"]["cgroup"].get("run_cgroups_under")')
  if [ "$expect" = cgroup ]; then ok=$(verdict "$( [ "$rc" = 137 ] && [ "$st" = oom ] && echo "$mech" | grep -q memory.max; echo $?)")
  else ok=$(verdict "$( [ "$rc" != 0 ] && echo "$mech" | grep -q RLIMIT_DATA && grep -q "warning" "$t.out"; echo $?)"); fi
  say "$ok [$who, $expect] --memory 64M: exit $rc, status $st, mechanism '$mech', memory_peak_bytes $peak, oom_kills $kills, obtained_by '$how', run cgroups under '$under'"
  grep -h "warning" "$t.out" | head -2 | sed 's/^/     /' | tee -a "$SUMMARY"
  [ $ok = PASS ] || tail -5 "$t.out" | sed 's/^/     /' | tee -a "$SUMMARY"

  t=$state/cpu.json
  runin "$t" --cpus 0.5 --pids 64 --timeout 4s -- sh -c "$CPU_HOG"; rc=$?
  local cpu wall thr pct
  cpu=$(tr_get "$t" 't["usage"]["cpu_usage_ms"]'); wall=$(tr_get "$t" 't["usage"]["wall_ms"]')
  thr=$(tr_get "$t" 't["usage"].get("cpu_throttled_periods")'); mech=$(tr_get "$t" 't["enforcement"]["limits_applied"].get("cpus",{}).get("mechanism")')
  pct=0; case "$cpu$wall" in *[!0-9]*|"") ;; *) [ "$wall" -gt 0 ] && pct=$(( cpu * 100 / wall )) ;; esac
  if [ "$expect" = cgroup ]; then ok=$(verdict "$( [ "$rc" = 124 ] && [ $pct -ge 40 ] && [ $pct -le 60 ]; echo $?)")
  else ok=$(verdict "$( [ "$mech" = None ] && grep -q "not enforced: cpus" "$t.out"; echo $?)"); fi
  say "$ok [$who, $expect] --cpus 0.5 (4 busy loops, 4 s): exit $rc, cpu ${cpu} ms in ${wall} ms wall = ${pct}% of one CPU (cgroup: want 40-60), throttled periods $thr, mechanism '$mech'"
  [ $ok = PASS ] || tail -5 "$t.out" | sed 's/^/     /' | tee -a "$SUMMARY"

  t=$state/pids.json
  runin "$t" --pids 16 --timeout 60s -- sh -c "$PIDS_HOG"; rc=$?
  local ppeak said
  ppeak=$(tr_get "$t" 't["usage"]["pids_peak"]'); mech=$(tr_get "$t" 't["enforcement"]["limits_applied"].get("pids",{}).get("mechanism")')
  said=$(grep -c -i "fork" "$t.out" 2>/dev/null); said=${said:-0}
  if [ "$expect" = cgroup ]; then ok=$(verdict "$( [ "$ppeak" = 16 ] && [ "$said" -ge 1 ]; echo $?)")
  else ok=$(verdict "$( echo "$mech" | grep -q RLIMIT_NPROC && [ "$said" -ge 1 ]; echo $?)"); fi
  say "$ok [$who, $expect] --pids 16 (40 sleeps): exit $rc, pids_peak $ppeak, failed forks reported $said, mechanism '$mech'"
  [ $ok = PASS ] || tail -5 "$t.out" | sed 's/^/     /' | tee -a "$SUMMARY"
}

say "host: kernel $(uname -r), $(nproc) CPUs, cgroup fs $(stat -fc %T $CG), root controllers '$(cat $CG/cgroup.controllers 2>/dev/null)', root subtree_control '$(cat $CG/cgroup.subtree_control 2>/dev/null)', this shell in $(cut -d: -f3 /proc/self/cgroup), PID 1 $(cat /proc/1/comm)"
# Controllers reach the login cgroups as systemd enables them down to a user's slice.
for c in memory pids cpu; do echo "+$c" > $CG/cgroup.subtree_control 2>/dev/null; done

# The state dirs: sbx refuses one below a directory others can write (other than a sticky /tmp).
ST=$(mktemp -d /tmp/devcheck-limits.XXXXXX); chmod 711 "$ST"
trap 'cp -r "$ST"/root "$ST"/user "$OUTDIR"/ 2>/dev/null; rm -rf "$ST"' EXIT

# root, from a busy login cgroup
LOGIN=$CG/devcheck-login.scope
mkdir -p "$LOGIN" "$ST/root"
sh -c "echo \$\$ > $LOGIN/cgroup.procs && exec sleep 600" & OTHER=$!
sleep 0.2
check root "$LOGIN" "$ST/root" cgroup
kill $OTHER; wait $OTHER 2>/dev/null

# the unprivileged user: a slice with a busy session scope (root-owned, as logind makes it) and a
# scope delegated to the user beside it
UCG=$CG/devcheck-user-$U.slice; SESS=$UCG/session-devcheck.scope
UST=$ST/user; mkdir -p "$UST" "$SESS"
for c in memory pids cpu; do echo "+$c" > "$UCG/cgroup.subtree_control" 2>/dev/null; done
chown "$U:$U" "$UST"
sh -c "echo \$\$ > $SESS/cgroup.procs && exec ${AS_USER[*]} sleep 600" & OTHER=$!
sleep 0.2
userns=$("${AS_USER[@]}" unshare -U true 2>&1 && echo yes || echo no)
manager=no; [ -S "/run/user/$U/systemd/private" ] && command -v systemd-run >/dev/null && manager=yes
say "uid $U: unprivileged user namespaces: $userns; systemd user manager: $manager; session scope $SESS (busy), delegated scopes beside it (controllers '$(cat "$UCG/cgroup.subtree_control")')"
if [ $manager = yes ]; then check user-session "$SESS" "$UST" cgroup; else check user-session "$SESS" "$UST" degraded; fi
check user-scope "$UCG" "$UST" cgroup
kill $OTHER; wait $OTHER 2>/dev/null

# Leave no cgroup behind: sbx removes its run cgroups; the subtrees it made below ours go bottom-up.
for d in "$UCG" "$LOGIN"; do
  remove_cgroup_tree "$d" || say "note: $d not removed: $(cat "$d/cgroup.procs" 2>/dev/null | tr '\n' ' ')"
done
say "left under $CG/sbx: $(ls -d $CG/sbx/run-* 2>/dev/null | wc -l) run cgroups"
