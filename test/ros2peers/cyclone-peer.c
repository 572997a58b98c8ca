// cyclone-peer: an independent ROS 2 peer for the tests, on the plain Cyclone
// DDS C API with types that idlc generates from ros2msgs.idl. It shares no
// code with the project's Go CDR encoder: what it reads and writes is what a
// ROS 2 node on rmw_cyclonedds would see on the wire.
//
// Commands (all output is one JSON object per line on stdout):
//
//   pub-images [--compressed] [--reliable] [--topic T] [--period-ms MS]
//              [--first K] [--frame-id F] [--stamp-offset S] [--readers R]
//              [--stdin] DIR N
//       publishes the first N *.png files of DIR (sorted) as
//       sensor_msgs/msg/Image rgb8 (decoded with libpng) on T (default
//       /camera/image_raw), or with --compressed as CompressedImage, format
//       "png", the file's bytes as they are (default T: /camera/image_raw/compressed).
//       Frame i (counting from K) is stamped 1700000000 s + i * 0.1 s + S.
//       Publishing starts once R readers (default 1) have matched.
//       With --stdin it sends frame after frame as lines arrive on stdin,
//       one line each, and ends at EOF (the test's sign that the last one
//       arrived): the test says when a reader is ready for each
//       best-effort sample (the writer's side of a match comes before the
//       reader's, and a sample sent at a loaded reader can be dropped), not
//       a fixed wait.
//   pub-bad [--topic T] [--stdin] KIND
//       publishes one bad Image: KIND is "encoding" (yuv422), "step" (step
//       smaller than a row) or "short" (data shorter than step * height).
//       With --stdin it sends once a line arrives on stdin, and again
//       for each further line until EOF.
//   listen [--secs S] [--dump DIR] KIND:TOPIC[:tl][:be] ...
//       subscribes to every TOPIC with the type that KIND names (pose, path,
//       odom, cloud, image, tf, diag, pei) and prints each message; a
//       KIND:TOPIC:tl entry asks for transient-local durability (late
//       joiners get the writer's history), :be for best effort (the default
//       is reliable, which a best-effort writer does not match). With
//       --dump, bulk data (cloud points, image pixels) goes to
//       DIR/s<i>-<kind>-<n>.bin (i: the entry's position). Also prints a
//       "matched" line whenever a reader's matched-writer count changes, with
//       each matched writer's GUID, type name, USER_DATA (the REP 2011
//       typehash) and its participant's USER_DATA (the enclave).
//       Runs for S seconds (default 60) or until SIGINT/SIGTERM.
//   pub-pose [--readers R] TOPIC N, pub-cloud [--readers R] TOPIC POINTS
//       reference messages for checking the other peers: N PoseStamped with
//       position (i, 2i, 3i), or one PointCloud2 of POINTS xyz+rgb points
//       whose point i is (i, -i, 0.5 i).
//   call [--timeout S] NAME
//       calls the std_srvs/srv/Trigger service NAME through rq/NAMERequest
//       and rr/NAMEReply with rmw_cyclonedds's request header.
//   serve [--secs S] NAME
//       a Trigger server for checking `call` (answers "peer-ok <seq>").
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <png.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dds/dds.h"
#include "ros2msgs.h"

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) { (void)sig; stop_requested = 1; }

static void die(const char *what, dds_return_t rc) {
  printf("{\"event\":\"error\",\"what\":\"%s\",\"rc\":\"%s\"}\n", what, dds_strretcode(rc));
  fflush(stdout);
  exit(1);
}

// json_str prints s as a JSON string.
static void json_str(const char *s) {
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\') printf("\\%c", *p);
    else if (*p < 0x20) printf("\\u%04x", *p);
    else putchar(*p);
  }
  putchar('"');
}

static uint64_t fnv1a(const uint8_t *b, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ull; }
  return h;
}

static dds_qos_t *make_qos(int reliable, int transient_local, int depth) {
  dds_qos_t *q = dds_create_qos();
  dds_qset_reliability(q, reliable ? DDS_RELIABILITY_RELIABLE : DDS_RELIABILITY_BEST_EFFORT, DDS_SECS(1));
  dds_qset_durability(q, transient_local ? DDS_DURABILITY_TRANSIENT_LOCAL : DDS_DURABILITY_VOLATILE);
  if (depth > 0) dds_qset_history(q, DDS_HISTORY_KEEP_LAST, depth);
  else dds_qset_history(q, DDS_HISTORY_KEEP_ALL, 0);
  dds_data_representation_id_t r = DDS_DATA_REPRESENTATION_XCDR1;
  dds_qset_data_representation(q, 1, &r);
  return q;
}

// ros_topic turns a ROS 2 name into its DDS topic ("/a/b" -> prefix + "a/b").
static char *dds_topic(const char *prefix, const char *ros, const char *suffix) {
  char *s;
  while (*ros == '/') ros++;
  if (asprintf(&s, "%s%s%s", prefix, ros, suffix) < 0) exit(1);
  return s;
}

static void print_header(const std_msgs_msg_dds__Header_ *h) {
  printf("\"stamp\":{\"sec\":%" PRId32 ",\"nanosec\":%" PRIu32 "},\"frame_id\":", h->stamp_.sec_, h->stamp_.nanosec_);
  json_str(h->frame_id_);
}

static void print_pose(const geometry_msgs_msg_dds__Pose_ *p) {
  printf("\"position\":[%.17g,%.17g,%.17g],\"orientation\":[%.17g,%.17g,%.17g,%.17g]",
         p->position_.x_, p->position_.y_, p->position_.z_,
         p->orientation_.x_, p->orientation_.y_, p->orientation_.z_, p->orientation_.w_);
}

