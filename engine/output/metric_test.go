package output

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/binstate"
)

// depthMM reads a depth PNG's values.
func depthMM(t *testing.T, path string) []float32 {
	t.Helper()
	d, _, _, _, err := readDepthPNG(path, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The metric scale becomes known after frame 1: frames from then on are
// written in metres, the session saved then says which (depth.metric_at),
// a resumed Folder takes that over, and its end rewrites frames 0 and 1 in
// metres, depth previews and ranges included, with checksums the resume
// check accepts.
func TestFolderDepthMetricResumed(t *testing.T) {
	const s = 0.37
	dir := t.TempDir()
	w, err := New(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddResults([]engine.Result{result(0), result(1)}); err != nil {
		t.Fatal(err)
	}
	if err := w.Frame().SetScale(s); err != nil {
		t.Fatal(err)
	}
	if err := w.AddResults([]engine.Result{result(2)}); err != nil {
		t.Fatal(err)
	}
	st := w.State()
	if st.Depth.Metric || !reflect.DeepEqual(st.Depth.MetricAt, []MetricFrames{{2, 2, s}}) || !strings.Contains(st.Depth.Unit, "metric_at") {
		t.Fatalf("depth part way: %+v", st.Depth)
	}
	type header struct {
		State State `json:"state"`
	}
	path := filepath.Join(dir, SessionDir, "test.state")
	sess := Session{Magic: [8]byte{'T', 'E', 'S', 'T', 0, 0, 0, 1}, Header: &header{State: st}, MaxHeader: 1 << 12}
	if err := sess.Write(path, w.SaveState, snapshotter{}); err != nil {
		t.Fatal(err)
	}
	w.Close()

	w2, err := Plan(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
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
	if err := w2.CheckFiles(); err != nil {
		t.Fatal(err)
	}
	if err := w2.Create(); err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if got := w2.State().Depth; !reflect.DeepEqual(got, st.Depth) {
		t.Fatalf("resumed depth %+v, saved %+v", got, st.Depth)
	}
	if err := w2.AddResults([]engine.Result{result(3)}); err != nil {
		t.Fatal(err)
	}
	if err := w2.Finish(context.Background(), &Record{}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := w2.CheckFiles(); err != nil {
		t.Fatalf("the checksums after the rewrite: %v", err)
	}
	if got := w2.State().Depth; !got.Metric || !reflect.DeepEqual(got.MetricAt, []MetricFrames{{0, 3, s}}) || !strings.HasPrefix(got.Unit, "1/1000 m") {
		t.Errorf("depth at the end: %+v", got)
	}
	rec := readRecord(t, dir)
	if !rec.Depth.Metric || !strings.HasPrefix(rec.Depth.Unit, "1/1000 m") {
		t.Errorf("run.json's depth: %+v", rec.Depth)
	}
	for i := range 4 {
		r := result(i)
		got := depthMM(t, filepath.Join(dir, "depth", fmt.Sprintf("%06d.png", i)))
		for p, d := range r.Depth {
			if want := float64(d) * s * 1000; math.Abs(float64(got[p])-want) > 0.5+0.5*s+1e-6 {
				t.Fatalf("frame %d pixel %d: %g mm, want %g", i, p, got[p], want)
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "depth_color", "ranges.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(rows) != 5 || !strings.Contains(rows[0], "(metres;") {
		t.Fatalf("ranges.tsv:\n%s", b)
	}
	for _, row := range rows[1:] {
		if !strings.HasPrefix(strings.Fields(row)[1], "0.74") {
			t.Errorf("ranges.tsv row %q: near is not 2 model units × %g m", row, s)
		}
	}
}

// Without a scale, depth/ stays in model units and says so.
func TestFolderDepthModelUnits(t *testing.T) {
	dir := t.TempDir()
	w, err := New(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.AddResults([]engine.Result{result(0), result(1)}); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(context.Background(), &Record{}, time.Now()); err != nil {
		t.Fatal(err)
	}
	rec := readRecord(t, dir)
	if rec.Depth.Metric || rec.Depth.MetricAt != nil || !strings.Contains(rec.Depth.Unit, "model depth unit") {
		t.Errorf("run.json's depth: %+v", rec.Depth)
	}
	if got := depthMM(t, filepath.Join(dir, "depth", "000001.png")); got[0] != 2000 {
		t.Errorf("depth %g, want 2000 (2 model units)", got[0])
	}
}

func readRecord(t *testing.T, dir string) Record {
	t.Helper()
	var got Record
	b, err := os.ReadFile(filepath.Join(dir, RecordFile))
	if err == nil {
		err = json.Unmarshal(b, &got)
	}
	if err != nil {
		t.Fatal(err)
	}
	return got
}
