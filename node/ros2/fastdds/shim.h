// The C face of package fastdds: a Fast DDS 2.x participant with keyless
// "raw CDR" readers and writers, whose samples carry their DDS sample
// identity (writer GUID + sequence number) and related sample identity, the
// fields rmw_fastrtps pairs a service reply with its request by.
#ifndef LBF_SHIM_H
#define LBF_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lbf_participant lbf_participant;
typedef struct lbf_reader lbf_reader;
typedef struct lbf_writer lbf_writer;

// lbf_identity is a DDS sample identity: a GUID and a sequence number.
typedef struct lbf_identity {
  uint8_t guid[16];
  int64_t seq;
} lbf_identity;

typedef struct lbf_qos {
  int reliable;
  int transient_local;
  int32_t depth;
  const char *user_data;
  size_t user_data_len;
} lbf_qos;

// lbf_participant_new creates a participant on domain with UDPv4 only
// (no shared memory). localhost_only keeps it on 127.0.0.1; peers (count
// npeers) are extra unicast discovery addresses; a non-NULL prefix (12
// bytes) fixes the GUID prefix. Returns NULL with a
// message in err (errlen bytes) on failure.
lbf_participant *lbf_participant_new(uint32_t domain, int localhost_only, const char *const *peers, size_t npeers,
                                     const char *user_data, size_t user_data_len, const uint8_t *prefix,
                                     uint8_t guid_out[16], char *err, size_t errlen);
void lbf_participant_delete(lbf_participant *p);

lbf_writer *lbf_writer_new(lbf_participant *p, const char *topic, const char *type_name, const lbf_qos *q,
                           uint8_t guid_out[16], char *err, size_t errlen);
// lbf_write writes data; a related identity with a zero GUID is left out.
int lbf_write(lbf_writer *w, const void *data, uint32_t size, const lbf_identity *related);
// lbf_writer_wait_reader waits up to timeout_ms until w has matched the
// reader guid: 1 matched, 0 not.
int lbf_writer_wait_reader(lbf_writer *w, const uint8_t guid[16], int64_t timeout_ms);
int lbf_writer_matched(lbf_writer *w);
void lbf_writer_delete(lbf_writer *w);

lbf_reader *lbf_reader_new(lbf_participant *p, const char *topic, const char *type_name, const lbf_qos *q,
                           uint8_t guid_out[16], char *err, size_t errlen);
// lbf_take waits up to timeout_ms for a sample and takes it: 1 with *data
// (malloc'ed, for the caller to free) and the identities, 0 when none came,
// -1 on an error.
int lbf_take(lbf_reader *r, int64_t timeout_ms, void **data, uint32_t *size, lbf_identity *id,
             lbf_identity *related, int64_t *source_ns);
int lbf_reader_matched(lbf_reader *r);
void lbf_reader_delete(lbf_reader *r);

#ifdef __cplusplus
}
#endif

#endif