// wait_writer_matched waits until wr has matched at least readers readers.
static int wait_writer_matched(dds_entity_t wr, int secs, int readers) {
  dds_publication_matched_status_t st = {0};
  dds_time_t end = dds_time() + DDS_SECS(secs);
  while (dds_time() < end && !stop_requested) {
    if (dds_get_publication_matched_status(wr, &st) == 0 && (int)st.current_count >= readers) return 1;
    dds_sleepfor(DDS_MSECS(20));
  }
  return 0;
}

// wait_acked waits until every reader matched with the reliable writer wr
// has acknowledged all it was sent, and says so: a reliable sample still
// in flight is lost if the writer goes first, however long a fixed wait
// before going was (a loaded machine stretches the reader's discovery and
// repair past it).
static int wait_acked(dds_entity_t wr) {
  dds_return_t rc = dds_wait_for_acks(wr, DDS_SECS(60));
  printf("{\"event\":\"acked\",\"ok\":%s}\n", rc == 0 ? "true" : "false");
  fflush(stdout);
  return rc == 0;
}

// ---- publishing frames ----

// await_go reads one line of stdin: the test's go for the next sample. It
// returns 0 at EOF.
static int await_go(void) {
  char line[64];
  if (!fgets(line, sizeof line, stdin)) return 0;
  return 1;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// list_pngs returns the sorted *.png paths of dir.
static char **list_pngs(const char *dir, int *count) {
  DIR *d = opendir(dir);
  if (!d) { printf("{\"event\":\"error\",\"what\":\"opendir %s: %s\"}\n", dir, strerror(errno)); exit(1); }
  char **v = NULL; int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l < 5 || strcmp(e->d_name + l - 4, ".png")) continue;
    v = realloc(v, sizeof *v * (n + 1));
    if (asprintf(&v[n++], "%s/%s", dir, e->d_name) < 0) exit(1);
  }
  closedir(d);
  qsort(v, n, sizeof *v, cmp_str);
  *count = n;
  return v;
}

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  struct stat st;
  if (fstat(fileno(f), &st) != 0) { fclose(f); return NULL; }
  uint8_t *b = malloc(st.st_size ? st.st_size : 1);
  *len = fread(b, 1, st.st_size, f);
  fclose(f);
  return b;
}

// decode_png decodes a PNG file to packed rgb8 with libpng's simplified API.
static uint8_t *decode_png(const char *path, uint32_t *w, uint32_t *h) {
  png_image img;
  memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&img, path)) return NULL;
  img.format = PNG_FORMAT_RGB;
  uint8_t *buf = malloc(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, NULL, buf, 0, NULL)) { free(buf); png_image_free(&img); return NULL; }
  *w = img.width; *h = img.height;
  return buf;
}

static void stamp_of(int i, double offset, builtin_interfaces_msg_dds__Time_ *t) {
  int64_t ns = 1700000000ll * 1000000000ll + (int64_t)i * 100000000ll + (int64_t)(offset * 1e9);
  t->sec_ = (int32_t)(ns / 1000000000ll);
  t->nanosec_ = (uint32_t)(ns % 1000000000ll);
}

