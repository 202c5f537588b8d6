#!/usr/bin/env python3
"""Unpacks the ELF kernel (vmlinux) out of an x86 bzImage for QEMU's PVH entry.

    tests/qemu/pvh-kernel.py BZIMAGE OUT

Under TCG the bzImage's own decompressor is the slowest part of a guest boot: unpacking
Debian's xz-compressed 6.1 kernel (8 MiB -> 63 MiB) takes the emulated CPU 5-10 s before the
kernel prints its first line. QEMU loads an uncompressed ELF kernel that carries the PVH entry
note (XEN_ELFNOTE_PHYS32_ENTRY, Linux CONFIG_PVH) directly through its PVH option ROM; the
kernel that runs is the same, entered through its PVH entry point instead of the bzImage stub.

Exit status: 0 OUT written (an ELF with the PVH note); 3 not usable (not a bzImage, a
compression this script does not unpack, or no PVH note: boot the bzImage as it is);
2 usage or I/O error.
"""
import bz2
import gzip
import io
import lzma
import os
import struct
import sys

# The PVH entry point note of the Xen ELF notes (xen/include/public/elfnote.h).
XEN_ELFNOTE_PHYS32_ENTRY = 18
PT_NOTE = 4


def payload(image):
    """The compressed kernel inside a bzImage (boot protocol 2.08+ payload_offset/length)."""
    if len(image) < 0x250 or image[0x202:0x206] != b"HdrS":
        return None
    version = struct.unpack_from("<H", image, 0x206)[0]
    if version < 0x208:
        return None
    setup_sects = image[0x1F1] or 4
    offset, length = struct.unpack_from("<II", image, 0x248)
    start = (setup_sects + 1) * 512 + offset
    return image[start : start + length]


def unpack(data):
    if data.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data)
    if data.startswith(b"\x5d\x00\x00"):
        return lzma.LZMADecompressor(format=lzma.FORMAT_ALONE).decompress(data)
    if data.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=io.BytesIO(data)).read()
    if data.startswith(b"BZh"):
        return bz2.BZ2Decompressor().decompress(data)
    return None  # zstd, lz4, lzo: boot the bzImage


def has_pvh_note(elf):
    """True when a PT_NOTE segment of the 64-bit ELF holds the Xen PVH entry note."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        return False
    phoff = struct.unpack_from("<Q", elf, 0x20)[0]
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", elf, phoff + i * phentsize)
        if p_type != PT_NOTE:
            continue
        pos, end = p_offset, p_offset + p_filesz
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", elf, pos)
            name = elf[pos + 12 : pos + 12 + namesz].rstrip(b"\x00")
            if name == b"Xen" and ntype == XEN_ELFNOTE_PHYS32_ENTRY:
                return True
            pos += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


def main():
    if len(sys.argv) != 3:
        print("usage: tests/qemu/pvh-kernel.py BZIMAGE OUT", file=sys.stderr)
        return 2
    src, out = sys.argv[1:]
    try:
        with open(src, "rb") as f:
            image = f.read()
    except OSError as e:
        print(f"pvh-kernel.py: cannot read {src}: {e}", file=sys.stderr)
        return 2
    data = payload(image)
    if data is None:
        print(f"pvh-kernel.py: {src} is not a bzImage (boot protocol 2.08 or later)", file=sys.stderr)
        return 3
    try:
        elf = unpack(data)
    except (lzma.LZMAError, OSError, EOFError, ValueError) as e:
        print(f"pvh-kernel.py: unpacking {src} failed: {e}", file=sys.stderr)
        return 3
    if elf is None:
        print(f"pvh-kernel.py: {src}: compression not handled here (xz, lzma, gzip, bzip2 are)", file=sys.stderr)
        return 3
    if not has_pvh_note(elf):
        print(f"pvh-kernel.py: {src} has no PVH entry note (kernel built without CONFIG_PVH)", file=sys.stderr)
        return 3
    tmp = f"{out}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(elf)
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
