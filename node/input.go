package node

import (
	"context"
	"errors"
	"fmt"
	"image"
	"io"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"

	"github.com/lingbotmap/lingbotmap/msgs"
)

// subscribe opens the camera inputs the configuration asks for. Their
// handlers only count and submit the still-encoded message (decoding runs on
// the pipeline's workers); they block on a full queue (policy all) until ctx
// ends.
func (n *Node) subscribe(ctx context.Context) ([]io.Closer, error) {
	var subs []io.Closer
	sub := func(name string, typ any, role Role, handle func(msg any, err error)) error {
		c, err := n.tr.Subscribe(TopicSpec{Name: name, Type: typ, Role: role}, handle)
		if err != nil {
			return fmt.Errorf("node: subscribing to %s: %w", name, err)
		}
		subs = append(subs, c)
		return nil
	}
	var err error
	if n.cfg.ImageTransport != "compressed" {
		err = sub(n.tr.Resolve("image"), &sensor_msgs.Image{}, RoleSensor, func(msg any, err error) {
			n.stats.received.Add(1)
			m, _ := msg.(*sensor_msgs.Image)
			if err == nil && m == nil {
				err = fmt.Errorf("unexpected message %T on the image topic", msg)
			}
			if err != nil {
				n.skip(decodeKind(err), err)
				return
			}
			n.submit(ctx, m.Header, func() (*image.RGBA, error) {
				img, err := msgs.DecodeImage(m)
				if loss, ok := msgs.PrecisionLoss(m.Encoding); ok && err == nil {
					n.noticeOnce("precision_"+m.Encoding, loss)
				}
				return img, err
			})
		})
	}
	if err == nil && n.cfg.ImageTransport != "raw" {
		err = sub(n.compressedTopic(), &sensor_msgs.CompressedImage{}, RoleSensor, func(msg any, err error) {
			n.stats.received.Add(1)
			m, _ := msg.(*sensor_msgs.CompressedImage)
			if err == nil && m == nil {
				err = fmt.Errorf("unexpected message %T on the compressed image topic", msg)
			}
			if err != nil {
				n.skip(decodeKind(err), err)
				return
			}
			n.submit(ctx, m.Header, func() (*image.RGBA, error) { return msgs.DecodeCompressed(m) })
		})
	}
	if err == nil && n.cfg.UseCameraInfo {
		err = sub(n.tr.Resolve("camera_info"), &sensor_msgs.CameraInfo{}, RoleSensor, func(msg any, err error) {
			m, _ := msg.(*sensor_msgs.CameraInfo)
			if err == nil && m == nil {
				err = fmt.Errorf("unexpected message %T on the camera_info topic", msg)
			}
			n.onCameraInfo(m, err)
		})
	}
	if err != nil {
		closeAll(subs)
		return nil, err
	}
	return subs, nil
}

// decodeKind names the kind of a decoding failure for counting and reporting.
func decodeKind(err error) string {
	var de *msgs.DecodeError
	if errors.As(err, &de) {
		return de.Kind
	}
	return "corrupt"
}

// skip counts a rejected input and reports the first of each kind.
func (n *Node) skip(kind string, err error) {
	if n.stats.skip(kind, err) {
		n.log.Warn("skipping input images of this kind (reported once; counted in /diagnostics)", "kind", kind, "reason", err)
	}
}

func (n *Node) onCameraInfo(m *sensor_msgs.CameraInfo, err error) {
	if err != nil {
		n.skip("camera_info", err)
		return
	}
	fx, fy, cx, cy, w, h, err := msgs.CameraInfoK(m)
	if err != nil {
		n.skip("camera_info", err)
		return
	}
	n.stats.setCameraInfo(fmt.Sprintf("fx=%.2f fy=%.2f cx=%.2f cy=%.2f %dx%d", fx, fy, cx, cy, w, h))
}

// noticeOnce logs a warning about inputs that are used but changed (16-bit
// samples reduced to 8 bits), the first time each kind is seen.
func (n *Node) noticeOnce(kind, msg string) {
	if _, seen := n.notices.LoadOrStore(kind, true); !seen {
		n.log.Warn("input images are converted with a loss (reported once)", "kind", kind, "detail", msg)
	}
}
