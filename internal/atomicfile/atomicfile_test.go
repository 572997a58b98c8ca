package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A failed write leaves the old file as it was and no temporary file behind.
func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "map.ply")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteFile(p, func(w io.Writer) error {
		if _, err := w.Write([]byte("half a new fi")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), p) {
		t.Fatalf("error %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("file now %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
	if err := WriteFile(p, func(w io.Writer) error { _, err := w.Write([]byte("new")); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "new" {
		t.Fatalf("file now %q", b)
	}
	if err := WriteFile(filepath.Join(dir, "missing", "x"), func(io.Writer) error { return nil }); err == nil {
		t.Error("a file in a missing folder was written")
	}
}

// A committed file has mode 0644 and its content; an aborted one leaves
// nothing; a second Commit is refused.
func TestCreateCommitAbort(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "frames.bag")
	f, err := Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("bag"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("the destination exists before Commit: %v", err)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := f.Commit(); err == nil {
		t.Error("a second Commit was accepted")
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("committed file: %v, %v", st, err)
	}
	g, err := Create(filepath.Join(dir, "other.bag"))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Abort(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || ents[0].Name() != "frames.bag" {
		t.Fatalf("after Abort: %v", ents)
	}
	if err := SyncDir(filepath.Join(dir, "missing")); err == nil {
		t.Error("syncing a missing folder succeeded")
	}
}

// TestRemoveStale: a writer killed with SIGKILL leaves its temporary file;
// RemoveStale keeps it while the writer lives (and a live writer's of this
// process), removes it once the kernel has released the writer's lock,
// and never touches other files.
func TestRemoveStale(t *testing.T) {
	if dir := os.Getenv("ATOMICFILE_TEST_HOLD"); dir != "" {
		f, err := Create(filepath.Join(dir, "map.ply"))
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(filepath.Base(f.Name()))
		io.Copy(io.Discard, os.Stdin) // until killed
		os.Exit(0)
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRemoveStale$")
	cmd.Env = append(os.Environ(), "ATOMICFILE_TEST_HOLD="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		t.Fatal(err)
	}
	child := strings.TrimSpace(line)
	if !IsTemp(child) {
		cmd.Process.Kill()
		t.Fatalf("child's temporary file %q is not IsTemp", child)
	}
	mine, err := Create(filepath.Join(dir, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Abort()
	for _, name := range []string{".notes.txt", "map.ply.123", ".hidden"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if removed, err := RemoveStale(dir); err != nil || len(removed) != 0 {
		t.Fatalf("with both writers alive: removed %v, %v", removed, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	removed, err := RemoveStale(dir)
	if err != nil || len(removed) != 1 || removed[0] != child {
		t.Fatalf("after the kill: removed %v, %v; want [%s]", removed, err, child)
	}
	if _, err := os.Stat(mine.Name()); err != nil {
		t.Fatalf("the live writer's file went: %v", err)
	}
	if _, err := mine.Write([]byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := mine.Commit(); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != ".hidden .notes.txt map.ply.123 run.json" {
		t.Fatalf("left: %v", names)
	}
}
