package main

import (
	"errors"
	"fmt"
	"image"
	"image/png"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/tf2_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/mapframe"
	"github.com/lingbotmap/lingbotmap/engine/scale"
	"github.com/lingbotmap/lingbotmap/engine/source"
	"github.com/lingbotmap/lingbotmap/msgs"
	"github.com/lingbotmap/lingbotmap/node/tf"
)

// runScale is run's metric scale: the scale component (engine/scale) fed
// with each keyframe's result and the robot's data read beside the images:
// the bag's /tf (odom_frame → the camera) or a nav_msgs/Odometry topic, its
// depth topic, or a folder of depth images (--depth-dir). Every problem
// with that data (odometry missing or too old at an image's stamp, a depth
// image in another encoding or with too few valid pixels) leaves the
// keyframe out of the estimate with the reason in run.json's scale section;
// no frame is lost and the run goes on.
type runScale struct {
	tr    *scale.Tracker
	set   scale.Settings
	frame *mapframe.Frame
	log   *slog.Logger
	tol   time.Duration
	// colour image size, for mapping the model's depth onto the sensor's
	colourW, colourH int

	// odometry
	buf         *tf.Buffer
	track       *source.Topic // /tf or the odometry topic
	trackDone   bool
	odomFrame   string
	cameraFrame string
	// the base_to_camera setting, used when the bag's tree has no parent
	// for the camera frame
	baseToCamera geom.Mat4
	baseFrame    string
	fellBack     bool

	// depth from a bag topic: decoded images waiting, oldest first
	depth        *source.Topic
	depthDone    bool
	depthPending []stampedDepth
	// depth from a folder
	depthDir   string
	depthFiles []string
	names      interface{ Name(uint64) (string, bool) }

	logged map[string]bool
}

type stampedDepth struct {
	stamp time.Time
	img   scale.Image
	err   error
}

