#!/usr/bin/env bash
# A plain release build (the tools and C library for a real machine) has no emulator:
#   - `cargo tree -e normal` of nvme-perf, nvme-sqlite and nvme-capi does not list nvme-sim;
#   - nor does a bare root build (the workspace's default members), and nvme-vfio's `emulator`
#     feature (atomic register windows, the per-access mode check) is off in all of them;
#   - `nvme-perf sim` from `cargo build --release -p nvme-perf` fails with the clear
#     "this build has no emulator" error (exit status 1), not a panic.
# The emulator is the `emulator` feature of those crates; their tests enable it (see
# docs/testing.md), and tests/instr-per-io.sh builds nvme-perf with it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fail=0
for pkg in nvme-perf nvme-sqlite nvme-capi; do
    if cargo tree -q -e normal -p "$pkg" | grep -q 'nvme-sim'; then
        echo "no-emulator.sh: FAIL: a plain build of $pkg compiles nvme-sim" >&2
        fail=1
    fi
done
# The bare root build: default members only (Cargo.toml), no nvme-sim among them.
if cargo tree -q -e normal,features -i nvme-vfio | grep -q 'nvme-vfio feature "emulator"'; then
    echo "no-emulator.sh: FAIL: a bare root build turns on nvme-vfio's emulator feature" >&2
    fail=1
fi
for pkg in nvme-perf nvme-capi; do
    if cargo tree -q -e normal,features -p "$pkg" -i nvme-vfio | grep -q 'feature "emulator"'; then
        echo "no-emulator.sh: FAIL: a plain build of $pkg has nvme-vfio's emulator feature" >&2
        fail=1
    fi
done
cargo build --release -q -p nvme-perf
set +e
err=$(target/release/nvme-perf sim --ios 10 --quiet 2>&1 >/dev/null)
rc=$?
set -e
if [ "$rc" -ne 1 ] || ! grep -q 'this build has no emulator: rebuild with --features emulator' <<<"$err"; then
    echo "no-emulator.sh: FAIL: plain nvme-perf sim exited $rc with: $err" >&2
    fail=1
fi
[ "$fail" -eq 0 ] && echo "no-emulator.sh: ok (no nvme-sim in plain builds; sim refused: $err)"
exit "$fail"
