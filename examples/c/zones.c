/*
 * zones.c: vectored I/O and zoned namespaces from C.
 *  - vectored: one write from several buffer pieces and one read into pieces of another shape
 *    (nvme_qpair_submit_writev / _readv), read back equal: pieces inside pages where the
 *    controller takes SGLs, page-aligned pieces (one PRP list) always; a request above one
 *    command's transfer is refused (NVME_ERR_IOVEC_TOO_LARGE), its buffers idle;
 *  - zoned: the zone geometry, Report Zones, Zone Append returning where the data landed
 *    (nvme_cpl_status.lba) and moving the write pointer, the appended data read back, a full
 *    zone's NVME_ERR_ZONE_FULL, reset, an invalid transition's NVME_ERR_ZONE_INVALID_TRANSITION.
 *
 *   zones emulated                        the in-process emulated controller with a zoned
 *                                         namespace 2 (nvme_ctrlr_open_emulated_zoned)
 *   zones <pci address> --write PLAIN ZONED FIRST
 *                                         a controller bound to vfio-pci: vectored I/O at LBA
 *                                         2048 of namespace PLAIN, zones FIRST..FIRST+3 of the
 *                                         zoned namespace ZONED (DESTROYS their contents; the
 *                                         zones must be Empty). Leaves zone FIRST open with 6
 *                                         blocks, FIRST+1 Full, FIRST+2 and FIRST+3 Empty.
 *
 * Build: cc -I crates/capi/include examples/c/zones.c target/debug/libnvme_userspace.a \
 *           -lpthread -ldl -lm -o zones
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

#define FAIL(...)                         \
    do {                                  \
        fprintf(stderr, "zones: " __VA_ARGS__); \
        fputc('\n', stderr);              \
        exit(1);                          \
    } while (0)

#define PAGE 4096u

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
        if (n < 0)
            FAIL("poll: %s: %s", nvme_strerror(n), nvme_last_error_message());
    }
    r->done = 0;
    return r->status;
}

static void expect_ok(struct nvme_cpl_status s, const char *what) {
    if (!s.success)
        FAIL("%s failed: %s (sct %u sc %#x)", what, nvme_strerror(s.error), s.sct, s.sc);
}

static struct nvme_buf *alloc(struct nvme_ctrlr *ctrlr, size_t len) {
    struct nvme_buf *b = NULL;
    CHECK(nvme_buf_alloc(ctrlr, len, &b));
    return b;
}

static uint8_t *bytes(struct nvme_buf *b) { return nvme_buf_ptr(b); }

/* Fills the pieces with a pattern (seed `k`), writes them at `lba`, reads the blocks back into
 * `back`, and compares. */
static void vectored_round_trip(struct nvme_qpair *qp, uint32_t nsid, uint64_t lba,
                                const struct nvme_iov_piece *w, uint32_t nw,
                                const struct nvme_iov_piece *r, uint32_t nr, unsigned k,
                                const char *what) {
    size_t total = 0;
    for (uint32_t i = 0; i < nw; i++) {
        for (size_t j = 0; j < w[i].len; j++)
            bytes(w[i].buf)[w[i].offset + j] = (uint8_t)((total + j) * 7 + k);
        total += w[i].len;
    }
    for (uint32_t i = 0; i < nr; i++)
        memset(bytes(r[i].buf), 0xA5, nvme_buf_len(r[i].buf));
    struct io_result res = {0};
    CHECK(nvme_qpair_submit_writev(qp, nsid, lba, w, nw, 0, on_complete, &res));
    expect_ok(wait_for(qp, &res), "writev");
    CHECK(nvme_qpair_submit_readv(qp, nsid, lba, r, nr, on_complete, &res));
    expect_ok(wait_for(qp, &res), "readv");
    size_t at = 0;
    for (uint32_t i = 0; i < nr; i++) {
        if (nvme_buf_in_flight(r[i].buf))
            FAIL("%s: piece %u still in flight after its callback", what, i);
        for (size_t j = 0; j < r[i].len; j++, at++)
            if (bytes(r[i].buf)[r[i].offset + j] != (uint8_t)(at * 7 + k))
                FAIL("%s: byte %zu reads back wrong", what, at);
        if (r[i].offset > 0 && bytes(r[i].buf)[r[i].offset - 1] != 0xA5)
            FAIL("%s: the read wrote before piece %u", what, i);
    }
    printf("vectored: %s: %u pieces written, %u read back, %zu bytes equal: OK\n", what, nw, nr,
           total);
}

