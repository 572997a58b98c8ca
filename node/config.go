package node

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/lingbotmap/lingbotmap/config"
	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/engine/occgrid"
	"github.com/lingbotmap/lingbotmap/engine/output"
	"github.com/lingbotmap/lingbotmap/engine/scale"
)

// Config is the whole configuration schema: the engine's settings (with the
// cuda section) and the node's own, side by side, so that a setting has one
// key in every command. Keys are the mapstructure tags; package config derives
// the YAML entry, the LINGBOTMAP_* environment variable, the command-line flag
// and the ROS private parameter from the key ("device": --device,
// LINGBOTMAP_DEVICE, ~device).
type Config struct {
	Engine engine.Config `mapstructure:",squash"`

	// ImageTransport picks the input topics: "raw" (sensor_msgs/Image on
	// "image"), "compressed" (sensor_msgs/CompressedImage on "image/compressed")
	// or "both".
	ImageTransport string `mapstructure:"image_transport" param:"oneof=raw|compressed|both"`
	// UseCameraInfo subscribes to "camera_info" and reports its K in /diagnostics.
	UseCameraInfo bool `mapstructure:"use_camera_info"`
	// QueueSize bounds the frames waiting for the model.
	QueueSize int `mapstructure:"queue_size" param:"min=1"`
	// QueuePolicy is "latest" (drop the oldest waiting frame when full) or "all"
	// (block the subscriber: every frame is processed, e.g. for bag replay).
	QueuePolicy string `mapstructure:"queue_policy" param:"oneof=latest|all"`

	// MapFrame is the fixed frame of poses, path, clouds and map (REP 105).
	MapFrame string `mapstructure:"map_frame"`
	// CameraFrame is the camera's optical frame; empty takes the image header's frame_id.
	CameraFrame string `mapstructure:"camera_frame"`
	// BaseFrame, when set, makes TF and odometry describe the robot's base:
	// the base → camera transform comes from /tf and /tf_static at the
	// image's frame_id, else from BaseToCamera.
	BaseFrame string `mapstructure:"base_frame"`
	// BaseToCamera is the pose of the camera frame in the base frame:
	// "x y z qx qy qz qw" (metres, unit quaternion), the fallback when the
	// robot's TF tree has no base → camera transform.
	BaseToCamera string `mapstructure:"base_to_camera"`
	// OdomFrame, when set, makes the node publish map → odom_frame (REP
	// 105) from the odom → base transform on /tf at each image's stamp,
	// instead of map → base_frame (the camera's frame without BaseFrame).
	OdomFrame string `mapstructure:"odom_frame"`
	// PublishTF sends the map → odom (or map → base, map → camera)
	// transform on /tf.
	PublishTF bool `mapstructure:"publish_tf" param:"dynamic"`
	// PublishCameraTF sends base_to_camera on /tf_static when the robot's
	// tree has no base → camera transform.
	PublishCameraTF bool `mapstructure:"publish_camera_tf"`
	// TFTolerance is how much older than an image (seconds) the transforms
	// it needs from /tf may be.
	TFTolerance float64 `mapstructure:"tf_tolerance"`
	// TFPublishRate (Hz) re-publishes the last map → odom while the images
	// are late, as AMCL and slam_toolbox do, so that tf2 lookups at the
	// current time keep resolving when the camera stops; 0 publishes it
	// per image only.
	TFPublishRate float64 `mapstructure:"tf_publish_rate" param:"min=0"`
	// TransformTolerance (seconds) post-dates the re-published map → odom
	// (its stamp: the last image's plus the time since at the images'
	// pace, plus this).
	TransformTolerance float64 `mapstructure:"transform_tolerance" param:"min=0"`
	// TFWait is how long (seconds) the node waits at start for the base →
	// camera transform on /tf or /tf_static when BaseToCamera is not set.
	TFWait float64 `mapstructure:"tf_wait"`

	// ConfThreshold keeps cloud points whose depth confidence is above it.
	ConfThreshold float64 `mapstructure:"conf_threshold" param:"min=0,dynamic"`
	// CloudStride takes every Nth pixel in both directions for the clouds.
	CloudStride int `mapstructure:"cloud_stride" param:"min=1"`
	// MapVoxel is the voxel edge of the accumulated map in metres.
	MapVoxel float64 `mapstructure:"map_voxel" param:"positive"`
	// Output is what `lingbotmap run` writes besides the trajectory and the
	// map; the node ignores it.
	Output output.Settings `mapstructure:",squash"`
	// PublishGrid sends the nav_msgs/OccupancyGrid on /map (what nav2
	// reads), projected from the z-up map at the map rate.
	PublishGrid bool `mapstructure:"publish_grid"`
	// GridResolution is a grid cell's edge (map units: metres once the
	// metric scale is known).
	GridResolution float64 `mapstructure:"grid_resolution"`
	// GridMinZ and GridMaxZ bound the obstacle band: map points at these
	// heights (z up, from the first frame's base) are obstacles.
	GridMinZ float64 `mapstructure:"grid_min_z"`
	GridMaxZ float64 `mapstructure:"grid_max_z"`
	// GridFloorZ is the lowest floor height: points from it up to the band
	// mark their cells free.
	GridFloorZ float64 `mapstructure:"grid_floor_z"`
	// GridMinHits is the map points a cell needs to be an obstacle.
	GridMinHits int `mapstructure:"grid_min_hits"`
	// GridRayRange is how far cells are marked free from the cameras
	// towards the obstacles they saw (0: not at all).
	GridRayRange float64 `mapstructure:"grid_ray_range"`
	// GridExtent fixes the grid: "x y width height" (the lower-left corner
	// and the size, map units); empty fits it around the map.
	GridExtent string `mapstructure:"grid_extent"`
	// OdometryIn is the frame of ~odom's pose: "map" or "odom" (odom_frame,
	// through the last map → odom).
	OdometryIn string `mapstructure:"odometry_in"`
	// OdomPoseVariance and OdomTwistVariance are the diagonal of ~odom's
	// pose and twist covariances (nav2 and robot_localization want them
	// non-zero).
	OdomPoseVariance  float64 `mapstructure:"odom_pose_variance"`
	OdomTwistVariance float64 `mapstructure:"odom_twist_variance"`
	// MapRate is the most map messages per second.
	MapRate float64 `mapstructure:"map_rate" param:"positive,dynamic"`
	// MaxPathLength caps the poses kept in ~path and saved by ~save_map
	// (0 = unbounded: the trajectory then grows with every frame).
	MaxPathLength int `mapstructure:"max_path_length" param:"min=0"`
	// DiagnosticsRate is /diagnostics messages per second.
	DiagnosticsRate float64 `mapstructure:"diagnostics_rate" param:"positive,dynamic"`
	// SaveDir is where ~save_map writes when the ~save_dir parameter is unset.
	SaveDir string `mapstructure:"save_dir" param:"dynamic"`
	// SessionSaveEvery, when positive, saves the session into save_dir as
	// ~save_session does every that many processed frames (0 = never).
	SessionSaveEvery int `mapstructure:"session_save_every" param:"min=0"`
	// Localization keeps the map as it is (one loaded with --resume or
	// ~load_map): frames are still tracked and their poses, odometry, TF,
	// clouds and depth published, but their points no longer go into the
	// voxel map, so ~map, /map and ~save_map's map.ply stay the loaded map;
	// once a session is loaded the engine takes no more keyframes either
	// (engine.Config.Localize): every frame is localized against the
	// loaded cache, which never grows and whose window never changes.
	Localization bool `mapstructure:"localization"`
	// MasterCheckInterval is how often (seconds) the node checks that the
	// ROS master still knows it, to re-register after a master restart.
	MasterCheckInterval float64 `mapstructure:"master_check_interval" param:"positive"`
	// CloudReliability is the ROS 2 reliability of ~cloud and ~map:
	// "reliable" or "best_effort" (multi-megabyte clouds over a lossy link
	// or with small socket buffers; readers must then ask for best effort).
	CloudReliability string `mapstructure:"cloud_reliability" param:"oneof=reliable|best_effort"`
	// ROS2GidSize is the size of rmw_dds_common/msg/Gid in the
	// ros_discovery_info the ROS 2 node writes: 16 (Iron and later), 24
	// (Humble) or 0 to follow ROS_DISTRO.
	ROS2GidSize int `mapstructure:"ros2_gid_size"`
	// Replay, for tests and demos, replays a golden case's reference outputs
	// (a directory with outputs.safetensors) instead of running the model.
	Replay string `mapstructure:"replay"`
	// Scale is the metric scale: its source and the estimators' tolerances
	// (engine/scale).
	Scale scale.Settings `mapstructure:"scale"`
}

