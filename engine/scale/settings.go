package scale

import (
	"errors"
	"fmt"
	"math"
)

// The sources a Settings.Source names.
const (
	SourceNone         = "none"
	SourceOdometry     = "odometry"
	SourceDepth        = "depth"
	SourceCameraHeight = "camera_height"
)

// Settings are the metric scale's settings in the one schema
// (config/lingbotmap.yaml's scale section, node.Config.Scale).
type Settings struct {
	// Source is none (model units), odometry, depth or camera_height.
	Source string `mapstructure:"source"`
	// OdomTopic, when set, is a nav_msgs/Odometry topic giving the base's
	// pose; empty reads the odometry frame (the odom_frame setting, REP
	// 105) → the camera frame from /tf at each image's stamp.
	OdomTopic string `mapstructure:"odom_topic"`
	// DepthTopic is the aligned depth image (sensor_msgs/Image, 16UC1 in
	// millimetres or 32FC1 in metres).
	DepthTopic string `mapstructure:"depth_topic"`
	// CameraHeight is the camera's height above the floor, metres.
	CameraHeight float64 `mapstructure:"camera_height"`
	// StampTolerance is how far apart in seconds an image and the odometry
	// or depth used with it may be.
	StampTolerance float64 `mapstructure:"stamp_tolerance"`
	// MaxJump is the largest odometry step in metres between two
	// consecutive keyframes believed; a larger one restarts the window.
	MaxJump float64 `mapstructure:"max_jump"`
	// Window is the number of keyframes the odometry fit keeps.
	Window int `mapstructure:"window"`
	// MinBaseline is the odometry distance in metres below which a pair of
	// keyframes says nothing (standing still, turning in place).
	MinBaseline float64 `mapstructure:"min_baseline"`
	// MinPairs is the number of keyframe pairs with enough baseline needed.
	MinPairs int `mapstructure:"min_pairs"`
	// InlierTolerance is how far (relative) a sample may lie from the
	// median and still agree.
	InlierTolerance float64 `mapstructure:"inlier_tolerance"`
	// MinInlierFraction of the samples must agree.
	MinInlierFraction float64 `mapstructure:"min_inlier_fraction"`
	// MaxSpread is the largest relative spread (MAD / median) accepted.
	MaxSpread float64 `mapstructure:"max_spread"`
	// DepthMin and DepthMax bound the sensor depths used, metres.
	DepthMin float64 `mapstructure:"depth_min"`
	DepthMax float64 `mapstructure:"depth_max"`
	// MinPixels is the number of valid depth pixels a frame needs.
	MinPixels int `mapstructure:"min_pixels"`
}

// DefaultSettings are the built-in defaults; config/lingbotmap.yaml
// repeats them and a test keeps the two equal.
func DefaultSettings() Settings {
	o, d := DefaultOdometryConfig(), DefaultDepthConfig()
	return Settings{
		Source:         SourceNone,
		StampTolerance: 0.05, MaxJump: 1,
		Window: o.Window, MinBaseline: o.MinBaseline, MinPairs: o.MinPairs,
		InlierTolerance: o.InlierTolerance, MinInlierFraction: o.MinInlierFraction, MaxSpread: o.MaxSpread,
		DepthMin: d.MinDepth, DepthMax: d.MaxDepth, MinPixels: d.MinPixels,
	}
}

// Odometry is the odometry estimator's configuration.
func (s Settings) Odometry() OdometryConfig {
	return OdometryConfig{Window: s.Window, MinBaseline: s.MinBaseline, MinPairs: s.MinPairs,
		InlierTolerance: s.InlierTolerance, MinInlierFraction: s.MinInlierFraction, MaxSpread: s.MaxSpread}
}

// Depth is the depth estimator's configuration.
func (s Settings) Depth() DepthConfig {
	d := DefaultDepthConfig()
	d.MinDepth, d.MaxDepth, d.MinPixels = s.DepthMin, s.DepthMax, s.MinPixels
	d.InlierTolerance, d.MinInlierFraction, d.MaxSpread = s.InlierTolerance, s.MinInlierFraction, s.MaxSpread
	return d
}

// Ground is the camera-height estimator's configuration.
func (s Settings) Ground() GroundConfig {
	g := DefaultGroundConfig()
	g.CameraHeight = s.CameraHeight
	g.InlierTolerance, g.MinInlierFraction, g.MaxSpread = s.InlierTolerance, s.MinInlierFraction, s.MaxSpread
	return g
}

// Validate names the settings that are out of range, by their keys.
func (s Settings) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("parameter 'scale.%s' %s", key, fmt.Sprintf(format, args...)))
	}
	switch s.Source {
	case SourceNone, SourceOdometry, SourceDepth, SourceCameraHeight:
	default:
		bad("source", "must be none, odometry, depth or camera_height, not %q", s.Source)
	}
	if s.Source == SourceCameraHeight && (!(s.CameraHeight > 0) || math.IsInf(s.CameraHeight, 0)) {
		bad("camera_height", "must be > 0 metres with source camera_height, not %g", s.CameraHeight)
	}
	if !(s.StampTolerance >= 0) || math.IsInf(s.StampTolerance, 0) {
		bad("stamp_tolerance", "must be ≥ 0 seconds, not %g", s.StampTolerance)
	}
	if !(s.MaxJump > 0) || math.IsInf(s.MaxJump, 0) {
		bad("max_jump", "must be > 0 metres, not %g", s.MaxJump)
	}
	if err := s.Odometry().Check(); err != nil {
		errs = append(errs, fmt.Errorf("scale settings: %w", err))
	}
	if err := s.Depth().Check(); err != nil {
		errs = append(errs, fmt.Errorf("scale settings: %w", err))
	}
	return errors.Join(errs...)
}
