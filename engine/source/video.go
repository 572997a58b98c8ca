package source

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"io"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"sync"

	"github.com/lingbotmap/lingbotmap/engine"
)

// ErrNoFFmpeg is returned when a video is given but ffmpeg is not installed.
var ErrNoFFmpeg = errors.New("ffmpeg not found on PATH: install it (apt-get install ffmpeg) or extract frames to a folder")

// Video decodes a video file with ffmpeg, streaming raw RGBA frames over a
// pipe, so that only one frame is in memory at a time. Frame i of the video
// is stamped i/fps with the video's average frame rate. As in the reference,
// the video is first sampled at Options.SampleFPS (every round(fps /
// SampleFPS)-th frame; all frames when 0), then FirstK and Stride apply to
// the sampled frames. Display-rotation metadata is ignored (-noautorotate):
// frames come as they are stored (see Options.RotateCW90).
type Video struct {
	path          string
	width, height int
	fps           float64
	total         int // selected frames, -1 if unknown
	opt           Options

	cmd      *exec.Cmd
	out      *bufio.Reader
	stderr   *tailBuffer
	index    int // input frames read so far
	interval int // sampling interval in input frames
	done     bool
	cancel   context.CancelFunc
}

// OpenVideo probes the video with ffprobe and starts ffmpeg. The decoder runs
// until the last frame is read, Close is called or ctx ends.
func OpenVideo(ctx context.Context, path string, opt Options) (*Video, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	ffmpeg, err := exec.LookPath("ffmpeg")
	if err != nil {
		return nil, ErrNoFFmpeg
	}
	ffprobe, err := exec.LookPath("ffprobe")
	if err != nil {
		return nil, fmt.Errorf("ffprobe not found on PATH (it comes with ffmpeg): %w", ErrNoFFmpeg)
	}
	v := &Video{path: path, opt: opt, total: -1}
	if err := v.probe(ctx, ffprobe); err != nil {
		return nil, err
	}
	args := []string{"-nostdin", "-hide_banner", "-v", "error", "-noautorotate", "-i", path, "-map", "0:v:0"}
	if opt.FirstK > 0 {
		args = append(args, "-frames:v", strconv.Itoa(opt.FirstK*v.interval))
	}
	args = append(args, "-f", "rawvideo", "-pix_fmt", "rgba", "pipe:1")
	cctx, cancel := context.WithCancel(ctx)
	v.cancel = cancel
	v.cmd = exec.CommandContext(cctx, ffmpeg, args...)
	v.stderr = &tailBuffer{max: 4096}
	v.cmd.Stderr = v.stderr
	pipe, err := v.cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("video: %w", err)
	}
	if err := v.cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("video: start ffmpeg: %w", err)
	}
	v.out = bufio.NewReaderSize(pipe, 1<<20)
	return v, nil
}

