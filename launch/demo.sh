#!/usr/bin/env bash
# The main job on the bundled sample, on the CPU, with no download:
#   1. installs Debian's ROS 1 tools, rviz and Xvfb (test/install-deps.sh),
#   2. builds bin/lingbotmap,
#   3. writes a ROS bag of the 16 frames in test/data/courthouse,
#   4. starts a private roscore, the node (random-weight tiny model) and rviz
#      under Xvfb, plays the bag, calls ~save_map, takes an rviz screenshot,
#   5. maps the same frames offline with `lingbotmap run` (preview.png).
# Everything is left in out/demo (or the folder given as the first argument).
#
# A random-weight model gives no meaningful map: this shows the pipeline
# working end to end. For real maps pass official weights: WEIGHTS=/path/lingbot-map.pt
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$(mkdir -p "${1:-out/demo}" && cd "${1:-out/demo}" && pwd)
export PATH="/usr/local/go/bin:$PATH"
weights=${WEIGHTS:-}

test/install-deps.sh
echo "== building bin/lingbotmap"
go build -o bin/lingbotmap ./cmd/lingbotmap
bin=$root/bin/lingbotmap

echo "== writing $out/frames.bag"
"$bin" bag --images test/data/courthouse --out "$out/frames.bag" --rate 2 --topic /camera/image_raw --frame-id camera_optical

# a private master on a free port, so a running roscore is left alone
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export ROS_MASTER_URI="http://127.0.0.1:$port" ROS_HOSTNAME=localhost ROS_HOME="$out/ros_home"
mkdir -p "$ROS_HOME"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
rosmaster --core -p "$port" >"$out/roscore.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do rosparam list >/dev/null 2>&1 && break; sleep 0.2; done
rosparam list >/dev/null || { echo "roscore did not start (see $out/roscore.log)"; exit 1; }

echo "== starting the node (model: ${weights:-random tiny}) and rviz"
rosparam set /lingbotmap/save_dir "$out"
"$bin" node --ros 1 --queue-policy=all --weights="$weights" --model-size=tiny \
  image:=/camera/image_raw __name:=lingbotmap >"$out/node.log" 2>&1 &
node_pid=$!
pids+=($node_pid)

display=":$(( (port % 400) + 100 ))"
Xvfb "$display" -screen 0 1280x800x24 -nolisten tcp >/dev/null 2>&1 &
pids+=($!)
sleep 1
DISPLAY=$display rviz -d launch/lingbotmap.rviz >"$out/rviz.log" 2>&1 &
pids+=($!)

for _ in $(seq 150); do
  rostopic info /camera/image_raw 2>/dev/null | grep -q lingbotmap && break; sleep 0.2
done
echo "== playing the bag"
# --keep-alive: the player stays up until the node has taken every frame
# (with queue_policy all the node holds back the player; a player that exits
# at the end of the bag drops what it has not yet delivered)
rosbag play -q --keep-alive --wait-for-subscribers "$out/frames.bag" >"$out/rosbag.log" 2>&1 &
player=$!
pids+=($player)

echo "== waiting for the node to process every frame, then ~save_map"
n=$(ls test/data/courthouse | wc -l)
for _ in $(seq 120); do
  rosservice call /lingbotmap/save_map >/dev/null 2>&1 || true
  have=$(grep -vc '^#' "$out/trajectory.tum" 2>/dev/null || true)
  [ "${have:-0}" -ge "$n" ] && break
  sleep 1
done
have=$(grep -vc '^#' "$out/trajectory.tum" 2>/dev/null || echo 0)
[ "$have" -ge "$n" ] || { echo "the node saved $have of $n poses (see $out/node.log)"; exit 1; }
kill -TERM "$player" 2>/dev/null || true
sleep 3 # let rviz draw the last map
DISPLAY=$display import -window root "$out/rviz.png"
kill -INT "$node_pid"; wait "$node_pid" || true

echo "== mapping the same frames offline"
"$bin" run test/data/courthouse --out "$out/run" --weights="$weights" --model-size tiny --no-progress

cat <<EOF

Done. Outputs in $out:
  frames.bag        the input bag (16 frames of sensor_msgs/Image)
  map.ply           the node's map (~save_map), trajectory.tum its trajectory ($have poses)
  rviz.png          rviz during the replay
  run/              lingbotmap run: trajectory.tum, map.ply, run.json, preview.png, depth/
  node.log          the node's log
(A random-weight model gives no meaningful map; see README "Official weights".)
EOF
