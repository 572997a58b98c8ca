// Command loadbench measures what loading a checkpoint costs: it writes a
// random checkpoint of an architecture (write mode), or opens one, validates
// it and reads every tensor into float32 slices that it keeps, as the model
// does, then prints the wall time and the peak resident set (VmHWM) — to
// show that loading needs about one copy of the weights, not two.
//
//	go run ./engine/weights/internal/loadbench -write /tmp/full.safetensors -arch full
//	go run ./engine/weights/internal/loadbench -write /tmp/full.pt -arch full
//	go run ./engine/weights/internal/loadbench -read /tmp/full.safetensors
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/weights"
	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
)

func main() {
	var (
		write = flag.String("write", "", "write a random checkpoint to this path (.safetensors or .pt)")
		read  = flag.String("read", "", "open this checkpoint and read every tensor")
		arch  = flag.String("arch", "full", "architecture for -write: full or tiny")
		seed  = flag.Int64("seed", 1, "seed for -write")
	)
	flag.Parse()
	var err error
	switch {
	case *write != "":
		err = writeRandom(*write, *arch, *seed)
	case *read != "":
		err = readAll(*read)
	default:
		err = errors.New("give -write PATH or -read PATH")
	}
	if err != nil {
		slog.Error("loadbench failed", "err", err)
		os.Exit(1)
	}
}

func writeRandom(path, archName string, seed int64) error {
	var a weights.Arch
	switch archName {
	case "full":
		a = weights.FullArch()
	case "tiny":
		a = weights.TinyArch()
	default:
		return fmt.Errorf("unknown -arch %q (want full or tiny)", archName)
	}
	t0 := time.Now()
	m := weights.Random(a, seed)
	slog.Info("generated random weights", "params", a.NumParams(), "took", time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	err := atomicfile.WriteFile(path, func(f io.Writer) error {
		if strings.HasSuffix(path, ".pt") {
			return writePT(f, m)
		}
		return weights.WriteSafeTensors(f, m)
	})
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	st, _ := os.Stat(path)
	slog.Info("wrote checkpoint", "path", path, "bytes", st.Size(), "took", time.Since(t0).Round(time.Millisecond))
	return nil
}

func readAll(path string) error {
	t0 := time.Now()
	s, err := weights.Open(path)
	if err != nil {
		return err
	}
	defer s.Close()
	a, err := weights.Check(s)
	if err != nil {
		return err
	}
	tOpen := time.Since(t0)
	keep := make([][]float32, 0, len(s.Keys()))
	var n int64
	for _, k := range s.Keys() {
		v, err := s.Float32(k)
		if err != nil {
			return err
		}
		keep = append(keep, v)
		n += int64(len(v))
	}
	total := time.Since(t0)
	st, _ := os.Stat(path)
	hwm, rss := procStatus("VmHWM"), procStatus("VmRSS")
	fmt.Printf("file %s: %.3f GB, %d tensors, %d params (embed %d, depth %d)\n", path, float64(st.Size())/1e9, len(keep), n, a.EmbedDim, a.Depth)
	fmt.Printf("open+validate %v, open+read all %v (%.2f GB/s)\n", tOpen.Round(time.Millisecond), total.Round(time.Millisecond), float64(4*n)/1e9/total.Seconds())
	fmt.Printf("float32 copies held: %.3f GB; peak RSS (VmHWM) %.3f GB = %.2f× the file; RSS now %.3f GB\n",
		float64(4*n)/1e9, hwm/1e9, hwm/float64(st.Size()), rss/1e9)
	return nil
}

// procStatus reads a "kB" field of /proc/self/status in bytes.
func procStatus(field string) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kb float64
		if _, err := fmt.Sscanf(sc.Text(), field+": %f kB", &kb); err == nil {
			return kb * 1024
		}
	}
	return 0
}
