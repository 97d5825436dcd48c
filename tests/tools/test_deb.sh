#!/bin/sh
# The Debian package (`make deb`, CPack: the end of CMakeLists.txt), installed for real and run from
# the installed files only:
#   1. builds the .deb from BUILD_DIR's install rules (cpack, into a temporary directory) and checks
#      its control fields (name, version = `sbx --version`, architecture = dpkg's) and contents;
#   2. installs it with dpkg into an empty root (`dpkg --root`: a fresh dpkg database, no packages,
#      so a missing Depends would fail here), checks dpkg's status and its md5sums (--verify);
#   3. pivots into that root in a private mount namespace (plus /proc, /dev, /sys and a /tmp), drops
#      the host's root, and runs `sbx doctor` and sandboxed runs from /usr/bin/sbx there. That root
#      holds nothing but the package's files, so this proves the installed binary needs nothing
#      else: no shared library, no data file, no /etc. (It does not prove the package installs on
#      every Debian release: dpkg's checks here are those of this machine's dpkg.) A pivot, not a
#      chroot: the kernel refuses user namespaces to a chrooted process.
#   4. removes it with dpkg and checks that no file is left.
# Needs root (dpkg --root, mounts in its own mount namespace; nothing on the host is mounted) and a
# static busybox (busybox-static, `make deps`) as the shell inside the fresh root, which it leaves.
#   tests/tools/test_deb.sh BUILD_DIR
set -eu
BUILD=$(cd "${1:?usage: test_deb.sh BUILD_DIR}" && pwd)
SBX="$BUILD/sbx"
BUSYBOX=${BUSYBOX:-/bin/busybox}
fail() { echo "test_deb: FAIL: $*" >&2; exit 1; }
skip() { echo "test_deb: SKIP: $*"; exit 77; }

[ "$(id -u)" = 0 ] || skip "needs root (dpkg --root and mounts in a private mount namespace)"
[ -x "$BUSYBOX" ] && ! ldd "$BUSYBOX" >/dev/null 2>&1 || skip "needs a static busybox at $BUSYBOX (busybox-static)"
[ -f "$BUILD/CPackConfig.cmake" ] || fail "$BUILD/CPackConfig.cmake missing: the build has no package rules (make deb)"

