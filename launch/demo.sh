#!/usr/bin/env bash
# The main job on the bundled sample, on the CPU, with no download:
#   1. installs Debian's ROS 1 tools, rviz, Xvfb and Cyclone DDS
#      (test/install-deps.sh) and builds bin/lingbotmap with ROS 2 support,
#   2. writes a ROS 1 bag and a ROS 2 bag (MCAP) of the 16 frames in
#      test/data/courthouse,
#   3. ROS 1: starts a private roscore, the node (random-weight tiny model) and
#      rviz under Xvfb, plays the bag, calls ~save_map, takes an rviz screenshot,
#   4. ROS 2, in a private loopback-only network namespace (test/netns.sh):
#      the node, `lingbotmap bag play` of the MCAP bag, and an independent
#      Cyclone DDS peer (test/ros2peers) that receives every pose and calls
#      ~/save_map,
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
echo "== building bin/lingbotmap (with ROS 2: -tags ros2)"
go build -buildvcs=auto -tags ros2 -o bin/lingbotmap ./cmd/lingbotmap
bin=$root/bin/lingbotmap

echo "== writing $out/frames.bag"
"$bin" bag --images test/data/courthouse --out "$out/frames.bag" --frame-rate 2 --topic /camera/image_raw --frame-id camera_optical

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

echo "== ROS 2: the node, bag play and an independent Cyclone DDS subscriber"
"$bin" bag --format mcap --images test/data/courthouse --out "$out/frames.mcap" --frame-rate 2 --topic /camera/image_raw --frame-id camera_optical
peers=$(test/ros2peers/build.sh | tail -1)
mkdir -p "$out/ros2"
rm -f "$out/ros2/map.ply" "$out/ros2/trajectory.tum"
DEMO_BIN=$bin DEMO_OUT=$out DEMO_PEER=$peers/cyclone-peer DEMO_N=$n DEMO_WEIGHTS=$weights \
  test/netns.sh bash -c '
  set -u
  o=$DEMO_OUT/ros2
  "$DEMO_BIN" node --ros 2 --queue-policy=all --weights="$DEMO_WEIGHTS" --model-size=tiny \
    --ros-args -r __node:=lingbotmap -r image:=/camera/image_raw -p save_dir:="$o" >"$o/node.log" 2>&1 &
  node=$!
  "$DEMO_PEER" listen --secs 300 pose:/lingbotmap/pose >"$o/peer.log" 2>&1 &
  peer=$!
  "$DEMO_BIN" bag play --delay 2s "$DEMO_OUT/frames.mcap" >"$o/play.log" 2>&1
  for _ in $(seq 300); do
    [ "$(grep -c "\"event\":\"msg\",\"kind\":\"pose\"" "$o/peer.log" || true)" -ge "$DEMO_N" ] && break
    sleep 0.5
  done
  "$DEMO_PEER" call --timeout 30 /lingbotmap/save_map >"$o/save_map.log" 2>&1 || true
  kill -INT $node; wait $node || true
  kill -TERM $peer; wait $peer || true
'
grep '"event":"msg","kind":"pose"' "$out/ros2/peer.log" >"$out/ros2/poses.jsonl" || true
got=$(wc -l <"$out/ros2/poses.jsonl")
[ "$got" -ge "$n" ] || { echo "the Cyclone DDS peer received $got of $n poses (see $out/ros2/*.log)"; exit 1; }
have2=$(grep -vc '^#' "$out/ros2/trajectory.tum" 2>/dev/null || echo 0)
[ "$have2" -ge "$n" ] || { echo "the ROS 2 node saved $have2 of $n poses (see $out/ros2/save_map.log)"; exit 1; }

echo "== mapping the same frames offline"
# --force: run/ is this demo's own folder, which an earlier demo filled.
"$bin" run test/data/courthouse --out "$out/run" --force --weights="$weights" --model-size tiny --no-progress

cat <<EOF

Done. Outputs in $out:
  frames.bag, frames.mcap  the inputs: a ROS 1 bag and a ROS 2 bag of 16 frames
  rviz.png          rviz during the ROS 1 replay
  map.ply           the ROS 1 node's map (~save_map), trajectory.tum its trajectory ($have poses)
  ros2/poses.jsonl  the ROS 2 node's $got poses as an independent Cyclone DDS peer decoded them
  ros2/map.ply      the ROS 2 node's map (~/save_map called by the peer), ros2/trajectory.tum ($have2 poses)
  run/              lingbotmap run: trajectory.tum, map.ply, run.json, preview.png, depth/, depth_color/
  node.log          the node's log
(A random-weight model gives no meaningful map; see README, "A real map".)
EOF
