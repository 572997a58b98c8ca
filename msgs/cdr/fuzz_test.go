package cdr

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/lingbotmap/lingbotmap/msgs"
)

// Every decoder must return a value or a *msgs.DecodeError for any input and
// never panic; whatever it accepts must encode again and decode to the same
// bytes. Run longer with
// go test ./msgs/cdr -run '^$' -fuzz FuzzUnmarshal -fuzztime 60s

// checkDecode runs one input through the decoder of sample type i.
func checkDecode(t *testing.T, types []reflect.Type, i int, data []byte) {
	t.Helper()
	typ := types[i%len(types)]
	m := reflect.New(typ).Interface()
	err := Unmarshal(data, m)
	if err != nil {
		var de *msgs.DecodeError
		if !errors.As(err, &de) || de.Kind != msgs.KindCDR {
			t.Fatalf("%v: error %v is not a cdr DecodeError", typ, err)
		}
		return
	}
	again, err := Marshal(m)
	if err != nil {
		t.Fatalf("%v: decoded value does not encode: %v", typ, err)
	}
	back := reflect.New(typ).Interface()
	if err := Unmarshal(again, back); err != nil {
		t.Fatalf("%v: re-encoded value does not decode: %v", typ, err)
	}
	// Compared as bytes, so that NaNs compare equal.
	twice, err := Marshal(back)
	if err != nil || !bytes.Equal(twice, again) {
		t.Fatalf("%v: value changed through encode/decode (%v):\n%+v\n%+v", typ, err, m, back)
	}
}

func sampleTypes(t testing.TB) ([]reflect.Type, [][]byte) {
	var types []reflect.Type
	var encoded [][]byte
	for _, m := range samples() {
		data, err := Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, reflect.TypeOf(m).Elem())
		encoded = append(encoded, data)
	}
	return types, encoded
}

func FuzzUnmarshal(f *testing.F) {
	types, encoded := sampleTypes(f)
	for i, data := range encoded {
		f.Add(uint8(i), data)
		f.Add(uint8(i), data[:len(data)/2])
	}
	f.Add(uint8(1), []byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, i uint8, data []byte) {
		checkDecode(t, types, int(i), data)
	})
}

// A short fuzzing run inside the normal test: every prefix of every sample,
// and random byte changes, deterministic from a fixed seed.
func TestUnmarshalMutations(t *testing.T) {
	types, encoded := sampleTypes(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for i, data := range encoded {
		for n := range len(data) {
			checkDecode(t, types, i, data[:n])
		}
		for range 3000 {
			b := append([]byte(nil), data...)
			for range 1 + rng.IntN(4) {
				switch rng.IntN(3) {
				case 0:
					b[4+rng.IntN(len(b)-4)] = byte(rng.Uint32())
				case 1:
					b[4+rng.IntN(len(b)-4)] ^= 0x80
				default:
					b = b[:4+rng.IntN(len(b)-4)]
					if len(b) == 4 {
						b = append(b, 0)
					}
				}
			}
			checkDecode(t, types, i, b)
		}
	}
}
