#!/bin/bash
# Runs every libFuzzer target (or the ones named) for FUZZ_SECONDS each (default 60; 0 only
# replays the corpora: the seeds and every input kept under tests/fuzz/corpus, regressions
# included). Usage: tests/fuzz/run.sh BUILD_DIR [TARGET...], BUILD_DIR configured with
# -DSBX_FUZZ=ON (see `make fuzz` and README.md here).
#
# Per target, under BUILD_DIR: fuzz-corpus/TARGET grows with what libFuzzer finds (kept between
# runs), fuzz-seeds/TARGET holds the seeds made from the repository's own fixtures, libFuzzer's
# output goes to fuzz-logs/TARGET.txt, and a crash, leak, timeout or out-of-memory input lands in
# fuzz-crashes/TARGET/.
# Exits 1 if any target failed, naming each.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:?usage: tests/fuzz/run.sh BUILD_DIR [TARGET...]}
shift
build=$(cd "$build" && pwd)
seconds=${FUZZ_SECONDS:-60}
targets=("$@")
# Every target by default: the one list is SBX_FUZZ_TARGETS in tests/fuzz/CMakeLists.txt (a target
# missing here would build and never run).
if [ ${#targets[@]} -eq 0 ]; then
  read -r -a targets <<<"$(sed -n '/^set(SBX_FUZZ_TARGETS/,/)/p' tests/fuzz/CMakeLists.txt | tr -d '\n' |
    sed 's/^set(SBX_FUZZ_TARGETS//; s/).*//')"
  [ ${#targets[@]} -gt 0 ] || { echo "fuzz: no SBX_FUZZ_TARGETS in tests/fuzz/CMakeLists.txt" >&2; exit 1; }
fi

# Seeds from what the repository already holds: shipped profiles, example packs and requests,
# seccomp policies, tar archives in every format GNU tar writes, MCP sessions calling run_code
# with each example request, the example workloads, and a ledger chained from the trace fixtures
# (the hand-written seeds of the other new targets are in tests/fuzz/corpus/).
make_seeds() {
  local t=$1 d=$build/fuzz-seeds/$1 f
  rm -rf "$d" && mkdir -p "$d"
  case $t in
    spec) cp profiles/*.json "$d"/ ;;
    pack) for f in examples/packs/*/pack.json; do cp "$f" "$d/$(basename "$(dirname "$f")").json"; done ;;
    exec) cp examples/requests/*.json "$d"/ ;;
    seccomp)  # a leading space (even byte: the policy reader; JSON ignores it)
      for f in profiles/seccomp/*.json tests/fixtures/seccomp/*.json; do
        { printf ' '; cat "$f"; } >"$d/$(basename "$f")"
      done ;;
    tar)
      local src=$build/fuzz-seeds/tar-src fmt
      rm -rf "$src" && mkdir -p "$src/dir/sub"
      echo hello >"$src/dir/file"
      ln -s ../file "$src/dir/sub/link"
      ln "$src/dir/file" "$src/dir/hard"
      mkdir -p "$src/dir/$(printf 'n%.0s' $(seq 120))"
      echo long >"$src/dir/$(printf 'n%.0s' $(seq 120))/f"
      for fmt in v7 ustar; do  # no member names over 100 bytes in these
        tar -C "$src" --format=$fmt -b 1 -cf "$d/$fmt.tar" dir/file dir/hard dir/sub
      done
      for fmt in gnu oldgnu pax; do
        tar -C "$src" --format=$fmt -b 1 -cf "$d/$fmt.tar" dir
      done
      rm -rf "$src" ;;
    mcp)  # one session per example request: handshake, then the request as run_code's arguments
      for f in examples/requests/*.json; do
        python3 - "$f" >"$d/$(basename "$f")" <<'PY'
import json, sys
req = json.load(open(sys.argv[1]))
init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "seed", "version": "1"}}
for m in ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
          {"jsonrpc": "2.0", "method": "notifications/initialized"},
          {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
          {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "run_code", "arguments": req}},
          {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}):
    print(json.dumps(m))
PY
      done ;;
    classify) cp examples/classify/*.json "$d"/ ;;
    ledger)  # the trace fixtures as one chained ledger (trace_ledger.hpp's line and hash), and each alone
      python3 - "$d" tests/fixtures/traces/*.json <<'PY'
import hashlib, json, os, sys
out, files = sys.argv[1], sys.argv[2:]
def line(seq, run_id, prev, rec):
    h = hashlib.sha256(f"sbx.ledger/v1\n{seq}\n{run_id}\n{prev}\n".encode() + rec).hexdigest()
    return b'{"record":' + rec + f',"seq":{seq},"run_id":"{run_id}","prev":"{prev}","hash":"{h}"}}\n'.encode(), h
chain, prev = b"", "0" * 64
for seq, f in enumerate(files, 1):
    doc = json.load(open(f))
    rec = json.dumps(doc, separators=(",", ":")).encode()
    run_id = doc.get("run_id") or f"run-{seq}"
    l, prev = line(seq, run_id, prev, rec)
    chain += l
    open(os.path.join(out, os.path.basename(f)), "wb").write(line(1, run_id, "0" * 64, rec)[0])
open(os.path.join(out, "chain"), "wb").write(chain)
open(os.path.join(out, "torn"), "wb").write(chain[:-40])
PY
      ;;
    replay) cp tests/fixtures/traces/*.json "$d"/ ;;  # real records (no blobs); corpus/replay has blob lists
    json_scan)  # real records, each behind the mode byte 0 (the record's bounds, summaries compared)
      for f in tests/fixtures/traces/*.json; do { printf '\0'; cat "$f"; } >"$d/$(basename "$f")"; done ;;
  esac
}

# One target: its seeds, then libFuzzer; prints its own lines (a target's lines are printed
# together, after it ends) and exits non-zero when it failed.
fuzz_one() {
  local t=$1 bin=$build/tests/fuzz/fuzz_$1
  [ -x "$bin" ] || { echo "fuzz: $bin is missing (build the fuzz_targets target)" >&2; return 2; }
  make_seeds "$t"
  local corpus=$build/fuzz-corpus/$t crashes=$build/fuzz-crashes/$t log=$build/fuzz-logs/$t.txt d
  mkdir -p "$corpus" "$crashes" "$build/fuzz-logs"
  local opts=(-timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix="$crashes/")
  # The MCP server logs each message to stderr (its operator's log): libFuzzer closes the
  # target's stderr and keeps its own and the sanitizers' reports.
  [ "$t" = mcp ] && opts+=(-close_fd_mask=2)
  if [ "$seconds" -gt 0 ]; then opts+=(-max_total_time="$seconds"); else opts+=(-runs=0); fi
  # The first directory receives new inputs; the committed corpus and the seeds are only read.
  # A target may have no committed inputs yet (git keeps no empty directory): only existing
  # directories are named, since libFuzzer stops at a missing one.
  local dirs=("$corpus")
  for d in "tests/fuzz/corpus/$t" "$build/fuzz-seeds/$t"; do [ -d "$d" ] && dirs+=("$d"); done
  if "$bin" "${opts[@]}" "${dirs[@]}" >"$log" 2>&1; then
    echo "fuzz: $t ran ${seconds}s: $(grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$log" | tr -s ' \n' ' ')"
  else
    echo "fuzz: $t FAILED; the input is in $crashes/, the log in $log:" >&2
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -20 >&2
    return 1
  fi
}

# libFuzzer runs one process per target: FUZZ_JOBS targets side by side (default: one per core),
# each still given its full FUZZ_SECONDS.
jobs=${FUZZ_JOBS:-$(nproc)}
[ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
echo "fuzz: ${#targets[@]} target(s), ${seconds}s each, $jobs at a time"
declare -A pid_of=()
failed=()
reap() {  # waits for any one target to end, and counts it if it failed
  local pid t
  wait -n -p pid || true
  for t in "${!pid_of[@]}"; do
    [ "${pid_of[$t]}" = "$pid" ] || continue
    wait "$pid" 2>/dev/null
    [ "$(cat "$build/fuzz-logs/$t.rc")" = 0 ] || failed+=("$t")
    unset "pid_of[$t]"
  done
}
mkdir -p "$build/fuzz-logs"
for t in "${targets[@]}"; do
  while [ ${#pid_of[@]} -ge "$jobs" ]; do reap; done
  ( fuzz_one "$t"; echo $? >"$build/fuzz-logs/$t.rc" ) &
  pid_of[$t]=$!
done
while [ ${#pid_of[@]} -gt 0 ]; do reap; done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} target(s) ran clean"
