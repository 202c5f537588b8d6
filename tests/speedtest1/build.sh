#!/usr/bin/env bash
# Builds SQLite's own benchmark, speedtest1, for the side-by-side in
# tests/qemu/cases/sqlite-speedtest.sh. The source comes from Debian's sqlite3 source package
# at build time (`apt-get source`, through a private apt configuration with a deb-src line, so
# the host's apt sources are not touched) and is never committed. speedtest1.c is linked
# against the system's libsqlite3 (the same library the guest's sqlite3 shell uses) with
# tests/speedtest1/load-nvme.c, which loads the nvme VFS extension before speedtest1 runs.
#
# --batch-atomic links it instead with the SQLite amalgamation the workspace's Rust tools
# bundle (libsqlite3-sys's copy of SQLite's release, fetched by cargo) compiled with the
# workspace's LIBSQLITE3_FLAGS (.cargo/config.toml: SQLITE_ENABLE_BATCH_ATOMIC_WRITE), the
# build a program embedding the driver would use: SQLite then commits DELETE-mode
# transactions without the rollback journal on a VFS that reports SQLITE_IOCAP_BATCH_ATOMIC
# (ours), and journals as before on the default VFS over ext4 (it reports the capability only
# on F2FS). Every side of the guest case runs the same binary.
#
#   tests/speedtest1/build.sh [--batch-atomic] [OUT]
#       (default OUT: target/speedtest1/speedtest1, with --batch-atomic target/speedtest1/speedtest1-batch)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BATCH=
if [ "${1:-}" = --batch-atomic ]; then
    BATCH=1
    shift
fi
OUT=${1:-$ROOT/target/speedtest1/speedtest1${BATCH:+-batch}}
WORK=$ROOT/target/speedtest1
mkdir -p "$WORK/apt/lists/partial" "$WORK/src"
[ -f /usr/include/sqlite3.h ] || apt-get install -y libsqlite3-dev
if [ ! -f "$WORK/src/speedtest1.c" ]; then
    cat >"$WORK/apt/sources.list" <<SRC
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
SRC
    apt_opts=(-o "Dir::Etc::SourceList=$WORK/apt/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
        -o "Dir::State::Lists=$WORK/apt/lists" -o "Dir::Cache::archives=$WORK/apt")
    apt-get "${apt_opts[@]}" update >/dev/null
    (cd "$WORK/src" && apt-get "${apt_opts[@]}" source --download-only sqlite3 >/dev/null)
    orig=$(ls "$WORK"/src/sqlite3_*.orig.tar.* | head -n1)
    member=$(tar -tf "$orig" | grep '/test/speedtest1\.c$' | head -n1)
    [ -n "$member" ] || { echo "no test/speedtest1.c in $orig" >&2; exit 1; }
    tar -xf "$orig" -O "$member" >"$WORK/src/speedtest1.c"
fi
mkdir -p "$(dirname "$OUT")"
# speedtest1's main becomes speedtest1_main; load-nvme.c's main loads the extension first.
cc -O2 -Dmain=speedtest1_main -o "$WORK/speedtest1.o" -c "$WORK/src/speedtest1.c"
if [ -z "$BATCH" ]; then
    cc -O2 -o "$OUT" "$ROOT/tests/speedtest1/load-nvme.c" "$WORK/speedtest1.o" -lsqlite3 -lm
else
    # The amalgamation cargo fetched for libsqlite3-sys (the version in Cargo.lock).
    manifest=$(cd "$ROOT" && cargo metadata --format-version 1 |
        python3 -c 'import json,sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "libsqlite3-sys"))')
    amalg=$(dirname "$manifest")/sqlite3
    [ -f "$amalg/sqlite3.c" ] || { echo "no sqlite3.c beside $manifest" >&2; exit 1; }
    flags=$(sed -n 's/^LIBSQLITE3_FLAGS *= *"\(.*\)"$/\1/p' "$ROOT/.cargo/config.toml")
    [ -n "$flags" ] || { echo "no LIBSQLITE3_FLAGS in .cargo/config.toml" >&2; exit 1; }
    # Options of a typical embedding build (the extension loader on, threads on); $flags
    # adds batch-atomic writes.
    # shellcheck disable=SC2086 # $flags is a list of -D options
    cc -O2 -I"$amalg" $flags -DSQLITE_THREADSAFE=1 -DSQLITE_ENABLE_LOAD_EXTENSION \
        -c -o "$WORK/sqlite3-batch.o" "$amalg/sqlite3.c"
    cc -O2 -I"$amalg" -o "$OUT" "$ROOT/tests/speedtest1/load-nvme.c" "$WORK/speedtest1.o" \
        "$WORK/sqlite3-batch.o" -lm -ldl -lpthread
fi
echo "$OUT"
