//go:build ros2

// Fast DDS 2.x (Debian's libfastrtps-dev) behind the C interface of shim.h.
// The type is "raw CDR": the serialized payload, encapsulation header
// included, is handed through untouched, so Go encodes and decodes it.
#include "shim.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <fastdds/dds/domain/DomainParticipant.hpp>
#include <fastdds/dds/domain/DomainParticipantFactory.hpp>
#include <fastdds/dds/domain/qos/DomainParticipantQos.hpp>
#include <fastdds/dds/publisher/DataWriter.hpp>
#include <fastdds/dds/publisher/DataWriterListener.hpp>
#include <fastdds/dds/publisher/Publisher.hpp>
#include <fastdds/dds/subscriber/DataReader.hpp>
#include <fastdds/dds/subscriber/SampleInfo.hpp>
#include <fastdds/dds/subscriber/Subscriber.hpp>
#include <fastdds/dds/topic/Topic.hpp>
#include <fastdds/dds/topic/TopicDataType.hpp>
#include <fastdds/dds/topic/TypeSupport.hpp>
#include <fastdds/rtps/common/InstanceHandle.h>
#include <fastdds/rtps/common/WriteParams.h>
#include <fastdds/rtps/transport/UDPv4TransportDescriptor.h>
#include <fastrtps/utils/IPLocator.h>

namespace fdds = eprosima::fastdds::dds;
namespace rtps = eprosima::fastrtps::rtps;
using eprosima::fastrtps::types::ReturnCode_t;

namespace {

struct RawSample {
  std::vector<unsigned char> bytes;
};

// RawType is a keyless type whose samples are their serialized bytes.
class RawType : public fdds::TopicDataType {
 public:
  explicit RawType(const std::string &name) {
    setName(name.c_str());
    // The initial payload size; payloads grow as samples need
    // (PREALLOCATED_WITH_REALLOC on every endpoint).
    m_typeSize = 1024;
    m_isGetKeyDefined = false;
  }
  bool serialize(void *data, rtps::SerializedPayload_t *payload) override {
    const auto *s = static_cast<const RawSample *>(data);
    if (s->bytes.size() < 4 || s->bytes.size() > payload->max_size) return false;
    payload->encapsulation = s->bytes[1] == 1 ? CDR_LE : CDR_BE;
    std::memcpy(payload->data, s->bytes.data(), s->bytes.size());
    payload->length = static_cast<uint32_t>(s->bytes.size());
    return true;
  }
  bool deserialize(rtps::SerializedPayload_t *payload, void *data) override {
    auto *s = static_cast<RawSample *>(data);
    s->bytes.assign(payload->data, payload->data + payload->length);
    return true;
  }
  std::function<uint32_t()> getSerializedSizeProvider(void *data) override {
    const auto *s = static_cast<const RawSample *>(data);
    return [s]() { return static_cast<uint32_t>(s->bytes.size()); };
  }
  void *createData() override { return new RawSample(); }
  void deleteData(void *data) override { delete static_cast<RawSample *>(data); }
  bool getKey(void *, rtps::InstanceHandle_t *, bool) override { return false; }
};

void set_err(char *err, size_t errlen, const std::string &msg) {
  if (err == nullptr || errlen == 0) return;
  std::strncpy(err, msg.c_str(), errlen - 1);
  err[errlen - 1] = '\0';
}

void guid_out(const rtps::GUID_t &g, uint8_t out[16]) {
  std::memcpy(out, g.guidPrefix.value, 12);
  std::memcpy(out + 12, g.entityId.value, 4);
}

rtps::GUID_t guid_in(const uint8_t in[16]) {
  rtps::GUID_t g;
  std::memcpy(g.guidPrefix.value, in, 12);
  std::memcpy(g.entityId.value, in + 12, 4);
  return g;
}

void identity_out(const rtps::SampleIdentity &si, lbf_identity *out) {
  guid_out(si.writer_guid(), out->guid);
  out->seq = (static_cast<int64_t>(si.sequence_number().high) << 32) |
             static_cast<int64_t>(si.sequence_number().low);
}

std::vector<unsigned char> bytes_of(const char *p, size_t n) {
  return p == nullptr ? std::vector<unsigned char>() : std::vector<unsigned char>(p, p + n);
}

// WriterListener keeps the GUIDs of the readers a writer has matched, so a
// service reply waits for its client's reader as rmw_fastrtps does.
class WriterListener : public fdds::DataWriterListener {
 public:
  void on_publication_matched(fdds::DataWriter *, const fdds::PublicationMatchedStatus &st) override {
    std::lock_guard<std::mutex> lk(mu);
    rtps::GUID_t g = rtps::iHandle2GUID(st.last_subscription_handle);
    if (st.current_count_change > 0) {
      readers.insert(g);
    } else if (st.current_count_change < 0) {
      readers.erase(g);
    }
    cv.notify_all();
  }
  std::mutex mu;
  std::condition_variable cv;
  std::set<rtps::GUID_t> readers;
};

}  // namespace

