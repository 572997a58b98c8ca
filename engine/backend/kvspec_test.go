package backend

import (
	"strings"
	"testing"
)

// TestKVSpecCheckPages: a page holds PageSize·Heads·HeadDim values; a wrong
// layer, page or length is refused with what was wrong.
func TestKVSpecCheckPages(t *testing.T) {
	s := KVSpec{Layers: 2, Pages: 4, PageSize: 3, Heads: 2, HeadDim: 5}
	if per, err := s.CheckPages(1, []int32{0, 3}, 60, 60); err != nil || per != 30 {
		t.Fatalf("valid copy: %d, %v", per, err)
	}
	for _, c := range []struct {
		layer  int
		pages  []int32
		nk, nv int
		want   string
	}{
		{2, []int32{0}, 30, 30, "KV layer 2 of 2"},
		{0, []int32{4}, 30, 30, "KV page 4 of 4"},
		{0, []int32{-1}, 30, 30, "KV page -1 of 4"},
		{0, []int32{0}, 30, 29, "needs 30 values"},
		{0, []int32{0, 1}, 30, 30, "needs 60 values"},
	} {
		if _, err := s.CheckPages(c.layer, c.pages, c.nk, c.nv); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("layer %d pages %v lengths %d/%d: %v, want %q", c.layer, c.pages, c.nk, c.nv, err, c.want)
		}
	}
}
