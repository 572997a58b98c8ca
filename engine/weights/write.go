package weights

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
)

// WriteSafeTensors writes every tensor of store as a .safetensors image.
// Stores that implement RawReader keep their dtypes (bytes are copied
// as stored); others are written as F32.
func WriteSafeTensors(w io.Writer, store Store) error {
	return writeSafeTensors(w, store, store.Keys())
}

func writeSafeTensors(w io.Writer, store Store, keys []string) error {
	raw, _ := store.(RawReader)
	type rec struct {
		DType   string   `json:"dtype"`
		Shape   []int    `json:"shape"`
		Offsets [2]int64 `json:"data_offsets"`
	}
	header := make(map[string]any, len(keys)+1)
	header["__metadata__"] = map[string]string{"format": "pt"}
	sizes := make([]int64, len(keys))
	dtypes := make([]string, len(keys))
	var pos int64
	for i, k := range keys {
		if k == "__metadata__" {
			return errors.New("weights: a tensor named __metadata__ cannot be written to safetensors")
		}
		inf, ok := store.Info(k)
		if !ok {
			return fmt.Errorf("weights: the store lists %q but has no such tensor", k)
		}
		dt := "F32"
		if raw != nil {
			dt = inf.DType
		}
		es := dtypeSize(dt)
		if es == 0 {
			return fmt.Errorf("weights: tensor %q has unknown dtype %q", k, dt)
		}
		n := int64(1)
		for _, d := range inf.Shape {
			if d < 0 {
				return fmt.Errorf("weights: tensor %q has a negative dimension in shape %v", k, inf.Shape)
			}
			n *= int64(d)
		}
		sizes[i], dtypes[i] = n*int64(es), dt
		shape := slices.Clone(inf.Shape)
		if shape == nil {
			shape = []int{} // a scalar: "shape": [] rather than null
		}
		header[k] = rec{DType: dt, Shape: shape, Offsets: [2]int64{pos, pos + sizes[i]}}
		pos += sizes[i]
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("weights: encoding the safetensors header: %w", err)
	}
	// Pad with spaces so the data section starts 8-byte aligned.
	for (8+len(hj))%8 != 0 {
		hj = append(hj, ' ')
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var lenb [8]byte
	for i := range lenb {
		lenb[i] = byte(uint64(len(hj)) >> (8 * i))
	}
	if _, err := bw.Write(lenb[:]); err != nil {
		return fmt.Errorf("weights: writing safetensors: %w", err)
	}
	if _, err := bw.Write(hj); err != nil {
		return fmt.Errorf("weights: writing safetensors: %w", err)
	}
	var buf []byte
	for i, k := range keys {
		var b []byte
		if raw != nil {
			if b, err = raw.RawBytes(k); err != nil {
				return fmt.Errorf("weights: reading %q: %w", k, err)
			}
		} else {
			f, err := store.Float32(k)
			if err != nil {
				return fmt.Errorf("weights: reading %q: %w", k, err)
			}
			buf = slices.Grow(buf[:0], 4*len(f))[:4*len(f)]
			encodeFloat32(buf, f)
			b = buf
		}
		if int64(len(b)) != sizes[i] {
			return fmt.Errorf("weights: tensor %q gave %d bytes, its %s shape needs %d", k, len(b), dtypes[i], sizes[i])
		}
		if _, err := bw.Write(b); err != nil {
			return fmt.Errorf("weights: writing safetensors: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("weights: writing safetensors: %w", err)
	}
	return nil
}

// WriteSafeTensorsFile writes store to path (via a temporary file renamed
// into place, so a failed write leaves no half file behind).
func WriteSafeTensorsFile(path string, store Store) error {
	return atomicfile.WriteFile(path, func(w io.Writer) error { return WriteSafeTensors(w, store) })
}

// WriteSharded writes store into dir as Hugging Face style shards of at most
// maxShardBytes each (a tensor larger than that gets a shard of its own),
// named model-00001-of-0000N.safetensors, plus model.safetensors.index.json.
func WriteSharded(dir string, store Store, maxShardBytes int64) error {
	if maxShardBytes <= 0 {
		return fmt.Errorf("weights: shard size limit %d must be positive", maxShardBytes)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	var groups [][]string
	var cur []string
	var curBytes, total int64
	for _, k := range store.Keys() {
		inf, ok := store.Info(k)
		if !ok {
			return fmt.Errorf("weights: the store lists %q but has no such tensor", k)
		}
		es := int64(dtypeSize(inf.DType))
		if _, raw := store.(RawReader); !raw {
			es = 4
		}
		n := es
		for _, d := range inf.Shape {
			n *= int64(d)
		}
		if len(cur) > 0 && curBytes+n > maxShardBytes {
			groups = append(groups, cur)
			cur, curBytes = nil, 0
		}
		cur = append(cur, k)
		curBytes += n
		total += n
	}
	if len(cur) > 0 {
		groups = append(groups, cur)
	}
	weightMap := map[string]string{}
	for i, g := range groups {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(groups))
		err := atomicfile.WriteFile(filepath.Join(dir, name), func(w io.Writer) error { return writeSafeTensors(w, store, g) })
		if err != nil {
			return err
		}
		for _, k := range g {
			weightMap[k] = name
		}
	}
	idx, err := json.MarshalIndent(map[string]any{
		"metadata":   map[string]any{"total_size": total},
		"weight_map": weightMap,
	}, "", "  ")
	if err != nil {
		return fmt.Errorf("weights: encoding the shard index: %w", err)
	}
	return atomicfile.WriteFile(filepath.Join(dir, IndexFile), func(w io.Writer) error {
		_, err := w.Write(append(idx, '\n'))
		return err
	})
}
