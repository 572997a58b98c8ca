package engine

import (
	"errors"
	"fmt"

	"github.com/lingbotmap/lingbotmap/engine/preprocess"
)

// Bounds of the model input size (the preprocessed frame, width × height in
// pixels, a multiple of the patch size). An input beyond them is refused
// before anything is allocated, instead of ending in an out-of-memory crash.
const (
	// inputPatch is the patch size of every LingBot-Map checkpoint.
	inputPatch = 14
	// MaxGridSide is the largest patch grid side: the reference's 3D RoPE
	// (WanRotaryPosEmbed, max_seq_len 1024) tabulates 1024 positions per
	// axis, and patch row r sits at position 6 + r after the 6 special
	// tokens, so a grid side beyond 1018 has no trained position (14 252
	// pixels at patch 14).
	MaxGridSide = 1024 - 6
	// MaxPatches bounds the patches of one frame, for memory: each frame's
	// K and V of the full model take 24 blocks × 2 × P × 1024 × 4 bytes of
	// float32 cache (805 MB a frame at P = 4096, 1.6 GB at 8192; a cache of
	// the default 88 frames then needs 71 or 142 GB), and frame attention
	// compares all P² token pairs. 8192 patches is 8.2 times the reference's
	// 518×378 frame (999 patches): 1260×1260 or 2072×770 pixels.
	MaxPatches = 8192
)

// ErrInputSize marks a model input size outside the bounds above.
var ErrInputSize = errors.New("model input size out of range")

// CheckInputSize checks a model input size (pixels, after preprocessing)
// against MaxGridSide and MaxPatches; the error wraps ErrInputSize and
// says which bound is exceeded and by how much. Commands call it on their
// sizes before they allocate frames or start the engine.
func CheckInputSize(width, height int) error {
	if width < inputPatch || height < inputPatch {
		return fmt.Errorf("%w: %d×%d is smaller than one %d-pixel patch", ErrInputSize, width, height, inputPatch)
	}
	gw, gh := width/inputPatch, height/inputPatch
	if gw > MaxGridSide || gh > MaxGridSide {
		return fmt.Errorf("%w: %d×%d pixels make a %d×%d patch grid, beyond the %d patches per side that the model's position table covers (at most %d pixels a side)",
			ErrInputSize, width, height, gw, gh, MaxGridSide, MaxGridSide*inputPatch)
	}
	if p := gw * gh; p > MaxPatches {
		return fmt.Errorf("%w: %d×%d pixels make %d patches a frame, more than the %d allowed (the full model's KV cache alone would take %.1f GB per cached frame); use a smaller size, such as the reference's 518 pixels wide",
			ErrInputSize, width, height, p, MaxPatches, float64(24*2*(p+6)*1024*4)/1e9)
	}
	return nil
}

// CheckFrameSize is CheckInputSize for the model input that a camera frame
// of frameW×frameH pixels becomes at model width imageWidth: resized to
// that width keeping the aspect ratio, portrait frames cropped square.
func CheckFrameSize(frameW, frameH, imageWidth int) error {
	w, h, err := ModelInputSize(frameW, frameH, imageWidth)
	if err != nil {
		return err
	}
	return CheckInputSize(w, h)
}

// ModelInputSize is the model input that a camera frame of frameW×frameH
// pixels becomes at model width imageWidth: resized to that width keeping
// the aspect ratio, portrait frames cropped square. A stream runs at the
// size of its first frame; frames of other sizes that give the same model
// input are taken, others are not.
func ModelInputSize(frameW, frameH, imageWidth int) (w, h int, err error) {
	w, h, err = preprocess.TargetSize(frameW, frameH, imageWidth, inputPatch)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", ErrInputSize, err)
	}
	return w, min(h, w), nil
}