// DefaultConfig holds the built-in defaults; config/lingbotmap.yaml repeats
// them and a test keeps the two equal.
func DefaultConfig() Config {
	// The node maps a live camera without end: windowed mode (the
	// reference's window of 64 slots) keeps memory and the time per frame
	// repeating per window, where streaming mode would stop mapping at
	// max_frames; live windows publish every pose at once and warm the next
	// window up beside the current one. Their overlap is 32, not the
	// reference's 16: a window then holds at most 40 frames' pages and its
	// successor's warm-up spreads over 24 frames, so that no frame of a
	// 30 FPS camera waits behind the model (engine/pipeline/RECORD.md). run,
	// bench and verify keep the reference's streaming schedule
	// (engine.DefaultConfig).
	e := engine.DefaultConfig()
	e.Windowed = true
	e.WindowMode = engine.WindowLive
	e.OverlapSize = 32
	grid := occgrid.DefaultConfig()
	return Config{
		Engine:              e,
		ImageTransport:      "raw",
		QueueSize:           4,
		QueuePolicy:         "latest",
		MapFrame:            "map",
		PublishTF:           true,
		PublishCameraTF:     true,
		TFTolerance:         0.1,
		TFPublishRate:       20,
		TransformTolerance:  0.1,
		TFWait:              2,
		ConfThreshold:       1.5,
		CloudStride:         1,
		MapVoxel:            0.05,
		Output:              output.DefaultSettings(),
		PublishGrid:         true,
		GridResolution:      grid.Resolution,
		GridMinZ:            grid.MinZ,
		GridMaxZ:            grid.MaxZ,
		GridFloorZ:          grid.FloorZ,
		GridMinHits:         grid.MinHits,
		GridRayRange:        grid.RayRange,
		OdometryIn:          "map",
		OdomPoseVariance:    0.01,
		OdomTwistVariance:   0.01,
		MapRate:             1,
		MaxPathLength:       18000,
		DiagnosticsRate:     1,
		SaveDir:             "lingbotmap_map",
		MasterCheckInterval: 1,
		CloudReliability:    "reliable",
		Scale:               scale.DefaultSettings(),
	}
}

