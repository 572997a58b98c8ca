// fastdds-peer: an independent ROS 2 peer on eProsima Fast DDS 2.9 (the
// default RMW vendor of Humble and Jazzy). A raw-CDR TopicDataType is
// registered under the ROS 2 DDS type name; the peer decodes and encodes CDR
// by hand, independently of the project's Go encoder.
//
//   fastdds-peer sub-pose TOPIC N [SECS] prints N PoseStamped from TOPIC as JSON
//       lines (and a "matched" line when its matched writers change); fails
//       after SECS seconds (default 60)
//   fastdds-peer pub-corrupt TOPIC KIND publishes one broken sensor_msgs/msg/Image:
//       truncated   the payload ends inside the header's frame_id
//       overlength  the data sequence claims more bytes than follow
//       huge        the encoding string claims 4 GB
//       With a last argument --stdin it sends once a line arrives on stdin,
//       and again for each further line until EOF.
//
// It talks over loopback unicast only (metatraffic port 7460, initial peers
// 7410 + 2i): the Cyclone side lists 127.0.0.1 as a peer (see README.md).
#include <fastdds/dds/domain/DomainParticipantFactory.hpp>
#include <fastdds/dds/domain/DomainParticipant.hpp>
#include <fastdds/dds/publisher/DataWriter.hpp>
#include <fastdds/dds/publisher/Publisher.hpp>
#include <fastdds/dds/publisher/qos/DataWriterQos.hpp>
#include <fastdds/dds/subscriber/Subscriber.hpp>
#include <fastdds/dds/subscriber/DataReader.hpp>
#include <fastdds/dds/subscriber/SampleInfo.hpp>
#include <fastdds/dds/subscriber/qos/DataReaderQos.hpp>
#include <fastdds/dds/topic/TopicDataType.hpp>
#include <fastdds/rtps/transport/UDPv4TransportDescriptor.h>
#include <fastrtps/utils/IPLocator.h>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
using namespace eprosima::fastdds::dds;
using namespace eprosima::fastrtps::rtps;
using eprosima::fastdds::rtps::UDPv4TransportDescriptor;

struct Raw { std::vector<unsigned char> b; };
class RawType : public TopicDataType {
public:
  explicit RawType(const char *name) { setName(name); m_typeSize = 64 * 1024 * 1024; m_isGetKeyDefined = false; }
  bool serialize(void *d, SerializedPayload_t *p) override {
    auto r = (Raw *)d;
    if (p->max_size < r->b.size()) p->reserve(r->b.size());
    memcpy(p->data, r->b.data(), r->b.size());
    p->length = r->b.size();
    return true;
  }
  bool deserialize(SerializedPayload_t *p, void *d) override { ((Raw *)d)->b.assign(p->data, p->data + p->length); return true; }
  std::function<uint32_t()> getSerializedSizeProvider(void *d) override { return [d] { return (uint32_t)((Raw *)d)->b.size(); }; }
  void *createData() override { return new Raw(); }
  void deleteData(void *d) override { delete (Raw *)d; }
  bool getKey(void *, InstanceHandle_t *, bool) override { return false; }
};

// Rd reads XCDR1 little endian; alignment counts from after the 4-byte encapsulation.
struct Rd {
  const std::vector<unsigned char> &b;
  size_t o = 4;
  bool ok = true;
  void al(size_t n) { while ((o - 4) % n) o++; }
  bool need(size_t n) { if (o + n > b.size()) ok = false; return ok; }
  uint32_t u32() { al(4); uint32_t v = 0; if (need(4)) memcpy(&v, &b[o], 4); o += 4; return v; }
  double f64() { al(8); double v = 0; if (need(8)) memcpy(&v, &b[o], 8); o += 8; return v; }
  std::string str() { uint32_t n = u32(); if (!need(n) || n == 0) return ""; std::string s((const char *)&b[o], n - 1); o += n; return s; }
};

