#!/usr/bin/env bash
# Installs what the tests and the demo need on a Debian 12 machine (run as root,
# or with sudo): Debian's ROS 1 tools (roscore, rostopic, rosbag, roslaunch),
# rviz under Xvfb for the screenshot test, ImageMagick for screenshots, and
# ffmpeg for video input. Go itself is expected at /usr/local/go or on PATH.
set -euo pipefail
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
need=0
for cmd in rosmaster rostopic rosbag roslaunch rviz xvfb-run import ffmpeg; do
  command -v "$cmd" >/dev/null 2>&1 || need=1
done
for mod in rospy rosbag sensor_msgs.msg nav_msgs.msg tf2_msgs.msg; do
  /usr/bin/python3 -c "import $mod" >/dev/null 2>&1 || need=1
done
if [ "$need" = 0 ]; then
  echo "install-deps: everything is already installed"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# headless ROS 1 tools and the Python message classes rostopic/rosbag need
$SUDO apt-get install -y -q --no-install-recommends \
  python3-roslaunch python3-rostopic python3-rosbag python3-rosparam python3-rosnode python3-rosservice \
  python3-std-msgs python3-std-srvs python3-sensor-msgs python3-geometry-msgs python3-nav-msgs \
  python3-tf2-msgs python3-pil
# rviz under a virtual X server, screenshots, video decoding
$SUDO apt-get install -y -q --no-install-recommends \
  rviz xvfb xauth x11-apps imagemagick libgl1-mesa-dri ffmpeg
