#!/usr/bin/env bash
# Boots a Linux guest in QEMU with an emulated NVMe controller and an emulated IOMMU, and runs
# test cases (busybox sh scripts from tests/qemu/cases/) inside it against our userspace driver.
#
#   tests/qemu/run.sh [options] CASE...
#
# Host side: installs missing packages, builds our tools as static binaries, packs an initramfs
# (busybox, kernel modules, our binaries, hugepage-setup.sh, the cases, guest-init.sh as /init),
# boots QEMU with a watchdog and streams the serial console. The guest prints one line per case:
#   @@CASE <name> PASS     or     @@CASE <name> FAIL rc=N
# and "@@DONE ..." at the end. Exit 0 only if every requested case reported PASS.
#
# With --hotplug the controller sits behind a pcie-root-port and QEMU listens on a QMP socket; a
# guest line "@@HOST device_del" makes the host send QMP device_del for it (a removal request
# through pciehp, not a surprise removal: attention button, then power-off). A second, empty
# pcie-root-port (hp1) takes a controller hot-added on "@@HOST device_add hp1" (QMP device_add
# of an nvme with a drive prepared at start) and removed again on "@@HOST device_del hp1".
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
WORK=$HERE/work
CASES_DIR=$HERE/cases
LAYOUTS_FILE=$HERE/layouts

# Our binaries copied into the guest when built.
GUEST_BINS="nvme-identify nvme-hello nvme-dd nvme-perf nvme-hotplug guest-check blkexcl nvme-sqlite nvme-admin nvme-target nvme-ublk"
# Examples of crates/driver/examples copied into the guest (as /bin/<name>) when built.
GUEST_EXAMPLES="two_controllers"
# Kernel modules the guest loads at boot (dependencies are added from modules.dep).
GUEST_MODULES="nvme vfio vfio_iommu_type1 vfio-pci"
# Modules copied but only loaded by cases that need them (in-use.sh mounts ext2 through ext4, which
# needs crc32c, and puts a loop device over a namespace; nvmf-tcp.sh runs the kernel's NVMe/TCP
# target over null_blk and loop, and its NVMe/TCP host for a cross-check).
GUEST_EXTRA_MODULES="ext4 crc32c_generic loop null_blk nvmet nvmet-tcp nvme-tcp"
# Hugepages (2 MiB) reserved in the guest before the cases run (environment may raise it).
GUEST_HUGEPAGES_GIVEN=${GUEST_HUGEPAGES:-}
GUEST_HUGEPAGES=${GUEST_HUGEPAGES:-64}
# Other programs copied into the guest's /usr/local/bin with the shared libraries they load
# (environment, space-separated): "PATH" or "NAME=PATH" (installed as NAME).
GUEST_EXTRA_BINS=${GUEST_EXTRA_BINS:-}
# Always added: e2fsprogs' mke2fs as the guest's mkfs.ext4 (a real ext4 with journal; busybox
# only writes ext2), with its /etc/mke2fs.conf.
MKE2FS=/usr/sbin/mke2fs
# Added when installed on the host (Debian's nvme-cli): nvme-cli as the guest's `nvme`, the
# independent witness of cases/admin.sh (which falls back to sysfs without it).
NVME_CLI=${NVME_CLI:-/usr/sbin/nvme}
BLKZONE=${BLKZONE:-/usr/sbin/blkzone}
# Added for cases/sqlite-ext.sh: Debian's sqlite3 shell (installed when missing) with the SQLite
# loadable extension (crates/sqlite-ext, target/release/libnvme_sqlite.so), and, when the host's
# python3 has a sqlite3 module that loads extensions, that python3 with the few standard-library
# files `python3 -S -c 'import sqlite3'` reads.
SQLITE3_SHELL=${SQLITE3_SHELL:-/usr/bin/sqlite3}
GUEST_PYTHON=${GUEST_PYTHON:-/usr/bin/python3}
# QEMU's emulated NVMe controller (PCI vendor:device), how the guest finds it.
QEMU_NVME_ID=1b36:0010
# The NQN of the --subsys subsystem.
SUBSYS_NQN=nqn.2026-01.test:subsys0
# isa-debug-exit port: the guest writes one byte there, QEMU exits with (byte << 1) | 1.
DEBUG_EXIT_PORT=0xf4
RUST_TARGET=x86_64-unknown-linux-gnu

NS_SPECS=()
NS2_SPECS=()
MDTS=7
QPAIRS=8
MEM=2G
SMP=2
APPEND=""
TIMEOUT=600
CASE_TIMEOUT=300
KEEP=0
HOTPLUG=0
# QEMU listens on a QMP socket and the host carries out the guest's "@@HOST" requests (set by
# --hotplug and by namespaces with ':throttle').
QMP=0
# --host-load N[:NICE]: the host CPU hog the guest switches on and off ("@@HOST load on|off");
# HOST_LOAD_N busy-loop processes at nice HOST_LOAD_NICE (empty: no hog offered).
HOST_LOAD_N=""
HOST_LOAD_NICE=0
# Controller Memory Buffer size in MiB (--cmb; empty: none).
CMB_MB=""
SAME_GROUP=0
# --subsys: both controllers in one NVMe subsystem (QEMU nvme-subsys), namespaces shared by
# default, nsid-wide; the second controller has no namespaces of its own.
SUBSYS=0
LOG=""
BUILD=1
CASES=()
GUEST_ENV=()
TRACE_PATTERNS=()
TRACE_LOG=$ROOT/target/qemu-trace.log
LAYOUT=""
VFIO_MODE=""
# --kill-after: acknowledged commits to wait for, the seed and the largest delay after them.
KILL_AFTER=""
KILL_SEED=1
KILL_MAXMS=1000

