#!/usr/bin/env bash
# Installs the npm packages of mcap-check.mjs (pinned in package-lock.json)
# into DIR, by default ${XDG_CACHE_HOME:-~/.cache}/lingbotmap/mcapcheck, outside
# the repository; a second run reinstalls only when the pins changed. Copies
# the script there and prints the directory last. Needs Node.js >= 18 with npm.
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/lingbotmap/mcapcheck}
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "mcapcheck/setup.sh: $tool is missing (Node.js >= 18 with npm)" >&2; exit 1; }
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$out"
if [ ! -e node_modules/.package-lock.json ] || ! cmp -s "$src/package-lock.json" package-lock.json; then
  cp "$src/package.json" "$src/package-lock.json" .
  npm ci --no-audit --no-fund --silent >&2
fi
cp "$src/mcap-check.mjs" .
echo "$out"
