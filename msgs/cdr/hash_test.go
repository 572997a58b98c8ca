package cdr

import (
	"strings"
	"testing"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
)

// Published REP 2011 hashes, compared with the ones computed from our own
// descriptions.
//
// Unless noted, the values come from the rosidl-generated C headers
// src/<pkg>/{msg,srv}/detail/<type>__struct.h (the <Type>__TYPE_HASH
// constants) of github.com/micro-ROS/micro_ros_arduino at commit
// 57e9c210191a909ab7fddaa2b80f10d40ff3ebb7 (rolling, 2023-03-25, built from
// the same interface definitions as Iron and Jazzy). PoseStamped's value is
// also the one in ../shared/docs/ros2-notes.md.
var publishedHashes = map[string]string{
	"builtin_interfaces/msg/Time":           "RIHS01_b106235e25a4c5ed35098aa0a61a3ee9c9b18d197f398b0e4206cea9acf9c197",
	"std_msgs/msg/Header":                   "RIHS01_f49fb3ae2cf070f793645ff749683ac6b06203e41c891e17701b1cb597ce6a01",
	"geometry_msgs/msg/Point":               "RIHS01_6963084842a9b04494d6b2941d11444708d892da2f4b09843b9c43f42a7f6881",
	"geometry_msgs/msg/Quaternion":          "RIHS01_8a765f66778c8ff7c8ab94afcc590a2ed5325a1d9a076ffff38fbce36f458684",
	"geometry_msgs/msg/Pose":                "RIHS01_d501954e9476cea2996984e812054b68026ae0bfae789d9a10b23daf35cc90fa",
	"geometry_msgs/msg/PoseStamped":         "RIHS01_10f3786d7d40fd2b54367835614bff85d4ad3b5dab62bf8bca0cc232d73b4cd8",
	"geometry_msgs/msg/Vector3":             "RIHS01_cc12fe83e4c02719f1ce8070bfd14aecd40f75a96696a67a2a1f37f7dbb0765d",
	"geometry_msgs/msg/Transform":           "RIHS01_beb83fbe698636351461f6f35d1abb20010c43d55374d81bd041f1ba2581fddc",
	"geometry_msgs/msg/TransformStamped":    "RIHS01_0a241f87d04668d94099cbb5ba11691d5ad32c2f29682e4eb5653424bd275206",
	"geometry_msgs/msg/Twist":               "RIHS01_9c45bf16fe0983d80e3cfe750d6835843d265a9a6c46bd2e609fcddde6fb8d2a",
	"geometry_msgs/msg/PoseWithCovariance":  "RIHS01_9a7c0fd234b7f45c6098745ecccd773ca1085670e64107135397aee31c02e1bb",
	"geometry_msgs/msg/TwistWithCovariance": "RIHS01_49f574f033f095d8b6cd1beaca5ca7925e296e84af1716d16c89d38b059c8c18",
	"nav_msgs/msg/Odometry":                 "RIHS01_3cc97dc7fb7502f8714462c526d369e35b603cfc34d946e3f2eda2766dfec6e0",
	"nav_msgs/msg/Path":                     "RIHS01_1957a5bb3cee5da65c4e52e52b65a93df227efce4c20f8458b36e73066ca334b",
	// from the Jazzy install's share/nav_msgs/msg/*.json (../shared/tools/ros2-jazzy)
	"nav_msgs/msg/MapMetaData":             "RIHS01_2772d4b2000ef2b35dbaeb80fd3946c1369f817fb4f75677d916d27c17d763c8",
	"nav_msgs/msg/OccupancyGrid":           "RIHS01_8d348150c12913a31ee0ec170fbf25089e4745d17035792a1ba94d6f0bc0cfc7",
	"tf2_msgs/msg/TFMessage":               "RIHS01_e369d0f05a23ae52508854b66f6aa0437f3449d652e8cbf22d5abe85d020f087",
	"sensor_msgs/msg/Image":                "RIHS01_d31d41a9a4c4bc8eae9be757b0beed306564f7526c88ea6a4588fb9582527d47",
	"sensor_msgs/msg/CompressedImage":      "RIHS01_15640771531571185e2efc8a100baf923961a4d15d5569652e6cb6691e8e371a",
	"sensor_msgs/msg/RegionOfInterest":     "RIHS01_ad16bcba5f9131dcdba6fbded19f726f5440e3c513b4fb586dd3027eeed8abb1",
	"sensor_msgs/msg/CameraInfo":           "RIHS01_b3dfd68ff46c9d56c80fd3bd4ed22c7a4ddce8c8348f2f59c299e73118e7e275",
	"sensor_msgs/msg/PointField":           "RIHS01_5c6a4750728c2bcfbbf7037225b20b02d4429634732146b742dee1726637ef01",
	"sensor_msgs/msg/PointCloud2":          "RIHS01_9198cabf7da3796ae6fe19c4cb3bdd3525492988c70522628af5daa124bae2b5",
	"diagnostic_msgs/msg/KeyValue":         "RIHS01_d68081eaa540288c5440753baecef0c4e16e81a5f78ad68902ded5100413bb42",
	"diagnostic_msgs/msg/DiagnosticStatus": "RIHS01_b0e3e692ea2d54a8af2f4ef1930e81556a2db55216b771f8a7d2724ed47bf0e4",
	"diagnostic_msgs/msg/DiagnosticArray":  "RIHS01_5a8a36efb05fb25070fa0fb3810290c0e6cd4862b54a8fb975a1ee8dc55a333e",
	"std_srvs/srv/Trigger_Request":         "RIHS01_d010825374ce8918e72bfd826c82603e60f45419e932ea976f807b74a863a199",
	"std_srvs/srv/Trigger_Response":        "RIHS01_2d946c21e2fc3f1e9ca6986a8191d85fcc70097a8bb7771a053564bc47009cdf",
	"std_srvs/srv/Trigger_Event":           "RIHS01_ec4a1d26b0575e61906890342aba9523a2360e9845857c5590fa6e23bc39e1c2",
	"std_srvs/srv/Trigger":                 "RIHS01_eeff2cd6fa5ad9d27cdf4dec64818317839b62f212a91e6b5304b634b2062c5f",
	"service_msgs/msg/ServiceEventInfo":    "RIHS01_41bcbbe07a75c9b52bc96bfd5c24d7f0fc0a08c0cb7921b3373c5732345a6f45",
}

