//go:build cuda

package cuda

import (
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// The four-at-a-time forms (widths multiple of 4) against the CPU; the
// other tests' odd widths cover the scalar fallbacks.
func TestVectorKernels(t *testing.T) {
	for _, p := range pairs(t, 31) {
		cx, gx := p.in(p.randn(37*96, 1), 37, 96)
		p.check("SliceCols ×4", p.gpu.SliceCols(gx, 32, 64), fx.cpu.SliceCols(cx, 32, 64), 0)
		cz, gz := p.in(p.randn(37*12, 1), 37, 12)
		p.check("ConcatCols ×4", p.gpu.ConcatCols(gz, gx, gz), fx.cpu.ConcatCols(cz, cx, cz), 0)
		// A trunk Linear in BF16 mode casts its input with f32_to_bf16_v4.
		cw, gw := p.weight(p.randn(40*96, 0.1), backend.Trunk, 40, 96)
		p.check("Linear after the ×4 cast", p.gpu.Linear(gx, gw, nil, backend.ActNone), fx.cpu.Linear(cx, cw, nil, backend.ActNone), p.tol)
		for _, c := range []int{64, 128, 1024} {
			cl, gl := p.in(p.randn(19*c, 2), 19, c)
			cw, gw := p.weight(p.randn(c, 1), backend.Head, c)
			p.check("LayerNorm one warp a row", p.gpu.LayerNorm(gl, gw, nil, 1e-6), fx.cpu.LayerNorm(cl, cw, nil, 1e-6), tolFP32)
		}
	}
}
