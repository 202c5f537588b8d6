/*
 * qd_loop.c: a queue-depth-N write/read-verify loop driven by callbacks and polling.
 * Each of QD slots owns a buffer and a private LBA range; a slot writes a pattern, reads it
 * back into the same buffer from its write callback, checks it in the read callback and
 * starts its next write from there. Then Write Zeroes, Deallocate and Flush are checked, and
 * a Copy of two ranges where the controller offers Copy.
 *
 *   qd_loop emulated [QD [IOS]]                 in-process emulated controller
 *   qd_loop 0000:01:00.0 --write [QD [IOS]]     a vfio-pci controller: DESTROYS the first
 *                                               namespace's data at the start of the device
 *   qd_loop DEVICE --randread QD SECONDS        rate mode: 4 KiB random reads over the whole
 *                                               first namespace at queue depth QD for SECONDS
 *                                               (read-only), prints the I/O rate; the same
 *                                               workload as `nvme-perf -w randread -b 4096`
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvme_userspace.h"

#define IO_BYTES 4096
#define IOS_PER_SLOT_RANGE 16

#define CHECK(call)                                                                    \
    do {                                                                               \
        int rc_ = (call);                                                              \
        if (rc_ != NVME_OK) {                                                          \
            fprintf(stderr, "%s failed: %s (%d): %s\n", #call, nvme_strerror(rc_), rc_, \
                    nvme_last_error_message());                                        \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

struct loop;

struct slot {
    struct loop *loop;
    struct nvme_buf *buf;
    unsigned index;
    uint64_t lba;
    uint64_t seq;
};

struct loop {
    struct nvme_qpair *qp;
    struct nvme_ns_info ns;
    uint32_t blocks_per_io;
    uint64_t ios_left; /* writes still to start */
    uint64_t writes_done, reads_verified, in_flight;
    int failed;
};

static void fill(uint8_t *p, uint64_t lba, uint64_t seq) {
    uint64_t *w = (uint64_t *)p;
    for (size_t i = 0; i < IO_BYTES / 8; i++) w[i] = (lba << 24) ^ (seq << 8) ^ i;
}

static int verify(const uint8_t *p, uint64_t lba, uint64_t seq) {
    const uint64_t *w = (const uint64_t *)p;
    for (size_t i = 0; i < IO_BYTES / 8; i++)
        if (w[i] != ((lba << 24) ^ (seq << 8) ^ i)) return 0;
    return 1;
}

static void on_read(void *arg, const struct nvme_cpl_status *st);
static void start_write(struct slot *s);

static void fail_io(struct loop *l, const char *what, const struct nvme_cpl_status *st) {
    fprintf(stderr, "%s failed: %s (sct %u sc %u)\n", what, nvme_strerror(st->error), st->sct,
            st->sc);
    l->failed = 1;
}

static void on_write(void *arg, const struct nvme_cpl_status *st) {
    struct slot *s = arg;
    struct loop *l = s->loop;
    l->in_flight--;
    if (!st->success || st->buf != s->buf) return fail_io(l, "write", st);
    l->writes_done++;
    /* The buffer is ours again: scribble over it, then read the data back into it. */
    memset(nvme_buf_ptr(s->buf), 0xAA, IO_BYTES);
    int rc = nvme_qpair_submit_read(l->qp, l->ns.nsid, s->lba, l->blocks_per_io, s->buf, on_read, s);
    if (rc != NVME_OK) {
        fprintf(stderr, "submit read: %s\n", nvme_last_error_message());
        l->failed = 1;
        return;
    }
    l->in_flight++;
}

static void on_read(void *arg, const struct nvme_cpl_status *st) {
    struct slot *s = arg;
    struct loop *l = s->loop;
    l->in_flight--;
    if (!st->success) return fail_io(l, "read", st);
    if (!verify(nvme_buf_ptr(s->buf), s->lba, s->seq)) {
        fprintf(stderr, "slot %u: data mismatch at LBA %" PRIu64 "\n", s->index, s->lba);
        l->failed = 1;
        return;
    }
    l->reads_verified++;
    if (l->ios_left > 0) start_write(s);
}

static void start_write(struct slot *s) {
    struct loop *l = s->loop;
    l->ios_left--;
    s->seq++;
    uint64_t range_start = (uint64_t)s->index * IOS_PER_SLOT_RANGE;
    s->lba = (range_start + s->seq % IOS_PER_SLOT_RANGE) * l->blocks_per_io;
    fill(nvme_buf_ptr(s->buf), s->lba, s->seq);
    int rc = nvme_qpair_submit_write(l->qp, l->ns.nsid, s->lba, l->blocks_per_io, s->buf, 0,
                                     on_write, s);
    if (rc != NVME_OK) {
        fprintf(stderr, "submit write: %s\n", nvme_last_error_message());
        l->failed = 1;
        return;
    }
    l->in_flight++;
}

