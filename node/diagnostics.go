package node

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/diagnostic_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
)

// counters are the node's running totals for /diagnostics.
type counters struct {
	received, processed, pausedFrames, droppedOnClose, engineErrors, publishErrors, rejectedResults atomic.Int64
	cacheFull                                                                                       atomic.Bool  // set when the engine reported ErrCacheFull; cleared by ~reset
	paramRefused                                                                                    atomic.Int64 // parameter changes refused (params.go)
	// the occupancy grid: maps it could not be made of, occupied cells of the last one
	gridErrors, gridOccupied atomic.Int64

	mu         sync.Mutex
	skipped    tally // by kind (msgs.DecodeError kinds, size_change, camera_info)
	modelN     int64
	modelTotal time.Duration
	modelLast  time.Duration
	cameraInfo string
	// lastParamRefusal is the reason of the newest refused parameter change
	lastParamRefusal string
	// problems with the TF tree by kind (tfio.go)
	tfIssues tally
}

// tally counts problems by kind and keeps the first reason seen per kind.
type tally struct {
	counts  map[string]int64
	reasons map[string]string
}

func newTally() tally { return tally{counts: map[string]int64{}, reasons: map[string]string{}} }

// add counts one problem; it reports whether this kind is new.
func (t tally) add(kind string, err error) bool {
	t.counts[kind]++
	if _, ok := t.reasons[kind]; ok {
		return false
	}
	t.reasons[kind] = err.Error()
	return true
}

// kinds is the kinds counted, sorted, and the total count.
func (t tally) kinds() ([]string, int64) {
	kinds := make([]string, 0, len(t.counts))
	var total int64
	for k, v := range t.counts {
		kinds = append(kinds, k)
		total += v
	}
	sort.Strings(kinds)
	return kinds, total
}

func (c *counters) init() {
	c.skipped, c.tfIssues = newTally(), newTally()
}

// tfIssue counts one TF problem; it reports whether this kind is new.
func (c *counters) tfIssue(kind string, err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tfIssues.add(kind, err)
}

// skip counts one rejected input; it reports whether this kind is new.
func (c *counters) skip(kind string, err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.skipped.add(kind, err)
}

func (c *counters) recordModelTime(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.modelN++
	c.modelTotal += d
	c.modelLast = d
}

func (c *counters) setCameraInfo(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cameraInfo = s
}

// diagnosticsLoop publishes /diagnostics at DiagnosticsRate until ctx ends.
func (n *Node) diagnosticsLoop(ctx context.Context) {
	cfg, changed := n.live.get()
	tick := time.NewTicker(period(cfg.DiagnosticsRate))
	defer tick.Stop()
	var lastProblems int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed: // diagnostics_rate may have changed: it applies at once
			cfg, changed = n.live.get()
			tick.Reset(period(cfg.DiagnosticsRate))
			continue
		case <-tick.C:
		}
		msg, problems := n.diagnostics(lastProblems)
		lastProblems = problems
		n.write(n.out.diag, msg)
	}
}

