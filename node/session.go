package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/binstate"
	"github.com/lingbotmap/lingbotmap/engine/mapframe"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/engine/output"
	"github.com/lingbotmap/lingbotmap/engine/pipeline"
)

// Saved sessions. ~save_session writes SAVE_DIR/session/node.state
// atomically: the node's own counters, the trajectory and map (mapio.Map
// state) and the engine's state (engine.Snapshotter); `node --resume DIR`
// (Options.Resume) starts from DIR/session/node.state and maps on as if the
// node had never stopped.
//
// node.state is an output.Session: magic "LBMNODE\x02", the JSON
// sessionMeta, the map state, then the engine's state.

const (
	// SessionDir is the folder under save_dir that holds a saved session.
	SessionDir = output.SessionDir
	// SessionFile is the node's session file in SessionDir.
	SessionFile = "node.state"
)

// nodeSession is node.state's frame around meta.
func nodeSession(meta *sessionMeta) output.Session {
	return output.Session{Magic: [8]byte{'L', 'B', 'M', 'N', 'O', 'D', 'E', 2}, Header: meta, MaxHeader: 1 << 24,
		Older: [][8]byte{{'L', 'B', 'M', 'N', 'O', 'D', 'E', 1}}} // before the header checksum
}

// ResumeFactory builds the engine from a saved engine state (engine.Resume).
type ResumeFactory func(ctx context.Context, cfg Config, state io.Reader) (engine.Stream, error)

// sessionMeta is the JSON part of node.state.
type sessionMeta struct {
	NextSeq   uint64            `json:"next_seq"`
	Size      [2]int            `json:"size"`
	LastStamp time.Time         `json:"last_stamp"`
	FrameIDs  map[uint64]string `json:"frame_ids"`
	// MapFrame is the map frame and metric scale (absent in sessions saved
	// before the node had a z-up map frame)
	MapFrame *mapframe.State `json:"map_frame,omitempty"`
}

// saveSession writes the session into save_dir/session. It runs on the
// model's thread once the frames submitted before it are delivered, so that
// the engine and the map agree; later frames wait for it.
func (n *Node) saveSession(ctx context.Context) (string, error) {
	if err := n.pipe.Checkpoint(ctx); err != nil {
		return "", err
	}
	return n.sink.saved, nil
}

// countStep counts a delivered result for session_save_every and asks
// sessionLoop for a save when it is due (the delivering goroutine cannot
// wait for a save: a save waits for the deliveries before it).
func (n *Node) countStep() {
	if n.cfg.SessionSaveEvery <= 0 {
		return
	}
	n.stepsSinceSave++
	if n.stepsSinceSave < n.cfg.SessionSaveEvery {
		return
	}
	n.stepsSinceSave = 0
	select {
	case n.saveNow <- struct{}{}:
	default: // a save is already due
	}
}

// sessionLoop saves the session when countStep asks, until ctx ends.
func (n *Node) sessionLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.saveNow:
		}
		if _, err := n.saveSession(ctx); err != nil && ctx.Err() == nil {
			n.log.Warn("periodic session save failed", "err", err)
		}
	}
}

// writeSession writes the session on the model's thread (the publisher's
// Checkpoint): at holds the headers of the frames the engine holds, and the
// first frame submitted after them is the next sequence number the session
// resumes at.
func (n *Node) writeSession(at pipeline.Cut[std_msgs.Header]) (string, error) {
	dir, err := n.saveDir()
	if err != nil {
		return "", err
	}
	// the stream itself: the pipeline's is the node's statStream
	snap, ok := n.stream.(engine.Snapshotter)
	if !ok {
		return "", errors.New("this engine cannot save its state (a replay, or a backend without KV snapshots)")
	}
	path := filepath.Join(dir, SessionDir, SessionFile)
	n.mu.Lock()
	defer n.mu.Unlock()
	// the frame ids of frames the engine holds (a phase 1 in progress)
	ids := map[uint64]string{}
	for _, h := range at.Held {
		ids[h.Seq] = h.Meta.FrameId
	}
	next := at.Next
	if next == 0 {
		next = n.firstSeq // no frame since the node started
	}
	fs := n.frame.State()
	meta := &sessionMeta{NextSeq: next, Size: n.size, LastStamp: n.lastStamp, FrameIDs: ids, MapFrame: &fs}
	if err := nodeSession(meta).Write(path, n.m.SaveState, snap); err != nil {
		return "", fmt.Errorf("saving the session: %w", err)
	}
	ms := n.m.Stats()
	n.log.Info("session saved", "file", path, "poses", ms.Poses)
	return fmt.Sprintf("wrote the session (%d poses, %d map points, the engine state) to %s", ms.Poses, ms.Voxels, path), nil
}