// newRunScale sets the component up for run's input; nil when the scale
// source is none. frame takes the scale.
func newRunScale(o *runOptions, src source.Source, frame *mapframe.Frame, colourW, colourH int, log *slog.Logger) (*runScale, error) {
	set := o.scale
	if set.Source == scale.SourceNone {
		if o.depthDir != "" {
			return nil, errors.New("--depth-dir needs scale.source depth (--scale.source depth)")
		}
		return nil, nil
	}
	tr, err := scale.NewTracker(set, frame)
	if err != nil {
		return nil, err
	}
	s := &runScale{tr: tr, set: set, frame: frame, log: log, colourW: colourW, colourH: colourH,
		tol: time.Duration(set.StampTolerance * float64(time.Second)), logged: map[string]bool{}}
	switch set.Source {
	case scale.SourceOdometry:
		err = s.openOdometry(o)
	case scale.SourceDepth:
		err = s.openDepth(o, src)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *runScale) openOdometry(o *runOptions) error {
	topics, err := source.BagTopics(o.input)
	if err != nil {
		return fmt.Errorf("scale.source odometry reads the bag's /tf or scale.odom_topic: %w", err)
	}
	s.buf = tf.NewBuffer(time.Minute)
	// the static tree (base → camera) first, whole
	if _, ok := topics["/tf_static"]; ok {
		st, err := source.OpenTopic(o.input, "/tf_static")
		if err != nil {
			return err
		}
		for {
			m, ok, err := st.Next()
			if err != nil || !ok {
				st.Close()
				if err != nil {
					return err
				}
				break
			}
			s.takeTF(m, true)
		}
	}
	if o.baseToCamera != "" {
		// the fallback base → camera when the bag's tree has none
		if s.baseToCamera, err = geom.ParseTransform(o.baseToCamera); err != nil {
			return fmt.Errorf("base_to_camera: %w", err)
		}
		s.baseFrame = tf.Name(o.baseFrame)
	}
	s.cameraFrame = tf.Name(o.cameraFrame)
	if s.cameraFrame == "" {
		if s.cameraFrame, err = imageFrameID(o.input, o.src.Topic, topics); err != nil {
			return err
		}
	}
	name := "/tf"
	s.odomFrame = tf.Name(o.odomFrame)
	if s.set.OdomTopic != "" {
		name = s.set.OdomTopic
	}
	if _, ok := topics[name]; !ok {
		return fmt.Errorf("scale.source odometry: the bag %s has no %s topic", o.input, name)
	}
	s.track, err = source.OpenTopic(o.input, name)
	return err
}

// imageFrameID is the frame_id of the bag's first image on the image topic.
func imageFrameID(path, topic string, topics map[string]string) (string, error) {
	if topic == "" {
		for t, typ := range topics {
			if source.IsImageType(typ) {
				if topic != "" {
					return "", errors.New("scale: the bag has several image topics: name one with --topic, or set camera_frame")
				}
				topic = t
			}
		}
	}
	t, err := source.OpenTopic(path, topic)
	if err != nil {
		return "", err
	}
	defer t.Close()
	m, ok, err := t.Next()
	if err != nil || !ok {
		return "", fmt.Errorf("scale: no image on %s to take the camera frame from (set camera_frame): %v", topic, err)
	}
	var id string
	if strings.Contains(m.Type, "Compressed") {
		var c sensor_msgs.CompressedImage
		err, id = m.Decode(&c), c.Header.FrameId
	} else {
		var c sensor_msgs.Image
		err, id = m.Decode(&c), c.Header.FrameId
	}
	if err != nil || tf.Name(id) == "" {
		return "", fmt.Errorf("scale: the first image on %s names no frame_id (set camera_frame): %v", topic, err)
	}
	return tf.Name(id), nil
}

// takeTF puts a /tf or /tf_static message into the buffer.
func (s *runScale) takeTF(m source.TopicMessage, static bool) {
	var msg tf2_msgs.TFMessage
	if err := m.Decode(&msg); err != nil {
		s.issue("tf", fmt.Sprintf("%s message at %s does not decode: %v", m.Topic, m.Time.Format(time.RFC3339Nano), err))
		return
	}
	for _, ts := range msg.Transforms {
		r := ts.Transform.Rotation
		tr := tf.Transform{Parent: ts.Header.FrameId, Child: ts.ChildFrameId, Stamp: ts.Header.Stamp,
			T: [3]float64{ts.Transform.Translation.X, ts.Transform.Translation.Y, ts.Transform.Translation.Z},
			Q: geom.Quat{r.X, r.Y, r.Z, r.W}}
		if err := s.buf.Set(tr, static, "bag"); err != nil {
			s.issue("tfset", err.Error())
		}
	}
}

// takeOdometry puts a nav_msgs/Odometry's pose into the buffer as
// header.frame_id → child_frame_id.
func (s *runScale) takeOdometry(m source.TopicMessage) {
	var msg nav_msgs.Odometry
	if err := m.Decode(&msg); err != nil {
		s.issue("odom", fmt.Sprintf("%s message does not decode: %v", m.Topic, err))
		return
	}
	// the odometry's own frame is the one distances are measured in
	s.odomFrame = tf.Name(msg.Header.FrameId)
	s.fallback(msg.ChildFrameId)
	p, q := msg.Pose.Pose.Position, msg.Pose.Pose.Orientation
	tr := tf.Transform{Parent: msg.Header.FrameId, Child: msg.ChildFrameId, Stamp: msg.Header.Stamp,
		T: [3]float64{p.X, p.Y, p.Z}, Q: geom.Quat{q.X, q.Y, q.Z, q.W}}
	if err := s.buf.Set(tr, false, "odometry"); err != nil {
		s.issue("odomset", err.Error())
	}
}

// fallback adds base_to_camera as the static base → camera transform when
// the bag's tree gives the camera frame no parent.
func (s *runScale) fallback(base string) {
	if s.fellBack || s.baseToCamera == (geom.Mat4{}) {
		return
	}
	if s.baseFrame != "" {
		base = s.baseFrame
	}
	if _, _, ok := s.buf.Parent(s.cameraFrame); ok || tf.Name(base) == "" {
		return
	}
	s.fellBack = true
	t, q, err := geom.Decompose(s.baseToCamera)
	if err == nil {
		err = s.buf.Set(tf.Transform{Parent: base, Child: s.cameraFrame, T: t, Q: q}, true, "base_to_camera")
	}
	if err != nil {
		s.issue("fallback", fmt.Sprintf("base_to_camera: %v", err))
	}
}

func (s *runScale) openDepth(o *runOptions, src source.Source) error {
	if o.depthDir != "" {
		ents, err := os.ReadDir(o.depthDir)
		if err != nil {
			return fmt.Errorf("--depth-dir: %w", err)
		}
		for _, e := range ents {
			if !e.IsDir() && strings.EqualFold(filepath.Ext(e.Name()), ".png") && !strings.HasPrefix(e.Name(), ".") {
				s.depthFiles = append(s.depthFiles, e.Name())
			}
		}
		if len(s.depthFiles) == 0 {
			return fmt.Errorf("--depth-dir %s holds no .png depth image", o.depthDir)
		}
		slices.Sort(s.depthFiles)
		s.depthDir = o.depthDir
		s.names, _ = src.(interface{ Name(uint64) (string, bool) })
		return nil
	}
	if s.set.DepthTopic == "" {
		return errors.New("scale.source depth needs scale.depth_topic (a bag's aligned depth topic) or --depth-dir")
	}
	t, err := source.OpenTopic(o.input, s.set.DepthTopic)
	if err != nil {
		return fmt.Errorf("scale.depth_topic: %w", err)
	}
	s.depth = t
	return nil
}

// issue logs a problem with the robot's data once per kind and counts it
// against the keyframe.
func (s *runScale) issue(kind, msg string) {
	if !s.logged[kind] {
		s.logged[kind] = true
		s.log.Warn("scale: "+msg, "source", s.set.Source)
	}
}

// skip leaves a keyframe out of the estimate with the reason.
func (s *runScale) skip(msg string) {
	s.tr.Skip(msg)
	s.issue("skip:"+strings.SplitN(msg, ":", 2)[0], msg)
}

// Add feeds one result (in frame order) to the estimator; non-keyframes are
// left out.
func (s *runScale) Add(r *engine.Result) error {
	if r.Kind == engine.NonKeyframe {
		return nil
	}
	switch s.set.Source {
	case scale.SourceOdometry:
		return s.addOdometry(r)
	case scale.SourceDepth:
		return s.addDepth(r)
	case scale.SourceCameraHeight:
		return s.addGround(r)
	}
	return nil
}

func (s *runScale) addOdometry(r *engine.Result) error {
	// read the odometry up to a tolerance past the image, so that the
	// buffer can interpolate at its stamp
	for !s.trackDone {
		m, ok, err := s.track.Next()
		if err != nil {
			s.issue("read", err.Error())
		}
		if !ok {
			s.trackDone = true
			break
		}
		if s.set.OdomTopic != "" {
			s.takeOdometry(m)
		} else {
			s.takeTF(m, false)
		}
		if m.Time.After(r.Stamp.Add(s.tol)) {
			break
		}
	}
	if s.set.OdomTopic == "" {
		s.fallback(s.baseFrame)
	}
	if s.odomFrame == "" {
		s.skip(fmt.Sprintf("no odometry yet at frame %d (%s)", r.Seq, s.set.OdomTopic))
		return nil
	}
	m, err := s.buf.Lookup(s.odomFrame, s.cameraFrame, r.Stamp, s.tol)
	if err != nil {
		s.skip(fmt.Sprintf("no odometry at frame %d's stamp %.6f s (%s → %s, tolerance %g s): %v",
			r.Seq, float64(r.Stamp.UnixNano())/1e9, s.odomFrame, s.cameraFrame, s.set.StampTolerance, err))
		return nil
	}
	if err := s.tr.AddOdometry(geom.TranslationOf(r.CamToWorld), geom.TranslationOf(m)); err != nil && !errors.Is(err, scale.ErrNotFinite) {
		return err
	}
	return nil
}

func (s *runScale) addDepth(r *engine.Result) error {
	var img scale.Image
	var err error
	if s.depthDir != "" {
		img, err = s.depthFile(r.Seq)
	} else {
		img, err = s.depthAt(r.Stamp)
	}
	if err != nil {
		s.skip(fmt.Sprintf("frame %d: %v", r.Seq, err))
		return nil
	}
	m := scale.PixelMapFor(s.colourW, s.colourH, r.Width, r.Height, img.W, img.H)
	return s.tr.AddDepth(r.Depth, r.Width, r.Height, img, m)
}

// depthFile reads the depth image for frame seq from --depth-dir: the one
// with the colour image's name, else the seq-th.
func (s *runScale) depthFile(seq uint64) (scale.Image, error) {
	name := ""
	if s.names != nil {
		if n, ok := s.names.Name(seq); ok {
			want := strings.TrimSuffix(n, filepath.Ext(n)) + ".png"
			if _, found := slices.BinarySearch(s.depthFiles, want); found {
				name = want
			}
		}
	}
	if name == "" {
		if seq >= uint64(len(s.depthFiles)) {
			return scale.Image{}, fmt.Errorf("--depth-dir has %d images, none for frame %d", len(s.depthFiles), seq)
		}
		name = s.depthFiles[seq]
	}
	return readDepthPNG(filepath.Join(s.depthDir, name))
}

// readDepthPNG reads a 16-bit PNG of millimetres.
func readDepthPNG(path string) (scale.Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return scale.Image{}, err
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		return scale.Image{}, fmt.Errorf("depth image %s: %w", path, err)
	}
	g, ok := img.(*image.Gray16)
	if !ok {
		return scale.Image{}, fmt.Errorf("depth image %s is a %T, not a 16-bit greyscale PNG of millimetres", path, img)
	}
	b := g.Bounds()
	out := scale.Image{W: b.Dx(), H: b.Dy(), Depth: make([]float32, b.Dx()*b.Dy())}
	for y := range out.H {
		for x := range out.W {
			out.Depth[y*out.W+x] = float32(g.Gray16At(b.Min.X+x, b.Min.Y+y).Y) / 1000
		}
	}
	return out, nil
}

