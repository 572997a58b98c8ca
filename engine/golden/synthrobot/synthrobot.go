// Package synthrobot builds a synthetic robot around a camera trajectory
// for the metric scale's tests: the camera's images, a static base →
// camera transform, and an odometry stream that is the trajectory scaled by
// a known factor and moved by a rigid transform (with noise, a jump, or a
// robot turning in place when asked), plus an aligned depth image that is
// the scaled predicted depth (with holes and noise). It writes all of it
// into a ROS 1 bag or an MCAP (ROS 2) bag with the project's own writers,
// and depth images into a folder of 16-bit PNGs.
package synthrobot

import (
	"errors"
	"fmt"
	"image"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/tf2_msgs"

	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/golden"
	"github.com/lingbotmap/lingbotmap/msgs"
	"github.com/lingbotmap/lingbotmap/msgs/bag"
	"github.com/lingbotmap/lingbotmap/msgs/mcapbag"
)

// Topics and frames the bags use.
const (
	ImageTopic  = "/camera/image_raw/compressed"
	DepthTopic  = "/camera/depth/image_raw"
	OdomTopic   = "/odom"
	OdomFrame   = "odom"
	BaseFrame   = "base_link"
	CameraFrame = "camera_optical"
)

// Robot is the synthetic robot.
type Robot struct {
	// Images are the JPEG or PNG files of the frames, in order.
	Images []string
	// CamToWorld is the camera's trajectory in the model's world (model
	// units), one pose per image.
	CamToWorld []geom.Mat4
	// Start and Period stamp the frames.
	Start  time.Time
	Period time.Duration
	// Scale is metres per model unit: the odometry is the trajectory scaled
	// by it.
	Scale float64
	// OdomFromWorld is the rigid transform that moves the scaled trajectory
	// into the odometry frame.
	OdomFromWorld geom.Mat4
	// BaseToCamera is the camera's pose on the robot's base (base_T_cam).
	BaseToCamera geom.Mat4
	// OdomNoise, when > 0, perturbs each odometry step: its length by a
	// relative Gaussian error of this standard deviation and its direction
	// by a sideways one of the same relative size.
	OdomNoise float64
	// TurnInPlace replaces the motion with a robot turning on the spot: the
	// camera stays where it started and only turns.
	TurnInPlace bool
	// Seed makes the noise repeatable.
	Seed uint64

	// Depth, when set, is the model's predicted depth per frame (DepthW ×
	// DepthH, model units); the depth topic and folder carry Scale times it.
	Depth          [][]float32
	DepthW, DepthH int
	// DepthHoles is the share of depth pixels without a value (0), and
	// DepthNoise the relative Gaussian noise on the others.
	DepthHoles, DepthNoise float64
	// DepthOffset shifts the depth stamps from the images' (within the
	// tolerance a reader matches with).
	DepthOffset time.Duration
	// DepthEncoding is the depth topic's encoding: "" or 32FC1 (metres),
	// 16UC1 (millimetres), or any other, written as 8-bit RGB pixels under
	// that name (for readers that must refuse it).
	DepthEncoding string
}

// Stamp is frame k's stamp.
func (r *Robot) Stamp(k int) time.Time { return r.Start.Add(time.Duration(k) * r.Period) }

// OdomCamera is odom_T_cam for each frame: the scaled trajectory moved by
// OdomFromWorld, with the noise, or turning in place.
func (r *Robot) OdomCamera() []geom.Mat4 {
	rng := rand.New(rand.NewPCG(r.Seed, 0x5ca1e))
	out := make([]geom.Mat4, len(r.CamToWorld))
	var prevTrue, prevOdom [3]float64
	for k, c := range r.CamToWorld {
		m := c
		for i := range 3 {
			m[i][3] *= r.Scale
		}
		m = geom.Mul4(r.OdomFromWorld, m)
		if r.TurnInPlace {
			// the first position, the k-th orientation
			p := geom.TranslationOf(out[0])
			if k == 0 {
				p = geom.TranslationOf(m)
			}
			m = geom.Rigid(geom.RotationOf(m), p)
		} else if r.OdomNoise > 0 && k > 0 {
			p := geom.TranslationOf(m)
			step := sub(p, prevTrue)
			l := norm(step)
			noisy := step
			for i := range 3 {
				noisy[i] = step[i]*(1+r.OdomNoise*rng.NormFloat64()) + l*r.OdomNoise*rng.NormFloat64()/math.Sqrt(3)
			}
			prevTrue = p
			q := add(prevOdom, noisy)
			prevOdom = q
			m = geom.Rigid(geom.RotationOf(m), q)
		} else {
			prevTrue = geom.TranslationOf(m)
			prevOdom = prevTrue
		}
		if k == 0 {
			prevTrue, prevOdom = geom.TranslationOf(m), geom.TranslationOf(m)
		}
		out[k] = m
	}
	return out
}

