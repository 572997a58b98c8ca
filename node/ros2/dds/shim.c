//go:build ros2

// Raw-CDR sertype and serdata for Cyclone DDS 0.10 (see shim.h). ROS 2 types
// have no keys, so every key operation is trivial; the serdata keeps the
// serialized bytes as they came (from the network or from Go).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dds/ddsi/ddsi_sertype.h"
#include "dds/ddsi/ddsi_serdata.h"
#include "dds/ddsi/q_radmin.h"
#include "shim.h"

struct lbm_serdata {
  struct ddsi_serdata c;
  uint32_t size; // bytes in data, a multiple of 4 (DDSI pads payloads to 4)
  unsigned char *data;
};

static struct lbm_serdata *sd_new(const struct ddsi_sertype *tp, enum ddsi_serdata_kind kind, size_t size) {
  struct lbm_serdata *d = calloc(1, sizeof *d);
  if (d == NULL) return NULL;
  ddsi_serdata_init(&d->c, tp, kind);
  size_t padded = (size + 3) & ~(size_t)3;
  if (padded > 0) {
    d->data = calloc(1, padded);
    if (d->data == NULL) { free(d); return NULL; }
  }
  d->size = (uint32_t)padded;
  return d;
}

static bool sd_eqkey(const struct ddsi_serdata *a, const struct ddsi_serdata *b) { (void)a; (void)b; return true; }
static uint32_t sd_size(const struct ddsi_serdata *dc) { return ((const struct lbm_serdata *)dc)->size; }

static void sd_free(struct ddsi_serdata *dc) {
  struct lbm_serdata *d = (struct lbm_serdata *)dc;
  free(d->data);
  free(d);
}

static struct ddsi_serdata *sd_from_ser(const struct ddsi_sertype *tp, enum ddsi_serdata_kind kind, const struct nn_rdata *frag, size_t size) {
  struct lbm_serdata *d = sd_new(tp, kind, size);
  if (d == NULL) return NULL;
  // Fragments arrive in order and may overlap; copy only the bytes each adds.
  uint32_t off = 0;
  for (; frag != NULL; frag = frag->nextfrag) {
    if (frag->maxp1 > off) {
      const unsigned char *p = NN_RMSG_PAYLOADOFF(frag->rmsg, NN_RDATA_PAYLOAD_OFF(frag));
      memcpy(d->data + off, p + off - frag->min, frag->maxp1 - off);
      off = frag->maxp1;
    }
  }
  return &d->c;
}

static struct ddsi_serdata *sd_from_ser_iov(const struct ddsi_sertype *tp, enum ddsi_serdata_kind kind, ddsrt_msg_iovlen_t niov, const ddsrt_iovec_t *iov, size_t size) {
  struct lbm_serdata *d = sd_new(tp, kind, size);
  if (d == NULL) return NULL;
  size_t off = 0;
  for (ddsrt_msg_iovlen_t i = 0; i < niov && off < size; i++) {
    size_t n = iov[i].iov_len;
    if (n > size - off) n = size - off;
    memcpy(d->data + off, iov[i].iov_base, n);
    off += n;
  }
  return &d->c;
}

static struct ddsi_serdata *sd_from_keyhash(const struct ddsi_sertype *tp, const struct ddsi_keyhash *kh) {
  (void)kh;
  struct lbm_serdata *d = sd_new(tp, SDK_KEY, 0);
  return d ? &d->c : NULL;
}

static struct ddsi_serdata *sd_from_sample(const struct ddsi_sertype *tp, enum ddsi_serdata_kind kind, const void *sample) {
  const lbm_blob *b = sample;
  struct lbm_serdata *d = sd_new(tp, kind, kind == SDK_DATA ? b->size : 0);
  if (d == NULL) return NULL;
  if (kind == SDK_DATA && b->size > 0) memcpy(d->data, b->data, b->size);
  return &d->c;
}

