/* A completion callback that leaves nvme_qpair_poll by longjmp (which the header forbids) and
 * what the application can do afterwards: the queue pair refuses to poll or be destroyed
 * (NVME_ERR_BUSY, as if the callback were still running) until nvme_qpair_recover() is called;
 * then the completions left behind are delivered, new requests work and destroy succeeds.
 * Built and run by crates/capi/tests/c_examples.rs against the emulated controller. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

#include "nvme_userspace.h"

#define CHECK(e)                                                                         \
    do {                                                                                 \
        int rc_ = (e);                                                                   \
        if (rc_ < 0) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #e,              \
                    nvme_strerror(rc_), nvme_last_error_message());                      \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

/* Globals, not locals: they are read after longjmp. */
static jmp_buf escape;
static int escaped_calls;
static int counted_calls;
static struct nvme_ctrlr *ctrlr;
static struct nvme_qpair *qp;
static struct nvme_buf *buf;

static void leave(void *arg, const struct nvme_cpl_status *st) {
    (void)arg;
    (void)st;
    escaped_calls++;
    longjmp(escape, 1);
}

static void count(void *arg, const struct nvme_cpl_status *st) {
    (void)arg;
    if (!st->success) {
        fprintf(stderr, "request failed: %s\n", nvme_strerror(st->error));
        exit(1);
    }
    counted_calls++;
}

int main(void) {
    CHECK(nvme_ctrlr_open_emulated(&ctrlr));
    CHECK(nvme_qpair_create(ctrlr, 8, 5000, &qp));
    CHECK(nvme_buf_alloc(ctrlr, 4096, &buf));
    /* The first callback jumps out of nvme_qpair_poll; the second request's completion may be
     * reaped by the same poll and must not be lost. */
    CHECK(nvme_qpair_submit_flush(qp, 1, leave, NULL));
    CHECK(nvme_qpair_submit_flush(qp, 1, count, NULL));
    if (setjmp(escape) == 0) {
        for (;;)
            CHECK(nvme_qpair_poll(qp, 0));
    }
    printf("left a callback by longjmp: %d\n", escaped_calls);
    int rc = nvme_qpair_poll(qp, 0);
    printf("poll after the longjmp: %s\n", rc == NVME_ERR_BUSY ? "busy" : nvme_strerror(rc));
    rc = nvme_qpair_destroy(qp);
    printf("destroy after the longjmp: %s\n", rc == NVME_ERR_BUSY ? "busy" : nvme_strerror(rc));
    if (rc == NVME_OK)
        return 1; /* destroyed: nothing more to check (and not expected) */
    rc = nvme_qpair_recover(qp);
    printf("recover: %d\n", rc);
    CHECK(rc);
    CHECK(nvme_qpair_submit_read(qp, 1, 0, 8, buf, count, NULL));
    while (counted_calls < 2)
        CHECK(nvme_qpair_poll(qp, 0));
    printf("callbacks after recover: %d\n", counted_calls);
    printf("recover again: %d\n", nvme_qpair_recover(qp));
    CHECK(nvme_qpair_destroy(qp));
    CHECK(nvme_buf_free(buf));
    CHECK(nvme_ctrlr_close(ctrlr));
    printf("longjmp_callback: done\n");
    return 0;
}
