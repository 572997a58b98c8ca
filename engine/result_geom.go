package engine

import "github.com/lingbotmap/lingbotmap/engine/geom"

// DepthFrame is the result's depth map with its pose, intrinsics, confidence
// and colours: the input of geom.ConfidentPoints and mapio.Map.AddPoints. It
// shares r's slices.
func (r *Result) DepthFrame() geom.DepthFrame {
	return geom.DepthFrame{
		Width: r.Width, Height: r.Height,
		Depth: r.Depth, Conf: r.Conf, RGB: r.RGB,
		Intrinsics: r.Intrinsics, CamToWorld: r.CamToWorld,
		Kept: r.Kept,
	}
}
