package output

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"image/png"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/binstate"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/engine/occgrid"
)

// result is frame i of a camera moving along x over a wall 2 m away
// (confidence 3, depth in steps of 1 mm across the rows).
func result(i int) engine.Result {
	const w, h = 8, 6
	r := engine.Result{Seq: uint64(i), Stamp: time.Unix(1700000000+int64(i), 0), Kind: engine.Keyframe,
		Width: w, Height: h, Intrinsics: [4]float64{10, 10, 4, 3},
		Depth: make([]float32, w*h), Conf: make([]float32, w*h), RGB: make([]uint8, 3*w*h)}
	if i < 2 {
		r.Kind = engine.Scale
	}
	for p := range w * h {
		r.Depth[p] = 2 + float32(p/w)*0.001
		r.Conf[p] = 3
		r.RGB[3*p] = uint8(10 * i)
	}
	r.CamToWorld = [4][4]float64{{1, 0, 0, 0.1 * float64(i)}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}
	return r
}

func testOptions(dir string) Options {
	return Options{Dir: dir, Version: "test", Map: mapio.MapConfig{VoxelSize: 0.01, Filter: geom.PointFilter{ConfThreshold: 1.5, Stride: 1}},
		SaveDepth: true, SaveConf: true, DepthScale: 1000, ConfScale: 100, CheckpointEvery: 2}
}

func lines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	for s := bufio.NewScanner(f); s.Scan(); {
		if !strings.HasPrefix(s.Text(), "#") {
			out = append(out, s.Text())
		}
	}
	return out
}

