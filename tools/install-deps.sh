#!/bin/sh
# Installs the Debian packages named as arguments that are not installed yet (idempotent), and
# says what it does. Used by `make deps`, `deps-test`, `deps-bench` and `fuzz-deps`.
set -eu
missing=""
for p in "$@"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
if [ -z "$missing" ]; then
  echo "deps: all $# packages already installed"
  exit 0
fi
echo "deps: installing:$missing"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "deps: not root and no sudo; run as root: apt-get install -y --no-install-recommends$missing" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
# An old or missing package list makes apt-get miss packages: refresh it once, then install.
$SUDO apt-get update -q >/dev/null
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
echo "deps: done"
