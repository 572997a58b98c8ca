package mcapbag

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
)

// Opening and reading a damaged file gives errors, never a panic. Run longer with
// go test ./msgs/mcapbag -run '^$' -fuzz FuzzRead -fuzztime 60s
func seedFile(t testing.TB) []byte {
	path := filepath.Join(t.TempDir(), "seed.mcap")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for ms := range 3 {
		if err := w.Write("/cam", at(ms), image(ms)); err != nil {
			t.Fatal(err)
		}
		if err := w.Write("/pose", at(ms), pose(ms)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	seed, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return seed
}

// readAll opens data as a bag and reads every message; errors are expected.
func readAll(t *testing.T, dir string, data []byte) {
	p := filepath.Join(dir, "f.mcap")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Open(p)
	if err != nil {
		return
	}
	defer r.Close()
	for m, err := range r.Messages() {
		if err != nil {
			return
		}
		var im sensor_msgs.Image
		_ = m.Decode(&im)
	}
}

func FuzzRead(f *testing.F) {
	seed := seedFile(f)
	f.Add(seed)
	f.Add(seed[:len(seed)/2])
	f.Add(bytes.Repeat([]byte{0xff}, 64))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) { readAll(t, dir, data) })
}

// A short fuzzing run inside the normal test: random byte changes and cuts
// of a valid file, deterministic from a fixed seed. Among them are length
// fields of gigabytes, which must neither be allocated nor panic.
func TestReadMutations(t *testing.T) {
	seed := seedFile(t)
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(3, 4))
	for range 1500 {
		b := bytes.Clone(seed)
		for range 1 + rng.IntN(3) {
			b[rng.IntN(len(b))] = byte(rng.Uint32())
		}
		if rng.IntN(4) == 0 {
			b = b[:rng.IntN(len(b))]
		}
		readAll(t, dir, b)
	}
}
