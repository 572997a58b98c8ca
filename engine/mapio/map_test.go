package mapio

import (
	"bufio"
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/binstate"
	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// frameAt is a 4×2 frame at depth 1 seen by a camera at x, its left half
// confident (conf 3) and its right half not (conf 1).
func frameAt(x float64) geom.DepthFrame {
	f := geom.DepthFrame{
		Width: 4, Height: 2,
		Depth: make([]float32, 8), Conf: make([]float32, 8), RGB: make([]uint8, 24),
		Intrinsics: geom.Intrinsics{1, 1, 0, 0},
		CamToWorld: translation(x),
	}
	for i := range 8 {
		f.Depth[i] = 1
		f.Conf[i] = 1
		if i%4 < 2 {
			f.Conf[i] = 3
		}
		f.RGB[3*i] = uint8(10 * i)
	}
	return f
}

func translation(x float64) geom.Mat4 {
	return geom.Mat4{{1, 0, 0, x}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}
}

func readTUMLines(t *testing.T, path string) [][8]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][8]float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "#") {
			continue
		}
		var v [8]float64
		for i, s := range strings.Fields(sc.Text()) {
			if v[i], err = strconv.ParseFloat(s, 64); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, v)
	}
	return out
}

func TestMapAccumulatesAndSaves(t *testing.T) {
	m, err := NewMap(MapConfig{VoxelSize: 0.5, Filter: geom.PointFilter{ConfThreshold: 2, Stride: 1}, MaxPoses: 2})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1700000000, 500000000)
	for k := range 3 {
		if err := m.AddPose(uint64(k), t0.Add(time.Duration(k)*time.Second), translation(float64(k))); err != nil {
			t.Fatal(err)
		}
		pts, err := m.AddPoints(frameAt(float64(10 * k)))
		if err != nil {
			t.Fatal(err)
		}
		// Pixels (0,0), (1,0), (0,1), (1,1): x = u + 10k, y = v, z = 1.
		if len(pts) != 4 || pts[1] != (geom.Point{X: float32(1 + 10*k), Y: 0, Z: 1, R: 10}) {
			t.Fatalf("frame %d: points %+v", k, pts)
		}
	}
	if s := m.Stats(); s.Poses != 2 || s.PointsIn != 12 || s.Voxels != 12 {
		t.Fatalf("stats %+v, want 2 poses (MaxPoses), 12 points, 12 voxels", s)
	}
	if p := m.Path(); p[0].Seq != 1 || p[1].T != [3]float64{2, 0, 0} || p[1].Q != (geom.Quat{0, 0, 0, 1}) {
		t.Fatalf("path %+v", p)
	}
	// A pose that is no rigid transform is refused and leaves the path alone.
	if err := m.AddPose(9, t0, geom.Mat4{{0, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}); !errors.Is(err, geom.ErrDegenerate) {
		t.Fatalf("degenerate pose: %v", err)
	}
	if _, err := m.AddPoints(geom.DepthFrame{Width: 2, Height: 2, Depth: make([]float32, 3), Intrinsics: geom.Intrinsics{1, 1, 0, 0}}); err == nil {
		t.Fatal("a short depth map was accepted")
	}

	dir := t.TempDir()
	saved, err := m.Save(dir, "lingbotmap test")
	if err != nil {
		t.Fatal(err)
	}
	if saved.Points != 12 || saved.Poses != 2 || saved.MapPath != filepath.Join(dir, MapFile) {
		t.Fatalf("saved %+v", saved)
	}
	f, err := os.Open(saved.MapPath)
	if err != nil {
		t.Fatal(err)
	}
	pts, comments, err := ReadPLY(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != 12 || pts[11] != m.Points()[11] {
		t.Fatalf("PLY points %+v", pts)
	}
	if c := strings.Join(comments, "|"); c != "lingbotmap test|conf_threshold 2 (pixels with confidence > threshold kept)|voxel_size 0.5 (one averaged point per voxel)|pixel_stride 1" {
		t.Errorf("PLY comments %q", c)
	}
	lines := readTUMLines(t, saved.TrajectoryPath)
	if len(lines) != 2 || lines[0] != [8]float64{1700000001.5, 1, 0, 0, 0, 0, 0, 1} || lines[1][0] != 1700000002.5 {
		t.Fatalf("TUM lines %v", lines)
	}
	for _, p := range []string{saved.MapPath, saved.TrajectoryPath} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o644 {
			t.Errorf("%s: %v %v", p, st.Mode(), err)
		}
	}

	m.Reset()
	if s := m.Stats(); s != (Stats{}) || len(m.Points()) != 0 {
		t.Fatalf("after reset %+v", s)
	}
}

