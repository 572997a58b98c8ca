package mapio

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// TUMAppender writes a TUM trajectory as poses arrive, so that a crash
// loses at most the rows not yet written. Each Append is one write of whole
// lines; a write that fails part way (a full disk) is cut back to the last
// whole line, so the file never holds a torn row in its middle. A process
// killed inside a write can still leave a final line without its newline:
// readers ignore such a tail (traj.ReadTUM does). Sync makes the rows
// written so far durable. It is not safe for concurrent use.
type TUMAppender struct {
	f    *os.File
	good int64 // length of the file up to its last whole line
	buf  []byte
}

// CreateTUM creates (or empties) path and writes the TUM header line. The
// header reaches the disk before CreateTUM returns.
func CreateTUM(path string) (*TUMAppender, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("trajectory: %w", err)
	}
	a := &TUMAppender{f: f}
	a.buf = append(a.buf, tumHeader...)
	if err := a.flush(); err == nil {
		err = a.Sync()
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return a, nil
}

// Append writes the poses as whole lines in one write.
func (a *TUMAppender) Append(poses ...StampedPose) error {
	for _, p := range poses {
		a.buf = AppendTUMLine(a.buf, p)
	}
	return a.flush()
}

func (a *TUMAppender) flush() error {
	if len(a.buf) == 0 {
		return nil
	}
	n, err := a.f.Write(a.buf)
	if err != nil {
		// Cut a short write back to the last whole line; the rows of this
		// call are lost, the file stays readable.
		terr := a.f.Truncate(a.good)
		if _, serr := a.f.Seek(a.good, 0); terr == nil {
			terr = serr
		}
		size := len(a.buf)
		a.buf = a.buf[:0]
		return fmt.Errorf("trajectory: writing %d bytes (%d written, cut back to %d): %w", size, n, a.good, errors.Join(err, terr))
	}
	a.good += int64(n)
	a.buf = a.buf[:0]
	return nil
}

// Sync flushes the rows written so far to the disk.
func (a *TUMAppender) Sync() error {
	if err := a.f.Sync(); err != nil {
		return fmt.Errorf("trajectory: %w", err)
	}
	return nil
}

// Close syncs and closes the file.
func (a *TUMAppender) Close() error {
	return errors.Join(a.Sync(), a.f.Close())
}

// tumHeader is the comment line every TUM file this package writes begins with.
const tumHeader = "# timestamp tx ty tz qx qy qz qw\n"

// AppendTUMLine appends one "timestamp tx ty tz qx qy qz qw" line, the one
// format of every TUM writer of the project.
func AppendTUMLine(b []byte, p StampedPose) []byte {
	b = strconv.AppendFloat(b, p.Time, 'f', 9, 64)
	for _, v := range []float64{p.T[0], p.T[1], p.T[2], p.Q[0], p.Q[1], p.Q[2], p.Q[3]} {
		b = append(b, ' ')
		b = fmt.Appendf(b, "%.9g", v)
	}
	return append(b, '\n')
}