usage() {
    cat <<EOF
Usage: tests/qemu/run.sh [options] CASE...

CASE is a script in tests/qemu/cases/ (name, with or without .sh) or a path to one.

Options:
  --layout NAME             a named controller layout from tests/qemu/layouts: expands in place to
                            its --ns/--mdts/--qpairs (and --guest-env) options; options given
                            after it override --mdts/--qpairs and add namespaces
  --list-layouts            print the layouts (name, options, description) and exit
  --ns LBASIZE:SIZE[:null][:META]
                            add a namespace (repeatable; SIZE like 64M; ':null' = null-co backend
                            that reads zeroes and drops writes). Default: 512:64M and 4096:64M.
                            META: metadata options of QEMU's nvme-ns, comma-separated:
                            ms=BYTES (metadata per block), mset=1 (extended LBA, metadata inline
                            after each block) or mset=0 (separate buffer), pi=0..3, pil=0|1, pif=0|2 (16-bit or 64-bit guard);
                            e.g. --ns 512:16M:ms=8,mset=1. Also nsid=N (default: the position
                            of the --ns option, 1, 2, ...), e.g. --ns 4096:32M:nsid=9, and the
                            Copy limits mssrl=BLOCKS, mcl=BLOCKS, msrc=N (0-based; QEMU's
                            defaults 128, 128, 127), e.g. --ns 512:16M:mssrl=16,mcl=64,msrc=7
                            With --subsys: detached=1 (attached to no controller at boot) and
                            shared=0|1 (QEMU's default 1: attached to both controllers)
                            A zoned namespace: zoned=true with zoned.zone_size=SIZE,
                            zoned.zone_capacity=SIZE, zoned.max_open=N, zoned.max_active=N, e.g.
                            --ns 4096:16M:zoned=true,zoned.zone_size=1M,zoned.max_open=4
                            Media errors (file backend only; blkdebug wraps the image):
                            blkdebug=FILE: a QEMU blkdebug config ([inject-error] sections);
                            bad=rS,wS,...: EIO (errno 5, every time) on reads (r) or writes (w)
                            touching 512-byte sector S; e.g. --ns 4096:16M:bad=r2048,w4096
                            image=PATH: the backing file is PATH (created at SIZE if missing,
                            reused as it is otherwise, never deleted: a second boot sees what the
                            first left; PATH without ':' or ','), not a fresh one in the work dir
                            write-cache=on|off: the namespace's volatile write cache (QEMU's
                            nvme-ns write-cache; on: a write completes once it is in QEMU's
                            backend, i.e. the host page cache, and Flush is fdatasync)
                            throttle: the image behind a QEMU throttle filter (group tg<K>, K =
                            the --ns position), unlimited until the guest prints
                            "@@HOST throttle K IOPS" (0 = unlimited again; cases/stalled-device.sh)
  --ctrl2-ns LBASIZE:SIZE[:...]
                            add a namespace to a second NVMe controller (nvme1, same MDTS and
                            queue pairs; repeatable, same syntax as --ns). Without it there is
                            one controller. The guest exports NVME2_BDF and keeps the second
                            controller bound to vfio-pci, off the kernel driver, between cases
  --subsys                  two controllers (nvme0, nvme1: CNTLID 0 and 1) in one QEMU nvme-subsys
                            (nqn $SUBSYS_NQN); the --ns namespaces belong to the subsystem,
                            shared by both unless shared=0 or detached=1. The guest exports
                            NVME2_BDF and NVME_SUBSYS=1 (cases/subsys.sh); not with --ctrl2-ns
  --ctrl2-same-group        put both controllers behind one conventional PCI bridge (pci-bridge,
                            shpc=off): the IOMMU sees the bridge's requester id for both, so they
                            share one IOMMU group (needs --ctrl2-ns)
  --vfio-mode MODE          type1|iommufd|noiommu: boot the harness's own Linux 6.12 guest kernel
                            (tests/qemu/guest-kernel.sh builds it once and caches it under
                            target/guest-kernel/) and make the cases' tools use this VFIO mode
                            (NVME_VFIO_MODE in the guest; EXPECT_VFIO_MODE for vfio-mode.sh).
                            noiommu: no emulated IOMMU, hugepages reserved at boot, and
                            hugepage-setup.sh enables vfio's unsafe no-IOMMU mode
  --mdts N                  controller MDTS (default $MDTS: 2^N * 4 KiB)
  --qpairs N                controller max_ioqpairs (default $QPAIRS)
  --cmb MB                  give the controller a Controller Memory Buffer of MB MiB (QEMU
                            cmb_size_mb; BAR 2); the driver leaves it unused
  --mem SIZE                guest memory (default $MEM)
  --smp N                   guest CPUs (default $SMP)
  --append "ARGS"           extra kernel command line, e.g. nvme.poll_queues=1
  --guest-env NAME=VALUE    export NAME=VALUE to the cases in the guest (repeatable; a case
                            knob, e.g. INTEGRITY_SIZES=512,4096)
  --timeout SECONDS         overall watchdog (default $TIMEOUT)
  --case-timeout SECONDS    per-case limit inside the guest (default $CASE_TIMEOUT)
  --hotplug                 controller behind a pcie-root-port, QMP socket in the work dir; the
                            guest printing "@@HOST device_del" hot-unplugs it (cases/hot-unplug.sh);
                            a free root port hp1 for "@@HOST device_add hp1" / "@@HOST device_del
                            hp1" (a second controller with a 64 MiB drive; cases/hotplug.sh)
  --host-load N[:NICE]      offer the guest a fixed background load on the host: on "@@HOST load
                            on" the host starts N busy-loop processes (sh -c 'while :; do :;
                            done') at nice NICE (absolute, default 0), on "@@HOST load off" it
                            stops them, and they stop when run.sh exits in any way. Each switch
                            is logged with the host's /proc/loadavg as a "@@HOSTLOAD on|off ..."
                            line, appended to the --log file (cases/bench.sh with BENCH_LOAD)
  --kill-after N[:SEED[:MAXMS]]
                            SIGKILL QEMU (the whole machine model, no shutdown, no flush) at a
                            random moment 0..MAXMS ms (default 1000; drawn from SEED, default 1)
                            after the guest's console showed N lines 'acked K' (nvme-sqlite
                            --commits). run.sh then passes only if it killed QEMU so (the guest
                            did not finish first) and no case failed before; the last 'acked K'
                            in the --log file is the last commit acknowledged before the kill
                            (tests/sqlite-qkill.sh)
  --keep                    keep tests/qemu/work/ afterwards
  --log FILE                also write the serial log to FILE
  --trace PATTERN           enable QEMU trace events matching PATTERN (repeatable; QEMU's
                            -trace enable=PATTERN, e.g. 'pci_nvme_mmio_doorbell_*'), written
                            with microsecond timestamps and thread ids (-msg timestamp=on) to
                            the --trace-log file; tests/qemu/trace-per-io.py reduces it
  --trace-log FILE          where --trace writes (default target/qemu-trace.log)
  --no-build                do not run cargo; use binaries from the last build
  -h, --help                this text

Environment: QEMU_ACCEL=kvm|tcg (default: kvm if the CPU has vmx/svm and /dev/kvm is usable),
KERNEL=/boot/vmlinuz-VER (default: newest with modules in /lib/modules; with --vfio-mode: the
harness's own kernel; a KERNEL given then must have everything built in), QEMU=qemu-system-x86_64,
GUEST_HUGEPAGES=N (2 MiB pages reserved at boot, default 64), GUEST_PVH=0 (boot a bzImage as it
is, not its unpacked ELF through QEMU's PVH entry; see boot_kernel),
GUEST_EXTRA_BINS="PATH|NAME=PATH ..." (other programs for the guest's /usr/local/bin, e.g. peer
benchmarks; a dynamic one comes with its shared libraries and loader, as ldd lists them).
EOF
}

die() {
    echo "run.sh: error: $*" >&2
    exit 2
}
note() { echo "run.sh: $*" >&2; }

# Prints the options of layout $1 (the middle field of its line in $LAYOUTS_FILE).
layout_options() {
    awk -F'|' -v want="$1" '/^[[:space:]]*(#|$)/ { next }
        { n = $1; gsub(/[[:space:]]/, "", n); if (n == want) { print $2; found = 1; exit } }
        END { exit !found }' "$LAYOUTS_FILE"
}

list_layouts() {
    awk -F'|' '/^[[:space:]]*(#|$)/ { next }
        { n = $1; gsub(/[[:space:]]/, "", n); o = $2; d = $3
          gsub(/^[[:space:]]+|[[:space:]]+$/, "", o); gsub(/^[[:space:]]+|[[:space:]]+$/, "", d)
          printf "%-11s %s\n            %s\n", n, d, o }' "$LAYOUTS_FILE"
}

while [ $# -gt 0 ]; do
    case "$1" in
    --layout)
        [ -z "$LAYOUT" ] || die "give --layout once"
        LAYOUT=${2:?--layout needs a NAME (see --list-layouts)}
        opts=$(layout_options "$LAYOUT") || die "no layout '$LAYOUT' in $LAYOUTS_FILE (see --list-layouts)"
        shift 2
        # shellcheck disable=SC2086 # the layout's options are blank-separated words
        set -- $opts "$@"
        ;;
    --list-layouts) list_layouts; exit 0 ;;
    --guest-env)
        [[ "${2:-}" =~ ^[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9_.,:/+-]*$ ]] ||
            die "--guest-env needs NAME=VALUE (VALUE without blanks or quotes), not '${2:-}'"
        GUEST_ENV+=("$2"); shift 2 ;;
    --ns) NS_SPECS+=("${2:?--ns needs LBASIZE:SIZE[:null][:ms=N,mset=0|1][:blkdebug=FILE|:bad=rS,wS]}"); shift 2 ;;
    --ctrl2-ns) NS2_SPECS+=("${2:?--ctrl2-ns needs LBASIZE:SIZE[:...] like --ns}"); shift 2 ;;
    --vfio-mode)
        case "${2:-}" in type1 | iommufd | noiommu) VFIO_MODE=$2 ;;
        *) die "--vfio-mode needs type1, iommufd or noiommu, not '${2:-}'" ;;
        esac
        shift 2 ;;
    --mdts) MDTS=${2:?}; shift 2 ;;
    --qpairs) QPAIRS=${2:?}; shift 2 ;;
    --cmb) [[ "${2:-}" =~ ^[0-9]+$ ]] || die "--cmb needs a size in MiB"; CMB_MB=$2; shift 2 ;;
    --mem) MEM=${2:?}; shift 2 ;;
    --smp) SMP=${2:?}; shift 2 ;;
    --append) APPEND=${2?}; shift 2 ;;
    --timeout) TIMEOUT=${2:?}; shift 2 ;;
    --case-timeout) CASE_TIMEOUT=${2:?}; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --kill-after)
        [[ "${2:-}" =~ ^([1-9][0-9]*)(:([0-9]+)(:([0-9]+))?)?$ ]] ||
            die "--kill-after needs N[:SEED[:MAXMS]] (e.g. 40:7:500), not '${2:-}'"
        KILL_AFTER=${BASH_REMATCH[1]}
        KILL_SEED=${BASH_REMATCH[3]:-1}
        KILL_MAXMS=${BASH_REMATCH[5]:-1000}
        shift 2 ;;
    --hotplug) HOTPLUG=1; shift ;;
    --host-load)
        [[ "${2:-}" =~ ^([1-9][0-9]*)(:(-?[0-9]+))?$ ]] ||
            die "--host-load needs N[:NICE] (N busy-loop processes, NICE -20..19, e.g. 2:0), not '${2:-}'"
        HOST_LOAD_N=${BASH_REMATCH[1]}
        HOST_LOAD_NICE=${BASH_REMATCH[3]:-0}
        [ "$HOST_LOAD_NICE" -ge -20 ] && [ "$HOST_LOAD_NICE" -le 19 ] ||
            die "--host-load $2: NICE must be -20..19"
        shift 2 ;;
    --ctrl2-same-group) SAME_GROUP=1; shift ;;
    --subsys) SUBSYS=1; shift ;;
    --log) LOG=${2:?}; shift 2 ;;
    --trace) TRACE_PATTERNS+=("${2:?--trace needs a QEMU trace event PATTERN}"); shift 2 ;;
    --trace-log) TRACE_LOG=${2:?}; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) usage >&2; die "unknown option $1" ;;
    *) CASES+=("$1"); shift ;;
    esac
