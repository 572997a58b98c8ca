//go:build cuda

package cuda

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"gorgonia.org/cu/nvrtc"

	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
)

// The kernels are CUDA C sources compiled at first use for the GPU's target
// (chooseTarget: its own capability, or a lower one that Config.Arch names).
//
//go:embed kernels/*.cu kernels/*.cuh
var kernelFS embed.FS

// kernelCache compiles each kernels/<module>.cu once per process (and once
// per machine, through the on-disk PTX cache) and looks functions up. A
// module "file+NAME" is file.cu compiled with -DWANT_NAME, for sources whose
// variants are compiled one at a time; "file@A=1,B" is file.cu compiled with
// -DA=1 -DB (settings compiled in, AttnSettings.hopperModule).
// Used only on the owner thread.
type kernelCache struct {
	dir     string // "" when the disk cache is off
	arch    string
	driver  int
	log     *slog.Logger
	modules map[string]kernelModule
	funcs   map[string]kernelFunc
	// prepared: gpu.prepareKernels has run; late then lists the modules
	// loaded after it (ones startupModules missed), which a stream waited
	// for.
	prepared bool
	late     []string
}

func newKernelCache(dir string, t target, driver int, log *slog.Logger) *kernelCache {
	switch dir {
	case "-":
		dir = ""
	case "":
		if base, err := os.UserCacheDir(); err == nil {
			dir = filepath.Join(base, "lingbotmap", "cuda")
		}
	}
	return &kernelCache{dir: dir, arch: t.arch, driver: driver, log: log,
		modules: map[string]kernelModule{}, funcs: map[string]kernelFunc{}}
}

// hopper says whether kernels compile for sm_90a, where the warpgroup MMA
// (wgmma) instructions exist (target.hopper).
func (k *kernelCache) hopper() bool { return target{arch: k.arch}.hopper() }

func (k *kernelCache) function(module, name string) (kernelFunc, error) {
	key := module + "." + name
	if fn, ok := k.funcs[key]; ok {
		return fn, nil
	}
	mod, err := k.module(module)
	if err != nil {
		return kernelFunc{}, err
	}
	fn, err := mod.function(name)
	if err != nil {
		return kernelFunc{}, fmt.Errorf("kernel %s not found in kernel module %s: %w", name, module, err)
	}
	k.funcs[key] = fn
	return fn, nil
}

func (k *kernelCache) options(module string) []string {
	// -default-device: NVRTC treats unannotated functions as host code, and
	// the operator() of a generic lambda (attn_wg_paged_bf's per-warpgroup
	// loop) has no annotation to give.
	opts := []string{"--gpu-architecture=" + k.arch, "--std=c++17", "--fmad=true", "-default-device"}
	module, defines, _ := strings.Cut(module, "@")
	if _, variant, ok := strings.Cut(module, "+"); ok {
		opts = append(opts, "-DWANT_"+variant)
	}
	for d := range strings.SplitSeq(defines, ",") {
		if d != "" {
			opts = append(opts, "-D"+d)
		}
	}
	return opts
}

// source is the module's text with the shared header in front and its
// includes inlined (kernelSource).
func (k *kernelCache) source(module string) (string, error) {
	file, _, _ := strings.Cut(module, "@")
	file, _, _ = strings.Cut(file, "+")
	prod, err := fs.Sub(kernelFS, "kernels")
	if err != nil {
		return "", err
	}
	roots := []fs.FS{prod}
	if lab := labKernels(); lab != nil {
		roots = append(roots, lab)
	}
	src, err := kernelSource(roots, file+".cu")
	if err != nil {
		return "", fmt.Errorf("kernel module %q: %w", module, err)
	}
	return src, nil
}

func (k *kernelCache) module(module string) (kernelModule, error) {
	if m, ok := k.modules[module]; ok {
		return m, nil
	}
	if k.prepared {
		k.late = append(k.late, module)
		k.log.Warn("compiling a CUDA kernel module that was not prepared at start; the stream waits for it", "module", module)
	}
	ptx, err := k.compiled(module)
	if err != nil {
		return kernelModule{}, err
	}
	return k.load(module, ptx)
}

// compiled is a module's PTX, from the disk cache or NVRTC. Unlike module it
// may run on any goroutine.
func (k *kernelCache) compiled(module string) (string, error) {
	src, err := k.source(module)
	if err != nil {
		return "", err
	}
	return k.ptx(module, src)
}

func (k *kernelCache) load(module, ptx string) (kernelModule, error) {
	start := time.Now()
	m, err := loadModule(ptx)
	if err != nil {
		return kernelModule{}, fmt.Errorf("loading compiled kernels/%s.cu for %s: %w", module, k.arch, err)
	}
	k.modules[module] = m
	k.log.Debug("loaded CUDA kernels", "module", module, "arch", k.arch, "took", time.Since(start).Round(time.Millisecond))
	return m, nil
}

// compileAll compiles the modules on up to GOMAXPROCS goroutines (NVRTC
// programs compile independently) and returns their PTX in order.
func (k *kernelCache) compileAll(modules []string) ([]string, error) {
	ptx := make([]string, len(modules))
	errs := make([]error, len(modules))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, m := range modules {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			ptx[i], errs[i] = k.compiled(m)
		}()
	}
	wg.Wait()
	return ptx, errors.Join(errs...)
}

// ptx returns the module's PTX from the disk cache or from NVRTC. The cache
// key is the source and options hash, the architecture, the NVRTC and driver
// versions.
func (k *kernelCache) ptx(module, src string) (string, error) {
	maj, min, err := nvrtc.Version()
	if err != nil {
		return "", fmt.Errorf("NVRTC is not usable: %w", err)
	}
	h := sha256.New()
	opts := k.options(module)
	fmt.Fprintf(h, "%s\x00%s\x00nvrtc %d.%d\x00", src, strings.Join(opts, " "), maj, min)
	sum := hex.EncodeToString(h.Sum(nil))[:24]
	path := ""
	if k.dir != "" {
		path = filepath.Join(k.dir, fmt.Sprintf("%s-%s-drv%d-%s.ptx", module, k.arch, k.driver, sum))
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return string(b), nil
		}
	}
	start := time.Now()
	ptx, err := compile(module, src, opts)
	if err != nil {
		return "", err
	}
	k.log.Info("compiled CUDA kernels", "module", module, "arch", k.arch, "took", time.Since(start).Round(time.Millisecond))
	if path != "" {
		if err := writeAtomic(path, []byte(ptx)); err != nil {
			k.log.Warn("cannot cache compiled kernels", "path", path, "err", err)
		}
	}
	return ptx, nil
}

// compile runs NVRTC; on failure the error carries the compiler's log.
func compile(module, src string, opts []string) (string, error) {
	prog, err := nvrtc.CreateProgram(src, module+".cu")
	if err != nil {
		return "", fmt.Errorf("NVRTC cannot create program %s.cu: %w", module, err)
	}
	defer prog.Destroy()
	if cerr := prog.Compile(opts...); cerr != nil {
		log, _ := prog.GetLog()
		return "", fmt.Errorf("compiling kernels/%s.cu with NVRTC (%s) failed: %w\n%s", module, strings.Join(opts, " "), cerr, log)
	}
	ptx, err := prog.GetPTX()
	if err != nil {
		return "", fmt.Errorf("reading PTX of kernels/%s.cu: %w", module, err)
	}
	return ptx, nil
}

func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	// A cache file needs no flush to disk: a lost one is compiled again.
	return atomicfile.WriteFileNoSync(path, func(w io.Writer) error { _, err := w.Write(data); return err })
}
