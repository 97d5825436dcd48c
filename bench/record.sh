#!/usr/bin/env bash
# Usage: bench/record.sh [N] SBX_BINARY [SBX_BINARY...]     (N: runs per binary, default 50)
#
# The record phase of a run (storing its trace record durably) as sbx's own -vv timing line
# reports it ("timing: ... record N us": from the end of the collect phase to the end of cleanup,
# which is dominated by the store's write and sync). Runs of the binaries are interleaved, each
# with its own fresh state dir, so that the machine's noise (a shared disk's fsync latency above
# all) falls on all of them alike. Prints median, p10, p90 and mean per binary.
set -euo pipefail
n=50
if [[ ${1:-} =~ ^[0-9]+$ ]]; then n=$1; shift; fi
(( $# >= 1 )) || { echo "usage: bench/record.sh [N] SBX_BINARY..." >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ((i = 0; i < n; i++)); do
    for ((b = 1; b <= $#; b++)); do
        SBX_STATE_DIR=$tmp/state-$b "${!b}" -vv run -- /bin/true 2>&1 |
            sed -n 's/.*timing:.* record \([0-9]*\) us.*/\1/p' >>"$tmp/times-$b"
    done
done
for ((b = 1; b <= $#; b++)); do
    sort -n "$tmp/times-$b" | awk -v name="${!b}" '{a[NR] = $1; s += $1}
        END {printf "%-40s runs %d  record phase: median %d us, p10 %d, p90 %d, mean %d\n",
             name, NR, a[int(NR / 2) + 1], a[int(NR * 0.1) + 1], a[int(NR * 0.9)], s / NR}'
done