// Validate names the first parameters that are out of range.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("parameter '%s' %s", key, fmt.Sprintf(format, args...)))
	}
	if err := c.Engine.Validate(); err != nil {
		errs = append(errs, err)
	} else if c.Localization && c.Engine.Windowed && c.Engine.WindowMode == engine.WindowReference {
		bad("localization", "needs window_mode %s (or no windows): %s windows hold results back until a next window, which localization never starts", engine.WindowLive, engine.WindowReference)
	}
	if err := c.Scale.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Scale.Source == scale.SourceOdometry && c.Scale.OdomTopic == "" && c.OdomFrame == "" {
		bad("odom_frame", "must name the odometry frame for scale.source odometry from /tf (or set scale.odom_topic)")
	}
	switch c.ImageTransport {
	case "raw", "compressed", "both":
	default:
		bad("image_transport", "must be raw, compressed or both, not %q", c.ImageTransport)
	}
	if c.SessionSaveEvery < 0 {
		bad("session_save_every", "must be ≥ 0 (0 = never), not %d", c.SessionSaveEvery)
	}
	if c.QueueSize < 1 {
		bad("queue_size", "must be ≥ 1, not %d", c.QueueSize)
	}
	if _, err := ParsePolicy(c.QueuePolicy); err != nil {
		bad("queue_policy", "must be latest or all, not %q", c.QueuePolicy)
	}
	if !validFrameID(c.MapFrame) || c.MapFrame == "" {
		bad("map_frame", "must be a non-empty frame id without spaces, not %q", c.MapFrame)
	}
	if !validFrameID(c.CameraFrame) {
		bad("camera_frame", "must be a frame id without spaces, not %q", c.CameraFrame)
	}
	if !validFrameID(c.BaseFrame) {
		bad("base_frame", "must be a frame id without spaces, not %q", c.BaseFrame)
	}
	if c.BaseToCamera != "" {
		if _, err := geom.ParseTransform(c.BaseToCamera); err != nil {
			bad("base_to_camera", "%v", err)
		}
	}
	if !validFrameID(c.OdomFrame) {
		bad("odom_frame", "must be a frame id without spaces, not %q", c.OdomFrame)
	}
	if c.OdomFrame != "" && (c.OdomFrame == c.MapFrame || c.OdomFrame == c.BaseFrame) {
		bad("odom_frame", "must differ from map_frame and base_frame, not %q", c.OdomFrame)
	}
	if !(c.TFTolerance >= 0) || math.IsInf(c.TFTolerance, 0) {
		bad("tf_tolerance", "must be a finite number ≥ 0 seconds, not %g", c.TFTolerance)
	}
	if !(c.TFPublishRate >= 0) || math.IsInf(c.TFPublishRate, 0) {
		bad("tf_publish_rate", "must be a finite rate ≥ 0 Hz (0: per image only), not %g", c.TFPublishRate)
	}
	if !(c.TransformTolerance >= 0) || math.IsInf(c.TransformTolerance, 0) {
		bad("transform_tolerance", "must be a finite number ≥ 0 seconds, not %g", c.TransformTolerance)
	}
	if !(c.TFWait >= 0) || math.IsInf(c.TFWait, 0) {
		bad("tf_wait", "must be a finite number ≥ 0 seconds, not %g", c.TFWait)
	}
	if !(c.ConfThreshold >= 0) || math.IsInf(c.ConfThreshold, 0) {
		bad("conf_threshold", "must be a finite number ≥ 0, not %g", c.ConfThreshold)
	}
	if c.CloudStride < 1 {
		bad("cloud_stride", "must be ≥ 1, not %d", c.CloudStride)
	}
	if !(c.MapVoxel >= mapio.MinVoxelSize) || math.IsInf(c.MapVoxel, 0) {
		bad("map_voxel", "must be a finite number ≥ %g metres, not %g (voxel indices are 32-bit: a smaller voxel leaves most points out of the map)", mapio.MinVoxelSize, c.MapVoxel)
	}
	if _, err := c.GridConfig(); err != nil {
		bad("grid_*", "%v", err)
	}
	switch c.OdometryIn {
	case "map":
	case "odom":
		if c.OdomFrame == "" {
			bad("odometry_in", "odom needs odom_frame")
		}
	default:
		bad("odometry_in", "must be map or odom, not %q", c.OdometryIn)
	}
	if !(c.OdomPoseVariance > 0) || math.IsInf(c.OdomPoseVariance, 0) {
		bad("odom_pose_variance", "must be a finite number > 0, not %g", c.OdomPoseVariance)
	}
	if !(c.OdomTwistVariance > 0) || math.IsInf(c.OdomTwistVariance, 0) {
		bad("odom_twist_variance", "must be a finite number > 0, not %g", c.OdomTwistVariance)
	}
	if !(c.MapRate > 0) || math.IsInf(c.MapRate, 0) {
		bad("map_rate", "must be > 0 per second, not %g", c.MapRate)
	}
	if c.MaxPathLength < 0 {
		bad("max_path_length", "must be ≥ 0, not %d", c.MaxPathLength)
	}
	if !(c.DiagnosticsRate > 0) || math.IsInf(c.DiagnosticsRate, 0) {
		bad("diagnostics_rate", "must be > 0 per second, not %g", c.DiagnosticsRate)
	}
	if c.SaveDir == "" {
		bad("save_dir", "must not be empty")
	}
	if !(c.MasterCheckInterval > 0) || math.IsInf(c.MasterCheckInterval, 0) {
		bad("master_check_interval", "must be > 0 seconds, not %g", c.MasterCheckInterval)
	}
	switch c.CloudReliability {
	case "reliable", "best_effort":
	default:
		bad("cloud_reliability", "must be reliable or best_effort, not %q", c.CloudReliability)
	}
	switch c.ROS2GidSize {
	case 0, 16, 24:
	default:
		bad("ros2_gid_size", "must be 0 (follow ROS_DISTRO), 16 (Iron and later) or 24 (Humble), not %d", c.ROS2GidSize)
	}
	return errors.Join(errs...)
}