// resumeSession restores the node's counters and map from dir's session and
// starts the engine from its state.
func (n *Node) resumeSession(ctx context.Context, dir string) (engine.Stream, error) {
	if n.resumeStream == nil {
		return nil, errors.New("node: --resume needs an engine that can resume (no ResumeStream)")
	}
	path := filepath.Join(dir, SessionDir, SessionFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("node: resume: %w", err)
	}
	defer f.Close()
	var meta sessionMeta
	if err := nodeSession(&meta).ReadHeader(f); err != nil {
		return nil, fmt.Errorf("node: resume: %s: %w", path, err)
	}
	if err := output.ReadBody(f, n.m.LoadState); err != nil {
		return nil, fmt.Errorf("node: resume: the session's map: %w", err)
	}
	if meta.MapFrame != nil {
		if err := n.frame.Restore(*meta.MapFrame); err != nil {
			return nil, fmt.Errorf("node: resume: %s: %w", path, err)
		}
		if sc, known := n.frame.Scale(); known && n.scale != nil {
			n.scale.tr.Resumed(sc)
		}
	} else if meta.Size != [2]int{} {
		// the map started before the frame was saved: its first camera's
		// base pose is the configured one
		b := mapframe.OpticalToBody()
		if n.baseToCam != nil {
			b = *n.baseToCam
		}
		n.frame.Fix(b)
		n.log.Warn("the saved session has no map frame (saved by an older version): taking the configured base → camera as the first frame's")
	}
	cfg := n.cfg
	// localization: the loaded cache is the map; frames only localize in it
	cfg.Engine.Localize = cfg.Localization
	st, err := n.resumeStream(ctx, cfg, f)
	if err != nil {
		return nil, fmt.Errorf("node: resume: %w", err)
	}
	n.nextSeq.Store(meta.NextSeq)
	n.firstSeq = meta.NextSeq
	n.size, n.lastStamp, n.mapDirty, n.pathDirty = meta.Size, meta.LastStamp, true, true
	// the frames the engine holds get their headers' frame ids back
	for _, seq := range slices.Sorted(maps.Keys(meta.FrameIDs)) {
		n.held = append(n.held, pipeline.Held[std_msgs.Header]{Seq: seq, Meta: std_msgs.Header{FrameId: meta.FrameIDs[seq]}})
	}
	n.log.Info("resumed the saved session", "file", path, "poses", n.m.Stats().Poses, "next_seq", meta.NextSeq)
	return st, nil
}

// loadMap loads the session saved in save_dir (as ~save_session writes it)
// into the running node: the engine state, the map and path, the map frame
// and its scale. Everything is read and checked (checksums, the weights
// fingerprint, the settings) before anything changes, so a missing or
// corrupt session leaves the node as it was. The swap runs on the model's
// thread between frames; frames the old engine still held (a phase 1) are
// dropped with it, as ~reset drops them. With localization on, the loaded
// engine localizes every later frame without growing (engine.Config.Localize).
func (n *Node) loadMap(ctx context.Context) (string, error) {
	if n.resumeStream == nil {
		return "", errors.New("this node's engine cannot load a saved session (no ResumeStream)")
	}
	dir, err := n.saveDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, SessionDir, SessionFile)
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("no saved session to load: %w", err)
	}
	defer f.Close()
	var meta sessionMeta
	if err := nodeSession(&meta).ReadHeader(f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if len(meta.FrameIDs) > 0 {
		return "", fmt.Errorf("%s was saved while the engine held %d frames of a phase 1: load it with node --resume", path, len(meta.FrameIDs))
	}
	m, err := mapio.NewMap(n.m.Config())
	if err != nil {
		return "", err
	}
	if err := output.ReadBody(f, m.LoadState); err != nil {
		return "", fmt.Errorf("%s: the session's map: %w", path, err)
	}
	// the node's map is loaded in place (frames' workers hold it): from
	// the checked copy
	var mapState bytes.Buffer
	if err := m.SaveState(binstate.NewWriter(&mapState)); err != nil {
		return "", err
	}
	if meta.MapFrame == nil {
		return "", fmt.Errorf("%s has no map frame (saved by an older version): load it with node --resume", path)
	}
	if err := mapframe.New().Restore(*meta.MapFrame); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	cfg := n.cfg
	cfg.Engine.Localize = cfg.Localization
	st, err := n.resumeStream(ctx, cfg, f)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if pm, ok := st.(engine.PointMaker); ok {
		if _, err := pm.MakePoints(m.Config().Filter, true); err != nil {
			st.Close()
			return "", err
		}
	}
	var old engine.Stream
	// not cancelled with the call: once queued, the swap runs
	err = n.pipe.Do(context.WithoutCancel(ctx), func(pipeline.Cut[std_msgs.Header]) error {
		n.mu.Lock()
		defer n.mu.Unlock()
		if err := n.m.LoadState(binstate.NewReader(&mapState)); err != nil {
			// the checked copy's own bytes: not expected to fail
			return fmt.Errorf("the loaded map: %w", err)
		}
		old = n.stream
		n.stream = st
		n.cur.Store(&st)
		cs := st.Stats()
		n.cacheStats.Store(&cs)
		n.stats.cacheFull.Store(false)
		// checked above: Restore cannot fail here
		_ = n.frame.Restore(*meta.MapFrame)
		// the old map's map → odom no longer holds
		n.lastMapOdom.clear()
		if n.scale != nil {
			if sc, known := n.frame.Scale(); known {
				n.scale.tr.Resumed(sc)
			} else {
				n.scale.tr.Reset()
			}
		}
		n.size, n.lastStamp, n.mapDirty, n.pathDirty = meta.Size, meta.LastStamp, true, true
		return nil
	})
	if err != nil {
		st.Close()
		return "", fmt.Errorf("loading the session: %w", err)
	}
	if err := old.Close(); err != nil {
		n.log.Warn("closing the engine the loaded session replaced", "err", err)
	}
	n.publishMap(true)
	n.publishPath(true)
	ms, cs := m.Stats(), st.Stats()
	sc, known := n.frame.Scale()
	scale := "unscaled"
	if known {
		scale = fmt.Sprintf("scale %g", sc)
	}
	mode := "mapping on"
	if n.cfg.Localization {
		mode = "localizing without growing the map"
	}
	n.log.Info("loaded a saved session", "file", path, "poses", ms.Poses, "points", ms.Voxels, "kv_frames", cs.FrameCount, "localization", n.cfg.Localization)
	return fmt.Sprintf("loaded %s: %d poses, %d map points, %d frames in the engine cache, %s; %s", path, ms.Poses, ms.Voxels, cs.FrameCount, scale, mode), nil
}
