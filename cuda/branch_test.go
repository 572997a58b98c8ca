//go:build cuda

package cuda

import (
	"testing"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// TestSideStreamBranch: operations run as a branch on the side stream
// beside a long stretch on the default stream give the CPU's values; the
// buffers freed on either side are not handed to the default stream again
// before the merge (it would overwrite them while the other stream still
// reads them), while the branch reuses what it freed itself; a copy to the
// host inside a branch ends it on the host's side with the right values.
func TestSideStreamBranch(t *testing.T) {
	for _, p := range pairs(t, 71) {
		t.Run(p.name(), func(t *testing.T) {
			g := p.gpu.(*gpu)
			if !g.cfg.SideStream {
				t.Fatal("the test backends run without the side stream")
			}
			xc, x := p.in(p.randn(512*256, 1), 512, 256)
			wc, w := p.weight(p.randn(256*256, 0.12), backend.Trunk, 256, 256)
			bc, b := p.weight(p.randn(256, 0.1), backend.Trunk, 256)
			chain := func(be backend.Backend, x, w, b backend.Tensor, n int) backend.Tensor {
				y := be.Linear(x, w, b, backend.ActGELU)
				for i := 1; i < n; i++ {
					z := be.Linear(y, w, b, backend.ActGELU)
					be.Free(y) // the branch's own to reuse; the default stream's after the merge
					y = z
				}
				return y
			}
			// the weights' bf16 copies are made on the default stream
			// (made first inside a branch, they would end it on the
			// host's side: gpu.derive)
			g.Free(chain(g, x, w, b, 1))
			before := g.GraphStats()
			for round := range 4 { // graphs are recorded from the second round
				var side, sideCPU backend.Tensor
				xin := g.SliceRows(x, 0, 512)
				backend.Branch(g, func() { side = chain(g, xin, w, b, 6) })
				// what the branch freed it used again itself
				if n := len(g.pool.held); n > 3 {
					t.Errorf("round %d: the pool holds %d buffers after a branch that freed 5 outputs; want them reused inside it", round, n)
				}
				sideCPU = chain(fx.cpu, xc, wc, bc, 6)
				// The default stream frees the branch's input and works
				// meanwhile: its outputs are of the input's size, so they
				// would take its memory if the pool handed it out again.
				g.Free(xin)
				long := chain(g, x, w, b, 12)
				backend.Merge(g)
				p.check("default stream beside the branch", long, chain(fx.cpu, xc, wc, bc, 12), 5*p.tol)
				p.check("branch", side, sideCPU, 5*p.tol)
				if round == 0 {
					// A GEMM of a new shape inside a branch is tuned on
					// the default stream; its output may be memory the
					// branch freed while its queued kernels still read it.
					x2c, x2 := p.in(p.randn(512*128, 1), 512, 128)
					w2c, w2 := p.weight(p.randn(256*128, 0.1), backend.Trunk, 256, 128)
					x64 := g.SliceRows(x2, 0, 64) // w2's bf16 copy, made outside
					g.Free(g.Linear(x64, w2, nil, backend.ActNone))
					g.Free(x64)
					var busy, read, tuned backend.Tensor
					backend.Branch(g, func() {
						xin := g.SliceRows(x, 0, 512)
						busy = chain(g, x, w, b, 12)
						read = g.Add(xin, xin)
						g.Free(xin)
						tuned = g.Linear(x2, w2, nil, backend.ActNone)
					})
					backend.Merge(g)
					p.check("a branch's work beside a tuned GEMM", busy, chain(fx.cpu, xc, wc, bc, 12), 5*p.tol)
					p.check("a freed input read inside a branch", read, fx.cpu.Add(xc, xc), p.tol)
					p.check("a GEMM tuned inside a branch", tuned, fx.cpu.Linear(x2c, w2c, nil, backend.ActNone), p.tol)
					g.Free(x2)
					g.Free(w2)
					// a read inside a branch ends it on the host's side
					var host []float32
					backend.Branch(g, func() {
						y := chain(g, x, w, b, 2)
						host = g.ToHost(y)
						z := chain(g, y, w, b, 1)
						g.Free(y)
						host = append(host, g.ToHost(z)...)
						g.Free(z)
					})
					yc := chain(fx.cpu, xc, wc, bc, 2)
					want := append(fx.cpu.ToHost(yc), fx.cpu.ToHost(chain(fx.cpu, yc, wc, bc, 1))...)
					if e, at := relErr(host, want); !(e <= 5*p.tol) {
						t.Errorf("copies to the host inside a branch: relative error %.3g at %d", e, at)
					}
				}
			}
			if err := g.Sync(); err != nil {
				t.Fatal(err)
			}
			after := g.GraphStats()
			if n := after.Branches - before.Branches; n != 6 {
				t.Errorf("%d branches ran on the side stream, want 6", n)
			}
			if n := after.BranchesOnHost - before.BranchesOnHost; n != 1 {
				t.Errorf("%d branches ended on the host's side, want 1", n)
			}
			if g.pool.holding || len(g.pool.held) != 0 {
				t.Errorf("after the merges the pool still holds %d buffers (holding %v)", len(g.pool.held), g.pool.holding)
			}
		})
	}
}

// TestSideStreamStream: golden streams give bit for bit the same poses
// and depth maps with the camera head on the side stream as without, in
// every precision, with CUDA graphs; each frame's camera head was a branch
// and none ended on the host's side.
func TestSideStreamStream(t *testing.T) {
	frames := goldenFrames(t, "stream_kf1")
	for _, prec := range []string{"fp32", "bf16", "fp8"} {
		t.Run(prec, func(t *testing.T) {
			cfg := goldenEngineConfig(t, prec)
			run := func(side bool) ([]engine.Result, GraphStats) {
				var g *gpu
				var st GraphStats
				res := streamResults(t, cfg, frames, keptFactory(func(c *Config) {
					c.SideStream, c.FixedGEMMAlgo = side, true
				}, &g), func() { st = g.GraphStats() })
				return res, st
			}
			serial, sst := run(false)
			par, pst := run(true)
			if len(par) != len(serial) {
				t.Fatalf("%d results with the side stream, %d without", len(par), len(serial))
			}
			for i := range par {
				if !equalBits(par[i].PoseEnc[:], serial[i].PoseEnc[:]) || !equalBits(par[i].Depth, serial[i].Depth) || !equalBits(par[i].Conf, serial[i].Conf) {
					t.Errorf("frame %d: poses or depth differ with the side stream (pose %.3g)", i, relDiff(par[i].PoseEnc[:], serial[i].PoseEnc[:]))
				}
			}
			if sst.Branches != 0 {
				t.Errorf("without the side stream %d branches ran on it", sst.Branches)
			}
			if pst.Branches < int64(len(frames))-3 || pst.BranchesOnHost != 0 {
				t.Errorf("with the side stream: %d branches for %d frames, %d ended on the host's side", pst.Branches, len(frames), pst.BranchesOnHost)
			}
			if pst.Replayed == 0 {
				t.Error("no CUDA graph replayed with the side stream")
			}
		})
	}
}
