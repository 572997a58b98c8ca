package ros2

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/lingbotmap/lingbotmap/msgs/cdr"
	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/ros2/dds"
)

// gidSizeKey is the setting (and -p parameter) that fixes the Gid size of
// ros_discovery_info; 0 follows ROS_DISTRO.
const gidSizeKey = "ros2_gid_size"

// gidSize is the Gid size the node writes ros_discovery_info with, and what
// chose it: the ros2_gid_size parameter (-p, --params-file), the setting
// (config file, flag, environment), else ROS_DISTRO (unset means a current
// distribution, Iron or later).
func (t *Transport) gidSize() (int, string, error) {
	size, from := t.args.GidSize, gidSizeKey+" setting"
	if t.args.Params != nil {
		if set, err := t.args.Params.IsSet(gidSizeKey); err == nil && set {
			v, err := t.args.Params.Int(gidSizeKey)
			if err != nil {
				return 0, "", fmt.Errorf("ros2: parameter %s: %w", gidSizeKey, err)
			}
			size, from = v, gidSizeKey+" parameter"
		}
	}
	switch size {
	case cdr.GidSizeIron, cdr.GidSizeHumble:
		return size, from, nil
	case 0:
		if t.args.Distro == "" {
			return cdr.GidSizeIron, "ROS_DISTRO unset (Iron and later)", nil
		}
		return cdr.GidSizeForDistro(t.args.Distro), "ROS_DISTRO=" + t.args.Distro, nil
	}
	return 0, "", fmt.Errorf("ros2: %s %d: want 0 (follow ROS_DISTRO), %d (Iron and later) or %d (Humble)",
		from, size, cdr.GidSizeIron, cdr.GidSizeHumble)
}

// graphWatch reads every participant's ros_discovery_info. A peer that
// writes the other Gid size (a Humble node beside Jazzy ones, or the
// reverse) is decoded all the same, but its graph tools cannot list this
// node, nor ours its nodes: each such participant is logged once and
// counted, as are samples neither layout reads.
type graphWatch struct {
	log  *slog.Logger
	own  int
	self dds.GUID
	r    *dds.Reader

	mu         sync.Mutex
	other      map[cdr.Gid]int // participants seen with the other size
	mismatched int64           // how many (other stops growing at maxGraphPeers)
	badLogged  bool
	bad        int64
}

// maxGraphPeers bounds the participants remembered so that each is counted
// once; beyond it a peer that republishes is counted again.
const maxGraphPeers = 4096

func watchGraph(pp *dds.Participant, ddsName string, q dds.QoS, own int, self dds.GUID, log *slog.Logger) (*graphWatch, error) {
	g := &graphWatch{log: log, own: own, self: self, other: map[cdr.Gid]int{}}
	q.Depth = 100 // keyless: one sample per participant may wait here at once
	r, err := pp.NewReader(discoveryTopic, ddsName, q, g.sample)
	if err != nil {
		return nil, fmt.Errorf("ros2: reading ros_discovery_info: %w", err)
	}
	g.r = r
	return g, nil
}

func (g *graphWatch) sample(s dds.Sample) {
	info, size, err := cdr.UnmarshalDiscovery(s.Data, g.own)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		g.bad++
		if !g.badLogged {
			g.badLogged = true
			g.log.Warn("a peer's ros_discovery_info cannot be read (reported once; counted in /diagnostics as ros2_graph_unreadable)", "err", err)
		}
		return
	}
	if size == g.own || info.Gid == gidOf(g.self) {
		return
	}
	if _, seen := g.other[info.Gid]; seen {
		return
	}
	if len(g.other) < maxGraphPeers {
		g.other[info.Gid] = size
	}
	g.mismatched++
	var names []string
	for _, n := range info.NodeEntitiesInfoSeq {
		names = append(names, (&Args{Namespace: n.NodeNamespace, Name: n.NodeName}).FullName())
	}
	// Every run of a ros2 command is a participant of its own: the first
	// such peer is a warning, the others go to debug and the count.
	level := slog.LevelWarn
	if g.mismatched > 1 {
		level = slog.LevelDebug
	}
	g.log.Log(context.Background(), level, "a peer writes ros_discovery_info with other Gids than this node: its ros2 node list cannot show this node (set ros2_gid_size or ROS_DISTRO to match; further peers counted in /diagnostics as ros2_gid_mismatched_peers)",
		"peer_gid_bytes", size, "peer_distro", distroOfGid(size), "own_gid_bytes", g.own, "peer_nodes", names)
}

func distroOfGid(size int) string {
	if size == cdr.GidSizeHumble {
		return "humble"
	}
	return "iron or later"
}

func (g *graphWatch) stats() node.TransportStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return node.TransportStats{GidMismatchedPeers: g.mismatched, GraphUnreadable: g.bad}
}
