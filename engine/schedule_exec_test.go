package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestStreamRunsTheSchedule: the stream on the tiny model runs exactly the
// plan the schedule makes of the same frames when driven without a model:
// push by push, the same model calls of the same sizes and kinds, the same
// flow commits and rollbacks, the same window resets. The warm-up's phase 1
// runs in slices whose end depends on step costs, so its calls are compared
// by number only. Flow decisions come from Config.Decide, so that both see the
// same decisions whatever the flow.
func TestStreamRunsTheSchedule(t *testing.T) {
	decide := func(i int, _ float64, _ bool) bool { return i%3 != 1 }
	modes := []struct {
		name string
		mut  func(*Config)
	}{
		{"streaming interval", func(c *Config) { c.KeyframeInterval = 2 }},
		{"streaming flow", func(c *Config) { c.FlowThreshold, c.Decide = 0.5, decide }},
		{"reference windows", func(c *Config) { c.Windowed, c.WindowSize, c.OverlapSize, c.KeyframeInterval = true, 5, 4, 2 }},
		{"reference flow windows", func(c *Config) {
			c.Windowed, c.WindowSize, c.OverlapSize, c.FlowThreshold, c.Decide = true, 5, 4, 0.5, decide
		}},
		{"live serial", func(c *Config) { c.Windowed, c.WindowMode, c.WindowSize, c.OverlapSize = true, WindowLive, 5, 3 }},
		{"live early start", func(c *Config) { c.Windowed, c.WindowMode, c.WindowSize, c.OverlapSize = true, WindowLive, 6, 4 }},
		{"live flow windows", func(c *Config) {
			c.Windowed, c.WindowMode, c.WindowSize, c.OverlapSize, c.FlowThreshold, c.Decide = true, WindowLive, 5, 4, 0.5, decide
		}},
	}
	const n = 17
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			cfg := tinyConfig()
			mode.mut(&cfg)
			var trace []string
			cfg.Trace = func(ev TraceEvent) {
				s := ev.Event
				if ev.Event == "call" {
					s = fmt.Sprintf("call %d", ev.Frames)
					if ev.SkipAppend {
						s += " skip"
					}
					if ev.Background {
						s = "bg " + s
					}
				}
				trace = append(trace, s)
			}
			st, err := New(context.Background(), cfg, cpuBackend, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			d := &driver{p: newSchedule(cfg)}
			var got, want []string
			var gotBG, wantBG int
			// fg is a push's calls but the warm-up's, which it counts
			fg := func(calls []string, bg *int) string {
				var out []string
				for _, c := range calls {
					if strings.HasPrefix(c, "bg ") {
						*bg++
						continue
					}
					out = append(out, c)
				}
				return strings.Join(out, ", ")
			}
			for i := range n {
				trace, d.calls = nil, nil
				if _, err := st.Push(context.Background(), Frame{Seq: uint64(i), Image: testImage(70, 42, uint8(i*7))}); err != nil {
					t.Fatal(err)
				}
				plan := d.push(uint64(i))
				got = append(got, fg(trace, &gotBG))
				want = append(want, fg(d.calls, &wantBG)+" ("+plan+")")
				got[i] += " (" + plan + ")"
			}
			// a warm-up whose phase 1 is still running when the input ends
			// has made no call yet; the schedule's ran at once
			if w := st.(WindowReporter).Warmup(); w.Window != 0 && w.Frames == 0 {
				gotBG++
			}
			trace, d.calls = nil, nil
			if _, err := st.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			d.flush()
			got, want = append(got, fg(trace, &gotBG)), append(want, fg(d.calls, &wantBG))
			if !slices.Equal(got, want) {
				t.Errorf("the stream ran (plan in brackets):\n%s\nthe schedule planned:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if gotBG != wantBG || (cfg.canStartEarly() && wantBG < 2) {
				t.Errorf("the stream's warm-ups ran %d calls (one in progress counted), the schedule planned %d", gotBG, wantBG)
			}
			if !strings.Contains(strings.Join(want, "|"), "reset") && cfg.Windowed {
				t.Errorf("no window change in %d frames: the case tests nothing of windows", n)
			}
		})
	}
}
