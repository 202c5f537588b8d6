#!/bin/bash
# Builds the C examples (examples/c) for the guest: the C API's static library for the guest
# target with a static C runtime (+crt-static, like the Rust guest binaries), then each example
# linked with `cc -static` against it. The guest has no C library of its own, so the programs
# must be static.
#
#   tests/qemu/build-c-guest.sh OUT_DIR [TARGET]     (TARGET default x86_64-unknown-linux-gnu)
#
# Writes OUT_DIR/hello_c, OUT_DIR/qd_loop and OUT_DIR/zones_c. Needs a C compiler ($CC, default cc) and the
# static glibc (libc6-dev ships libc.a).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:?usage: build-c-guest.sh OUT_DIR [TARGET]}
TARGET=${2:-x86_64-unknown-linux-gnu}
CC=${CC:-cc}
TARGET_DIR=$ROOT/target/guest

mkdir -p "$OUT"
# Only the staticlib (the crate's cdylib cannot be linked with a static C runtime).
(cd "$ROOT" && RUSTFLAGS='-C target-feature=+crt-static' CARGO_TARGET_DIR=$TARGET_DIR \
    cargo rustc --release --target "$TARGET" -p nvme-capi --lib --crate-type staticlib)
LIB=$TARGET_DIR/$TARGET/release/libnvme_userspace.a
[ -f "$LIB" ] || { echo "build-c-guest.sh: $LIB was not built" >&2; exit 1; }
for name in hello qd_loop zones; do
    exe=$name
    [ "$name" = hello ] && exe=hello_c # nvme-hello is the Rust tool
    [ "$name" = zones ] && exe=zones_c # a name of its own in the guest's /bin
    "$CC" -std=c11 -Wall -Wextra -Werror -O2 -static -I "$ROOT/crates/capi/include" \
        "$ROOT/examples/c/$name.c" "$LIB" -lpthread -ldl -lm -o "$OUT/$exe"
done
echo "build-c-guest.sh: $OUT/hello_c $OUT/qd_loop $OUT/zones_c (static)"