static int cmd_pub_images(dds_entity_t pp, int argc, char **argv) {
  int compressed = 0, reliable = 0, period_ms = 100, first = 0, readers = 1, go = 0;
  double stamp_offset = 0;
  const char *topic = NULL, *frame_id = "camera_optical";
  int a = 0;
  for (; a < argc && !strncmp(argv[a], "--", 2); a++) {
    if (!strcmp(argv[a], "--compressed")) compressed = 1;
    else if (!strcmp(argv[a], "--reliable")) reliable = 1;
    else if (!strcmp(argv[a], "--stdin")) go = 1;
    else if (!strcmp(argv[a], "--topic") && a + 1 < argc) topic = argv[++a];
    else if (!strcmp(argv[a], "--period-ms") && a + 1 < argc) period_ms = atoi(argv[++a]);
    else if (!strcmp(argv[a], "--first") && a + 1 < argc) first = atoi(argv[++a]);
    else if (!strcmp(argv[a], "--readers") && a + 1 < argc) readers = atoi(argv[++a]);
    else if (!strcmp(argv[a], "--frame-id") && a + 1 < argc) frame_id = argv[++a];
    else if (!strcmp(argv[a], "--stamp-offset") && a + 1 < argc) stamp_offset = atof(argv[++a]);
    else { fprintf(stderr, "pub-images: unknown option %s\n", argv[a]); return 2; }
  }
  if (argc - a != 2) { fprintf(stderr, "usage: pub-images [options] DIR N\n"); return 2; }
  const char *dir = argv[a];
  int n = atoi(argv[a + 1]), have;
  char **files = list_pngs(dir, &have);
  if (first + n > have) { printf("{\"event\":\"error\",\"what\":\"%d frames asked, %d in %s\"}\n", first + n, have, dir); return 1; }
  if (!topic) topic = compressed ? "/camera/image_raw/compressed" : "/camera/image_raw";
  char *dt = dds_topic("rt/", topic, "");
  dds_entity_t tp = dds_create_topic(pp, compressed ? &sensor_msgs_msg_dds__CompressedImage__desc : &sensor_msgs_msg_dds__Image__desc, dt, NULL, NULL);
  if (tp < 0) die("create_topic", tp);
  dds_entity_t wr = dds_create_writer(pp, tp, make_qos(reliable, 0, 5), NULL);
  if (wr < 0) die("create_writer", wr);
  int matched = wait_writer_matched(wr, 30, readers);
  printf("{\"event\":\"matched\",\"topic\":\"%s\",\"ok\":%s}\n", topic, matched ? "true" : "false");
  fflush(stdout);
  if (!matched) return 1;
  // The writer sees the match before the reader may: a best-effort sample
  // sent at once can reach a reader that is not yet set up for it. With
  // --stdin the test, which sees the reader's side, says when.
  if (!go) dds_sleepfor(DDS_MSECS(300));
  for (int i = first; i < first + n && !stop_requested; i++) {
    if (go && !await_go()) {
      printf("{\"event\":\"error\",\"what\":\"stdin ended after %d of %d frames\"}\n", i - first, n);
      return 1;
    }
    dds_return_t rc;
    size_t len = 0;
    uint64_t sum;
    if (compressed) {
      sensor_msgs_msg_dds__CompressedImage_ m;
      memset(&m, 0, sizeof m);
      m.header_.frame_id_ = (char *)frame_id;
      stamp_of(i, stamp_offset, &m.header_.stamp_);
      m.format_ = "png";
      uint8_t *b = read_file(files[i], &len);
      if (!b) { printf("{\"event\":\"error\",\"what\":\"reading %s\"}\n", files[i]); return 1; }
      m.data_._buffer = b; m.data_._length = m.data_._maximum = (uint32_t)len;
      sum = fnv1a(b, len);
      rc = dds_write(wr, &m);
      free(b);
    } else {
      sensor_msgs_msg_dds__Image_ m;
      memset(&m, 0, sizeof m);
      m.header_.frame_id_ = (char *)frame_id;
      stamp_of(i, stamp_offset, &m.header_.stamp_);
      uint8_t *px = decode_png(files[i], &m.width_, &m.height_);
      if (!px) { printf("{\"event\":\"error\",\"what\":\"decoding %s\"}\n", files[i]); return 1; }
      m.encoding_ = "rgb8"; m.step_ = 3 * m.width_;
      len = (size_t)m.step_ * m.height_;
      m.data_._buffer = px; m.data_._length = m.data_._maximum = (uint32_t)len;
      sum = fnv1a(px, len);
      rc = dds_write(wr, &m);
      free(px);
    }
    printf("{\"event\":\"published\",\"index\":%d,\"file\":", i);
    json_str(files[i]);
    printf(",\"bytes\":%zu,\"fnv1a\":\"%016" PRIx64 "\",\"rc\":%d}\n", len, sum, (int)rc);
    fflush(stdout);
    if (rc != 0) return 1;
    if (!go) dds_sleepfor(DDS_MSECS(period_ms));
  }
  // With --stdin the writer stays until the test, having seen the last
  // sample arrive, closes stdin: a writer deleted at once may take a sample
  // still being sent with it (to a best-effort reader, whatever this
  // writer's reliability, nothing is acknowledged).
  if (go) while (await_go()) {}
  if (reliable) return wait_acked(wr) ? 0 : 1;
  // Best effort: nothing to wait for but the last sample leaving.
  if (!go) dds_sleepfor(DDS_MSECS(500));
  return 0;
}

static int cmd_pub_bad(dds_entity_t pp, int argc, char **argv) {
  const char *topic = "/camera/image_raw";
  int a = 0, go = 0;
  for (; a < argc && !strncmp(argv[a], "--", 2); a++) {
    if (!strcmp(argv[a], "--topic") && a + 1 < argc) topic = argv[++a];
    else if (!strcmp(argv[a], "--stdin")) go = 1;
    else { fprintf(stderr, "pub-bad: unknown option %s\n", argv[a]); return 2; }
  }
  if (argc - a != 1) { fprintf(stderr, "usage: pub-bad [--topic T] [--stdin] encoding|step|short\n"); return 2; }
  const char *kind = argv[a];
  char *dt = dds_topic("rt/", topic, "");
  dds_entity_t tp = dds_create_topic(pp, &sensor_msgs_msg_dds__Image__desc, dt, NULL, NULL);
  if (tp < 0) die("create_topic", tp);
  dds_entity_t wr = dds_create_writer(pp, tp, make_qos(1, 0, 5), NULL);
  if (wr < 0) die("create_writer", wr);
  if (!wait_writer_matched(wr, 30, 1)) { printf("{\"event\":\"matched\",\"topic\":\"%s\",\"ok\":false}\n", topic); return 1; }
  printf("{\"event\":\"matched\",\"topic\":\"%s\",\"ok\":true}\n", topic);
  fflush(stdout);
  // As in pub-images: the reader may not be ready for a best-effort sample
  // yet; with --stdin the test says when it is.
  if (!go) dds_sleepfor(DDS_MSECS(300));
  else if (!await_go()) return 1;
  sensor_msgs_msg_dds__Image_ m;
  memset(&m, 0, sizeof m);
  m.header_.frame_id_ = "camera_optical";
  stamp_of(900, 0, &m.header_.stamp_);
  m.width_ = 8; m.height_ = 6; m.encoding_ = "rgb8"; m.step_ = 24;
  uint32_t len = 24 * 6;
  if (!strcmp(kind, "encoding")) m.encoding_ = "yuv422";
  else if (!strcmp(kind, "step")) m.step_ = 10;
  else if (!strcmp(kind, "short")) len = 24 * 3;
  else { fprintf(stderr, "pub-bad: unknown kind %s\n", kind); return 2; }
  m.data_._buffer = calloc(len, 1); m.data_._length = m.data_._maximum = len;
  // With --stdin, each further line sends the sample again (a best-effort
  // reader may have dropped it), until EOF.
  dds_return_t rc;
  do {
    rc = dds_write(wr, &m);
    printf("{\"event\":\"published\",\"kind\":\"%s\",\"rc\":%d}\n", kind, (int)rc);
    fflush(stdout);
  } while (rc == 0 && go && await_go());
  return rc == 0 && wait_acked(wr) ? 0 : 1;
}

