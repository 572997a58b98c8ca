// Package mcaptest makes ROS 2 MCAP files for tests of damaged input: one
// uncompressed chunk per message, so that a byte flipped inside a chunk
// stays inside one message, with CRCs and a summary as rosbag2 writes them.
//
// It does not import msgs/mcapbag, so that mcapbag's own tests can use it;
// the profile and encoding are the MCAP ROS 2 profile's well-known values.
package mcaptest

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/foxglove/mcap/go/mcap"

	"github.com/lingbotmap/lingbotmap/msgs/cdr"
)

// Message is one message to write: a value cdr.Marshal encodes, and its
// log time.
type Message struct {
	Msg     any
	LogTime time.Time
}

// OneChunkEach writes msgs on topic (schema name typ) in that order, one
// chunk each, and returns the file and its chunks' offsets, ascending.
func OneChunkEach(t testing.TB, topic, typ string, msgs []Message) ([]byte, []int64) {
	t.Helper()
	var buf bytes.Buffer
	w, err := mcap.NewWriter(&buf, &mcap.WriterOptions{IncludeCRC: true, Chunked: true, ChunkSize: 1, Compression: mcap.CompressionNone})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.WriteHeader(&mcap.Header{Profile: "ros2"}))
	must(w.WriteSchema(&mcap.Schema{ID: 1, Name: typ, Encoding: "ros2msg", Data: []byte("x")}))
	must(w.WriteChannel(&mcap.Channel{ID: 1, SchemaID: 1, Topic: topic, MessageEncoding: "cdr"}))
	for i, m := range msgs {
		data, err := cdr.Marshal(m.Msg)
		must(err)
		must(w.WriteMessage(&mcap.Message{ChannelID: 1, Sequence: uint32(i), LogTime: uint64(m.LogTime.UnixNano()), Data: data}))
	}
	must(w.Close())
	b := buf.Bytes()
	chunks := ChunkOffsets(b)
	if len(chunks) != len(msgs) {
		t.Fatalf("%d chunks, want %d", len(chunks), len(msgs))
	}
	return b, chunks
}

// ChunkOffsets returns the offsets of the chunk records of a sound MCAP
// file, walking its records from the magic on.
func ChunkOffsets(b []byte) []int64 {
	var chunks []int64
	for pos := int64(len(mcap.Magic)); pos+9 <= int64(len(b)); pos += 9 + int64(binary.LittleEndian.Uint64(b[pos+1:])) {
		if mcap.OpCode(b[pos]) == mcap.OpChunk {
			chunks = append(chunks, pos)
		}
	}
	return chunks
}
