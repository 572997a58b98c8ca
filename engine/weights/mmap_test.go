package weights

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/lingbotmap/lingbotmap/internal/shared/sharedtest"
)

// mappedRSS is the resident size in bytes of the mapping that holds addr, from /proc/self/smaps.
func mappedRSS(t *testing.T, addr uintptr) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatalf("reading /proc/self/smaps (needed to check page release): %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	inside := false
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 && strings.Contains(line, "-") && !strings.HasSuffix(strings.Fields(line)[0], ":") {
			inside = addr >= lo && addr < hi
			continue
		}
		var kb int64
		if inside && strings.HasPrefix(line, "Rss:") {
			if _, err := fmt.Sscanf(line, "Rss: %d kB", &kb); err != nil {
				t.Fatal(err)
			}
			return kb * 1024
		}
	}
	t.Fatalf("no mapping holds address %#x", addr)
	return 0
}

// Reading tensors must not fault the file's pages into this process: the
// float32 copies are the only memory loading costs (about one copy of the
// 4.6 GB checkpoint, not two).
func TestFloat32DoesNotFaultInTheMapping(t *testing.T) {
	st := openGoldenST(t)
	pt, err := OpenPT(sharedtest.Path(t, "golden", "weights.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer pt.Close()
	for name, c := range map[string]struct {
		s    Store
		data []byte
	}{"safetensors": {st, st.m.data}, "pt": {pt, pt.m.data}} {
		addr := uintptr(unsafe.Pointer(&c.data[0]))
		var n int
		for _, k := range c.s.Keys() {
			v, err := c.s.Float32(k)
			if err != nil {
				t.Fatal(err)
			}
			n += len(v)
		}
		after := mappedRSS(t, addr)
		t.Logf("%s: %d KB of the %d KB mapping resident after reading %d values", name, after>>10, len(c.data)>>10, n)
		if after > int64(len(c.data))/20 {
			t.Errorf("%s: %d of %d file bytes resident after reading every tensor", name, after, len(c.data))
		}
		// RawBytes is a view of the mapping: touching it makes pages resident,
		// which shows the measurement above sees this mapping.
		var sum byte
		for _, k := range c.s.Keys() {
			b, err := c.s.(RawReader).RawBytes(k)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < len(b); i += 1024 {
				sum ^= b[i]
			}
		}
		if touched := mappedRSS(t, addr); touched < int64(len(c.data))/2 {
			t.Errorf("%s: only %d of %d bytes resident after touching every tensor (checksum %d): the RSS probe is not measuring the mapping", name, touched, len(c.data), sum)
		}
	}
}

// BenchmarkLoadGolden opens a golden checkpoint and reads every tensor.
func BenchmarkLoadGolden(b *testing.B) {
	for _, name := range []string{"weights.safetensors", "weights.pt"} {
		path := sharedtest.Path(b, "golden", name)
		b.Run(name, func(b *testing.B) {
			st, _ := os.Stat(path)
			b.SetBytes(st.Size())
			for b.Loop() {
				s, err := Open(path)
				if err != nil {
					b.Fatal(err)
				}
				for _, k := range s.Keys() {
					if _, err := s.Float32(k); err != nil {
						b.Fatal(err)
					}
				}
				s.Close()
			}
		})
	}
}
