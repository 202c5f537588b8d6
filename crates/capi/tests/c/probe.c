/* nvme_probe / nvme_detach from C against a fake sysfs tree (argv[1]): the probe callback sees
 * every NVMe function on vfio-pci and declines one, the attach callback gets a working handle
 * for each accepted one (emulated controllers behind them: nvme_probe_emulated), nvme_detach
 * runs the remove callback before closing; nvme_probe through VFIO (none here) attaches
 * nothing and counts the failures. Built and run by crates/capi/tests/c_examples.rs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvme_userspace.h"

#define MAX_CTRLRS 8

struct state {
    int probed;
    int attached;
    int removed;
    struct nvme_ctrlr *ctrlrs[MAX_CTRLRS];
};

static bool on_probe(void *ctx, const struct nvme_probe_info *info) {
    struct state *s = ctx;
    s->probed++;
    printf("probe %s driver %s %04x:%04x class %06x vfio %d\n", info->address, info->driver,
           info->vendor_id, info->device_id, (unsigned)info->class_code, info->vfio);
    return strcmp(info->address, "0000:00:05.0") != 0;
}

static void on_attach(void *ctx, const struct nvme_probe_info *info, struct nvme_ctrlr *c) {
    struct state *s = ctx;
    struct nvme_ctrlr_info ci;
    if (nvme_ctrlr_get_info(c, &ci) != NVME_OK) {
        fprintf(stderr, "get_info: %s\n", nvme_last_error_message());
        exit(1);
    }
    printf("attach %s: %u namespaces\n", info->address, ci.num_namespaces);
    s->ctrlrs[s->attached++] = c;
}

static void on_remove(void *ctx, struct nvme_ctrlr *c) {
    struct state *s = ctx;
    struct nvme_ctrlr_info ci;
    /* Still usable inside the remove callback. */
    int rc = nvme_ctrlr_get_info(c, &ci);
    s->removed++;
    printf("remove: get_info %s\n", rc == NVME_OK ? "ok" : "failed");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: probe SYSFS_ROOT\n");
        return 2;
    }
    struct state s = {0};
    struct nvme_probe_opts opts = {.sysfs_root = argv[1], .addresses = NULL, .num_addresses = 0};
    size_t failed = 99;
    int n = nvme_probe_emulated(&opts, &s, on_probe, on_attach, on_remove, &failed);
    printf("attached %d probed %d failed %zu\n", n, s.probed, failed);
    for (int i = 0; i < s.attached; i++) {
        printf("check_removal %d\n", nvme_ctrlr_check_removal(s.ctrlrs[i]));
        printf("guard_register_faults %s\n",
               nvme_ctrlr_guard_register_faults(s.ctrlrs[i]) == NVME_ERR_UNSUPPORTED ? "unsupported"
                                                                                 : "?");
        if (nvme_detach(s.ctrlrs[i]) != NVME_OK)
            return 1;
    }
    printf("removed %d\n", s.removed);

    /* An address filter: only 0000:00:06.0. */
    const char *only[] = {"trtype:PCIe traddr:0000:00:06.0"};
    struct nvme_probe_opts one = {.sysfs_root = argv[1], .addresses = only, .num_addresses = 1};
    memset(&s, 0, sizeof s);
    n = nvme_probe_emulated(&one, &s, NULL, on_attach, on_remove, NULL);
    printf("filtered: attached %d\n", n);
    nvme_detach(s.ctrlrs[0]);

    /* Through VFIO: the fake functions cannot be opened. */
    memset(&s, 0, sizeof s);
    n = nvme_probe(&opts, &s, on_probe, on_attach, on_remove, &failed);
    printf("vfio: attached %d failed %zu message %s\n", n, failed,
           strstr(nvme_last_error_message(), "not attached") ? "names it" : "missing");

    /* A bad address in the filter is refused. */
    const char *bad[] = {"zz:zz"};
    struct nvme_probe_opts badopts = {.sysfs_root = argv[1], .addresses = bad, .num_addresses = 1};
    n = nvme_probe(&badopts, NULL, NULL, NULL, NULL, NULL);
    printf("bad address: %s\n", n == NVME_ERR_INVALID_ARGUMENT ? "invalid argument" : "?");
    printf("probe: done\n");
    return 0;
}
