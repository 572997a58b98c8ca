package weights

import (
	"math/big"
	"strings"
	"testing"
)

func TestUnpickleValues(t *testing.T) {
	// Protocol 0 (text opcodes): a list memoised then dropped, leaving {"é": 1.5}.
	v, err := unpickle([]byte("(lp0\nI1\naS'x'\np1\na(dp2\nV\xc3\xa9\nF1.5\nsg0\n0."))
	if err != nil {
		t.Fatal(err)
	}
	d, ok := v.(*pyDict)
	if !ok {
		t.Fatalf("got %s, want a dict", describe(v))
	}
	if x, ok := d.get("é"); !ok || x != 1.5 {
		t.Errorf("d[é] = %v", x)
	}

	// Protocol 2: {"a": ([1, 1.0, -2**71],)}
	v, err = unpickle([]byte("\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01G?\xf0\x00\x00\x00\x00\x00\x00\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x80e\x85u."))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := v.(*pyDict).get("a")
	tup, ok := a.(pyTuple)
	if !ok || len(tup) != 1 {
		t.Fatalf("d[a] = %s", describe(a))
	}
	l := tup[0].(*pyList).items
	want := new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), 71))
	if len(l) != 3 || l[0] != int64(1) || l[1] != 1.0 || l[2].(*big.Int).Cmp(want) != 0 {
		t.Errorf("list = %v", l)
	}
	// LONG1 of 2 bytes, negative: -2.
	if v, err := unpickle([]byte("\x8a\x02\xfe\xff.")); err != nil || v != int64(-2) {
		t.Errorf("LONG1 -2: %v %v", v, err)
	}
}

func TestUnpickleErrors(t *testing.T) {
	for prog, want := range map[string]string{
		"K":                    "ends in the middle",
		"N":                    "without STOP",
		"\x80\x06N.":           "protocol 6",
		"h\x05.":               "memo entry 5",
		"\xff":                 "unsupported pickle opcode 0xff",
		"(R.":                  "stack underflow",
		"N(0.":                 "N",
		"NN(\x86.":             "stack underflow",
		"X\xff\xff\xff\x7fab":  "ends in the middle",
		"\x8b\x00\x00\x01\x00": "too long",
		"K\x01K\x02a.":         "cannot append",
		"}K\x01s.":             "stack underflow",
		"NQ.":                  "persistent id",
		"\x80\x02u.":           "no mark",
	} {
		_, err := unpickle([]byte(prog))
		if want == "N" { // POP of an empty MARK frame drops the mark: result None
			if err != nil {
				t.Errorf("%q: %v", prog, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want it to say %q", prog, err, want)
		}
	}
}
