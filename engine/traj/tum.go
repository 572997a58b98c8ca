package traj

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
)

// Pose is one stamped camera→world pose.
type Pose struct {
	Time float64       // seconds
	T    [3]float64    // position of the camera in the world
	R    [3][3]float64 // camera→world rotation
}

// Trajectory is a list of poses ordered by time.
type Trajectory []Pose

// Positions returns the positions of the poses.
func (tr Trajectory) Positions() [][3]float64 {
	out := make([][3]float64, len(tr))
	for i, p := range tr {
		out[i] = p.T
	}
	return out
}

// maxLineLen bounds one line of a TUM file; real lines are under 200 bytes.
const maxLineLen = 64 << 10

// ReadTUMFile reads a TUM trajectory file.
func ReadTUMFile(path string) (Trajectory, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open trajectory: %w", err)
	}
	defer f.Close()
	tr, err := ReadTUM(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tr, nil
}

// ReadTUM reads "timestamp tx ty tz qx qy qz qw" lines. It rejects lines with
// the wrong number of values, values that are not finite numbers, zero
// quaternions and repeated timestamps, naming the line. Poses are returned
// sorted by time.
//
// A last line without its newline that does not parse is ignored: it is a
// row cut short by a crash of a writer that appends as it goes (`run`),
// and the rows before it are whole.
func ReadTUM(r io.Reader) (Trajectory, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLineLen)
	unterminated := false // the line just scanned is a last line without newline
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		adv, tok, err := bufio.ScanLines(data, atEOF)
		unterminated = atEOF && tok != nil && adv == len(data) && len(data) > 0 && data[len(data)-1] != '\n'
		return adv, tok, err
	})
	var tr Trajectory
	lines := map[float64]int{} // timestamp → line, to name both lines of a repeat
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p, err := parseTUMLine(line, n, lines)
		if err != nil {
			if unterminated {
				break
			}
			return nil, err
		}
		lines[p.Time] = n
		tr = append(tr, p)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("line %d: longer than %d bytes: not a TUM trajectory", n+1, maxLineLen)
		}
		return nil, fmt.Errorf("read trajectory: %w", err)
	}
	if len(tr) == 0 {
		return nil, errors.New("no poses: expected lines of 'timestamp tx ty tz qx qy qz qw'")
	}
	slices.SortStableFunc(tr, func(a, b Pose) int {
		switch {
		case a.Time < b.Time:
			return -1
		case a.Time > b.Time:
			return 1
		}
		return 0
	})
	return tr, nil
}

// parseTUMLine reads line n; lines maps the timestamps seen to their lines.
func parseTUMLine(line string, n int, lines map[float64]int) (Pose, error) {
	f := strings.FieldsFunc(line, func(c rune) bool {
		return c == ' ' || c == '\t' || c == ',' || c == '\r'
	})
	if len(f) != 8 {
		return Pose{}, fmt.Errorf("line %d: expected 8 values (timestamp tx ty tz qx qy qz qw), found %d", n, len(f))
	}
	var v [8]float64
	for i, s := range f {
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return Pose{}, fmt.Errorf("line %d: value %d (%q) is not a number", n, i+1, clip(s))
		}
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return Pose{}, fmt.Errorf("line %d: value %d (%q) is not a finite number", n, i+1, clip(s))
		}
		v[i] = x
	}
	if prev, ok := lines[v[0]]; ok {
		return Pose{}, fmt.Errorf("line %d: timestamp %s repeats line %d", n, f[0], prev)
	}
	rot, err := geom.QuatToMat(geom.Quat{v[4], v[5], v[6], v[7]})
	if err != nil {
		return Pose{}, fmt.Errorf("line %d: %w", n, err)
	}
	return Pose{Time: v[0], T: [3]float64{v[1], v[2], v[3]}, R: rot}, nil
}

// clip shortens a field quoted in an error message.
func clip(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// WriteTUM writes a trajectory in TUM format (through mapio's writer, so the
// run command and the evaluation agree on the format). A pose whose rotation
// is degenerate is an error naming it.
func WriteTUM(w io.Writer, tr Trajectory) error {
	out := make([]mapio.StampedPose, len(tr))
	for i, p := range tr {
		q, err := geom.MatToQuat(p.R)
		if err != nil {
			return fmt.Errorf("tum: pose %d (t=%.9f): %w", i, p.Time, err)
		}
		out[i] = mapio.StampedPose{Time: p.Time, T: p.T, Q: q}
	}
	return mapio.WriteTUM(w, out)
}