static int cmd_pub_pose(dds_entity_t pp, int argc, char **argv) {
  int readers = 1;
  if (argc > 2 && !strcmp(argv[0], "--readers")) { readers = atoi(argv[1]); argc -= 2; argv += 2; }
  if (argc != 2) { fprintf(stderr, "usage: pub-pose [--readers R] TOPIC N\n"); return 2; }
  int n = atoi(argv[1]);
  dds_entity_t tp = dds_create_topic(pp, &geometry_msgs_msg_dds__PoseStamped__desc, dds_topic("rt/", argv[0], ""), NULL, NULL);
  if (tp < 0) die("create_topic", tp);
  dds_entity_t wr = dds_create_writer(pp, tp, make_qos(1, 0, 100), NULL);
  if (wr < 0) die("create_writer", wr);
  if (!wait_writer_matched(wr, 30, readers)) { printf("{\"event\":\"matched\",\"ok\":false}\n"); return 1; }
  // A reader may see the match later than the writer does.
  dds_sleepfor(DDS_MSECS(1000));
  for (int i = 0; i < n && !stop_requested; i++) {
    geometry_msgs_msg_dds__PoseStamped_ m;
    memset(&m, 0, sizeof m);
    m.header_.frame_id_ = "map";
    stamp_of(i, 0, &m.header_.stamp_);
    m.pose_.position_.x_ = i; m.pose_.position_.y_ = 2 * i; m.pose_.position_.z_ = 3 * i;
    m.pose_.orientation_.w_ = 1;
    dds_return_t rc = dds_write(wr, &m);
    printf("{\"event\":\"published\",\"index\":%d,\"rc\":%d}\n", i, (int)rc);
    fflush(stdout);
    dds_sleepfor(DDS_MSECS(200));
  }
  return wait_acked(wr) ? 0 : 1;
}

static int cmd_pub_cloud(dds_entity_t pp, int argc, char **argv) {
  int readers = 1;
  if (argc > 2 && !strcmp(argv[0], "--readers")) { readers = atoi(argv[1]); argc -= 2; argv += 2; }
  if (argc != 2) { fprintf(stderr, "usage: pub-cloud [--readers R] TOPIC POINTS\n"); return 2; }
  uint32_t n = (uint32_t)atol(argv[1]);
  dds_entity_t tp = dds_create_topic(pp, &sensor_msgs_msg_dds__PointCloud2__desc, dds_topic("rt/", argv[0], ""), NULL, NULL);
  if (tp < 0) die("create_topic", tp);
  dds_entity_t wr = dds_create_writer(pp, tp, make_qos(1, 0, 10), NULL);
  if (wr < 0) die("create_writer", wr);
  if (!wait_writer_matched(wr, 30, readers)) { printf("{\"event\":\"matched\",\"ok\":false}\n"); return 1; }
  dds_sleepfor(DDS_MSECS(1000));
  sensor_msgs_msg_dds__PointCloud2_ m;
  memset(&m, 0, sizeof m);
  m.header_.frame_id_ = "map";
  stamp_of(0, 0, &m.header_.stamp_);
  sensor_msgs_msg_dds__PointField_ f[4] = {{"x", 0, 7, 1}, {"y", 4, 7, 1}, {"z", 8, 7, 1}, {"rgb", 12, 7, 1}};
  m.fields_._buffer = f; m.fields_._length = m.fields_._maximum = 4;
  m.height_ = 1; m.width_ = n; m.point_step_ = 16; m.row_step_ = 16 * n; m.is_dense_ = true;
  m.data_._length = m.data_._maximum = 16 * n;
  m.data_._buffer = malloc(m.data_._length);
  for (uint32_t i = 0; i < n; i++) {
    float p[4] = {(float)i, -(float)i, 0.5f * i, 0};
    memcpy(m.data_._buffer + 16 * (size_t)i, p, sizeof p);
  }
  dds_return_t rc = dds_write(wr, &m);
  printf("{\"event\":\"published\",\"points\":%u,\"bytes\":%u,\"fnv1a\":\"%016" PRIx64 "\",\"rc\":%d}\n", n, m.data_._length,
         fnv1a(m.data_._buffer, m.data_._length), (int)rc);
  fflush(stdout);
  return rc == 0 && wait_acked(wr) ? 0 : 1;
}

// ---- listening ----

enum kind { K_POSE, K_PATH, K_ODOM, K_CLOUD, K_IMAGE, K_TF, K_DIAG, K_PEI, K_N };
static const char *kind_names[K_N] = {"pose", "path", "odom", "cloud", "image", "tf", "diag", "pei"};
static const dds_topic_descriptor_t *kind_desc(enum kind k) {
  switch (k) {
  case K_POSE: return &geometry_msgs_msg_dds__PoseStamped__desc;
  case K_PATH: return &nav_msgs_msg_dds__Path__desc;
  case K_ODOM: return &nav_msgs_msg_dds__Odometry__desc;
  case K_CLOUD: return &sensor_msgs_msg_dds__PointCloud2__desc;
  case K_IMAGE: return &sensor_msgs_msg_dds__Image__desc;
  case K_TF: return &tf2_msgs_msg_dds__TFMessage__desc;
  case K_DIAG: return &diagnostic_msgs_msg_dds__DiagnosticArray__desc;
  case K_PEI: return &rmw_dds_common_msg_dds__ParticipantEntitiesInfo__desc;
  default: return NULL;
  }
}