static void vectored(struct nvme_ctrlr *ctrlr, struct nvme_qpair *qp, uint32_t nsid) {
    struct nvme_ns_info ns;
    CHECK(nvme_ctrlr_get_ns_info(ctrlr, nsid, &ns));
    struct nvme_ctrlr_info info;
    CHECK(nvme_ctrlr_get_info(ctrlr, &info));
    uint32_t bs = ns.block_size;
    const uint64_t lba = 2048 * 512 / bs;
    struct nvme_buf *b[6];
    for (int i = 0; i < 6; i++)
        b[i] = alloc(ctrlr, 4 * PAGE);

    /* Page-aligned: the first piece ends a page, the middle ones are whole pages, the last
     * starts one (a PRP list over all of them, or SGL Data Blocks). 4 pages in 3 pieces. */
    struct nvme_iov_piece w[3] = {{b[0], 3 * PAGE + PAGE / 2, PAGE / 2},
                                  {b[1], PAGE, 2 * PAGE},
                                  {b[2], 0, PAGE + PAGE / 2}};
    struct nvme_iov_piece r[2] = {{b[3], 0, 3 * PAGE}, {b[4], 0, PAGE}};
    vectored_round_trip(qp, nsid, lba, w, 3, r, 2, 1, "page-aligned pieces");

    /* Inside pages: only with SGLs; with PRPs the driver refuses the piece by index. */
    struct nvme_iov_piece wu[3] = {{b[0], 100, 1000}, {b[1], 4, 2 * PAGE}, {b[2], 2048, 0}};
    wu[2].len = 4 * PAGE - 1000 - 2 * PAGE; /* 4 pages in all */
    struct nvme_iov_piece ru[2] = {{b[3], 8, 12}, {b[4], 12, 4 * PAGE - 12}};
    if (nvme_ctrlr_uses_sgl(ctrlr) == 1) {
        vectored_round_trip(qp, nsid, lba, wu, 3, ru, 2, 2, "unaligned pieces (SGL)");
    } else {
        struct io_result res = {0};
        int rc = nvme_qpair_submit_writev(qp, nsid, lba, wu, 3, 0, on_complete, &res);
        if (rc != NVME_ERR_IOVEC_PIECE)
            FAIL("unaligned pieces with PRPs: %s, expected NVME_ERR_IOVEC_PIECE", nvme_strerror(rc));
        printf("vectored: unaligned pieces with PRPs refused: %s: OK\n", nvme_last_error_message());
    }

    /* Above one command's transfer: refused, never split, the buffers idle. */
    size_t half = (size_t)info.max_transfer_bytes / 2 + PAGE;
    struct nvme_buf *big0 = alloc(ctrlr, half), *big1 = alloc(ctrlr, half);
    struct nvme_iov_piece wb[2] = {{big0, 0, half}, {big1, 0, half}};
    struct io_result res = {0};
    int rc = nvme_qpair_submit_readv(qp, nsid, lba, wb, 2, on_complete, &res);
    if (rc != NVME_ERR_IOVEC_TOO_LARGE || nvme_buf_in_flight(big0) || nvme_buf_in_flight(big1))
        FAIL("%zu bytes vectored: %s, expected NVME_ERR_IOVEC_TOO_LARGE and idle buffers",
             2 * half, nvme_strerror(rc));
    printf("vectored: %zu bytes above the %" PRIu64 "-byte transfer refused: OK\n", 2 * half,
           info.max_transfer_bytes);
    CHECK(nvme_buf_free(big0));
    CHECK(nvme_buf_free(big1));
    for (int i = 0; i < 6; i++)
        CHECK(nvme_buf_free(b[i]));
}

static struct nvme_zone zone_of(struct nvme_qpair *qp, uint32_t nsid, struct nvme_buf *rep,
                                uint64_t zslba) {
    struct io_result res = {0};
    CHECK(nvme_qpair_submit_zone_report(qp, nsid, zslba, NVME_ZONE_REPORT_ALL, rep, on_complete,
                                        &res));
    expect_ok(wait_for(qp, &res), "report zones");
    struct nvme_zone z;
    int n = nvme_zone_report_parse(rep, &z, 1);
    if (n != 1 || z.zslba != zslba)
        FAIL("the report from LBA %" PRIu64 " holds %d zones (first at %" PRIu64 ")", zslba, n,
             n > 0 ? z.zslba : 0);
    return z;
}

