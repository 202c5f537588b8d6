#!/usr/bin/env bash
# Builds (once) and prints the path of the test guest's own kernel: Linux 6.12 from Debian's
# linux-source-6.12 package, `make tinyconfig` plus tests/qemu/guest-kernel.config, everything
# built in. Debian's packaged kernels lack what the VFIO modes need (6.1: no iommufd, no VFIO
# device cdev; neither 6.1 nor 6.12 has CONFIG_VFIO_NOIOMMU), so run.sh --vfio-mode boots this one.
#
#   tests/qemu/guest-kernel.sh            build if needed; print the bzImage path on stdout
#   tests/qemu/guest-kernel.sh --key      print the cache key only (no build)
#
# Cache: target/guest-kernel/<package version>-<hash>/bzImage, where <hash> covers the config
# fragment and this script's RECIPE. A finished build leaves only bzImage, config and build.log
# (the unpacked source is removed). Environment: GUEST_KERNEL_JOBS (default 2), GUEST_KERNEL_NICE
# (default 10): the build runs as `nice -n NICE make -jJOBS`.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
FRAGMENT=$HERE/guest-kernel.config
PACKAGE=linux-source-6.12
# Bump when the build steps below change in a way that changes the result.
RECIPE=1
JOBS=${GUEST_KERNEL_JOBS:-2}
NICE=${GUEST_KERNEL_NICE:-10}
CACHE=$ROOT/target/guest-kernel

die() {
    echo "guest-kernel.sh: error: $*" >&2
    exit 2
}
note() { echo "guest-kernel.sh: $*" >&2; }

ensure_packages() {
    local missing=() p
    dpkg-query -W -f='${Status}' "$PACKAGE" 2>/dev/null | grep -q 'ok installed' || missing+=("$PACKAGE")
    for p in make gcc flex bison bc; do
        command -v "$p" >/dev/null || missing+=("$p")
    done
    [ -f /usr/include/libelf.h ] || missing+=(libelf-dev)
    [ -f /usr/include/openssl/ssl.h ] || missing+=(libssl-dev)
    command -v xz >/dev/null || missing+=(xz-utils)
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" = 0 ] ||
        die "missing packages: ${missing[*]}; install them (sudo apt-get install -y ${missing[*]}) or run as root"
    command -v apt-get >/dev/null || die "missing packages: ${missing[*]}, and no apt-get to install them"
    note "installing ${missing[*]}"
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >&2
}

cache_key() {
    local version hash
    version=$(dpkg-query -W -f='${Version}' "$PACKAGE" 2>/dev/null) ||
        die "$PACKAGE is not installed (run tests/qemu/guest-kernel.sh as root to install it)"
    hash=$( { echo "recipe=$RECIPE"; cat "$FRAGMENT"; } | sha256sum | cut -c1-12)
    # '~' and '+' in Debian versions are fine in paths but awkward in shells; keep them out.
    echo "${version//[~+:]/_}-$hash"
}

# Every CONFIG_X=y of the fragment must be in .config; Kconfig silently drops an option whose
# dependencies are missing, which would give a kernel without (say) the device cdev.
check_config() {
    local cfg=$1 line bad=()
    while read -r line; do
        case "$line" in CONFIG_*=*) ;; *) continue ;; esac
        grep -qx -- "$line" "$cfg" || bad+=("$line")
    done <"$FRAGMENT"
    [ ${#bad[@]} -eq 0 ] ||
        die "Kconfig dropped: ${bad[*]} (a dependency is missing; add it to $FRAGMENT)"
}

build() {
    local out=$1 src tarball t0
    tarball=$(dpkg -L "$PACKAGE" | grep -m1 '/linux-source-[0-9.]*\.tar\.xz$') ||
        die "no source tarball in package $PACKAGE"
    t0=$(date +%s)
    rm -rf "$out.tmp"
    mkdir -p "$out.tmp"
    note "unpacking $tarball"
    tar -C "$out.tmp" -xf "$tarball"
    src=$(find "$out.tmp" -mindepth 1 -maxdepth 1 -type d | head -n1)
    note "configuring (tinyconfig + $(basename "$FRAGMENT"))"
    make -C "$src" -s tinyconfig >&2
    "$src/scripts/kconfig/merge_config.sh" -m -O "$src" "$src/.config" "$FRAGMENT" >/dev/null
    make -C "$src" -s olddefconfig >&2
    check_config "$src/.config"
    note "building bzImage (nice -n $NICE make -j$JOBS; the first build takes several minutes)"
    if ! nice -n "$NICE" make -C "$src" -j"$JOBS" bzImage >"$out.tmp/build.log" 2>&1; then
        tail -n 30 "$out.tmp/build.log" >&2
        die "kernel build failed (log: $out.tmp/build.log)"
    fi
    mkdir -p "$out"
    cp "$src/arch/x86/boot/bzImage" "$out/bzImage"
    cp "$src/.config" "$out/config"
    make -C "$src" -s kernelrelease >"$out/kernelrelease"
    mv "$out.tmp/build.log" "$out/build.log"
    echo "build seconds: $(($(date +%s) - t0)) (make -j$JOBS, nice $NICE, $(nproc) CPUs)" >>"$out/build.log"
    rm -rf "$out.tmp"
    note "built $out/bzImage in $(($(date +%s) - t0))s"
}

case "${1:-}" in
--key) cache_key; exit 0 ;;
"") ;;
*) die "usage: tests/qemu/guest-kernel.sh [--key]" ;;
esac

ensure_packages
OUT=$CACHE/$(cache_key)
if [ ! -f "$OUT/bzImage" ]; then
    mkdir -p "$CACHE"
    # One build at a time (two run.sh calls started together share it).
    exec 9>"$CACHE/.lock"
    flock 9
    [ -f "$OUT/bzImage" ] || build "$OUT"
fi
echo "$OUT/bzImage"
