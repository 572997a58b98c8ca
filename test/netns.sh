#!/usr/bin/env bash
# Runs a command in a network namespace of its own whose only interface is
# loopback, with multicast routed to it, so that DDS discovery (ROS 2) works
# and nothing it sends can leave the machine. Needs root (or user namespaces)
# and iproute2 + util-linux. The ROS 2 parts of launch/demo.sh run in it.
#
#   test/netns.sh CMD [ARGS...]
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }
# Where the checkout sits beside the shared tools (CI, the project's
# machines), their netns-run.sh is the one every DDS test uses: take it.
shared_tool="$(dirname "${BASH_SOURCE[0]}")/../../shared/tools/netns-run.sh"
if [ -x "$shared_tool" ]; then
  exec "$shared_tool" "$@"
fi
for tool in unshare ip; do
  command -v "$tool" >/dev/null || { echo "netns.sh: $tool is missing (apt-get install util-linux iproute2)" >&2; exit 2; }
done
exec unshare --net -- bash -c '
  set -e
  ip link set dev lo up
  ip link set dev lo multicast on
  ip route add 224.0.0.0/4 dev lo
  exec "$@"
' netns "$@"
