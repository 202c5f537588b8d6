#!/usr/bin/env bash
# Runs every test layer: unit tests, loom model checks, then the QEMU guest cases.
# Keeps going after a failure so one run shows everything; exits non-zero if anything failed.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
RESULTS=()
FAILED=0

step() {
    local name=$1
    shift
    echo
    echo "==== $name: $*"
    local t0=$SECONDS
    if "$@"; then
        RESULTS+=("PASS  $name ($((SECONDS - t0))s)")
    else
        RESULTS+=("FAIL  $name ($((SECONDS - t0))s)")
        FAILED=1
    fi
}

step "unit tests" cargo test --workspace

# The Rust examples, run against the in-process emulator (the C examples run in nvme-capi's
# tests above).
step "examples" sh -c 'cargo run -q -p nvme-driver --example hello -- sim &&
    cargo run -q -p nvme-driver --example per_thread -- sim 4 5000'

# Per-I/O instruction counts (callgrind) against tests/instr-budget.txt: fails on +5 %.
step "instruction budget" tests/instr-per-io.sh --check

if [ -f crates/pool/tests/loom.rs ]; then
    step "loom" env RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="$ROOT/target/loom" \
        cargo test -p nvme-pool --test loom --release
else
    echo
    echo "==== loom: skipped (crates/pool/tests/loom.rs does not exist yet)"
    RESULTS+=("SKIP  loom (no crates/pool/tests/loom.rs)")
fi

step "qemu guest" tests/qemu/run.sh bind.sh identify.sh bad-input.sh hello.sh integrity.sh in-use.sh perf-smoke.sh recovery.sh sqlite.sh
# Its own boot: namespaces with metadata formats (2: 8 bytes inline, extended LBA; 3: 16 bytes in a
# separate buffer) next to a plain one. The first qemu step built the guest binaries.
step "qemu guest (metadata namespaces)" tests/qemu/run.sh --no-build \
    --ns 512:16M --ns 512:16M:ms=8,mset=1 --ns 4096:16M:ms=16,mset=0 metadata.sh
# Its own boot: namespace 1's image behind blkdebug, EIO on reads of 512-byte sector 2048 (LBA 256)
# and writes of sector 4096 (LBA 512): media errors on exactly those requests.
step "qemu guest (media errors)" tests/qemu/run.sh --no-build \
    --ns 4096:16M:bad=r2048,w4096 --ns 512:16M media-errors.sh
# Its own boot: our NVMe/TCP initiator against the kernel's nvmet-tcp target on 127.0.0.1 (the
# emulated NVMe controller is not used; a boot of its own keeps the target's configfs state and the
# kernel host's nvme devices away from the other cases).
step "qemu guest (NVMe/TCP)" tests/qemu/run.sh --no-build nvmf-tcp.sh
# The core cases on every other controller layout of tests/qemu/layouts (many namespaces with
# gaps in their ids, MDTS 1 and 0, one queue pair, 4 KiB-only namespaces), one boot each.
# shellcheck disable=SC2317 # called through step
qemu_layouts() {
    local name t0 failed=()
    for name in $(tests/qemu/run.sh --list-layouts | awk '/^[^[:space:]]/ { print $1 }'); do
        [ "$name" = default ] && continue
        t0=$SECONDS
        if tests/qemu/run.sh --no-build --layout "$name" identify.sh hello.sh integrity.sh bad-input.sh; then
            echo "==== layout $name: PASS ($((SECONDS - t0))s)"
        else
            echo "==== layout $name: FAIL ($((SECONDS - t0))s)"
            failed+=("$name")
        fi
    done
    [ ${#failed[@]} -eq 0 ] || { echo "==== layouts failed: ${failed[*]}"; return 1; }
}
step "qemu guest (layouts)" qemu_layouts
# Its own boot: the controller behind a pcie-root-port, hot-unplugged (QMP device_del) under load;
# it is gone afterwards, so nothing else can run in this boot.
step "qemu guest (hot-unplug)" tests/qemu/run.sh --no-build --hotplug hot-unplug.sh

echo
echo "==== run-all summary"
printf '  %s\n' "${RESULTS[@]}"
exit "$FAILED"
