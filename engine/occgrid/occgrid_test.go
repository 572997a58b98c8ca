package occgrid

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// room is a 4 m × 3 m room in metres: a floor, four walls up to 2 m, a box
// on the floor and a lamp above the band, sampled every 2 cm.
func room() [][3]float64 {
	var pts [][3]float64
	for x := 0.0; x <= 4; x += 0.02 {
		for y := 0.0; y <= 3; y += 0.02 {
			pts = append(pts, [3]float64{x, y, 0})
		}
	}
	for z := 0.0; z <= 2; z += 0.02 {
		for x := 0.0; x <= 4; x += 0.02 {
			pts = append(pts, [3]float64{x, 0, z}, [3]float64{x, 3, z})
		}
		for y := 0.0; y <= 3; y += 0.02 {
			pts = append(pts, [3]float64{0, y, z}, [3]float64{4, y, z})
		}
	}
	for x := 2.0; x <= 2.4; x += 0.02 { // a box 0.4 m high
		for y := 1.0; y <= 1.4; y += 0.02 {
			pts = append(pts, [3]float64{x, y, 0.4})
		}
	}
	pts = append(pts, [3]float64{1, 1, 1.9}) // a lamp above the band
	pts = append(pts, [3]float64{math.NaN(), 0, 0.5})
	return pts
}

