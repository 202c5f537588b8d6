/*
 * nvme_fio.c: an fio ioengine on the userspace NVMe driver's C API (nvme_userspace.h), loaded
 * by an unpatched fio with `ioengine=external:/path/to/nvme-fio.so` (or `--ioengine=PATH`).
 * Built against the headers of the installed fio version by tools/fio-engine/build.sh.
 *
 * FILENAMES name a namespace in the tools' device syntax (the C API's nvme_device_parse and
 * nvme_ctrlr_open parse it: one parser), plus `ns=N` (default: the first usable namespace).
 * fio splits filename= on ':', so the engine accepts the SPDK-style spelling where '='
 * stands for ':' between a key and its value and '.' for ':' inside a PCI address:
 *     filename=trtype=PCIe traddr=0000.01.00.0 ns=1
 *     filename=0000.01.00.0 ns=2
 *     filename=trtype=TCP adrfam=IPv4 traddr=192.0.2.1 trsvcid=4420 subnqn=nqn.x ns=1
 *     filename=sim ns=1                  (the in-process emulator: engine built --emulator)
 * A ':' fio must not split on may also be written '\:' (fio removes the backslash), which
 * an NQN with ':' in it needs: subnqn=nqn.2014-08.org.example\:disk1.
 *
 * THREADS: thread=1 is required (the driver's controllers live in the fio process); each job
 * gets one queue pair per controller it uses; controllers are shared by the jobs of the
 * process (opened once, reference-counted under a mutex: setup only, never per I/O).
 *
 * MEMORY: fio's I/O buffers are the driver's DMA memory (iomem_alloc): one allocation carved
 * with nvme_buf_split into one buffer per io_u, in fio's layout (io_u i at i * max_bs), so an
 * I/O is submitted from its io_u's own buffer with no copy and no allocation.
 *
 * BATCHES: queue() holds the queue pair's submissions (nvme_qpair_hold_submissions) and
 * commit() releases them: one doorbell write per fio batch (iodepth_batch_submit).
 *
 * CONTROLLER OPTIONS (PCIe; fio --enghelp=PATH): nvme_shadow_doorbells, nvme_sgl
 * (nvme_ctrlr_open_in_opts) and nvme_vfio_mode (the driver's NVME_VFIO_MODE, set before the
 * process's first PCIe controller opens). A controller is opened once for the process, so
 * every job naming it must ask for the same options.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "fio.h"
#include "optgroup.h"

#include "nvme_userspace.h"

#define ENGINE "nvme-userspace"
#define DEVICE_STRING_MAX 1024

/* ---- engine options (fio --enghelp=PATH) ---- */

struct nvme_fio_options {
    void *pad; /* fio stores its thread_data pointer in the first member */
    unsigned int timeout_ms;
    unsigned int batch;
    unsigned int ring;
    unsigned int shadow_doorbells; /* NVME_SHADOW_DOORBELLS_* */
    unsigned int sgl;
    unsigned int vfio_mode; /* an index into vfio_modes */
};

/* nvme_vfio_mode's values, as the driver's NVME_VFIO_MODE spells them ("auto": unset). */
static const char *const vfio_modes[] = {"auto", "type1", "iommufd", "noiommu"};
#define VFIO_MODE_AUTO 0