struct lbf_participant {
  fdds::DomainParticipant *pp = nullptr;
  fdds::Publisher *pub = nullptr;
  fdds::Subscriber *sub = nullptr;
  std::mutex mu;
  std::map<std::string, fdds::Topic *> topics;
};

struct lbf_writer {
  lbf_participant *p;
  fdds::DataWriter *w = nullptr;
  WriterListener listener;
};

struct lbf_reader {
  lbf_participant *p;
  fdds::DataReader *r = nullptr;
};

static fdds::Topic *topic_of(lbf_participant *p, const char *topic, const char *type_name, char *err, size_t errlen) {
  std::lock_guard<std::mutex> lk(p->mu);
  auto it = p->topics.find(topic);
  if (it != p->topics.end()) {
    if (it->second->get_type_name() != type_name) {
      set_err(err, errlen, std::string("topic ") + topic + " has type " + it->second->get_type_name());
      return nullptr;
    }
    return it->second;
  }
  if (p->pp->find_type(type_name).empty()) {
    fdds::TypeSupport ts(new RawType(type_name));
    if (ts.register_type(p->pp) != ReturnCode_t::RETCODE_OK) {
      set_err(err, errlen, std::string("registering type ") + type_name + " failed");
      return nullptr;
    }
  }
  fdds::Topic *t = p->pp->create_topic(topic, type_name, fdds::TOPIC_QOS_DEFAULT);
  if (t == nullptr) {
    set_err(err, errlen, std::string("creating topic ") + topic + " failed");
    return nullptr;
  }
  p->topics[topic] = t;
  return t;
}

template <class Q>
static void apply_qos(Q &dq, const lbf_qos *q) {
  dq.reliability().kind = q->reliable ? fdds::RELIABLE_RELIABILITY_QOS : fdds::BEST_EFFORT_RELIABILITY_QOS;
  dq.durability().kind = q->transient_local ? fdds::TRANSIENT_LOCAL_DURABILITY_QOS : fdds::VOLATILE_DURABILITY_QOS;
  dq.history().kind = fdds::KEEP_LAST_HISTORY_QOS;
  dq.history().depth = q->depth < 1 ? 1 : q->depth;
  dq.endpoint().history_memory_policy = rtps::PREALLOCATED_WITH_REALLOC_MEMORY_MODE;
  dq.data_sharing().off();
  dq.user_data().data_vec(bytes_of(q->user_data, q->user_data_len));
}

