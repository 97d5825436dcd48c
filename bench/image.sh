#!/usr/bin/env bash
# Usage: bench/image.sh [SBX_BINARY] [DEBIAN_TARBALL]
#        (defaults: build/sbx, build/rootfs/debian-bookworm-python3.tar)
#
# Two costs of images, each measured side by side in ONE hyperfine session:
#  1. Does the overlay root's cost grow with the image? `sbx run --image X -- /bin/true` on the
#     busybox image (~300 entries) and on Debian minbase + python3 (~7,500 entries), next to the
#     host root; plus `sbx image verify X` (the seal walk alone, which every run also does).
#     Then sbx's own -vv timing lines split a run into the seal walk and the sandbox's setup.
#  2. --input hashing throughput: `sbx run --input FILE -- /bin/true` on a 1 GiB file in the page
#     cache, against the same run without it, and against sha256sum and openssl on that file.
# The Debian tarball comes from rootfs/build-debian.sh (needs a mirror); without it, part 1 runs
# on busybox and the host root only and says so.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sbx=${1:-$root/build/sbx}
debian_tar=${2:-$root/build/rootfs/debian-bookworm-python3.tar}
[[ $sbx == /* ]] || sbx=$PWD/$sbx
for tool in hyperfine python3 sha256sum; do
    command -v "$tool" >/dev/null || { echo "image.sh: missing $tool" >&2; exit 2; }
done
[[ -x $sbx ]] || { echo "image.sh: no sbx binary at $sbx" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"  # as root the sandbox's mapped uid must reach --input sources
export SBX_STATE_DIR=$tmp/state

"$root/rootfs/build-busybox.sh" "$tmp/busybox" >/dev/null
"$sbx" image import "$tmp/busybox" --name busybox
cmds=(-n "host root" "$sbx run -- /bin/true"
      -n "busybox image" "$sbx run --image busybox -- /bin/true"
      -n "busybox seal only" "$sbx image verify busybox")
have_debian=0
if [[ -f $debian_tar ]]; then
    "$sbx" image import "$debian_tar" --name debian
    "$sbx" run --image debian -- /usr/bin/python3 -c 'print("python3 runs on the Debian image")'
    cmds+=(-n "debian image" "$sbx run --image debian -- /bin/true"
           -n "debian seal only" "$sbx image verify debian")
    have_debian=1
else
    echo "image.sh: no Debian tarball at $debian_tar (rootfs/build-debian.sh builds it): busybox and host only" >&2
fi

echo "== 1. run cost by image (one hyperfine session)"
# shellcheck disable=SC2086
hyperfine --warmup 5 --runs 40 -N --export-json "$tmp/image.json" ${HYPERFINE_ARGS:-} "${cmds[@]}" >/dev/null

# -vv: sbx's own split of a run (the seal walk runs beside the sandbox's setup).
phase() {
    local image=$1 n=30
    for _ in $(seq $n); do "$sbx" -vv run --image "$image" -- /bin/true 2>&1; done |
        python3 -c '
import re, statistics, sys
seal, sandbox = [], []
for line in sys.stdin:
    m = re.search(r"image seal: (\d+) entries checked in (\d+) us", line)
    if m: seal.append(int(m.group(2)) / 1000); entries = m.group(1)
    m = re.search(r"run (\d+) us", line)  # forked init (images): its setup + the program
    if m: sandbox.append(int(m.group(1)) / 1000)
print(f"  {sys.argv[1]:8} seal walk {statistics.median(seal):6.2f} ms for {entries} entries; "
      f"sandbox phase (overlay root, /proc, /dev, ... + the program) {statistics.median(sandbox):6.2f} ms")
' "$image"
}

python3 - "$tmp/image.json" "$have_debian" <<'PY'
import json, sys
r = {x["command"]: x["median"] * 1000 for x in json.load(open(sys.argv[1]))["results"]}
for k, v in r.items():
    print(f"  {k:20} {v:7.2f} ms")
if sys.argv[2] == "1":
    print(f"  debian/busybox, whole run:         {r['debian image'] / r['busybox image']:.2f}")
    print(f"  debian/busybox, seal walk alone:   {r['debian seal only'] / r['busybox seal only']:.2f}")
    print(f"  busybox image / host root:         {r['busybox image'] / r['host root']:.2f}")
PY
echo "  median of 30 runs each, from sbx -vv:"
phase busybox
[[ $have_debian == 1 ]] && phase debian

echo "== 2. --input hashing throughput (1 GiB in the page cache)"
big=$tmp/big.bin
head -c 1G /dev/urandom > "$big"
cat "$big" > /dev/null
hyperfine --warmup 1 --runs 5 -N --export-json "$tmp/input.json" \
    -n "run" "$sbx run -- /bin/true" \
    -n "run --input 1GiB" "$sbx run --input $big -- /bin/true" \
    -n "sha256sum 1GiB" "sha256sum $big" \
    -n "openssl 1GiB" "openssl dgst -sha256 $big" >/dev/null
python3 - "$tmp/input.json" <<'PY'
import json, sys
r = {x["command"]: x["median"] for x in json.load(open(sys.argv[1]))["results"]}
mib = 1024
hashing = r["run --input 1GiB"] - r["run"]
print(f"  sbx --input:  {mib / hashing:7.0f} MiB/s  ({hashing * 1000:.0f} ms over a plain run)")
print(f"  sha256sum:    {mib / r['sha256sum 1GiB']:7.0f} MiB/s")
print(f"  openssl:      {mib / r['openssl 1GiB']:7.0f} MiB/s")
PY
