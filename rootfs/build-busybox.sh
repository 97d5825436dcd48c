#!/bin/sh
# Builds the busybox base image tree, offline, in about a second: Debian's busybox-static binary,
# one symlink per applet, a minimal /etc and the usual empty directories. The tree depends only on
# the busybox binary, so building it twice from the same package gives the same image digest.
#
#   rootfs/build-busybox.sh [OUTDIR]          (default: build/rootfs/busybox)
#   sbx image import OUTDIR --name busybox
set -eu
out=${1:-build/rootfs/busybox}
bb=${BUSYBOX:-/bin/busybox}
if [ ! -x "$bb" ] || ! "$bb" --list >/dev/null 2>&1; then
  echo "build-busybox.sh: $bb is missing: install the busybox-static package (apt-get install busybox-static)" >&2
  exit 1
fi
if ldd "$bb" >/dev/null 2>&1; then
  echo "build-busybox.sh: $bb is dynamically linked; the image needs a static busybox (busybox-static)" >&2
  exit 1
fi
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  echo "build-busybox.sh: $out exists and is not empty; remove it first" >&2
  exit 1
fi
mkdir -p "$out"
cd "$out"
umask 022
mkdir -p bin sbin usr/bin usr/sbin etc dev proc sys tmp root home var/tmp run
chmod 0700 root
cp "$bb" bin/busybox
chmod 0755 bin/busybox
# --list-full prints each applet with its conventional directory (bin/ls, usr/bin/awk, ...).
"$bb" --list-full | while read -r applet; do
  case "$applet" in
    bin/busybox|"") continue ;;
  esac
  [ -e "$applet" ] || ln -s /bin/busybox "$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > etc/passwd
printf 'root:x:0:\nnogroup:x:65534:\n' > etc/group
printf 'passwd: files\ngroup: files\nhosts: files\n' > etc/nsswitch.conf
printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n' > etc/hosts
echo "sbx busybox image ($("$bb" 2>&1 | head -n 1))" > etc/os-release-sbx
echo "built $(pwd)"