// diagnostics builds the status message. The level is WARN while inputs are
// being skipped or dropped (compared with the previous report's total).
func (n *Node) diagnostics(prevProblems int64) (*diagnostic_msgs.DiagnosticArray, int64) {
	c := &n.stats
	kv := func(k string, v any) diagnostic_msgs.KeyValue {
		return diagnostic_msgs.KeyValue{Key: k, Value: fmt.Sprint(v)}
	}
	ps := n.pipe.Stats()
	ts := n.tr.Stats()
	dropped := ps.Dropped
	vals := []diagnostic_msgs.KeyValue{
		kv("frames_received", c.received.Load()),
		kv("frames_processed", c.processed.Load()),
		// the input queue, which queue_size bounds, and every frame taken
		// and not yet finished: queued, decoding, in the model (a phase 1
		// buffers several) or being published
		kv("queue_length", ps.Queued),
		kv("queue_capacity", n.cfg.QueueSize),
		kv("frames_in_flight", ps.Waiting),
		kv("queue_policy", n.cfg.QueuePolicy),
		kv("frames_dropped", dropped),
		// where the model's thread spent the session (bench --pipeline
		// reads these): in the engine, waiting for frames, held back
		// by the publishing behind it
		kv("model_busy_s", fmt.Sprintf("%.3f", ps.ModelBusy.Seconds())),
		kv("model_wait_input_s", fmt.Sprintf("%.3f", ps.ModelInput.Seconds())),
		kv("model_wait_output_s", fmt.Sprintf("%.3f", ps.ModelOutput.Seconds())),
		kv("frames_paused", c.pausedFrames.Load()),
		kv("paused", n.paused.Load()),
		kv("engine_errors", c.engineErrors.Load()),
		kv("results_rejected", c.rejectedResults.Load()),
		kv("cache_full", c.cacheFull.Load()),
		kv("master_reconnects", ts.Reconnects),
		kv("ros2_gid_mismatched_peers", ts.GidMismatchedPeers),
		kv("ros2_graph_unreadable", ts.GraphUnreadable),
		kv("service_requests_rejected", ts.BadRequests),
		kv("publish_errors", c.publishErrors.Load()),
		kv("localization", n.cfg.Localization),
		kv("grid_errors", c.gridErrors.Load()),
		kv("grid_occupied_cells", c.gridOccupied.Load()),
	}
	// what DDS discovery has matched, per topic: a publisher can start once
	// its topic's count includes it, and an output reaches a subscriber
	// once counted
	vals = append(vals, matchedValues("publishers_matched:", ts.MatchedPublishers)...)
	vals = append(vals, matchedValues("subscribers_matched:", ts.MatchedSubscribers)...)
	c.mu.Lock()
	if c.modelN > 0 {
		vals = append(vals,
			kv("model_ms_last", strconv.FormatFloat(c.modelLast.Seconds()*1e3, 'f', 2, 64)),
			kv("model_ms_mean", strconv.FormatFloat(c.modelTotal.Seconds()*1e3/float64(c.modelN), 'f', 2, 64)))
	}
	if c.cameraInfo != "" {
		vals = append(vals, kv("camera_info", c.cameraInfo))
	}
	if r := c.paramRefused.Load(); r > 0 {
		vals = append(vals, kv("parameter_changes_refused", r), kv("parameter_last_refusal", c.lastParamRefusal))
	}
	kinds, skippedTotal := c.skipped.kinds()
	var reasons []string
	for _, k := range kinds {
		vals = append(vals, kv("skipped_"+k, c.skipped.counts[k]), kv("skip_reason_"+k, c.skipped.reasons[k]))
		reasons = append(reasons, k+": "+c.skipped.reasons[k])
	}
	tfKinds, tfTotal := c.tfIssues.kinds()
	var tfReasons []string
	for _, k := range tfKinds {
		vals = append(vals, kv("tf_"+k, c.tfIssues.counts[k]), kv("tf_reason_"+k, c.tfIssues.reasons[k]))
		tfReasons = append(tfReasons, "tf_"+k+": "+c.tfIssues.reasons[k])
	}
	c.mu.Unlock()
	vals = append(vals, kv("skipped_total", skippedTotal), kv("tf_problems", tfTotal))
	scale, known := n.frame.Scale()
	vals = append(vals, kv("map_scale", strconv.FormatFloat(scale, 'g', 8, 64)), kv("map_scale_known", known))

	var st engine.CacheStats
	if p := n.cacheStats.Load(); p != nil {
		st = *p
	}
	vals = append(vals,
		kv("kv_frame_count", st.FrameCount),
		kv("kv_scale_pages", st.ScalePages),
		kv("kv_live_pages", st.LivePages),
		kv("kv_free_pages", st.FreePages),
		kv("kv_special_tokens", st.SpecialTokens),
		kv("kv_visible_pages", st.VisiblePages),
		kv("kv_last_page_len", st.LastPageLen),
		kv("kv_page_size", st.PageSize),
		kv("kv_camera_frames", st.CameraFrames),
		kv("kv_bytes", st.KVBytes),
		kv("kv_window", st.Window),
		kv("engine_frames_in", st.FramesIn),
	)
	// keyframe clouds made on the GPU (engine.PointMaker) and on the host
	kept, host := n.m.PointFrames()
	vals = append(vals, kv("points_device_frames", kept), kv("points_host_frames", host))
	// confident points left out of the map for lying beyond the voxel
	// index range (map_voxel too small for the scene)
	n.mu.Lock()
	outside := n.m.Stats().Outside
	n.mu.Unlock()
	vals = append(vals, kv("map_points_outside", outside))
	// the metric scale: whether poses, clouds and the map are in metres
	vals = append(vals, n.scale.diagnostics(kv)...)

	problems := skippedTotal + dropped + tfTotal
	level, message := diagnostic_msgs.DiagnosticStatus_OK, "mapping"
	switch {
	case problems > prevProblems && tfTotal > 0 && skippedTotal == 0:
		level, message = diagnostic_msgs.DiagnosticStatus_WARN, "TF problems ("+strings.Join(tfReasons, "; ")+")"
	case problems > prevProblems && skippedTotal > 0:
		level, message = diagnostic_msgs.DiagnosticStatus_WARN, "skipping input images ("+strings.Join(reasons, "; ")+")"
	case problems > prevProblems:
		level, message = diagnostic_msgs.DiagnosticStatus_WARN, "dropping frames: the model is slower than the camera"
	case n.paused.Load():
		message = "paused"
	}
	return &diagnostic_msgs.DiagnosticArray{
		Header: std_msgs.Header{Stamp: time.Now()},
		Status: []diagnostic_msgs.DiagnosticStatus{{
			Level:      level,
			Name:       n.tr.FullName() + ": engine",
			Message:    message,
			HardwareId: n.cfg.Engine.Device,
			Values:     vals,
		}},
	}, problems
}

// matchedValues are prefix+topic: count, sorted by topic.
func matchedValues(prefix string, counts map[string]int) []diagnostic_msgs.KeyValue {
	topics := make([]string, 0, len(counts))
	for name := range counts {
		topics = append(topics, name)
	}
	sort.Strings(topics)
	out := make([]diagnostic_msgs.KeyValue, 0, len(topics))
	for _, name := range topics {
		out = append(out, diagnostic_msgs.KeyValue{Key: prefix + name, Value: strconv.Itoa(counts[name])})
	}
	return out
}
