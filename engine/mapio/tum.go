package mapio

import (
	"bufio"
	"fmt"
	"io"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// StampedPose is one line of a TUM trajectory: time in seconds, position, and
// the unit quaternion (x, y, z, w) of the camera→world rotation.
type StampedPose struct {
	Time float64
	T    [3]float64
	Q    geom.Quat
}

// Seconds is a stamp as TUM seconds, the one conversion every trajectory
// writer uses. A present-day stamp keeps about a quarter of a microsecond in
// a float64, which TUM's nine decimals print.
func Seconds(t time.Time) float64 {
	return float64(t.Unix()) + float64(t.Nanosecond())/1e9
}

// WriteTUM writes "timestamp tx ty tz qx qy qz qw" lines.
func WriteTUM(w io.Writer, poses []StampedPose) error {
	bw := bufio.NewWriter(w)
	bw.WriteString(tumHeader)
	var line []byte
	for _, p := range poses {
		line = AppendTUMLine(line[:0], p)
		bw.Write(line)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("tum: %w", err)
	}
	return nil
}