func TestPublishedHashes(t *testing.T) { checkHashes(t, publishedHashes) }

// checkHashes: every type of want is described, with that hash.
func checkHashes(t *testing.T, want map[string]string) {
	t.Helper()
	r, err := theRegistry()
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		d, ok := r.cat.byName[name]
		if !ok {
			t.Errorf("%s is not described", name)
			continue
		}
		if got := d.hash(); got != w {
			t.Errorf("%s: hash %s, want %s", name, got, w)
		}
	}
}

// TypeOf gives the names and hash the notes quote for PoseStamped.
func TestTypeOfPoseStamped(t *testing.T) {
	ty, err := TypeOf(&geometry_msgs.PoseStamped{})
	if err != nil {
		t.Fatal(err)
	}
	want := Type{
		Name:    "geometry_msgs/msg/PoseStamped",
		DDSName: "geometry_msgs::msg::dds_::PoseStamped_",
		Hash:    "RIHS01_10f3786d7d40fd2b54367835614bff85d4ad3b5dab62bf8bca0cc232d73b4cd8",
	}
	if ty.Name != want.Name || ty.DDSName != want.DDSName || ty.Hash != want.Hash {
		t.Fatalf("TypeOf(PoseStamped) = %+v, want %+v", ty, want)
	}
	srv, err := TriggerService()
	if err != nil {
		t.Fatal(err)
	}
	if srv.Hash != publishedHashes["std_srvs/srv/Trigger"] || srv.Request.DDSName != "std_srvs::srv::dds_::Trigger_Request_" ||
		srv.Response.DDSName != "std_srvs::srv::dds_::Trigger_Response_" {
		t.Fatalf("TriggerService() = %+v", srv)
	}
}

