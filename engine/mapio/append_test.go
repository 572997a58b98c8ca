package mapio

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// Appended rows read back as WriteTUM writes them, and the file holds
// whole lines after every Append.
func TestTUMAppenderMatchesWriteTUM(t *testing.T) {
	path := filepath.Join(t.TempDir(), TrajectoryFile)
	a, err := CreateTUM(path)
	if err != nil {
		t.Fatal(err)
	}
	var poses []StampedPose
	for i := range 5 {
		p := StampedPose{Time: 1700000000 + float64(i)/30, T: [3]float64{float64(i), -0.5, 1e-7}, Q: geom.Quat{0, 0, 0.6, 0.8}}
		poses = append(poses, p)
		if err := a.Append(p); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		if !bytes.HasSuffix(b, []byte("\n")) || strings.Count(string(b), "\n") != i+2 {
			t.Fatalf("after %d rows the file is %q", i+1, b)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := WriteTUM(&want, poses); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("appended:\n%s\nWriteTUM:\n%s", got, want.Bytes())
	}
}

// A write that fails (here: the file closed under it) leaves the file as it
// was after the last whole row.
func TestTUMAppenderFailedWriteKeepsWholeRows(t *testing.T) {
	path := filepath.Join(t.TempDir(), TrajectoryFile)
	a, err := CreateTUM(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Append(StampedPose{Time: 1, Q: geom.Quat{0, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	a.f.Close()
	if err := a.Append(StampedPose{Time: 2, Q: geom.Quat{0, 0, 0, 1}}); err == nil {
		t.Fatal("append to a closed file succeeded")
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Errorf("file changed by a failed append: %q → %q", before, after)
	}
}

func TestProbeDir(t *testing.T) {
	dir := t.TempDir()
	if err := ProbeDir(dir); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the probe left %v", ents)
	}
	if err := ProbeDir(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "cannot be written") {
		t.Errorf("missing folder: %v", err)
	}
	ro := filepath.Join(dir, "ro")
	if err := os.Mkdir(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	// root writes anywhere: a read-only bind or tmpfs is what refuses root;
	// the fault-injection test covers a full file system.
	if os.Geteuid() != 0 {
		if err := ProbeDir(ro); err == nil {
			t.Error("read-only folder accepted")
		}
	}
}
