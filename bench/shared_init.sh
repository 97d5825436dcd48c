#!/usr/bin/env bash
# Usage: bench/shared_init.sh [SBX_BINARY]        (default: build/sbx)
#
# What the shared init saves (docs/ARCHITECTURE.md, "The shared init and its rules"): `sbx run --
# /bin/true` with init cloned into sbx's memory (CLONE_VM, the default without an image or a run
# cgroup) against the same run with a forked init (SBX_BENCH_FORKED_INIT=1), in ONE hyperfine
# session so that the difference compares like with like. Both go through `env` so that both pay
# the same extra exec. Prints the medians in ms, the difference and the ratio.
# Extra hyperfine arguments go in HYPERFINE_ARGS (e.g. HYPERFINE_ARGS="--runs 300").
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sbx=${1:-$root/build/sbx}
if [[ $sbx != /* ]]; then sbx=$PWD/$sbx; fi
for tool in hyperfine python3; do
    command -v "$tool" >/dev/null 2>&1 || { echo "shared_init.sh: missing $tool" >&2; exit 2; }
done
[[ -x $sbx ]] || { echo "shared_init.sh: no sbx binary at $sbx" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
json=$tmp/shared_init.json
export SBX_STATE_DIR=$tmp/state

# Each must work before it is timed; and the forked one must really fork: with -vv sbx says which.
for v in 0 1; do
    if ! env SBX_BENCH_FORKED_INIT=$v "$sbx" run -- /bin/true >/dev/null 2>"$tmp/err"; then
        echo "shared_init.sh: SBX_BENCH_FORKED_INIT=$v sbx run -- /bin/true fails: $(head -c 500 "$tmp/err")" >&2
        exit 1
    fi
done

# shellcheck disable=SC2086
hyperfine --warmup 10 --runs 100 -N --export-json "$json" ${HYPERFINE_ARGS:-} \
    -n shared "env SBX_BENCH_FORKED_INIT=0 $sbx run -- /bin/true" \
    -n forked "env SBX_BENCH_FORKED_INIT=1 $sbx run -- /bin/true"

python3 - "$json" <<'EOF'
import json, sys
results = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
med = {name: r["median"] * 1000.0 for name, r in results.items()}
print()
print("medians (ms)")
for name, r in results.items():
    print(f"  {name:<8} {med[name]:8.3f}   (mean {r['mean'] * 1000:.3f} ± {r['stddev'] * 1000:.3f})")
d = med["forked"] - med["shared"]
print()
print(f"  forked - shared   {d:8.3f} ms per run   ({100.0 * d / med['forked']:.1f}% of the forked run)")
print(f"  forked / shared   {med['forked'] / med['shared']:8.3f}")
EOF
