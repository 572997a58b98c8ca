package ros2

import (
	"fmt"
	"sort"

	"github.com/lingbotmap/lingbotmap/msgs/cdr"
	"github.com/lingbotmap/lingbotmap/node/ros2/dds"
)

// discoveryTopic carries rmw_dds_common/msg/ParticipantEntitiesInfo: which
// nodes live in a participant and which readers and writers each owns.
// `ros2 node list` and the ROS 2 graph API read it.
const discoveryTopic = "ros_discovery_info"

func newDiscoveryInfo() *cdr.ParticipantEntitiesInfo { return &cdr.ParticipantEntitiesInfo{} }

// gidOf is rmw's gid of an entity: its GUID (MarshalDiscovery pads it to
// Humble's size where that is the one written).
func gidOf(g dds.GUID) cdr.Gid {
	var out cdr.Gid
	copy(out.Data[:], g[:])
	return out
}

func sortedGids(set map[dds.GUID]struct{}) []cdr.Gid {
	out := make([]cdr.Gid, 0, len(set))
	for g := range set {
		out = append(out, gidOf(g))
	}
	sort.Slice(out, func(i, j int) bool { return string(out[i].Data[:]) < string(out[j].Data[:]) })
	return out
}

// publishInfoLocked publishes the participant's entities, with this node
// (present) or without it (leaving). t.mu is held.
func (t *Transport) publishInfoLocked(present bool) error {
	info := newDiscoveryInfo()
	info.Gid = gidOf(t.pp.GUID())
	if present {
		info.NodeEntitiesInfoSeq = []cdr.NodeEntitiesInfo{{
			NodeNamespace: t.args.Namespace,
			NodeName:      t.args.Name,
			ReaderGidSeq:  sortedGids(t.readers),
			WriterGidSeq:  sortedGids(t.writers),
		}}
	}
	b, err := cdr.MarshalDiscovery(info, t.gid)
	if err != nil {
		return fmt.Errorf("ros2: encoding ros_discovery_info: %w", err)
	}
	if err := t.info.Write(b); err != nil {
		return fmt.Errorf("ros2: publishing ros_discovery_info: %w", err)
	}
	return nil
}
