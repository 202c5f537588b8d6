#!/usr/bin/env bash
# Builds the fio ioengine (tools/fio-engine/nvme_fio.c) as a shared library that the
# distribution's fio loads with `ioengine=external:PATH`: no patched fio.
#
#   tools/fio-engine/build.sh [--emulator] [--release|--debug]
#
# 1. fio's headers: the engine struct layout (struct ioengine_ops, struct thread_data,
#    struct io_u) must be that of the installed fio binary, so the script takes the source
#    package of exactly the fio version apt installs (`apt-get source fio=<version>`, after
#    adding a deb-src entry for the archive apt already uses) and runs its ./configure so
#    config-host.h exists. Everything goes under target/fio-engine/ (ignored; no fio source
#    is committed).
# 2. The C API's static library (crates/capi), with the in-process emulator when --emulator
#    is given (tests: the filename `sim`); a plain build opens only real controllers.
# 3. cc -shared: target/fio-engine/nvme-fio.so (nvme-fio-emulator.so with --emulator), the
#    Rust library linked in with its symbols hidden: only fio's engine entry point is exported.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$ROOT/target/fio-engine
EMULATOR=0
PROFILE=release
for a in "$@"; do
    case $a in
    --emulator) EMULATOR=1 ;;
    --release) PROFILE=release ;;
    --debug) PROFILE=debug ;;
    *) echo "build.sh: unknown argument $a" >&2; exit 2 ;;
    esac
done
CC=${CC:-cc}
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
mkdir -p "$OUT"

command -v fio >/dev/null || { echo "build.sh: fio is not installed (apt-get install fio)" >&2; exit 1; }
# The version of the installed fio package (e.g. 3.33-3), not of whatever apt offers now.
FIO_VERSION=$(dpkg-query -W -f '${Version}' fio)
SRC=$OUT/fio-src-$FIO_VERSION
if [ ! -f "$SRC/config-host.h" ]; then
    if ! apt-get source --print-uris fio="$FIO_VERSION" >/dev/null 2>&1 ||
        [ -z "$(apt-get source --print-uris fio="$FIO_VERSION" 2>/dev/null | grep "\.dsc'")" ]; then
        # A deb-src twin of every deb entry of the archive apt already uses.
        list=/etc/apt/sources.list.d/nvme-fio-deb-src.sources
        echo "build.sh: adding deb-src entries ($list)"
        for f in /etc/apt/sources.list.d/*.sources; do
            [ "$f" = "$list" ] && continue
            sed -n 's/^Types: deb$/Types: deb-src/; /^Types:\|^URIs:\|^Suites:\|^Components:\|^Signed-By:\|^$/p' "$f"
            echo
        done | $SUDO tee "$list" >/dev/null
        if [ -f /etc/apt/sources.list ]; then
            sed -n 's/^deb \(.*\)/deb-src \1/p' /etc/apt/sources.list | $SUDO tee -a /etc/apt/sources.list.d/nvme-fio-deb-src.list >/dev/null
        fi
        $SUDO apt-get update -qq
    fi
    rm -rf "$OUT/dl" && mkdir -p "$OUT/dl"
    (cd "$OUT/dl" && apt-get source -qq --download-only fio="$FIO_VERSION" &&
        dpkg-source --no-check -x ./*.dsc fio-src >/dev/null)
    rm -rf "$SRC" && mv "$OUT/dl/fio-src" "$SRC"
    # Only config-host.h is needed; features off that the headers would pull in.
    (cd "$SRC" && ./configure --disable-native >/dev/null)
    [ -f "$SRC/config-host.h" ] || { echo "build.sh: fio ./configure made no config-host.h" >&2; exit 1; }
fi

FEATURES=()
[ "$EMULATOR" = 1 ] && FEATURES=(--features emulator)
PROFILE_ARGS=()
[ "$PROFILE" = release ] && PROFILE_ARGS=(--release)
(cd "$ROOT" && cargo build -q "${PROFILE_ARGS[@]}" -p nvme-capi "${FEATURES[@]}")
LIB=$ROOT/target/$PROFILE/libnvme_userspace.a
[ -f "$LIB" ] || { echo "build.sh: $LIB was not built" >&2; exit 1; }

# fio's headers need its config-host.h first and _GNU_SOURCE; -include keeps the engine
# source free of fio's build details.
"$CC" -std=gnu11 -O2 -g -fPIC -shared -Wall -Wextra -Werror -Wno-unused-parameter \
    -Wno-sign-compare -Wno-missing-field-initializers \
    -D_GNU_SOURCE -D_LARGEFILE_SOURCE -D_FILE_OFFSET_BITS=64 \
    -include "$SRC/config-host.h" -I "$SRC" -I "$ROOT/crates/capi/include" \
    "$ROOT/tools/fio-engine/nvme_fio.c" "$LIB" -lpthread -ldl -lm \
    -Wl,--exclude-libs,ALL -o "$OUT/$$.so.tmp"
NAME=nvme-fio.so
[ "$EMULATOR" = 1 ] && NAME=nvme-fio-emulator.so
mv "$OUT/$$.so.tmp" "$OUT/$NAME"
echo "build.sh: $OUT/$NAME (fio $FIO_VERSION$([ "$EMULATOR" = 1 ] && echo ', with the emulator'))"
