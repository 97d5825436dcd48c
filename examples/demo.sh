#!/bin/sh
# The demo behind `make run`: one program in the sandbox, its result, and its trace record.
set -eu
SBX=${1:-build/sbx}
STATE=${SBX_STATE_DIR:-$(pwd)/build/demo-state}
export SBX_STATE_DIR="$STATE"
TRACE="$STATE/last-trace.json"
mkdir -p "$STATE"
echo "== sbx run: a python3 program in a fresh sandbox (no network, read-only root, own pid/user namespaces)"
set +e
"$SBX" run --timeout 10s --trace-file "$TRACE" -- python3 -c '
import json, os, socket
try:
    socket.create_connection(("1.1.1.1", 80), timeout=1); net = "reachable"
except OSError as e:
    net = "unreachable (%s)" % e.strerror
print(json.dumps({"uid": os.getuid(), "pid": os.getpid(), "hostname": socket.gethostname(),
                  "visible_pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
                  "network": net}, indent=2))'
rc=$?
set -e
echo "== exit status: $rc"
echo "== trace record ($TRACE):"
"$SBX" trace show "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$TRACE")" --format text