struct sub {
  int index;
  enum kind kind;
  char *ros_topic;
  dds_entity_t rd;
  uint32_t matched;
  int count;
};

static const char *dump_dir;

// dump writes bulk bytes to DIR/<kind>-<n>.bin and prints its "file" field.
static void dump(const struct sub *s, const uint8_t *b, size_t n) {
  if (!dump_dir) return;
  char *path;
  if (asprintf(&path, "%s/s%d-%s-%d.bin", dump_dir, s->index, kind_names[s->kind], s->count) < 0) exit(1);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(b, 1, n, f) != n || fclose(f) != 0) { fprintf(stderr, "writing %s failed\n", path); exit(1); }
  printf(",\"file\":");
  json_str(path);
  free(path);
}

// print_gid prints the GUID in a Gid's first 16 bytes, and the padding
// after it only if that is not zero (so that it no longer equals the GUID).
static void print_gid(const rmw_dds_common_msg_dds__Gid_ *g) {
  const size_t n = sizeof g->data_;
  int padded = 0;
  for (size_t i = 16; i < n; i++) padded |= g->data_[i];
  putchar('"');
  for (size_t i = 0; i < (padded ? n : 16); i++) printf("%02x", g->data_[i]);
  putchar('"');
}

static void print_sample(const struct sub *s, const void *sample) {
  printf("{\"event\":\"msg\",\"kind\":\"%s\",\"topic\":", kind_names[s->kind]);
  json_str(s->ros_topic);
  printf(",\"n\":%d,", s->count);
  switch (s->kind) {
  case K_POSE: {
    const geometry_msgs_msg_dds__PoseStamped_ *m = sample;
    print_header(&m->header_); putchar(','); print_pose(&m->pose_);
    break;
  }
  case K_PATH: {
    const nav_msgs_msg_dds__Path_ *m = sample;
    print_header(&m->header_);
    printf(",\"poses\":[");
    for (uint32_t i = 0; i < m->poses_._length; i++) {
      printf("%s{", i ? "," : "");
      print_header(&m->poses_._buffer[i].header_); putchar(','); print_pose(&m->poses_._buffer[i].pose_);
      putchar('}');
    }
    putchar(']');
    break;
  }
  case K_ODOM: {
    const nav_msgs_msg_dds__Odometry_ *m = sample;
    print_header(&m->header_);
    printf(",\"child_frame_id\":"); json_str(m->child_frame_id_); putchar(',');
    print_pose(&m->pose_.pose_);
    printf(",\"linear\":[%.17g,%.17g,%.17g]", m->twist_.twist_.linear_.x_, m->twist_.twist_.linear_.y_, m->twist_.twist_.linear_.z_);
    break;
  }
  case K_CLOUD: {
    const sensor_msgs_msg_dds__PointCloud2_ *m = sample;
    print_header(&m->header_);
    printf(",\"height\":%u,\"width\":%u,\"point_step\":%u,\"row_step\":%u,\"is_bigendian\":%s,\"is_dense\":%s,\"fields\":[",
           m->height_, m->width_, m->point_step_, m->row_step_, m->is_bigendian_ ? "true" : "false", m->is_dense_ ? "true" : "false");
    for (uint32_t i = 0; i < m->fields_._length; i++) {
      const sensor_msgs_msg_dds__PointField_ *f = &m->fields_._buffer[i];
      printf("%s{\"name\":", i ? "," : ""); json_str(f->name_);
      printf(",\"offset\":%u,\"datatype\":%u,\"count\":%u}", f->offset_, f->datatype_, f->count_);
    }
    printf("],\"data_len\":%u,\"fnv1a\":\"%016" PRIx64 "\",\"first\":[", m->data_._length, fnv1a(m->data_._buffer, m->data_._length));
    // The first points' x, y, z as float32 little-endian (the node's layout).
    for (uint32_t i = 0; i < 3 && m->point_step_ >= 12 && (size_t)(i + 1) * m->point_step_ <= m->data_._length; i++) {
      float xyz[3];
      memcpy(xyz, m->data_._buffer + (size_t)i * m->point_step_, sizeof xyz);
      printf("%s[%.9g,%.9g,%.9g]", i ? "," : "", xyz[0], xyz[1], xyz[2]);
    }
    putchar(']');
    dump(s, m->data_._buffer, m->data_._length);
    break;
  }
  case K_IMAGE: {
    const sensor_msgs_msg_dds__Image_ *m = sample;
    print_header(&m->header_);
    printf(",\"height\":%u,\"width\":%u,\"encoding\":", m->height_, m->width_);
    json_str(m->encoding_);
    printf(",\"is_bigendian\":%u,\"step\":%u,\"data_len\":%u,\"fnv1a\":\"%016" PRIx64 "\"", m->is_bigendian_, m->step_,
           m->data_._length, fnv1a(m->data_._buffer, m->data_._length));
    dump(s, m->data_._buffer, m->data_._length);
    break;
  }
  case K_TF: {
    const tf2_msgs_msg_dds__TFMessage_ *m = sample;
    printf("\"transforms\":[");
    for (uint32_t i = 0; i < m->transforms_._length; i++) {
      const geometry_msgs_msg_dds__TransformStamped_ *t = &m->transforms_._buffer[i];
      printf("%s{", i ? "," : "");
      print_header(&t->header_);
      printf(",\"child_frame_id\":"); json_str(t->child_frame_id_);
      printf(",\"translation\":[%.17g,%.17g,%.17g],\"rotation\":[%.17g,%.17g,%.17g,%.17g]}",
             t->transform_.translation_.x_, t->transform_.translation_.y_, t->transform_.translation_.z_,
             t->transform_.rotation_.x_, t->transform_.rotation_.y_, t->transform_.rotation_.z_, t->transform_.rotation_.w_);
    }
    putchar(']');
    break;
  }
  case K_DIAG: {
    const diagnostic_msgs_msg_dds__DiagnosticArray_ *m = sample;
    print_header(&m->header_);
    printf(",\"status\":[");
    for (uint32_t i = 0; i < m->status_._length; i++) {
      const diagnostic_msgs_msg_dds__DiagnosticStatus_ *st = &m->status_._buffer[i];
      printf("%s{\"level\":%u,\"name\":", i ? "," : "", st->level_); json_str(st->name_);
      printf(",\"message\":"); json_str(st->message_);
      printf(",\"hardware_id\":"); json_str(st->hardware_id_);
      printf(",\"values\":{");
      for (uint32_t j = 0; j < st->values_._length; j++) {
        printf("%s", j ? "," : "");
        json_str(st->values_._buffer[j].key_); putchar(':'); json_str(st->values_._buffer[j].value_);
      }
      printf("}}");
    }
    putchar(']');
    break;
  }
  case K_PEI: {
    const rmw_dds_common_msg_dds__ParticipantEntitiesInfo_ *m = sample;
    printf("\"gid\":"); print_gid(&m->gid_);
    printf(",\"nodes\":[");
    for (uint32_t i = 0; i < m->node_entities_info_seq_._length; i++) {
      const rmw_dds_common_msg_dds__NodeEntitiesInfo_ *ne = &m->node_entities_info_seq_._buffer[i];
      printf("%s{\"namespace\":", i ? "," : ""); json_str(ne->node_namespace_);
      printf(",\"name\":"); json_str(ne->node_name_);
      printf(",\"readers\":[");
      for (uint32_t j = 0; j < ne->reader_gid_seq_._length; j++) { printf("%s", j ? "," : ""); print_gid(&ne->reader_gid_seq_._buffer[j]); }
      printf("],\"writers\":[");
      for (uint32_t j = 0; j < ne->writer_gid_seq_._length; j++) { printf("%s", j ? "," : ""); print_gid(&ne->writer_gid_seq_._buffer[j]); }
      printf("]}");
    }
    putchar(']');
    break;
  }
  default: break;
  }
  printf("}\n");
  fflush(stdout);
}

