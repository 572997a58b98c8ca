package node

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/binstate"
	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
)

// Saved sessions. ~save_session writes SAVE_DIR/session/node.state
// atomically: the node's own counters, the trajectory and map (mapio.Map
// state) and the engine's state (engine.Snapshotter); `node --resume DIR`
// (Options.Resume) starts from DIR/session/node.state and maps on as if the
// node had never stopped.
//
// node.state: magic "LBMNODE\x01", a uint32 JSON length and the JSON
// sessionMeta, the map state with a CRC-32C, then the engine's state file.

const (
	// SessionDir is the folder under save_dir that holds a saved session.
	SessionDir = "session"
	// SessionFile is the node's session file in SessionDir.
	SessionFile = "node.state"
	// maxSessionMeta bounds the JSON part a session file may declare.
	maxSessionMeta = 1 << 24
)

var sessionMagic = [8]byte{'L', 'B', 'M', 'N', 'O', 'D', 'E', 1}

// ResumeFactory builds the engine from a saved engine state (engine.Resume).
type ResumeFactory func(ctx context.Context, cfg Config, state io.Reader) (engine.Stream, error)

// sessionMeta is the JSON part of node.state.
type sessionMeta struct {
	NextSeq   uint64            `json:"next_seq"`
	Size      [2]int            `json:"size"`
	LastStamp time.Time         `json:"last_stamp"`
	FrameIDs  map[uint64]string `json:"frame_ids"`
}

// saveSession writes the session into save_dir/session. It runs on the
// model's thread once the frames submitted before it are delivered, so that
// the engine and the map agree; later frames wait for it.
func (n *Node) saveSession(ctx context.Context) (string, error) {
	cut := n.nextSeq.Load()
	var msg string
	err := n.pipe.Do(ctx, func(s engine.Stream) error {
		var err error
		msg, err = n.writeSession(s, cut)
		return err
	})
	return msg, err
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

// writeSession writes the session on the model's thread (pipe.Do): st is
// the stream, cut the first frame submitted after the save was asked for.
func (n *Node) writeSession(st engine.Stream, cut uint64) (string, error) {
	dir, err := n.saveDir()
	if err != nil {
		return "", err
	}
	snap, ok := st.(engine.Snapshotter)
	if !ok {
		return "", errors.New("this engine cannot save its state (a replay, or a backend without KV snapshots)")
	}
	path := filepath.Join(dir, SessionDir, SessionFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	// the frame ids of frames the engine holds (a phase 1 in progress)
	ids := map[uint64]string{}
	for seq, id := range n.frameIDs {
		if seq < cut {
			ids[seq] = id
		}
	}
	meta := sessionMeta{NextSeq: cut, Size: n.size, LastStamp: n.lastStamp, FrameIDs: ids}
	js, err := json.Marshal(meta)
	if err != nil {
		return "", err
	}
	err = atomicfile.WriteFile(path, func(f io.Writer) error {
		if err := binstate.WriteHeader(f, sessionMagic, js); err != nil {
			return err
		}
		if err := binstate.WriteSummed(f, n.m.SaveState); err != nil {
			return err
		}
		return snap.SaveState(f)
	})
	if err != nil {
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
	var hdr [12]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil || !bytes.Equal(hdr[:8], sessionMagic[:]) {
		return nil, fmt.Errorf("node: resume: %s is not a lingbotmap node session (or another version of one)", path)
	}
	size := binary.LittleEndian.Uint32(hdr[8:])
	if size > maxSessionMeta {
		return nil, fmt.Errorf("node: resume: %w: session header of %d bytes", binstate.ErrCorrupt, size)
	}
	js := make([]byte, size)
	if _, err := io.ReadFull(f, js); err != nil {
		return nil, fmt.Errorf("node: resume: %s ends early: %w", path, err)
	}
	var meta sessionMeta
	if err := json.Unmarshal(js, &meta); err != nil {
		return nil, fmt.Errorf("node: resume: %w: session header: %w", binstate.ErrCorrupt, err)
	}
	if err := binstate.ReadSummed(f, n.m.LoadState); err != nil {
		return nil, fmt.Errorf("node: resume: the session's map: %w", err)
	}
	st, err := n.resumeStream(ctx, n.cfg, f)
	if err != nil {
		return nil, fmt.Errorf("node: resume: %w", err)
	}
	n.nextSeq.Store(meta.NextSeq)
	n.size, n.lastStamp, n.mapDirty, n.pathDirty = meta.Size, meta.LastStamp, true, true
	if meta.FrameIDs != nil {
		n.frameIDs = meta.FrameIDs
	}
	n.log.Info("resumed the saved session", "file", path, "poses", n.m.Stats().Poses, "next_seq", meta.NextSeq)
	return st, nil
}