// GridConfig is the occupancy grid's configuration from the grid_*
// settings.
func (c Config) GridConfig() (occgrid.Config, error) {
	g := occgrid.DefaultConfig()
	g.Resolution, g.MinZ, g.MaxZ, g.FloorZ = c.GridResolution, c.GridMinZ, c.GridMaxZ, c.GridFloorZ
	g.MinHits, g.RayRange = c.GridMinHits, c.GridRayRange
	if c.GridExtent != "" {
		var x, y, w, h float64
		if n, err := fmt.Sscanf(c.GridExtent, "%g %g %g %g", &x, &y, &w, &h); err != nil || n != 4 ||
			math.IsNaN(x+y+w+h) || math.IsInf(x+y+w+h, 0) || !(w > 0) || !(h > 0) {
			return g, fmt.Errorf("grid_extent must be \"x y width height\" (finite, width and height > 0), not %q", c.GridExtent)
		}
		g.Origin = &[2]float64{x, y}
		g.Width, g.Height = int(math.Ceil(w/g.Resolution)), int(math.Ceil(h/g.Resolution))
	}
	return g, g.Check()
}

func validFrameID(s string) bool {
	return !strings.ContainsAny(s, " \t\n")
}

// parseInts reads integers separated by spaces or commas.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, t := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '[' || r == ']' }) {
		i, err := strconv.Atoi(t)
		if err != nil {
			return nil, err
		}
		out = append(out, i)
	}
	return out, nil
}

