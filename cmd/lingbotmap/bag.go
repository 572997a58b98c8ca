package main

import (
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // register the decoders image.Decode needs
	_ "image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
	"github.com/spf13/cobra"

	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
	"github.com/lingbotmap/lingbotmap/msgs/bag"
	"github.com/lingbotmap/lingbotmap/msgs/mcapbag"
)

// bagOptions holds the flags of `lingbotmap bag`.
type bagOptions struct {
	images     string
	out        string
	format     string
	topic      string
	frameID    string
	rate       float64
	start      float64
	compressed bool
	firstK     int
	stride     int
}

func defaultBagOptions() *bagOptions {
	return &bagOptions{
		out:     "frames.bag",
		format:  "bag",
		topic:   "/camera/image_raw",
		frameID: "camera",
		rate:    10,
		start:   1700000000,
		stride:  1,
	}
}

func newBagCmd() *cobra.Command { return newBagCmdWith(runBag) }

// newBagCmdWith lets tests check flag parsing without running the command.
func newBagCmdWith(runF func(ctx context.Context, o *bagOptions, out io.Writer) error) *cobra.Command {
	o := defaultBagOptions()
	cmd := &cobra.Command{
		Use:   "bag --images DIR [--out frames.bag] [--format bag|mcap]",
		Short: "Write a ROS 1 or ROS 2 bag of camera images from a folder of PNG/JPEG files",
		Long: `bag turns the sorted *.png / *.jpg files of a folder into a bag that a bag
player can feed to the node: one sensor_msgs/Image (rgb8; transparent pixels
composited over white) per file, or with --compressed one
sensor_msgs/CompressedImage holding the file's bytes. Frame i is stamped
start + i/frame-rate (header and record time alike).

--format bag (the default) writes a ROS 1 bag (format 2.0) for rosbag play,
with header seq i. --format mcap writes a ROS 2 bag in MCAP, rosbag2's default
storage (profile ros2, CDR messages sensor_msgs/msg/Image or CompressedImage,
ros2msg schemas, reliable QoS and the REP 2011 type hash in the channel
metadata, and the rosbag2 metadata record ros2 bag info reads), for ros2 bag play;
the default output name is then frames.mcap.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.format == "mcap" && !cmd.Flags().Changed("out") {
				o.out = "frames.mcap"
			}
			if err := o.validate(); err != nil {
				return &exitCodeError{code: exitUsage, err: err}
			}
			return runF(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	cmd.AddCommand(newBagPlayCmd())
	f := cmd.Flags()
	f.StringVar(&o.images, "images", "", "folder of *.png / *.jpg frames, used in name order (required)")
	f.StringVar(&o.out, "out", o.out, "bag file to write (frames.mcap with --format mcap)")
	f.StringVar(&o.format, "format", o.format, "bag format: bag (ROS 1, rosbag) or mcap (ROS 2, rosbag2)")
	f.StringVar(&o.topic, "topic", o.topic, "topic of the images (--compressed does not append /compressed)")
	f.StringVar(&o.frameID, "frame-id", o.frameID, "header frame_id")
	f.Float64Var(&o.rate, "frame-rate", o.rate, "frames per second, for the stamps")
	// --rate was this flag's name; bag play's --rate is a speed factor
	f.Float64Var(&o.rate, "rate", o.rate, "")
	if err := f.MarkDeprecated("rate", "use --frame-rate (bag play --rate is a speed factor)"); err != nil {
		panic(err) // the flag is defined just above
	}
	f.Float64Var(&o.start, "start", o.start, "stamp of the first frame, in seconds since 1970")
	f.BoolVar(&o.compressed, "compressed", false, "write sensor_msgs/CompressedImage with the files' bytes instead of raw rgb8")
	f.IntVar(&o.firstK, "first-k", 0, "use only the first K files (0 = all), before --stride")
	f.IntVar(&o.stride, "stride", o.stride, "use every Nth file")
	return cmd
}

func (o *bagOptions) validate() error {
	var errs []error
	if o.images == "" {
		errs = append(errs, errors.New("'images' is required: the folder of frames"))
	}
	if o.out == "" {
		errs = append(errs, errors.New("'out' is empty"))
	}
	if o.format != "bag" && o.format != "mcap" {
		errs = append(errs, fmt.Errorf("'format' must be bag or mcap, not %q", o.format))
	}
	if o.topic == "" {
		errs = append(errs, errors.New("'topic' is empty"))
	}
	if !(o.rate > 0) || math.IsInf(o.rate, 0) {
		errs = append(errs, fmt.Errorf("'frame-rate' must be a positive number of frames per second, not %v", o.rate))
	}
	if !(o.start >= 0 && o.start < math.MaxUint32) {
		errs = append(errs, fmt.Errorf("'start' must be between 0 and %d seconds, not %v", uint32(math.MaxUint32), o.start))
	}
	if o.firstK < 0 {
		errs = append(errs, fmt.Errorf("'first-k' must be ≥ 0, not %d", o.firstK))
	}
	if o.stride < 1 {
		errs = append(errs, fmt.Errorf("'stride' must be ≥ 1, not %d", o.stride))
	}
	return errors.Join(errs...)
}

// imageFiles lists the frames of dir in name order, then applies first-k and stride.
func imageFiles(dir string, firstK, stride int) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the image folder: %w", err)
	}
	var files []string
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if !e.IsDir() && (ext == ".png" || ext == ".jpg" || ext == ".jpeg") {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	slices.Sort(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.png or *.jpg files in %s", dir)
	}
	if firstK > 0 && firstK < len(files) {
		files = files[:firstK]
	}
	var picked []string
	for i := 0; i < len(files); i += stride {
		picked = append(picked, files[i])
	}
	return picked, nil
}

func runBag(ctx context.Context, o *bagOptions, out io.Writer) (err error) {
	files, err := imageFiles(o.images, o.firstK, o.stride)
	if err != nil {
		return err
	}
	// a killed bag run's unfinished file for the same path
	if gone, err := atomicfile.RemoveStaleOf(o.out); err != nil {
		return err
	} else if len(gone) > 0 {
		fmt.Fprintf(out, "removed %d unfinished temporary file(s) a stopped bag run left: %s\n", len(gone), strings.Join(gone, ", "))
	}
	w, err := createBag(o.format, o.out)
	if err != nil {
		return err
	}
	// The bag appears at its path only when complete: an error or an
	// interruption discards it.
	defer func() {
		if err != nil {
			if aerr := w.Abort(); aerr != nil {
				err = errors.Join(err, fmt.Errorf("discarding the unfinished bag: %w", aerr))
			}
			return
		}
		err = w.Close()
	}()
	start := time.Unix(0, 0).Add(time.Duration(math.Round(o.start * 1e9)))
	var last time.Time
	for i, path := range files {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("stopped after %d of %d frames: %w", i, len(files), err)
		}
		stamp := start.Add(time.Duration(math.Round(float64(i) / o.rate * 1e9)))
		hdr := std_msgs.Header{Seq: uint32(i), Stamp: stamp, FrameId: o.frameID}
		var msg any
		if o.compressed {
			msg, err = compressedFrame(hdr, path)
		} else {
			msg, err = rawFrame(hdr, path)
		}
		if err != nil {
			return err
		}
		if err := w.Write(o.topic, stamp, msg); err != nil {
			return fmt.Errorf("writing frame %s: %w", path, err)
		}
		last = stamp
	}
	kind := "sensor_msgs/Image rgb8"
	if o.compressed {
		kind = "sensor_msgs/CompressedImage"
	}
	if o.format == "mcap" {
		kind = "ROS 2 " + strings.Replace(kind, "/", "/msg/", 1) + ", MCAP"
	}
	fmt.Fprintf(out, "wrote %d frames (%s) on %s to %s, stamps %.3f to %.3f s\n",
		len(files), kind, o.topic, o.out, float64(start.UnixNano())/1e9, float64(last.UnixNano())/1e9)
	return nil
}

// bagWriter is what both bag formats offer: Close puts the finished file
// at its path, Abort discards it.
type bagWriter interface {
	Write(topic string, t time.Time, msg any) error
	Close() error
	Abort() error
}

func createBag(format, path string) (bagWriter, error) {
	if format == "mcap" {
		return mcapbag.Create(path)
	}
	return bag.Create(path)
}

func compressedFrame(hdr std_msgs.Header, path string) (*sensor_msgs.CompressedImage, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading frame: %w", err)
	}
	format := "jpeg"
	if strings.EqualFold(filepath.Ext(path), ".png") {
		format = "png"
	}
	return &sensor_msgs.CompressedImage{Header: hdr, Format: format, Data: data}, nil
}

func rawFrame(hdr std_msgs.Header, path string) (*sensor_msgs.Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading frame: %w", err)
	}
	defer f.Close()
	img, _, err := image.Decode(f)
	if err != nil {
		return nil, fmt.Errorf("decoding frame %s: %w", path, err)
	}
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	data := make([]byte, 0, 3*w*h)
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
			data = append(data, overWhite(c.R, c.A), overWhite(c.G, c.A), overWhite(c.B, c.A))
		}
	}
	return &sensor_msgs.Image{Header: hdr, Height: uint32(h), Width: uint32(w), Encoding: "rgb8", Step: uint32(3 * w), Data: data}, nil
}

// overWhite composites a straight-alpha channel value over white, as the
// reference's preprocessing does for RGBA inputs.
func overWhite(c, a uint8) uint8 {
	return uint8((uint32(c)*uint32(a) + 255*(255-uint32(a)) + 127) / 255)
}
