#!/bin/sh
# Boot the sbx test guest (built by mkvm.sh) once and run SCRIPT inside it.
# usage: tests/vm/runvm.sh VMDIR RESULTS_DIR SCRIPT [ARGS...]
#   The host's / is the guest's root (9p, read-only, tmpfs overlay on top), so SCRIPT, its ARGS and
#   the binaries they run are host paths, used unchanged. RESULTS_DIR is shared writable at
#   /results. cgroup2 is at /sys/fs/cgroup with +cpu +memory +pids enabled at the root.
#   Exit status: SCRIPT's (0..127); 124 if the guest ran past SBX_VM_TIMEOUT seconds (default 600);
#   125 if the guest never reported. Says on stderr which accelerator it used and why (TCG
#   unless a probe boot proved KVM works; SBX_VM_ACCEL=auto|tcg|kvm).
# SCRIPT travels on the kernel command line, which knows nothing of shell quoting: pass a script
# file and plain words (no spaces, no quotes) — a quoted `sh -c '...'` hangs the guest.
set -u
VM=${1:?usage: runvm.sh VMDIR RESULTS_DIR SCRIPT [ARGS...]}; RES=${2:?}; shift 2
[ $# -ge 1 ] || { echo "runvm: no script given" >&2; exit 125; }
for a in "$@"; do case $a in *[[:space:]\'\"]*) echo "runvm: argument '$a' has spaces or quotes" >&2; exit 125;; esac; done
command -v qemu-system-x86_64 >/dev/null || { echo "runvm: qemu-system-x86_64 missing (apt-get install qemu-system-x86)" >&2; exit 125; }
APPEND="console=ttyS0 panic=-1 quiet"; [ -n "${SBX_VM_VERBOSE:-}" ] && APPEND="console=ttyS0 panic=-1"
# boot ACCEL SECONDS SCRIPT [ARGS]: one guest boot; prints qemu's exit status.
boot() {
  accel=$1 secs=$2; shift 2
  timeout "$secs" qemu-system-x86_64 -accel "$accel" -m "${SBX_VM_MEM:-1024}" -smp "${SBX_VM_CPUS:-2}" \
    -nographic -no-reboot -nic none \
    -kernel "$VM/vmlinux" -initrd "$VM/initrd.gz" \
    -append "$APPEND -- $*" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs "local,path=$RES,mount_tag=results,security_model=none" \
    -device isa-debug-exit,iobase=0xf4,iosize=0x04 </dev/null
}

# Which accelerator: TCG unless KVM is proven to work. A writable /dev/kvm is no proof: on nested
# hosts the device can exist while the guest hangs at boot under KVM, which would turn into a
# time-out of the whole test. So KVM is used only after a short probe boot (the same guest running
# /bin/true) has reported its exit status within SBX_VM_KVM_PROBE_TIMEOUT seconds.
# SBX_VM_ACCEL=tcg|kvm skips the probe; SBX_VM_KVM_DEV names the device (tests use a stand-in).
choose_accel() {
  case ${SBX_VM_ACCEL:-auto} in
    tcg|kvm) ACCEL=$SBX_VM_ACCEL; WHY="SBX_VM_ACCEL=$SBX_VM_ACCEL"; return ;;
    auto) ;;
    *) echo "runvm: SBX_VM_ACCEL must be auto, tcg or kvm, got '$SBX_VM_ACCEL'" >&2; exit 125 ;;
  esac
  ACCEL=tcg
  dev=${SBX_VM_KVM_DEV:-/dev/kvm}
  if [ ! -w "$dev" ]; then WHY="$dev is missing or not writable"; return; fi
  probe_secs=${SBX_VM_KVM_PROBE_TIMEOUT:-30}
  t0=$(date +%s)
  boot kvm "$probe_secs" /bin/true >/dev/null 2>&1
  pq=$?
  if [ $pq -eq 1 ]; then  # isa-debug-exit with status 0
    ACCEL=kvm; WHY="KVM probe boot reported in $(( $(date +%s) - t0 )) s"
  elif [ $pq -eq 124 ]; then
    WHY="KVM probe boot hung (no report within ${probe_secs} s)"
  else
    WHY="KVM probe boot failed (qemu rc=$pq)"
  fi
}
choose_accel
echo "runvm: accelerator: $ACCEL ($WHY)" >&2
boot "$ACCEL" "${SBX_VM_TIMEOUT:-600}" "$@"
q=$?
[ $q -eq 124 ] && { echo "runvm: guest timed out after ${SBX_VM_TIMEOUT:-600} s" >&2; exit 124; }
# isa-debug-exit: qemu exits with (value << 1) | 1; a plain 0 means the guest powered off silently.
[ $((q & 1)) -eq 1 ] && exit $((q >> 1))
echo "runvm: guest did not report an exit status (qemu rc=$q)" >&2; exit 125