static void print_guid(const dds_guid_t *g) {
  putchar('"');
  for (int i = 0; i < 16; i++) printf("%02x", g->v[i]);
  putchar('"');
}

// print_userdata prints a QoS's USER_DATA as a JSON string ("" if none).
static void print_userdata(const dds_qos_t *q) {
  void *ud = NULL;
  size_t sz = 0;
  char *s = NULL;
  if (q && dds_qget_userdata(q, &ud, &sz) && ud) {
    s = calloc(sz + 1, 1);
    memcpy(s, ud, sz);
  }
  json_str(s ? s : "");
  free(s);
  dds_free(ud);
}

// print_matched_writers prints the writers matched with rd: their GUIDs,
// type names and USER_DATA (REP 2011's typehash), and their participants'
// USER_DATA (ROS 2's enclave), from the DCPSParticipant built-in topic.
static void print_matched_writers(dds_entity_t pp, dds_entity_t rd) {
  dds_instance_handle_t hs[16];
  dds_return_t n = dds_get_matched_publications(rd, hs, 16);
  int printed = 0;
  putchar('[');
  for (int i = 0; i < n && i < 16; i++) {
    dds_builtintopic_endpoint_t *ep = dds_get_matched_publication_data(rd, hs[i]);
    if (!ep) continue;
    printf("%s{\"guid\":", printed++ ? "," : "");
    print_guid(&ep->key);
    printf(",\"type\":");
    json_str(ep->type_name);
    printf(",\"userdata\":");
    print_userdata(ep->qos);
    printf(",\"participant_userdata\":");
    dds_entity_t prd = dds_create_reader(pp, DDS_BUILTIN_TOPIC_DCPSPARTICIPANT, NULL, NULL);
    void *samples[64] = {NULL};
    dds_sample_info_t si[64];
    int k = prd < 0 ? 0 : dds_read(prd, samples, si, 64, 64);
    int found = 0;
    for (int j = 0; j < k && !found; j++) {
      const dds_builtintopic_participant_t *p = samples[j];
      if (si[j].valid_data && !memcmp(&p->key, &ep->participant_key, sizeof p->key)) {
        print_userdata(p->qos);
        found = 1;
      }
    }
    if (!found) printf("null");
    if (k > 0) dds_return_loan(prd, samples, k);
    if (prd >= 0) dds_delete(prd);
    putchar('}');
    dds_builtintopic_free_endpoint(ep);
  }
  putchar(']');
}