static struct ddsi_serdata *sd_to_untyped(const struct ddsi_serdata *dc) {
  struct lbm_serdata *d = sd_new(dc->type, SDK_KEY, 0);
  if (d == NULL) return NULL;
  d->c.type = NULL;
  return &d->c;
}

static void sd_to_ser(const struct ddsi_serdata *dc, size_t off, size_t sz, void *buf) {
  memcpy(buf, ((const struct lbm_serdata *)dc)->data + off, sz);
}

static struct ddsi_serdata *sd_to_ser_ref(const struct ddsi_serdata *dc, size_t off, size_t sz, ddsrt_iovec_t *ref) {
  ref->iov_base = ((const struct lbm_serdata *)dc)->data + off;
  ref->iov_len = (ddsrt_iov_len_t)sz;
  return ddsi_serdata_ref(dc);
}

static void sd_to_ser_unref(struct ddsi_serdata *dc, const ddsrt_iovec_t *ref) {
  (void)ref;
  ddsi_serdata_unref(dc);
}

// Samples are only exchanged as serdata (dds_takecdr); to_sample hands out
// a borrowed view for completeness.
static bool sd_to_sample(const struct ddsi_serdata *dc, void *sample, void **bufptr, void *buflim) {
  (void)bufptr; (void)buflim;
  const struct lbm_serdata *d = (const struct lbm_serdata *)dc;
  lbm_blob *b = sample;
  b->data = d->data;
  b->size = d->size;
  return true;
}

static bool sd_untyped_to_sample(const struct ddsi_sertype *tp, const struct ddsi_serdata *dc, void *sample, void **bufptr, void *buflim) {
  (void)tp; (void)dc; (void)bufptr; (void)buflim;
  lbm_blob *b = sample;
  b->data = NULL;
  b->size = 0;
  return true;
}

static size_t sd_print(const struct ddsi_sertype *tp, const struct ddsi_serdata *dc, char *buf, size_t size) {
  (void)tp;
  return (size_t)snprintf(buf, size, "(raw cdr, %u bytes)", ((const struct lbm_serdata *)dc)->size);
}

static void sd_get_keyhash(const struct ddsi_serdata *dc, struct ddsi_keyhash *buf, bool force_md5) {
  (void)dc; (void)force_md5;
  memset(buf, 0, sizeof *buf);
}

static const struct ddsi_serdata_ops lbm_serdata_ops = {
  .eqkey = sd_eqkey,
  .get_size = sd_size,
  .from_ser = sd_from_ser,
  .from_ser_iov = sd_from_ser_iov,
  .from_keyhash = sd_from_keyhash,
  .from_sample = sd_from_sample,
  .to_ser = sd_to_ser,
  .to_ser_ref = sd_to_ser_ref,
  .to_ser_unref = sd_to_ser_unref,
  .to_sample = sd_to_sample,
  .to_untyped = sd_to_untyped,
  .untyped_to_sample = sd_untyped_to_sample,
  .free = sd_free,
  .print = sd_print,
  .get_keyhash = sd_get_keyhash,
};

static void st_free(struct ddsi_sertype *tp) {
  ddsi_sertype_fini(tp);
  free(tp);
}
static void st_zero_samples(const struct ddsi_sertype *tp, void *samples, size_t count) {
  (void)tp;
  memset(samples, 0, count * sizeof(lbm_blob));
}
static void st_realloc_samples(void **ptrs, const struct ddsi_sertype *tp, void *old, size_t oldcount, size_t count) {
  (void)tp;
  lbm_blob *n = realloc(old, count * sizeof(lbm_blob));
  if (n != NULL && count > oldcount) memset(n + oldcount, 0, (count - oldcount) * sizeof(lbm_blob));
  for (size_t i = 0; i < count; i++) ptrs[i] = n ? &n[i] : NULL;
}
static void st_free_samples(const struct ddsi_sertype *tp, void **ptrs, size_t count, dds_free_op_t op) {
  (void)tp; (void)count;
  // Blobs borrow their bytes; only the array itself may be ours.
  if ((op & DDS_FREE_ALL_BIT) && count > 0) free(ptrs[0]);
}
// Types are told apart by name alone (the generic part of the comparison).
static bool st_equal(const struct ddsi_sertype *a, const struct ddsi_sertype *b) { (void)a; (void)b; return true; }
static uint32_t st_hash(const struct ddsi_sertype *tp) { (void)tp; return 0x6c626d31u; }