// BindFlags registers the node's flags on fs: --config and one per setting,
// named by config.FlagName (--device, --keyframe-interval, --queue-policy,
// --cuda-pdl). Pass the binding to LoadConfig after parsing.
func BindFlags(fs *pflag.FlagSet) (*config.Binding, error) {
	def := DefaultConfig()
	return config.Bind(fs, &def, nil)
}

// LoadConfig layers, lowest first: built-in defaults, the --config file,
// LINGBOTMAP_* environment variables and the flags given, and validates the
// result. ROS parameters come later, from ApplyParams. Unknown keys and bad
// values are errors that name the key.
func LoadConfig(b *config.Binding) (Config, config.Sources, error) {
	var c Config
	src, err := b.Load(&c)
	if err != nil {
		return Config{}, src, err
	}
	if err := c.Validate(); err != nil {
		return Config{}, src, fmt.Errorf("configuration: %w", err)
	}
	return c, src, nil
}

// ParamSource reads the middleware's parameters by configuration key
// ("weights", "cuda.pdl"); each transport maps the key onto its own parameter
// names (ROS 1: the private parameter ~cuda/pdl, config.ParamName).
type ParamSource interface {
	IsSet(key string) (bool, error)
	Bool(key string) (bool, error)
	Int(key string) (int, error)
	Float64(key string) (float64, error)
	String(key string) (string, error)
}

// ParamNamer is what a ParamSource may also offer so that messages name the
// parameter as its users write it (ROS 1: "~cuda/pdl").
type ParamNamer interface {
	ParamName(key string) string
}

// paramName is key as p's users name it.
func paramName(p ParamSource, key string) string {
	if pn, ok := p.(ParamNamer); ok {
		return pn.ParamName(key)
	}
	return key
}

// ApplyParams overrides c with the parameters of p that are set, and returns
// the keys it took. Integers are accepted for float settings, as rosparam
// stores "1" as an int.
func ApplyParams(c Config, p ParamSource) (Config, []string, error) {
	var taken []string
	for _, f := range config.Settings(&c) {
		key, name := f.Key, paramName(p, f.Key)
		set, err := p.IsSet(key)
		if err != nil {
			return c, taken, fmt.Errorf("reading parameter %s: %w", name, err)
		}
		if !set {
			continue
		}
		switch f.Value.Kind() {
		case reflect.Bool:
			b, err := p.Bool(key)
			if err != nil {
				return c, taken, fmt.Errorf("%w: parameter %s must be a bool: %w", ErrSettings, name, err)
			}
			f.Value.SetBool(b)
		case reflect.Int, reflect.Int64:
			i, err := p.Int(key)
			if err != nil {
				return c, taken, fmt.Errorf("%w: parameter %s must be an integer: %w", ErrSettings, name, err)
			}
			f.Value.SetInt(int64(i))
		case reflect.Float64:
			x, err := p.Float64(key)
			if err != nil {
				i, ierr := p.Int(key)
				if ierr != nil {
					return c, taken, fmt.Errorf("%w: parameter %s must be a number: %w", ErrSettings, name, err)
				}
				x = float64(i)
			}
			f.Value.SetFloat(x)
		case reflect.String:
			s, err := p.String(key)
			if err != nil {
				return c, taken, fmt.Errorf("%w: parameter %s must be a string: %w", ErrSettings, name, err)
			}
			f.Value.SetString(s)
		case reflect.Slice:
			// Parameter servers may hold scalars only (ROS 1 through
			// goroslib), so lists come as strings such as "4 11 17 23".
			s, err := p.String(key)
			if err != nil {
				return c, taken, fmt.Errorf("%w: parameter %s must be a string of integers like \"4 11 17 23\": %w", ErrSettings, name, err)
			}
			ints, err := parseInts(s)
			if err != nil || f.Value.Type() != reflect.TypeOf(ints) {
				return c, taken, fmt.Errorf("%w: parameter %s must be a string of integers like \"4 11 17 23\", not %q", ErrSettings, name, s)
			}
			f.Value.Set(reflect.ValueOf(ints))
		default:
			continue
		}
		taken = append(taken, f.Key)
	}
	if err := c.Validate(); err != nil {
		return c, taken, fmt.Errorf("%w: after applying the parameters: %w", ErrSettings, err)
	}
	return c, taken, nil
}

// ErrSettings marks an error in the settings themselves (a parameter of the
// wrong type, a value out of range), which the program reports as a usage
// error rather than a failure of the run.
var ErrSettings = errors.New("bad settings")