// A Folder writes each result's images whole as it comes, a trajectory row
// per result, and at every checkpoint map.ply, ranges.tsv and run.json
// counting the results they cover; the final one adds the preview.
func TestFolderWritesEveryOutput(t *testing.T) {
	dir := t.TempDir()
	opt := testOptions(dir)
	var cps []Checkpoint
	opt.OnCheckpoint = func(_ context.Context, cp Checkpoint) error {
		if _, err := os.Stat(filepath.Join(dir, RecordFile)); err != nil {
			return errors.New("the hook ran before run.json was written")
		}
		cps = append(cps, cp)
		return nil
	}
	w, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rec := &Record{Status: StatusInProgress}
	start := time.Now()
	for i := range 5 {
		r := result(i)
		v, err := w.Post(&r)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Add(&r, v); err != nil {
			t.Fatal(err)
		}
		if err := w.MaybeCheckpoint(context.Background(), rec, start); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WaitWrite(); err != nil {
		t.Fatal(err)
	}
	if got := lines(t, filepath.Join(dir, mapio.TrajectoryFile)); len(got) != 5 || !strings.HasPrefix(got[4], "1700000004.") {
		t.Fatalf("trajectory rows %q", got)
	}
	rec.Status = StatusCompleted
	if err := w.Finish(context.Background(), rec, start); err != nil {
		t.Fatal(err)
	}
	if len(cps) != 3 || cps[0].Results != 2 || cps[1].Results != 4 || !cps[2].Final || cps[2].Results != 5 || cps[2].Status != StatusCompleted {
		t.Fatalf("checkpoints %+v: want at 2 and 4 results and the final one at 5", cps)
	}
	// depth PNG: 16-bit, depth · 1000; conf PNG: conf · 100
	for sub, want := range map[string]uint16{"depth": 2005, "conf": 300} {
		f, err := os.Open(filepath.Join(dir, sub, "000003.png"))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if v, _, _, _ := img.At(0, 5).RGBA(); uint16(v) != want {
			t.Errorf("%s/000003.png at row 5: %d, want %d", sub, v, want)
		}
	}
	if got := lines(t, filepath.Join(dir, "depth_color", "ranges.tsv")); len(got) != 5 || !strings.HasPrefix(got[0], "000000\t2") {
		t.Errorf("ranges.tsv rows %q", got)
	}
	f, err := os.Open(filepath.Join(dir, mapio.MapFile))
	if err != nil {
		t.Fatal(err)
	}
	pts, comments, err := mapio.ReadPLY(f)
	f.Close()
	if err != nil || len(pts) == 0 || !strings.Contains(strings.Join(comments, "\n"), "frames 5") {
		t.Fatalf("map.ply: %d points, comments %q, %v", len(pts), comments, err)
	}
	var got Record
	b, err := os.ReadFile(filepath.Join(dir, RecordFile))
	if err == nil {
		err = json.Unmarshal(b, &got)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != StatusCompleted || got.Frames.Results != 5 || got.Frames.Scale != 2 || got.Frames.Keyframes != 3 || got.Map.Points != len(pts) ||
		got.Outputs["depth"] != "depth/" || got.Outputs["conf"] != "conf/" || got.Depth.ColorRanges == "" {
		t.Errorf("run.json %+v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, PreviewFile)); err != nil {
		t.Error(err)
	}
	// the occupancy grid as map_server files and beside the top view
	g, err := occgrid.ReadMapServer(filepath.Join(dir, got.Outputs["grid"]))
	if err != nil || g.Width*g.Height == 0 || g.Free == 0 {
		t.Fatalf("map.yaml: %+v %v", g, err)
	}
	pf, err := os.Open(filepath.Join(dir, GridPreviewFile))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	pc, err := png.DecodeConfig(pf)
	if err != nil || pc.Width != 1600 || pc.Height != 800 {
		t.Errorf("grid.png: %+v %v", pc, err)
	}
}

// A result the engine got wrong fails its frame, naming it; nothing of it
// is written.
func TestFolderRefusesBadResults(t *testing.T) {
	w, err := New(testOptions(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r := result(0)
	r.Depth = r.Depth[:5]
	if _, err := w.Post(&r); err == nil || !strings.Contains(err.Error(), "frame 0") {
		t.Errorf("short depth: %v", err)
	}
	r = result(1)
	r.CamToWorld[0][3] = math.NaN() // no pose
	v, err := w.Post(&r)
	if err == nil {
		err = w.Add(&r, v)
	}
	if err == nil || !strings.Contains(err.Error(), "frame 1") || w.Frames().Results != 0 {
		t.Errorf("bad pose: %v, %d results", err, w.Frames().Results)
	}
}

// A session's body and counts restore a Folder to where it was, and the
// trajectory file holds each row once; the session frame refuses other
// files and damaged headers.
func TestFolderSessionRoundTrip(t *testing.T) {
	dir := t.TempDir()
	w, err := New(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	res := []engine.Result{result(0), result(1), result(2)}
	if err := w.AddResults(res); err != nil {
		t.Fatal(err)
	}
	type header struct {
		State State `json:"state"`
		Note  string
	}
	path := filepath.Join(dir, SessionDir, "test.state")
	sess := Session{Magic: [8]byte{'T', 'E', 'S', 'T', 0, 0, 0, 1}, Header: &header{State: w.State(), Note: "x"}, MaxHeader: 1 << 10}
	if err := sess.Write(path, w.SaveState, snapshotter{}); err != nil {
		t.Fatal(err)
	}
	w.Close()

	w2, err := New(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var h header
	sess.Header = &h
	if err := sess.ReadHeader(f); err != nil {
		t.Fatal(err)
	}
	if err := ReadBody(f, func(br *binstate.Reader) error { return w2.LoadState(br, h.State) }); err != nil {
		t.Fatal(err)
	}
	if err := w2.Restore(w2.Map(), w2.Frames()); err != nil {
		t.Fatal(err)
	}
	tail := make([]byte, 16)
	if n, _ := f.Read(tail); string(tail[:n]) != "engine state" {
		t.Errorf("the engine's state after the body reads %q", tail[:n])
	}
	if h.Note != "x" || w2.Frames() != w.Frames() || !reflect.DeepEqual(w2.State(), w.State()) || w2.Map().Stats() != w.Map().Stats() {
		t.Errorf("restored %+v (%+v), want %+v (%+v)", w2.State(), w2.Map().Stats(), w.State(), w.Map().Stats())
	}
	if err := w2.AddResults([]engine.Result{result(3)}); err != nil {
		t.Fatal(err)
	}
	if got := lines(t, filepath.Join(dir, mapio.TrajectoryFile)); len(got) != 4 {
		t.Errorf("trajectory after the resume: %q", got)
	}

	other := sess
	other.Magic[0] = 'X'
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	if err := other.ReadHeader(f); !errors.Is(err, ErrNotSession) {
		t.Errorf("another kind of session: %v", err)
	}
	small := sess
	small.MaxHeader = 4
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	if err := small.ReadHeader(f); !errors.Is(err, binstate.ErrCorrupt) {
		t.Errorf("a header over the bound: %v", err)
	}
}

// snapshotter stands for the engine's state.
type snapshotter struct{}

func (snapshotter) SaveState(w io.Writer) error {
	_, err := w.Write([]byte("engine state"))
	return err
}

// Prepare refuses a folder holding a previous run, temporaries included,
// and with force removes exactly those.
func TestPrepareRefusesPreviousRun(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{".map.ply.123", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.DiscardHandler)
	var prev *PreviousRunError
	if err := Prepare(dir, false, log); !errors.As(err, &prev) || len(prev.Used) != 1 || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("a previous run's temporary: %v", err)
	}
	if err := Prepare(dir, true, log); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".map.ply.123")); !errors.Is(err, os.ErrNotExist) {
		t.Error("--force left the previous run's file")
	}
	if _, err := os.Stat(filepath.Join(dir, "notes.txt")); err != nil {
		t.Error("--force removed a file that is not a run's")
	}
}

// TestFolderRecordsPointsOutside: the confident points the voxel map left
// out for lying beyond its index range are counted in run.json.
func TestFolderRecordsPointsOutside(t *testing.T) {
	dir := t.TempDir()
	opt := testOptions(dir)
	opt.Map.VoxelSize = mapio.MinVoxelSize
	w, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	near, far := result(0), result(1)
	far.CamToWorld[0][3] = 5000 // beyond ±2^31 voxels of 1e-6
	if err := w.AddResults([]engine.Result{near, far}); err != nil {
		t.Fatal(err)
	}
	rec := &Record{}
	if err := w.Finish(context.Background(), rec, time.Now()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, RecordFile))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Map struct {
			Outside *int64 `json:"points_outside"`
			In      int64  `json:"points_unprojected"`
		} `json:"map"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Map.Outside == nil || *got.Map.Outside != 48 || got.Map.In != 96 {
		t.Fatalf("run.json map %s: want 48 of 96 points outside", b)
	}
}
