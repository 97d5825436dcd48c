#!/bin/bash
# Integration tests: drive the built sbx binary the way users do.
#
#   tests/integration/run.sh SBX_BINARY root|rootless [TEST_ID_SUBSTRING...]
#
# root      runs the suite as the invoking user, which must be root (otherwise: skipped, exit 0).
# rootless  as root: creates the user `sbxtest` if missing and runs the suite as that user, with a
#           state dir, temp dir and copy of the suite (and of the binary, if the user cannot reach
#           it) that the user owns. As an unprivileged user: runs the suite as that user.
#
# Each run gets a fresh temp dir (SBX_STATE_DIR, TMPDIR) that is removed afterwards
# (SBX_IT_KEEP=1 keeps it). The last line of output is `N passed, N failed[, N skipped]`;
# the exit status is non-zero when a test failed.
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 SBX_BINARY root|rootless [TEST_ID_SUBSTRING...]" >&2
  exit 2
fi
SBX_IN=$1
MODE=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PY=/usr/bin/python3
TEST_USER=sbxtest

say() { echo "run.sh: $*"; }

case "$MODE" in root|rootless) ;; *) echo "run.sh: MODE must be root or rootless, got '$MODE'" >&2; exit 2 ;; esac
if [ ! -x "$SBX_IN" ]; then
  say "sbx binary '$SBX_IN' is missing or not executable"
  echo "0 passed, 1 failed"
  exit 1
fi
SBX_IN=$(cd "$(dirname "$SBX_IN")" && pwd)/$(basename "$SBX_IN")

if [ ! -x "$PY" ]; then
  say "$PY is required (Debian's python3)"
  echo "0 passed, 1 failed"
  exit 1
fi

if [ "$MODE" = root ] && [ "$(id -u)" -ne 0 ]; then
  say "skipped: root mode needs root (running as uid $(id -u))"
  echo "0 passed, 0 failed, 1 skipped"
  exit 0
fi

# Schema validation needs python3-jsonschema; install it when we can, else the tests say they skip it.
if ! "$PY" -c 'import jsonschema' 2>/dev/null; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    say "installing python3-jsonschema (for trace schema validation)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-jsonschema >/dev/null 2>&1 \
      || say "could not install python3-jsonschema: schema validation will be skipped"
  else
    say "python3-jsonschema missing and not root: schema validation will be skipped"
  fi
fi

