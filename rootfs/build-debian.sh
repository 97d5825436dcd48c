#!/bin/sh
# Builds a Debian minbase image with python3 as a tarball for `sbx image import`, with mmdebstrap.
# Needs network access to a Debian mirror (a few minutes, ~40 MB of packages). Works rootless:
# as a user with a subordinate id range (/etc/subuid) mmdebstrap runs in --mode=unshare.
#
#   rootfs/build-debian.sh [OUT.tar] [SUITE] [MIRROR]
#       default OUT build/rootfs/debian-<suite>-python3.tar, SUITE bookworm
#   sbx image import OUT.tar --name debian:bookworm-python3
set -eu
suite=${2:-bookworm}
out=${1:-build/rootfs/debian-$suite-python3.tar}
mirror=${3:-http://deb.debian.org/debian}
if ! command -v mmdebstrap >/dev/null 2>&1; then
  echo "build-debian.sh: mmdebstrap is missing: apt-get install --no-install-recommends mmdebstrap" >&2
  exit 1
fi
if [ "$(id -u)" = 0 ]; then mode=root; else mode=unshare; fi
mkdir -p "$(dirname "$out")"
echo "build-debian.sh: mmdebstrap $suite (minbase + python3, mode $mode) -> $out" >&2
# SOURCE_DATE_EPOCH pins the timestamps mmdebstrap controls; the image digest does not include
# mtimes anyway, but byte-compiled caches are stamped with their sources' mtimes.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000} mmdebstrap --variant=minbase --mode="$mode" \
  --include=python3-minimal,python3 \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*' \
  "$suite" "$out" "$mirror"
echo "built $out" >&2
