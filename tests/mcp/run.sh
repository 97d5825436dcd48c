#!/bin/sh
# Usage: tests/mcp/run.sh SBX BUILD_DIR
# ctest `mcp`: installs the pinned MCP SDK into BUILD_DIR/mcp-node (tests/mcp/install.sh) and runs
# tests/mcp/sdk_test.mjs there (node resolves the SDK from the script's own directory), with a
# state directory of its own.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
sbx=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
dir=$2/mcp-node
"$here/install.sh" "$dir"
cp "$here/sdk_test.mjs" "$dir/sdk_test.mjs"
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
SBX_STATE_DIR=$state node "$dir/sdk_test.mjs" "$sbx" "$root"