func TestProjectRoom(t *testing.T) {
	cfg := DefaultConfig()
	g, err := Project(room(), [][3]float64{{1, 1.5, 0.5}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	at := func(x, y float64) int8 {
		cx, cy, ok := g.Cell(x, y)
		if !ok {
			t.Fatalf("(%g, %g) outside the grid", x, y)
		}
		return g.At(cx, cy)
	}
	for _, p := range [][2]float64{{0, 1}, {4, 2}, {2, 0}, {3, 3}, {2.2, 1.2}} {
		if v := at(p[0], p[1]); v != Occupied {
			t.Errorf("(%g, %g) = %d, want occupied", p[0], p[1], v)
		}
	}
	for _, p := range [][2]float64{{1, 1}, {3, 2}, {1, 1.5}} {
		if v := at(p[0], p[1]); v != Free {
			t.Errorf("(%g, %g) = %d, want free (the lamp is above the band)", p[0], p[1], v)
		}
	}
	if v := at(-0.3, -0.3); v != Unknown {
		t.Errorf("outside the room = %d, want unknown", v)
	}
	// every occupied cell holds band points: count them independently
	want := map[[2]int]int{}
	for _, p := range room() {
		if p[2] >= cfg.MinZ && p[2] <= cfg.MaxZ {
			if cx, cy, ok := g.Cell(p[0], p[1]); ok {
				want[[2]int{cx, cy}]++
			}
		}
	}
	occ := 0
	for cy := 0; cy < g.Height; cy++ {
		for cx := 0; cx < g.Width; cx++ {
			isOcc := g.At(cx, cy) == Occupied
			if isOcc != (want[[2]int{cx, cy}] >= cfg.MinHits) {
				t.Fatalf("cell (%d, %d): occupied %v with %d band points", cx, cy, isOcc, want[[2]int{cx, cy}])
			}
			if isOcc {
				occ++
			}
		}
	}
	if occ != g.Occupied || occ == 0 {
		t.Fatalf("%d occupied cells, Grid counts %d", occ, g.Occupied)
	}
	if k := g.OriginX / cfg.Resolution; math.Abs(k-math.Round(k)) > 1e-9 {
		t.Fatalf("origin %g not on the resolution's lattice", g.OriginX)
	}
}

func TestRaysFreeSeenSpace(t *testing.T) {
	// a wall 3 m ahead, no floor points: only the rays make free space
	var pts [][3]float64
	for y := -1.0; y <= 1; y += 0.02 {
		for z := 0.2; z <= 1; z += 0.1 {
			pts = append(pts, [3]float64{3, y, z})
		}
	}
	cfg := DefaultConfig()
	g, err := Project(pts, [][3]float64{{0, 0, 0.5}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cx, cy, _ := g.Cell(1.5, 0)
	if g.At(cx, cy) != Free {
		t.Fatalf("between the camera and the wall: %d, want free", g.At(cx, cy))
	}
	cx, cy, _ = g.Cell(1.5, -1.3)
	if g.At(cx, cy) != Unknown {
		t.Fatalf("outside the rays: %d, want unknown", g.At(cx, cy))
	}
	cfg.RayRange = 0
	g, err = Project(pts, [][3]float64{{0, 0, 0.5}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cx, cy, _ = g.Cell(1.5, 0)
	if g.At(cx, cy) != Unknown || g.Free != 0 {
		t.Fatalf("no rays: %d free cells", g.Free)
	}
}

func TestConfigAndLimits(t *testing.T) {
	bad := []Config{}
	c := DefaultConfig()
	c.Resolution = 0
	bad = append(bad, c)
	c = DefaultConfig()
	c.MinZ, c.MaxZ = 1, 1
	bad = append(bad, c)
	c = DefaultConfig()
	c.Resolution = math.NaN()
	bad = append(bad, c)
	c = DefaultConfig()
	c.Origin = &[2]float64{0, 0}
	bad = append(bad, c)
	for _, c := range bad {
		if _, err := Project(nil, nil, c); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	c = DefaultConfig()
	c.MaxCells = 100
	if _, err := Project(room(), nil, c); err == nil {
		t.Fatal("a grid over its cell limit was made")
	}
	c = DefaultConfig()
	c.Origin, c.Width, c.Height = &[2]float64{-1, -1}, 20, 10
	g, err := Project(room(), nil, c)
	if err != nil {
		t.Fatal(err)
	}
	if g.Width != 20 || g.Height != 10 || g.OriginX != -1 || len(g.Data) != 200 {
		t.Fatalf("fixed origin grid %d×%d at %g", g.Width, g.Height, g.OriginX)
	}
	empty, err := Project(nil, nil, DefaultConfig())
	if err != nil || empty.Occupied != 0 {
		t.Fatalf("empty map: %v, %+v", err, empty)
	}
}

// The grid written as map_server files and read back by map_server's
// trinary rule is the same grid, row 0 of the PGM being the top.
func TestMapServerRoundTrip(t *testing.T) {
	pts := [][3]float64{{1, 0.5, 0.5}, {1, 0.5, 0.6}, {1.2, 2, 1}, {1.2, 2, 1.1}, {-0.5, 1, -0.1}}
	cfg := DefaultConfig()
	cfg.Resolution = 0.1
	g, err := Project(pts, [][3]float64{{0, 0, 0}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if g.Occupied == 0 || g.Free == 0 || g.Occupied+g.Free == len(g.Data) {
		t.Fatalf("the test grid needs all three kinds of cell: %d occupied, %d free of %d", g.Occupied, g.Free, len(g.Data))
	}
	dir := t.TempDir()
	if err := g.WriteMapServer(dir, "map"); err != nil {
		t.Fatal(err)
	}
	back, err := ReadMapServer(filepath.Join(dir, "map.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if back.Width != g.Width || back.Height != g.Height || back.Resolution != g.Resolution || back.OriginX != g.OriginX || back.OriginY != g.OriginY {
		t.Fatalf("read back %d × %d at %g from (%g, %g), wrote %d × %d at %g from (%g, %g)", back.Width, back.Height, back.Resolution,
			back.OriginX, back.OriginY, g.Width, g.Height, g.Resolution, g.OriginX, g.OriginY)
	}
	if !slices.Equal(back.Data, g.Data) || back.Occupied != g.Occupied || back.Free != g.Free {
		t.Fatalf("cells differ after the round trip")
	}
	// the PGM's first pixel row is the grid's top row (highest y)
	raw, err := os.ReadFile(filepath.Join(dir, "map.pgm"))
	if err != nil {
		t.Fatal(err)
	}
	_, _, pix, err := parsePGM(raw)
	if err != nil {
		t.Fatal(err)
	}
	cx, cy, ok := g.Cell(1.2, 2)
	if !ok || g.At(cx, cy) != Occupied {
		t.Fatal("the obstacle at (1.2, 2) is not an occupied cell")
	}
	if p := pix[(g.Height-1-cy)*g.Width+cx]; p != PGMOccupied {
		t.Fatalf("pixel of the obstacle at (1.2, 2) is %d, want %d", p, PGMOccupied)
	}
	y, err := os.ReadFile(filepath.Join(dir, "map.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"image: map.pgm", "mode: trinary", "negate: 0", "occupied_thresh: 0.65", "origin: ["} {
		if !strings.Contains(string(y), want) {
			t.Errorf("map.yaml lacks %q:\n%s", want, y)
		}
	}
	// a truncated image is refused
	if err := os.WriteFile(filepath.Join(dir, "map.pgm"), raw[:len(raw)-3], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadMapServer(filepath.Join(dir, "map.yaml")); err == nil {
		t.Fatal("a truncated PGM was read")
	}
}
