#!/usr/bin/env bash
# Builds the independent ROS 2 peers (README.md) into DIR, by default
# ${XDG_CACHE_HOME:-~/.cache}/lingbotmap/ros2peers/<hash of the sources>:
# cyclone-peer (Cyclone DDS C API, idlc types, libpng), fastdds-peer (Fast DDS
# 2.9), and the npm packages of foxglove-peer.js and mcap-check.mjs (pinned in
# package-lock.json). A second run rebuilds only what changed. Prints the
# directory last. Checkouts with other peer sources build into other
# directories, builds of one directory take turns (flock), and each file is
# replaced by a rename, so a test never runs a half-written or foreign peer.
# Needs (Debian 12): test/install-deps.sh, or apt-get install cyclonedds-dev
# cyclonedds-tools libfastrtps-dev libpng-dev g++, and Node.js >= 18 with npm.
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ $# -ge 1 ]; then
  out=$1
else
  hash=$(cd "$src" && cat ros2msgs.idl cyclone-peer.c fastdds-peer.cpp foxglove-peer.js mcap-check.mjs package.json package-lock.json | sha256sum | cut -c1-16)
  out=${XDG_CACHE_HOME:-$HOME/.cache}/lingbotmap/ros2peers/$hash
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$out"
exec 9>"$out/.build.lock"
flock 9
for tool in idlc gcc g++ npm node; do
  command -v "$tool" >/dev/null || { echo "ros2peers/build.sh: $tool is missing (run test/install-deps.sh)" >&2; exit 1; }
done
# newer SRC... OUT: OUT is missing or older than one of the sources.
stale() { local o=$1; shift; [ ! -e "$o" ] && return 0; for s in "$@"; do [ "$s" -nt "$o" ] && return 0; done; return 1; }
if stale ros2msgs.c "$src/ros2msgs.idl"; then
  idlc -o . "$src/ros2msgs.idl" 2>/dev/null
fi
if stale cyclone-peer "$src/cyclone-peer.c" ros2msgs.c; then
  gcc -O2 -Wall -o cyclone-peer.tmp "$src/cyclone-peer.c" ros2msgs.c -I. -lddsc -lpng
  mv -f cyclone-peer.tmp cyclone-peer
fi
if stale fastdds-peer "$src/fastdds-peer.cpp"; then
  g++ -O1 -std=c++17 -o fastdds-peer.tmp "$src/fastdds-peer.cpp" -lfastrtps -lfastcdr
  mv -f fastdds-peer.tmp fastdds-peer
fi
for f in foxglove-peer.js mcap-check.mjs; do
  cp -p "$src/$f" "$f.tmp"
  mv -f "$f.tmp" "$f"
done
if stale node_modules/.package-lock.json "$src/package.json" "$src/package-lock.json"; then
  cp "$src/package.json" "$src/package-lock.json" .
  npm ci --no-audit --no-fund --silent
fi
echo "$out"