func sub(a, b [3]float64) [3]float64 { return [3]float64{a[0] - b[0], a[1] - b[1], a[2] - b[2]} }
func add(a, b [3]float64) [3]float64 { return [3]float64{a[0] + b[0], a[1] + b[1], a[2] + b[2]} }
func norm(a [3]float64) float64      { return math.Sqrt(a[0]*a[0] + a[1]*a[1] + a[2]*a[2]) }

// SensorDepth is frame k's depth sensor image in metres (0: a hole).
func (r *Robot) SensorDepth(k int) []float32 {
	rng := rand.New(rand.NewPCG(r.Seed+uint64(k)+1, 0xde97))
	out := make([]float32, len(r.Depth[k]))
	for i, d := range r.Depth[k] {
		if rng.Float64() < r.DepthHoles {
			continue
		}
		out[i] = float32(r.Scale * float64(d) * (1 + r.DepthNoise*rng.NormFloat64()))
	}
	return out
}

func transform(parent, child string, stamp time.Time, m geom.Mat4) (geometry_msgs.TransformStamped, error) {
	t, q, err := geom.Decompose(m)
	if err != nil {
		return geometry_msgs.TransformStamped{}, err
	}
	return geometry_msgs.TransformStamped{
		Header:       std_msgs.Header{Stamp: stamp, FrameId: parent},
		ChildFrameId: child,
		Transform: geometry_msgs.Transform{
			Translation: geometry_msgs.Vector3{X: t[0], Y: t[1], Z: t[2]},
			Rotation:    geometry_msgs.Quaternion{X: q[0], Y: q[1], Z: q[2], W: q[3]},
		},
	}, nil
}

// writer is what the ROS 1 and the MCAP bag writers share.
type writer interface {
	Write(topic string, t time.Time, msg any) error
	Close() error
}

// WriteBag writes the robot into a ROS 1 bag (path ending in .bag) or an
// MCAP bag (.mcap): the images as CompressedImage (the JPEG bytes as
// they are), /tf_static base → camera, /tf odom → base and /odom at every
// image's stamp, and the depth topic when Depth is set.
func (r *Robot) WriteBag(path string) (err error) {
	if len(r.Images) != len(r.CamToWorld) || len(r.Images) == 0 {
		return fmt.Errorf("synthrobot: %d images for %d poses", len(r.Images), len(r.CamToWorld))
	}
	var w writer
	switch filepath.Ext(path) {
	case ".bag":
		w, err = bag.Create(path)
	case ".mcap":
		w, err = mcapbag.Create(path)
	default:
		return fmt.Errorf("synthrobot: %s is neither .bag nor .mcap", path)
	}
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w.Close()) }()
	static, err := transform(BaseFrame, CameraFrame, r.Start, r.BaseToCamera)
	if err != nil {
		return err
	}
	if err := w.Write("/tf_static", r.Start, &tf2_msgs.TFMessage{Transforms: []geometry_msgs.TransformStamped{static}}); err != nil {
		return err
	}
	camToBase := geom.InvertRigid(r.BaseToCamera)
	for k, oc := range r.OdomCamera() {
		stamp := r.Stamp(k)
		data, err := os.ReadFile(r.Images[k])
		if err != nil {
			return err
		}
		base := geom.Mul4(oc, camToBase) // odom_T_base
		ts, err := transform(OdomFrame, BaseFrame, stamp, base)
		if err != nil {
			return err
		}
		odom := &nav_msgs.Odometry{Header: ts.Header, ChildFrameId: BaseFrame}
		odom.Pose.Pose.Position = geometry_msgs.Point{X: ts.Transform.Translation.X, Y: ts.Transform.Translation.Y, Z: ts.Transform.Translation.Z}
		odom.Pose.Pose.Orientation = ts.Transform.Rotation
		for _, m := range []struct {
			topic string
			msg   any
		}{
			{"/tf", &tf2_msgs.TFMessage{Transforms: []geometry_msgs.TransformStamped{ts}}},
			{OdomTopic, odom},
			{ImageTopic, &sensor_msgs.CompressedImage{Header: std_msgs.Header{Stamp: stamp, FrameId: CameraFrame}, Format: format(r.Images[k]), Data: data}},
		} {
			if err := w.Write(m.topic, stamp, m.msg); err != nil {
				return fmt.Errorf("synthrobot: %s: %w", m.topic, err)
			}
		}
		if r.Depth != nil {
			ds := stamp.Add(r.DepthOffset)
			d := r.depthMsg(std_msgs.Header{Stamp: ds, FrameId: CameraFrame}, k)
			if err := w.Write(DepthTopic, ds, d); err != nil {
				return fmt.Errorf("synthrobot: %s: %w", DepthTopic, err)
			}
		}
	}
	return nil
}

