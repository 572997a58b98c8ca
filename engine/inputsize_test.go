package engine

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckInputSize(t *testing.T) {
	for _, ok := range [][2]int{{518, 378}, {518, 294}, {14, 14}, {1260, 1260}, {2072, 770}, {MaxGridSide * 14, 14}, {14, MaxGridSide * 14}} {
		if err := CheckInputSize(ok[0], ok[1]); err != nil {
			t.Errorf("%d×%d: %v", ok[0], ok[1], err)
		}
	}
	for _, c := range []struct {
		w, h int
		want string
	}{
		{140000, 140000, "140000×140000 pixels make a 10000×10000 patch grid, beyond the 1018 patches per side that the model's position table covers (at most 14252 pixels a side)"},
		{(MaxGridSide + 1) * 14, 14, "a 1019×1 patch grid"},
		{14, (MaxGridSide + 1) * 14, "a 1×1019 patch grid"},
		{1274, 1274, "1274×1274 pixels make 8281 patches a frame, more than the 8192 allowed (the full model's KV cache alone would take 1.6 GB per cached frame)"},
		{0, 378, "0×378 is smaller than one 14-pixel patch"},
		{518, -14, "518×-14 is smaller"},
		{13, 13, "smaller than one"},
	} {
		err := CheckInputSize(c.w, c.h)
		if !errors.Is(err, ErrInputSize) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d×%d: %v\nwant it to contain %q", c.w, c.h, err, c.want)
		}
	}
}