// Wr writes XCDR1 little endian.
struct Wr {
  std::vector<unsigned char> b{0x00, 0x01, 0x00, 0x00};
  void al(size_t n) { while ((b.size() - 4) % n) b.push_back(0); }
  void u32(uint32_t v) { al(4); b.insert(b.end(), (unsigned char *)&v, (unsigned char *)&v + 4); }
  void u8(uint8_t v) { b.push_back(v); }
  void str(const std::string &s) { u32((uint32_t)s.size() + 1); b.insert(b.end(), s.begin(), s.end()); b.push_back(0); }
};

static std::string dds_topic(std::string ros) {
  while (!ros.empty() && ros[0] == '/') ros.erase(0, 1);
  return "rt/" + ros;
}

static DomainParticipant *participant() {
  DomainParticipantQos pq;
  pq.name("fastdds_peer");
  pq.transport().use_builtin_transports = false;
  auto udp = std::make_shared<UDPv4TransportDescriptor>();
  udp->interfaceWhiteList.push_back("127.0.0.1");
  pq.transport().user_transports.push_back(udp);
  auto &b = pq.wire_protocol().builtin;
  b.avoid_builtin_multicast = true;
  Locator_t l; IPLocator::setIPv4(l, 127, 0, 0, 1); l.port = 7460; b.metatrafficUnicastLocatorList.push_back(l);
  Locator_t d; IPLocator::setIPv4(d, 127, 0, 0, 1); d.port = 7461; pq.wire_protocol().default_unicast_locator_list.push_back(d);
  for (int i = 0; i < 10; i++) { Locator_t p; IPLocator::setIPv4(p, 127, 0, 0, 1); p.port = 7410 + 2 * i; b.initialPeersList.push_back(p); }
  return DomainParticipantFactory::get_instance()->create_participant(0, pq);
}

