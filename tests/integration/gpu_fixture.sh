#!/bin/bash
# Stand-in GPU hosts for test_gpu.py (CI has no GPU): DIR/discovery and DIR/cdi, each a tree that
# SBX_TEST_GPU_HOST points sbx's GPU discovery at (runtime/linux/gpu.hpp). Device nodes are /dev/null's
# (character 1:3) made with mknod, so only root can build this: run.sh calls it before it drops to
# the rootless test user. Everything is world-readable; the nodes are 0666, like the driver's.
#
#   tests/integration/gpu_fixture.sh DIR
set -euo pipefail
DIR=$1
[ "$(id -u)" -eq 0 ] || { echo "gpu_fixture.sh: needs root (mknod)" >&2; exit 1; }
for tree in discovery cdi; do
  T=$DIR/$tree
  mkdir -p "$T/dev" "$T/proc/driver/nvidia/gpus/0000:01:00.0" "$T/proc/driver/nvidia/gpus/0000:02:00.0"
  for n in nvidia0 nvidia1 nvidiactl nvidia-uvm nvidia-uvm-tools; do
    mknod -m 0666 "$T/dev/$n" c 1 3
  done
  printf 'Model: \t\t NVIDIA Stand-in H200\nGPU UUID: \t GPU-11111111-2222-3333-4444-555555555555\nDevice Minor: \t 0\nBus Location: \t 0000:01:00.0\n' \
    > "$T/proc/driver/nvidia/gpus/0000:01:00.0/information"
  printf 'Model: \t\t NVIDIA Stand-in H200\nGPU UUID: \t GPU-66666666-7777-8888-9999-000000000000\nDevice Minor: \t 1\nBus Location: \t 0000:02:00.0\n' \
    > "$T/proc/driver/nvidia/gpus/0000:02:00.0/information"
  printf 'NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n' \
    > "$T/proc/driver/nvidia/version"
  # The driver under /opt/nvidia, named by the tree's own loader cache: on the host root the
  # sandbox's /usr is the host's, read-only, where no mount point for a stand-in can be made.
  mkdir -p "$T/opt/nvidia/lib" "$T/opt/nvidia/bin" "$T/etc"
  echo "stand-in libcuda" > "$T/opt/nvidia/lib/libcuda.so.550.54.15"
  ln -s libcuda.so.550.54.15 "$T/opt/nvidia/lib/libcuda.so.1"
  echo "stand-in libnvidia-ml" > "$T/opt/nvidia/lib/libnvidia-ml.so.1"
  echo "not a driver library" > "$T/opt/nvidia/lib/libother.so.1"
  printf '#!/bin/sh\necho "stand-in nvidia-smi: GPU 0: NVIDIA Stand-in H200"\n' > "$T/opt/nvidia/bin/nvidia-smi"
  chmod 755 "$T/opt/nvidia/bin/nvidia-smi"
  # glibc's new-format ld.so.cache (elf/cache.c): 48-byte header, 24-byte entries, strings.
  /usr/bin/python3 - "$T/etc/ld.so.cache" <<'PY'
import struct, sys
paths = ["/opt/nvidia/lib/libcuda.so.1", "/opt/nvidia/lib/libnvidia-ml.so.1", "/opt/nvidia/lib/libother.so.1"]
strings, offs = b"", []
base = 48 + 24 * len(paths)
for p in paths:
    offs.append(base + len(strings)); strings += p.encode() + b"\0"
head = b"glibc-ld.so.cache1.1" + struct.pack("<IIB3xI12x", len(paths), len(strings), 0, 0)
body = b"".join(struct.pack("<iIIIQ", 1, o, o, 0, 0) for o in offs)
open(sys.argv[1], "wb").write(head + body + strings)
PY
done
mkdir -p "$DIR/cdi/etc/cdi"
cat > "$DIR/cdi/etc/cdi/nvidia.json" <<'JSON'
{"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu",
 "devices": [
   {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
   {"name": "GPU-66666666-7777-8888-9999-000000000000", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1"}]}}],
 "containerEdits": {
   "env": ["NVIDIA_VISIBLE_DEVICES=void", "SBX_CDI_STANDIN=yes"],
   "deviceNodes": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}],
   "mounts": [{"hostPath": "/opt/nvidia/bin/nvidia-smi", "containerPath": "/opt/nvidia/bin/nvidia-smi", "options": ["ro", "nosuid", "bind"]}],
   "hooks": [{"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook", "args": ["nvidia-cdi-hook", "update-ldcache"]}]}}
JSON
echo "# a YAML spec sbx skips (JSON only)" > "$DIR/cdi/etc/cdi/other.yaml"
chmod -R a+rX "$DIR"