WORK=$(mktemp -d /tmp/sbxit-XXXXXX)
cleanup() {
  if [ "${SBX_IT_KEEP:-0}" = 1 ]; then
    say "kept $WORK"
  else
    rm -rf --one-file-system "$WORK" 2>/dev/null || true
  fi
}
trap cleanup EXIT
chmod 755 "$WORK"
mkdir -p "$WORK/suite" "$WORK/state" "$WORK/tmp" "$WORK/cwd" "$WORK/bin" "$WORK/config"
cp "$HERE"/*.py "$WORK/suite/"
cp "$REPO/rootfs/build-busybox.sh" "$WORK/suite/"
# test_classify.py reads the workload examples (readable by the rootless user from here).
cp -r "$REPO/examples/classify" "$WORK/suite/examples-classify"
# The example packs (test_mcp.py serves one), readable by the rootless user like the suite.
cp -r "$REPO/examples/packs" "$WORK/suite/packs"
# The warm template's driver, as sbx embeds it: python_main.py, then warm_template.py
# (test_mcp_template.py feeds its pool-job reader hostile frames).
mkdir -p "$WORK/suite/driver"
cp "$REPO/runtime/model/python_main.py" "$REPO/runtime/model/warm_template.py" "$WORK/suite/driver/"
SCHEMA=""
if [ -f "$REPO/schemas/trace.schema.json" ]; then
  cp "$REPO/schemas/trace.schema.json" "$WORK/suite/trace.schema.json"
  SCHEMA=$WORK/suite/trace.schema.json
fi
chmod -R a+rX "$WORK/suite"

# Stand-in GPU hosts (test_gpu.py): device nodes need mknod, so only root builds them, before
# the rootless mode drops to its user; without them the GPU tests skip and say why.
GPU_HOST=""
if [ "$(id -u)" -eq 0 ] && "$HERE/gpu_fixture.sh" "$WORK/gpu" 2>/dev/null; then
  GPU_HOST=$WORK/gpu
fi

SBX_BIN=$SBX_IN
RUN_AS=()
RUN_HOME=${HOME:-/root}
if [ "$MODE" = rootless ] && [ "$(id -u)" -eq 0 ]; then
  if ! id "$TEST_USER" >/dev/null 2>&1; then
    say "creating user $TEST_USER"
    useradd -m -s /bin/bash "$TEST_USER"
  fi
  RUN_HOME=$(getent passwd "$TEST_USER" | cut -d: -f6)
  mkdir -p "$RUN_HOME"
  chown "$TEST_USER:" "$RUN_HOME"
  # The repo may live under a root-only dir: give the user its own copy of the binary if needed.
  if ! runuser -u "$TEST_USER" -- test -x "$SBX_IN"; then
    cp "$SBX_IN" "$WORK/bin/sbx"
    chmod 755 "$WORK/bin/sbx"
    SBX_BIN=$WORK/bin/sbx
    say "$TEST_USER cannot reach $SBX_IN: using a copy at $SBX_BIN"
  fi
  # A sanitizer run's session agent (tests/sanitize.sh, SBX_SESSION_AGENT) likewise, and the build
  # its templates' forks run as pid 1 (SBX_TEMPLATE_PID1).
  for pair in SBX_SESSION_AGENT:sbx-agent SBX_TEMPLATE_PID1:sbx-pid1; do
    v=${pair%%:*} copy=$WORK/bin/${pair#*:}
    if [ -n "${!v:-}" ] && ! runuser -u "$TEST_USER" -- test -x "${!v}"; then
      cp "${!v}" "$copy"
      chmod 755 "$copy"
      printf -v "$v" '%s' "$copy"
    fi
  done
  chown -R "$TEST_USER:" "$WORK/state" "$WORK/tmp" "$WORK/cwd" "$WORK/config"
  RUN_AS=(runuser -u "$TEST_USER" --)
fi

ENVV=(
  "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  "HOME=$RUN_HOME"
  "LANG=C.UTF-8"
  "TERM=${TERM:-dumb}"
  "TMPDIR=$WORK/tmp"
  "SBX_BIN=$SBX_BIN"
  "SBX_MODE=$MODE"
  "SBX_STATE_DIR=$WORK/state"
  # sbx's config dir (the seccomp cache's MAC secret, a ledger key): the suite's own, not $HOME's.
  "XDG_CONFIG_HOME=$WORK/config"
  "SBX_SCHEMA=$SCHEMA"
  "SBX_REPO=$REPO"
  "SBX_BUILD_BUSYBOX=$WORK/suite/build-busybox.sh"
  "SBX_IT_GPU_HOST=$GPU_HOST"
  "PYTHONDONTWRITEBYTECODE=1"
  "PYTHONUNBUFFERED=1"
)
# A sanitizer run (tests/sanitize.sh): its options, the factor that widens timed tests' bounds, and
# the plain build its sessions' agents and its templates' forks' pid 1 run as.
for v in ASAN_OPTIONS UBSAN_OPTIONS SBX_TEST_TIME_SCALE SBX_SESSION_AGENT SBX_TEMPLATE_PID1; do
  [ -n "${!v:-}" ] && ENVV+=("$v=${!v}")
done
# The egress throughput test's floor (test_network.py): raise it on a quiet machine.
[ -n "${SBX_NET_MIN_RATIO:-}" ] && ENVV+=("SBX_NET_MIN_RATIO=$SBX_NET_MIN_RATIO")
if [ "$MODE" = root ] && [ -n "${XDG_RUNTIME_DIR:-}" ]; then
  ENVV+=("XDG_RUNTIME_DIR=$XDG_RUNTIME_DIR")
fi

say "mode=$MODE user=$([ ${#RUN_AS[@]} -gt 0 ] && echo "$TEST_USER" || id -un) binary=$SBX_BIN work=$WORK"
[ -n "$SCHEMA" ] || say "schemas/trace.schema.json not found: trace schema validation will be skipped"

cd "$WORK/cwd"
set +e
"${RUN_AS[@]}" env -i "${ENVV[@]}" "$PY" -B "$WORK/suite/runner.py" "$@" 2>&1
rc=$?
set -e
exit $rc