// rmw_dds_common's messages have hashes only from Iron on, where Gid holds
// 16 bytes. The same descriptions with a 16-byte Gid must give the published
// values, from a rosidl-generated
// rmw_dds_common/msg/detail/participant_entities_info__description.c (Iron
// or later; its EXPECTED_HASH table lists Gid and NodeEntitiesInfo).
func TestDiscoveryHashesIron(t *testing.T) {
	gid, node, participant := discoveryDescs(16)
	for _, c := range []struct {
		d    *typeDesc
		want string
	}{
		{gid, "RIHS01_ab6f21cfbb0a6dbb837161e1110c2051a2850ed9f9c53944d7115d9bcebedf71"},
		{node, "RIHS01_8ffef65ee2d088c63b1e8fcd31e800ba9fc8dbe0ee15ca60d1676de5218087a7"},
		{participant, "RIHS01_91a0593bacdcc50ea9bdcf849a938b128412cc1ea821245c663bcd26f83c295e"},
	} {
		if got := c.d.hash(); got != c.want {
			t.Errorf("%s: hash %s, want %s", c.d.name, got, c.want)
		}
	}
	// Marshal's layout is Iron's, and so is its hash; DiscoveryType gives
	// Humble's layout no hash (Humble predates them).
	ty, err := TypeOf(&ParticipantEntitiesInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if ty.Hash != "RIHS01_91a0593bacdcc50ea9bdcf849a938b128412cc1ea821245c663bcd26f83c295e" {
		t.Fatalf("ParticipantEntitiesInfo hash %q", ty.Hash)
	}
	for size, want := range map[int]string{GidSizeIron: ty.Hash, GidSizeHumble: ""} {
		dt, err := DiscoveryType(size)
		if err != nil || dt.Hash != want || dt.DDSName != "rmw_dds_common::msg::dds_::ParticipantEntitiesInfo_" {
			t.Fatalf("DiscoveryType(%d) = %+v, %v", size, dt, err)
		}
	}
	if _, err := DiscoveryType(20); err == nil {
		t.Fatal("DiscoveryType(20) accepted")
	}
}

// The schema is the .msg text, then every referenced type after a line of 80
// '=' and "MSG: pkg/Type", as rosbag2 writes it into MCAP files.
func TestSchemaText(t *testing.T) {
	ty, err := TypeOf(&geometry_msgs.PoseStamped{})
	if err != nil {
		t.Fatal(err)
	}
	sep := strings.Repeat("=", 80) + "\n"
	want := "std_msgs/Header header\ngeometry_msgs/Pose pose\n" +
		sep + "MSG: builtin_interfaces/Time\nint32 sec\nuint32 nanosec\n" +
		sep + "MSG: geometry_msgs/Point\nfloat64 x\nfloat64 y\nfloat64 z\n" +
		sep + "MSG: geometry_msgs/Pose\ngeometry_msgs/Point position\ngeometry_msgs/Quaternion orientation\n" +
		sep + "MSG: geometry_msgs/Quaternion\nfloat64 x\nfloat64 y\nfloat64 z\nfloat64 w\n" +
		sep + "MSG: std_msgs/Header\nbuiltin_interfaces/Time stamp\nstring frame_id\n"
	if ty.Schema != want {
		t.Fatalf("schema:\n%s\nwant:\n%s", ty.Schema, want)
	}
	for name, wantIn := range map[string]string{
		"sensor_msgs/msg/PointCloud2":                "uint8 FLOAT64=8\nstring name\n",
		"diagnostic_msgs/msg/DiagnosticStatus":       "byte ERROR=2\n",
		"sensor_msgs/msg/CameraInfo":                 "float64[] d\nfloat64[9] k\n",
		"rmw_dds_common/msg/ParticipantEntitiesInfo": "string<=256 node_name\nrmw_dds_common/Gid[] reader_gid_seq\n",
	} {
		ty, ok := TypeByName(name)
		if !ok || !strings.Contains(ty.Schema, wantIn) {
			t.Errorf("%s schema lacks %q:\n%s", name, wantIn, ty.Schema)
		}
	}
}
