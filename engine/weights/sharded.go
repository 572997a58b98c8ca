package weights

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// IndexFile is the Hugging Face name of a sharded checkpoint's index.
const IndexFile = "model.safetensors.index.json"

// Sharded joins several stores (the shards of one checkpoint) into one.
type Sharded struct {
	shards []Store
	names  []string // shard file names, for messages
	owner  map[string]int
	keys   []string
}

// NewSharded joins stores whose key sets must not overlap; names label them in errors.
func NewSharded(names []string, shards []Store) (*Sharded, error) {
	if len(names) != len(shards) {
		return nil, errors.New("weights: NewSharded: one name per shard needed")
	}
	s := &Sharded{shards: shards, names: names, owner: map[string]int{}}
	for i, sh := range shards {
		for _, k := range sh.Keys() {
			if j, dup := s.owner[k]; dup {
				return nil, fmt.Errorf("weights: tensor %q is in both %s and %s", k, names[j], names[i])
			}
			s.owner[k] = i
			s.keys = append(s.keys, k)
		}
	}
	sort.Strings(s.keys)
	return s, nil
}

type shardIndex struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// OpenSharded opens a sharded safetensors checkpoint from its index file
// (model.safetensors.index.json) or from a directory: the index inside it if
// there is one, otherwise every *.safetensors file in it.
func OpenSharded(path string) (*Sharded, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	if st.IsDir() {
		idx := filepath.Join(path, IndexFile)
		if _, err := os.Stat(idx); err == nil {
			return openIndex(idx)
		}
		files, err := filepath.Glob(filepath.Join(path, "*.safetensors"))
		if err != nil {
			return nil, fmt.Errorf("weights: %s: %w", path, err)
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("weights: %s: no %s and no .safetensors files in the directory", path, IndexFile)
		}
		sort.Strings(files)
		return openShardFiles(files)
	}
	return openIndex(path)
}

func openShardFiles(files []string) (*Sharded, error) {
	var shards []Store
	fail := func(err error) (*Sharded, error) {
		for _, s := range shards {
			_ = s.Close()
		}
		return nil, err
	}
	for _, f := range files {
		s, err := OpenSafeTensors(f)
		if err != nil {
			return fail(err)
		}
		shards = append(shards, s)
	}
	sh, err := NewSharded(files, shards)
	if err != nil {
		return fail(err)
	}
	return sh, nil
}

func openIndex(path string) (*Sharded, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	var idx shardIndex
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("weights: %s: not a valid shard index: %w", path, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("weights: %s: the index has no weight_map entries", path)
	}
	dir := filepath.Dir(path)
	byFile := map[string][]string{}
	for key, file := range idx.WeightMap {
		if !filepath.IsLocal(file) {
			return nil, fmt.Errorf("weights: %s: tensor %q maps to %q, which is not a file name inside the checkpoint directory", path, key, file)
		}
		byFile[file] = append(byFile[file], key)
	}
	files := make([]string, 0, len(byFile))
	for f := range byFile {
		files = append(files, f)
	}
	sort.Strings(files)
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = filepath.Join(dir, f)
	}
	sh, err := openShardFiles(paths)
	if err != nil {
		return nil, fmt.Errorf("%w (listed in %s)", err, path)
	}
	// The index and the shards must agree exactly; a stale index is a broken checkpoint.
	var problems []string
	for i, f := range files {
		for _, key := range byFile[f] {
			if _, ok := sh.shards[i].Info(key); !ok {
				problems = append(problems, fmt.Sprintf("tensor %q is listed in %s but missing from it", key, f))
			}
		}
		for _, key := range sh.shards[i].Keys() {
			if idx.WeightMap[key] != f {
				problems = append(problems, fmt.Sprintf("tensor %q is in %s but the index does not list it there", key, f))
			}
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		_ = sh.Close()
		return nil, fmt.Errorf("weights: %s does not match its shards (%d problems):\n  %s", path, len(problems), strings.Join(problems, "\n  "))
	}
	return sh, nil
}

// Keys lists every tensor name, sorted.
func (s *Sharded) Keys() []string { return s.keys }

// Info describes a tensor.
func (s *Sharded) Info(name string) (Info, bool) {
	i, ok := s.owner[name]
	if !ok {
		return Info{}, false
	}
	return s.shards[i].Info(name)
}

// Float32 reads a tensor from its shard.
func (s *Sharded) Float32(name string) ([]float32, error) {
	i, ok := s.owner[name]
	if !ok {
		return nil, fmt.Errorf("no tensor %q", name)
	}
	return s.shards[i].Float32(name)
}

// RawBytes reads a tensor's stored bytes from its shard.
func (s *Sharded) RawBytes(name string) ([]byte, error) {
	i, ok := s.owner[name]
	if !ok {
		return nil, fmt.Errorf("no tensor %q", name)
	}
	r, ok := s.shards[i].(RawReader)
	if !ok {
		return nil, fmt.Errorf("shard %s cannot hand out raw bytes", s.names[i])
	}
	return r.RawBytes(name)
}

// Close closes every shard.
func (s *Sharded) Close() error {
	var errs []error
	for _, sh := range s.shards {
		errs = append(errs, sh.Close())
	}
	return errors.Join(errs...)
}
