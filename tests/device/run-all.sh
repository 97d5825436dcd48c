#!/bin/bash
# Every check of issue 38 in one call on the borrowed device machine (tests/device/README.md): the
# host's facts, the GPU checks, cgroup v2 limits as root and as an unprivileged user, `sbx probe`
# both ways, bench/startup.sh and the pool benchmarks. Each part has its own time limit and a part
# that fails does not stop the rest.
#
#   tests/device/run-all.sh [SBX]          (as root, from the repository root; default build/sbx)
#   DEVCHECK_PARTS="facts gpu ..."         only the parts named (default: every part)
#
# Tools the machine lacks travel in .devcarry/ (made here by tests/device/carry.sh): hyperfine,
# bwrap and the libraries bwrap needs. Results: $OUT/summary.txt (every part's summary) and
# $OUT/details.tgz (each part's full output, traces included); without $OUT, /tmp/devcheck.
# The parts: facts, gpu, limits, probe, startup, mcp-pool, mcp-pack-pool, mcp-warm, template-pss, mcp-throughput,
# phases (bench/run_phases.sh), cgroup-placement (bench/cgroup_placement.sh).
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tests/device/common.sh
. "$REPO/tests/device/common.sh"
SBX=$(readlink -f "${1:-$REPO/build/sbx}")
W=/tmp/devcheck
DEST=${OUT:-$W}
rm -rf "$W"; mkdir -p "$W" "$DEST"
SUMMARY=$DEST/summary.txt
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
export PATH=$REPO/.devcarry/bin:/usr/local/nvidia/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The carried bwrap's libraries, only where the machine's own are missing.
if [ -x "$REPO/.devcarry/bin/bwrap" ] && LD_LIBRARY_PATH= ldd "$REPO/.devcarry/bin/bwrap" 2>/dev/null | grep -q "not found"; then
  export LD_LIBRARY_PATH=$REPO/.devcarry/lib
fi
T0=$(date +%s)
# part NAME SECONDS CMD...: CMD's output to W/NAME.log; the summary gets its status and, where it
# wrote one, its own summary file (W/NAME/summary.txt), else the log's last lines.
# Every part's limit is cut to what is left of DEVCHECK_DEADLINE seconds (default 520), so that the
# results are packed before the device call's own limit; a part with under 20 s left is skipped.
part() {
  local name=$1 secs=$2; shift 2
  mkdir -p "$W/$name"
  local t=$(date +%s) left=$(( ${DEVCHECK_DEADLINE:-520} - ($(date +%s) - T0) ))
  case " ${DEVCHECK_PARTS:-$name} " in *" $name "*) ;; *) return ;; esac
  if [ $left -lt 20 ]; then say ""; say "######## $name: SKIPPED (${left} s left of the deadline)"; return; fi
  [ $secs -gt $((left - 10)) ] && secs=$((left - 10))
  # A shell function of this script runs in a bash of its own (timeout execs its command).
  # It sources common.sh again.
  if declare -F "$1" >/dev/null; then set -- bash -c ". \"\$0\"; $(declare -f "$1"); $1" "$REPO/tests/device/common.sh"; fi
  timeout --kill-after=10 "$secs" "$@" > "$W/$name.log" 2>&1
  local rc=$?
  say ""
  say "######## $name: rc=$rc$([ $rc -eq 124 ] && echo ' (TIMED OUT)') in $(( $(date +%s) - t )) s (t+$(( $(date +%s) - T0 )) s)"
  if [ -s "$W/$name/summary.txt" ]; then cut -c1-400 "$W/$name/summary.txt" | tee -a "$SUMMARY"
  else grep -v '^$' "$W/$name.log" | tail -n "${TAIL:-40}" | cut -c1-400 | tee -a "$SUMMARY"; fi
}

