// kerneltrace: a CUDA injection library (CUDA_INJECTION64_PATH) that records
// the start and end of every kernel, copy and memset the device runs, graph
// nodes included, through CUPTI's activity API. The event profile
// (cuda.profile) cannot see inside a CUDA graph and turns graphs off; this
// sees the device as it runs in production. run.sh's 'ktrace' stage builds it
// on the GPU machine and kerneltrace.py reads what it writes.
//
// Output (KTRACE_OUT, default /tmp/ktrace.txt), one line per activity:
//   K start end name      a kernel (nanoseconds, the device's clock)
//   C start end bytes     a copy
//   S start end bytes     a memset
// Go programs leave by exit_group without running atexit handlers, so the
// records are written as CUPTI hands buffers back: those of finished
// activities every half second, and all of them when a context is destroyed
// (the backend's Close).
#include <cupti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

// The newest record layouts of the CUPTI at hand; run.sh reads their names
// from cupti_activity.h.
#ifndef KERNEL_REC
#define KERNEL_REC CUpti_ActivityKernel10
#endif
#ifndef MEMCPY_REC
#define MEMCPY_REC CUpti_ActivityMemcpy6
#endif
#ifndef MEMSET_REC
#define MEMSET_REC CUpti_ActivityMemset4
#endif
typedef KERNEL_REC kernel_rec;
typedef MEMCPY_REC memcpy_rec;
typedef MEMSET_REC memset_rec;

#define BUF_BYTES (8u << 20)

static FILE* out;
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

static void fail(const char* what, CUptiResult r) {
    const char* s = "?";
    cuptiGetResultString(r, &s);
    fprintf(stderr, "kerneltrace: %s: %s\n", what, s);
}

static void CUPTIAPI buffer_requested(uint8_t** buf, size_t* size, size_t* max_records) {
    *buf = aligned_alloc(8, BUF_BYTES);
    *size = *buf ? BUF_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buf, size_t size, size_t valid) {
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity* rec = NULL;
    pthread_mutex_lock(&out_mu);
    while (out && cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
        switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            const kernel_rec* k = (const kernel_rec*)rec;
            fprintf(out, "K %llu %llu %s\n", (unsigned long long)k->start, (unsigned long long)k->end,
                    k->name ? k->name : "?");
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const memcpy_rec* m = (const memcpy_rec*)rec;
            fprintf(out, "C %llu %llu %llu\n", (unsigned long long)m->start, (unsigned long long)m->end,
                    (unsigned long long)m->bytes);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const memset_rec* m = (const memset_rec*)rec;
            fprintf(out, "S %llu %llu %llu\n", (unsigned long long)m->start, (unsigned long long)m->end,
                    (unsigned long long)m->bytes);
            break;
        }
        default:
            break;
        }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped && out)
        fprintf(out, "D %zu\n", dropped);
    if (out) fflush(out);
    pthread_mutex_unlock(&out_mu);
    free(buf);
}

// Flushes everything recorded so far before a context goes away.
static void CUPTIAPI on_resource(void* user, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* data) {
    (void)user, (void)data;
    if (domain == CUPTI_CB_DOMAIN_RESOURCE && id == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)
        cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

// A forced flush would also hand back activities still running, without
// timestamps: only the flush at a context's end forces.
static void* flusher(void* arg) {
    (void)arg;
    struct timespec half = {0, 500000000};
    for (;;) {
        nanosleep(&half, NULL);
        cuptiActivityFlushAll(0);
    }
    return NULL;
}

// The driver calls this once, from cuInit, when CUDA_INJECTION64_PATH names
// this library.
int InitializeInjection(void) {
    const char* path = getenv("KTRACE_OUT");
    out = fopen(path && *path ? path : "/tmp/ktrace.txt", "w");
    if (!out) {
        perror("kerneltrace: output");
        return 0;
    }
    CUptiResult r;
    if ((r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed)) != CUPTI_SUCCESS)
        fail("register callbacks", r);
    const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                        CUPTI_ACTIVITY_KIND_MEMSET};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if ((r = cuptiActivityEnable(kinds[i])) != CUPTI_SUCCESS) fail("enable", r);
    CUpti_SubscriberHandle sub;
    if ((r = cuptiSubscribe(&sub, on_resource, NULL)) != CUPTI_SUCCESS)
        fail("subscribe", r);
    else if ((r = cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)) !=
             CUPTI_SUCCESS)
        fail("context callback", r);
    pthread_t t;
    pthread_create(&t, NULL, flusher, NULL);
    pthread_detach(t);
    fprintf(stderr, "kerneltrace: recording to %s (CUPTI %d)\n", path && *path ? path : "/tmp/ktrace.txt",
            CUPTI_API_VERSION);
    return 1;
}
