#!/usr/bin/env bash
# Builds SQLite's own benchmark, speedtest1, for the side-by-side in
# tests/qemu/cases/sqlite-speedtest.sh. The source comes from Debian's sqlite3 source package
# at build time (`apt-get source`, through a private apt configuration with a deb-src line, so
# the host's apt sources are not touched) and is never committed. speedtest1.c is linked
# against the system's libsqlite3 (the same library the guest's sqlite3 shell uses) with
# tests/speedtest1/load-nvme.c, which loads the nvme VFS extension before speedtest1 runs.
#
#   tests/speedtest1/build.sh [OUT]     (default OUT: target/speedtest1/speedtest1)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/target/speedtest1/speedtest1}
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
cc -O2 -o "$OUT" "$ROOT/tests/speedtest1/load-nvme.c" "$WORK/speedtest1.o" -lsqlite3 -lm
echo "$OUT"