TMP=$(mktemp -d /tmp/sbx-test-deb-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$TMP/pkg" >"$TMP/cpack.log" 2>&1 || { cat "$TMP/cpack.log" >&2; fail "cpack failed"; }
DEB=$(ls "$TMP"/pkg/sbx_*.deb 2>/dev/null) || fail "cpack made no sbx_*.deb"

# 1. Control fields and contents.
version=$("$SBX" --version | sed -n 's/^sbx \([^ ]*\).*/\1/p')
field() { dpkg-deb -f "$DEB" "$1"; }
[ "$(field Package)" = sbx ] || fail "Package: $(field Package)"
[ "$(field Version)" = "$version" ] || fail "Version: $(field Version), sbx --version says $version"
[ "$(field Architecture)" = "$(dpkg --print-architecture)" ] || fail "Architecture: $(field Architecture)"
[ -n "$(field Maintainer)" ] && [ -n "$(field Description)" ] || fail "Maintainer or Description empty"
# Debian's policy checker, where it is installed (not in TEST_DEB_PACKAGES: it brings ~140 perl
# packages for one check); its errors and warnings fail (the old placeholder Maintainer,
# sbx@invalid, was an error: bogus-mail-host).
if command -v lintian >/dev/null 2>&1; then
  lintian --fail-on error,warning "$DEB" >"$TMP/lintian.log" 2>&1 || { cat "$TMP/lintian.log" >&2; fail "lintian"; }
else
  echo "test_deb: lintian not installed: the package's policy check is not run (apt install lintian)"
fi
[ "$(basename "$DEB")" = "sbx_${version}_$(dpkg --print-architecture).deb" ] || fail "file name $(basename "$DEB")"
dpkg-deb -c "$DEB" | awk '{print $6}' | sed 's|^\./|/|' >"$TMP/contents"
for f in /usr/bin/sbx /usr/share/man/man1/sbx.1.gz /usr/share/man/man5/sbx-pack.5.gz \
         /usr/share/man/man1/sbx-run.1.gz /usr/share/man/man1/sbx-mcp.1.gz /usr/share/man/man1/sbx-pack.1.gz \
         /usr/share/doc/sbx/copyright /usr/share/doc/sbx/changelog.gz /usr/share/doc/sbx/LICENSE /usr/share/doc/sbx/THIRD_PARTY_NOTICES.md \
         /usr/share/sbx/schemas/trace.schema.json /usr/share/sbx/profiles/untrusted.json \
         /usr/share/bash-completion/completions/sbx /usr/share/zsh/vendor-completions/_sbx \
         /usr/share/fish/vendor_completions.d/sbx.fish \
         /usr/share/doc/sbx/examples/packs/tolerance-check/pack.json /usr/share/doc/sbx/examples/requests/python-sum.json \
         /usr/share/sbx/clients/python/sbx_client/__init__.py /usr/share/sbx/clients/python/README.md; do
  grep -qx "$f" "$TMP/contents" || fail "$f is not in the package"
done
if grep -v '^/usr/' "$TMP/contents" | grep -q .; then fail "files outside /usr: $(grep -v '^/usr/' "$TMP/contents" | head -3)"; fi
# Static binary: no program interpreter, so no Depends is right.
dpkg-deb --fsys-tarfile "$DEB" | tar -xO ./usr/bin/sbx >"$TMP/sbx.bin"
if LC_ALL=C readelf -l "$TMP/sbx.bin" | grep -q 'Requesting program interpreter'; then
  [ -n "$(field Depends)" ] || fail "dynamically linked /usr/bin/sbx but no Depends"
fi

# 2. Install into an empty root: a dpkg database that knows no package at all.
ROOT="$TMP/root"
mkdir -p "$ROOT/var/lib/dpkg/info" "$ROOT/var/lib/dpkg/updates" "$ROOT/var/log"
: >"$ROOT/var/lib/dpkg/status"
chmod 755 "$TMP" "$ROOT"  # the sandbox's unprivileged uid must traverse the root (sbx(1), IDENTITY)
dpkg --root="$ROOT" -i "$DEB" >"$TMP/dpkg.log" 2>&1 || { cat "$TMP/dpkg.log" >&2; fail "dpkg -i into an empty root failed"; }
dpkg --root="$ROOT" -s sbx | grep -qx 'Status: install ok installed' || fail "dpkg does not list sbx as installed"
dpkg --root="$ROOT" --verify sbx || fail "dpkg --verify: installed files differ from the package's md5sums"
echo "test_deb: $(basename "$DEB") installed into an empty root: $(dpkg --root="$ROOT" -L sbx | wc -l) paths"

# 3. Run from the installed files only. The host's own doctor decides what to expect: a host where
# sbx cannot run at all (a container without user namespaces) cannot run the installed one either.
if ! "$SBX" doctor >/dev/null 2>&1; then
  skip "the installed package checks passed; this host fails sbx doctor, so the runs from the fresh root were not tried"
fi
# The inner script runs in busybox sh inside the fresh root, after the host's root is detached.
cat >"$TMP/inner.sh" <<'EOF'
umount -l /.host && rmdir /.host || { echo "inner: cannot drop the host root"; exit 1; }
export PATH=/usr/bin SBX_STATE_DIR=/tmp/state HOME=/tmp
echo "root: $(echo /*)"
sbx doctor >/tmp/doctor.out 2>&1; echo "doctor=$?"
echo "version=$(sbx run -- /usr/bin/sbx --version 2>&1)"; echo "run=$?"
sbx run -- /bin/true 2>/dev/null; echo "true=$?"
sbx trace ls -n 1 >/dev/null 2>&1; echo "trace=$?"
EOF
unshare --mount --propagation private /bin/sh -c '
  set -e
  R=$1 BB=$2
  mount --bind "$R" "$R"
  mkdir -p "$R/proc" "$R/dev" "$R/sys" "$R/tmp" "$R/.host"
  mount -t proc proc "$R/proc"; mount --rbind /dev "$R/dev"; mount --rbind /sys "$R/sys"
  mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"
  cp "$3" "$R/tmp/inner.sh"
  cd "$R" && pivot_root . .host
  exec "/.host$BB" sh /tmp/inner.sh' sh "$ROOT" "$BUSYBOX" "$TMP/inner.sh" >"$TMP/inner.out" 2>&1 || true
cat "$TMP/inner.out"
grep -qx 'root: /dev /proc /sys /tmp /usr /var' "$TMP/inner.out" || fail "the fresh root holds more than the package (see root: above)"
grep -qx 'doctor=0' "$TMP/inner.out" || fail "sbx doctor from the installed files failed"
grep -qx "version=sbx $version" "$TMP/inner.out" || fail "sbx run -- /usr/bin/sbx --version from the installed files failed"
grep -qx 'run=0' "$TMP/inner.out" || fail "sandboxed run from the installed files failed"
# The sandbox's root is built from the fresh root's /usr, which has no /bin/true: 127 proves the
# run used the installed tree, not the host's.
grep -qx 'true=127' "$TMP/inner.out" || fail "sbx run -- /bin/true should be 127 (not found) in a root with only sbx"
grep -qx 'trace=0' "$TMP/inner.out" || fail "sbx trace ls failed"

# 4. Remove: dpkg takes every file back.
dpkg --root="$ROOT" -r sbx >"$TMP/dpkg-r.log" 2>&1 || { cat "$TMP/dpkg-r.log" >&2; fail "dpkg -r failed"; }
left=$(find "$ROOT/usr" ! -type d 2>/dev/null | head -3)
[ -z "$left" ] || fail "files left after dpkg -r: $left"
echo "test_deb: ok (installed, ran sbx doctor and sandboxed runs from the fresh root, removed)"