static void zoned(struct nvme_ctrlr *ctrlr, struct nvme_qpair *qp, uint32_t nsid, uint64_t first,
                  int emulated) {
    struct nvme_zone_info zi;
    CHECK(nvme_ctrlr_get_zone_info(ctrlr, nsid, &zi));
    struct nvme_ns_info ns;
    CHECK(nvme_ctrlr_get_ns_info(ctrlr, nsid, &ns));
    printf("zones: namespace %u: %" PRIu64 " zones of %" PRIu64 " blocks, max open %u, max active %u\n",
           nsid, zi.zones, zi.zone_blocks, zi.max_open, zi.max_active);
    if (first + 4 > zi.zones)
        FAIL("zones %" PRIu64 "..%" PRIu64 " are not all in the namespace", first, first + 3);
    uint32_t bs = ns.block_size;
    struct nvme_buf *rep = alloc(ctrlr, PAGE), *data = alloc(ctrlr, 2 * bs),
                    *back = alloc(ctrlr, 6 * bs);
    struct io_result res = {0};
    uint64_t z0 = first * zi.zone_blocks;

    /* A report of every zone from z0: all Empty at their starts. */
    CHECK(nvme_qpair_submit_zone_report(qp, nsid, z0, NVME_ZONE_REPORT_ALL, rep, on_complete,
                                        &res));
    expect_ok(wait_for(qp, &res), "report zones");
    struct nvme_zone zs[4];
    int n = nvme_zone_report_parse(rep, zs, 4);
    if (n != 4)
        FAIL("a report of 4 zones parsed %d", n);
    for (int i = 0; i < 4; i++)
        if (zs[i].state != NVME_ZONE_STATE_EMPTY || zs[i].wp != zs[i].zslba ||
            zs[i].zslba != z0 + (uint64_t)i * zi.zone_blocks)
            FAIL("zone %" PRIu64 " is not Empty at its start (state %#x wp %" PRIu64 ")",
                 first + i, zs[i].state, zs[i].wp);
    printf("zones: report: zones %" PRIu64 "..%" PRIu64 " Empty: OK\n", first, first + 3);

    /* Three appends of 2 blocks: each lands at the write pointer, which moves. */
    uint64_t lbas[3];
    for (int k = 0; k < 3; k++) {
        memset(bytes(data), 'a' + k, 2 * bs);
        CHECK(nvme_qpair_submit_zone_append(qp, nsid, z0, 2, data, 0, on_complete, &res));
        struct nvme_cpl_status s = wait_for(qp, &res);
        expect_ok(s, "zone append");
        lbas[k] = s.lba;
        if (s.lba != z0 + 2 * (uint64_t)k)
            FAIL("append %d landed at %" PRIu64 ", expected %" PRIu64, k, s.lba, z0 + 2 * k);
    }
    struct nvme_zone z = zone_of(qp, nsid, rep, z0);
    if (z.wp != z0 + 6 || (z.state != NVME_ZONE_STATE_IMPLICITLY_OPENED))
        FAIL("after 3 appends zone %" PRIu64 " has wp %" PRIu64 " state %#x", first, z.wp, z.state);
    CHECK(nvme_qpair_submit_read(qp, nsid, z0, 6, back, on_complete, &res));
    expect_ok(wait_for(qp, &res), "read");
    for (uint32_t i = 0; i < 6 * bs; i++)
        if (bytes(back)[i] != 'a' + i / (2 * bs))
            FAIL("appended byte %u reads back wrong", i);
    printf("zones: append: LBAs %" PRIu64 " %" PRIu64 " %" PRIu64 ", write pointer %" PRIu64
           ", data read back: OK\n",
           lbas[0], lbas[1], lbas[2], z.wp);

    /* Finish the next zone: Full; an append to it fails with the zone error's own code. */
    uint64_t z1 = z0 + zi.zone_blocks;
    CHECK(nvme_qpair_submit_zone_mgmt(qp, nsid, z1, NVME_ZONE_ACTION_FINISH, 0, on_complete, &res));
    expect_ok(wait_for(qp, &res), "finish zone");
    if (zone_of(qp, nsid, rep, z1).state != NVME_ZONE_STATE_FULL)
        FAIL("a finished zone is not Full");
    CHECK(nvme_qpair_submit_zone_append(qp, nsid, z1, 1, data, 0, on_complete, &res));
    struct nvme_cpl_status s = wait_for(qp, &res);
    if (s.success || s.error != NVME_ERR_ZONE_FULL)
        FAIL("append to a full zone: %s, expected NVME_ERR_ZONE_FULL", nvme_strerror(s.error));
    printf("zones: full zone: %s (sct %u sc %#x): OK\n", nvme_strerror(s.error), s.sct, s.sc);

    /* Append to the third, reset it: Empty, write pointer at its start. */
    uint64_t z2 = z1 + zi.zone_blocks;
    CHECK(nvme_qpair_submit_zone_append(qp, nsid, z2, 1, data, 0, on_complete, &res));
    expect_ok(wait_for(qp, &res), "zone append");
    CHECK(nvme_qpair_submit_zone_mgmt(qp, nsid, z2, NVME_ZONE_ACTION_RESET, 0, on_complete, &res));
    expect_ok(wait_for(qp, &res), "reset zone");
    z = zone_of(qp, nsid, rep, z2);
    if (z.state != NVME_ZONE_STATE_EMPTY || z.wp != z2)
        FAIL("a reset zone has state %#x wp %" PRIu64, z.state, z.wp);
    printf("zones: reset: Empty, write pointer back at %" PRIu64 ": OK\n", z2);

    /* Offline is only allowed from Read Only. */
    uint64_t z3 = z2 + zi.zone_blocks;
    CHECK(nvme_qpair_submit_zone_mgmt(qp, nsid, z3, NVME_ZONE_ACTION_OFFLINE, 0, on_complete, &res));
    s = wait_for(qp, &res);
    if (s.success || s.error != NVME_ERR_ZONE_INVALID_TRANSITION)
        FAIL("offline of an empty zone: %s, expected NVME_ERR_ZONE_INVALID_TRANSITION",
             nvme_strerror(s.error));
    printf("zones: offline of an empty zone: %s: OK\n", nvme_strerror(s.error));

    if (emulated) {
        /* Select All: every active zone reset. */
        CHECK(nvme_qpair_submit_zone_mgmt(qp, nsid, 0, NVME_ZONE_ACTION_RESET, NVME_ZONE_ALL,
                                          on_complete, &res));
        expect_ok(wait_for(qp, &res), "reset all");
        CHECK(nvme_qpair_submit_zone_report(qp, nsid, 0, NVME_ZONE_REPORT_EMPTY, rep,
                                            on_complete, &res));
        expect_ok(wait_for(qp, &res), "report empty zones");
        struct nvme_zone all[64];
        n = nvme_zone_report_parse(rep, all, 64);
        if (n != (int)zi.zones)
            FAIL("after reset all %d of %" PRIu64 " zones are Empty", n, zi.zones);
        printf("zones: reset all: %d zones Empty: OK\n", n);
    }
    CHECK(nvme_buf_free(rep));
    CHECK(nvme_buf_free(data));
    CHECK(nvme_buf_free(back));
}

