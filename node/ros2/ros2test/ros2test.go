// Package ros2test holds what the ROS 2 transport's tests share: running the
// test binary inside ../shared/tools/netns-run.sh (a private loopback-only
// network namespace, so DDS discovery never leaves the machine) and building
// the independent Cyclone DDS C peers they talk to.
package ros2test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/lingbotmap/lingbotmap/internal/shared"
)

// insideEnv marks a process that already runs inside the namespace.
const insideEnv = "LINGBOTMAP_IN_NETNS"

// InNetns makes m's tests run inside netns-run.sh: outside, it re-executes
// the test binary through the script and exits with its status; inside, it
// runs the tests. It fails loudly (exit 2) when the script cannot be used,
// because a DDS participant must never start on the machine's network.
func InNetns(m interface{ Run() int }) {
	if os.Getenv(insideEnv) == "1" {
		os.Exit(m.Run())
	}
	script, err := shared.Path("tools", "netns-run.sh")
	if err != nil {
		fmt.Fprintf(os.Stderr, "ros2 tests must run inside netns-run.sh: %v\n", err)
		os.Exit(2)
	}
	if _, err := os.Stat(script); err != nil {
		fmt.Fprintf(os.Stderr, "ros2 tests must run inside netns-run.sh: %v\n", err)
		os.Exit(2)
	}
	cmd := exec.Command("bash", append([]string{script, os.Args[0]}, os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), insideEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() > 0 {
			os.Exit(ee.ExitCode())
		}
		fmt.Fprintf(os.Stderr, "ros2 tests must run inside netns-run.sh (as root): %v\n", err)
		os.Exit(2)
	}
	os.Exit(0)
}

// Peers are the built C programs.
type Peers struct {
	// CyclonePeer is ../shared/tools/ros2-peers/cyclone-peer.c.
	CyclonePeer string
	// Client is testdata/ros2-client.c (services, USER_DATA, late joiners,
	// ros_discovery_info).
	Client string
}

// BuildPeers compiles the C peers with idlc and gcc into a cache folder
// keyed by their sources, so later runs reuse them.
func BuildPeers() (Peers, error) {
	peerDir, err := shared.Path("tools", "ros2-peers")
	if err != nil {
		return Peers{}, err
	}
	_, self, _, _ := runtime.Caller(0)
	td := filepath.Join(filepath.Dir(self), "testdata")
	srcs := []string{
		filepath.Join(peerDir, "ros2msgs.idl"), filepath.Join(peerDir, "cyclone-peer.c"),
		filepath.Join(td, "ros2extra.idl"), filepath.Join(td, "ros2-client.c"),
	}
	h := sha256.New()
	for _, s := range srcs {
		f, err := os.Open(s)
		if err != nil {
			return Peers{}, fmt.Errorf("peer sources: %w", err)
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return Peers{}, fmt.Errorf("peer sources: %w", err)
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "lingbotmap", "ros2peers-"+hex.EncodeToString(h.Sum(nil))[:16])
	p := Peers{CyclonePeer: filepath.Join(dir, "cyclone-peer"), Client: filepath.Join(dir, "ros2-client")}
	if _, err := os.Stat(p.Client); err == nil {
		return p, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return Peers{}, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "build-")
	if err != nil {
		return Peers{}, err
	}
	defer os.RemoveAll(tmp)
	steps := [][]string{
		{"idlc", "-o", ".", srcs[0]},
		{"idlc", "-o", ".", srcs[2]},
		{"gcc", "-O1", "-o", "cyclone-peer", srcs[1], "ros2msgs.c", "-I.", "-lddsc"},
		{"gcc", "-O1", "-o", "ros2-client", srcs[3], "ros2msgs.c", "ros2extra.c", "-I.", "-lddsc"},
	}
	for _, s := range steps {
		cmd := exec.Command(s[0], s[1:]...)
		cmd.Dir = tmp
		if out, err := cmd.CombinedOutput(); err != nil {
			return Peers{}, fmt.Errorf("building the ROS 2 peers: %s: %w\n%s(needs cyclonedds-dev, cyclonedds-tools and gcc)", s[0], err, out)
		}
	}
	// Another test binary may have finished the same build meanwhile.
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(p.Client); serr != nil {
			return Peers{}, fmt.Errorf("storing the ROS 2 peers: %w", err)
		}
	}
	return p, nil
}
