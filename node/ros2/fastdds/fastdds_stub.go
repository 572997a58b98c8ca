//go:build !ros2

package fastdds

import "time"

// Participant is a Fast DDS participant (not available: built without "ros2").
type Participant struct{}

// NewParticipant returns ErrNotBuilt in this build.
func NewParticipant(ParticipantConfig) (*Participant, error) { return nil, ErrNotBuilt }

// GUID returns the zero GUID in this build.
func (p *Participant) GUID() GUID { return GUID{} }

// NewWriter returns ErrNotBuilt in this build.
func (p *Participant) NewWriter(topic, typeName string, q QoS) (*Writer, error) {
	return nil, ErrNotBuilt
}

// NewReader returns ErrNotBuilt in this build.
func (p *Participant) NewReader(topic, typeName string, q QoS, deliver func(Sample)) (*Reader, error) {
	return nil, ErrNotBuilt
}

// Close does nothing in this build.
func (p *Participant) Close() error { return nil }

// Writer is a Fast DDS data writer (not available: built without "ros2").
type Writer struct{}

// GUID returns the zero GUID in this build.
func (w *Writer) GUID() GUID { return GUID{} }

// Write returns ErrNotBuilt in this build.
func (w *Writer) Write(b []byte, related Identity) error { return ErrNotBuilt }

// WaitReader returns false in this build.
func (w *Writer) WaitReader(GUID, time.Duration) bool { return false }

// Matched returns ErrNotBuilt in this build.
func (w *Writer) Matched() (int, error) { return 0, ErrNotBuilt }

// Close does nothing in this build.
func (w *Writer) Close() error { return nil }

// Reader is a Fast DDS data reader (not available: built without "ros2").
type Reader struct{}

// GUID returns the zero GUID in this build.
func (r *Reader) GUID() GUID { return GUID{} }

// Matched returns ErrNotBuilt in this build.
func (r *Reader) Matched() (int, error) { return 0, ErrNotBuilt }

// Close does nothing in this build.
func (r *Reader) Close() error { return nil }

// Built reports whether this binary has Fast DDS (the "ros2" build tag).
const Built = false
