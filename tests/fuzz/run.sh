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
[ ${#targets[@]} -gt 0 ] || targets=(spec pack exec seccomp tar proxy_request egress_rule dbus_reply)

# Seeds from what the repository already holds: shipped profiles, example packs and requests,
# seccomp policies, and tar archives in every format GNU tar writes.
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
  esac
}

failed=()
for t in "${targets[@]}"; do
  bin=$build/tests/fuzz/fuzz_$t
  [ -x "$bin" ] || { echo "fuzz: $bin is missing (build the fuzz_targets target)" >&2; failed+=("$t (not built)"); continue; }
  make_seeds "$t"
  corpus=$build/fuzz-corpus/$t crashes=$build/fuzz-crashes/$t log=$build/fuzz-logs/$t.txt
  mkdir -p "$corpus" "$crashes" "$build/fuzz-logs"
  opts=(-timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix="$crashes/")
  if [ "$seconds" -gt 0 ]; then opts+=(-max_total_time="$seconds"); else opts+=(-runs=0); fi
  echo "fuzz: $t for ${seconds}s"
  # The first directory receives new inputs; the committed corpus and the seeds are only read.
  # A target may have no committed inputs yet (git keeps no empty directory): only existing
  # directories are named, since libFuzzer stops at a missing one.
  dirs=("$corpus")
  for d in "tests/fuzz/corpus/$t" "$build/fuzz-seeds/$t"; do [ -d "$d" ] && dirs+=("$d"); done
  if "$bin" "${opts[@]}" "${dirs[@]}" >"$log" 2>&1; then
    grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$log" | tr -s ' \n' ' '
    echo
  else
    echo "fuzz: $t FAILED; the input is in $crashes/, the log in $log:" >&2
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -20 >&2
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} target(s) ran clean"