done
[ ${#CASES[@]} -gt 0 ] || { usage >&2; die "no CASE given"; }
[ ${#NS_SPECS[@]} -gt 0 ] || NS_SPECS=(512:64M 4096:64M)

# Resolve cases to files now, so a typo fails before the slow steps.
CASE_FILES=()
for c in "${CASES[@]}"; do
    if [ -f "$c" ]; then
        CASE_FILES+=("$(cd "$(dirname "$c")" && pwd)/$(basename "$c")")
    elif [ -f "$CASES_DIR/$c" ]; then
        CASE_FILES+=("$CASES_DIR/$c")
    elif [ -f "$CASES_DIR/$c.sh" ]; then
        CASE_FILES+=("$CASES_DIR/$c.sh")
    else
        die "no case '$c' (looked for it as a path and in $CASES_DIR)"
    fi
done

# ---------------------------------------------------------------- packages
# Installs the Debian packages for whatever is missing; does nothing when all are present.
ensure_packages() {
    local missing=()
    command -v "${QEMU:-qemu-system-x86_64}" >/dev/null || missing+=(qemu-system-x86)
    command -v depmod >/dev/null || [ -x /sbin/depmod ] || missing+=(kmod)
    command -v cpio >/dev/null || missing+=(cpio)
    [ -x "$MKE2FS" ] || missing+=(e2fsprogs)
    [ -x "$SQLITE3_SHELL" ] || missing+=(sqlite3)
    if ! busybox_is_static; then missing+=(busybox-static); fi
    if [ -z "${KERNEL:-}" ] && [ -z "$(find_kernel)" ]; then missing+=(linux-image-amd64); fi
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" != 0 ]; then
        die "missing packages: ${missing[*]}; install them (sudo apt-get install -y ${missing[*]}) or run as root"
    fi
    command -v apt-get >/dev/null || die "missing packages: ${missing[*]}, and no apt-get to install them"
    note "installing ${missing[*]}"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
}

busybox_is_static() {
    local bb
    bb=$(command -v busybox 2>/dev/null) || return 1
    # A static binary has no program interpreter (PT_INTERP); ldd says "not a dynamic executable".
    ! LC_ALL=C ldd "$bb" >/dev/null 2>&1
}

# Newest /boot/vmlinuz-VER that has /lib/modules/VER.
find_kernel() {
    local k v
    # shellcheck disable=SC2012 # kernel image names are plain; sort -V orders the versions
    for k in $(ls -1v /boot/vmlinuz-* 2>/dev/null | sort -rV); do
        v=${k#/boot/vmlinuz-}
        if [ -d "/lib/modules/$v" ]; then
            echo "$k"
            return 0
        fi
    done
}

# ---------------------------------------------------------------- build
build_guest_bins() {
    local target_dir=$ROOT/target/guest
    local out=$target_dir/$RUST_TARGET/release
    if [ "$BUILD" = 1 ]; then
        note "building static guest binaries (target/guest)"
        # +crt-static with an explicit --target links the binaries statically while build scripts
        # and proc macros (built for the host) stay dynamic.
        export RUSTFLAGS='-C target-feature=+crt-static'
        export CARGO_TARGET_DIR=$target_dir
        if ! (cd "$ROOT" && cargo build --release --target "$RUST_TARGET" --bins); then
            note "the workspace build failed; building each guest binary on its own"
            local b
            for b in $GUEST_BINS; do
                (cd "$ROOT" && cargo build --release --target "$RUST_TARGET" --bin "$b") ||
                    note "note: $b does not build yet; the guest will not have it"
            done
        fi
        local e
        for e in $GUEST_EXAMPLES; do
            (cd "$ROOT" && cargo build --release --target "$RUST_TARGET" -p nvme-driver --example "$e") ||
                note "note: example $e does not build; the guest will not have it"
        done
        unset RUSTFLAGS CARGO_TARGET_DIR
        # The SQLite extension is a shared object the guest's (dynamic) sqlite3 and python3 load:
        # a normal release build (target/release), as tools/fio-engine/build.sh does.
        (cd "$ROOT" && cargo build --release -p nvme-sqlite-ext) ||
            note "note: the SQLite extension does not build; the guest will not have it"
        # The C API examples (examples/c), static, against the C library built for the guest.
        "$ROOT/tests/qemu/build-c-guest.sh" "$target_dir/c-examples" "$RUST_TARGET" ||
            note "note: the C examples do not build; the guest will not have them"
    fi
    mkdir -p "$INITRD_ROOT/bin"
    local b copied=""
    for b in $GUEST_BINS; do
        if [ -x "$out/$b" ]; then
            # Debug info (profile.release debug=1) only bloats the initramfs.
            strip -o "$INITRD_ROOT/bin/$b" "$out/$b" 2>/dev/null || cp "$out/$b" "$INITRD_ROOT/bin/$b"
            copied="$copied $b"
        else
            note "note: $b is not built yet; skipped"
        fi
    done
    for b in $GUEST_EXAMPLES; do
        if [ -x "$out/examples/$b" ]; then
            strip -o "$INITRD_ROOT/bin/$b" "$out/examples/$b" 2>/dev/null || cp "$out/examples/$b" "$INITRD_ROOT/bin/$b"
            copied="$copied $b"
        else
            note "note: example $b is not built yet; skipped"
        fi
    done
    for b in hello_c qd_loop zones_c; do
        if [ -x "$target_dir/c-examples/$b" ]; then
            strip -o "$INITRD_ROOT/bin/$b" "$target_dir/c-examples/$b" 2>/dev/null ||
                cp "$target_dir/c-examples/$b" "$INITRD_ROOT/bin/$b"
            copied="$copied $b"
        else
            note "note: C example $b is not built yet; skipped"
        fi
    done
    note "guest binaries:${copied:- none}"
}

# Copies GUEST_EXTRA_BINS into the guest's /usr/local/bin. A dynamically linked program brings
# its program interpreter (at the same path) and the libraries ldd resolves on this host (into
# /usr/local/lib, found through an ld.so.cache that ldconfig builds for the initramfs).
# The sqlite3 shell and the extension (and python3 with its sqlite3 module) for
# cases/sqlite-ext.sh, appended to GUEST_EXTRA_BINS; the Python files at their host paths.
add_sqlite_programs() {
    local ext=$ROOT/target/release/libnvme_sqlite.so f n=0
    { [ -x "$SQLITE3_SHELL" ] && [ -f "$ext" ]; } || return 0
    GUEST_EXTRA_BINS="$GUEST_EXTRA_BINS sqlite3=$SQLITE3_SHELL libnvme_sqlite.so=$ext"
    "$GUEST_PYTHON" -S -c 'import sqlite3; sqlite3.connect(":memory:").enable_load_extension(True)' \
        2>/dev/null || return 0
    GUEST_EXTRA_BINS="$GUEST_EXTRA_BINS python3=$GUEST_PYTHON"
    # The modules `import sqlite3` loads (its _sqlite3 extension module needs libsqlite3, which the
    # shell brings), plus os (Python's landmark for its library directory) and the codecs.
    for f in $("$GUEST_PYTHON" -S -c 'import sys, os, sqlite3, encodings.ascii, encodings.latin_1
print("\n".join(m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)))'); do
        mkdir -p "$INITRD_ROOT$(dirname "$f")"
        cp -L "$f" "$INITRD_ROOT$f"
        n=$((n + 1))
    done
    note "python3 for the guest: $n standard-library files"
}

add_extra_bins() {
    local r=$INITRD_ROOT spec name src lib libs=0 copied=""
    add_sqlite_programs
    GUEST_EXTRA_BINS="$GUEST_EXTRA_BINS mkfs.ext4=$MKE2FS"
    [ ! -x "$NVME_CLI" ] || GUEST_EXTRA_BINS="$GUEST_EXTRA_BINS nvme=$NVME_CLI"
    # util-linux's blkzone: the kernel's view of a zoned namespace (cases/zns.sh).
    [ ! -x "$BLKZONE" ] || GUEST_EXTRA_BINS="$GUEST_EXTRA_BINS blkzone=$BLKZONE"
    mkdir -p "$r/usr/local/bin" "$r/usr/local/lib"
    for spec in $GUEST_EXTRA_BINS; do
        case "$spec" in
        *=*) name=${spec%%=*}; src=${spec#*=} ;;
        *) name=$(basename "$spec"); src=$spec ;;
        esac
        { [ -f "$src" ] && [ -x "$src" ]; } || die "GUEST_EXTRA_BINS: '$src' is not an executable file"
        strip -o "$r/usr/local/bin/$name" "$src" 2>/dev/null || cp "$src" "$r/usr/local/bin/$name"
        chmod +x "$r/usr/local/bin/$name"
        copied="$copied $name"
        LC_ALL=C ldd "$src" >/dev/null 2>&1 || continue # static
        # ldd lines: "libx.so.1 => /path/libx.so.1 (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)".
        while read -r lib; do
            case "$lib" in
            "not found") die "GUEST_EXTRA_BINS: $src needs a library ldd cannot find ('ldd $src')" ;;
            */ld-linux*.so* | */ld64.so*)
                mkdir -p "$r$(dirname "$lib")"
                cp -L "$lib" "$r$lib"
                ;;
            */libc.so.*)
                cp -L "$lib" "$r/usr/local/lib/$(basename "$lib")"
                libs=$((libs + 1))
                # glibc loads libgcc_s at run time (pthread_cancel, unwinding); ldd does not list it.
                if [ -f "$(dirname "$lib")/libgcc_s.so.1" ]; then
                    cp -L "$(dirname "$lib")/libgcc_s.so.1" "$r/usr/local/lib/"
                    libs=$((libs + 1))
                fi
                ;;
            /*) cp -L "$lib" "$r/usr/local/lib/$(basename "$lib")"; libs=$((libs + 1)) ;;
            esac
        done < <(LC_ALL=C ldd "$src" | awk '$2 == "=>" { print ($3 == "not" ? "not found" : $3); next }
                                          $1 ~ /^\// { print $1 }')
    done
    case " $copied " in
    *" mkfs.ext4 "* | *" mke2fs "*) [ ! -f /etc/mke2fs.conf ] || cp /etc/mke2fs.conf "$r/etc/" ;;
    esac
    if [ "$libs" -gt 0 ]; then
        echo /usr/local/lib >"$r/etc/ld.so.conf"
        ldconfig -r "$r" || die "ldconfig -r $r failed"
    fi
    note "extra guest binaries:$copied ($libs shared libraries)"
}

# ---------------------------------------------------------------- initramfs
# Prints the modules.dep path of a module name (dashes and underscores are equivalent).
module_path() {
    local want=${1//-/_}
    awk -F: -v want="$want" '{
        n = $1; sub(/.*\//, "", n); sub(/\.ko.*$/, "", n); gsub(/-/, "_", n);
        if (n == want) { print $1; exit }
    }' "$MODDIR/modules.dep"
}

# Prints a module's path and all its dependencies' paths (modules.dep lists them transitively).
module_with_deps() {
    local p
    p=$(module_path "$1")
    if [ -z "$p" ]; then
        if grep -q "/${1//-/_}.ko\|/$1.ko" "$MODDIR/modules.builtin" 2>/dev/null; then
            return 0 # built into the kernel
        fi
        die "kernel module $1 not found in $MODDIR/modules.dep"
    fi
    awk -F: -v p="$p" '$1 == p { print $1; n = split($2, d, " "); for (i = 1; i <= n; i++) print d[i] }' \
        "$MODDIR/modules.dep"
}

build_initramfs() {
    local r=$INITRD_ROOT
    mkdir -p "$r"/{bin,sbin,etc,proc,sys,dev,tmp,run,mnt,tests/cases} "$r/lib/modules/$KVER"

    # busybox and one symlink per applet (never one named busybox: that would loop, error -40).
    cp "$(command -v busybox)" "$r/bin/busybox"
    local a
    for a in $("$r/bin/busybox" --list); do
        [ "$a" = busybox ] && continue
        ln -sf busybox "$r/bin/$a"
    done
    # The kernel runs /sbin/modprobe to load modules on demand (e.g. a filesystem on mount).
    ln -sf ../bin/busybox "$r/sbin/modprobe"

    # Kernel modules with their dependencies, then depmod over the new tree. The harness's own
    # kernel (--vfio-mode) has everything built in and no modules.
    local m p
    [ -z "$VFIO_MODE" ] || GUEST_MODULES="" GUEST_EXTRA_MODULES=""
    for m in $GUEST_MODULES $GUEST_EXTRA_MODULES; do
        for p in $(module_with_deps "$m"); do
            mkdir -p "$r/lib/modules/$KVER/$(dirname "$p")"
            cp "$MODDIR/$p" "$r/lib/modules/$KVER/$p"
        done
    done
    for f in modules.order modules.builtin modules.builtin.modinfo; do
        [ -f "$MODDIR/$f" ] && cp "$MODDIR/$f" "$r/lib/modules/$KVER/"
    done
    [ -n "$VFIO_MODE" ] || depmod -b "$r" "$KVER"
    echo "$GUEST_MODULES" >"$r/etc/modules"

    cp "$ROOT/hugepage-setup.sh" "$r/bin/hugepage-setup.sh"
    chmod +x "$r/bin/hugepage-setup.sh"
    cp "$HERE/lib.sh" "$r/tests/lib.sh"
    cp "$HERE/guest-init.sh" "$r/init"
    chmod +x "$r/init"

    local names=() f
    for f in "${CASE_FILES[@]}"; do
        cp "$f" "$r/tests/cases/"
        names+=("$(basename "$f")")
    done

    # What the guest needs to know about the run; sourced by /init.
    {
        echo "CASES='${names[*]}'"
        echo "CASE_TIMEOUT=$CASE_TIMEOUT"
        echo "GUEST_HUGEPAGES=$GUEST_HUGEPAGES"
        echo "QEMU_NVME_ID=$QEMU_NVME_ID"
        echo "DEBUG_EXIT_PORT=$((DEBUG_EXIT_PORT))"
        echo "NVME_NS_COUNT=$NS_ATTACHED_COUNT"
        echo "NVME_NS_LAYOUT='$NS_LAYOUT'"
        echo "NVME_NS_DETACHED='$NS_DETACHED'"
        echo "NVME_SUBSYS=$SUBSYS"
        echo "NVME_SUBSYS_NQN=$SUBSYS_NQN"
        if [ "$SUBSYS" = 1 ]; then
            # The second controller of the subsystem sees the same shared namespaces.
            echo "NVME2_NS_COUNT=$NS_ATTACHED_COUNT"
        else
            echo "NVME2_NS_COUNT=${#NS2_SPECS[@]}"
        fi
        echo "NVME2_NS_LAYOUT='$NS2_LAYOUT'"
        echo "NVME_MDTS=$MDTS"
        echo "NVME_QPAIRS=$QPAIRS"
        echo "NVME_LAYOUT=${LAYOUT:-custom}"
        if [ -n "$VFIO_MODE" ]; then
            echo "export NVME_VFIO_MODE=$VFIO_MODE EXPECT_VFIO_MODE=$VFIO_MODE"
            # Every no-IOMMU DMA allocation is whole hugepages (see crates/vfio/src/noiommu.rs).
            [ "$VFIO_MODE" != noiommu ] || echo "export CASE_HUGEMEM=$((GUEST_HUGEPAGES * 2))"
        fi
        local e
        for e in ${GUEST_ENV[@]+"${GUEST_ENV[@]}"}; do
            echo "export ${e%%=*}='${e#*=}'"
        done
    } >"$r/etc/harness.conf"

    add_extra_bins
    (cd "$r" && find . | cpio -o -H newc --quiet) >"$WORK/initramfs.cpio"
}

# Converts 64M / 1G / 4096 to bytes.
size_bytes() {
    local s=$1 n unit
    n=${s%[KkMmGg]}
    unit=${s#"$n"}
    [[ "$n" =~ ^[0-9]+$ ]] || die "bad size '$s' (want e.g. 64M)"
    case "$unit" in
    "") echo "$n" ;;
    [Kk]) echo $((n << 10)) ;;
    [Mm]) echo $((n << 20)) ;;
    [Gg]) echo $((n << 30)) ;;
    esac
}

# blkdebug_config SPEC FIELD OUT: sets BLKDEBUG_CFG to the path of the blkdebug config for FIELD (blkdebug=FILE:
# that file; bad=rS,wS,...: one written to OUT, an EIO injected on every read (r) or write (w)
# request touching 512-byte sector S).
blkdebug_config() {
    local spec=$1 field=$2 out=$3 item event
    case "$field" in
    blkdebug=*)
        local cfg=${field#blkdebug=}
        [ -f "$cfg" ] || die "--ns $spec: blkdebug config '$cfg' does not exist"
        cfg=$(realpath "$cfg")
        BLKDEBUG_CFG=$cfg
        return
        ;;
    esac
    local items=()
    IFS=, read -r -a items <<<"${field#bad=}"
    [ "${#items[@]}" -gt 0 ] || die "--ns $spec: bad= needs rSECTOR or wSECTOR, comma-separated"
    : >"$out"
    for item in "${items[@]}"; do
        case "$item" in
        r[0-9]*) event=read_aio ;;
        w[0-9]*) event=write_aio ;;
        *) event="" ;;
        esac
        [[ -n "$event" && "${item:1}" =~ ^[0-9]+$ ]] ||
            die "--ns $spec: '$item' is not rSECTOR or wSECTOR (512-byte sectors)"
        printf '[inject-error]\nevent = "%s"\nerrno = "5"\nsector = "%s"\nonce = "off"\n\n' \
            "$event" "${item:1}" >>"$out"
    done
    BLKDEBUG_CFG=$out
}

# build_namespaces BUS SPEC...: appends the -drive/-device arguments of the namespaces SPEC...
# on controller BUS (nvme0, nvme1) to QEMU_NS_ARGS and sets BUILT_LAYOUT ("nsid:lba:bytes ..."
# for the guest; a namespace given detached=1 is left out of it, as the guest does not see it at
# boot, and listed in BUILT_DETACHED instead).
build_namespaces() {
    local bus=$1
    shift
    local pfx=""
    [ "$bus" = nvme0 ] || pfx=$bus-
    BUILT_LAYOUT=""
    BUILT_DETACHED=""
    local k=0 spec lba size kind bytes meta opt field debug throttle fields nsid detached used=" "
    for spec in "$@"; do
        k=$((k + 1))
        IFS=: read -r -a fields <<<"$spec"
        lba=${fields[0]:-}
        size=${fields[1]:-}
        # After SIZE, in any order: 'null', blkdebug=FILE or bad=..., metadata options.
        kind="" meta="" debug="" throttle="" detached=0 image=""
        for field in "${fields[@]:2}"; do
            case "$field" in
            null) kind=null ;;
            throttle) throttle=1 ;;
            image=?*)
                image=${field#image=}
                [[ "$image" != *,* ]] || die "--ns $spec: the image path must not contain ':' or ','"
                ;;
            blkdebug=* | bad=*)
                [ -z "$debug" ] || die "--ns $spec: give blkdebug=FILE or bad=... once"
                debug=$field
                ;;
            *=*)
                [ -z "$meta" ] || die "--ns $spec: give the metadata options once"
                meta=$field
                ;;
            *) die "--ns $spec: '$field' is not 'null', 'throttle', metadata options (ms=8,mset=1), blkdebug=FILE, bad=rS,wS or image=PATH" ;;
            esac
        done
        nsid=$k
        if [ -n "$meta" ]; then
            local opts=()
            IFS=, read -r -a opts <<<"$meta"
            meta=""
            for opt in "${opts[@]}"; do
                if [[ "$opt" =~ ^nsid=[0-9]+$ ]]; then
                    nsid=${opt#nsid=}
                    { [ "$nsid" -ge 1 ] && [ "$nsid" -le 256 ]; } || die "--ns $spec: nsid must be 1..256"
                    continue
                fi
                if [[ "$opt" =~ ^(detached|shared)=[01]$ ]]; then
                    [ "$SUBSYS" = 1 ] || die "--ns $spec: '$opt' needs --subsys (a namespace of an NVMe subsystem)"
                    # QEMU's booleans are on/off.
                    local on=off
                    [ "${opt#*=}" = 0 ] || on=on
                    [ "$opt" != detached=1 ] || detached=1
                    meta="$meta,${opt%%=*}=$on"
                    continue
                fi
                [[ "$opt" =~ ^(ms|mset|pi|pil|pif|mssrl|mcl|msrc)=[0-9]+$ ||
                    "$opt" =~ ^write-cache=(on|off)$ ||
                    "$opt" =~ ^zoned=(true|false)$ ||
                    "$opt" =~ ^zoned\.(zone_size|zone_capacity)=[0-9]+[KMG]?$ ||
                    "$opt" =~ ^zoned\.(max_open|max_active)=[0-9]+$ ]] ||
                    die "--ns $spec: '$opt' is not a namespace option (nsid=N, ms=BYTES, mset=0|1, pi=0..3, pil=0|1, pif=0|2 (guard: 16-bit|64-bit), mssrl=BLOCKS, mcl=BLOCKS, msrc=N, zoned=true, zoned.zone_size=SIZE, zoned.zone_capacity=SIZE, zoned.max_open=N, zoned.max_active=N; with --subsys detached=1, shared=0|1)"
                meta="$meta,$opt"
            done
        fi
        case "$used" in *" $nsid "*) die "--ns $spec: nsid $nsid is used twice" ;; esac
        used="$used$nsid "
        [[ "$lba" =~ ^(512|4096)$ ]] || die "--ns $spec: LBASIZE must be 512 or 4096"
        bytes=$(size_bytes "${size:?--ns $spec: missing SIZE}")
        [ $((bytes % lba)) -eq 0 ] || die "--ns $spec: SIZE must be a multiple of LBASIZE"
        if [ "$kind" = null ]; then
            [ -z "$debug$throttle$image" ] || die "--ns $spec: blkdebug/bad=/throttle/image= need the file backend, not 'null'"
            QEMU_NS_ARGS+=(-drive "driver=null-co,size=$bytes,read-zeroes=on,id=${pfx}ns$k,if=none")
        else
            local img=$WORK/${pfx}ns$k.img
            if [ -n "$image" ]; then
                # A named image outlives the run: created once, then reused as it is.
                img=$(realpath -m "$image")
                if [ -e "$img" ]; then
                    [ "$(stat -c %s "$img")" = "$bytes" ] ||
                        die "--ns $spec: $img exists with $(stat -c %s "$img") bytes, not $bytes; remove it or give its size"
                    note "namespace $k: reusing image $img"
                else
                    mkdir -p "$(dirname "$img")"
                    truncate -s "$bytes" "$img"
                    note "namespace $k: new image $img"
                fi
            else
                rm -f "$img"
                truncate -s "$bytes" "$img"
            fi
            local file=$img
            if [ -n "$debug" ]; then
                blkdebug_config "$spec" "$debug" "$WORK/${pfx}ns$k.blkdebug"
                # The legacy filename syntax: blkdebug:CONFIG:IMAGE, split at ':'; ',' would end
                # the -drive option.
                [[ "$BLKDEBUG_CFG$img" != *[:,]* ]] ||
                    die "--ns $spec: the blkdebug config and image paths must not contain ':' or ','"
                file="blkdebug:$BLKDEBUG_CFG:$img"
                note "namespace $k: $debug ($file)"
            fi
            if [ -n "$throttle" ]; then
                [ -z "$debug" ] || die "--ns $spec: give throttle or blkdebug/bad=, not both"
                # A throttle filter over the image, in throttle group tg<k> (no limits until the
                # guest asks the host for some: "@@HOST throttle <k> <iops>").
                QEMU_NS_ARGS+=(-object "throttle-group,id=${pfx}tg$k"
                    -drive "driver=throttle,throttle-group=${pfx}tg$k,file.driver=raw,file.file.driver=file,file.file.filename=$img,if=none,id=${pfx}ns$k")
                QMP=1
                note "namespace $k: behind throttle group ${pfx}tg$k"
            else
                QEMU_NS_ARGS+=(-drive "file=$file,if=none,id=${pfx}ns$k,format=raw")
            fi
        fi
        # A namespace of the --subsys subsystem reports a UUID and an EUI64 (made from the
        # NSID), as real shared namespaces do: QEMU 7.2 reports none by default, and a namespace
        # without a unique identifier cannot be recognised through two controllers.
        if [ "$SUBSYS" = 1 ]; then
            meta="$meta,uuid=$(printf '4e564d65-0000-4000-8000-%012x' "$nsid"),eui64=$(printf '0x52540000%08x' "$nsid")"
        fi
        QEMU_NS_ARGS+=(-device "nvme-ns,drive=${pfx}ns$k,bus=$bus,nsid=$nsid,logical_block_size=$lba,physical_block_size=$lba$meta")
        if [ "$detached" = 1 ]; then
            BUILT_DETACHED="$BUILT_DETACHED $nsid:$lba:$bytes"
        else
            BUILT_LAYOUT="$BUILT_LAYOUT $nsid:$lba:$bytes"
        fi
    done
    BUILT_LAYOUT=${BUILT_LAYOUT# }
    BUILT_DETACHED=${BUILT_DETACHED# }
}

pick_accel() {
    local accel=${QEMU_ACCEL:-}
    if [ -z "$accel" ]; then
        # /dev/kvm alone is not enough: some hosts have a paravirtual KVM that cannot boot a stock
        # kernel; only trust it when the CPU advertises hardware virtualisation.
        if grep -qwE 'vmx|svm' /proc/cpuinfo && [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
            accel=kvm
        else
            accel=tcg
        fi
    fi
    case "$accel" in
    kvm) ACCEL_ARGS=(-accel kvm -cpu host) ;;
    tcg)
        # shellcheck disable=SC2054 # the commas belong to QEMU option values
        ACCEL_ARGS=(-accel tcg,thread=multi -cpu max)
        ;;
    *) die "QEMU_ACCEL must be kvm or tcg, not '$accel'" ;;
    esac
    ACCEL=$accel
}

# ---------------------------------------------------------------- hotplug
# Sends one QMP command (JSON) to QEMU's socket and prints the reply.
qmp() {
    python3 - "$QMP_SOCK" "$1" <<'PY'
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
f = s.makefile("rw")
f.readline()  # greeting
for cmd in ('{"execute": "qmp_capabilities"}', sys.argv[2]):
    f.write(cmd + "\n")
    f.flush()
    while True:
        reply = json.loads(f.readline())
        if "event" not in reply:
            break
print(json.dumps(reply))
PY
}

# Watches the serial log (5 times a second) and carries out each "@@HOST ..." line of the guest,
# in order, through QMP:
#   @@HOST device_del          hot-unplugs the controller (--hotplug)
#   @@HOST device_add hp1      hot-adds controller nvme-hp1 (serial hotplug1, drive hp1drv) on
#                              the free root port hp1 (--hotplug)
#   @@HOST device_del hp1      hot-unplugs it again
#   @@HOST throttle K IOPS     sets throttle group tg<K>'s total IOPS limit (0: unlimited) of a
#                              namespace given with ':throttle'
#   @@HOST load on|off         starts / stops the --host-load busy loops
watch_host_requests() {
    local done=0 line k iops
    trap 'host_load_off; exit 0' TERM
    while :; do
        while IFS= read -r line; do
            done=$((done + 1))
            case "$line" in
            "@@HOST device_add hp1")
                note "guest asks for device_add on hp1: $(qmp '{"execute": "device_add", "arguments": {"driver": "nvme", "id": "nvme-hp1", "bus": "hp1", "serial": "hotplug1", "drive": "hp1drv"}}' 2>&1)"
                ;;
            "@@HOST device_del hp1")
                note "guest asks for device_del nvme-hp1: $(qmp '{"execute": "device_del", "arguments": {"id": "nvme-hp1"}}' 2>&1)"
                ;;
            "@@HOST device_del")
                note "guest asks for device_del nvme0: $(qmp '{"execute": "device_del", "arguments": {"id": "nvme0"}}' 2>&1)"
                ;;
            "@@HOST throttle "*)
                read -r _ _ k iops <<<"$line"
                note "guest asks for tg$k iops-total=$iops: $(qmp "{\"execute\": \"qom-set\", \"arguments\": {\"path\": \"/objects/tg$k\", \"property\": \"limits\", \"value\": {\"iops-total\": $iops}}}" 2>&1)"
                ;;
            "@@HOST load on") host_load_on ;;
            "@@HOST load off") host_load_off ;;
            *) note "unknown host request: $line" ;;
            esac
        done < <(grep -a '^@@HOST ' "$SERIAL_LOG" | tail -n +$((done + 1)))
        sleep 0.2
    done
}

# --kill-after: counts the guest's 'acked K' console lines (every 20 ms) and, N lines in, waits the seeded random delay and sends SIGKILL to QEMU: a process-level kill of the
# whole machine model (its device, its backend's queue), not of the guest's program. The
# marker file tells the summary that the end was ours.
watch_kill() {
    local n delay
    RANDOM=$KILL_SEED
    delay=$((RANDOM * 32768 + RANDOM))
    delay=$((delay % (KILL_MAXMS + 1)))
    while :; do
        n=$(grep -ac '^acked [0-9][0-9]*$' "$SERIAL_LOG" || true)
        [ "$n" -lt "$KILL_AFTER" ] || break
        sleep 0.02
    done
    sleep "$((delay / 1000)).$(printf %03d $((delay % 1000)))"
    local pid
    pid=$(cat "$QEMU_PIDFILE")
    # The mark first: once QEMU is gone run.sh stops this watcher.
    echo "$KILL_AFTER $delay" >"$KILL_MARK"
    kill -KILL "$pid" 2>/dev/null || { rm -f "$KILL_MARK"; return 0; }
    note "sent SIGKILL to QEMU (pid $pid) ${delay} ms after the guest's ${KILL_AFTER}th acknowledged commit (seed $KILL_SEED)"
}

# The --host-load hog. Its process ids go to a file, so that the watcher and run.sh's exit trap
# can both stop it (whichever comes first); each switch is logged with the host's load average.
host_load_event() {
    echo "@@HOSTLOAD $1 procs=$HOST_LOAD_N nice=$HOST_LOAD_NICE host_cpus=$(nproc) t=$(date +%s) loadavg=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)" >>"$HOST_EVENTS"
}

host_load_on() {
    [ -n "$HOST_LOAD_N" ] || { note "the guest asks for host load, but run.sh has no --host-load"; return; }
    [ ! -s "$HOST_LOAD_PIDS" ] || { note "host load is already on"; return; }
    host_load_event on
    local i
    for i in $(seq "$HOST_LOAD_N"); do
        nice -n $((HOST_LOAD_NICE - $(nice))) sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &
        echo $! >>"$HOST_LOAD_PIDS"
    done
    note "host load on: $HOST_LOAD_N busy loop(s) at nice $HOST_LOAD_NICE (pids $(tr '\n' ' ' <"$HOST_LOAD_PIDS"))"
}

host_load_off() {
    # Also called by the exit trap, which may run before the pid file is named.
    [ -n "${HOST_LOAD_PIDS:-}" ] && [ -s "$HOST_LOAD_PIDS" ] || return 0
    local pid
    while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$HOST_LOAD_PIDS"
    : >"$HOST_LOAD_PIDS"
    host_load_event off
    note "host load off"
}

# The image QEMU's -kernel gets: under TCG the bzImage's own decompressor takes 5-10 s of every
# boot (Debian's xz-compressed kernel), so a kernel with the PVH entry note (CONFIG_PVH, as
# Debian's) boots from its unpacked ELF instead (tests/qemu/pvh-kernel.py), cached under
# target/guest-vmlinux/ by the image's hash; the same kernel runs. Any other image (the harness's
# own tinyconfig kernel has no PVH) and GUEST_PVH=0 boot the bzImage as given.
boot_kernel() {
    local k=$1 dir name
    { [ "${GUEST_PVH:-1}" = 1 ] && command -v python3 >/dev/null; } || { echo "$k"; return; }
    dir=$ROOT/target/guest-vmlinux
    name=$(basename "$k")-$(sha256sum "$k" | cut -c1-16)
    if [ ! -e "$dir/$name.vmlinux" ] && [ ! -e "$dir/$name.no-pvh" ]; then
        mkdir -p "$dir"
        # One entry per image name: an updated kernel package replaces the old entry.
        rm -f "$dir/$(basename "$k")"-*.vmlinux
        if python3 "$HERE/pvh-kernel.py" "$k" "$dir/$name.vmlinux" 2>"$dir/$name.err"; then
            rm -f "$dir/$name.err"
        else
            note "booting the bzImage: $(cat "$dir/$name.err")"
            mv "$dir/$name.err" "$dir/$name.no-pvh"
        fi
    fi
    if [ -e "$dir/$name.vmlinux" ]; then echo "$dir/$name.vmlinux"; else echo "$k"; fi
}

# ---------------------------------------------------------------- main
START=$(date +%s)
ensure_packages
# shellcheck disable=SC2054 # the commas belong to QEMU option values
IOMMU_ARGS=(-device intel-iommu,intremap=on,caching-mode=on)
IOMMU_APPEND="intel_iommu=on iommu=pt"
if [ -n "$VFIO_MODE" ]; then
    # The harness's own kernel: VFIO cdev, iommufd and no-IOMMU built in (guest-kernel.sh).
    if [ -z "${KERNEL:-}" ]; then
        KERNEL=$("$HERE/guest-kernel.sh") || die "building the guest kernel failed (tests/qemu/guest-kernel.sh)"
    fi
    KVER=${KVER:-$(cat "$(dirname "$KERNEL")/kernelrelease" 2>/dev/null || echo custom)}
    MODDIR=""
    if [ "$VFIO_MODE" = noiommu ]; then
        # No IOMMU at all, as in a cloud VM without a virtual IOMMU; hugepages reserved at boot
        # come from one physical range, so multi-hugepage DMA allocations can be contiguous.
        IOMMU_ARGS=()
        # Every DMA allocation takes whole 2 MiB pages then: a controller with 8 queue pairs
        # needs ~30 of them before any data buffer.
        [ -n "$GUEST_HUGEPAGES_GIVEN" ] || GUEST_HUGEPAGES=384
        IOMMU_APPEND="hugepages=$GUEST_HUGEPAGES"
    fi
else
    KERNEL=${KERNEL:-$(find_kernel)}
fi
{ [ -n "$KERNEL" ] && [ -r "$KERNEL" ]; } || die "no readable kernel image (set KERNEL=/boot/vmlinuz-VER)"
if [ -z "$VFIO_MODE" ]; then
    KVER=${KVER:-${KERNEL#*/vmlinuz-}}
    MODDIR=/lib/modules/$KVER
    [ -f "$MODDIR/modules.dep" ] || die "no $MODDIR/modules.dep for kernel $KERNEL (set KVER)"