static int cmd_listen(dds_entity_t pp, int argc, char **argv) {
  int secs = 60;
  int a = 0;
  for (; a < argc && !strncmp(argv[a], "--", 2); a++) {
    if (!strcmp(argv[a], "--secs") && a + 1 < argc) secs = atoi(argv[++a]);
    else if (!strcmp(argv[a], "--dump") && a + 1 < argc) dump_dir = argv[++a];
    else { fprintf(stderr, "listen: unknown option %s\n", argv[a]); return 2; }
  }
  int ns = argc - a;
  if (ns < 1) { fprintf(stderr, "usage: listen [--secs S] [--dump DIR] KIND:TOPIC[:tl][:be] ...\n"); return 2; }
  struct sub *subs = calloc(ns, sizeof *subs);
  dds_entity_t ws = dds_create_waitset(pp);
  for (int i = 0; i < ns; i++) {
    char *spec = strdup(argv[a + i]);
    char *colon = strchr(spec, ':');
    if (!colon) { fprintf(stderr, "listen: %s is not KIND:TOPIC\n", spec); return 2; }
    *colon = 0;
    char *topic = colon + 1;
    int tl = 0, be = 0;
    for (char *opt = strchr(topic, ':'); opt; opt = strchr(opt + 1, ':')) {
      *opt = 0;
      tl |= !strncmp(opt + 1, "tl", 2);
      be |= !strncmp(opt + 1, "be", 2);
    }
    int k;
    for (k = 0; k < K_N && strcmp(spec, kind_names[k]); k++) {}
    if (k == K_N) { fprintf(stderr, "listen: unknown kind %s\n", spec); return 2; }
    subs[i].index = i;
    subs[i].kind = (enum kind)k;
    subs[i].ros_topic = topic;
    // ros_discovery_info is a DDS topic of its own, without the rt/ prefix.
    char *dt = k == K_PEI ? strdup(topic) : dds_topic("rt/", topic, "");
    dds_entity_t tp = dds_create_topic(pp, kind_desc(k), dt, NULL, NULL);
    if (tp < 0) die("create_topic", tp);
    dds_entity_t rd = dds_create_reader(pp, tp, make_qos(!be, tl, 0), NULL);
    if (rd < 0) die("create_reader", rd);
    subs[i].rd = rd;
    dds_entity_t rc = dds_create_readcondition(rd, DDS_ANY_STATE);
    dds_waitset_attach(ws, rc, i);
  }
  printf("{\"event\":\"ready\",\"readers\":%d}\n", ns);
  fflush(stdout);
  dds_time_t end = dds_time() + DDS_SECS(secs);
  while (!stop_requested && dds_time() < end) {
    dds_waitset_wait(ws, NULL, 0, DDS_MSECS(100));
    for (int i = 0; i < ns; i++) {
      struct sub *s = &subs[i];
      dds_subscription_matched_status_t st;
      if (dds_get_subscription_matched_status(s->rd, &st) == 0 && st.current_count != s->matched) {
        s->matched = st.current_count;
        printf("{\"event\":\"matched\",\"kind\":\"%s\",\"topic\":", kind_names[s->kind]);
        json_str(s->ros_topic);
        printf(",\"writers\":%u,\"endpoints\":", st.current_count);
        print_matched_writers(pp, s->rd);
        printf("}\n");
        fflush(stdout);
      }
      void *samples[1] = {NULL};
      dds_sample_info_t si[1];
      int k;
      while ((k = dds_take(s->rd, samples, si, 1, 1)) > 0) {
        if (si[0].valid_data) {
          print_sample(s, samples[0]);
          s->count++;
        }
        dds_return_loan(s->rd, samples, k);
      }
    }
  }
  printf("{\"event\":\"done\",\"counts\":{");
  for (int i = 0; i < ns; i++) { printf("%s", i ? "," : ""); json_str(argv[a + i]); printf(":%d", subs[i].count); }
  printf("}}\n");
  fflush(stdout);
  return 0;
}

// ---- the Trigger service ----

static int cmd_call(dds_entity_t pp, int argc, char **argv) {
  int secs = 30;
  int a = 0;
  for (; a < argc && !strncmp(argv[a], "--", 2); a++) {
    if (!strcmp(argv[a], "--timeout") && a + 1 < argc) secs = atoi(argv[++a]);
    else { fprintf(stderr, "call: unknown option %s\n", argv[a]); return 2; }
  }
  if (argc - a != 1) { fprintf(stderr, "usage: call [--timeout S] NAME\n"); return 2; }
  const char *name = argv[a];
  dds_qos_t *q = make_qos(1, 0, 10);
  dds_entity_t rqt = dds_create_topic(pp, &std_srvs_srv_dds__Trigger_Request__desc, dds_topic("rq/", name, "Request"), NULL, NULL);
  dds_entity_t rrt = dds_create_topic(pp, &std_srvs_srv_dds__Trigger_Response__desc, dds_topic("rr/", name, "Reply"), NULL, NULL);
  if (rqt < 0 || rrt < 0) die("create_topic", rqt < 0 ? rqt : rrt);
  dds_entity_t rd = dds_create_reader(pp, rrt, q, NULL);
  dds_entity_t wr = dds_create_writer(pp, rqt, q, NULL);
  if (rd < 0 || wr < 0) die("create reader/writer", rd < 0 ? rd : wr);
  // Like rmw_cyclonedds: the header's GUID is the request writer's instance handle.
  dds_instance_handle_t guid;
  if (dds_get_instance_handle(wr, &guid) != 0) die("get_instance_handle", -1);
  dds_time_t end = dds_time() + DDS_SECS(secs);
  dds_subscription_matched_status_t rst = {0};
  dds_publication_matched_status_t wst = {0};
  while (dds_time() < end && !stop_requested) {
    dds_get_subscription_matched_status(rd, &rst);
    dds_get_publication_matched_status(wr, &wst);
    if (rst.current_count > 0 && wst.current_count > 0) break;
    dds_sleepfor(DDS_MSECS(20));
  }
  if (rst.current_count == 0 || wst.current_count == 0) {
    printf("{\"event\":\"error\",\"what\":\"service %s not found (request readers %u, reply writers %u)\"}\n", name, wst.current_count, rst.current_count);
    return 1;
  }
  std_srvs_srv_dds__Trigger_Request_ req = {.client_guid_ = guid, .sequence_number_ = 1, .structure_needs_at_least_one_member_ = 0};
  dds_return_t rc = dds_write(wr, &req);
  if (rc != 0) die("write request", rc);
  dds_entity_t ws = dds_create_waitset(pp);
  dds_waitset_attach(ws, dds_create_readcondition(rd, DDS_ANY_STATE), 0);
  while (dds_time() < end && !stop_requested) {
    dds_waitset_wait(ws, NULL, 0, DDS_MSECS(100));
    void *samples[1] = {NULL};
    dds_sample_info_t si[1];
    int k;
    while ((k = dds_take(rd, samples, si, 1, 1)) > 0) {
      const std_srvs_srv_dds__Trigger_Response_ *r = samples[0];
      // Replies to other clients share the topic; only ours count.
      if (si[0].valid_data && r->client_guid_ == guid && r->sequence_number_ == 1) {
        printf("{\"event\":\"reply\",\"service\":");
        json_str(name);
        printf(",\"success\":%s,\"message\":", r->success_ ? "true" : "false");
        json_str(r->message_);
        printf("}\n");
        fflush(stdout);
        dds_return_loan(rd, samples, k);
        return 0;
      }
      dds_return_loan(rd, samples, k);
    }
  }
  printf("{\"event\":\"error\",\"what\":\"no reply from %s\"}\n", name);
  return 1;
}

