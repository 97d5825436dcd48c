#!/bin/sh
# Fills .devcarry/ (ignored through .git/info/exclude) with what tests/device/run-all.sh needs on a
# machine where nothing can be installed: hyperfine, bwrap and the libraries bwrap links that a
# non-Debian image may lack. Run here, after `make deps-bench`; then name .devcarry and build/sbx in
# the device call's carry list (tests/device/README.md).
set -eu
cd "$(dirname "$0")/../.."
grep -qx '/.devcarry/' .git/info/exclude 2>/dev/null || echo '/.devcarry/' >> .git/info/exclude
rm -rf .devcarry && mkdir -p .devcarry/bin .devcarry/lib
for t in hyperfine bwrap; do cp "$(command -v $t)" .devcarry/bin/; done
for l in $(ldd "$(command -v bwrap)" | awk '/=> \// {print $3}' | grep -v -E '/libc\.so|/ld-linux'); do cp -L "$l" .devcarry/lib/; done
du -sh .devcarry
