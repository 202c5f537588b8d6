/*
 * commands.c: the optional NVM commands from C: a fused Compare and Write (a match writes,
 * a mismatch does not) and Write Uncorrectable (reads fail until the block is written
 * again). A controller that does not offer one says so (NVME_ERR_UNSUPPORTED) and the
 * example goes on.
 *
 *   commands emulated              in-process emulated controller (offers both)
 *   commands 0000:01:00.0 --write  a controller bound to vfio-pci: uses LBA 0 of the first
 *                                  namespace (DESTROYS its contents)
 *
 * Build: cc -I crates/capi/include examples/c/commands.c target/debug/libnvme_userspace.a \
 *           -lpthread -ldl -lm -o commands
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvme_userspace.h"

#define CHECK(call)                                                                    \
    do {                                                                               \
        int rc_ = (call);                                                              \
        if (rc_ != NVME_OK) {                                                          \
            fprintf(stderr, "%s failed: %s (%d): %s\n", #call, nvme_strerror(rc_), rc_, \
                    nvme_last_error_message());                                        \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

/* Media and Data Integrity Errors (NVM CS Figure 22). */
#define SCT_MEDIA 2
#define SC_UNRECOVERED_READ 0x81
#define SC_COMPARE_FAILURE 0x85

struct io_result {
    int done;
    struct nvme_cpl_status status;
};

static void on_complete(void *arg, const struct nvme_cpl_status *status) {
    struct io_result *r = arg;
    r->done = 1;
    r->status = *status;
}

/* Polls until `r` completes; returns its status. */
static struct nvme_cpl_status wait_for(struct nvme_qpair *qp, struct io_result *r) {
    while (!r->done) {
        int n = nvme_qpair_poll(qp, 0);
        if (n < 0) {
            fprintf(stderr, "poll: %s: %s\n", nvme_strerror(n), nvme_last_error_message());
            exit(1);
        }
    }
    r->done = 0;
    return r->status;
}

static void expect_success(struct nvme_cpl_status s, const char *what) {
    if (!s.success) {
        fprintf(stderr, "%s failed: %s (sct %u sc %#x)\n", what, nvme_strerror(s.error), s.sct,
                s.sc);
        exit(1);
    }
}

static void expect_status(struct nvme_cpl_status s, unsigned sct, unsigned sc, const char *what) {
    if (s.success || s.sct != sct || s.sc != sc) {
        fprintf(stderr, "%s: expected sct %u sc %#x, got success %d sct %u sc %#x\n", what, sct,
                sc, s.success, s.sct, s.sc);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "emulated") != 0 &&
                     (argc < 3 || strcmp(argv[2], "--write") != 0))) {
        fprintf(stderr, "usage: %s emulated | <pci address> --write (destroys LBA 0)\n", argv[0]);
        return 2;
    }
    struct nvme_ctrlr *ctrlr = NULL;
    if (strcmp(argv[1], "emulated") == 0) {
        CHECK(nvme_ctrlr_open_emulated(&ctrlr));
    } else {
        CHECK(nvme_ctrlr_open(argv[1], &ctrlr));
    }
    uint32_t nsid = 0;
    if (nvme_ctrlr_namespace_ids(ctrlr, &nsid, 1) <= 0) {
        fprintf(stderr, "no usable namespace\n");
        return 1;
    }
    struct nvme_ns_info ns;
    CHECK(nvme_ctrlr_get_ns_info(ctrlr, nsid, &ns));
    uint32_t bs = ns.block_size;
    struct nvme_qpair *qp = NULL;
    CHECK(nvme_qpair_create(ctrlr, 32, 5000, &qp));
    struct nvme_buf *block = NULL, *pair = NULL;
    CHECK(nvme_buf_alloc(ctrlr, bs, &block));
    CHECK(nvme_buf_alloc(ctrlr, 2 * bs, &pair));
    uint8_t *b = nvme_buf_ptr(block), *p = nvme_buf_ptr(pair);
    struct io_result r = {0};

    /* LBA 0 holds "old"; compare with "old", write "new". */
    memset(b, 'o', bs);
    CHECK(nvme_qpair_submit_write(qp, nsid, 0, 1, block, 0, on_complete, &r));
    expect_success(wait_for(qp, &r), "write");
    memset(p, 'o', bs);
    memset(p + bs, 'n', bs);
    int rc = nvme_qpair_submit_compare_and_write(qp, nsid, 0, 1, pair, 0, on_complete, &r);
    if (rc == NVME_ERR_UNSUPPORTED) {
        printf("compare and write: not offered: %s\n", nvme_last_error_message());
    } else {
        CHECK(rc);
        expect_success(wait_for(qp, &r), "compare and write");
        /* Again with "old": the block holds "new" now, so nothing is written. */
        memset(p + bs, 'x', bs);
        CHECK(nvme_qpair_submit_compare_and_write(qp, nsid, 0, 1, pair, 0, on_complete, &r));
        expect_status(wait_for(qp, &r), SCT_MEDIA, SC_COMPARE_FAILURE, "miscompare");
        CHECK(nvme_qpair_submit_read(qp, nsid, 0, 1, block, on_complete, &r));
        expect_success(wait_for(qp, &r), "read");
        for (uint32_t i = 0; i < bs; i++) {
            if (b[i] != 'n') {
                fprintf(stderr, "byte %u is %#x after the compare and writes\n", i, b[i]);
                return 1;
            }
        }
        printf("compare and write: match wrote, mismatch (Compare Failure) did not: OK\n");
    }

    rc = nvme_qpair_submit_write_uncorrectable(qp, nsid, 0, 1, on_complete, &r);
    if (rc == NVME_ERR_UNSUPPORTED) {
        printf("write uncorrectable: not offered: %s\n", nvme_last_error_message());
    } else {
        CHECK(rc);
        expect_success(wait_for(qp, &r), "write uncorrectable");
        CHECK(nvme_qpair_submit_read(qp, nsid, 0, 1, block, on_complete, &r));
        expect_status(wait_for(qp, &r), SCT_MEDIA, SC_UNRECOVERED_READ, "read of a marked block");
        memset(b, 'w', bs);
        CHECK(nvme_qpair_submit_write(qp, nsid, 0, 1, block, 0, on_complete, &r));
        expect_success(wait_for(qp, &r), "write");
        memset(b, 0, bs);
        CHECK(nvme_qpair_submit_read(qp, nsid, 0, 1, block, on_complete, &r));
        expect_success(wait_for(qp, &r), "read after the write");
        if (b[0] != 'w' || b[bs - 1] != 'w') {
            fprintf(stderr, "the rewritten block reads back wrong\n");
            return 1;
        }
        printf("write uncorrectable: read failed (Unrecovered Read Error), write healed it: OK\n");
    }

    CHECK(nvme_buf_free(block));
    CHECK(nvme_buf_free(pair));
    CHECK(nvme_qpair_destroy(qp));
    CHECK(nvme_ctrlr_close(ctrlr));
    printf("commands: done\n");
    return 0;
}
