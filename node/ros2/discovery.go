package ros2

import (
	"encoding/xml"
	"strconv"
	"strings"
)

// cycloneConfig is the Cyclone DDS configuration for a discovery range, in
// front of the user's CYCLONEDDS_URI (which may override it), as
// rmw_cyclonedds builds it. "" leaves Cyclone to its defaults and
// CYCLONEDDS_URI.
func cycloneConfig(r DiscoveryRange, peers []string, pid int, cycloneURI string) string {
	var b strings.Builder
	switch r {
	case DiscoverySystemDefault:
		return cycloneURI
	case DiscoverySubnet:
		if len(peers) == 0 {
			return cycloneURI
		}
		b.WriteString(`<CycloneDDS><Domain id="any"><Discovery><ParticipantIndex>auto</ParticipantIndex><MaxAutoParticipantIndex>32</MaxAutoParticipantIndex>`)
		writePeers(&b, peers)
		b.WriteString(`</Discovery></Domain></CycloneDDS>`)
	case DiscoveryLocalhost:
		// Loopback only, unicast discovery to the participant ports on this host.
		b.WriteString(`<CycloneDDS><Domain id="any"><General><Interfaces><NetworkInterface address="127.0.0.1"/></Interfaces><AllowMulticast>false</AllowMulticast></General>`)
		b.WriteString(`<Discovery><ParticipantIndex>auto</ParticipantIndex><MaxAutoParticipantIndex>32</MaxAutoParticipantIndex>`)
		writePeers(&b, append([]string{"localhost"}, peers...))
		b.WriteString(`</Discovery></Domain></CycloneDDS>`)
	case DiscoveryOff:
		// A domain tag no other process uses keeps every participant out.
		b.WriteString(`<CycloneDDS><Domain id="any"><General><AllowMulticast>false</AllowMulticast></General>`)
		b.WriteString(`<Discovery><ParticipantIndex>none</ParticipantIndex><Tag>ros_discovery_off_` + strconv.Itoa(pid) + `</Tag></Discovery></Domain></CycloneDDS>`)
	}
	if cycloneURI != "" {
		b.WriteString(",")
		b.WriteString(cycloneURI)
	}
	return b.String()
}

func writePeers(b *strings.Builder, peers []string) {
	b.WriteString("<Peers>")
	for _, p := range peers {
		b.WriteString(`<Peer address="`)
		_ = xml.EscapeText(b, []byte(p))
		b.WriteString(`"/>`)
	}
	b.WriteString("</Peers>")
}
