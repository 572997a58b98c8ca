// Package mapio is the one map accumulator of the project and its files: Map
// gathers a session's trajectory and a voxel map of its frames' confident
// points (for the node, `run` and every transport), and writes them as a
// binary PLY point cloud (xyz float32 + rgb uint8) and a TUM trajectory,
// atomically.
package mapio

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// Point is a coloured 3D point (geom's: one point type from unprojection to file).
type Point = geom.Point

// WritePLY writes points as binary little-endian PLY; comments go into the header
// (one line each, e.g. the filter settings used).
func WritePLY(w io.Writer, pts []Point, comments ...string) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "ply\nformat binary_little_endian 1.0\n")
	for _, c := range comments {
		fmt.Fprintf(bw, "comment %s\n", strings.ReplaceAll(c, "\n", " "))
	}
	fmt.Fprintf(bw, "element vertex %d\nproperty float x\nproperty float y\nproperty float z\n", len(pts))
	fmt.Fprintf(bw, "property uchar red\nproperty uchar green\nproperty uchar blue\nend_header\n")
	var rec [15]byte
	for _, p := range pts {
		binary.LittleEndian.PutUint32(rec[0:], math.Float32bits(p.X))
		binary.LittleEndian.PutUint32(rec[4:], math.Float32bits(p.Y))
		binary.LittleEndian.PutUint32(rec[8:], math.Float32bits(p.Z))
		rec[12], rec[13], rec[14] = p.R, p.G, p.B
		if _, err := bw.Write(rec[:]); err != nil {
			return fmt.Errorf("ply: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("ply: %w", err)
	}
	return nil
}

// ReadPLY reads a file written by WritePLY (binary little endian, x y z float,
// red green blue uchar) and returns its points and header comments.
func ReadPLY(r io.Reader) ([]Point, []string, error) {
	br := bufio.NewReader(r)
	var comments []string
	n := -1
	var props []string
	first := true
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, nil, fmt.Errorf("ply: truncated header: %w", err)
		}
		line = strings.TrimRight(line, "\r\n")
		if first {
			if line != "ply" {
				return nil, nil, errors.New("ply: not a PLY file")
			}
			first = false
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == "format":
			if len(f) < 2 || f[1] != "binary_little_endian" {
				return nil, nil, fmt.Errorf("ply: unsupported format %q", line)
			}
		case f[0] == "comment":
			comments = append(comments, strings.TrimPrefix(line, "comment "))
		case f[0] == "element" && len(f) == 3 && f[1] == "vertex":
			v, err := strconv.Atoi(f[2])
			if err != nil || v < 0 {
				return nil, nil, fmt.Errorf("ply: bad vertex count %q", f[2])
			}
			n = v
		case f[0] == "property" && len(f) == 3:
			props = append(props, f[1]+" "+f[2])
		case f[0] == "end_header":
			want := []string{"float x", "float y", "float z", "uchar red", "uchar green", "uchar blue"}
			if n < 0 || strings.Join(props, ",") != strings.Join(want, ",") {
				return nil, nil, fmt.Errorf("ply: unsupported layout %v", props)
			}
			pts := make([]Point, 0, min(n, 1<<20))
			var rec [15]byte
			for i := 0; i < n; i++ {
				if _, err := io.ReadFull(br, rec[:]); err != nil {
					return nil, nil, fmt.Errorf("ply: vertex %d of %d: %w", i, n, err)
				}
				pts = append(pts, Point{
					X: math.Float32frombits(binary.LittleEndian.Uint32(rec[0:])),
					Y: math.Float32frombits(binary.LittleEndian.Uint32(rec[4:])),
					Z: math.Float32frombits(binary.LittleEndian.Uint32(rec[8:])),
					R: rec[12], G: rec[13], B: rec[14],
				})
			}
			return pts, comments, nil
		}
	}
}
