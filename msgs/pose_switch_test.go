package msgs_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/msgs"
)

// The node switches from the deprecated matrix conversions to engine/geom
// with Pose and Transform: for every rotation a model can output (float32,
// slightly off orthonormal, scaled) the messages stay the same bit for bit,
// so the node's published poses, TF and path do not move. This test goes
// with pose_deprecated.go.
func TestGeomPoseMatchesDeprecated(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for i := range 20000 {
		q := geom.Quat{r.NormFloat64(), r.NormFloat64(), r.NormFloat64(), r.NormFloat64()}
		m, err := geom.Compose([3]float64{r.NormFloat64(), r.NormFloat64(), r.NormFloat64()}, q)
		if err != nil {
			t.Fatal(err)
		}
		for a := range 3 {
			for b := range 3 {
				switch i % 3 {
				case 1: // a float32 round trip
					m[a][b] = float64(float32(m[a][b]))
				case 2: // noise and scale
					m[a][b] = 1.5*m[a][b] + 1e-4*r.NormFloat64()
				}
			}
		}
		tr, gq, err := geom.Decompose(m)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := msgs.Pose(tr, gq), msgs.PoseFromMatrix(m); got != want {
			t.Fatalf("case %d: geom gives %+v, the deprecated conversion %+v", i, got, want)
		}
		if got, want := msgs.Transform(tr, gq), msgs.TransformFromMatrix(m); got != want {
			t.Fatalf("case %d: geom gives %+v, the deprecated conversion %+v", i, got, want)
		}
		back, err := geom.Compose(msgs.PoseParts(msgs.Pose(tr, gq)))
		if err != nil {
			t.Fatal(err)
		}
		old := msgs.MatrixFromPose(msgs.Pose(tr, gq))
		for a := range 4 {
			for b := range 4 {
				if math.Abs(back[a][b]-old[a][b]) > 1e-15 {
					t.Fatalf("case %d: geom.Compose %v, MatrixFromPose %v", i, back, old)
				}
			}
		}
	}
}
