#!/bin/sh
# Per-run cost of where a run's cgroup goes (runtime/linux/cgroup.hpp), on a host with real cgroup v2
# controllers — the qemu guest runs it (tests/vm/guest-tests.sh), since this project's build hosts
# have none. As root, with cgroup v2 at /sys/fs/cgroup.
# usage: bench/cgroup_placement.sh [SBX] [RUNS]      (defaults: build/sbx, 20)
# Each variant times RUNS sequential `sbx run --memory 64M --pids 64 -- /bin/true` in one loop;
# every run is started the same way (sh -c 'echo $$ > CGROUP/cgroup.procs; exec ...'), so the
# differences are sbx's. Compare within one invocation (ratios), not across machines.
#   root-subtree    root from a busy cgroup: run cgroups under /sys/fs/cgroup/sbx (the default as root)
#   root-rlimit     the same with cgroup2 unmounted in a private mount namespace: rlimit fallback
#   cgroupns-init   root in a container-like cgroup namespace after `sbx cgroup-init`: run cgroups
#                   under the namespace root's sbx subtree
#   own-delegated   uid 1001, each run in a fresh cgroup delegated to it (as a Delegate=yes scope):
#                   sbx moves itself to <own>/sbx-supervisor and puts the run cgroup in <own>/sbx —
#                   the caller's cgroup
#   own-rlimit      uid 1001, each run in a fresh cgroup not delegated to it: rlimit fallback
#   systemd-scope   `systemd-run --scope -p Delegate=yes sbx run ...`, when PID 1 is systemd
set -u
SBX=$(readlink -f "${1:-build/sbx}")
N=${2:-20}
CG=/sys/fs/cgroup
[ "$(id -u)" = 0 ] || { echo "needs root"; exit 2; }
[ -f $CG/cgroup.controllers ] && grep -qw memory $CG/cgroup.controllers || { echo "no cgroup v2 memory controller at $CG: nothing to measure here"; exit 2; }
echo "+memory +pids +cpu" > $CG/cgroup.subtree_control
export SBX_STATE_DIR=/tmp/sbx-bench-state
mkdir -p /tmp/sbx-bench-state /tmp/sbx-bench-1001 && chown 1001:1001 /tmp/sbx-bench-1001
RUN="run --memory 64M --pids 64 --timeout 30s -- /bin/true"

# The timing loop, a script of its own so that it runs the same way inside the namespaces below:
# loop.sh CGROUP N CMD...: N runs of CMD, each from a shell that enters CGROUP first ("-": stays
# where it is, still through one sh, so that every variant forks and execs alike); prints the
# mean in microseconds, or "fail".
LOOP=/tmp/sbx-bench-loop.sh
cat >$LOOP <<'L'
cg=$1; n=$2; shift 2
t0=$(date +%s%N); i=0
while [ $i -lt $n ]; do
  c=$cg
  case $cg in
    # A fresh cgroup per run under DIR, as a transient scope is: sbx enables controllers in its
    # own cgroup (after moving itself to sbx-supervisor), so that cgroup cannot take the next
    # run's process. deleg: also delegated to uid 1001 (chown, as systemd's Delegate=yes does).
    fresh:*|deleg:*)
      c=${cg#*:}/s$i; mkdir "$c" || exit 1
      case $cg in deleg:*) chown 1001:1001 "$c" "$c/cgroup.procs" "$c/cgroup.subtree_control" "$c/cgroup.threads" ;; esac ;;
  esac
  sh -c '[ "$0" = - ] || echo $$ > "$0/cgroup.procs" || exit 1; exec "$@"' "$c" "$@" >/dev/null 2>>/tmp/sbx-bench.err || { echo fail; exit 0; }
  i=$((i + 1))
done
echo $(( ($(date +%s%N) - t0) / n / 1000 ))
L
loop() { cg=$1; shift; sh $LOOP "$cg" $N "$@" $RUN; }
fmt() {  # microseconds -> milliseconds with 3 decimals
  case $1 in fail) echo fail ;; -*) printf -- '-'; fmt "${1#-}" ;; *) printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)) ;; esac
}
: >/tmp/sbx-bench.err

