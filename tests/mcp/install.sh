#!/bin/sh
# Usage: tests/mcp/install.sh DIR
# Installs the pinned MCP SDK (tests/mcp/package.json, package-lock.json) into DIR/node_modules with
# `npm ci`, unless DIR already holds exactly that lock file's install. Used by `make mcp-test-deps`
# and by tests/mcp/run.sh (ctest `mcp`).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=$1
command -v npm >/dev/null 2>&1 || { echo "mcp-test-deps: npm is missing (make deps-test installs it)" >&2; exit 1; }
mkdir -p "$dir"
if [ -f "$dir/node_modules/.sbx-lock" ] && cmp -s "$here/package-lock.json" "$dir/node_modules/.sbx-lock"; then
  echo "mcp-test-deps: $dir/node_modules is up to date"
  exit 0
fi
cp "$here/package.json" "$here/package-lock.json" "$dir/"
# --ignore-scripts: no package's install script runs; --no-audit/--no-fund: no other request.
(cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
cp "$here/package-lock.json" "$dir/node_modules/.sbx-lock"
echo "mcp-test-deps: installed $(cd "$dir" && node -p 'JSON.parse(require("fs").readFileSync("node_modules/@modelcontextprotocol/sdk/package.json", "utf8")).version' 2>/dev/null || echo '?') of @modelcontextprotocol/sdk in $dir"