static struct fio_option options[] = {
    {
        .name = "nvme_timeout",
        .lname = "NVMe request timeout",
        .type = FIO_OPT_INT,
        .off1 = offsetof(struct nvme_fio_options, timeout_ms),
        .def = "0",
        .help = "Fail a request not completed within this many milliseconds (0: the driver's "
                "default, 30 s)",
        .category = FIO_OPT_C_ENGINE,
        .group = FIO_OPT_G_INVALID,
    },
    {
        .name = "nvme_batch",
        .lname = "One doorbell per batch",
        .type = FIO_OPT_BOOL,
        .off1 = offsetof(struct nvme_fio_options, batch),
        .def = "1",
        .help = "Hold submissions until fio commits a batch (iodepth_batch_submit) and ring the "
                "doorbell once for it; 0 rings it per I/O",
        .category = FIO_OPT_C_ENGINE,
        .group = FIO_OPT_G_INVALID,
    },
    {
        .name = "nvme_ring",
        .lname = "Queue pair ring size",
        .type = FIO_OPT_INT,
        .off1 = offsetof(struct nvme_fio_options, ring),
        .def = "0",
        .help = "Entries of each job's submission/completion rings (0: iodepth + 1, so that "
                "iodepth commands fit)",
        .category = FIO_OPT_C_ENGINE,
        .group = FIO_OPT_G_INVALID,
    },
    {
        .name = "nvme_shadow_doorbells",
        .lname = "Shadow doorbells",
        .type = FIO_OPT_STR,
        .off1 = offsetof(struct nvme_fio_options, shadow_doorbells),
        .def = "auto",
        .help = "Shadow doorbells (Doorbell Buffer Config) of a PCIe controller",
        .posval =
            {
                {.ival = "auto",
                 .oval = NVME_SHADOW_DOORBELLS_AUTO,
                 .help = "The driver's rule: where offered and not under an emulating hypervisor"},
                {.ival = "always",
                 .oval = NVME_SHADOW_DOORBELLS_ALWAYS,
                 .help = "Wherever the controller offers them"},
                {.ival = "never",
                 .oval = NVME_SHADOW_DOORBELLS_NEVER,
                 .help = "MMIO doorbell writes only"},
            },
        .category = FIO_OPT_C_ENGINE,
        .group = FIO_OPT_G_INVALID,
    },
    {
        .name = "nvme_sgl",
        .lname = "SGL data descriptors",
        .type = FIO_OPT_BOOL,
        .off1 = offsetof(struct nvme_fio_options, sgl),
        .def = "1",
        .help = "Describe read/write data with SGLs where a PCIe controller offers them; 0 "
                "forces PRPs",
        .category = FIO_OPT_C_ENGINE,
        .group = FIO_OPT_G_INVALID,
    },
    {
        .name = "nvme_vfio_mode",
        .lname = "VFIO interface",
        .type = FIO_OPT_STR,
        .off1 = offsetof(struct nvme_fio_options, vfio_mode),
        .def = "auto",
        .help = "The VFIO interface PCIe controllers are opened through (the driver's "
                "NVME_VFIO_MODE; one for the whole process)",
        .posval =
            {
                {.ival = "auto", .oval = 0, .help = "iommufd where available, else type1 "
                                                    "(or NVME_VFIO_MODE from the environment)"},
                {.ival = "type1", .oval = 1, .help = "VFIO group + type1 IOMMU container"},
                {.ival = "iommufd", .oval = 2, .help = "VFIO device cdev + iommufd"},
                {.ival = "noiommu", .oval = 3, .help = "Unsafe no-IOMMU mode (no isolation)"},
            },
        .category = FIO_OPT_C_ENGINE,
        .group = FIO_OPT_G_INVALID,
    },
    {.name = NULL},
};

/* ---- controllers shared by the process's jobs ---- */

struct ctrl_entry {
    struct ctrl_entry *next;
    char device[DEVICE_STRING_MAX]; /* the device string as given to the C API */
    int kind;                       /* NVME_DEVICE_* */
    struct nvme_ctrlr *ctrlr;
    struct nvme_ctrlr_opts opts; /* what it was opened with (PCIe and emulator) */
    unsigned refs;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ctrl_entry *registry;
/* One DMA context per kind, so a job's buffers serve all its PCIe (or emulated) controllers. */
static struct nvme_dma_context *vfio_ctx, *emulated_ctx;
/* The nvme_vfio_mode the PCIe controllers of the process were opened with. */
static unsigned vfio_mode_in_use = VFIO_MODE_AUTO;

static void report(struct thread_data *td, int err, const char *what, int rc) {
    log_err("%s: %s: %s (%d): %s\n", ENGINE, what, nvme_strerror(rc), rc,
            nvme_last_error_message());
    td_vmsg(td, err, nvme_strerror(rc), what);
}

/* Opens (or finds) the controller `device` of `kind`; registry_lock held. */
static struct ctrl_entry *ctrl_get_locked(struct thread_data *td, const char *device, int kind) {
    struct nvme_fio_options *o = td->eo;
    struct nvme_ctrlr_opts opts;
    struct ctrl_entry *e;
    int rc;

