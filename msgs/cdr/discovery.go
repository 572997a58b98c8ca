package cdr

import (
	"errors"
	"fmt"
	"strings"
)

// The sizes of rmw_dds_common/msg/Gid's data: Humble's RMWs use char[24]
// (the 16-byte GUID, zero padded), Iron and later char[16]. A fixed array
// carries no length on the wire, so the two layouts of ros_discovery_info
// cannot be read one as the other: an Iron-or-later reader of a Humble
// sample (or the reverse) sees a participant with no nodes, or garbage.
const (
	GidSizeHumble = 24
	GidSizeIron   = 16
)

// GidSizeForDistro is the Gid size of a ROS 2 distribution (ROS_DISTRO):
// 24 for humble (and the older, end-of-life foxy and galactic), 16 for iron,
// jazzy, kilted, rolling and any later one.
func GidSizeForDistro(distro string) int {
	switch strings.ToLower(strings.TrimSpace(distro)) {
	case "humble", "galactic", "foxy":
		return GidSizeHumble
	}
	return GidSizeIron
}

// DiscoveryType describes ros_discovery_info's type for a Gid size: the
// same names for both; the REP 2011 hash only for Iron's layout, since
// Humble predates type hashes.
func DiscoveryType(gidSize int) (Type, error) {
	t, err := TypeOf(&ParticipantEntitiesInfo{})
	if err != nil {
		return Type{}, err
	}
	switch gidSize {
	case GidSizeIron:
		return t, nil
	case GidSizeHumble:
		t.Hash = ""
		return t, nil
	}
	return Type{}, fmt.Errorf("cdr: Gid size %d: want %d (Iron and later) or %d (Humble)", gidSize, GidSizeIron, GidSizeHumble)
}

// MarshalDiscovery encodes info as ros_discovery_info with gidSize-byte
// Gids (GidSizeIron or GidSizeHumble), the bytes after the GUID zero.
func MarshalDiscovery(info *ParticipantEntitiesInfo, gidSize int) ([]byte, error) {
	if gidSize != GidSizeIron && gidSize != GidSizeHumble {
		return nil, fmt.Errorf("cdr: Gid size %d: want %d or %d", gidSize, GidSizeIron, GidSizeHumble)
	}
	e := encoder{buf: make([]byte, headerSize, 256)}
	e.buf[1] = encCDRLE
	gid := func(g Gid) {
		e.buf = append(e.buf, g.Data[:]...)
		e.buf = append(e.buf, make([]byte, gidSize-len(g.Data))...)
	}
	gids := func(gs []Gid, what string) error {
		if err := e.count(len(gs), what); err != nil {
			return err
		}
		for _, g := range gs {
			gid(g)
		}
		return nil
	}
	gid(info.Gid)
	if err := e.count(len(info.NodeEntitiesInfoSeq), "node_entities_info_seq"); err != nil {
		return nil, err
	}
	for i, n := range info.NodeEntitiesInfoSeq {
		path := fmt.Sprintf("node_entities_info_seq[%d]", i)
		if err := e.str(n.NodeNamespace, 256, path+".node_namespace"); err != nil {
			return nil, fmt.Errorf("cdr: encoding ros_discovery_info: %w", err)
		}
		if err := e.str(n.NodeName, 256, path+".node_name"); err != nil {
			return nil, fmt.Errorf("cdr: encoding ros_discovery_info: %w", err)
		}
		if err := gids(n.ReaderGidSeq, path+".reader_gid_seq"); err != nil {
			return nil, err
		}
		if err := gids(n.WriterGidSeq, path+".writer_gid_seq"); err != nil {
			return nil, err
		}
	}
	return e.buf, nil
}

// UnmarshalDiscovery decodes a ros_discovery_info sample of either layout
// and returns the Gid size it was written with: the layout whose decoding
// ends at the sample's end (give or take 3 bytes of alignment padding).
// Where both would fit, prefer (the reader's own size) wins. Gid bytes past
// the GUID are dropped. A sample neither layout reads gives a
// *msgs.DecodeError that says what each attempt found.
func UnmarshalDiscovery(data []byte, prefer int) (*ParticipantEntitiesInfo, int, error) {
	sizes := [2]int{GidSizeIron, GidSizeHumble}
	if prefer == GidSizeHumble {
		sizes = [2]int{GidSizeHumble, GidSizeIron}
	}
	var errs []error
	for _, size := range sizes {
		info, err := unmarshalDiscovery(data, size)
		if err == nil {
			return info, size, nil
		}
		errs = append(errs, fmt.Errorf("as %d-byte Gids: %w", size, err))
	}
	return nil, 0, cdrError(fmt.Errorf("ros_discovery_info sample of %d bytes: %w", len(data), errors.Join(errs...)))
}

func unmarshalDiscovery(data []byte, gidSize int) (*ParticipantEntitiesInfo, error) {
	d, err := newDecoder(data)
	if err != nil {
		return nil, err
	}
	gid := func(path string) (Gid, error) {
		var g Gid
		if d.left() < gidSize { // chars: no alignment
			return g, d.fail(path, "data ends %d bytes into a %d-byte Gid", d.left(), gidSize)
		}
		copy(g.Data[:], d.data[d.pos:d.pos+len(g.Data)])
		d.pos += gidSize
		return g, nil
	}
	gids := func(path string) ([]Gid, error) {
		n, err := d.count(gidSize, path)
		if err != nil {
			return nil, err
		}
		out := make([]Gid, n)
		for i := range out {
			if out[i], err = gid(path); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	info := &ParticipantEntitiesInfo{}
	if info.Gid, err = gid("gid"); err != nil {
		return nil, err
	}
	// A node holds at least two string lengths and two sequence counts.
	n, err := d.count(16, "node_entities_info_seq")
	if err != nil {
		return nil, err
	}
	for i := range n {
		path := fmt.Sprintf("node_entities_info_seq[%d]", i)
		var ni NodeEntitiesInfo
		if ni.NodeNamespace, err = d.str(256, path+".node_namespace"); err != nil {
			return nil, err
		}
		if ni.NodeName, err = d.str(256, path+".node_name"); err != nil {
			return nil, err
		}
		if ni.ReaderGidSeq, err = gids(path + ".reader_gid_seq"); err != nil {
			return nil, err
		}
		if ni.WriterGidSeq, err = gids(path + ".writer_gid_seq"); err != nil {
			return nil, err
		}
		info.NodeEntitiesInfoSeq = append(info.NodeEntitiesInfoSeq, ni)
	}
	if extra := d.left(); extra > 3 {
		return nil, fmt.Errorf("%d bytes left after the message (more than alignment padding)", extra)
	}
	return info, nil
}
