#!/bin/bash
# The unit suite and the integration suites (root and rootless) once more, against a build with
# AddressSanitizer and UndefinedBehaviorSanitizer (cmake -DSBX_SANITIZE=ON; `make test-asan` and
# CI use build-asan). Every report is fatal: the build has -fno-sanitize-recover=all, and ASan
# halts and aborts on its first error, so the binary dies (SIGABRT) and its test fails.
#
# The sanitized binary is several times slower: SBX_TEST_TIME_SCALE (default 3 here, 1 in a
# normal run) widens the upper bounds of the tests that time sbx (sbxtest.py, TIME_SCALE), never
# their lower bounds. Not more: some tests also scale a wait that must stay shorter than one of
# sbx's own delays (test_mcp_pack_pool's pool back-off failed at 5).
#
#   tests/sanitize.sh BUILD_DIR [TEST_ID_SUBSTRING...]   (substrings filter the integration tests)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: tests/sanitize.sh BUILD_DIR [TEST_ID_SUBSTRING...]}
shift
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=1:detect_leaks=1:print_summary=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}
export SBX_TEST_TIME_SCALE=${SBX_TEST_TIME_SCALE:-3}
# A session's agent runs inside its sandbox, whose memory limit is an RLIMIT_DATA on hosts without
# a cgroup memory controller: a sanitizer build's shadow mapping is refused there. The sessions'
# server and runner are this build's; their agent is the plain build of the same tree (what ships).
if [ -z "${SBX_SESSION_AGENT:-}" ] && [ -x build/sbx ]; then export SBX_SESSION_AGENT=$PWD/build/sbx; fi
# The same for the pid 1 of a template's fork made ahead, which runs sbx inside the sandbox too
# (runtime/launch/template_pid1.hpp).
if [ -z "${SBX_TEMPLATE_PID1:-}" ] && [ -x build/sbx ]; then export SBX_TEMPLATE_PID1=$PWD/build/sbx; fi
failed=()
step() {
  local name=$1 t0=$SECONDS
  shift
  echo "sanitize: $name"
  if "$@"; then echo "sanitize: $name passed ($((SECONDS - t0)) s)"; else failed+=("$name"); echo "sanitize: $name FAILED ($((SECONDS - t0)) s)"; fi
}
[ $# -gt 0 ] || step unit "$build/sbx_unit_tests"
# The two integration suites side by side: each waits on sandboxes about half the time, and on
# a 2-core CI machine this pass is the longest part of .ci/run (one after the other: ~16 min each).
# Their markers are their own (sbxtest.py unique, sleep_marker), so neither finds or kills the
# other's processes. Each line says which suite printed it; each suite's result is its own step.
side_by_side() {
  local dir pids=() mode
  dir=$(mktemp -d)
  for mode in root rootless; do
    ( t0=$SECONDS
      echo "sanitize: integration_$mode"
      if tests/integration/run.sh "$build/sbx" "$mode" "$@" 2>&1 | tee "$dir/$mode.log" | sed -u "s/^/[$mode] /"; then
        echo "sanitize: integration_$mode passed ($((SECONDS - t0)) s)"
      else
        touch "$dir/$mode.failed"
        echo "sanitize: integration_$mode FAILED ($((SECONDS - t0)) s)"
      fi ) &
    pids+=($!)
  done
  wait "${pids[@]}"
  # The two suites' lines interleave, and CI shows only the end of its output: a failed suite's
  # failing tests (runner.py's "failed tests:", each with its last traceback line) are repeated here.
  for mode in root rootless; do
    [ -e "$dir/$mode.failed" ] || continue
    failed+=("integration_$mode")
    echo "sanitize: integration_$mode failed:"
    sed -n '/^failed tests:/,/^slowest tests:/p' "$dir/$mode.log" | grep -v '^slowest tests:' | head -n 40 \
      | sed "s/^/[$mode] /"
  done
  rm -rf "$dir"
}
side_by_side "$@"
if [ ${#failed[@]} -gt 0 ]; then
  echo "sanitize: failed: ${failed[*]}" >&2
  exit 1
fi
echo "sanitize: all passed"