mkdir -p $CG/bench-login; sh -c "echo \$\$ > $CG/bench-login/cgroup.procs && exec sleep 600" & busy=$!
D=$CG/bench-deleg; mkdir -p $D && echo "+memory +pids +cpu" > $D/cgroup.subtree_control
U=$CG/bench-nodeleg; mkdir -p $U
AS1001="setpriv --reuid=1001 --regid=1001 --clear-groups env HOME=/tmp/sbx-bench-1001 XDG_CONFIG_HOME=/tmp/sbx-bench-1001/config SBX_STATE_DIR=/tmp/sbx-bench-1001"

loop $CG/bench-login "$SBX" >/dev/null   # warm-up: page cache, the sbx subtree
a=$(loop $CG/bench-login "$SBX")
b=$(unshare --mount --propagation private sh -c 'umount "$0" && exec sh "$@"' $CG $LOOP - $N "$SBX" $RUN)
C=$CG/bench-ctr; mkdir -p $C
c=$(sh -c 'echo $$ > "$0/cgroup.procs" && exec unshare --cgroup --mount --propagation private sh -c '"'"'{ umount "$0" 2>/dev/null; mount -t cgroup2 cgroup2 "$0"; } && "$4" cgroup-init >/dev/null && exec sh "$@"'"'"' "$@"' \
    $C $CG $LOOP - $N "$SBX" $RUN)
d=$(loop deleg:$D $AS1001 "$SBX")
e=$(loop fresh:$U $AS1001 "$SBX")
if [ "$(cat /proc/1/comm)" = systemd ] && command -v systemd-run >/dev/null; then
  f=$(loop $CG/bench-login systemd-run --quiet --scope -p Delegate=yes "$SBX")
else
  f="n/a (PID 1 is '$(cat /proc/1/comm)', not systemd: no transient scopes)"
fi
kill $busy; wait $busy 2>/dev/null
for x in $C/init $C/sbx $C/sbx-supervisor $C $D/s*/sbx $D/s*/sbx-supervisor $D/s* $D $U/s* $U $CG/bench-login; do rmdir $x 2>/dev/null; done

echo "per-run wall time, ms (mean of $N sequential runs of: sbx $RUN)"
printf '  %-15s %9s   %s\n' root-subtree "$(fmt $a)" "run cgroups under $CG/sbx (root, from a busy cgroup)"
printf '  %-15s %9s   %s\n' root-rlimit "$(fmt $b)" "root, no cgroup2 mounted: rlimit fallback"
printf '  %-15s %9s   %s\n' cgroupns-init "$(fmt $c)" "root in a cgroup namespace after sbx cgroup-init"
printf '  %-15s %9s   %s\n' own-delegated "$(fmt $d)" "uid 1001, delegated cgroup: <own>/sbx (the caller's cgroup)"
printf '  %-15s %9s   %s\n' own-rlimit "$(fmt $e)" "uid 1001, not delegated: rlimit fallback"
printf '  %-15s %9s\n' systemd-scope "$f"
ratio() { [ "$1" = fail ] || [ "$2" = fail ] && echo "-" || echo "$(( $1 * 100 / $2 ))%"; }
echo "cgroup placement cost (difference to the rlimit fallback with the same identity):"
[ "$a" != fail ] && [ "$b" != fail ] && echo "  root-subtree - root-rlimit    = $(fmt $((a - b))) ms  (root-subtree is $(ratio $a $b) of root-rlimit)"
[ "$c" != fail ] && [ "$b" != fail ] && echo "  cgroupns-init - root-rlimit   = $(fmt $((c - b))) ms  (cgroupns-init is $(ratio $c $b) of root-rlimit)"
[ "$d" != fail ] && [ "$e" != fail ] && echo "  own-delegated - own-rlimit    = $(fmt $((d - e))) ms  (own-delegated is $(ratio $d $e) of own-rlimit)"
[ -s /tmp/sbx-bench.err ] && { echo "stderr of the runs (distinct lines):"; sort /tmp/sbx-bench.err | uniq -c | sed 's/^/  /'; }
case "$a$b$c$d$e" in *fail*) exit 1 ;; esac
exit 0
