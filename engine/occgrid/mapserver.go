package occgrid

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
)

// The files nav2's map_server loads (and map_saver writes): a PGM image and
// a YAML file that describes it. In trinary mode map_server reads a pixel p
// as occ = (255 − p) / 255: occupied when occ > occupied_thresh, free when
// occ < free_thresh, unknown otherwise.
const (
	PGMOccupied = 0
	PGMFree     = 254
	PGMUnknown  = 205
	// OccupiedThresh and FreeThresh are the thresholds written to the YAML.
	// The free threshold is map_saver's 0.196 rather than its documented
	// 0.25: with 0.25 the unknown shade 205 (occ 0.196) reads back as free.
	OccupiedThresh = 0.65
	FreeThresh     = 0.196
)

// MapServerYAML is map.yaml's content.
type MapServerYAML struct {
	Image          string     `yaml:"image"`
	Mode           string     `yaml:"mode"`
	Resolution     float64    `yaml:"resolution"`
	Origin         [3]float64 `yaml:"origin,flow"`
	Negate         int        `yaml:"negate"`
	OccupiedThresh float64    `yaml:"occupied_thresh"`
	FreeThresh     float64    `yaml:"free_thresh"`
}

// WriteMapServer writes the grid as base.pgm and base.yaml in dir, each
// crash-safe (a reader sees the old file or the whole new one). The PGM's
// first row is the grid's top (highest y), as map_server expects.
func (g *Grid) WriteMapServer(dir, base string) error {
	if g.Width < 1 || g.Height < 1 || len(g.Data) != g.Width*g.Height {
		return fmt.Errorf("occgrid: %d × %d grid with %d cells cannot be saved", g.Width, g.Height, len(g.Data))
	}
	img := base + ".pgm"
	err := atomicfile.WriteFile(filepath.Join(dir, img), func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		fmt.Fprintf(bw, "P5\n# lingbotmap occupancy grid, %g per cell\n%d %d\n255\n", g.Resolution, g.Width, g.Height)
		row := make([]byte, g.Width)
		for y := g.Height - 1; y >= 0; y-- {
			for x := range g.Width {
				switch v := g.Data[y*g.Width+x]; {
				case v == Unknown || v < 0:
					row[x] = PGMUnknown
				case v >= 65:
					row[x] = PGMOccupied
				default:
					row[x] = PGMFree
				}
			}
			if _, err := bw.Write(row); err != nil {
				return err
			}
		}
		return bw.Flush()
	})
	if err != nil {
		return fmt.Errorf("occgrid: writing %s: %w", img, err)
	}
	meta := MapServerYAML{Image: img, Mode: "trinary", Resolution: g.Resolution, Origin: [3]float64{g.OriginX, g.OriginY, 0},
		OccupiedThresh: OccupiedThresh, FreeThresh: FreeThresh}
	y := base + ".yaml"
	if err := atomicfile.WriteFile(filepath.Join(dir, y), func(w io.Writer) error {
		enc := yaml.NewEncoder(w)
		if err := enc.Encode(meta); err != nil {
			return err
		}
		return enc.Close()
	}); err != nil {
		return fmt.Errorf("occgrid: writing %s: %w", y, err)
	}
	return nil
}

// ReadMapServer loads a map_server YAML and its PGM image the way
// map_server does in trinary mode (negate 0 or 1, 8-bit binary PGM).
func ReadMapServer(yamlPath string) (*Grid, error) {
	b, err := os.ReadFile(yamlPath)
	if err != nil {
		return nil, fmt.Errorf("occgrid: %w", err)
	}
	var m MapServerYAML
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("occgrid: %s: %w", yamlPath, err)
	}
	if m.Mode != "" && m.Mode != "trinary" {
		return nil, fmt.Errorf("occgrid: %s: mode %q, only trinary is read", yamlPath, m.Mode)
	}
	if !(m.Resolution > 0) || m.Image == "" {
		return nil, fmt.Errorf("occgrid: %s: needs an image and a resolution > 0", yamlPath)
	}
	img := m.Image
	if !filepath.IsAbs(img) {
		img = filepath.Join(filepath.Dir(yamlPath), img)
	}
	pgm, err := os.ReadFile(img)
	if err != nil {
		return nil, fmt.Errorf("occgrid: %w", err)
	}
	w, h, pix, err := parsePGM(pgm)
	if err != nil {
		return nil, fmt.Errorf("occgrid: %s: %w", img, err)
	}
	g := &Grid{Width: w, Height: h, Resolution: m.Resolution, OriginX: m.Origin[0], OriginY: m.Origin[1], Data: make([]int8, w*h)}
	for r := range h {
		y := h - 1 - r
		for x := range w {
			shade := float64(pix[r*w+x]) / 255
			occ := 1 - shade
			if m.Negate != 0 {
				occ = shade
			}
			v := Unknown
			switch {
			case occ > m.OccupiedThresh:
				v = Occupied
				g.Occupied++
			case occ < m.FreeThresh:
				v = Free
				g.Free++
			}
			g.Data[y*w+x] = v
		}
	}
	return g, nil
}

// parsePGM reads a binary (P5) PGM with a maxval of 255.
func parsePGM(b []byte) (w, h int, pix []byte, err error) {
	if !bytes.HasPrefix(b, []byte("P5")) {
		return 0, 0, nil, errors.New("not a binary PGM (P5)")
	}
	i := 2
	var fields [3]int
	for k := range fields {
		for i < len(b) && (isSpace(b[i]) || b[i] == '#') {
			if b[i] == '#' {
				for i < len(b) && b[i] != '\n' {
					i++
				}
				continue
			}
			i++
		}
		j := i
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		v, err := strconv.Atoi(string(b[i:j]))
		if err != nil {
			return 0, 0, nil, fmt.Errorf("header field %d: %w", k+1, err)
		}
		fields[k], i = v, j
	}
	if i >= len(b) || !isSpace(b[i]) {
		return 0, 0, nil, errors.New("truncated header")
	}
	i++
	w, h = fields[0], fields[1]
	if fields[2] != 255 || w < 1 || h < 1 || w > math.MaxInt32/h {
		return 0, 0, nil, fmt.Errorf("size %d × %d, maxval %d: need ≥ 1 × 1 and 255", w, h, fields[2])
	}
	if len(b)-i != w*h {
		return 0, 0, nil, fmt.Errorf("%d pixel bytes for %d × %d", len(b)-i, w, h)
	}
	return w, h, b[i:], nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
