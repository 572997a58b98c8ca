// Package hostpoints makes a frame's points on the host as a backend's
// Unproject makes them on the device (backend.Unprojector), from the
// maps' values: what tests give a CPU backend that has no device points
// of its own, so that the engine's device-points paths run without a GPU.
package hostpoints

import (
	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// Unproject returns the points of depth and conf (be's tensors) that
// u's filter keeps, and their pixels, as backend.Unprojector does.
func Unproject(be backend.Backend, depth, conf backend.Tensor, u backend.Unprojection) ([]float32, []int32, error) {
	d := be.ToHost(depth)
	for i := range d {
		d[i] *= u.DepthScale
	}
	k, err := geom.Keep(geom.DepthFrame{Width: u.Width, Height: u.Height, Depth: d, Conf: be.ToHost(conf),
		Intrinsics: u.Intrinsics, CamToWorld: u.CamToWorld},
		geom.PointFilter{ConfThreshold: u.ConfThreshold, Stride: u.Stride})
	if err != nil {
		return nil, nil, err
	}
	return k.XYZ, k.Pixel, nil
}
