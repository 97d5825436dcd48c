#!/bin/sh
# Boot the sbx test guest (built by mkvm.sh) once and run SCRIPT inside it.
# usage: tests/vm/runvm.sh VMDIR RESULTS_DIR SCRIPT [ARGS...]
#   The host's / is the guest's root (9p, read-only, tmpfs overlay on top), so SCRIPT, its ARGS and
#   the binaries they run are host paths, used unchanged. RESULTS_DIR is shared writable at
#   /results. cgroup2 is at /sys/fs/cgroup with +cpu +memory +pids enabled at the root.
#   Exit status: SCRIPT's (0..127); 124 if the guest ran past SBX_VM_TIMEOUT seconds (default 300);
#   125 if the guest never reported.
# SCRIPT travels on the kernel command line, which knows nothing of shell quoting: pass a script
# file and plain words (no spaces, no quotes) — a quoted `sh -c '...'` hangs the guest.
set -u
VM=${1:?usage: runvm.sh VMDIR RESULTS_DIR SCRIPT [ARGS...]}; RES=${2:?}; shift 2
[ $# -ge 1 ] || { echo "runvm: no script given" >&2; exit 125; }
for a in "$@"; do case $a in *[[:space:]\'\"]*) echo "runvm: argument '$a' has spaces or quotes" >&2; exit 125;; esac; done
command -v qemu-system-x86_64 >/dev/null || { echo "runvm: qemu-system-x86_64 missing (apt-get install qemu-system-x86)" >&2; exit 125; }
ACCEL=tcg; [ -w /dev/kvm ] && ACCEL=kvm
APPEND="console=ttyS0 panic=-1 quiet"; [ -n "${SBX_VM_VERBOSE:-}" ] && APPEND="console=ttyS0 panic=-1"
timeout "${SBX_VM_TIMEOUT:-300}" qemu-system-x86_64 -accel $ACCEL -m "${SBX_VM_MEM:-1024}" -smp "${SBX_VM_CPUS:-2}" \
  -nographic -no-reboot -nic none \
  -kernel "$VM/vmlinux" -initrd "$VM/initrd.gz" \
  -append "$APPEND -- $*" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  -virtfs "local,path=$RES,mount_tag=results,security_model=none" \
  -device isa-debug-exit,iobase=0xf4,iosize=0x04 </dev/null
q=$?
[ $q -eq 124 ] && { echo "runvm: guest timed out after ${SBX_VM_TIMEOUT:-300} s" >&2; exit 124; }
# isa-debug-exit: qemu exits with (value << 1) | 1; a plain 0 means the guest powered off silently.
[ $((q & 1)) -eq 1 ] && exit $((q >> 1))
echo "runvm: guest did not report an exit status (qemu rc=$q)" >&2; exit 125