static const struct ddsi_sertype_ops lbm_sertype_ops = {
  .version = ddsi_sertype_v0,
  .arg = NULL,
  .free = st_free,
  .zero_samples = st_zero_samples,
  .realloc_samples = st_realloc_samples,
  .free_samples = st_free_samples,
  .equal = st_equal,
  .hash = st_hash,
};

dds_entity_t lbm_participant(uint32_t domain, const char *xml, const void *ud, size_t udlen, dds_entity_t *domain_out) {
  *domain_out = 0;
  if (xml != NULL && xml[0] != '\0') {
    dds_entity_t dom = dds_create_domain(domain, xml);
    if (dom < 0) return dom;
    *domain_out = dom;
  }
  dds_qos_t *q = dds_create_qos();
  dds_qset_userdata(q, ud, udlen);
  dds_entity_t pp = dds_create_participant(domain, q, NULL);
  dds_delete_qos(q);
  if (pp < 0 && *domain_out > 0) {
    dds_delete(*domain_out);
    *domain_out = 0;
  }
  return pp;
}

dds_entity_t lbm_topic(dds_entity_t pp, const char *name, const char *type_name) {
  struct ddsi_sertype *st = calloc(1, sizeof *st);
  if (st == NULL) return DDS_RETCODE_OUT_OF_RESOURCES;
  ddsi_sertype_init_flags(st, type_name, &lbm_sertype_ops, &lbm_serdata_ops, DDSI_SERTYPE_FLAG_TOPICKIND_NO_KEY);
  st->allowed_data_representation = DDS_DATA_REPRESENTATION_FLAG_XCDR1;
  struct ddsi_sertype *used = st;
  dds_entity_t tp = dds_create_topic_sertype(pp, name, &used, NULL, NULL, NULL);
  if (tp < 0) st_free(st);
  return tp;
}

static dds_qos_t *make_qos(const lbm_qos *q) {
  dds_qos_t *d = dds_create_qos();
  dds_qset_reliability(d, q->reliable ? DDS_RELIABILITY_RELIABLE : DDS_RELIABILITY_BEST_EFFORT, DDS_SECS(1));
  dds_qset_durability(d, q->transient_local ? DDS_DURABILITY_TRANSIENT_LOCAL : DDS_DURABILITY_VOLATILE);
  dds_qset_history(d, DDS_HISTORY_KEEP_LAST, q->depth);
  dds_data_representation_id_t r = DDS_DATA_REPRESENTATION_XCDR1;
  dds_qset_data_representation(d, 1, &r);
  if (q->user_data_len > 0) dds_qset_userdata(d, q->user_data, q->user_data_len);
  if (q->lifespan_ns > 0) dds_qset_lifespan(d, q->lifespan_ns);
  return d;
}

dds_entity_t lbm_writer(dds_entity_t pp, dds_entity_t topic, const lbm_qos *q) {
  dds_qos_t *d = make_qos(q);
  dds_entity_t wr = dds_create_writer(pp, topic, d, NULL);
  dds_delete_qos(d);
  return wr;
}

dds_entity_t lbm_reader(dds_entity_t pp, dds_entity_t topic, const lbm_qos *q) {
  dds_qos_t *d = make_qos(q);
  dds_entity_t rd = dds_create_reader(pp, topic, d, NULL);
  dds_delete_qos(d);
  return rd;
}

dds_return_t lbm_write(dds_entity_t wr, const void *data, uint32_t size) {
  lbm_blob b = { data, size };
  return dds_write(wr, &b);
}

