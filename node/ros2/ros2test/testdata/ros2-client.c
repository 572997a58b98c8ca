// A ROS 2 test client on the plain Cyclone DDS C API with idlc-generated
// types (ros2msgs.idl from ../shared/tools/ros2-peers and ros2extra.idl): it
// shares no code with lingbotmap's Go encoder.
//
//   ros2-client trigger NAME          call std_srvs/srv/Trigger service NAME (e.g. /lingbotmap/save_map)
//   ros2-client watch-pose TOPIC      print the USER_DATA of the PoseStamped writer on TOPIC, then "gone" when it leaves
//   ros2-client latched-pose TOPIC    read one PoseStamped from TOPIC as a transient-local late joiner
//   ros2-client discovery NODE        wait for NODE (e.g. /lingbotmap) in ros_discovery_info and print its entities
//
// Each command gives up after 20 s and then exits 1.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dds/dds.h"
#include "ros2msgs.h"
#include "ros2extra.h"

static dds_qos_t *qos(int reliable, int transient_local, int depth, const char *user_data) {
  dds_qos_t *q = dds_create_qos();
  dds_qset_reliability(q, reliable ? DDS_RELIABILITY_RELIABLE : DDS_RELIABILITY_BEST_EFFORT, DDS_SECS(1));
  dds_qset_durability(q, transient_local ? DDS_DURABILITY_TRANSIENT_LOCAL : DDS_DURABILITY_VOLATILE);
  dds_qset_history(q, DDS_HISTORY_KEEP_LAST, depth);
  dds_data_representation_id_t r = DDS_DATA_REPRESENTATION_XCDR1;
  dds_qset_data_representation(q, 1, &r);
  if (user_data) dds_qset_userdata(q, user_data, strlen(user_data));
  return q;
}

static dds_time_t deadline(void) { return dds_time() + DDS_SECS(20); }

static void print_pose(const char *what, const geometry_msgs_msg_dds__PoseStamped_ *m) {
  printf("%s: stamp=%d.%09u frame=%s p=(%.3f,%.3f,%.3f) q=(%.4f,%.4f,%.4f,%.4f)\n", what,
    m->header_.stamp_.sec_, m->header_.stamp_.nanosec_, m->header_.frame_id_,
    m->pose_.position_.x_, m->pose_.position_.y_, m->pose_.position_.z_,
    m->pose_.orientation_.x_, m->pose_.orientation_.y_, m->pose_.orientation_.z_, m->pose_.orientation_.w_);
}

static int trigger(dds_entity_t pp, const char *name) {
  char rq[512], rr[512], ud[64];
  snprintf(rq, sizeof rq, "rq%sRequest", name);
  snprintf(rr, sizeof rr, "rr%sReply", name);
  snprintf(ud, sizeof ud, "clientid=%d.1;", (int)getpid());
  dds_entity_t tq = dds_create_topic(pp, &std_srvs_srv_dds__Trigger_Request__desc, rq, NULL, NULL);
  dds_entity_t tr = dds_create_topic(pp, &std_srvs_srv_dds__Trigger_Response__desc, rr, NULL, NULL);
  dds_entity_t wr = dds_create_writer(pp, tq, qos(1, 0, 10, ud), NULL);
  dds_entity_t rd = dds_create_reader(pp, tr, qos(1, 0, 10, ud), NULL);
  if (wr < 0 || rd < 0) { fprintf(stderr, "client: creating endpoints failed\n"); return 1; }
  dds_time_t end = deadline();
  dds_publication_matched_status_t pm = {0};
  dds_subscription_matched_status_t sm = {0};
  while ((pm.current_count == 0 || sm.current_count == 0) && dds_time() < end) {
    dds_sleepfor(DDS_MSECS(20));
    dds_get_publication_matched_status(wr, &pm);
    dds_get_subscription_matched_status(rd, &sm);
  }
  if (pm.current_count == 0 || sm.current_count == 0) { fprintf(stderr, "client: service %s not found\n", name); return 1; }
  dds_instance_handle_t ih;
  dds_get_instance_handle(wr, &ih);
  std_srvs_srv_dds__Trigger_Request_ req = { .client_ = ih, .seq_ = 7 };
  if (dds_write(wr, &req) < 0) { fprintf(stderr, "client: write failed\n"); return 1; }
  printf("client: request sent, client=%llu seq=7\n", (unsigned long long)ih);
  void *samples[1] = { NULL };
  dds_sample_info_t si[1];
  while (dds_time() < end) {
    int k = dds_take(rd, samples, si, 1, 1);
    if (k <= 0) { dds_sleepfor(DDS_MSECS(10)); continue; }
    std_srvs_srv_dds__Trigger_Response_ *m = samples[0];
    if (si[0].valid_data) {
      int mine = m->client_ == ih && m->seq_ == 7;
      printf("trigger reply: mine=%d success=%d message=%s\n", mine, m->success_, m->message_);
      dds_return_loan(rd, samples, k);
      if (mine) return 0;
    } else {
      dds_return_loan(rd, samples, k);
    }
  }
  fprintf(stderr, "client: no reply\n");
  return 1;
}

