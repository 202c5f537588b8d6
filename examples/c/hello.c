/*
 * hello.c: open a controller, list its namespaces, write one block and read it back.
 *
 *   hello emulated               in-process emulated controller (no device needed)
 *   hello 0000:01:00.0           a controller bound to vfio-pci: read-only
 *   hello 0000:01:00.0 --write   ... and write the LAST block of the first namespace
 *                                (DESTROYS its contents)
 *
 * Build: cc -I crates/capi/include examples/c/hello.c target/debug/libnvme_userspace.a \
 *           -lpthread -ldl -lm -o hello
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

struct io_result {
    int done;
    struct nvme_cpl_status status;
};

static void on_complete(void *arg, const struct nvme_cpl_status *status) {
    struct io_result *r = arg;
    r->done = 1;
    r->status = *status;
}

/* Submits nothing; polls until `r` completes and checks it succeeded. */
static void wait_for(struct nvme_qpair *qp, struct io_result *r, const char *what) {
    while (!r->done) {
        int n = nvme_qpair_poll(qp, 0);
        if (n < 0) {
            fprintf(stderr, "poll: %s: %s\n", nvme_strerror(n), nvme_last_error_message());
            exit(1);
        }
    }
    if (!r->status.success) {
        fprintf(stderr, "%s failed: %s (sct %u sc %u)\n", what, nvme_strerror(r->status.error),
                r->status.sct, r->status.sc);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s emulated | <pci address or transport id> [--write]\n", argv[0]);
        return 2;
    }
    int emulated = strcmp(argv[1], "emulated") == 0;
    int do_write = emulated || (argc > 2 && strcmp(argv[2], "--write") == 0);

    struct nvme_ctrlr *ctrlr = NULL;
    if (emulated) {
        CHECK(nvme_ctrlr_open_emulated(&ctrlr));
    } else {
        CHECK(nvme_ctrlr_open(argv[1], &ctrlr));
    }

    struct nvme_ctrlr_info info;
    CHECK(nvme_ctrlr_get_info(ctrlr, &info));
    printf("controller: %s (serial %s, firmware %s), %u I/O queue pairs, max transfer %" PRIu64
           " bytes\n",
           info.model, info.serial, info.firmware, info.io_queue_pairs, info.max_transfer_bytes);

    uint32_t ids[64];
    int count = nvme_ctrlr_namespace_ids(ctrlr, ids, 64);
    if (count <= 0) {
        fprintf(stderr, "no usable namespace (%d)\n", count);
        return 1;
    }
    for (int i = 0; i < count && i < 64; i++) {
        struct nvme_ns_info ns;
        CHECK(nvme_ctrlr_get_ns_info(ctrlr, ids[i], &ns));
        printf("namespace %u: %" PRIu64 " blocks of %u bytes\n", ns.nsid, ns.blocks, ns.block_size);
    }

    /* Errors are codes plus a per-thread message. */
    if (nvme_ctrlr_get_info(NULL, &info) != NVME_ERR_NULL_POINTER) {
        fprintf(stderr, "NULL controller not rejected\n");
        return 1;
    }

    struct nvme_ns_info ns;
    CHECK(nvme_ctrlr_get_ns_info(ctrlr, ids[0], &ns));
    uint64_t lba = ns.blocks - 1;

    struct nvme_qpair *qp = NULL;
    CHECK(nvme_qpair_create(ctrlr, 32, 5000, &qp));
    struct nvme_buf *wbuf = NULL, *rbuf = NULL;
    CHECK(nvme_buf_alloc(ctrlr, ns.block_size, &wbuf));
    CHECK(nvme_buf_alloc(ctrlr, ns.block_size, &rbuf));
    uint8_t *w = nvme_buf_ptr(wbuf);

    if (do_write) {
        for (uint32_t i = 0; i < ns.block_size; i++) w[i] = (uint8_t)(i * 7 + 3);
        struct io_result wr = {0};
        CHECK(nvme_qpair_submit_write(qp, ns.nsid, lba, 1, wbuf, 0, on_complete, &wr));
        /* The buffer belongs to the queue pair until the callback: reuse is refused. */
        int rc = nvme_qpair_submit_write(qp, ns.nsid, lba, 1, wbuf, 0, on_complete, &wr);
        if (rc != NVME_ERR_BUFFER_IN_FLIGHT || nvme_buf_free(wbuf) != NVME_ERR_BUFFER_IN_FLIGHT) {
            fprintf(stderr, "in-flight buffer reuse not refused (%d)\n", rc);
            return 1;
        }
        printf("resubmitting an in-flight buffer: %s\n", nvme_strerror(rc));
        wait_for(qp, &wr, "write");
        if (wr.status.buf != wbuf || nvme_buf_in_flight(wbuf)) {
            fprintf(stderr, "buffer not handed back\n");
            return 1;
        }
    }

    struct io_result rd = {0};
    CHECK(nvme_qpair_submit_read(qp, ns.nsid, lba, 1, rbuf, on_complete, &rd));
    wait_for(qp, &rd, "read");
    if (do_write) {
        if (memcmp(nvme_buf_ptr(rbuf), w, ns.block_size) != 0) {
            fprintf(stderr, "data mismatch at LBA %" PRIu64 "\n", lba);
            return 1;
        }
        printf("namespace %u LBA %" PRIu64 ": wrote and read back %u bytes: OK\n", ns.nsid, lba,
               ns.block_size);
    } else {
        printf("namespace %u LBA %" PRIu64 ": read %u bytes: OK\n", ns.nsid, lba, ns.block_size);
    }

    CHECK(nvme_buf_free(wbuf));
    CHECK(nvme_buf_free(rbuf));
    CHECK(nvme_qpair_destroy(qp));
    CHECK(nvme_ctrlr_close(ctrlr));
    printf("hello: done\n");
    return 0;
}
