#!/bin/sh
# Usage: tests/mcp/run.sh SBX BUILD_DIR
# ctest `mcp`: installs the pinned MCP SDK into BUILD_DIR/mcp-node (tests/mcp/install.sh) and runs
# tests/mcp/sdk_test.mjs (stdio, with a state directory of its own) and sdk_http_test.mjs
# (--listen) there (node resolves the SDK from the script's own directory).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
sbx=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
dir=$2/mcp-node
"$here/install.sh" "$dir"
cp "$here/sdk_test.mjs" "$here/sdk_http_test.mjs" "$dir/"
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
SBX_STATE_DIR=$state node "$dir/sdk_test.mjs" "$sbx" "$root"
# The same SDK's Streamable HTTP client against `sbx mcp --listen` (it makes its own state and tenants).
node "$dir/sdk_http_test.mjs" "$sbx" "$root"