int lbm_take(dds_entity_t rd, struct ddsi_serdata **out, const unsigned char **data, uint32_t *size, dds_instance_handle_t *pub, int64_t *ts) {
  for (;;) {
    struct ddsi_serdata *d = NULL;
    dds_sample_info_t si;
    dds_return_t n = dds_takecdr(rd, &d, 1, &si, DDS_ANY_STATE);
    if (n <= 0) return n;
    if (!si.valid_data) {
      ddsi_serdata_unref(d);
      continue;
    }
    const struct lbm_serdata *ld = (const struct lbm_serdata *)d;
    *out = d;
    *data = ld->data;
    *size = ld->size;
    *pub = si.publication_handle;
    *ts = si.source_timestamp;
    return 1;
  }
}

void lbm_release(struct ddsi_serdata *d) { ddsi_serdata_unref(d); }

static int user_data_value(const dds_qos_t *q, const char *key, char *out, size_t outlen) {
  void *ud = NULL;
  size_t sz = 0;
  if (q == NULL || !dds_qget_userdata(q, &ud, &sz) || ud == NULL) return 0;
  // USER_DATA is "k1=v1;k2=v2;"; look for key= at the start of an entry.
  const char *s = ud, *end = s + sz;
  size_t kl = strlen(key);
  int found = 0;
  while (s < end) {
    const char *semi = memchr(s, ';', (size_t)(end - s));
    const char *e = semi ? semi : end;
    if ((size_t)(e - s) > kl && memcmp(s, key, kl) == 0 && s[kl] == '=') {
      size_t vl = (size_t)(e - s) - kl - 1;
      if (vl >= outlen) vl = outlen - 1;
      memcpy(out, s + kl + 1, vl);
      out[vl] = '\0';
      found = 1;
      break;
    }
    s = e + 1;
  }
  dds_free(ud);
  return found;
}

int lbm_client_reader_matched(dds_entity_t rd, dds_entity_t wr, dds_instance_handle_t pub) {
  dds_builtintopic_endpoint_t *ep = dds_get_matched_publication_data(rd, pub);
  if (ep == NULL) return -1;
  char clientid[128];
  int has = user_data_value(ep->qos, "clientid", clientid, sizeof clientid);
  dds_builtintopic_free_endpoint(ep);
  if (!has) return 1;
  dds_instance_handle_t hs[64];
  dds_return_t n = dds_get_matched_subscriptions(wr, hs, 64);
  if (n > 64) n = 64;
  for (dds_return_t i = 0; i < n; i++) {
    dds_builtintopic_endpoint_t *r = dds_get_matched_subscription_data(wr, hs[i]);
    if (r == NULL) continue;
    char id[128];
    int ok = user_data_value(r->qos, "clientid", id, sizeof id) && strcmp(id, clientid) == 0;
    dds_builtintopic_free_endpoint(r);
    if (ok) return 1;
  }
  return 0;
}

int lbm_publication_guid(dds_entity_t rd, dds_instance_handle_t pub, unsigned char out[16]) {
  dds_builtintopic_endpoint_t *ep = dds_get_matched_publication_data(rd, pub);
  if (ep == NULL) return 0;
  memcpy(out, ep->key.v, 16);
  dds_builtintopic_free_endpoint(ep);
  return 1;
}

int lbm_reader_of_participant(dds_entity_t wr, const unsigned char prefix[12]) {
  dds_instance_handle_t hs[256];
  dds_return_t n = dds_get_matched_subscriptions(wr, hs, 256);
  if (n > 256) n = 256;
  for (dds_return_t i = 0; i < n; i++) {
    dds_builtintopic_endpoint_t *r = dds_get_matched_subscription_data(wr, hs[i]);
    if (r == NULL) continue;
    int same = memcmp(r->key.v, prefix, 12) == 0;
    dds_builtintopic_free_endpoint(r);
    if (same) return 1;
  }
  return 0;
}
