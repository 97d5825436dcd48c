#!/bin/sh
# sbx's cgroup v2 tests in a qemu guest: builds the guest into <repo>/.vm/ if it is missing, boots
# it ONCE, runs tests/vm/guest-tests.sh BUILD_DIR inside and prints its results.
# usage: tests/vm/run.sh BUILD_DIR
# Exit status: the guest tests' status. When qemu or the kernel cannot be had, prints
# "skipped: <why>" and exits 0 — unless SBX_VM_REQUIRED=1, then exits 1 (CI sets it).
# env: SBX_VM_DIR (default <repo>/.vm), SBX_VM_TIMEOUT (s, default 600), SBX_VM_VERBOSE=1 (boot log)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUILD=$(cd "${1:?usage: tests/vm/run.sh BUILD_DIR}" && pwd) || exit 2
VMDIR=${SBX_VM_DIR:-$REPO/.vm}

skip() {
  if [ "${SBX_VM_REQUIRED:-0}" = 1 ]; then echo "FAILED: $* (SBX_VM_REQUIRED=1)"; exit 1; fi
  echo "skipped: $*"; exit 0
}

missing=""
command -v qemu-system-x86_64 >/dev/null 2>&1 || missing="$missing qemu-system-x86"
[ -x /bin/busybox ] || missing="$missing busybox-static"
for t in cpio python3; do command -v $t >/dev/null 2>&1 || missing="$missing $t"; done
[ -z "$missing" ] || skip "missing packages:$missing (apt-get install -y --no-install-recommends$missing)"
[ -x "$BUILD/sbx_unit_tests" ] || { echo "FAILED: $BUILD/sbx_unit_tests not built"; exit 1; }

if [ ! -f "$VMDIR/vmlinux" ] || [ ! -f "$VMDIR/initrd.gz" ] || [ "$HERE/mkvm.sh" -nt "$VMDIR/initrd.gz" ]; then
  echo "building the test guest in $VMDIR ..."
  mkdir -p "$VMDIR" && "$HERE/mkvm.sh" "$VMDIR" >"$VMDIR/mkvm.log" 2>&1 || { tail -5 "$VMDIR/mkvm.log"; skip "cannot build the guest kernel/initramfs (see $VMDIR/mkvm.log)"; }
fi

RES=$(mktemp -d "${TMPDIR:-/tmp}/sbx-vm-results.XXXXXX") || exit 1
trap 'rm -rf "$RES"' EXIT
chmod 777 "$RES"
t0=$(date +%s)
# The guest's console (the tests' own output, live) goes to our stdout.
"$HERE/runvm.sh" "$VMDIR" "$RES" "$HERE/guest-tests.sh" "$BUILD"
rc=$?
echo "== guest results ($(( $(date +%s) - t0 )) s, kernel $(cat "$VMDIR/kernel-version" 2>/dev/null), exit $rc) =="
[ -f "$RES/summary" ] && cat "$RES/summary"
exit $rc
