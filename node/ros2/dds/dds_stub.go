//go:build !ros2

package dds

import "time"

// Participant is a DDS domain participant (not available: built without "ros2").
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

// Writer is a DDS data writer (not available: built without "ros2").
type Writer struct{}

// Write returns ErrNotBuilt in this build.
func (w *Writer) Write([]byte) error { return ErrNotBuilt }

// GUID returns the zero GUID in this build.
func (w *Writer) GUID() GUID { return GUID{} }

// InstanceHandle returns 0 in this build.
func (w *Writer) InstanceHandle() uint64 { return 0 }

// Matched returns ErrNotBuilt in this build.
func (w *Writer) Matched() (int, error) { return 0, ErrNotBuilt }

// WaitClientReader returns ErrNotBuilt in this build.
func (w *Writer) WaitClientReader(*Reader, uint64, time.Duration) (bool, error) {
	return false, ErrNotBuilt
}

// Close does nothing in this build.
func (w *Writer) Close() error { return nil }

// WaitParticipantReader returns false in this build.
func (w *Writer) WaitParticipantReader([12]byte, time.Duration) bool { return false }

// Reader is a DDS data reader (not available: built without "ros2").
type Reader struct{}

// GUID returns the zero GUID in this build.
func (r *Reader) GUID() GUID { return GUID{} }

// Matched returns ErrNotBuilt in this build.
func (r *Reader) Matched() (int, error) { return 0, ErrNotBuilt }

// WriterGUID returns false in this build.
func (r *Reader) WriterGUID(uint64) (GUID, bool) { return GUID{}, false }

// Close does nothing in this build.
func (r *Reader) Close() error { return nil }

// Built reports whether this binary has Cyclone DDS (the "ros2" build tag).
const Built = false