// WriteDepthDir writes the depth images into dir as 16-bit PNGs in
// millimetres, named after the images (000000.jpg: 000000.png).
func (r *Robot) WriteDepthDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for k := range r.Depth {
		img := image.NewGray16(image.Rect(0, 0, r.DepthW, r.DepthH))
		for i, d := range r.SensorDepth(k) {
			mm := math.Round(float64(d) * 1000)
			if mm > 65535 || !(mm > 0) {
				mm = 0
			}
			img.Pix[2*i], img.Pix[2*i+1] = uint8(uint16(mm)>>8), uint8(mm)
		}
		name := filepath.Base(r.Images[k])
		name = name[:len(name)-len(filepath.Ext(name))] + ".png"
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := errors.Join(png.Encode(f, img), f.Close()); err != nil {
			return err
		}
	}
	return nil
}

// format is a CompressedImage's format for an image file.
func format(path string) string {
	if strings.EqualFold(filepath.Ext(path), ".png") {
		return "png"
	}
	return "jpeg"
}

// FromGolden is a robot around a golden case (engine/golden): its frames
// (frames/NNNNNN.png), the engine's trajectory and depth for them (the
// reference's, which the engine reproduces), a camera 0.3 m above the base
// and 0.1 m ahead looking along x, the odometry frame turned 30° about z
// and moved, frames 100 ms apart from 1700000000 s.
func FromGolden(goldenDir, frames string, scale float64) (*Robot, *golden.Manifest, error) {
	man, err := golden.Load(goldenDir)
	if err != nil {
		return nil, nil, err
	}
	st, err := golden.Open(goldenDir, golden.OutputsFile)
	if err != nil {
		return nil, nil, err
	}
	defer st.Close()
	poseEnc, err := st.Float32("pose_enc")
	if err != nil {
		return nil, nil, err
	}
	depth, err := st.Float32("depth")
	if err != nil {
		return nil, nil, err
	}
	w, h, n := man.Config.ImgW, man.Config.ImgH, len(poseEnc)/9
	if len(depth) != n*w*h {
		return nil, nil, fmt.Errorf("synthrobot: golden depth has %d values for %d frames of %d×%d", len(depth), n, w, h)
	}
	r := &Robot{Start: time.Unix(1700000000, 0), Period: 100 * time.Millisecond, Scale: scale, Seed: 7, DepthW: w, DepthH: h}
	c, s := math.Cos(math.Pi/6), math.Sin(math.Pi/6)
	r.OdomFromWorld = geom.Rigid(geom.Mat3{{c, -s, 0}, {s, c, 0}, {0, 0, 1}}, [3]float64{3, -2, 0.1})
	r.BaseToCamera = geom.Rigid(geom.Mat3{{0, 0, 1}, {-1, 0, 0}, {0, -1, 0}}, [3]float64{0.1, 0, 0.3})
	for k := range n {
		var enc [9]float32
		copy(enc[:], poseEnc[9*k:])
		r.CamToWorld = append(r.CamToWorld, geom.PoseEncToCamToWorld(enc))
		r.Images = append(r.Images, filepath.Join(frames, fmt.Sprintf("%06d.png", k)))
		r.Depth = append(r.Depth, depth[k*w*h:(k+1)*w*h])
	}
	return r, man, nil
}

// depthMsg is frame k's depth image in DepthEncoding.
func (r *Robot) depthMsg(h std_msgs.Header, k int) *sensor_msgs.Image {
	switch r.DepthEncoding {
	case "", "32FC1":
		return msgs.DepthImage(h, r.DepthW, r.DepthH, r.SensorDepth(k))
	case "16UC1":
		d := r.SensorDepth(k)
		data := make([]byte, 2*len(d))
		for i, v := range d {
			mm := math.Round(float64(v) * 1000)
			if mm > 65535 || !(mm > 0) {
				mm = 0
			}
			data[2*i], data[2*i+1] = uint8(uint16(mm)), uint8(uint16(mm)>>8)
		}
		return &sensor_msgs.Image{Header: h, Width: uint32(r.DepthW), Height: uint32(r.DepthH), Encoding: "16UC1", Step: uint32(2 * r.DepthW), Data: data}
	}
	return &sensor_msgs.Image{Header: h, Width: uint32(r.DepthW), Height: uint32(r.DepthH), Encoding: r.DepthEncoding,
		Step: uint32(3 * r.DepthW), Data: make([]byte, 3*r.DepthW*r.DepthH)}
}