    nvme_ctrlr_opts_init(&opts);
    opts.shadow_doorbells = o->shadow_doorbells;
    opts.sgl = o->sgl != 0;
    for (e = registry; e; e = e->next)
        if (strcmp(e->device, device) == 0) {
            if (kind != NVME_DEVICE_TCP &&
                (e->opts.shadow_doorbells != opts.shadow_doorbells || e->opts.sgl != opts.sgl)) {
                log_err("%s: `%s` is already open with other nvme_shadow_doorbells/nvme_sgl: "
                        "every job of one controller must ask for the same\n", ENGINE, device);
                td_verror(td, EINVAL, "controller options");
                return NULL;
            }
            e->refs++;
            return e;
        }
    if (kind == NVME_DEVICE_PCIE && o->vfio_mode != VFIO_MODE_AUTO) {
        if (vfio_ctx && o->vfio_mode != vfio_mode_in_use) {
            log_err("%s: nvme_vfio_mode=%s, but the process's PCIe controllers are open with "
                    "nvme_vfio_mode=%s: one mode per process\n",
                    ENGINE, vfio_modes[o->vfio_mode], vfio_modes[vfio_mode_in_use]);
            td_verror(td, EINVAL, "nvme_vfio_mode");
            return NULL;
        }
        /* The driver reads NVME_VFIO_MODE when it opens a device; opens are serialized by
         * registry_lock, and this happens at setup only. */
        if (!vfio_ctx && setenv("NVME_VFIO_MODE", vfio_modes[o->vfio_mode], 1) != 0) {
            td_verror(td, errno, "setenv NVME_VFIO_MODE");
            return NULL;
        }
    }
    e = calloc(1, sizeof(*e));
    if (!e) {
        td_verror(td, ENOMEM, "controller entry");
        return NULL;
    }
    snprintf(e->device, sizeof(e->device), "%s", device);
    e->kind = kind;
    e->opts = opts;
    switch (kind) {
    case NVME_DEVICE_PCIE:
        rc = vfio_ctx ? NVME_OK : nvme_dma_context_create(&vfio_ctx);
        if (rc == NVME_OK) {
            if (o->vfio_mode != VFIO_MODE_AUTO) vfio_mode_in_use = o->vfio_mode;
            rc = nvme_ctrlr_open_in_opts(vfio_ctx, device, &opts, &e->ctrlr);
        }
        break;
    case NVME_DEVICE_EMULATOR:
        rc = emulated_ctx ? NVME_OK : nvme_dma_context_create_emulated(&emulated_ctx);
        if (rc == NVME_OK)
            rc = nvme_ctrlr_open_emulated_in_opts(emulated_ctx, &opts, &e->ctrlr);
        break;
    default:
        rc = nvme_ctrlr_open(device, &e->ctrlr);
        break;
    }
    if (rc != NVME_OK) {
        char what[DEVICE_STRING_MAX + 32];
        snprintf(what, sizeof(what), "opening `%s`", device);
        report(td, rc == NVME_ERR_NO_DEVICE ? ENODEV : EINVAL, what, rc);
        if (kind == NVME_DEVICE_EMULATOR && rc == NVME_ERR_UNSUPPORTED)
            log_err("%s: `sim` needs the engine built with tools/fio-engine/build.sh "
                    "--emulator (nvme-fio-emulator.so)\n", ENGINE);
        free(e);
        return NULL;
    }
    e->refs = 1;
    /* The emulator's data lives as long as its controller: keep it for the process, so that
     * a later job (a read-verify after a write job) finds what an earlier one wrote. */
    if (kind == NVME_DEVICE_EMULATOR) e->refs++;
    e->next = registry;
    registry = e;
    return e;
}

static void ctrl_put(struct ctrl_entry *e) {
    struct ctrl_entry **p;

    pthread_mutex_lock(&registry_lock);
    if (--e->refs == 0) {
        for (p = &registry; *p; p = &(*p)->next)
            if (*p == e) {
                *p = e->next;
                break;
            }
        nvme_ctrlr_close(e->ctrlr);
        free(e);
    }
    pthread_mutex_unlock(&registry_lock);
}

/* ---- filenames ---- */

/* "0000.01.00.0" -> "0000:01:00.0": every '.' but the last becomes ':' in a token made of
 * hex digits and dots only (a PCI address spelled for fio). */
static void pci_dots_to_colons(char *s) {
    char *last = strrchr(s, '.');
    char *p;

    if (!last || strchr(s, ':')) return;
    for (p = s; *p; p++)
        if (*p != '.' && !((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') ||
                           (*p >= 'A' && *p <= 'F')))
            return;
    for (p = s; p < last; p++)
        if (*p == '.') *p = ':';
}

/* fio filename -> device string for the C API, and the namespace (0: not given). */
static int parse_filename(const char *name, char *dev, size_t devlen, uint32_t *nsid) {
    char copy[DEVICE_STRING_MAX];
    char *save = NULL, *tok;
    bool tcp = false;
    size_t used = 0;

    if (strlen(name) >= sizeof(copy)) return -1;
    snprintf(copy, sizeof(copy), "%s", name);
    for (tok = strtok_r(copy, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save))
        if (!strncasecmp(tok, "trtype=tcp", 10) || !strncasecmp(tok, "trtype:tcp", 10))
            tcp = true;
    snprintf(copy, sizeof(copy), "%s", name);
    *nsid = 0;
    dev[0] = '\0';
    for (tok = strtok_r(copy, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        char *eq = strchr(tok, '=');
        char *value;
        int n;

        if (!strncasecmp(tok, "ns=", 3) || !strncasecmp(tok, "ns:", 3)) {
            char *end;
            unsigned long v = strtoul(tok + 3, &end, 0);
            if (*end || v == 0 || v > UINT32_MAX) return -1;
            *nsid = (uint32_t)v;
            continue;
        }
        if (eq && (!strchr(tok, ':') || eq < strchr(tok, ':'))) *eq = ':';
        value = strchr(tok, ':');
        if (!tcp) {
            if (!value)
                pci_dots_to_colons(tok);
            else if (!strncasecmp(tok, "traddr:", 7))
                pci_dots_to_colons(tok + 7);
        }
        n = snprintf(dev + used, devlen - used, "%s%s", used ? " " : "", tok);
        if (n < 0 || (size_t)n >= devlen - used) return -1;
        used += n;
    }
    return 0;
}

/* ---- per job ---- */

struct nvme_fio_file {
    struct ctrl_entry *ctrl;
    unsigned qp;        /* index into the job's queue pairs */
    uint32_t nsid;
    uint32_t block_size;
    uint64_t blocks;
};

struct nvme_fio_job {
    struct thread_data *td;
    struct ctrl_entry **ctrls; /* distinct controllers of the job, one queue pair each */
    struct nvme_qpair **qps;
    bool *held;
    struct nvme_fio_file **files; /* owned here: fio frees its files before cleanup() */
    unsigned nr_files;
    unsigned nr_ctrls;
    struct nvme_buf **bufs; /* one per io_u, carved from one allocation */
    unsigned nr_bufs;
    char *mem;               /* first byte of bufs[0] */
    unsigned long long stride;
    unsigned queued;         /* queued since the last commit */
    struct io_u **events;    /* completions reaped by the current getevents */
    unsigned nr_events, max_events;
};

static void job_free(struct nvme_fio_job *job) {
    unsigned i;

    for (i = 0; job->qps && i < job->nr_ctrls; i++)
        if (job->qps[i]) nvme_qpair_destroy(job->qps[i]);
    for (i = 0; i < job->nr_files; i++) {
        ctrl_put(job->files[i]->ctrl);
        free(job->files[i]);
    }
    free(job->files);
    free(job->ctrls);
    free(job->qps);
    free(job->held);
    free(job->events);
    free(job);
}

/* Resolves every file of the job: parses its name, opens (or shares) its controller, checks
 * its namespace and sets its size. Called from setup (fio's main thread with the default
 * create_serialize=1) or init, whichever comes first. */
static int job_files(struct thread_data *td, struct nvme_fio_job *job) {
    struct fio_file *f;
    unsigned i, j;

    job->ctrls = calloc(td->files_index + 1, sizeof(*job->ctrls));
    job->files = calloc(td->files_index + 1, sizeof(*job->files));
    if (!job->ctrls || !job->files) {
        td_verror(td, ENOMEM, "job files");
        return 1;
    }
    for_each_file(td, f, i) {
        char dev[DEVICE_STRING_MAX], canonical[DEVICE_STRING_MAX];
        struct nvme_fio_file *ff;
        struct nvme_ns_info ns;
        int kind, rc;

        uint32_t nsid;

        if (FILE_ENG_DATA(f)) continue;
        if (parse_filename(f->file_name, dev, sizeof(dev), &nsid) != 0) {
            log_err("%s: filename `%s` is too long or has a bad ns=\n", ENGINE, f->file_name);
            td_verror(td, EINVAL, "filename");
            return 1;
        }
        ff = calloc(1, sizeof(*ff));
        if (!ff) {
            td_verror(td, ENOMEM, "file data");
            return 1;
        }
        ff->nsid = nsid;
        /* The canonical form, so that every name of one controller finds the same entry. */
        kind = nvme_device_parse(dev, canonical, sizeof(canonical));
        if (kind < 0) {
            log_err("%s: filename `%s` names no controller: %s\n"
                    "%s: expected e.g. `trtype=PCIe traddr=0000.01.00.0 ns=1`, `0000.01.00.0`, "
                    "`trtype=TCP adrfam=IPv4 traddr=ADDR trsvcid=4420 subnqn=NQN ns=1` or "
                    "`sim ns=1` ('=' and '.' stand for ':', which fio splits filenames on)\n",
                    ENGINE, f->file_name, nvme_last_error_message(), ENGINE);
            td_verror(td, EINVAL, "filename");
            free(ff);
            return 1;
        }
        pthread_mutex_lock(&registry_lock);
        ff->ctrl = ctrl_get_locked(td, canonical, kind);
        pthread_mutex_unlock(&registry_lock);
        if (!ff->ctrl) {
            free(ff);
            return 1;
        }
        job->files[job->nr_files++] = ff;
        FILE_SET_ENG_DATA(f, ff);
        if (ff->nsid == 0) {
            uint32_t first;
            if (nvme_ctrlr_namespace_ids(ff->ctrl->ctrlr, &first, 1) < 1) {
                log_err("%s: `%s` has no usable namespace\n", ENGINE, f->file_name);
                td_verror(td, ENXIO, "namespace");
                return 1;
            }
            ff->nsid = first;
        }
        rc = nvme_ctrlr_get_ns_info(ff->ctrl->ctrlr, ff->nsid, &ns);
        if (rc != NVME_OK) {
            report(td, ENXIO, "namespace", rc);
            return 1;
        }
        ff->block_size = ns.block_size;
        ff->blocks = ns.blocks;
        f->real_file_size = ns.blocks * (uint64_t)ns.block_size;
        fio_file_set_size_known(f);
        /* fio would quietly do no I/O (or less) for a range past the end: refuse it. */
        if (td->o.start_offset >= f->real_file_size ||
            (td->files_index == 1 && fio_option_is_set(&td->o, size) &&
             td->o.start_offset + td->o.size > f->real_file_size)) {
            log_err("%s: offset=%llu size=%llu is outside `%s`: namespace %u has %llu bytes "
                    "(%llu blocks of %u)\n",
                    ENGINE, (unsigned long long)td->o.start_offset,
                    (unsigned long long)td->o.size, f->file_name, ff->nsid,
                    (unsigned long long)f->real_file_size, (unsigned long long)ns.blocks,
                    ns.block_size);
            td_verror(td, EINVAL, "offset/size outside the namespace");
            return 1;
        }
        for (j = 0; j < job->nr_ctrls && job->ctrls[j] != ff->ctrl; j++)
            ;
        if (j == job->nr_ctrls) job->ctrls[job->nr_ctrls++] = ff->ctrl;
        ff->qp = j;
    }
    /* DMA memory valid on all the job's controllers: a context serves several PCIe (or
     * emulated) controllers; an NVMe/TCP controller's buffers are its own. */
    for (j = 1; j < job->nr_ctrls; j++)
        if (job->ctrls[j]->kind != job->ctrls[0]->kind || job->ctrls[0]->kind == NVME_DEVICE_TCP) {
            log_err("%s: one job may use several PCIe controllers (or namespaces of one "
                    "controller), but not an NVMe/TCP controller together with another one: "
                    "use one job per NVMe/TCP controller\n", ENGINE);
            td_verror(td, EINVAL, "filename");
            return 1;
        }
    return 0;
}

static struct nvme_fio_job *job_get(struct thread_data *td) {
    struct nvme_fio_job *job = td->io_ops_data;

    if (job) return job;
    if (!td->o.use_thread) {
        log_err("%s: thread=1 is required: the driver's controllers live in the fio process, "
                "and its jobs must be threads of it (add --thread or thread=1)\n", ENGINE);
        td_verror(td, EINVAL, "thread=1 required");
        return NULL;
    }
    job = calloc(1, sizeof(*job));
    if (!job) return NULL;
    job->td = td;
    td->io_ops_data = job;
    if (job_files(td, job)) {
        td->io_ops_data = NULL;
        job_free(job);
        return NULL;
    }
    return job;
}

static int nvme_fio_setup(struct thread_data *td) { return job_get(td) ? 0 : 1; }

static int nvme_fio_init(struct thread_data *td) {
    struct nvme_fio_options *o = td->eo;
    struct nvme_fio_job *job = job_get(td);
    unsigned i, ring;

    if (!job) return 1;
    ring = o->ring ? o->ring : td->o.iodepth + 1;
    job->qps = calloc(job->nr_ctrls, sizeof(*job->qps));
    job->held = calloc(job->nr_ctrls, sizeof(*job->held));
    job->max_events = td->o.iodepth;
    job->events = calloc(job->max_events, sizeof(*job->events));
    if (!job->qps || !job->held || !job->events) {
        td_verror(td, ENOMEM, "job");
        return 1;
    }
    for (i = 0; i < job->nr_ctrls; i++) {
        struct nvme_ctrlr_info info;
        unsigned entries = ring;
        int rc = nvme_ctrlr_get_info(job->ctrls[i]->ctrlr, &info);

        /* A deeper iodepth than the ring holds waits for free slots (FIO_Q_BUSY). */
        if (rc == NVME_OK && !o->ring && entries > info.max_queue_entries)
            entries = info.max_queue_entries;
        rc = nvme_qpair_create(job->ctrls[i]->ctrlr, entries, o->timeout_ms, &job->qps[i]);
        if (rc != NVME_OK) {
            report(td, rc == NVME_ERR_NO_QUEUES ? EBUSY : EINVAL, "creating a queue pair", rc);
            return 1;
        }
    }
    return 0;
}

static void nvme_fio_cleanup(struct thread_data *td) {
    struct nvme_fio_job *job = td->io_ops_data;

    if (!job) return;
    td->io_ops_data = NULL;
    job_free(job);
}

/* ---- memory ---- */

static int nvme_fio_iomem_alloc(struct thread_data *td, size_t total) {
    struct nvme_fio_job *job = job_get(td);
    struct nvme_ctrlr *c;
    unsigned i;
    int rc;

    if (!job) return 1;
    c = job->ctrls[0]->ctrlr;
    job->stride = td_max_bs(td);
    job->nr_bufs = td->o.iodepth;
    job->bufs = calloc(job->nr_bufs, sizeof(*job->bufs));
    if (!job->bufs) return 1;
    if (job->ctrls[0]->kind == NVME_DEVICE_PCIE)
        rc = nvme_buf_alloc_in(vfio_ctx, total, &job->bufs[0]);
    else if (job->ctrls[0]->kind == NVME_DEVICE_EMULATOR)
        rc = nvme_buf_alloc_in(emulated_ctx, total, &job->bufs[0]);
    else
        rc = nvme_buf_alloc(c, total, &job->bufs[0]);
    if (rc != NVME_OK) {
        report(td, ENOMEM, "allocating DMA memory for the I/O buffers", rc);
        return 1;
    }
    job->mem = nvme_buf_ptr(job->bufs[0]);
    /* Piece i starts where fio puts io_u i's buffer; the last keeps the slack. */
    for (i = 1; i < job->nr_bufs; i++) {
        rc = nvme_buf_split(job->bufs[i - 1], job->stride, &job->bufs[i]);
        if (rc != NVME_OK) {
            report(td, ENOMEM, "splitting the DMA memory per io_u", rc);
            return 1;
        }
    }
    td->orig_buffer = job->mem;
    return 0;
}

static void nvme_fio_iomem_free(struct thread_data *td) {
    struct nvme_fio_job *job = td->io_ops_data;
    unsigned i;

    if (!job || !job->bufs) return;
    for (i = 0; i < job->nr_bufs; i++) nvme_buf_free(job->bufs[i]);
    free(job->bufs);
    job->bufs = NULL;
    td->orig_buffer = NULL;
}

static int nvme_fio_io_u_init(struct thread_data *td, struct io_u *io_u) {
    io_u->engine_data = td->io_ops_data;
    return 0;
}

/* ---- I/O ---- */

static int errno_of(int rc) {
    switch (rc) {
    case NVME_ERR_INVALID_ARGUMENT:
    case NVME_ERR_LBA_RANGE:
    case NVME_ERR_TOO_LARGE:
        return EINVAL;
    case NVME_ERR_TIMEOUT:
        return ETIMEDOUT;
    case NVME_ERR_UNSUPPORTED:
        return EOPNOTSUPP;
    case NVME_ERR_NO_MEMORY:
        return ENOMEM;
    default:
        return EIO;
    }
}

static void on_complete(void *arg, const struct nvme_cpl_status *st) {
    struct io_u *io_u = arg;
    struct nvme_fio_job *job = io_u->engine_data;

    io_u->error = st->success ? 0 : errno_of(st->error);
    if (!st->success)
        log_err("%s: %s at offset %llu failed: %s (sct %u sc %u)\n", ENGINE,
                io_ddir_name(io_u->ddir), io_u->offset, nvme_strerror(st->error), st->sct,
                st->sc);
    job->events[job->nr_events++] = io_u;
}

static enum fio_q_status nvme_fio_queue(struct thread_data *td, struct io_u *io_u) {
    struct nvme_fio_options *o = td->eo;
    struct nvme_fio_job *job = td->io_ops_data;
    struct nvme_fio_file *ff = FILE_ENG_DATA(io_u->file);
    struct nvme_qpair *qp = job->qps[ff->qp];
    uint64_t lba = io_u->offset / ff->block_size;
    uint32_t blocks = io_u->xfer_buflen / ff->block_size;
    struct nvme_buf *buf = NULL;
    int rc;

    bool data = io_u->ddir == DDIR_READ || io_u->ddir == DDIR_WRITE;

    if (data || io_u->ddir == DDIR_TRIM) {
        if (io_u->offset % ff->block_size || io_u->xfer_buflen % ff->block_size || !blocks) {
            log_err("%s: offset %llu / length %llu is not a whole number of %u-byte blocks\n",
                    ENGINE, io_u->offset, io_u->xfer_buflen, ff->block_size);
            io_u->error = EINVAL;
            return FIO_Q_COMPLETED;
        }
    }
    if (data) {
        size_t off = (char *)io_u->xfer_buf - job->mem;
        unsigned idx = off / job->stride;
        if (!job->bufs || off % job->stride || idx >= job->nr_bufs) {
            log_err("%s: the I/O buffer is not one of the engine's DMA buffers\n", ENGINE);
            io_u->error = EINVAL;
            return FIO_Q_COMPLETED;
        }
        buf = job->bufs[idx];
    }
    if (o->batch && !job->held[ff->qp]) {
        nvme_qpair_hold_submissions(qp);
        job->held[ff->qp] = true;
    }
    switch (io_u->ddir) {
    case DDIR_READ:
        rc = nvme_qpair_submit_read(qp, ff->nsid, lba, blocks, buf, on_complete, io_u);
        break;
    case DDIR_WRITE:
        rc = nvme_qpair_submit_write(qp, ff->nsid, lba, blocks, buf, 0, on_complete, io_u);
        break;
    case DDIR_TRIM: {
        struct nvme_lba_range range = {.lba = lba, .blocks = blocks};
        rc = nvme_qpair_submit_deallocate(qp, ff->nsid, &range, 1, on_complete, io_u);
        break;
    }
    case DDIR_SYNC:
    case DDIR_DATASYNC:
        rc = nvme_qpair_submit_flush(qp, ff->nsid, on_complete, io_u);
        break;
    default:
        io_u->error = EINVAL;
        return FIO_Q_COMPLETED;
    }
    if (rc == NVME_ERR_QUEUE_FULL) return FIO_Q_BUSY;
    if (rc != NVME_OK) {
        log_err("%s: %s of %u blocks at LBA %llu of namespace %u: %s\n", ENGINE,
                io_ddir_name(io_u->ddir), blocks, (unsigned long long)lba, ff->nsid,
                nvme_last_error_message());
        io_u->error = errno_of(rc);
        return FIO_Q_COMPLETED;
    }
    job->queued++;
    return FIO_Q_QUEUED;
}

static int nvme_fio_commit(struct thread_data *td) {
    struct nvme_fio_job *job = td->io_ops_data;
    unsigned i;

    for (i = 0; i < job->nr_ctrls; i++)
        if (job->held[i]) {
            nvme_qpair_release_submissions(job->qps[i]);
            job->held[i] = false;
        }
    if (job->queued) {
        io_u_mark_submit(td, job->queued);
        job->queued = 0;
    }
    return 0;
}

static int nvme_fio_getevents(struct thread_data *td, unsigned int min, unsigned int max,
                              const struct timespec *t) {
    struct nvme_fio_job *job = td->io_ops_data;
    struct timespec start = {0}, now;
    unsigned i;

    nvme_fio_commit(td); /* nothing may stay held while we wait for it */
    job->nr_events = 0;
    if (max > job->max_events) max = job->max_events;
    if (t) clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        for (i = 0; i < job->nr_ctrls && job->nr_events < max; i++) {
            int n = nvme_qpair_poll(job->qps[i], max - job->nr_events);
            if (n < 0) {
                log_err("%s: polling: %s: %s\n", ENGINE, nvme_strerror(n),
                        nvme_last_error_message());
                return -EIO;
            }
        }
        if (job->nr_events >= min) break;
        if (t) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            if ((now.tv_sec - start.tv_sec) * 1000000000LL + (now.tv_nsec - start.tv_nsec) >=
                t->tv_sec * 1000000000LL + t->tv_nsec)
                break;
        }
    }
    return job->nr_events;
}

static struct io_u *nvme_fio_event(struct thread_data *td, int event) {
    struct nvme_fio_job *job = td->io_ops_data;
    return job->events[event];
}

static int nvme_fio_open_file(struct thread_data *td, struct fio_file *f) { return 0; }
static int nvme_fio_close_file(struct thread_data *td, struct fio_file *f) { return 0; }
static int nvme_fio_invalidate(struct thread_data *td, struct fio_file *f) { return 0; }

/* Found by fio with dlsym("ioengine"). */
struct ioengine_ops ioengine = {
    .name = ENGINE,
    .version = FIO_IOOPS_VERSION,
    .flags = FIO_DISKLESSIO | FIO_NODISKUTIL | FIO_NOEXTEND,
    .setup = nvme_fio_setup,
    .init = nvme_fio_init,
    .queue = nvme_fio_queue,
    .commit = nvme_fio_commit,
    .getevents = nvme_fio_getevents,
    .event = nvme_fio_event,
    .cleanup = nvme_fio_cleanup,
    .open_file = nvme_fio_open_file,
    .close_file = nvme_fio_close_file,
    .invalidate = nvme_fio_invalidate,
    .iomem_alloc = nvme_fio_iomem_alloc,
    .iomem_free = nvme_fio_iomem_free,
    .io_u_init = nvme_fio_io_u_init,
    .option_struct_size = sizeof(struct nvme_fio_options),
    .options = options,
};
