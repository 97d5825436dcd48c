#!/usr/bin/env bash
# Usage: bench/shared_init.sh [SBX_BINARY]        (default: build/sbx)
#
# What the shared init saves (docs/ARCHITECTURE.md, "The shared init and its rules"): `sbx run --
# /bin/true` with init cloned into sbx's memory (CLONE_VM, the default without an image or a run
# cgroup) against the same run with a forked init (SBX_BENCH_FORKED_INIT=1), in ONE hyperfine
# session so that the difference compares like with like. Both go through `env` so that both pay
# the same extra exec. Prints the medians in ms, the difference and the ratio. Then the CPU time
# (user + system, of sbx, init and the program together: RUSAGE_CHILDREN) per run of each, the
# two interleaved run by run, which a busy machine disturbs far less than the wall time.
# RUNS (default 100) sets hyperfine's runs, HYPERFINE_ARGS adds other arguments; CPU_RUNS
# (default 200) sets the second part's runs.
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
hyperfine --warmup 10 --runs "${RUNS:-100}" -N --export-json "$json" ${HYPERFINE_ARGS:-} \
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

python3 - "$sbx" "${CPU_RUNS:-200}" <<'EOF'
import os, resource, subprocess, sys, time
sbx, runs = sys.argv[1], int(sys.argv[2])
cpu = {"shared": [], "forked": []}
wall = {"shared": [], "forked": []}
for i in range(runs):
    for name, v in (("shared", "0"), ("forked", "1")) if i % 2 == 0 else (("forked", "1"), ("shared", "0")):
        env = dict(os.environ, SBX_BENCH_FORKED_INIT=v)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        subprocess.run([sbx, "run", "--", "/bin/true"], env=env, check=True, stdout=subprocess.DEVNULL)
        wall[name].append(time.monotonic() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu[name].append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]
print()
print(f"CPU time per run, user+sys of all its processes, {runs} runs each, interleaved (ms)")
for name in ("shared", "forked"):
    print(f"  {name:<8} median {median(cpu[name]) * 1000:7.3f}   mean {sum(cpu[name]) / runs * 1000:7.3f}"
          f"   (wall median {median(wall[name]) * 1000:7.3f})")
d = median(cpu["forked"]) - median(cpu["shared"])
print(f"  forked - shared   {d * 1000:7.3f} ms CPU per run   ({100.0 * d / median(cpu['forked']):.1f}% of the forked run)")
EOF
