package config

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// windows is a schema with the two settings whose flags were renamed.
type windows struct {
	SlidingWindow int `mapstructure:"sliding_window"`
	WindowSize    int `mapstructure:"window_size"`
}

// The renamed flags set their settings; the old spellings still do, hidden
// and with a warning naming the new flag; the new flag wins over the old.
func TestRenamedFlags(t *testing.T) {
	if FlagName("sliding_window") != "cache-keyframes" || FlagName("window_size") != "window-slots" || FlagName("overlap_size") != "overlap-size" {
		t.Fatalf("flag names %s, %s, %s", FlagName("sliding_window"), FlagName("window_size"), FlagName("overlap_size"))
	}
	for _, c := range []struct {
		args         []string
		slide, slots int
		warned       string
	}{
		{[]string{"--cache-keyframes=5", "--window-slots=9"}, 5, 9, ""},
		{[]string{"--sliding-window", "6", "--window-size=10"}, 6, 10, "--sliding-window has been deprecated, use --cache-keyframes"},
		{[]string{"--sliding_window=7"}, 7, 64, "use --cache-keyframes"},
		{[]string{"--engine.window_size=11"}, 16, 11, "use --window-slots"},
		{[]string{"--window-size=12", "--window-slots=13"}, 16, 13, "use --window-slots"},
	} {
		fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
		var stderr bytes.Buffer
		fs.SetOutput(&stderr)
		b, err := Bind(fs, &windows{SlidingWindow: 16, WindowSize: 64}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := fs.Parse(c.args); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		var got windows
		src, err := b.Load(&got)
		if err != nil {
			t.Fatal(err)
		}
		if got.SlidingWindow != c.slide || got.WindowSize != c.slots {
			t.Errorf("%v: loaded %+v, want sliding_window %d, window_size %d", c.args, got, c.slide, c.slots)
		}
		for key, val := range map[string]int{"sliding_window": c.slide, "window_size": c.slots} {
			if given := src.Given(key); given != (val != 16 && val != 64) {
				t.Errorf("%v: %s given %v", c.args, key, given)
			}
		}
		if w := stderr.String(); (c.warned == "") != (w == "") || !strings.Contains(w, c.warned) {
			t.Errorf("%v: warned %q, want %q", c.args, w, c.warned)
		}
	}
	var help bytes.Buffer
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	if _, err := Bind(fs, &windows{}, nil); err != nil {
		t.Fatal(err)
	}
	fs.SetOutput(&help)
	fs.PrintDefaults()
	if h := help.String(); strings.Contains(h, "  --sliding-window") || strings.Contains(h, "  --window-size") || !strings.Contains(h, "  --cache-keyframes") {
		t.Errorf("help lists the old spellings or misses the new:\n%s", h)
	}
}
