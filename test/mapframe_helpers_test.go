package test

import (
	"testing"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/mapframe"
)

// inMapFrame is a copy of engine results with their poses in the node's
// z-up map frame (REP 103/105), as the node publishes them: the first
// result's camera sits at baseToCam (base_T_cam) in the map, with no
// metric scale.
func inMapFrame(t *testing.T, res []engine.Result, baseToCam geom.Mat4) []engine.Result {
	t.Helper()
	if len(res) == 0 {
		return nil
	}
	f := mapframe.New()
	if _, err := f.FixAt(baseToCam, res[0].CamToWorld); err != nil {
		t.Fatal(err)
	}
	out := append([]engine.Result(nil), res...)
	for i := range out {
		out[i].CamToWorld = f.CamPose(out[i].CamToWorld)
	}
	return out
}