func TestMapConfigChecked(t *testing.T) {
	for _, c := range []struct {
		cfg  MapConfig
		want string
	}{
		{MapConfig{VoxelSize: 0, Filter: geom.PointFilter{Stride: 1}}, "voxel size"},
		{MapConfig{VoxelSize: math.Inf(1), Filter: geom.PointFilter{Stride: 1}}, "voxel size"},
		{MapConfig{VoxelSize: 1, Filter: geom.PointFilter{Stride: 0}}, "stride"},
		{MapConfig{VoxelSize: 1, Filter: geom.PointFilter{Stride: 1, ConfThreshold: math.NaN()}}, "threshold"},
		{MapConfig{VoxelSize: 1, Filter: geom.PointFilter{Stride: 1}, MaxPoses: -1}, "max poses"},
	} {
		if _, err := NewMap(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

// TestMapStateRoundTrip: a map restored from its saved state holds the same
// trajectory and points, and goes on exactly as the original when more
// frames come; a state from another voxel size or a cut one is refused.
func TestMapStateRoundTrip(t *testing.T) {
	cfg := MapConfig{VoxelSize: 0.05, Filter: geom.PointFilter{Stride: 1}}
	a, _ := NewMap(cfg)
	frame := func(i int) geom.DepthFrame {
		w, h := 6, 4
		d := make([]float32, w*h)
		for k := range d {
			d[k] = 1 + 0.1*float32(k%5) + 0.03*float32(i)
		}
		pose := geom.Mat4{{1, 0, 0, 0.1 * float64(i)}, {0, 1, 0, 0}, {0, 0, 1, 0.02 * float64(i)}, {0, 0, 0, 1}}
		return geom.DepthFrame{Width: w, Height: h, Depth: d, Intrinsics: [4]float64{5, 5, 3, 2}, CamToWorld: pose}
	}
	add := func(m *Map, i int) {
		f := frame(i)
		if err := m.AddPose(uint64(i), time.Unix(100+int64(i), 5), f.CamToWorld); err != nil {
			t.Fatal(err)
		}
		if _, err := m.AddPoints(f); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		add(a, i)
	}
	var buf bytes.Buffer
	if err := a.SaveState(binstate.NewWriter(&buf)); err != nil {
		t.Fatal(err)
	}
	b, _ := NewMap(cfg)
	if err := b.LoadState(binstate.NewReader(bytes.NewReader(buf.Bytes()))); err != nil {
		t.Fatal(err)
	}
	for i := 3; i < 5; i++ {
		add(a, i)
		add(b, i)
	}
	if a.Stats() != b.Stats() || a.Stats().Voxels == 0 {
		t.Fatalf("restored map %+v, original %+v", b.Stats(), a.Stats())
	}
	if !reflect.DeepEqual(a.Points(), b.Points()) || !reflect.DeepEqual(a.Trajectory(), b.Trajectory()) {
		t.Fatal("restored map's points or trajectory differ from the original's")
	}
	other, _ := NewMap(MapConfig{VoxelSize: 0.1, Filter: cfg.Filter})
	if err := other.LoadState(binstate.NewReader(bytes.NewReader(buf.Bytes()))); err == nil || !strings.Contains(err.Error(), "voxel size") {
		t.Fatalf("another voxel size: %v", err)
	}
	if err := b.LoadState(binstate.NewReader(bytes.NewReader(buf.Bytes()[:buf.Len()-9]))); err == nil || b.Stats().Poses != 0 {
		t.Fatalf("a cut state: %v, %+v", err, b.Stats())
	}
}

// TestFramePointsTakesKeptPoints: points made ahead for the map's own
// filter are taken as they are (only coloured), points made for another
// filter are ignored and the frame unprojected; PointFrames counts both.
func TestFramePointsTakesKeptPoints(t *testing.T) {
	filt := geom.PointFilter{ConfThreshold: 2, Stride: 1}
	m, err := NewMap(MapConfig{VoxelSize: 0.1, Filter: filt})
	if err != nil {
		t.Fatal(err)
	}
	f := frameAt(0)
	host, err := geom.ConfidentPoints(nil, f, filt)
	if err != nil || len(host) != 4 {
		t.Fatalf("%d host points, %v", len(host), err)
	}
	// made ahead, moved by 100 so that their use shows
	k, err := geom.Keep(f, filt)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(k.XYZ); i += 3 {
		k.XYZ[i] += 100
	}
	f.Kept = k
	got, err := m.FramePoints(f)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range got {
		want := host[i]
		want.X += 100
		if p != want {
			t.Fatalf("point %d: %+v, want the kept point %+v", i, p, want)
		}
	}
	if len(got) != len(host) {
		t.Fatalf("%d points, want %d", len(got), len(host))
	}
	f.Kept = &geom.KeptPoints{Filter: geom.PointFilter{ConfThreshold: 2, Stride: 2}, XYZ: k.XYZ, Pixel: k.Pixel}
	if got, err := m.FramePoints(f); err != nil || !reflect.DeepEqual(got, host) {
		t.Fatalf("points for another filter: %+v, %v; want the host's %+v", got, err, host)
	}
	if kept, hosted := m.PointFrames(); kept != 1 || hosted != 1 {
		t.Fatalf("PointFrames %d kept, %d host; want 1, 1", kept, hosted)
	}
	f.Kept = k
	f.Intrinsics[0] = 0
	if _, err := m.FramePoints(f); err == nil {
		t.Fatal("kept points of a frame with unusable intrinsics accepted")
	}
}

// A voxel edge so small that voxel indices would overflow is refused with
// the reason, instead of silently giving an empty map; at the smallest edge
// taken, points within its range are all kept and those beyond are counted.
func TestMapTinyVoxel(t *testing.T) {
	for _, size := range []float64{1e-12, 1e-9, MinVoxelSize / 2} {
		_, err := NewMap(MapConfig{VoxelSize: size, Filter: geom.PointFilter{Stride: 1}})
		if err == nil || !strings.Contains(err.Error(), "voxel size must be a finite number ≥ 1e-06") || !strings.Contains(err.Error(), "32-bit") {
			t.Errorf("voxel %g: %v", size, err)
		}
	}
	m, err := NewMap(MapConfig{VoxelSize: MinVoxelSize, Filter: geom.PointFilter{Stride: 1}})
	if err != nil {
		t.Fatal(err)
	}
	m.AddFramePoints([]geom.Point{{X: 1}, {X: -2000, Y: 3}, {Z: 2000}, {X: 1e-6, Y: 1e-6}, {X: 3000}, {Y: -1e4}})
	if s := m.Stats(); s.Voxels != 4 || s.Outside != 2 || s.PointsIn != 6 {
		t.Errorf("stats %+v, want 4 voxels and 2 points outside of 6", s)
	}
	m.Reset()
	if s := m.Stats(); s.Outside != 0 {
		t.Errorf("after reset: %+v", s)
	}
}
