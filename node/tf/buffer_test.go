package tf

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/geom"
)

var t0 = time.Unix(1700000000, 0)

func yaw(a float64) geom.Quat { return geom.Quat{0, 0, math.Sin(a / 2), math.Cos(a / 2)} }

func near(t *testing.T, what string, got geom.Mat4, want geom.Mat4) {
	t.Helper()
	for i := 0; i < 3; i++ {
		for j := 0; j < 4; j++ {
			if math.Abs(got[i][j]-want[i][j]) > 1e-9 {
				t.Fatalf("%s:\n got %v\nwant %v", what, got, want)
			}
		}
	}
}

func mustCompose(t *testing.T, p [3]float64, q geom.Quat) geom.Mat4 {
	t.Helper()
	m, err := geom.Compose(p, q)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The REP 105 tree: odom → base_link moving, base_link → camera static.
func robot(t *testing.T) *Buffer {
	b := NewBuffer(10 * time.Second)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.Set(Transform{Parent: "base_link", Child: "camera", T: [3]float64{0.2, 0, 0.5}, Q: geom.Quat{-0.5, 0.5, -0.5, 0.5}}, true, "/robot_state_publisher"))
	for i := 0; i <= 10; i++ {
		must(b.Set(Transform{Parent: "odom", Child: "/base_link", Stamp: t0.Add(time.Duration(i) * 100 * time.Millisecond),
			T: [3]float64{0.1 * float64(i), 0, 0}, Q: yaw(0.05 * float64(i))}, false, "/wheel_odom"))
	}
	return b
}

func TestLookupChainsAndInterpolates(t *testing.T) {
	b := robot(t)
	at := t0.Add(250 * time.Millisecond)
	got, err := b.Lookup("odom", "camera", at, 0)
	if err != nil {
		t.Fatal(err)
	}
	base := mustCompose(t, [3]float64{0.25, 0, 0}, yaw(0.125))
	cam := mustCompose(t, [3]float64{0.2, 0, 0.5}, geom.Quat{-0.5, 0.5, -0.5, 0.5})
	near(t, "odom_T_camera", got, geom.Mul4(base, cam))
	inv, err := b.Lookup("camera", "odom", at, 0)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "camera_T_odom", inv, geom.InvertRigid(geom.Mul4(base, cam)))
	// a zero time: the newest the chain has
	latest, err := b.Lookup("odom", "base_link", time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "latest", latest, mustCompose(t, [3]float64{1, 0, 0}, yaw(0.5)))
}

func TestExtrapolationAndMissingFrames(t *testing.T) {
	b := robot(t)
	if _, err := b.Lookup("odom", "camera", t0.Add(1500*time.Millisecond), 100*time.Millisecond); !errors.Is(err, ErrExtrapolation) {
		t.Fatalf("0.5 s past the newest: %v", err)
	}
	if _, err := b.Lookup("odom", "camera", t0.Add(1050*time.Millisecond), 100*time.Millisecond); err != nil {
		t.Fatalf("within the tolerance: %v", err)
	}
	if _, err := b.Lookup("odom", "lidar", t0, time.Second); !errors.Is(err, ErrNoPath) {
		t.Fatalf("unknown frame: %v", err)
	}
}

func TestOneParentPerFrame(t *testing.T) {
	b := robot(t)
	err := b.Set(Transform{Parent: "map", Child: "base_link", Stamp: t0, Q: yaw(0)}, false, "/other_slam")
	if !errors.Is(err, ErrSecondParent) {
		t.Fatalf("second parent: %v", err)
	}
	if p, who, _ := b.Parent("base_link"); p != "odom" || who != "/wheel_odom" {
		t.Fatalf("base_link's parent %s from %s", p, who)
	}
	if err := b.Set(Transform{Parent: "camera", Child: "odom", Stamp: t0, Q: yaw(0)}, false, "x"); !errors.Is(err, ErrSecondParent) {
		t.Fatalf("a loop: %v", err)
	}
	if err := b.Set(Transform{Parent: "odom", Child: "base_link", Stamp: t0, T: [3]float64{math.NaN(), 0, 0}, Q: yaw(0)}, false, "x"); !errors.Is(err, ErrBadTransform) {
		t.Fatalf("NaN: %v", err)
	}
	if err := b.Set(Transform{Parent: "odom", Child: "base_link", Stamp: t0, Q: geom.Quat{}}, false, "x"); !errors.Is(err, ErrBadTransform) {
		t.Fatalf("zero quaternion: %v", err)
	}
	if err := b.Set(Transform{Parent: "base_link", Child: "camera", Stamp: t0, Q: yaw(0)}, false, "x"); !errors.Is(err, ErrSecondParent) {
		t.Fatalf("dynamic over static: %v", err)
	}
}

func TestHistoryIsBounded(t *testing.T) {
	b := NewBuffer(time.Second)
	for i := 0; i < 100; i++ {
		if err := b.Set(Transform{Parent: "odom", Child: "base", Stamp: t0.Add(time.Duration(i) * 100 * time.Millisecond), Q: yaw(0)}, false, "x"); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(b.frames["base"].hist); n > 11 {
		t.Fatalf("%d transforms kept for a 1 s cache at 10 Hz", n)
	}
	if _, err := b.Lookup("odom", "base", t0, 0); !errors.Is(err, ErrExtrapolation) {
		t.Fatalf("a time older than the cache: %v", err)
	}
}
