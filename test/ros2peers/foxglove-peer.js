// foxglove-peer: an independent ROS 2 peer on @foxglove/rtps (a TypeScript
// RTPS stack, what Foxglove uses), decoding with
// @foxglove/rosmsg2-serialization from the ROS 2 .msg definitions below.
//
//   node foxglove-peer.js TOPIC TYPE N [SECS]
//
// TYPE is geometry_msgs/msg/PoseStamped or sensor_msgs/msg/PointCloud2.
// Prints one JSON object per line: discovery events, then each message
// (clouds with their size, the sha256 of their data and the first points).
// Exits 0 after N messages, 1 after SECS seconds (default 60).
const { createHash } = require("node:crypto");
const { Participant, Durability, Reliability, HistoryKind } = require("@foxglove/rtps");
const { UdpSocketNode } = require("@foxglove/rtps/nodejs");
const { parse } = require("@foxglove/rosmsg");
const { MessageReader } = require("@foxglove/rosmsg2-serialization");

const SEP = "\n================================================================================\n";
const header = ["MSG: std_msgs/Header\nbuiltin_interfaces/Time stamp\nstring frame_id", "MSG: builtin_interfaces/Time\nint32 sec\nuint32 nanosec"];
const defs = {
  "geometry_msgs/msg/PoseStamped": [
    "std_msgs/Header header\ngeometry_msgs/Pose pose",
    ...header,
    "MSG: geometry_msgs/Pose\nPoint position\nQuaternion orientation",
    "MSG: geometry_msgs/Point\nfloat64 x\nfloat64 y\nfloat64 z",
    "MSG: geometry_msgs/Quaternion\nfloat64 x\nfloat64 y\nfloat64 z\nfloat64 w",
  ].join(SEP),
  "sensor_msgs/msg/PointCloud2": [
    "std_msgs/Header header\nuint32 height\nuint32 width\nPointField[] fields\nbool is_bigendian\nuint32 point_step\nuint32 row_step\nuint8[] data\nbool is_dense",
    ...header,
    "MSG: sensor_msgs/PointField\nstring name\nuint32 offset\nuint8 datatype\nuint32 count",
  ].join(SEP),
};

const [rosTopic, rosType, want = "1", secs = "60"] = process.argv.slice(2);
if (!rosTopic || !defs[rosType]) {
  console.error(`usage: node foxglove-peer.js TOPIC (${Object.keys(defs).join("|")}) N [SECS]`);
  process.exit(2);
}
const [pkg, , name] = rosType.split("/");
const reader = new MessageReader(parse(defs[rosType], { ros2: true }));
const out = (o) => console.log(JSON.stringify(o));

async function main() {
  const p = new Participant({
    name: "foxglove-peer", addresses: ["127.0.0.1"], domainId: 0, udpSocketCreate: UdpSocketNode.Create,
    log: { debug() {}, info() {}, warn: (m) => console.error("warn:", m), error: (m) => console.error("error:", m) },
  });
  await p.start();
  p.on("discoveredPublication", (e) => out({ event: "publication", topic: e.topicName, type: e.typeName }));
  p.subscribe({
    topicName: "rt" + rosTopic, typeName: `${pkg}::msg::dds_::${name}_`, durability: Durability.Volatile,
    reliability: { kind: Reliability.BestEffort, maxBlockingTime: { sec: 0, nsec: 0 } },
    history: { kind: HistoryKind.KeepLast, depth: 100 },
  });
  out({ event: "ready", topic: rosTopic, type: rosType });
  let n = 0;
  p.on("userData", (ud) => {
    const m = reader.readMessage(ud.serializedData);
    const base = { event: "msg", n, encapsulation: [ud.serializedData[0], ud.serializedData[1]], stamp: m.header.stamp, frame_id: m.header.frame_id };
    if (rosType.endsWith("PoseStamped")) {
      const { position: t, orientation: q } = m.pose;
      out({ ...base, kind: "pose", position: [t.x, t.y, t.z], orientation: [q.x, q.y, q.z, q.w] });
    } else {
      const dv = new DataView(m.data.buffer, m.data.byteOffset, m.data.byteLength);
      const first = [];
      for (let i = 0; i < Math.min(3, m.width * m.height); i++) {
        first.push([0, 4, 8].map((o) => dv.getFloat32(i * m.point_step + o, true)));
      }
      out({
        ...base, kind: "cloud", width: m.width, height: m.height, point_step: m.point_step,
        fields: m.fields.map((f) => f.name), data_len: m.data.length,
        sha256: createHash("sha256").update(m.data).digest("hex"), first,
      });
    }
    if (++n >= Number(want)) {
      out({ event: "done", count: n });
      p.shutdown().then(() => process.exit(0));
    }
  });
  setTimeout(() => { out({ event: "timeout", count: n }); process.exit(1); }, Number(secs) * 1000);
}
main().catch((e) => { console.error(e); process.exit(1); });