struct sync_io {
    int done;
    struct nvme_cpl_status st;
};

static void on_sync(void *arg, const struct nvme_cpl_status *st) {
    struct sync_io *io = arg;
    io->done = 1;
    io->st = *st;
}

static void wait_sync(struct nvme_qpair *qp, struct sync_io *io, const char *what) {
    while (!io->done) {
        int n = nvme_qpair_poll(qp, 1);
        if (n < 0) {
            fprintf(stderr, "poll: %s\n", nvme_last_error_message());
            exit(1);
        }
    }
    if (!io->st.success) {
        fprintf(stderr, "%s failed: %s (sct %u sc %u)\n", what, nvme_strerror(io->st.error),
                io->st.sct, io->st.sc);
        exit(1);
    }
}

/* ---- rate mode: random reads, resubmitted from their callbacks ---- */

struct rate {
    struct nvme_qpair *qp;
    uint32_t nsid;
    uint32_t blocks_per_io;
    uint64_t ios_per_ns; /* 4 KiB units in the namespace */
    uint64_t rng;
    uint64_t done;
    int stop, failed;
};

static uint64_t next_rand(struct rate *r) { /* xorshift64* */
    r->rng ^= r->rng >> 12;
    r->rng ^= r->rng << 25;
    r->rng ^= r->rng >> 27;
    return r->rng * 0x2545F4914F6CDD1DULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void on_rand_read(void *arg, const struct nvme_cpl_status *st);

static int submit_rand(struct rate *r, struct nvme_buf *buf) {
    uint64_t lba = (next_rand(r) % r->ios_per_ns) * r->blocks_per_io;
    return nvme_qpair_submit_read(r->qp, r->nsid, lba, r->blocks_per_io, buf, on_rand_read, r);
}

static void on_rand_read(void *arg, const struct nvme_cpl_status *st) {
    struct rate *r = arg;
    if (!st->success) {
        fprintf(stderr, "read failed: %s (sct %u sc %u)\n", nvme_strerror(st->error), st->sct,
                st->sc);
        r->failed = 1;
        return;
    }
    r->done++;
    if (r->stop) return;
    if (submit_rand(r, st->buf) != NVME_OK) {
        fprintf(stderr, "submit read: %s\n", nvme_last_error_message());
        r->failed = 1;
    }
}

static int run_rate(const char *device, unsigned qd, double seconds) {
    struct nvme_ctrlr *ctrlr = NULL;
    if (strcmp(device, "emulated") == 0) {
        CHECK(nvme_ctrlr_open_emulated(&ctrlr));
    } else {
        CHECK(nvme_ctrlr_open(device, &ctrlr));
    }
    struct rate r = {0};
    struct nvme_ns_info ns;
    if (nvme_ctrlr_namespace_ids(ctrlr, &r.nsid, 1) < 1) {
        fprintf(stderr, "no usable namespace\n");
        return 1;
    }
    CHECK(nvme_ctrlr_get_ns_info(ctrlr, r.nsid, &ns));
    if (ns.block_size > IO_BYTES) {
        fprintf(stderr, "block size %u above %d\n", ns.block_size, IO_BYTES);
        return 1;
    }
    r.blocks_per_io = IO_BYTES / ns.block_size;
    r.ios_per_ns = ns.blocks / r.blocks_per_io;
    r.rng = 0x9E3779B97F4A7C15ULL ^ (uint64_t)now_s();
    if (r.ios_per_ns == 0) {
        fprintf(stderr, "namespace smaller than %d bytes\n", IO_BYTES);
        return 1;
    }
    CHECK(nvme_qpair_create(ctrlr, qd + 1, 10000, &r.qp));
    struct nvme_buf **bufs = calloc(qd, sizeof *bufs);
    for (unsigned i = 0; i < qd; i++) CHECK(nvme_buf_alloc(ctrlr, IO_BYTES, &bufs[i]));

    double start = now_s(), end = start + seconds, stopped = start;
    for (unsigned i = 0; i < qd; i++) CHECK(submit_rand(&r, bufs[i]));
    while (!r.failed) {
        int n = nvme_qpair_poll(r.qp, 0);
        if (n < 0) {
            fprintf(stderr, "poll: %s\n", nvme_last_error_message());
            return 1;
        }
        if (!r.stop && now_s() >= end) {
            r.stop = 1; /* the rate counts what completed until here */
            stopped = now_s();
            uint64_t counted = r.done;
            while (nvme_qpair_outstanding(r.qp) > 0 && !r.failed) {
                if (nvme_qpair_poll(r.qp, 0) < 0) return 1;
            }
            r.done = counted;
            break;
        }
    }
    if (r.failed) return 1;
    double elapsed = stopped - start;
    printf("qd_loop: randread QD %u: %" PRIu64 " IOs in %.3f s: %.0f IOPS\n", qd, r.done, elapsed,
           (double)r.done / elapsed);
    for (unsigned i = 0; i < qd; i++) CHECK(nvme_buf_free(bufs[i]));
    free(bufs);
    CHECK(nvme_qpair_destroy(r.qp));
    CHECK(nvme_ctrlr_close(ctrlr));
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s emulated | <device> --write [QD [IOS]] | <device> --randread QD SECONDS\n", argv[0]);
        return 2;
    }
    if (argc >= 3 && strcmp(argv[2], "--randread") == 0) {
        unsigned qd = argc > 3 ? (unsigned)strtoul(argv[3], NULL, 0) : 0;
        double seconds = argc > 4 ? strtod(argv[4], NULL) : 0;
        if (qd == 0 || !(seconds > 0)) {
            fprintf(stderr, "--randread needs QD >= 1 and SECONDS > 0\n");
            return 2;
        }
        return run_rate(argv[1], qd, seconds);
    }
    int emulated = strcmp(argv[1], "emulated") == 0;
    int next = 2;
    if (!emulated) {
        if (argc < 3 || strcmp(argv[2], "--write") != 0) {
            fprintf(stderr, "%s: pass --write to allow overwriting data on %s\n", argv[0], argv[1]);
            return 2;
        }
        next = 3;
    }
    unsigned qd = argc > next ? (unsigned)strtoul(argv[next], NULL, 0) : 8;
    uint64_t ios = argc > next + 1 ? strtoull(argv[next + 1], NULL, 0) : 2000;
    if (qd == 0 || ios < qd) {
        fprintf(stderr, "need QD >= 1 and IOS >= QD\n");
        return 2;
    }

    struct nvme_ctrlr *ctrlr = NULL;
    if (emulated) {
        CHECK(nvme_ctrlr_open_emulated(&ctrlr));
    } else {
        CHECK(nvme_ctrlr_open(argv[1], &ctrlr));
    }
    uint32_t nsid;
    if (nvme_ctrlr_namespace_ids(ctrlr, &nsid, 1) < 1) {
        fprintf(stderr, "no usable namespace\n");
        return 1;
    }
    struct loop l = {0};
    CHECK(nvme_ctrlr_get_ns_info(ctrlr, nsid, &l.ns));
    if (l.ns.block_size > IO_BYTES) {
        fprintf(stderr, "block size %u above %d\n", l.ns.block_size, IO_BYTES);
        return 1;
    }
    l.blocks_per_io = IO_BYTES / l.ns.block_size;
    if ((uint64_t)qd * IOS_PER_SLOT_RANGE * l.blocks_per_io > l.ns.blocks) {
        fprintf(stderr, "namespace too small for QD %u\n", qd);
        return 1;
    }
    /* One more ring entry than requests in flight (a full ring keeps one entry empty). */
    CHECK(nvme_qpair_create(ctrlr, qd + 1, 10000, &l.qp));
    l.ios_left = ios;

    struct slot *slots = calloc(qd, sizeof *slots);
    for (unsigned i = 0; i < qd; i++) {
        slots[i].loop = &l;
        slots[i].index = i;
        CHECK(nvme_buf_alloc(ctrlr, IO_BYTES, &slots[i].buf));
    }
    for (unsigned i = 0; i < qd; i++) start_write(&slots[i]);

    uint64_t callbacks = 0;
    while (l.in_flight > 0 && !l.failed) {
        int n = nvme_qpair_poll(l.qp, 4); /* at most 4 callbacks per call */
        if (n < 0) {
            fprintf(stderr, "poll: %s\n", nvme_last_error_message());
            return 1;
        }
        if (n > 4) {
            fprintf(stderr, "poll ran %d callbacks, limit 4\n", n);
            return 1;
        }
        callbacks += (uint64_t)n;
    }
    if (l.failed || l.writes_done != ios || l.reads_verified != ios || callbacks != 2 * ios ||
        nvme_qpair_outstanding(l.qp) != 0) {
        fprintf(stderr, "loop failed: %" PRIu64 " writes, %" PRIu64 " reads verified, %" PRIu64
                        " callbacks\n",
                l.writes_done, l.reads_verified, callbacks);
        return 1;
    }
    printf("qd_loop: QD %u: %" PRIu64 " writes, %" PRIu64 " reads verified\n", qd, l.writes_done,
           l.reads_verified);

    /* Write Zeroes over slot 0's first I/O, read back zeroes. */
    struct slot *s = &slots[0];
    struct sync_io io = {0};
    CHECK(nvme_qpair_submit_write_zeroes(l.qp, nsid, 0, l.blocks_per_io, 0, on_sync, &io));
    wait_sync(l.qp, &io, "write zeroes");
    memset(nvme_buf_ptr(s->buf), 0xAA, IO_BYTES);
    io.done = 0;
    CHECK(nvme_qpair_submit_read(l.qp, nsid, 0, l.blocks_per_io, s->buf, on_sync, &io));
    wait_sync(l.qp, &io, "read after write zeroes");
    const uint8_t *p = nvme_buf_ptr(s->buf);
    for (size_t i = 0; i < IO_BYTES; i++) {
        if (p[i] != 0) {
            fprintf(stderr, "byte %zu not zero after Write Zeroes\n", i);
            return 1;
        }
    }
    struct nvme_lba_range ranges[2] = {{0, l.blocks_per_io}, {l.blocks_per_io, l.blocks_per_io}};
    io.done = 0;
    CHECK(nvme_qpair_submit_deallocate(l.qp, nsid, ranges, 2, on_sync, &io));
    wait_sync(l.qp, &io, "deallocate");
    io.done = 0;
    CHECK(nvme_qpair_submit_flush(l.qp, nsid, on_sync, &io));
    wait_sync(l.qp, &io, "flush");
    /* Out-of-range I/O is refused at submission, with a message. */
    int rc = nvme_qpair_submit_read(l.qp, nsid, l.ns.blocks, 1, s->buf, on_sync, &io);
    if (rc != NVME_ERR_LBA_RANGE || nvme_buf_in_flight(s->buf)) {
        fprintf(stderr, "out-of-range read not refused (%d)\n", rc);
        return 1;
    }
    printf("qd_loop: write zeroes, deallocate, flush: OK (%s)\n", nvme_last_error_message());

    /* Copy: two written I/Os of slot 0's range go, in one command, to a third place. */
    uint32_t bpi = l.blocks_per_io;
    uint64_t src[2] = {2 * (uint64_t)bpi, 5 * (uint64_t)bpi};
    uint64_t dest = 8 * (uint64_t)bpi;
    for (int k = 0; k < 2; k++) {
        fill(nvme_buf_ptr(s->buf), src[k], 1000 + k);
        io.done = 0;
        CHECK(nvme_qpair_submit_write(l.qp, nsid, src[k], bpi, s->buf, 0, on_sync, &io));
        wait_sync(l.qp, &io, "write before copy");
    }
    struct nvme_buf *list, *both;
    CHECK(nvme_buf_alloc(ctrlr, 4096, &list));
    CHECK(nvme_buf_alloc(ctrlr, 2 * IO_BYTES, &both));
    struct nvme_lba_range sources[2] = {{src[0], bpi}, {src[1], bpi}};
    io.done = 0;
    rc = nvme_qpair_submit_copy(l.qp, nsid, dest, sources, 2, list, 0, on_sync, &io);
    if (rc == NVME_ERR_UNSUPPORTED) {
        printf("qd_loop: copy: not offered (%s)\n", nvme_last_error_message());
    } else {
        CHECK(rc);
        wait_sync(l.qp, &io, "copy");
        io.done = 0;
        CHECK(nvme_qpair_submit_read(l.qp, nsid, dest, 2 * bpi, both, on_sync, &io));
        wait_sync(l.qp, &io, "read after copy");
        const uint8_t *q = nvme_buf_ptr(both);
        if (!verify(q, src[0], 1000) || !verify(q + IO_BYTES, src[1], 1001)) {
            fprintf(stderr, "the copied blocks differ from the blocks written\n");
            return 1;
        }
        printf("qd_loop: copy of 2 ranges (%u blocks) to LBA %" PRIu64 ": OK\n", 2 * bpi, dest);
    }
    CHECK(nvme_buf_free(list));
    CHECK(nvme_buf_free(both));

    for (unsigned i = 0; i < qd; i++) CHECK(nvme_buf_free(slots[i].buf));
    free(slots);
    CHECK(nvme_qpair_destroy(l.qp));
    CHECK(nvme_ctrlr_close(ctrlr));
    printf("qd_loop: done\n");
    return 0;
}