int main(int argc, char **argv) {
    int emulated = argc == 2 && strcmp(argv[1], "emulated") == 0;
    if (!emulated && (argc != 6 || strcmp(argv[2], "--write") != 0)) {
        fprintf(stderr,
                "usage: %s emulated | <pci address> --write PLAIN_NSID ZONED_NSID FIRST_ZONE\n",
                argv[0]);
        return 2;
    }
    struct nvme_ctrlr *ctrlr = NULL;
    uint32_t plain = 1, zns = 2;
    uint64_t first = 0;
    if (emulated) {
        CHECK(nvme_ctrlr_open_emulated_zoned(&ctrlr));
    } else {
        plain = (uint32_t)strtoul(argv[3], NULL, 0);
        zns = (uint32_t)strtoul(argv[4], NULL, 0);
        first = strtoull(argv[5], NULL, 0);
        CHECK(nvme_ctrlr_open(argv[1], &ctrlr));
    }
    struct nvme_qpair *qp = NULL;
    CHECK(nvme_qpair_create(ctrlr, 32, 5000, &qp));
    vectored(ctrlr, qp, plain);
    zoned(ctrlr, qp, zns, first, emulated);
    CHECK(nvme_qpair_destroy(qp));
    CHECK(nvme_ctrlr_close(ctrlr));
    printf("zones: done\n");
    return 0;
}
