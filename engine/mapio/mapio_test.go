package mapio

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/geom"
)

func TestPLYRoundTripAndErrors(t *testing.T) {
	pts := []Point{pt(1, 2, 3, 10, 20, 30), pt(-1.5, 0, 1e6, 255, 0, 7)}
	var buf bytes.Buffer
	if err := WritePLY(&buf, pts, "voxel 0.05", "two\nlines"); err != nil {
		t.Fatal(err)
	}
	got, comments, err := ReadPLY(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != pts[0] || got[1] != pts[1] {
		t.Fatalf("points %+v, want %+v", got, pts)
	}
	if len(comments) != 2 || comments[0] != "voxel 0.05" || comments[1] != "two lines" {
		t.Fatalf("comments %q", comments)
	}
	full := buf.Bytes()
	for _, c := range []struct{ name, data, want string }{
		{"not ply", "plx\n", "not a PLY"},
		{"ascii", "ply\nformat ascii 1.0\n", "unsupported format"},
		{"truncated header", "ply\nformat binary_little_endian 1.0\nelement vertex 2\n", "truncated header"},
		{"truncated data", string(full[:len(full)-4]), "vertex 1 of 2"},
		{"other layout", "ply\nformat binary_little_endian 1.0\nelement vertex 1\nproperty double x\nend_header\n", "unsupported layout"},
	} {
		if _, _, err := ReadPLY(strings.NewReader(c.data)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

func TestVoxelGridAverages(t *testing.T) {
	g := NewVoxelGrid(1)
	g.Add([]Point{
		pt(0.1, 0.1, 0.1, 0, 0, 0), pt(0.9, 0.3, 0.5, 100, 200, 50), // one voxel
		pt(-0.5, 0, 0, 9, 9, 9),                 // the voxel below zero
		pt(float32(math.NaN()), 0, 0, 1, 1, 1),  // dropped
		pt(float32(math.Inf(1)), 0, 0, 1, 1, 1), // dropped
	})
	if g.Len() != 2 {
		t.Fatalf("%d voxels, want 2", g.Len())
	}
	p := g.Points()
	if math.Abs(float64(p[0].X)-0.5) > 1e-6 || math.Abs(float64(p[0].Y)-0.2) > 1e-6 || p[0].R != 50 || p[0].G != 100 || p[0].B != 25 {
		t.Fatalf("averaged voxel %+v", p[0])
	}
	if p[1].X != -0.5 {
		t.Fatalf("negative voxel %+v", p[1])
	}
	g.Reset()
	if g.Len() != 0 || len(g.Points()) != 0 {
		t.Fatal("reset left points")
	}
}

func TestTUMLine(t *testing.T) {
	var buf bytes.Buffer
	tr, q, _ := geom.Decompose([4][4]float64{{1, 0, 0, 1}, {0, 1, 0, 2}, {0, 0, 1, 3}, {0, 0, 0, 1}})
	pose := StampedPose{Time: 12.5, T: tr, Q: q}
	if err := WriteTUM(&buf, []StampedPose{pose}); err != nil {
		t.Fatal(err)
	}
	if want := "12.500000000 1 2 3 0 0 0 1\n"; !strings.HasSuffix(buf.String(), want) {
		t.Fatalf("TUM line %q, want %q", buf.String(), want)
	}
	// Seconds of a present-day stamp is within a float64 step (2⁻²² s) of it.
	st := time.Unix(1764614400, 123456789)
	if d := Seconds(st) - 1764614400.123456789; math.Abs(d) > 0x1p-22 {
		t.Errorf("Seconds = %.9f, off by %g", Seconds(st), d)
	}
}

func pt(x, y, z float32, r, g, b uint8) Point { return Point{X: x, Y: y, Z: z, R: r, G: g, B: b} }
