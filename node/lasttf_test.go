package node

import (
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// The re-published map → odom's stamp is on the images' clock: a bag
// replayed at a third of its pace (images 100 ms apart in stamps, 300 ms
// on the wall clock) gives the last stamp + a third of the wall time since
// + the tolerance; nothing while the next image is not yet late, and
// nothing after clear (a reset or a loaded map).
func TestLastTFStamp(t *testing.T) {
	m := geom.Rigid(geom.Mat3{{0, -1, 0}, {1, 0, 0}, {0, 0, 1}}, [3]float64{1, 2, 3})
	stamp := time.Unix(1700000000, 0)
	wall := time.Unix(1800000000, 0)
	l := lastTF{ok: true, m: m, stamp: stamp, sent: wall,
		prevStamp: stamp.Add(-100 * time.Millisecond), prevSent: wall.Add(-300 * time.Millisecond)}
	const tick, tol = 50 * time.Millisecond, 100 * time.Millisecond
	if _, _, ok := l.at(wall.Add(250*time.Millisecond), tick, tol); ok {
		t.Error("re-published 250 ms after an image when they come 300 ms apart")
	}
	got, st, ok := l.at(wall.Add(600*time.Millisecond), tick, tol)
	if want := stamp.Add(200*time.Millisecond + tol); !ok || got != m || !st.Equal(want) {
		t.Errorf("600 ms after the last image at a third of the pace: %v %v %v, want the transform at %v", ok, got, st, want)
	}
	// one image only: its pace unknown, the wall clock's; late after a tick
	one := lastTF{ok: true, m: m, stamp: stamp, sent: wall}
	if _, st, ok := one.at(wall.Add(80*time.Millisecond), tick, tol); !ok || !st.Equal(stamp.Add(180*time.Millisecond)) {
		t.Errorf("after one image: %v at %v", ok, st)
	}
	if _, _, ok := one.at(wall.Add(40*time.Millisecond), tick, tol); ok {
		t.Error("re-published within a tick of the only image")
	}
	l.clear()
	if _, _, ok := l.at(wall.Add(time.Second), tick, tol); ok {
		t.Error("re-published after clear")
	}
}
