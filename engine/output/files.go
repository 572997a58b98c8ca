package output

import (
	"errors"
	"fmt"
	"hash/crc32"
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

// GridBase names the occupancy grid's nav2 map_server files (map.pgm,
// map.yaml); GridPreviewFile is the grid drawn beside the top view.
const (
	GridBase        = "map"
	GridPreviewFile = "grid.png"
)

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
	return []string{mapio.TrajectoryFile, mapio.MapFile, RecordFile, PreviewFile, GridBase + ".pgm", GridBase + ".yaml", GridPreviewFile, "depth", "depth_color", "conf", SessionDir}
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

// FileKind is the kind of a per-frame image in the output folder.
type FileKind int

const (
	DepthImage      FileKind = iota // depth/NNNNNN.png
	DepthColorImage                 // depth_color/NNNNNN.png
	ConfImage                       // conf/NNNNNN.png
)

// FileSum is one per-frame image as written: its size and CRC-32C, which a
// resumed session checks against what the folder holds.
type FileSum struct {
	Kind FileKind
	Seq  uint64
	Size int64
	CRC  uint32
	// Metric is the metric scale (metres per model unit) a depth or
	// depth preview image was written at; 0: model units
	Metric float64
}

// Name is the image's path in the output folder.
func (f FileSum) Name() string {
	dir := [...]string{"depth", "depth_color", "conf"}[f.Kind]
	return filepath.Join(dir, fmt.Sprintf("%06d.png", f.Seq))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sumWriter counts and checksums what passes through it.
type sumWriter struct {
	w   io.Writer
	n   int64
	crc uint32
}

func (s *sumWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	s.n += int64(n)
	s.crc = crc32.Update(s.crc, castagnoli, p[:n])
	return n, err
}

// writeSummed writes sum's image whole, without an fsync (a checkpoint's
// syncfs covers it), and returns sum with its size and checksum.
func writeSummed(dir string, sum FileSum, write func(io.Writer) error) (FileSum, error) {
	err := atomicfile.WriteFileNoSync(filepath.Join(dir, sum.Name()), func(f io.Writer) error {
		sw := &sumWriter{w: f}
		err := write(sw)
		sum.Size, sum.CRC = sw.n, sw.crc
		return err
	})
	return sum, err
}

// writeGray16File writes one 16-bit PNG (writeSummed) and returns how many
// values were clipped.
func writeGray16File(dir string, sum FileSum, vals []float32, width, height int, scale float64) (int, FileSum, error) {
	var c int
	sum, err := writeSummed(dir, sum, func(f io.Writer) error {
		var err error
		c, err = render.WriteGray16(f, vals, width, height, scale)
		return err
	})
	return c, sum, err
}

// MissingOutputsError is a resumed session whose output folder does not
// hold the images the session wrote, as it wrote them.
type MissingOutputsError struct {
	Dir     string
	Missing []string // absent
	Changed []string // another size or content
}

func (e *MissingOutputsError) Error() string {
	var parts []string
	if n := len(e.Missing); n > 0 {
		parts = append(parts, fmt.Sprintf("%d missing (%s)", n, firstNames(e.Missing)))
	}
	if n := len(e.Changed); n > 0 {
		parts = append(parts, fmt.Sprintf("%d changed since they were written (%s)", n, firstNames(e.Changed)))
	}
	return fmt.Sprintf("output folder %s does not hold the outputs its session wrote: %s; resume in the folder the session was saved in, or start a new run", e.Dir, strings.Join(parts, ", "))
}

func firstNames(names []string) string {
	if len(names) > 3 {
		return strings.Join(names[:3], ", ") + ", …"
	}
	return strings.Join(names, ", ")
}

// CheckFiles checks that the folder holds every per-frame image the
// restored session wrote, byte for byte (size and CRC-32C): a session
// copied without them, or with some changed, must not go on as if they
// were there.
func (w *Folder) CheckFiles() error {
	e := &MissingOutputsError{Dir: w.opt.Dir}
	for _, f := range w.files {
		b, err := os.ReadFile(filepath.Join(w.opt.Dir, f.Name()))
		switch {
		case errors.Is(err, os.ErrNotExist):
			e.Missing = append(e.Missing, f.Name())
		case err != nil:
			return fmt.Errorf("output folder: %w", err)
		case int64(len(b)) != f.Size || crc32.Checksum(b, castagnoli) != f.CRC:
			e.Changed = append(e.Changed, f.Name())
		}
	}
	if len(e.Missing)+len(e.Changed) > 0 {
		return e
	}
	return nil
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
