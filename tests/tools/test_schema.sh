#!/bin/sh
# The trace schema accepts the sample records and rejects the broken one, for the right reasons.
# Exit 0 when both hold; nonzero otherwise. Run from anywhere.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
schema="$root/schemas/trace.schema.json"
fixtures="$root/tests/fixtures/traces"
py=/usr/bin/python3
fail=0

if ! "$py" "$here/validate_trace.py" "$schema" "$fixtures"/*.json; then
  echo "test_schema: FAIL: a valid sample record was rejected" >&2
  fail=1
fi

for bad in "$fixtures"/invalid/*.json; do
  out=$("$py" "$here/validate_trace.py" "$schema" "$bad")
  rc=$?
  printf '%s\n' "$out"
  # 1 means "invalid record"; 0 (accepted) or 2 (tool or schema broken) are both failures here.
  if [ "$rc" -ne 1 ]; then
    echo "test_schema: FAIL: $bad: expected exit 1 (invalid), got $rc" >&2
    fail=1
    continue
  fi
done

# The broken sample has three faults; each must be reported, not just the first.
bad="$fixtures/invalid/bad-status-and-missing-member.json"
out=$("$py" "$here/validate_trace.py" "$schema" "$bad")
for want in "'finished' is not one of" "'oom_kills' is a required property" "'not-a-hash' does not match"; do
  case "$out" in
    *"$want"*) ;;
    *) echo "test_schema: FAIL: $bad: expected an error containing: $want" >&2; fail=1 ;;
  esac
done

[ "$fail" -eq 0 ] && echo "test_schema: ok"
exit "$fail"
