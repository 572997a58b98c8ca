package cuda

import (
	"bufio"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// kernelSource assembles the text NVRTC compiles for kernel file name (a
// .cu without its folder): common.cuh, then the file, with each of its
// `#include "…"` lines replaced by the named kernel file (found by its base
// name in the first of roots that has it; each at most once). NVRTC has no file system to
// include from, while nvcc (cuda/dev/wgcheck.cu) reads the same lines as
// ordinary includes. #line directives keep compiler messages pointing at the
// right file and line.
func kernelSource(roots []fs.FS, name string) (string, error) {
	var b strings.Builder
	seen := map[string]bool{}
	var add func(file string, depth int) error
	add = func(file string, depth int) error {
		if seen[file] {
			return nil
		}
		seen[file] = true
		if depth > 8 {
			return fmt.Errorf("kernel sources: includes nested too deep at %s", file)
		}
		text, err := readKernelFile(roots, file)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "#line 1 %q\n", file)
		sc := bufio.NewScanner(strings.NewReader(text))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for line := 1; sc.Scan(); line++ {
			inc, ok := localInclude(sc.Text())
			if !ok {
				b.WriteString(sc.Text())
				b.WriteByte('\n')
				continue
			}
			if err := add(path.Base(inc), depth+1); err != nil {
				return fmt.Errorf("%s:%d: %w", file, line, err)
			}
			fmt.Fprintf(&b, "#line %d %q\n", line+1, file)
		}
		return sc.Err()
	}
	if err := add("common.cuh", 0); err != nil {
		return "", err
	}
	if err := add(name, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

// readKernelFile reads file from the first of roots that has it.
func readKernelFile(roots []fs.FS, file string) (string, error) {
	for _, r := range roots {
		if text, err := fs.ReadFile(r, file); err == nil {
			return string(text), nil
		}
	}
	return "", fmt.Errorf("no kernel source %q", file)
}

// localInclude returns the file of an `#include "file"` line.
func localInclude(line string) (string, bool) {
	s := strings.TrimSpace(line)
	rest, ok := strings.CutPrefix(s, "#")
	if !ok {
		return "", false
	}
	rest, ok = strings.CutPrefix(strings.TrimSpace(rest), "include")
	if !ok {
		return "", false
	}
	rest = strings.TrimSpace(rest)
	if len(rest) < 2 || rest[0] != '"' {
		return "", false
	}
	end := strings.IndexByte(rest[1:], '"')
	if end < 0 {
		return "", false
	}
	return rest[1 : 1+end], true
}
