#!/bin/sh
# The demo behind `make run`: the corrosion-grade rule pack runs in a fresh sandbox on sample
# inspection records; sbx validates the records before the run and the result after it, prints the
# validated result, and says where the run's trace record is.
set -eu
SBX=${1:-build/sbx}
HERE=$(cd "$(dirname "$0")" && pwd)
STATE=${SBX_STATE_DIR:-$(pwd)/build/demo-state}
export SBX_STATE_DIR="$STATE"
TRACE="$STATE/last-trace.json"
mkdir -p "$STATE"
PACK="$HERE/packs/corrosion-grade"

# As root, the sandbox's users map to an unprivileged host uid (see sbx(1), IDENTITY), which must be
# able to reach the pack. A checkout under a private directory (e.g. /root) is not reachable: then
# the demo runs a copy of the pack from a world-readable temp dir (same files, same digest).
reachable=yes
if [ "$(id -u)" = 0 ]; then
  d=$PACK
  while [ "$d" != / ]; do
    case $(stat -c %A "$d") in ?????????[xt]|?????????[xt]*) ;; *) reachable=no ;; esac
    d=$(dirname "$d")
  done
fi
if [ "$reachable" = no ]; then
  TMP=$(mktemp -d /tmp/sbx-demo-XXXXXX)
  trap 'rm -rf "$TMP"' EXIT
  chmod 755 "$TMP"
  cp -r "$PACK" "$TMP/" && chmod -R a+rX "$TMP"
  echo "== (the checkout is not reachable by the sandbox's unprivileged uid: running a copy in $TMP)"
  PACK="$TMP/corrosion-grade"
fi

# The pack runs on the busybox image (its manifest says so): build and import it once, offline.
if ! "$SBX" image inspect busybox >/dev/null 2>&1; then
  echo "== building the busybox image (rootfs/build-busybox.sh, offline) and importing it"
  BB=$(mktemp -d /tmp/sbx-busybox-XXXXXX)
  "$HERE/../rootfs/build-busybox.sh" "$BB/tree" >/dev/null
  "$SBX" image import "$BB/tree" --name busybox
  rm -rf "$BB"
fi

echo "== sbx pack run corrosion-grade: wall-thickness surveys in, one grade per asset out"
echo "   (records validated against schemas/input.json before the run, the result against"
echo "   schemas/output.json after it; sh + awk on the busybox image, read-only overlay root,"
echo "   no network, own pid/user namespaces)"
set +e
"$SBX" pack run "$PACK" --input "$PACK/records.json" --trace-file "$TRACE"
rc=$?
set -e
echo "== exit status: $rc"
echo "== trace record: $TRACE (also in the trace store: $STATE/traces/)"
# The run id, read without a JSON tool (make run installs none): the record's top-level "run_id"
# is the only key of that name, on a line of its own (two-space indent).
id=$(sed -n 's/^  "run_id": "\([0-9A-Za-z.:-]*\)",\{0,1\}$/\1/p' "$TRACE" | head -n 1)
if [ -n "$id" ]; then "$SBX" trace show "$id" --format text; else "$SBX" trace show last --format text; fi
exit "$rc"