static int cmd_serve(dds_entity_t pp, int argc, char **argv) {
  int secs = 30;
  int a = 0;
  for (; a < argc && !strncmp(argv[a], "--", 2); a++) {
    if (!strcmp(argv[a], "--secs") && a + 1 < argc) secs = atoi(argv[++a]);
    else { fprintf(stderr, "serve: unknown option %s\n", argv[a]); return 2; }
  }
  if (argc - a != 1) { fprintf(stderr, "usage: serve [--secs S] NAME\n"); return 2; }
  const char *name = argv[a];
  dds_qos_t *q = make_qos(1, 0, 10);
  dds_entity_t rqt = dds_create_topic(pp, &std_srvs_srv_dds__Trigger_Request__desc, dds_topic("rq/", name, "Request"), NULL, NULL);
  dds_entity_t rrt = dds_create_topic(pp, &std_srvs_srv_dds__Trigger_Response__desc, dds_topic("rr/", name, "Reply"), NULL, NULL);
  dds_entity_t rd = dds_create_reader(pp, rqt, q, NULL);
  dds_entity_t wr = dds_create_writer(pp, rrt, q, NULL);
  if (rd < 0 || wr < 0) die("create reader/writer", rd < 0 ? rd : wr);
  printf("{\"event\":\"ready\",\"service\":");
  json_str(name);
  printf("}\n");
  fflush(stdout);
  dds_entity_t ws = dds_create_waitset(pp);
  dds_waitset_attach(ws, dds_create_readcondition(rd, DDS_ANY_STATE), 0);
  dds_time_t end = dds_time() + DDS_SECS(secs);
  int served = 0;
  while (dds_time() < end && !stop_requested) {
    dds_waitset_wait(ws, NULL, 0, DDS_MSECS(100));
    void *samples[1] = {NULL};
    dds_sample_info_t si[1];
    int k;
    while ((k = dds_take(rd, samples, si, 1, 1)) > 0) {
      if (si[0].valid_data) {
        const std_srvs_srv_dds__Trigger_Request_ *r = samples[0];
        char *msg;
        if (asprintf(&msg, "peer-ok %" PRId64, r->sequence_number_) < 0) exit(1);
        std_srvs_srv_dds__Trigger_Response_ rep = {.client_guid_ = r->client_guid_, .sequence_number_ = r->sequence_number_, .success_ = true, .message_ = msg};
        dds_return_t rc = dds_write(wr, &rep);
        printf("{\"event\":\"served\",\"guid\":\"%016" PRIx64 "\",\"seq\":%" PRId64 ",\"rc\":%d}\n", r->client_guid_, r->sequence_number_, (int)rc);
        fflush(stdout);
        free(msg);
        served++;
      }
      dds_return_loan(rd, samples, k);
    }
  }
  return served > 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: cyclone-peer pub-images|pub-bad|pub-pose|pub-cloud|listen|call|serve ... (see the source's first comment)\n");
    return 2;
  }
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  dds_entity_t pp = dds_create_participant(DDS_DOMAIN_DEFAULT, NULL, NULL);
  if (pp < 0) die("create_participant", pp);
  int rc;
  if (!strcmp(argv[1], "pub-images")) rc = cmd_pub_images(pp, argc - 2, argv + 2);
  else if (!strcmp(argv[1], "pub-bad")) rc = cmd_pub_bad(pp, argc - 2, argv + 2);
  else if (!strcmp(argv[1], "pub-pose")) rc = cmd_pub_pose(pp, argc - 2, argv + 2);
  else if (!strcmp(argv[1], "pub-cloud")) rc = cmd_pub_cloud(pp, argc - 2, argv + 2);
  else if (!strcmp(argv[1], "listen")) rc = cmd_listen(pp, argc - 2, argv + 2);
  else if (!strcmp(argv[1], "call")) rc = cmd_call(pp, argc - 2, argv + 2);
  else if (!strcmp(argv[1], "serve")) rc = cmd_serve(pp, argc - 2, argv + 2);
  else { fprintf(stderr, "unknown command %s\n", argv[1]); rc = 2; }
  fflush(stdout);
  dds_delete(pp);
  return rc;
}
