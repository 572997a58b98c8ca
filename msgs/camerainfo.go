package msgs

import (
	"math"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
)

// CameraInfoK returns the pinhole intrinsics of the image the camera actually
// publishes: K's focal lengths and principal point, adjusted for the region of
// interest and binning as image_geometry does, with the published width and
// height. An uncalibrated camera (K all zero) or nonsense values are an error
// of kind "format" or "size".
func CameraInfoK(ci *sensor_msgs.CameraInfo) (fx, fy, cx, cy float64, w, h int, err error) {
	if ci == nil {
		return 0, 0, 0, 0, 0, 0, decodeErr(KindFormat, "camera_info message is nil")
	}
	k := ci.K
	allZero := true
	for _, v := range k {
		if v != 0 {
			allZero = false
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, 0, 0, 0, 0, 0, decodeErr(KindFormat, "camera_info K has a non-finite entry %v", k)
		}
	}
	if allZero {
		return 0, 0, 0, 0, 0, 0, decodeErr(KindFormat, "camera_info K is all zero: the camera is not calibrated")
	}
	if k[8] != 1 || k[3] != 0 || k[6] != 0 || k[7] != 0 {
		return 0, 0, 0, 0, 0, 0, decodeErr(KindFormat, "camera_info K %v is not an upper-triangular intrinsic matrix with K[2][2]=1", k)
	}
	fx, fy, cx, cy = k[0], k[4], k[2], k[5]
	if fx <= 0 || fy <= 0 {
		return 0, 0, 0, 0, 0, 0, decodeErr(KindFormat, "camera_info focal lengths fx=%g fy=%g must be positive", fx, fy)
	}
	if ci.Width == 0 || ci.Height == 0 || uint64(ci.Width)*uint64(ci.Height) > MaxPixels {
		return 0, 0, 0, 0, 0, 0, decodeErr(KindSize, "camera_info size %dx%d must be positive and at most %d pixels", ci.Width, ci.Height, MaxPixels)
	}
	w, h = int(ci.Width), int(ci.Height)

	// A region of interest crops the full-resolution image before binning.
	roi := ci.Roi
	if roi.Width != 0 || roi.Height != 0 {
		if roi.Width == 0 || roi.Height == 0 ||
			uint64(roi.XOffset)+uint64(roi.Width) > uint64(ci.Width) ||
			uint64(roi.YOffset)+uint64(roi.Height) > uint64(ci.Height) {
			return 0, 0, 0, 0, 0, 0, decodeErr(KindSize, "camera_info roi %dx%d+%d+%d does not fit in %dx%d",
				roi.Width, roi.Height, roi.XOffset, roi.YOffset, ci.Width, ci.Height)
		}
		cx -= float64(roi.XOffset)
		cy -= float64(roi.YOffset)
		w, h = int(roi.Width), int(roi.Height)
	}
	bx, by := max(ci.BinningX, 1), max(ci.BinningY, 1)
	if bx > 1 || by > 1 {
		fx /= float64(bx)
		cx /= float64(bx)
		fy /= float64(by)
		cy /= float64(by)
		w /= int(bx)
		h /= int(by)
		if w == 0 || h == 0 {
			return 0, 0, 0, 0, 0, 0, decodeErr(KindSize, "camera_info binning %dx%d leaves an empty image", bx, by)
		}
	}
	return fx, fy, cx, cy, w, h, nil
}
