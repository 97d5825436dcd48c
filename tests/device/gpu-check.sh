#!/bin/bash
# The real-GPU proof of `sbx run --gpu` (man sbx, GPU), for a machine with an NVIDIA GPU and no
# network (the borrowed H200 machine: carry the static build/sbx there). Every step has a timeout;
# a step that fails is reported and the rest still run. Prints a compact summary; the full outputs
# and trace records are left in OUTDIR.
#
#   tests/device/gpu-check.sh [SBX [OUTDIR]]      (defaults: build/sbx, $OUT or /tmp/gpu-check)
#
# Steps: the host's nvidia-smi -L; inside `sbx run --gpu 0`: nvidia-smi -L, then PyTorch from
# /opt/torch/.venv (bound read-only) allocating on the GPU and multiplying two matrices, while the
# host's nvidia-smi --query-compute-apps watches; the same PyTorch without --gpu (no GPU inside);
# --gpu refused past a profile's gpu.max; --gpu under --memory 2G (the run cgroup); one run's device
# memory unreadable by the next; after the runs, the leftover check: no compute process on the GPU.
set -u
SBX=$(readlink -f "${1:-build/sbx}")
OUTDIR=${2:-${OUT:-/tmp/gpu-check}}
TORCH=${TORCH:-/opt/torch/.venv}
mkdir -p "$OUTDIR"
export PATH=/usr/local/nvidia/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
STATE=$OUTDIR/state
SUMMARY=$OUTDIR/summary.txt
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
# step NAME SECONDS CMD...: output to OUTDIR/NAME.out, its status and last lines to the summary.
step() {
  local name=$1 secs=$2; shift 2
  timeout --kill-after=10 "$secs" "$@" > "$OUTDIR/$name.out" 2>&1
  local rc=$?
  say "== $name: rc=$rc$([ $rc -eq 124 ] && echo ' (TIMED OUT)')"
  grep -v '^$' "$OUTDIR/$name.out" | tail -n "${TAIL:-6}" | sed 's/^/   /' | cut -c1-240 | tee -a "$SUMMARY"
  return $rc
}
# A command, not a shell function: `timeout` (in step) execs it.
SBXC=("$SBX" --state-dir "$STATE")

say "sbx: $SBX ($("$SBX" --version 2>&1 | head -1)); kernel $(uname -r); uid $(id -u); cgroup fs $(stat -fc %T /sys/fs/cgroup 2>/dev/null)"
step host-nvidia-smi 30 nvidia-smi -L
step host-compute-apps-before 30 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader

# Python behind the venv: bind its installation too when it lives outside the host root's /usr.
PY=$TORCH/bin/python
BINDS=(--bind "$TORCH:$TORCH")
PYREAL=$(readlink -f "$PY" 2>/dev/null || echo "$PY")
case "$PYREAL" in
  /usr/*|/bin/*|"$TORCH"/*) ;;
  *) PYHOME=$(dirname "$(dirname "$PYREAL")"); BINDS+=(--bind "$PYHOME:$PYHOME") ;;
esac
say "python: $PY -> $PYREAL; binds: ${BINDS[*]}"
# trusted: its pids and time room (PyTorch starts a thread per core); memory up to 32G (with a
# cgroup; without one --gpu applies no memory limit and the trace says so).
RUNOPTS=(--profile trusted --memory 32G --pids 4096 --timeout 240s)

if ! step sandbox-nvidia-smi 90 "${SBXC[@]}" run --gpu 0 --timeout 60s --trace-file "$OUTDIR/trace-smi.json" -- nvidia-smi -L; then
  # Diagnosis: the sandbox has no /sys; does NVML need it here?
  step sandbox-nvidia-smi-with-sys 90 "${SBXC[@]}" run --gpu 0 --timeout 60s --bind /sys:/sys -- nvidia-smi -L
  step sandbox-nvidia-smi-verbose 90 "${SBXC[@]}" -vv run --gpu 0 --timeout 60s -- sh -c 'ls -l /dev; nvidia-smi; echo "exit $?"'
fi
step sandbox-dev 60 "${SBXC[@]}" run --gpu 0 --timeout 30s -- sh -c 'ls -l /dev | grep nvidia; grep nvidia /proc/self/mountinfo | cut -d" " -f5,6'

TORCH_GPU='
import time, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "count", torch.cuda.device_count())
d = torch.device("cuda:0")
print("device:", torch.cuda.get_device_name(0))
a = torch.randn(4096, 4096, device=d); b = torch.randn(4096, 4096, device=d)
c = a @ b; torch.cuda.synchronize()
ref = (a.double() @ b.double()).float()
print("matmul 4096x4096 on", c.device, "sum %.3f" % float(c.sum()), "max abs err vs fp64 %.4f" % float((c - ref).abs().max()),
      "peak allocated MiB %.0f" % (torch.cuda.max_memory_allocated() / 2**20))
time.sleep(float(__import__("os").environ.get("HOLD", "0")))
print("done")
'
# While the sandbox holds GPU memory, the host's driver sees its process (what a GPU memory sample
# would read); afterwards nothing is left.
( for i in $(seq 1 90); do
    q=$(timeout 10 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>&1)
    if [ -n "$q" ]; then echo "t+${i}s: $q"; break; fi
    sleep 1
  done > "$OUTDIR/compute-apps-during.out" ) &
WATCH=$!
step sandbox-torch 300 "${SBXC[@]}" run --gpu 0 "${RUNOPTS[@]}" "${BINDS[@]}" --env HOLD=8 --trace-file "$OUTDIR/trace-torch.json" -- "$PY" -c "$TORCH_GPU"
wait $WATCH
say "== compute apps seen during the torch run (host view):"; sed 's/^/   /' "$OUTDIR/compute-apps-during.out" | tee -a "$SUMMARY"

step sandbox-no-gpu 300 "${SBXC[@]}" run "${RUNOPTS[@]}" "${BINDS[@]}" -- "$PY" -c '
import os, torch
print("nvidia nodes in /dev:", [n for n in os.listdir("/dev") if "nvidia" in n])
print("cuda available:", torch.cuda.is_available(), "count:", torch.cuda.device_count())'
step sandbox-no-gpu-smi 60 "${SBXC[@]}" run --timeout 30s -- sh -c 'nvidia-smi -L; echo "exit $?"'
# The profile's ceiling: --gpu past gpu.max is refused before anything runs (exit 125): 'browser'
# sets no gpu.max (0), 'untrusted' allows 1 (two asked for), 'trusted' allows all.
step gpu-max-browser 30 "${SBXC[@]}" run --gpu 0 --profile browser -- true
step gpu-max-untrusted-two 30 "${SBXC[@]}" run --gpu 0,1 -- true
step gpu-all-trusted 60 "${SBXC[@]}" run --gpu all --profile trusted --timeout 30s -- sh -c 'ls /dev | grep "^nvidia[0-9]" | tr "\n" " "'

# --gpu with --memory under the run cgroup: CUDA maps far more address space than it touches, which
# memory.max (resident memory) does not count; 2G is enough for torch and a CUDA context.
step sandbox-torch-memory-2G 300 "${SBXC[@]}" run --gpu 0 --profile trusted --memory 2G --pids 4096 --timeout 240s "${BINDS[@]}" \
  --trace-file "$OUTDIR/trace-torch-2G.json" -- "$PY" -c '
import resource, torch
x = torch.ones(1 << 28, device="cuda")
print("4 GiB on the GPU under --memory 2G: sum", float(x.sum()), "host maxrss MiB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
print("VmSize/VmRSS:", [l.split()[1] + " kB" for l in open("/proc/self/status") if l.startswith(("VmSize", "VmRSS"))])'

# Nothing of one run's GPU state reaches the next: run 1 fills 4 GiB of device memory with a marker
# and exits; run 2 allocates 4 GiB without initialising it and counts the marker. Its control: in
# run 2's own process, memory freed and allocated again (PyTorch's cache) does show the marker, so
# the reader would see leftovers where they exist.
MARK='MAGIC = 0x5A17C0DE5A17C0DE; N = 1 << 29  # int64s: 4 GiB'
step gpu-residue-write 300 "${SBXC[@]}" run --gpu 0 "${RUNOPTS[@]}" "${BINDS[@]}" -- "$PY" -c "$MARK"'
import torch
x = torch.full((N,), MAGIC, dtype=torch.int64, device="cuda"); torch.cuda.synchronize()
print("run 1 wrote the marker to", x.numel() * 8 >> 20, "MiB; matches:", int((x == MAGIC).sum()))'
step gpu-residue-read 300 "${SBXC[@]}" run --gpu 0 "${RUNOPTS[@]}" "${BINDS[@]}" -- "$PY" -c "$MARK"'
import torch
c = torch.full((1 << 23,), MAGIC, dtype=torch.int64, device="cuda"); del c
c = torch.empty((1 << 23,), dtype=torch.int64, device="cuda")
print("control (same process, freed and reallocated 64 MiB): marker words", int((c == MAGIC).sum()), "of", c.numel())
del c; torch.cuda.empty_cache()
y = torch.empty((N,), dtype=torch.int64, device="cuda"); torch.cuda.synchronize()
print("run 2, 4 GiB uninitialised: marker words", int((y == MAGIC).sum()), "nonzero words", int((y != 0).sum()), "of", y.numel())'

# The memory fallback: without cgroup v2 a --gpu run gets no rlimit (the trace names it); a plain
# run with the default 512M RLIMIT_DATA shows what CUDA does under it.
step sandbox-torch-default-limits 300 "${SBXC[@]}" run --gpu 0 --profile trusted --pids 4096 --timeout 240s "${BINDS[@]}" -- "$PY" -c 'import torch; x = torch.ones(1024, device="cuda"); print("alloc ok", float(x.sum()))'
sleep 2
step host-compute-apps-after 30 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
say "   (empty above: no compute process left on the GPU)"

# The trace's GPU section and memory decisions, compact.
for t in "$OUTDIR/trace-smi.json" "$OUTDIR/trace-torch.json" "$OUTDIR/trace-torch-2G.json"; do
  [ -f "$t" ] || { say "== $(basename "$t"): missing"; continue; }
  say "== $(basename "$t"):"
  timeout 30 "$PY" - "$t" <<'PYEOF' 2>&1 | tee -a "$SUMMARY"
import json, sys
t = json.load(open(sys.argv[1]))
g = t["enforcement"].get("gpu", {})
print("   status:", t["result"]["status"], "cgroup:", t["enforcement"]["cgroup"])
print("   gpu:", json.dumps({k: g.get(k) for k in ("granted_by", "driver_version", "devices", "cdi_spec")}))
print("   nodes:", [(n["path"], "%d:%d" % (n["major"], n["minor"]), n["mode"]) for n in g.get("nodes", [])])
print("   driver files bound:", len(g.get("driver_files", [])), "visible:", len(g.get("visible_files", [])), "env:", g.get("env"))
print("   notes:", g.get("notes"))
print("   memory:", t["enforcement"]["limits_applied"].get("memory") or t["enforcement"]["limits_not_applied"].get("memory"))
print("   usage.gpu:", t["usage"].get("gpu"))
PYEOF
done
say "summary in $SUMMARY; outputs and traces in $OUTDIR"
