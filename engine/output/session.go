package output

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/binstate"
	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
)

// Saved sessions. A session file holds everything a run or a node needs to
// go on as if it had never stopped, written atomically:
//
//	magic      8 bytes naming the owner and its version ("LBMRUN\x00\x02",
//	           "LBMNODE\x02")
//	length     uint32, little-endian: the JSON header's size
//	header     JSON: the owner's settings and counters (the input, the
//	           position in it)
//	checksum   uint32 CRC-32C of the magic, length and header
//	           (binstate.WriteHeaderSummed), checked before the header is
//	           used; the versions before it (Older) are refused as
//	           unprovable
//	body       the owner's own state (the map, the depth ranges) with a
//	           CRC-32C (binstate.WriteSummed)
//	engine     the engine's state file (engine.Snapshotter), which carries
//	           its own header and checksum

// SessionDir is the folder, in an output or save folder, that holds a
// saved session.
const SessionDir = "session"

// ErrNotSession is a file that does not begin as a session file of the
// expected owner and version.
var ErrNotSession = errors.New("not a lingbotmap session file of this kind (or another version of it)")

// Session is what a session file holds.
type Session struct {
	Magic [8]byte
	// Older are the magics of the owner's versions whose header had no
	// checksum: such a file is refused with binstate.ErrUnproven.
	Older [][8]byte
	// Header is marshalled to JSON (on reading, decoded into, strictly).
	Header any
	// MaxHeader bounds the JSON header a file may declare.
	MaxHeader uint32
}

// Write writes the session into path atomically: the header, body's
// section, then the engine's state.
func (s Session) Write(path string, body func(*binstate.Writer) error, eng engine.Snapshotter) error {
	js, err := json.Marshal(s.Header)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	return atomicfile.WriteFile(path, func(f io.Writer) error {
		if err := binstate.WriteHeaderSummed(f, s.Magic, js); err != nil {
			return err
		}
		if err := binstate.WriteSummed(f, body); err != nil {
			return err
		}
		return eng.SaveState(f)
	})
}

// ReadHeader reads the magic and the JSON header from r into s.Header,
// once the header's checksum proves it, and leaves r at the body:
// ErrNotSession for another file, binstate.ErrUnproven for an older
// version's, binstate.ErrCorrupt for a damaged header.
func (s Session) ReadHeader(r io.Reader) error {
	js, err := binstate.ReadHeaderSummed(r, s.Magic, int(s.MaxHeader), s.Older...)
	switch {
	case errors.Is(err, binstate.ErrUnproven):
		return fmt.Errorf("%w; start a new session", err)
	case errors.Is(err, binstate.ErrCorrupt):
		return err
	case err != nil:
		return ErrNotSession
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(s.Header); err != nil {
		return fmt.Errorf("%w: session header: %w", binstate.ErrCorrupt, err)
	}
	return nil
}

// ReadBody reads the body's section from r (after ReadHeader), leaving r
// at the engine's state.
func ReadBody(r io.Reader, body func(*binstate.Reader) error) error {
	return binstate.ReadSummed(r, body)
}