static int watch_pose(dds_entity_t pp, const char *topic) {
  char t[512];
  snprintf(t, sizeof t, "rt%s", topic);
  dds_entity_t tp = dds_create_topic(pp, &geometry_msgs_msg_dds__PoseStamped__desc, t, NULL, NULL);
  dds_entity_t rd = dds_create_reader(pp, tp, qos(1, 0, 10, NULL), NULL);
  dds_time_t end = deadline();
  dds_subscription_matched_status_t sm = {0};
  while (sm.current_count == 0 && dds_time() < end) { dds_sleepfor(DDS_MSECS(20)); dds_get_subscription_matched_status(rd, &sm); }
  if (sm.current_count == 0) { fprintf(stderr, "client: no writer on %s\n", topic); return 1; }
  dds_instance_handle_t hs[8];
  int n = dds_get_matched_publications(rd, hs, 8);
  for (int i = 0; i < n && i < 8; i++) {
    dds_builtintopic_endpoint_t *ep = dds_get_matched_publication_data(rd, hs[i]);
    void *ud = NULL; size_t sz = 0;
    if (ep && dds_qget_userdata(ep->qos, &ud, &sz)) printf("writer user_data: %.*s\n", (int)sz, (char *)ud);
    dds_durability_kind_t dk;
    dds_reliability_kind_t rk; dds_duration_t blk;
    if (ep && dds_qget_durability(ep->qos, &dk) && dds_qget_reliability(ep->qos, &rk, &blk))
      printf("writer qos: reliable=%d transient_local=%d type=%s\n", rk == DDS_RELIABILITY_RELIABLE, dk == DDS_DURABILITY_TRANSIENT_LOCAL, ep->type_name);
    dds_free(ud);
    if (ep) dds_builtintopic_free_endpoint(ep);
  }
  fflush(stdout);
  while (sm.current_count > 0 && dds_time() < end) { dds_sleepfor(DDS_MSECS(20)); dds_get_subscription_matched_status(rd, &sm); }
  if (sm.current_count > 0) { fprintf(stderr, "client: writer on %s still there\n", topic); return 1; }
  printf("writer gone\n");
  return 0;
}

static int latched_pose(dds_entity_t pp, const char *topic) {
  char t[512];
  snprintf(t, sizeof t, "rt%s", topic);
  dds_entity_t tp = dds_create_topic(pp, &geometry_msgs_msg_dds__PoseStamped__desc, t, NULL, NULL);
  dds_entity_t rd = dds_create_reader(pp, tp, qos(1, 1, 1, NULL), NULL);
  void *samples[1] = { NULL };
  dds_sample_info_t si[1];
  dds_time_t end = deadline();
  while (dds_time() < end) {
    int k = dds_take(rd, samples, si, 1, 1);
    if (k <= 0) { dds_sleepfor(DDS_MSECS(10)); continue; }
    int ok = si[0].valid_data;
    if (ok) print_pose("latched pose", samples[0]);
    dds_return_loan(rd, samples, k);
    if (ok) return 0;
  }
  fprintf(stderr, "client: nothing latched on %s\n", topic);
  return 1;
}

static void print_gid(const char *what, const rmw_dds_common_msg_dds__Gid_ *g) {
  printf("%s ", what);
  for (int i = 0; i < 24; i++) printf("%02x", g->data_[i]);
  printf("\n");
}

static int discovery(dds_entity_t pp, const char *node) {
  dds_entity_t tp = dds_create_topic(pp, &rmw_dds_common_msg_dds__ParticipantEntitiesInfo__desc, "ros_discovery_info", NULL, NULL);
  dds_entity_t rd = dds_create_reader(pp, tp, qos(1, 1, 100, NULL), NULL);
  void *samples[1] = { NULL };
  dds_sample_info_t si[1];
  dds_time_t end = deadline();
  while (dds_time() < end) {
    int k = dds_take(rd, samples, si, 1, 1);
    if (k <= 0) { dds_sleepfor(DDS_MSECS(10)); continue; }
    int found = 0;
    if (si[0].valid_data) {
      rmw_dds_common_msg_dds__ParticipantEntitiesInfo_ *m = samples[0];
      for (uint32_t i = 0; i < m->node_entities_info_seq_._length; i++) {
        rmw_dds_common_msg_dds__NodeEntitiesInfo_ *e = &m->node_entities_info_seq_._buffer[i];
        char full[600];
        snprintf(full, sizeof full, "%s%s%s", e->node_namespace_, strcmp(e->node_namespace_, "/") ? "/" : "", e->node_name_);
        if (strcmp(full, node) != 0) continue;
        found = 1;
        print_gid("participant", &m->gid_);
        printf("node %s readers=%u writers=%u\n", full, e->reader_gid_seq_._length, e->writer_gid_seq_._length);
        for (uint32_t j = 0; j < e->reader_gid_seq_._length; j++) print_gid("reader", &e->reader_gid_seq_._buffer[j]);
        for (uint32_t j = 0; j < e->writer_gid_seq_._length; j++) print_gid("writer", &e->writer_gid_seq_._buffer[j]);
      }
    }
    dds_return_loan(rd, samples, k);
    if (found) return 0;
  }
  fprintf(stderr, "client: node %s not in ros_discovery_info\n", node);
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: ros2-client trigger|watch-pose|latched-pose|discovery NAME\n"); return 2; }
  setvbuf(stdout, NULL, _IOLBF, 0);
  dds_qos_t *pq = dds_create_qos();
  dds_qset_userdata(pq, "enclave=/;", 10);
  dds_entity_t pp = dds_create_participant(DDS_DOMAIN_DEFAULT, pq, NULL);
  if (pp < 0) { fprintf(stderr, "participant: %s\n", dds_strretcode(pp)); return 1; }
  int rc = 2;
  if (!strcmp(argv[1], "trigger")) rc = trigger(pp, argv[2]);
  else if (!strcmp(argv[1], "watch-pose")) rc = watch_pose(pp, argv[2]);
  else if (!strcmp(argv[1], "latched-pose")) rc = latched_pose(pp, argv[2]);
  else if (!strcmp(argv[1], "discovery")) rc = discovery(pp, argv[2]);
  else fprintf(stderr, "unknown command %s\n", argv[1]);
  dds_delete(pp);
  return rc;
}
