#!/bin/sh
# Checks runvm.sh's choice of accelerator without booting anything: a stand-in qemu-system-x86_64
# on PATH that hangs (like a nested guest under a broken KVM) or reports at once, and a stand-in
# KVM device. The real guest is booted by run.sh (ctest vm_cgroup_v2).
# usage: tests/vm/test_accel.sh      last line: "N passed, N failed"
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/sbx-vm-accel.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/bin" "$T/vm" "$T/res"
: >"$T/vm/vmlinux"; : >"$T/vm/initrd.gz"; : >"$T/kvm"; chmod 600 "$T/kvm"
# The stand-in logs each boot's accelerator; under KVM it hangs when FAKE_KVM=hang (exec: the
# process that `timeout` kills is the sleep itself, so nothing is left behind).
cat >"$T/bin/qemu-system-x86_64" <<'Q'
#!/bin/sh
accel=?
while [ $# -gt 0 ]; do [ "$1" = -accel ] && accel=$2; shift; done
echo "$accel" >>"$FAKE_LOG"
[ "$accel" = kvm ] && [ "$FAKE_KVM" = hang ] && exec sleep 600
exit 1   # isa-debug-exit: (0 << 1) | 1, the guest's script exited 0
Q
chmod +x "$T/bin/qemu-system-x86_64"
pass=0 fail=0
# check NAME EXPECTED_LOG EXPECTED_MSG ENV...: runs runvm.sh with ENV, compares the boots and message.
check() {
  name=$1 want_log=$2 want_msg=$3; shift 3
  : >"$T/log"
  t0=$(date +%s)
  msg=$(env PATH="$T/bin:$PATH" FAKE_LOG="$T/log" SBX_VM_TIMEOUT=8 SBX_VM_KVM_PROBE_TIMEOUT=2 "$@" \
        "$HERE/runvm.sh" "$T/vm" "$T/res" /bin/true 2>&1 >/dev/null)
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  got_log=$(tr '\n' ' ' <"$T/log")
  if [ $rc -eq 0 ] && [ "$got_log" = "$want_log" ] && echo "$msg" | grep -q "$want_msg" && [ $secs -le 6 ]; then
    echo "ok   $name: boots [$got_log] in $secs s; $msg"; pass=$((pass + 1))
  else
    echo "FAIL $name: rc=$rc boots [$got_log] (want [$want_log]) in $secs s; message: $msg (want /$want_msg/)"; fail=$((fail + 1))
  fi
}
check "kvm device present but the guest hangs under it -> tcg" "kvm tcg " "accelerator: tcg (KVM probe boot hung" \
  SBX_VM_KVM_DEV="$T/kvm" FAKE_KVM=hang
check "kvm proven by a probe boot -> kvm" "kvm kvm " "accelerator: kvm (KVM probe boot reported" \
  SBX_VM_KVM_DEV="$T/kvm" FAKE_KVM=works
check "no kvm device -> tcg, no probe" "tcg " "accelerator: tcg (.* is missing or not writable)" \
  SBX_VM_KVM_DEV="$T/nosuch" FAKE_KVM=works
check "SBX_VM_ACCEL=tcg -> no probe" "tcg " "accelerator: tcg (SBX_VM_ACCEL=tcg)" \
  SBX_VM_KVM_DEV="$T/kvm" FAKE_KVM=hang SBX_VM_ACCEL=tcg
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