// depthAt is the depth image of the bag's depth topic nearest stamp within
// the tolerance.
func (s *runScale) depthAt(stamp time.Time) (scale.Image, error) {
	for !s.depthDone && (len(s.depthPending) == 0 || !s.depthPending[len(s.depthPending)-1].stamp.After(stamp.Add(s.tol))) {
		m, ok, err := s.depth.Next()
		if err != nil {
			s.issue("read", err.Error())
		}
		if !ok {
			s.depthDone = true
			break
		}
		var msg sensor_msgs.Image
		d := stampedDepth{stamp: m.Time}
		if d.err = m.Decode(&msg); d.err == nil {
			if !msg.Header.Stamp.IsZero() {
				d.stamp = msg.Header.Stamp
			}
			d.img.W, d.img.H, d.img.Depth, d.err = msgs.DecodeDepth(&msg)
		}
		s.depthPending = append(s.depthPending, d)
	}
	// drop what is too old for this and later frames
	for len(s.depthPending) > 0 && s.depthPending[0].stamp.Before(stamp.Add(-s.tol)) {
		s.depthPending = s.depthPending[1:]
	}
	best := scale.Nearest(s.depthPending, func(d stampedDepth) time.Time { return d.stamp }, stamp, s.tol)
	if best < 0 {
		return scale.Image{}, fmt.Errorf("no depth image on %s within %g s of the image", s.set.DepthTopic, s.set.StampTolerance)
	}
	d := s.depthPending[best]
	if d.err != nil {
		return scale.Image{}, fmt.Errorf("depth image on %s refused: %w", s.set.DepthTopic, d.err)
	}
	return d.img, nil
}

// addGround looks for the floor among the frame's points, in the z-up map
// frame at scale 1.
func (s *runScale) addGround(r *engine.Result) error {
	pts, cam := scale.FloorPoints(r.Depth, r.Width, r.Height, 4, r.Intrinsics, r.CamToWorld, s.frame.MapToWorld())
	return s.tr.AddGround(pts, cam)
}

// Status is the scale's state for run.json.
func (s *runScale) Status() *scale.Status {
	st := s.tr.Status()
	return &st
}

// Close closes the bag topics.
func (s *runScale) Close() {
	if s.track != nil {
		s.track.Close()
	}
	if s.depth != nil {
		s.depth.Close()
	}
}

// mapFrameOf is the map frame run's files are written in, when the writer
// has one; else a frame of the scale's own.
func mapFrameOf(w any) *mapframe.Frame {
	if f, ok := w.(interface{ Frame() *mapframe.Frame }); ok {
		return f.Frame()
	}
	return mapframe.New()
}
