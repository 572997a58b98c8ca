package output

import (
	"fmt"
	"image"
	"image/png"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/engine/render"
	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
)

// PreviewFile is the top view of the trajectory over the map.
const PreviewFile = "preview.png"

// PreviousRunError is an output folder that holds a previous run's
// outputs.
type PreviousRunError struct {
	Dir  string
	Used []string // the previous run's names found there
}

func (e *PreviousRunError) Error() string {
	return fmt.Sprintf("output folder %s holds a previous run (%s): choose another --out, or add --force to remove these first", e.Dir, strings.Join(e.Used, ", "))
}

// Names are what a run writes into its folder; a folder holding any of
// them (or a temporary file of one) holds a previous run.
func Names() []string {
	return []string{mapio.TrajectoryFile, mapio.MapFile, RecordFile, PreviewFile, "depth", "depth_color", "conf", SessionDir}
}

// Prepare makes the output folder, refuses one that holds a previous run's
// outputs unless force (then removes them, so old and new never mix), and
// checks that it can be written.
func Prepare(dir string, force bool, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output folder: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("output folder: %w", err)
	}
	var used []string
	for _, e := range ents {
		for _, name := range Names() {
			// atomicfile's temporary files are ".NAME.*"
			if e.Name() == name || strings.HasPrefix(e.Name(), "."+name+".") {
				used = append(used, e.Name())
			}
		}
	}
	if len(used) > 0 && !force {
		return &PreviousRunError{Dir: dir, Used: used}
	}
	for _, name := range used {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("output folder: removing the previous run: %w", err)
		}
	}
	if len(used) > 0 {
		log.Info("removed the previous run's outputs (--force)", "out", dir, "removed", strings.Join(used, ","))
	}
	return mapio.ProbeDir(dir)
}

// WritePNG encodes img to path, whole or not at all.
func WritePNG(path string, img image.Image) error {
	if err := atomicfile.WriteFile(path, func(w io.Writer) error { return png.Encode(w, img) }); err != nil {
		return fmt.Errorf("write PNG: %w", err)
	}
	return nil
}

// writeGray16File writes one 16-bit PNG whole, without an fsync (a
// checkpoint's syncfs covers it), and returns how many values were clipped.
func writeGray16File(path string, vals []float32, width, height int, scale float64) (int, error) {
	var c int
	err := atomicfile.WriteFileNoSync(path, func(f io.Writer) error {
		var err error
		c, err = render.WriteGray16(f, vals, width, height, scale)
		return err
	})
	return c, err
}

// syncFile makes a file's written data durable.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}
