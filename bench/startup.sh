#!/usr/bin/env bash
# Usage: bench/startup.sh [SBX_BINARY]        (default: build/sbx)
#
# Start-up cost of sbx against plain exec, unshare and bubblewrap, in ONE hyperfine session (so the
# ratios compare like with like on a noisy machine), then the medians in ms and the ratios
# sbx/bwrap (target <= 1.0) and sbx/true. Needs hyperfine, bwrap (bubblewrap), unshare and python3.
# Extra hyperfine arguments can be passed in HYPERFINE_ARGS (e.g. HYPERFINE_ARGS="--runs 200").
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sbx=${1:-$root/build/sbx}
if [[ $sbx != /* ]]; then sbx=$PWD/$sbx; fi

missing=()
for tool in hyperfine bwrap unshare python3; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    echo "startup.sh: missing: ${missing[*]} (Debian: apt-get install hyperfine bubblewrap util-linux python3)" >&2
    exit 2
fi
if [[ ! -x $sbx ]]; then
    echo "startup.sh: no sbx binary at $sbx (build it first, or pass its path)" >&2
    exit 2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
json=$tmp/startup.json
# sbx keeps its traces here, not under $HOME; hyperfine passes the environment on.
export SBX_STATE_DIR=$tmp/state

# A read-only root comparable to sbx's default one: host /usr read-only, the merged-/usr symlinks
# of a Debian system, own /proc, a minimal /dev, a tmpfs /tmp; every namespace unshared.
bwrap_cmd="bwrap --unshare-all --die-with-parent --ro-bind /usr /usr"
for d in bin lib lib64 sbin; do
    if [[ -L /$d ]]; then
        bwrap_cmd+=" --symlink $(readlink /$d) /$d"
    elif [[ -d /$d ]]; then
        bwrap_cmd+=" --ro-bind /$d /$d"
    fi
done
bwrap_cmd+=" --proc /proc --dev /dev --tmpfs /tmp /bin/true"

# Each command must work before it is timed: a failing command would be timed as a fast one.
check() {
    local name=$1; shift
    if ! "$@" >/dev/null 2>"$tmp/err"; then
        echo "startup.sh: '$name' fails here: $(head -c 500 "$tmp/err")" >&2
        return 1
    fi
}
ok=1
check "unshare -Urpfnm /bin/true" unshare -Urpfnm /bin/true || ok=0
# shellcheck disable=SC2086
check "bwrap" $bwrap_cmd || ok=0
check "sbx --version" "$sbx" --version || ok=0
check "sbx run -- /bin/true" "$sbx" run -- /bin/true || ok=0
if [[ $ok -ne 1 ]]; then
    echo "startup.sh: fix the failing command(s) above first; nothing timed" >&2
    exit 1
fi

# -N: no intermediate shell, so the numbers are the commands' own.
# shellcheck disable=SC2086
hyperfine --warmup 5 --runs 50 -N --export-json "$json" ${HYPERFINE_ARGS:-} \
    -n true "/bin/true" \
    -n unshare "unshare -Urpfnm /bin/true" \
    -n bwrap "$bwrap_cmd" \
    -n "sbx --version" "$sbx --version" \
    -n "bwrap --version" "bwrap --version" \
    -n "sbx run" "$sbx run -- /bin/true"

python3 - "$json" <<'EOF'
import json, sys
results = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
med = {name: r["median"] * 1000.0 for name, r in results.items()}
print()
print("medians (ms)")
for name, r in results.items():
    print(f"  {name:<16} {med[name]:8.2f}   (mean {r['mean'] * 1000:.2f} ± {r['stddev'] * 1000:.2f})")
def ratio(a, b):
    return med[a] / med[b] if med.get(b) else float("nan")
print()
print("ratios (medians)")
r_bwrap = ratio("sbx run", "bwrap")
print(f"  sbx run / bwrap                  {r_bwrap:6.2f}   (target <= 1.0: {'met' if r_bwrap <= 1.0 else 'NOT met'})")
print(f"  sbx run / true                   {ratio('sbx run', 'true'):6.2f}")
print(f"  sbx --version / bwrap --version  {ratio('sbx --version', 'bwrap --version'):6.2f}")
print(f"  unshare / true                   {ratio('unshare', 'true'):6.2f}")
EOF