extern "C" {

lbf_participant *lbf_participant_new(uint32_t domain, int localhost_only, const char *const *peers, size_t npeers,
                                     const char *user_data, size_t user_data_len, const uint8_t *prefix,
                                     uint8_t guid[16], char *err, size_t errlen) {
  auto *factory = fdds::DomainParticipantFactory::get_instance();
  fdds::DomainParticipantQos q = factory->get_default_participant_qos();
  q.name("lingbotmap");
  q.user_data().data_vec(bytes_of(user_data, user_data_len));
  if (prefix != nullptr) std::memcpy(q.wire_protocol().prefix.value, prefix, 12);
  // UDP only: shared memory between different Fast DDS releases is not a
  // promise, and the Cyclone side of the node is UDP too.
  q.transport().use_builtin_transports = false;
  auto udp = std::make_shared<eprosima::fastdds::rtps::UDPv4TransportDescriptor>();
  if (localhost_only) udp->interfaceWhiteList.emplace_back("127.0.0.1");
  q.transport().user_transports.push_back(udp);
  auto &initial = q.wire_protocol().builtin.initialPeersList;
  if (localhost_only) {
    rtps::Locator_t l;
    rtps::IPLocator::setIPv4(l, 127, 0, 0, 1);
    initial.push_back(l);
  }
  for (size_t i = 0; i < npeers; i++) {
    auto addrs = rtps::IPLocator::resolveNameDNS(peers[i]);
    if (addrs.first.empty()) {
      set_err(err, errlen, std::string("static peer ") + peers[i] + ": no IPv4 address");
      return nullptr;
    }
    for (const auto &a : addrs.first) {
      rtps::Locator_t l;
      rtps::IPLocator::setIPv4(l, a);
      initial.push_back(l);
    }
  }
  auto *p = new lbf_participant();
  p->pp = factory->create_participant(domain, q);
  if (p->pp == nullptr) {
    delete p;
    set_err(err, errlen, "creating the Fast DDS participant failed");
    return nullptr;
  }
  p->pub = p->pp->create_publisher(fdds::PUBLISHER_QOS_DEFAULT);
  p->sub = p->pp->create_subscriber(fdds::SUBSCRIBER_QOS_DEFAULT);
  if (p->pub == nullptr || p->sub == nullptr) {
    lbf_participant_delete(p);
    set_err(err, errlen, "creating the Fast DDS publisher/subscriber failed");
    return nullptr;
  }
  guid_out(p->pp->guid(), guid);
  return p;
}

void lbf_participant_delete(lbf_participant *p) {
  if (p == nullptr) return;
  p->pp->delete_contained_entities();
  fdds::DomainParticipantFactory::get_instance()->delete_participant(p->pp);
  delete p;
}

lbf_writer *lbf_writer_new(lbf_participant *p, const char *topic, const char *type_name, const lbf_qos *q,
                           uint8_t guid[16], char *err, size_t errlen) {
  fdds::Topic *t = topic_of(p, topic, type_name, err, errlen);
  if (t == nullptr) return nullptr;
  fdds::DataWriterQos wq = p->pub->get_default_datawriter_qos();
  apply_qos(wq, q);
  auto *w = new lbf_writer();
  w->p = p;
  w->w = p->pub->create_datawriter(t, wq, &w->listener, fdds::StatusMask::publication_matched());
  if (w->w == nullptr) {
    delete w;
    set_err(err, errlen, std::string("creating a writer on ") + topic + " failed");
    return nullptr;
  }
  guid_out(w->w->guid(), guid);
  return w;
}

int lbf_write(lbf_writer *w, const void *data, uint32_t size, const lbf_identity *related) {
  RawSample s;
  const auto *b = static_cast<const unsigned char *>(data);
  s.bytes.assign(b, b + size);
  rtps::WriteParams wp;
  if (related != nullptr) {
    static const uint8_t zero[16] = {0};
    if (std::memcmp(related->guid, zero, 16) != 0) {
      rtps::SampleIdentity si;
      si.writer_guid(guid_in(related->guid));
      si.sequence_number(rtps::SequenceNumber_t(static_cast<int32_t>(related->seq >> 32),
                                                static_cast<uint32_t>(related->seq & 0xffffffffu)));
      wp.related_sample_identity(si);
    }
  }
  return w->w->write(&s, wp) ? 1 : 0;
}

int lbf_writer_wait_reader(lbf_writer *w, const uint8_t guid[16], int64_t timeout_ms) {
  rtps::GUID_t g = guid_in(guid);
  std::unique_lock<std::mutex> lk(w->listener.mu);
  bool ok = w->listener.cv.wait_for(lk, std::chrono::milliseconds(timeout_ms),
                                    [&] { return w->listener.readers.count(g) > 0; });
  return ok ? 1 : 0;
}

int lbf_writer_matched(lbf_writer *w) {
  fdds::PublicationMatchedStatus st;
  if (w->w->get_publication_matched_status(st) != ReturnCode_t::RETCODE_OK) return -1;
  return st.current_count;
}

void lbf_writer_delete(lbf_writer *w) {
  if (w == nullptr) return;
  w->p->pub->delete_datawriter(w->w);
  delete w;
}

lbf_reader *lbf_reader_new(lbf_participant *p, const char *topic, const char *type_name, const lbf_qos *q,
                           uint8_t guid[16], char *err, size_t errlen) {
  fdds::Topic *t = topic_of(p, topic, type_name, err, errlen);
  if (t == nullptr) return nullptr;
  fdds::DataReaderQos rq = p->sub->get_default_datareader_qos();
  apply_qos(rq, q);
  auto *r = new lbf_reader();
  r->p = p;
  r->r = p->sub->create_datareader(t, rq);
  if (r->r == nullptr) {
    delete r;
    set_err(err, errlen, std::string("creating a reader on ") + topic + " failed");
    return nullptr;
  }
  guid_out(r->r->guid(), guid);
  return r;
}

int lbf_take(lbf_reader *r, int64_t timeout_ms, void **data, uint32_t *size, lbf_identity *id, lbf_identity *related,
             int64_t *source_ns) {
  for (;;) {
    RawSample s;
    fdds::SampleInfo info;
    ReturnCode_t rc = r->r->take_next_sample(&s, &info);
    if (rc == ReturnCode_t::RETCODE_NO_DATA) {
      if (timeout_ms <= 0) return 0;
      eprosima::fastrtps::Duration_t d(static_cast<int32_t>(timeout_ms / 1000),
                                       static_cast<uint32_t>((timeout_ms % 1000) * 1000000));
      timeout_ms = 0;
      if (!r->r->wait_for_unread_message(d)) return 0;
      continue;
    }
    if (rc != ReturnCode_t::RETCODE_OK) return -1;
    if (!info.valid_data) continue;
    void *buf = std::malloc(s.bytes.empty() ? 1 : s.bytes.size());
    if (buf == nullptr) return -1;
    if (!s.bytes.empty()) std::memcpy(buf, s.bytes.data(), s.bytes.size());
    *data = buf;
    *size = static_cast<uint32_t>(s.bytes.size());
    identity_out(info.sample_identity, id);
    identity_out(info.related_sample_identity, related);
    *source_ns = info.source_timestamp.to_ns();
    return 1;
  }
}

int lbf_reader_matched(lbf_reader *r) {
  fdds::SubscriptionMatchedStatus st;
  if (r->r->get_subscription_matched_status(st) != ReturnCode_t::RETCODE_OK) return -1;
  return st.current_count;
}

void lbf_reader_delete(lbf_reader *r) {
  if (r == nullptr) return;
  r->p->sub->delete_datareader(r->r);
  delete r;
}

}  // extern "C"
