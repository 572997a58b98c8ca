// Independent check of a ROS 2 MCAP bag written by lingbotmap: @mcap/core reads
// it (indexed reader, CRCs checked, zstd/lz4 via @mcap/support) and
// @foxglove/rosmsg2-serialization decodes every message with the ros2msg schema
// stored in the file. Nothing here shares code with the Go encoder.
// Usage: node mcap-check.mjs FILE.mcap  — prints one JSON object per line.
import { McapIndexedReader } from "@mcap/core";
import { FileHandleReadable } from "@mcap/nodejs";
import { loadDecompressHandlers } from "@mcap/support";
import { parse } from "@foxglove/rosmsg";
import { MessageReader } from "@foxglove/rosmsg2-serialization";
import { createHash } from "node:crypto";
import { open } from "node:fs/promises";

const out = (o) => console.log(JSON.stringify(o, (_, v) => (typeof v === "bigint" ? v.toString() : v)));
const fh = await open(process.argv[2], "r");
const reader = await McapIndexedReader.Initialize({ readable: new FileHandleReadable(fh), decompressHandlers: await loadDecompressHandlers() });
out({ profile: reader.header.profile, library: reader.header.library, messages: reader.statistics?.messageCount,
  chunks: reader.chunkIndexes.length, compression: reader.chunkIndexes[0]?.compression });
for (const s of reader.schemasById.values()) out({ schema: { id: s.id, name: s.name, encoding: s.encoding, bytes: s.data.length } });
for (const c of reader.channelsById.values()) {
  out({ channel: { id: c.id, topic: c.topic, schemaId: c.schemaId, encoding: c.messageEncoding, qos: c.metadata.get("offered_qos_profiles") ?? null } });
}
const decoders = new Map();
let n = 0;
for await (const m of reader.readMessages()) {
  const ch = reader.channelsById.get(m.channelId);
  const sc = reader.schemasById.get(ch.schemaId);
  if (!decoders.has(sc.id)) decoders.set(sc.id, new MessageReader(parse(new TextDecoder().decode(sc.data), { ros2: true })));
  const msg = decoders.get(sc.id).readMessage(m.data);
  const rec = { seq: m.sequence, logTime: m.logTime, topic: ch.topic, type: sc.name };
  if (msg.header) rec.header = { frame_id: msg.header.frame_id, sec: msg.header.stamp.sec, nanosec: msg.header.stamp.nanosec };
  for (const k of ["width", "height", "encoding", "is_bigendian", "step", "format"]) if (k in msg) rec[k] = msg[k];
  if (msg.data instanceof Uint8Array) rec.data = { bytes: msg.data.length, sha256: createHash("sha256").update(msg.data).digest("hex") };
  if (msg.pose?.position) rec.position = [msg.pose.position.x, msg.pose.position.y, msg.pose.position.z];
  out({ msg: rec });
  n++;
}
out({ decoded: n });
await fh.close();
