package test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// package.xml serves ROS 1 and ROS 2 through REP 149 conditions. catkin_pkg,
// which colcon, ament, rosdep and catkin all parse it with, must give each
// ROS version its own build type and dependencies, and neither version any
// key of the other (rosdep would try to install it).
func TestPackageXMLConditions(t *testing.T) {
	script := `
import sys
from catkin_pkg.package import parse_package
p = parse_package(sys.argv[1])
for v in ("1", "2"):
    p.evaluate_conditions({"ROS_VERSION": v})
    deps = sorted({d.name for d in p.buildtool_depends + p.build_depends + p.exec_depends + p.test_depends if d.evaluated_condition})
    print(v, p.package_format, p.name, p.get_build_type(), " ".join(deps))
`
	out, err := exec.Command("/usr/bin/python3", "-c", script, "../package.xml").CombinedOutput()
	if err != nil {
		t.Fatalf("catkin_pkg (python3-catkin-pkg, installed with the ROS 2 Jazzy of test/install-deps.sh): %v\n%s", err, out)
	}
	common := "diagnostic_msgs geometry_msgs nav_msgs sensor_msgs std_srvs tf2_msgs"
	want := map[string]struct{ build, only string }{
		"1": {"catkin", "catkin rosbag rviz"},
		"2": {"ament_cmake", "ament_cmake cyclonedds fastrtps rcl_interfaces ros2launch rviz2"},
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("catkin_pkg printed:\n%s", out)
	}
	for _, line := range lines {
		f := strings.Fields(line)
		w := want[f[0]]
		if len(f) < 4 || f[1] != "3" || f[2] != "lingbotmap" || f[3] != w.build {
			t.Errorf("ROS_VERSION=%s: format/name/build type %q, want 3 lingbotmap %s", f[0], f[1:4], w.build)
			continue
		}
		got := strings.Join(f[4:], " ")
		wantDeps := strings.Fields(common + " " + w.only)
		slices.Sort(wantDeps)
		if got != strings.Join(wantDeps, " ") {
			t.Errorf("ROS_VERSION=%s: dependencies %q, want %q", f[0], got, wantDeps)
		}
	}
}