facts() {
  echo "date $(date -u +%FT%TZ); kernel $(uname -r); $(nproc) CPUs; $(awk '/MemTotal/ {print $2/1048576 " GiB"}' /proc/meminfo)"
  echo "os: $(. /etc/os-release 2>/dev/null; echo "$PRETTY_NAME")"
  echo "sbx: $("$SBX" --version 2>&1 | head -1) ($(stat -c %s "$SBX") bytes)"
  echo "PID 1: $(cat /proc/1/comm) ($(readlink /proc/1/exe 2>/dev/null)); this shell's cgroup: $(cat /proc/self/cgroup)"
  echo "cgroup: $(stat -fc %T /sys/fs/cgroup); controllers '$(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null)'; subtree_control '$(cat /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null)'"
  echo "cgroup tree: $(cd /sys/fs/cgroup && find . -mindepth 1 -maxdepth 2 -type d | head -20 | tr '\n' ' ')"
  for f in /proc/sys/user/max_user_namespaces /proc/sys/kernel/unprivileged_userns_clone /proc/sys/kernel/apparmor_restrict_unprivileged_userns \
           /proc/sys/kernel/yama/ptrace_scope /proc/sys/kernel/seccomp/actions_avail; do
    [ -e $f ] && echo "$f = $(cat $f)"
  done
  echo "lsm: $(cat /sys/kernel/security/lsm 2>/dev/null)"
  echo "tools: $(for t in python3 setpriv unshare systemd-run nvidia-smi hyperfine bwrap useradd; do printf '%s=%s ' $t "$(command -v $t || echo -)"; done)"
  echo "nvidia nodes: $(ls /dev | grep nvidia | tr '\n' ' '); /usr/local/nvidia: $(ls /usr/local/nvidia 2>/dev/null | tr '\n' ' '); cdi: $(ls /etc/cdi /var/run/cdi 2>/dev/null | tr '\n' ' ')"
  echo "/proc/driver/nvidia/version: $(head -1 /proc/driver/nvidia/version 2>/dev/null)"
  echo "mounts of note: $(grep -E ' / | /usr | /dev | /tmp | /sys/fs/cgroup ' /proc/self/mountinfo | cut -d' ' -f5,9,10 | tr '\n' ';')"
  echo "user $DEVCHECK_UID in passwd: $(getent passwd "$DEVCHECK_UID" || echo no)"
  echo "== sbx doctor"; timeout 20 "$SBX" doctor 2>&1 | head -n 40
}
export DEVCHECK_UID=${DEVCHECK_UID:-1001} SBX W

# sbx probe as root, and as uid DEVCHECK_UID from a fresh cgroup delegated to it (as a Delegate=yes
# scope is; limits-check.sh), so the rootless probe's limits go through cgroup v2 too.
probe() {
  local d=$W/probe cg=/sys/fs/cgroup/devcheck-probe-$DEVCHECK_UID.scope
  mkdir -p "$d/root" "$d/user"; chown "$DEVCHECK_UID" "$d/user"
  echo "== sbx probe as root"
  SBX_STATE_DIR=$d/root timeout 60 "$SBX" probe > "$d/root.txt" 2>&1; echo "exit $?"
  tail -n 45 "$d/root.txt"
  for c in memory pids cpu; do echo "+$c" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; done
  delegate_cgroup "$cg" "$DEVCHECK_UID"
  as_user_prefix "$DEVCHECK_UID"
  echo "== sbx probe as uid $DEVCHECK_UID, from $cg (delegated)"
  timeout 60 sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$cg" \
    "${AS_USER[@]}" env HOME="$d/user" SBX_STATE_DIR="$d/user" "$SBX" probe > "$d/user.txt" 2>&1; echo "exit $?"
  tail -n 45 "$d/user.txt"
  remove_cgroup_tree "$cg" || echo "note: $cg not removed"
}

part facts 30 facts
part gpu 330 "$REPO/tests/device/gpu-check.sh" "$SBX" "$W/gpu"
part limits 150 "$REPO/tests/device/limits-check.sh" "$SBX" "$W/limits"
TAIL=100 part probe 130 probe
part startup 120 "$REPO/bench/startup.sh" "$SBX"
part mcp-pool 120 python3 "$REPO/bench/mcp_pool.py" "$SBX" --calls 20 --gap 0.2
part mcp-pack-pool 90 python3 "$REPO/bench/mcp_pack_pool.py" "$SBX" --calls 20 --gap 0.2
# The sandbox's python3 is the host's /usr/bin/python3 (no numpy there): standard modules preloaded.
part mcp-warm 150 python3 "$REPO/bench/mcp_warm.py" "$SBX" --calls 40 --gap 0.3 --preload json,decimal,email.parser
part template-pss 60 python3 "$REPO/bench/template_pss.py" "$SBX" --pool 4 --preload json,decimal,email.parser
part mcp-throughput 120 python3 "$REPO/bench/mcp_throughput.py" "$SBX" --calls 1000 --clients 2 --concurrent 4 --pool 8
part phases 120 "$REPO/bench/run_phases.sh" "$SBX" 40
part cgroup-placement 120 "$REPO/bench/cgroup_placement.sh" "$SBX" 20
say ""
say "all parts done in $(( $(date +%s) - T0 )) s"
tar -C "$W" -czf "$DEST/details.tgz" --exclude='state' --exclude='*/state/*' . 2>/dev/null
ls -la "$DEST" >> "$SUMMARY"