static int sub_pose(const std::string &topic, int want, int secs) {
  auto *pp = participant();
  TypeSupport ts(new RawType("geometry_msgs::msg::dds_::PoseStamped_"));
  ts.register_type(pp);
  auto *tp = pp->create_topic(dds_topic(topic), ts.get_type_name(), TOPIC_QOS_DEFAULT);
  auto *sub = pp->create_subscriber(SUBSCRIBER_QOS_DEFAULT);
  DataReaderQos rq = DATAREADER_QOS_DEFAULT;
  rq.reliability().kind = RELIABLE_RELIABILITY_QOS;
  rq.history().kind = KEEP_ALL_HISTORY_QOS;
  auto *rd = sub->create_datareader(tp, rq);
  printf("{\"event\":\"ready\",\"topic\":\"%s\"}\n", topic.c_str());
  fflush(stdout);
  int got = 0;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(secs);
  int matched = 0;
  while (got < want && std::chrono::steady_clock::now() < end) {
    SubscriptionMatchedStatus ms;
    if (rd->get_subscription_matched_status(ms) == ReturnCode_t::RETCODE_OK && ms.current_count != matched) {
      matched = ms.current_count;
      printf("{\"event\":\"matched\",\"topic\":\"%s\",\"writers\":%d}\n", topic.c_str(), matched);
      fflush(stdout);
    }
    Raw r;
    SampleInfo si;
    while (got < want && rd->take_next_sample(&r, &si) == ReturnCode_t::RETCODE_OK) {
      if (!si.valid_data) continue;
      Rd c{r.b};
      int32_t sec = (int32_t)c.u32();
      uint32_t ns = c.u32();
      std::string frame = c.str();
      double p[3], q[4];
      for (double &v : p) v = c.f64();
      for (double &v : q) v = c.f64();
      if (!c.ok || r.b.size() < 4 || r.b[1] != 0x01) {
        printf("{\"event\":\"bad\",\"bytes\":%zu}\n", r.b.size());
        fflush(stdout);
        continue;
      }
      printf("{\"event\":\"msg\",\"kind\":\"pose\",\"n\":%d,\"stamp\":{\"sec\":%d,\"nanosec\":%u},\"frame_id\":\"%s\","
             "\"position\":[%.17g,%.17g,%.17g],\"orientation\":[%.17g,%.17g,%.17g,%.17g]}\n",
             got, sec, ns, frame.c_str(), p[0], p[1], p[2], q[0], q[1], q[2], q[3]);
      fflush(stdout);
      got++;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  printf("{\"event\":\"done\",\"count\":%d}\n", got);
  fflush(stdout);
  pp->delete_contained_entities();
  DomainParticipantFactory::get_instance()->delete_participant(pp);
  return got >= want ? 0 : 1;
}

static int pub_corrupt(const std::string &topic, const std::string &kind, bool go) {
  Wr w;
  w.u32(1700000000); w.u32(0);  // stamp
  if (kind == "truncated") {
    w.u32(15);                    // frame_id length, then too few bytes
    w.u8('c'); w.u8('a');
  } else if (kind == "overlength") {
    w.str("camera_optical");
    w.u32(6); w.u32(8); w.str("rgb8"); w.u8(0); w.u32(24);
    w.u32(1000000);               // the data sequence's count, with 10 bytes after it
    for (int i = 0; i < 10; i++) w.u8(7);
  } else if (kind == "huge") {
    w.str("camera_optical");
    w.u32(6); w.u32(8);
    w.u32(0xFFFFFFF0u);           // the encoding string's length
    w.u8('r'); w.u8('g');
  } else {
    fprintf(stderr, "pub-corrupt: unknown kind %s\n", kind.c_str());
    return 2;
  }
  auto *pp = participant();
  TypeSupport ts(new RawType("sensor_msgs::msg::dds_::Image_"));
  ts.register_type(pp);
  auto *tp = pp->create_topic(dds_topic(topic), ts.get_type_name(), TOPIC_QOS_DEFAULT);
  auto *pub = pp->create_publisher(PUBLISHER_QOS_DEFAULT);
  DataWriterQos wq = DATAWRITER_QOS_DEFAULT;
  wq.reliability().kind = RELIABLE_RELIABILITY_QOS;
  auto *wr = pub->create_datawriter(tp, wq);
  PublicationMatchedStatus st;
  for (int t = 0; t < 600; t++) {
    wr->get_publication_matched_status(st);
    if (st.current_count > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (st.current_count == 0) {
    printf("{\"event\":\"matched\",\"topic\":\"%s\",\"ok\":false}\n", topic.c_str());
    return 1;
  }
  printf("{\"event\":\"matched\",\"topic\":\"%s\",\"ok\":true}\n", topic.c_str());
  fflush(stdout);
  // With --stdin the test says when the reader has matched too (the writer's
  // side of a match comes first, and a best-effort reader drops what comes
  // before its side).
  // Each further line sends the sample again (a best-effort reader may have
  // dropped it), until EOF.
  char line[64];
  if (go && !fgets(line, sizeof line, stdin)) return 1;
  Raw r{w.b};
  bool ok;
  do {
    ok = wr->write(&r);
    printf("{\"event\":\"published\",\"kind\":\"%s\",\"bytes\":%zu,\"ok\":%s}\n", kind.c_str(), r.b.size(), ok ? "true" : "false");
    fflush(stdout);
  } while (ok && go && fgets(line, sizeof line, stdin));
  // The sample is lost if the writer goes before the reader has it (a fixed
  // wait is not enough on a loaded machine): wait for its acknowledgement.
  bool acked = ok && wr->wait_for_acknowledgments(eprosima::fastrtps::Duration_t(60, 0)) == ReturnCode_t::RETCODE_OK;
  printf("{\"event\":\"acked\",\"ok\":%s}\n", acked ? "true" : "false");
  fflush(stdout);
  pp->delete_contained_entities();
  DomainParticipantFactory::get_instance()->delete_participant(pp);
  return acked ? 0 : 1;
}

int main(int argc, char **argv) {
  if ((argc == 4 || argc == 5) && !strcmp(argv[1], "sub-pose")) return sub_pose(argv[2], atoi(argv[3]), argc == 5 ? atoi(argv[4]) : 60);
  if ((argc == 4 || (argc == 5 && !strcmp(argv[4], "--stdin"))) && !strcmp(argv[1], "pub-corrupt"))
    return pub_corrupt(argv[2], argv[3], argc == 5);
  fprintf(stderr, "usage: fastdds-peer sub-pose TOPIC N [SECS] | pub-corrupt TOPIC truncated|overlength|huge [--stdin]\n");
  return 2;
}
