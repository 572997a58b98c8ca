package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/golden"
	"github.com/lingbotmap/lingbotmap/engine/mapframe"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/engine/output"
	"github.com/lingbotmap/lingbotmap/engine/render"
	"github.com/lingbotmap/lingbotmap/internal/shared"
)

// goldenResults are the reference's stream_kf1 outputs as engine results:
// poses and intrinsics from its pose encodings, its depth and confidence,
// and a made-up colour per pixel.
func goldenResults(t *testing.T) []engine.Result {
	t.Helper()
	dir, err := shared.Path("golden", "stream_kf1")
	if err != nil {
		t.Fatal(err)
	}
	st, err := golden.Open(dir, golden.OutputsFile)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	get := func(name string) []float32 {
		v, err := st.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	pe, depth, conf := get("pose_enc"), get("depth"), get("depth_conf")
	const w, h = 70, 42
	n := len(pe) / 9
	if n == 0 || len(depth) != n*w*h || len(conf) != n*w*h {
		t.Fatalf("golden shapes: %d poses, %d depths, %d confidences", n, len(depth), len(conf))
	}
	res := make([]engine.Result, n)
	for k := range n {
		var enc [9]float32
		copy(enc[:], pe[9*k:])
		rgb := make([]uint8, 3*w*h)
		for i := range rgb {
			rgb[i] = uint8(i*31 + k)
		}
		res[k] = engine.Result{
			Seq: uint64(k), Stamp: time.Unix(1700000000, 0).Add(time.Duration(k) * 33 * time.Millisecond),
			Kind: engine.Keyframe, PoseEnc: enc,
			CamToWorld: geom.PoseEncToCamToWorld(enc), Intrinsics: geom.IntrinsicsFromPoseEnc(enc, w, h),
			Width: w, Height: h,
			Depth: depth[k*w*h : (k+1)*w*h], Conf: conf[k*w*h : (k+1)*w*h], RGB: rgb,
		}
	}
	return res
}

// The node and `run` make the same map from the same results. Node style
// (the node keeps a mapio.Map): each keyframe's confident points (what
// ~cloud publishes) into a voxel grid (what ~map publishes and ~save_map
// writes). Run style: runWriter, read
// back from map.ply. Both must give the same points, bit for bit, and each
// frame's cloud must be what the shared accumulator (mapio.Map) returns.
func TestRunMapMatchesNodeMap(t *testing.T) {
	results := goldenResults(t)
	// A threshold that keeps about half the pixels, a stride and a voxel size
	// that merges points, so that the filter and the averaging both count.
	all := slices.Clone(results[0].Conf)
	slices.Sort(all)
	thr := float64(all[len(all)/2])
	const stride, voxel = 2, 0.2

	grid := mapio.NewVoxelGrid(voxel)
	acc, err := mapio.NewMap(mapio.MapConfig{VoxelSize: voxel, Filter: geom.PointFilter{ConfThreshold: thr, Stride: stride}})
	if err != nil {
		t.Fatal(err)
	}
	clouds := 0
	for _, r := range results {
		pts, err := geom.ConfidentPoints(nil, r.DepthFrame(), geom.PointFilter{ConfThreshold: thr, Stride: stride})
		if err != nil {
			t.Fatal(err)
		}
		grid.Add(pts)
		got, err := acc.AddPoints(r.DepthFrame())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, pts) {
			t.Fatalf("frame %d: mapio.Map gave %d cloud points, the node %d (or they differ)", r.Seq, len(got), len(pts))
		}
		clouds += len(pts)
	}
	nodeMap := grid.Points()

	o := defaultRunOptions()
	o.out = filepath.Join(t.TempDir(), "out")
	o.confThreshold, o.pixelStride, o.voxel = thr, stride, voxel
	o.saveDepth = false
	w, err := newRunWriter(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddResults(results); err != nil {
		t.Fatal(err)
	}
	rec := &output.Record{}
	if err := w.Finish(context.Background(), rec, time.Now()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(o.out, "map.ply"))
	if err != nil {
		t.Fatal(err)
	}
	runMap, _, err := mapio.ReadPLY(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d frames: %d cloud points, %d map points", len(results), clouds, len(nodeMap))
	if len(nodeMap) == 0 || len(nodeMap) >= clouds/2 || clouds >= len(results)*70*42/4 {
		t.Fatalf("the case tests too little: %d cloud points, %d map points", clouds, len(nodeMap))
	}
	// Both write the map in the z-up map frame (engine/mapframe) fixed at
	// the first result without a base frame; the accumulators keep the
	// engine's world.
	frame := mapframe.New()
	if _, err := frame.FixAt(mapframe.OpticalToBody(), results[0].CamToWorld); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(runMap, frame.Points(nil, nodeMap)) || !slices.Equal(acc.Points(), nodeMap) {
		t.Fatalf("run's map (%d points) and the shared map (%d) differ from the node's (%d)", len(runMap), len(acc.Points()), len(nodeMap))
	}
	if rec.Map.PointsIn != int64(clouds) || rec.Map.Points != len(nodeMap) {
		t.Errorf("run.json map %+v, want %d points in, %d points", rec.Map, clouds, len(nodeMap))
	}
}

// Beside each 16-bit depth PNG, run writes a colour preview with a legend
// and lists each frame's colour range in depth_color/ranges.tsv.
func TestRunDepthColorPreview(t *testing.T) {
	o := testRunOptions(t, &fakeStream{scale: 3})
	if err := runRun(context.Background(), o, true); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Join(o.out, "depth_color"))
	if err != nil || len(ents) != 11 {
		t.Fatalf("depth_color: %d files (%v), want 10 previews and ranges.tsv", len(ents), err)
	}
	img := decodePNG(t, filepath.Join(o.out, "depth_color", "000007.png"))
	if b := img.Bounds(); b.Dx() != fakeW || b.Dy() <= fakeH {
		t.Fatalf("preview %v, want %d wide with a legend below %d rows", b, fakeW, fakeH)
	}
	// The fake wall is flat at 2 m: one colour, the near end of the ramp.
	if r, g, b, _ := img.At(3, 3).RGBA(); [3]uint32{r >> 8, g >> 8, b >> 8} != [3]uint32{uint32(render.DepthColor(0).R), uint32(render.DepthColor(0).G), uint32(render.DepthColor(0).B)} {
		t.Errorf("pixel (3, 3) = %v, want %v", img.At(3, 3), render.DepthColor(0))
	}
	b, err := os.ReadFile(filepath.Join(o.out, "depth_color", "ranges.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 11 || !strings.HasPrefix(lines[0], "# frame") || lines[8] != "000007\t2\t2" {
		t.Errorf("ranges.tsv:\n%s", b)
	}
	rec := readRunJSON(t, o.out)
	if rec.Outputs["depth_color"] != "depth_color/" || rec.Depth.ColorRanges != "depth_color/ranges.tsv" {
		t.Errorf("run.json outputs %v, depth %+v", rec.Outputs, rec.Depth)
	}

	// Without --save-depth there are neither depth PNGs nor previews.
	o = testRunOptions(t, &fakeStream{scale: 3})
	o.saveDepth = false
	if err := runRun(context.Background(), o, true); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"depth", "depth_color"} {
		if _, err := os.Stat(filepath.Join(o.out, d)); !os.IsNotExist(err) {
			t.Errorf("%s written without --save-depth (%v)", d, err)
		}
	}
}