// probe reads the size, frame rate and frame count of the first video stream.
func (v *Video) probe(ctx context.Context, ffprobe string) error {
	cmd := exec.CommandContext(ctx, ffprobe, "-v", "error", "-select_streams", "v:0",
		"-show_entries", "stream=width,height,avg_frame_rate,r_frame_rate,nb_frames", "-of", "json", v.path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("video %s: ffprobe cannot read it: %s: %w", v.path, strings.TrimSpace(stderr.String()), err)
	}
	var info struct {
		Streams []struct {
			Width        int    `json:"width"`
			Height       int    `json:"height"`
			AvgFrameRate string `json:"avg_frame_rate"`
			RFrameRate   string `json:"r_frame_rate"`
			NbFrames     string `json:"nb_frames"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return fmt.Errorf("video %s: unreadable ffprobe output: %w", v.path, err)
	}
	if len(info.Streams) == 0 {
		return fmt.Errorf("video %s: no video stream in the file", v.path)
	}
	s := info.Streams[0]
	if s.Width <= 0 || s.Height <= 0 || s.Width > 1<<14 || s.Height > 1<<14 {
		return fmt.Errorf("video %s: unsupported frame size %d×%d", v.path, s.Width, s.Height)
	}
	v.width, v.height = s.Width, s.Height
	v.fps = parseRate(s.AvgFrameRate)
	if v.fps == 0 {
		v.fps = parseRate(s.RFrameRate)
	}
	if v.fps == 0 {
		v.fps = v.opt.FrameRate
	}
	v.interval = 1
	if v.opt.SampleFPS > 0 {
		// The reference samples every round(src_fps / fps)-th frame.
		v.interval = max(1, int(math.RoundToEven(v.fps/v.opt.SampleFPS))) // Python round()
	}
	if n, err := strconv.Atoi(s.NbFrames); err == nil && n > 0 && n < 1<<40 {
		v.total = v.opt.selected((n + v.interval - 1) / v.interval)
	}
	return nil
}

// parseRate reads ffprobe's "30000/1001"; 0 when unknown.
func parseRate(s string) float64 {
	num, den, ok := strings.Cut(s, "/")
	if !ok {
		den = "1"
	}
	a, err1 := strconv.ParseFloat(num, 64)
	b, err2 := strconv.ParseFloat(den, 64)
	if err1 != nil || err2 != nil || !(a > 0) || !(b > 0) || a/b > 1e6 {
		return 0
	}
	return a / b
}

// Next reads frames from ffmpeg until the next selected one.
func (v *Video) Next(ctx context.Context) (engine.Frame, error) {
	for {
		if err := ctx.Err(); err != nil {
			return engine.Frame{}, err
		}
		if v.done {
			return engine.Frame{}, io.EOF
		}
		keep, done := v.index%v.interval == 0, false
		if keep {
			keep, done = v.opt.keep(v.index / v.interval)
		}
		if done {
			return engine.Frame{}, v.finish(true)
		}
		size := 4 * v.width * v.height
		if !keep {
			n, err := io.CopyN(io.Discard, v.out, int64(size))
			if err != nil {
				return engine.Frame{}, v.readEnd(n, err)
			}
			v.index++
			continue
		}
		// A new image per frame: the engine may hold on to it (scale frames).
		img := image.NewRGBA(image.Rect(0, 0, v.width, v.height))
		n, err := io.ReadFull(v.out, img.Pix)
		if err != nil {
			return engine.Frame{}, v.readEnd(int64(n), err)
		}
		i := v.index
		v.index++
		return v.opt.frame(uint64(i), stampTime(float64(i)/v.fps), img)
	}
}

// readEnd turns the end of ffmpeg's output into io.EOF or the decoder's error.
func (v *Video) readEnd(n int64, err error) error {
	if (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) && n == 0 {
		return v.finish(false)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		if ferr := v.finish(false); ferr != io.EOF {
			return ferr
		}
		return fmt.Errorf("video %s: the decoder stopped in the middle of frame %d", v.path, v.index)
	}
	return fmt.Errorf("video %s: %w", v.path, err)
}

// finish waits for ffmpeg and reports how it ended. stop kills it first
// (all wanted frames are read); its exit status then says nothing.
func (v *Video) finish(stop bool) error {
	if v.done {
		return io.EOF
	}
	v.done = true
	if stop {
		v.cancel()
		_ = v.cmd.Wait()
		return io.EOF
	}
	err := v.cmd.Wait()
	v.cancel()
	if err != nil {
		return fmt.Errorf("video %s: ffmpeg failed after %d frames: %s: %w", v.path, v.index, v.stderr.String(), err)
	}
	if v.index == 0 {
		return fmt.Errorf("video %s: ffmpeg decoded no frame", v.path)
	}
	return io.EOF
}

// Len is the number of frames to come in all, or -1 if the file does not say.
func (v *Video) Len() int { return v.total }

// Size is the frame size in pixels.
func (v *Video) Size() (int, int) { return v.width, v.height }

// FPS is the frame rate used for the stamps.
func (v *Video) FPS() float64 { return v.fps }

// Describe names the video.
func (v *Video) Describe() string {
	return fmt.Sprintf("video %s (%d×%d, %.3g fps, sampled 1 frame in %d)", v.path, v.width, v.height, v.fps, v.interval)
}

// Close stops ffmpeg.
func (v *Video) Close() error {
	if v.done {
		return nil
	}
	v.done = true
	v.cancel()
	_ = v.cmd.Wait() // killed on purpose; its exit status says nothing
	return nil
}

// tailBuffer keeps the last max bytes written (ffmpeg's error messages).
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
