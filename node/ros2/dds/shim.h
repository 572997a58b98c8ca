// The C side of package dds: a keyless "raw CDR" type for Cyclone DDS 0.10,
// so Go hands serialized ROS 2 messages to DDS and gets them back as bytes,
// without generated C types. The payload of every sample is the complete
// serialized message including its 4-byte encapsulation header.
#ifndef LBM_DDS_SHIM_H
#define LBM_DDS_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include "dds/dds.h"

// lbm_blob is the sample type written with dds_write: a borrowed byte range.
typedef struct lbm_blob {
  const void *data;
  uint32_t size;
} lbm_blob;

// lbm_qos describes the QoS of a reader or writer.
typedef struct lbm_qos {
  int reliable;        // 1: reliable, 0: best effort
  int transient_local; // 1: transient-local durability, 0: volatile
  int32_t depth;       // keep-last depth (>= 1)
  const void *user_data;
  size_t user_data_len;
  int64_t lifespan_ns; // > 0: the samples' lifespan
} lbm_qos;

// lbm_participant creates a participant on domain; a non-empty xml creates
// the domain first with that configuration (returned in *domain_out, else 0).
dds_entity_t lbm_participant(uint32_t domain, const char *xml, const void *ud, size_t udlen, dds_entity_t *domain_out);
// lbm_topic creates (or finds) topic name with the raw-CDR type type_name.
dds_entity_t lbm_topic(dds_entity_t pp, const char *name, const char *type_name);
dds_entity_t lbm_writer(dds_entity_t pp, dds_entity_t topic, const lbm_qos *q);
dds_entity_t lbm_reader(dds_entity_t pp, dds_entity_t topic, const lbm_qos *q);
dds_return_t lbm_write(dds_entity_t wr, const void *data, uint32_t size);

// lbm_take takes one sample; it returns 1 with *out (to free with
// lbm_release) when a valid sample was taken, 0 when none is left, or a
// negative return code. Samples without data (a writer that went away) are
// skipped.
int lbm_take(dds_entity_t rd, struct ddsi_serdata **out, const unsigned char **data, uint32_t *size, dds_instance_handle_t *pub, int64_t *ts);
void lbm_release(struct ddsi_serdata *d);

// lbm_client_reader_matched reports whether the reply writer wr has matched
// the reply reader of the client whose request writer is pub (as seen by the
// request reader rd): 1 yes (or the client carries no clientid), 0 not yet,
// -1 the client's request writer is gone.
int lbm_client_reader_matched(dds_entity_t rd, dds_entity_t wr, dds_instance_handle_t pub);

// lbm_publication_guid writes the GUID of the writer that reader rd knows
// as pub into out: 1 done, 0 that writer is gone.
int lbm_publication_guid(dds_entity_t rd, dds_instance_handle_t pub, unsigned char out[16]);

// lbm_reader_of_participant reports whether writer wr has matched a reader
// whose GUID starts with prefix (12 bytes, a participant's): 1 yes, 0 no.
int lbm_reader_of_participant(dds_entity_t wr, const unsigned char prefix[12]);

#endif