fi
BOOT_KERNEL=$(boot_kernel "$KERNEL")

rm -rf "$WORK"
mkdir -p "$WORK"
INITRD_ROOT=$WORK/initramfs
# shellcheck disable=SC2317 # called through the EXIT trap
cleanup() {
    # The watcher stops its own host load when told to; on an early exit (a signal) it is still
    # running here.
    if [ -n "${WATCHER:-}" ]; then
        kill "$WATCHER" 2>/dev/null || true
        wait "$WATCHER" 2>/dev/null || true
    fi
    host_load_off
    [ "$KEEP" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT

# Each controller's nvme-ns devices follow it on the QEMU command line (QEMU_CMD below).
QEMU_NS_ARGS=()
build_namespaces nvme0 "${NS_SPECS[@]}"
NS_LAYOUT=$BUILT_LAYOUT
NS_DETACHED=$BUILT_DETACHED
# The namespaces the guest's kernel driver sees on the first controller at boot.
NS_ATTACHED_COUNT=$(wc -w <<<"$NS_LAYOUT")
QEMU_NS1_ARGS=("${QEMU_NS_ARGS[@]}")
SUBSYS_ARGS=()
CTRL1_SUBSYS=""
if [ "$SUBSYS" = 1 ]; then
    [ ${#NS2_SPECS[@]} -eq 0 ] || die "--subsys and --ctrl2-ns do not go together (the subsystem's namespaces are given with --ns)"
    [ "$HOTPLUG" = 0 ] || die "--subsys and --hotplug do not go together"
    [ "$SAME_GROUP" = 0 ] || die "--subsys and --ctrl2-same-group do not go together"
    # shellcheck disable=SC2054 # the commas belong to QEMU option values
    SUBSYS_ARGS=(-device "nvme-subsys,id=subsys0,nqn=$SUBSYS_NQN")
    CTRL1_SUBSYS=",subsys=subsys0"
    # The second controller joins before the namespaces are created, so that each shared one
    # is attached to both (QEMU attaches a shared namespace to the subsystem's controllers when
    # it is realized). The controllers of one QEMU subsystem must have its serial (the first's).
    # shellcheck disable=SC2054 # the commas belong to QEMU option values
    QEMU_NS1_ARGS=(-device "nvme,serial=deadbeef,id=nvme1,mdts=$MDTS,max_ioqpairs=$QPAIRS,subsys=subsys0" "${QEMU_NS1_ARGS[@]}")
    NS2_LAYOUT=$NS_LAYOUT
fi
QEMU_NS_ARGS=()
[ "$SUBSYS" = 1 ] || NS2_LAYOUT=""
CTRL2_ARGS=()
BRIDGE_ARGS=()
CTRL1_BUS=""
if [ ${#NS2_SPECS[@]} -gt 0 ]; then
    [ "$HOTPLUG" = 0 ] || die "--ctrl2-ns and --hotplug do not go together"
    build_namespaces nvme1 "${NS2_SPECS[@]}"
    NS2_LAYOUT=$BUILT_LAYOUT
    CTRL2_BUS=""
    if [ "$SAME_GROUP" = 1 ]; then
        # Behind a conventional PCI bridge, DMA of both carries the bridge's requester id: one
        # IOMMU group. No SHPC, so no hotplug driver claims the bridge (VFIO needs it driverless).
        # shellcheck disable=SC2054 # the commas belong to QEMU option values
        BRIDGE_ARGS=(-device pci-bridge,id=br0,chassis_nr=1,shpc=off)
        CTRL1_BUS=",bus=br0,addr=1"
        CTRL2_BUS=",bus=br0,addr=2"
    fi
    # shellcheck disable=SC2054 # the commas belong to QEMU option values
    CTRL2_ARGS+=(-device "nvme,serial=cafebabe,id=nvme1,mdts=$MDTS,max_ioqpairs=$QPAIRS$CTRL2_BUS" "${QEMU_NS_ARGS[@]}")
elif [ "$SAME_GROUP" = 1 ]; then
    die "--ctrl2-same-group needs a second controller (--ctrl2-ns)"
fi
build_guest_bins
build_initramfs
pick_accel

SERIAL_LOG=$WORK/serial.log
HOST_EVENTS=$WORK/host-events.log
HOST_LOAD_PIDS=$WORK/host-load.pids
: >"$HOST_EVENTS"
: >"$HOST_LOAD_PIDS"
QMP_SOCK=$WORK/qmp.sock
QEMU_PIDFILE=$WORK/qemu.pid
KILL_MARK=$WORK/killed
NVME_BUS=""
HOTPLUG_ARGS=()
if [ "$HOTPLUG" = 1 ]; then
    # The controller's port, and a free one for a controller hot-added later (its drive is
    # ready from the start; QMP device_add only plugs the controller).
    truncate -s 64M "$WORK/hp1.img"
    # shellcheck disable=SC2054 # the commas belong to QEMU option values
    HOTPLUG_ARGS=(-device pcie-root-port,id=rp0,chassis=1,slot=1
        -device pcie-root-port,id=hp1,chassis=2,slot=2
        -drive "file=$WORK/hp1.img,format=raw,if=none,id=hp1drv")
    NVME_BUS=",bus=rp0"
    QMP=1
fi
[ "$QMP" = 1 ] && HOTPLUG_ARGS+=(-qmp "unix:$QMP_SOCK,server=on,wait=off")
TRACE_ARGS=()
if [ ${#TRACE_PATTERNS[@]} -gt 0 ]; then
    mkdir -p "$(dirname "$TRACE_LOG")"
    : >"$TRACE_LOG"
    for p in "${TRACE_PATTERNS[@]}"; do TRACE_ARGS+=(-trace "enable=$p"); done
    TRACE_ARGS+=(-msg timestamp=on -D "$TRACE_LOG")
    note "tracing ${TRACE_PATTERNS[*]} to $TRACE_LOG"
fi
[ -z "$CTRL1_BUS" ] || NVME_BUS=$CTRL1_BUS
# no_timer_check: under TCG on a loaded host the kernel's early check that the timer interrupt
# arrives through the (interrupt-remapped) IO-APIC can time out, and with remapping on it panics
# ("timer doesn't work through Interrupt-remapped IO-APIC"); seen several times at load 20 on a
# 2-core host. The check proves nothing about a virtual machine's timer.
# init_on_alloc=0: Debian's kernel zeroes every page it allocates (INIT_ON_ALLOC_DEFAULT_ON), on
# top of the zeroing of every page user space gets; under TCG that doubled zeroing costs about
# 1 s of each boot (the 128 MiB of hugepages reserved by /init alone) and slows every case. What
# user space sees does not change: its pages, hugepages included, are zeroed at the fault.
# shellcheck disable=SC2054 # the commas belong to QEMU option values
QEMU_CMD=(
    "${QEMU:-qemu-system-x86_64}" "${ACCEL_ARGS[@]}" -machine q35
    "${IOMMU_ARGS[@]}"
    -m "$MEM" -smp "$SMP" -nographic -no-reboot -nic none
    -kernel "$BOOT_KERNEL" -initrd "$WORK/initramfs.cpio"
    -append "console=ttyS0 $IOMMU_APPEND panic=-1 no_timer_check init_on_alloc=0 quiet $APPEND"
    -device "isa-debug-exit,iobase=$DEBUG_EXIT_PORT,iosize=0x04"
    -pidfile "$QEMU_PIDFILE"
    "${HOTPLUG_ARGS[@]}"
    ${BRIDGE_ARGS[@]+"${BRIDGE_ARGS[@]}"}
    ${SUBSYS_ARGS[@]+"${SUBSYS_ARGS[@]}"}
    -device "nvme,serial=deadbeef,id=nvme0,mdts=$MDTS,max_ioqpairs=$QPAIRS${CMB_MB:+,cmb_size_mb=$CMB_MB}$NVME_BUS$CTRL1_SUBSYS"
    "${QEMU_NS1_ARGS[@]}"
    ${CTRL2_ARGS[@]+"${CTRL2_ARGS[@]}"}
    "${TRACE_ARGS[@]}"
)
ctrl2_note=""
[ -z "$NS2_LAYOUT" ] || ctrl2_note=" second controller: '$NS2_LAYOUT'"
pvh_note=""
[ "$BOOT_KERNEL" = "$KERNEL" ] || pvh_note=" (PVH entry: $BOOT_KERNEL)"
note "layout=${LAYOUT:-custom} vfio-mode=${VFIO_MODE:-auto} accel=$ACCEL kernel=$KERNEL$pvh_note namespaces='$NS_LAYOUT'$ctrl2_note mdts=$MDTS qpairs=$QPAIRS"
note "cases: ${CASES[*]}"
note "${QEMU_CMD[*]}"
BOOT=$(date +%s)

# Stream the console live (sed -u: unbuffered, so a guest line reaches serial.log at once for
# the --hotplug watcher); stdin from /dev/null keeps QEMU from putting the terminal into raw
# mode, so Ctrl-C still stops the run.
: >"$SERIAL_LOG"
WATCHER=""
{ [ "$QMP" = 1 ] || [ -n "$HOST_LOAD_N" ]; } && { watch_host_requests & WATCHER=$!; }
KILLER=""
[ -z "$KILL_AFTER" ] || { watch_kill & KILLER=$!; }
set +e
timeout -k 10 "$TIMEOUT" "${QEMU_CMD[@]}" </dev/null 2>&1 | sed -u 's/\r//g' | tee "$SERIAL_LOG"
QEMU_RC=${PIPESTATUS[0]}
set -e
[ -z "$WATCHER" ] || { kill "$WATCHER" 2>/dev/null || true; wait "$WATCHER" 2>/dev/null || true; }
[ -z "$KILLER" ] || { kill "$KILLER" 2>/dev/null || true; wait "$KILLER" 2>/dev/null || true; }
host_load_off
END=$(date +%s)
[ -z "$LOG" ] || cat "$SERIAL_LOG" "$HOST_EVENTS" >"$LOG"

# ---------------------------------------------------------------- summary
echo
echo "======== summary ========"
FAILED=0
KILLED=0
[ ! -s "$KILL_MARK" ] || KILLED=1
for f in "${CASE_FILES[@]}"; do
    name=$(basename "$f")
    line=$(grep -a "^@@CASE $name " "$SERIAL_LOG" | tail -n 1 || true)
    case "$line" in
    *" PASS"*) printf '  %-24s PASS%s\n' "$name" "$(echo "$line" | sed -n 's/.* PASS//p')" ;;
    *" FAIL"*) printf '  %-24s FAIL%s\n' "$name" "$(echo "$line" | sed -n 's/.* FAIL//p')"; FAILED=1 ;;
    *)
        if [ "$KILLED" = 1 ]; then
            printf '  %-24s KILLED (QEMU, by --kill-after)\n' "$name"
        else
            printf '  %-24s NOT RUN (no result from the guest)\n' "$name"
            FAILED=1
        fi
        ;;
    esac
done
echo "  accel=$ACCEL build+initramfs=$((BOOT - START))s boot+tests=$((END - BOOT))s total=$((END - START))s"
if [ -n "$KILL_AFTER" ]; then
    if [ "$KILLED" = 1 ]; then
        read -r _ delay <"$KILL_MARK"
        echo "  QEMU killed (SIGKILL) ${delay} ms after acknowledged commit line $KILL_AFTER; last acknowledged: $(grep -a '^acked [0-9][0-9]*$' "$SERIAL_LOG" | awk '{ if ($2 > m) m = $2 } END { print m + 0 }')"
    else
        echo "  --kill-after $KILL_AFTER: QEMU was not killed (the guest showed $(grep -ac '^acked [0-9][0-9]*$' "$SERIAL_LOG" || true) acknowledged commits and ended first)"
        FAILED=1
    fi
elif [ "$QEMU_RC" = 124 ] || [ "$QEMU_RC" = 137 ]; then
    echo "  TIMEOUT: the guest did not finish within ${TIMEOUT}s (--timeout)"
    FAILED=1
elif ! grep -aq '^@@DONE' "$SERIAL_LOG"; then
    echo "  the guest never reported completion (QEMU exit status $QEMU_RC); see the log above"
    FAILED=1
fi
if [ "$FAILED" = 0 ] && [ "$KILLED" = 1 ]; then
    echo "  RESULT: QEMU killed as asked (--kill-after), no case failed before"
elif [ "$FAILED" = 0 ]; then
    echo "  RESULT: all ${#CASE_FILES[@]} case(s) passed"
else
    echo "  RESULT: FAILED"
fi
[ "$KEEP" = 1 ] && echo "  work dir kept: $WORK"
exit "$FAILED"
