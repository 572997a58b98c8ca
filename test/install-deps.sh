#!/usr/bin/env bash
# Installs what the tests and the demo need on a Debian 12 machine (run as root,
# or with sudo): Debian's ROS 1 tools (roscore, rostopic, rosservice, rosbag,
# roslaunch) with the Python message classes of every type the node speaks,
# rviz under Xvfb for the screenshot test, ImageMagick for screenshots, ffmpeg
# for video input, Cyclone DDS (the ROS 2 transport links it) and, for the
# independent ROS 2 peers (test/ros2peers), Fast DDS, libpng and g++, colcon
# and CMake (the package's colcon build), and the network namespace tools
# (iproute2, util-linux). Go itself is expected at
# /usr/local/go or on PATH; Node.js >= 18 with npm (the machine image has
# Node.js 20) is checked, not installed: Debian's is older. A running apt (a
# fresh machine's automatic updates) is waited for (test/apt.sh).
set -euo pipefail
# shellcheck source=test/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
need=0
for cmd in rosmaster rostopic rosservice rosbag roslaunch rviz xvfb-run import ffmpeg; do
  command -v "$cmd" >/dev/null 2>&1 || need=1
done
for mod in rospy rosbag sensor_msgs.msg nav_msgs.msg tf2_msgs.msg diagnostic_msgs.msg std_srvs.srv; do
  /usr/bin/python3 -c "import $mod" >/dev/null 2>&1 || need=1
done
need2=0
for cmd in idlc gcc g++ ip unshare colcon cmake make; do
  command -v "$cmd" >/dev/null 2>&1 || need2=1
done
for header in dds/dds.h fastdds/dds/domain/DomainParticipant.hpp png.h; do
  [ -e "/usr/include/$header" ] || need2=1
done

if [ "$need" = 1 ] || [ "$need2" = 1 ]; then
  apt_get update
fi
if [ "$need" = 1 ]; then
  # headless ROS 1 tools and the Python message classes rostopic, rosservice
  # and rosbag need to show every message the node publishes
  apt_get install -y --no-install-recommends \
    python3-roslaunch python3-rostopic python3-rosbag python3-rosparam python3-rosnode python3-rosservice \
    python3-std-msgs python3-std-srvs python3-sensor-msgs python3-geometry-msgs python3-nav-msgs \
    python3-tf2-msgs python3-diagnostic-msgs python3-pil
  # rviz under a virtual X server, screenshots, video decoding
  apt_get install -y --no-install-recommends \
    rviz xvfb xauth x11-apps imagemagick libgl1-mesa-dri ffmpeg
fi
if [ "$need2" = 1 ]; then
  # Cyclone DDS for the ROS 2 transport; the peers' DDS stacks and compilers;
  # iproute2 and util-linux for the private network namespaces of DDS tests
  apt_get install -y --no-install-recommends \
    cyclonedds-dev cyclonedds-tools libfastrtps-dev libpng-dev gcc g++ iproute2 util-linux
  # colcon with what a build of the ament_cmake package (package.xml,
  # CMakeLists.txt) needs, as the ROS 2 Jazzy of ../shared was built with
  apt_get install -y --no-install-recommends \
    colcon python3-colcon-core python3-colcon-cmake python3-colcon-ros python3-colcon-bash \
    python3-colcon-package-selection python3-colcon-parallel-executor python3-colcon-recursive-crawl \
    python3-colcon-library-path python3-colcon-output python3-colcon-defaults python3-colcon-metadata \
    cmake make
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "install-deps: the ROS 2 peers need Node.js >= 18 with npm (install Node.js 20, as on the CI image)" >&2
  exit 1
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 18 ]; then
  echo "install-deps: Node.js $(node --version) is too old for the ROS 2 peers; install Node.js 20" >&2
  exit 1
fi
# The real ROS 2 Jazzy that judges the node's ROS 2 claims (the ros2 CLI,
# rclpy, launch, rosbag2, tf2; Cyclone DDS and Fast DDS RMWs): its own
# installer unpacks it to /opt/ros2-jazzy and skips an install it already made.
jazzy_install="$(dirname "${BASH_SOURCE[0]}")/../../shared/tools/ros2-jazzy/install.sh"
if [ ! -f "$jazzy_install" ]; then
  echo "install-deps: $jazzy_install not found (../shared beside the checkout)" >&2
  exit 1
fi
bash "$jazzy_install" >&2
if [ "$need" = 0 ] && [ "$need2" = 0 ]; then
  echo "install-deps: everything is already installed"
fi
