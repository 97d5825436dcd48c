#!/bin/bash
# Where one-shot `sbx run -- /bin/true` spends its time, phase by phase (issue 34, item 5): the
# medians of the timing line `sbx -vv` prints (prepare, start, run, record: see the record's
# usage.phases_us in man sbx) and of the wall time, over N runs, for each place the state dir and
# the run's limits can be:
#   disk        state dir on disk (a directory under /var/tmp), limits as the host gives them
#   tmpfs       state dir on tmpfs (/dev/shm)
#   no-cgroup   (root on a cgroup v2 host only) tmpfs, and cgroup2 unmounted in a private mount
#               namespace: the rlimit fallback, with init sharing sbx's address space
# usage: bench/run_phases.sh [SBX] [N]      (defaults: build/sbx, 40)
set -u
SBX=$(readlink -f "${1:-build/sbx}")
N=${2:-40}
DISK=$(mktemp -d /var/tmp/sbx-phases.XXXXXX)
SHM=$(mktemp -d /dev/shm/sbx-phases.XXXXXX)
trap 'rm -rf "$DISK" "$SHM"' EXIT

# measure NAME STATE [PREFIX...]: N runs; prints the medians in microseconds.
measure() {
  local name=$1 state=$2; shift 2
  local log=$state/timing.log; : > "$log"
  for _ in $(seq 3); do "$@" env SBX_STATE_DIR="$state" "$SBX" run -- /bin/true 2>/dev/null; done  # caches
  for _ in $(seq "$N"); do
    local t0 t1
    t0=$(date +%s%N)
    "$@" env SBX_STATE_DIR="$state" "$SBX" -vv run -- /bin/true 2>&1 | grep -o 'timing: .*' >> "$log"
    t1=$(date +%s%N)
    echo "wall $(( (t1 - t0) / 1000 ))" >> "$log"
  done
  python3 - "$name" "$log" <<'EOF'
import re, statistics, sys
name, log = sys.argv[1], sys.argv[2]
cols = {}
for line in open(log):
    for k, v in re.findall(r"(\w+) (\d+)(?: us)?", line):
        cols.setdefault(k, []).append(int(v))
order = ["prepare", "start", "run", "record", "wall"]
print("%-10s " % name + "  ".join("%s %6.0f" % (k, statistics.median(cols[k])) for k in order if k in cols)
      + "   (us, medians of %d)" % len(cols.get("wall", [])))
EOF
}

echo "sbx run -- /bin/true, $N runs each; $(nproc) CPUs; kernel $(uname -r); uid $(id -u)"
echo "(wall includes the shell's fork and the pipe to grep, the same in every row)"
measure disk "$DISK"
measure tmpfs "$SHM"
if [ "$(id -u)" = 0 ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  NOCG=$(mktemp -d /dev/shm/sbx-phases-nocg.XXXXXX)
  # A private mount namespace without cgroup2: sbx finds no cgroup v2 and falls back to rlimits.
  measure no-cgroup "$NOCG" unshare -m --propagation private sh -c 'umount -l /sys/fs/cgroup && exec "$@"' sh
  rm -rf "$NOCG"
fi
