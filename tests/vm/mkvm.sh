#!/bin/sh
# Build a small qemu guest for sbx's cgroup v2 tests: a Debian kernel unpacked from its package
# (nothing is installed into /boot) and a busybox initramfs that boots the HOST's root file system
# (9p, read-only, with a tmpfs overlay on top) and runs the command given after "--" on the kernel
# command line. This host's cgroup v2 has no memory/cpu/pids controllers; the guest's has all three.
#
# usage: tests/vm/mkvm.sh OUTDIR
#   needs: qemu-system-x86 busybox-static cpio python3 (and apt access for the kernel package)
#   env:   SBX_VM_KERNEL_DEB=/path/linux-image-*.deb  use this kernel package instead of downloading
# Produces OUTDIR/vmlinux (uncompressed ELF: qemu boots it via PVH, which skips SeaBIOS real mode
# and the in-guest decompression — about 3 s saved under TCG) and OUTDIR/initrd.gz.
set -eu
OUT=${1:?usage: mkvm.sh OUTDIR}

missing=""
for t in busybox cpio python3 gzip dpkg; do command -v $t >/dev/null 2>&1 || missing="$missing $t"; done
[ -x /bin/busybox ] || missing="$missing busybox-static(/bin/busybox)"
if [ -n "$missing" ]; then
  echo "mkvm: missing:$missing (apt-get install -y --no-install-recommends qemu-system-x86 busybox-static cpio python3)" >&2
  exit 2
fi
# The initramfs runs /bin/busybox before any library is reachable: it must be the static one.
if command -v ldd >/dev/null 2>&1 && ldd /bin/busybox >/dev/null 2>&1; then
  echo "mkvm: /bin/busybox is dynamically linked; install busybox-static" >&2; exit 2
fi

mkdir -p "$OUT"; cd "$OUT"
if [ ! -d kpkg/boot ]; then
  if [ -n "${SBX_VM_KERNEL_DEB:-}" ]; then
    DEB=$SBX_VM_KERNEL_DEB
  else
    # linux-image-amd64 is a metapackage; its dependency names the real image package.
    PKG=$(apt-cache depends linux-image-amd64 2>/dev/null |
          sed -n 's/.*Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -1)
    [ -n "$PKG" ] || { echo "mkvm: cannot resolve linux-image-amd64 (no apt lists? run apt-get update)" >&2; exit 3; }
    rm -f linux-image-*.deb
    apt-get download "$PKG" >&2 || { echo "mkvm: apt-get download $PKG failed" >&2; exit 3; }
    DEB=$(ls linux-image-*.deb | head -1)
  fi
  rm -rf kpkg.tmp
  dpkg -x "$DEB" kpkg.tmp || { echo "mkvm: cannot unpack $DEB" >&2; exit 3; }
  mv kpkg.tmp kpkg
  rm -f linux-image-*.deb
fi
KVER=$(ls kpkg/lib/modules | head -1)

python3 - "$KVER" <<'PY'
import lzma, os, shutil, sys
kver = sys.argv[1]
moddir = f"kpkg/lib/modules/{kver}"
# vmlinuz is a bzImage whose payload is xz: find the xz stream and decompress it to the ELF vmlinux.
if not os.path.exists("vmlinux"):
    d = open(f"kpkg/boot/vmlinuz-{kver}", "rb").read()
    i = d.find(b"\xfd7zXZ\x00")
    if i < 0: sys.exit("mkvm: no xz payload in vmlinuz (unsupported kernel compression)")
    open("vmlinux.tmp", "wb").write(lzma.LZMADecompressor().decompress(d[i:]))
    os.rename("vmlinux.tmp", "vmlinux")
# Modules for the 9p root and the overlay, in dependency order. The package ships no modules.dep
# (depmod runs at install time), so read each module's own "depends=" from its .modinfo; this works
# whatever the kernel version splits them into (built-in ones are simply not found).
def load(path):
    if path.endswith(".xz"): return lzma.open(path).read()
    if path.endswith(".zst"): sys.exit("mkvm: zstd-compressed modules are not supported")
    return open(path, "rb").read()
paths = {}
for root, _, files in os.walk(moddir):
    for f in files:
        if ".ko" in f: paths[f.split(".ko")[0].replace("-", "_")] = os.path.join(root, f)
wanted = ["virtio_pci", "9pnet_virtio", "9p", "overlay"]
order, data = [], {}
def visit(name):
    if name in order or name not in paths: return
    data[name] = load(paths[name])
    i = data[name].find(b"depends=")
    deps = data[name][i + 8:data[name].index(b"\0", i)].decode().split(",") if i >= 0 else []
    for d in deps:
        if d: visit(d.replace("-", "_"))
    order.append(name)
for w in wanted: visit(w)
os.makedirs("initramfs/lib/modules", exist_ok=True)
for name in order: open(f"initramfs/lib/modules/{name}.ko", "wb").write(data[name])
open("initramfs/lib/modules/order", "w").write(" ".join(order) + "\n")
PY

mkdir -p initramfs/bin initramfs/proc initramfs/sys initramfs/dev
cp /bin/busybox initramfs/bin/
cat > initramfs/init <<'INIT'
#!/bin/busybox sh
# sbx test guest init: 9p host root (ro) + tmpfs overlay, cgroup2 with cpu/memory/pids enabled at
# the root, the writable "results" share at /results, then run "$@" and report its exit status
# through isa-debug-exit (qemu exits with (rc<<1)|1).
/bin/busybox --install -s /bin; export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /lib/modules/order); do insmod /lib/modules/$m.ko || echo "init: insmod $m failed"; done
mkdir -p /host /ovl /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose hostroot /host || echo "init: 9p hostroot failed"
# A read-only overlay with a single lower layer is rejected: use a tmpfs upper.
mount -t tmpfs -o size=256m tmpfs /ovl; mkdir /ovl/u /ovl/w
mount -t overlay overlay -o lowerdir=/host,upperdir=/ovl/u,workdir=/ovl/w /newroot
mount -t proc proc /newroot/proc; mount -t sysfs sys /newroot/sys; mount -t devtmpfs dev /newroot/dev
mount -t tmpfs tmpfs /newroot/run; mount -t tmpfs tmpfs /newroot/dev/shm 2>/dev/null
mount -t cgroup2 none /newroot/sys/fs/cgroup && echo "+cpu +memory +pids" > /newroot/sys/fs/cgroup/cgroup.subtree_control
if grep -q results /sys/bus/virtio/drivers/9pnet_virtio/*/mount_tag 2>/dev/null; then
  mkdir -p /newroot/results
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 results /newroot/results
fi
# Move the new root over / rather than a plain chroot: unshare(CLONE_NEWUSER) fails with EPERM
# inside a chroot, and sbx needs user namespaces.
unshare -m sh -c 'cd /newroot && mount --move . / && exec chroot . env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb "$@"' sh "$@"
rc=$?
echo "SBX-VM-EXIT rc=$rc"
printf "\\$(printf %03o $((rc & 0x7f)))" | dd of=/dev/port bs=1 seek=244 count=1 2>/dev/null
poweroff -f
INIT
chmod 755 initramfs/init
(cd initramfs && find . | cpio -o -H newc 2>/dev/null | gzip -1) > initrd.gz.tmp && mv initrd.gz.tmp initrd.gz
echo "$KVER" > kernel-version
echo "mkvm: built $OUT/vmlinux ($KVER) and $OUT/initrd.gz"
