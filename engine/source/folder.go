package source

import (
	"bytes"
	"context"
	"fmt"
	"image"
	_ "image/jpeg" // decoders for image.Decode
	_ "image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/preprocess"
)

// Folder reads the images of a directory: the files ending in .png, .jpg or
// .JPG (the reference's glob: .jpeg, .PNG and hidden files are not read), sorted by
// name, then FirstK, then Stride. When every selected name is a time (see
// nameStamp: "1305031102.175304.png" as in TUM RGB-D, nanosecond integers as
// in EuRoC) that is the stamp; otherwise image i of the listing is stamped i/FrameRate.
// JPEGs are turned upright by their EXIF orientation, as the reference does.
//
// An image that does not decode is skipped and counted (Skipped), as the
// node and the bag sources do, rather than ending the run; 16-bit images
// reduced to 8 bits are reported once per kind (Notices).
type Folder struct {
	dir    string
	files  []string // selected, in order
	index  []int    // position of each selected file in the sorted listing
	stamps []float64
	next   int
	opt    Options

	skipCount
	noticeSet // kinds of precision loss, keyed by image type
}

// OpenFolder lists dir. It fails when dir holds no image.
func OpenFolder(dir string, opt Options) (*Folder, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("image folder: %w", err)
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") { // glob skips hidden files
			continue
		}
		switch filepath.Ext(e.Name()) {
		case ".png", ".jpg", ".JPG":
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("image folder %s: no .png, .jpg or .JPG files", dir)
	}
	slices.Sort(names)
	f := &Folder{dir: dir, opt: opt}
	for i, n := range names {
		keep, done := opt.keep(i)
		if done {
			break
		}
		if keep {
			f.files = append(f.files, n)
			f.index = append(f.index, i)
		}
	}
	f.stamps = make([]float64, len(f.files))
	numeric := true
	for i, n := range f.files {
		v, ok := nameStamp(strings.TrimSuffix(n, filepath.Ext(n)))
		if !ok || (i > 0 && v <= f.stamps[i-1]) {
			numeric = false
			break
		}
		f.stamps[i] = v
	}
	if !numeric {
		for i := range f.files {
			f.stamps[i] = float64(f.index[i]) / opt.FrameRate
		}
	}
	return f, nil
}

// nameStamp reads a file name as a time in seconds: a decimal number with a
// fraction ("1305031102.175304", TUM RGB-D) or an integer of 16 digits or more,
// read as nanoseconds (EuRoC). Shorter integers are frame numbers, not times.
func nameStamp(stem string) (float64, bool) {
	if strings.Contains(stem, ".") {
		v, err := strconv.ParseFloat(stem, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return 0, false
		}
		return v, true
	}
	if len(stem) < 16 {
		return 0, false
	}
	ns, err := strconv.ParseUint(stem, 10, 64)
	if err != nil {
		return 0, false
	}
	return float64(ns) / 1e9, true
}

// Next decodes the next image that decodes.
func (f *Folder) Next(ctx context.Context) (engine.Frame, error) {
	for {
		if err := ctx.Err(); err != nil {
			return engine.Frame{}, err
		}
		if f.next >= len(f.files) {
			return engine.Frame{}, io.EOF
		}
		i := f.next
		f.next++
		path := filepath.Join(f.dir, f.files[i])
		data, err := os.ReadFile(path)
		if err != nil {
			return engine.Frame{}, fmt.Errorf("image folder: %w", err)
		}
		img, err := f.decode(data, f.files[i])
		if err != nil {
			f.skip(fmt.Errorf("image %s: %w", path, err))
			continue
		}
		return f.opt.frame(uint64(f.index[i]), stampTime(f.stamps[i]), img)
	}
}

// NextDeferred reads the next selected image's bytes, in order, and leaves
// the decoding (with the EXIF orientation, then --rotate-cw90) to the
// frame's Decode, which may run on any goroutine. An image that does not
// decode is the caller's to count: Skipped counts only what Next skipped.
func (f *Folder) NextDeferred(ctx context.Context) (DeferredFrame, error) {
	if err := ctx.Err(); err != nil {
		return DeferredFrame{}, err
	}
	if f.next >= len(f.files) {
		return DeferredFrame{}, io.EOF
	}
	i := f.next
	f.next++
	name := f.files[i]
	path := filepath.Join(f.dir, name)
	data, err := os.ReadFile(path)
	if err != nil {
		return DeferredFrame{}, fmt.Errorf("image folder: %w", err)
	}
	seq := uint64(f.index[i])
	decode := func() (image.Image, error) {
		img, err := f.decode(data, name)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", path, err)
		}
		return f.opt.orient(seq, img)
	}
	return DeferredFrame{Seq: seq, Stamp: stampTime(f.stamps[i]), Decode: decode}, nil
}

// decode decodes one image with the engine's decoder (PIL's conventions
// for JPEG colour, alpha and EXIF orientation), noting a precision loss.
func (f *Folder) decode(data []byte, name string) (image.Image, error) {
	img, err := preprocess.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	if loss, ok := preprocess.PrecisionLoss(img); ok {
		f.note(fmt.Sprintf("%T", img), fmt.Sprintf("%s (first in %s)", loss, name))
	}
	return img, nil
}

// Len is the number of selected images.
func (f *Folder) Len() int { return len(f.files) }

// Describe names the folder and the selection.
func (f *Folder) Describe() string {
	return fmt.Sprintf("image folder %s (%d images)", f.dir, len(f.files))
}

// Files are the selected file names, in order.
func (f *Folder) Files() []string { return slices.Clone(f.files) }

var _ Deferred = (*Folder)(nil)

// Close does nothing; files are opened one at a time.
func (f *Folder) Close() error { return nil }

// stampTime turns seconds into a time, to the nanosecond.
func stampTime(s float64) time.Time {
	sec := math.Floor(s)
	return time.Unix(int64(sec), int64(math.Round((s-sec)*1e9)))
}

// Name is the file name of the image numbered seq (its index in the sorted
// folder), for inputs matched to it by name (run --depth-dir).
func (f *Folder) Name(seq uint64) (string, bool) {
	for i, idx := range f.index {
		if uint64(idx) == seq {
			return f.files[i], true
		}
	}
	return "", false
}
