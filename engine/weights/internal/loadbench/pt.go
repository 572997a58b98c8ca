package main

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/lingbotmap/lingbotmap/engine/weights"
)

// writePT writes a store as torch.save would (zip, bare OrderedDict of
// float32 tensors, one uncompressed storage per tensor), so the .pt loader
// can be measured on a full-size file without Python.
func writePT(w io.Writer, s weights.Store) error {
	var p bytes.Buffer
	op := func(b ...byte) { p.Write(b) }
	str := func(s string) {
		op('X')
		p.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(s))))
		p.WriteString(s)
	}
	num := func(v int) {
		op('J')
		p.Write(binary.LittleEndian.AppendUint32(nil, uint32(v)))
	}
	op(0x80, 2)
	p.WriteString("ccollections\nOrderedDict\n")
	op(')', 'R', '(')
	for i, k := range s.Keys() {
		inf, _ := s.Info(k)
		n := 1
		for _, d := range inf.Shape {
			n *= d
		}
		str(k)
		p.WriteString("ctorch._utils\n_rebuild_tensor_v2\n")
		op('(', '(')
		str("storage")
		p.WriteString("ctorch\nFloatStorage\n")
		str(fmt.Sprint(i))
		str("cpu")
		num(n)
		op('t', 'Q')
		num(0)
		op('(')
		for _, d := range inf.Shape {
			num(d)
		}
		op('t', '(')
		stride := 1
		strides := make([]int, len(inf.Shape))
		for j := len(inf.Shape) - 1; j >= 0; j-- {
			strides[j] = stride
			stride *= inf.Shape[j]
		}
		for _, st := range strides {
			num(st)
		}
		op('t', 0x89)
		p.WriteString("ccollections\nOrderedDict\n")
		op(')', 'R', 't', 'R')
	}
	op('u', '.')

	zw := zip.NewWriter(w)
	put := func(name string, data []byte) error {
		fw, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
		if err != nil {
			return err
		}
		_, err = fw.Write(data)
		return err
	}
	if err := put("archive/data.pkl", p.Bytes()); err != nil {
		return err
	}
	if err := put("archive/byteorder", []byte("little")); err != nil {
		return err
	}
	var buf []byte
	for i, k := range s.Keys() {
		v, err := s.Float32(k)
		if err != nil {
			return err
		}
		buf = buf[:0]
		for _, x := range v {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
		}
		if err := put(fmt.Sprintf("archive/data/%d", i), buf); err != nil {
			return err
		}
	}
	return zw.Close()
}
