//! The request mapping: one ublk I/O descriptor (`struct ublksrv_io_desc`, the kernel's
//! `include/uapi/linux/ublk_cmd.h`) to one NVMe command, without the kernel or a device.
//!
//! The block layer counts in 512-byte sectors; the namespace in its logical blocks (NVM CS
//! §4.1.1, the LBA Format's LBADS). `Geometry` announces the namespace's block size to the
//! kernel (`logical_bs_shift`), so every request it sends is block aligned; a request that is
//! not, or that runs past the namespace, is refused with `EINVAL` rather than rounded.
//!
//! | ublk op | NVMe command (NVM Command Set) |
//! |---|---|
//! | `UBLK_IO_OP_READ` | Read (§3.3.4) |
//! | `UBLK_IO_OP_WRITE` | Write (§3.3.6), FUA from `UBLK_IO_F_FUA` |
//! | `UBLK_IO_OP_FLUSH` | Flush (NVMe Base §7.1) |
//! | `UBLK_IO_OP_DISCARD` | Dataset Management, Deallocate (§3.3.3) |
//! | `UBLK_IO_OP_WRITE_ZEROES` | Write Zeroes (§3.3.8), Deallocate unless `UBLK_IO_F_NOUNMAP` |

use libublk::sys;

/// The block layer's sector: 512 bytes (Linux `SECTOR_SHIFT`), the unit of every ublk
/// descriptor and parameter.
pub const SECTOR_SHIFT: u32 = 9;

/// The ublk op is the low byte of `op_flags`; the `UBLK_IO_F_*` flags are above it.
const OP_MASK: u32 = 0xff;

/// One I/O as the kernel describes it (the fields of `ublksrv_io_desc` the mapping reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoDesc {
    /// `UBLK_IO_OP_*`.
    pub op: u32,
    /// `UBLK_IO_F_*`.
    pub flags: u32,
    /// First 512-byte sector.
    pub start_sector: u64,
    /// 512-byte sectors.
    pub nr_sectors: u32,
}

impl IoDesc {
    /// The descriptor of a ublk request.
    pub fn from_ublk(iod: &sys::ublksrv_io_desc) -> Self {
        IoDesc {
            op: iod.op_flags & OP_MASK,
            flags: iod.op_flags & !OP_MASK,
            start_sector: iod.start_sector,
            nr_sectors: iod.nr_sectors,
        }
    }

    /// Bytes the request covers.
    pub fn bytes(&self) -> u64 {
        u64::from(self.nr_sectors) << SECTOR_SHIFT
    }
}

/// What the device serves: the namespace's block size and size, the largest data transfer of
/// one request (the ublk I/O buffer), and which optional commands the controller has (ONCS,
/// NVMe Base §5.1.13.2.1 Identify Controller bytes 521:520).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Logical block size in bytes (a power of two, at least 512).
    pub block_size: u32,
    /// Blocks of the namespace (NSZE).
    pub blocks: u64,
    /// Most bytes of one read or write (the ublk `max_io_buf_bytes`).
    pub max_io_bytes: u32,
    /// Dataset Management (Deallocate) is offered: discard is announced.
    pub discard: bool,
    /// Write Zeroes is offered: write-zeroes is announced.
    pub write_zeroes: bool,
}

/// Most blocks one Write Zeroes moves: NLB is a 0's based 16-bit field (NVM CS §3.3.8,
/// Command Dword 12 bits 15:0).
pub const MAX_WRITE_ZEROES_BLOCKS: u64 = 1 << 16;

/// Most blocks one Deallocate range covers: the range's Length in Logical Blocks is 32 bits
/// (NVM CS §3.3.3, Figure "Dataset Management - Range Definition").
pub const MAX_DEALLOCATE_BLOCKS: u64 = u32::MAX as u64;

impl Geometry {
    /// log2 of the block size (ublk `logical_bs_shift`).
    pub fn block_shift(&self) -> u8 {
        self.block_size.trailing_zeros() as u8
    }

    /// The namespace's size in 512-byte sectors.
    pub fn sectors(&self) -> u64 {
        (self.blocks * u64::from(self.block_size)) >> SECTOR_SHIFT
    }

    /// Most 512-byte sectors one discard may cover (0: no discard), whole blocks.
    pub fn max_discard_sectors(&self) -> u32 {
        if !self.discard {
            return 0;
        }
        self.cap_sectors(MAX_DEALLOCATE_BLOCKS)
    }

    /// Most 512-byte sectors one write-zeroes may cover (0: no write-zeroes), whole blocks.
    pub fn max_write_zeroes_sectors(&self) -> u32 {
        if !self.write_zeroes {
            return 0;
        }
        self.cap_sectors(MAX_WRITE_ZEROES_BLOCKS)
    }

    /// `blocks` blocks in sectors, lowered to fit a u32 and kept a whole number of blocks.
    fn cap_sectors(&self, blocks: u64) -> u32 {
        let per_block = u64::from(self.block_size >> SECTOR_SHIFT);
        let sectors = (blocks * per_block).min(u64::from(u32::MAX));
        (sectors - sectors % per_block) as u32
    }
}

/// The NVMe command one ublk request becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Read `blocks` blocks at `lba`.
    Read { lba: u64, blocks: u32 },
    /// Write `blocks` blocks at `lba`, with Force Unit Access when `fua`.
    Write { lba: u64, blocks: u32, fua: bool },
    /// Flush the volatile write cache.
    Flush,
    /// Deallocate `blocks` blocks at `lba`.
    Discard { lba: u64, blocks: u32 },
    /// Write Zeroes of `blocks` blocks at `lba`; the controller may deallocate them when
    /// `deallocate`.
    WriteZeroes {
        lba: u64,
        blocks: u32,
        deallocate: bool,
    },
}

impl Request {
    /// Bytes of data the command moves through the I/O buffer (0 for the others).
    pub fn data_bytes(&self, block_size: u32) -> usize {
        match *self {
            Request::Read { blocks, .. } | Request::Write { blocks, .. } => {
                blocks as usize * block_size as usize
            }
            _ => 0,
        }
    }
}

/// Why a ublk request has no NVMe command; the kernel sees the errno.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// An op the device does not announce (write-same, zoned ops, discard without DSM, ...).
    #[error("ublk op {op} is not served")]
    Unsupported { op: u32 },
    /// Start or length not a whole number of blocks.
    #[error("sectors {start}+{count} are not whole {block_size}-byte blocks")]
    Misaligned {
        start: u64,
        count: u32,
        block_size: u32,
    },
    /// Past the end of the namespace, or empty where data is needed.
    #[error("sectors {start}+{count} are outside the namespace")]
    OutOfRange { start: u64, count: u32 },
    /// More data than the I/O buffer holds.
    #[error("{bytes} bytes are more than the {max}-byte I/O buffer")]
    TooLarge { bytes: u64, max: u32 },
}

impl MapError {
    /// The negative errno the ublk request completes with.
    pub fn errno(&self) -> i32 {
        match self {
            MapError::Unsupported { .. } => -libc::EOPNOTSUPP,
            MapError::Misaligned { .. } | MapError::OutOfRange { .. } => -libc::EINVAL,
            MapError::TooLarge { .. } => -libc::EINVAL,
        }
    }
}

/// Maps one ublk request onto an NVMe command of the namespace `geo` describes.
pub fn map(desc: &IoDesc, geo: &Geometry) -> Result<Request, MapError> {
    if desc.op == sys::UBLK_IO_OP_FLUSH {
        return Ok(Request::Flush);
    }
    let (lba, blocks) = blocks_of(desc, geo)?;
    match desc.op {
        sys::UBLK_IO_OP_READ | sys::UBLK_IO_OP_WRITE => {
            if desc.bytes() > u64::from(geo.max_io_bytes) {
                return Err(MapError::TooLarge {
                    bytes: desc.bytes(),
                    max: geo.max_io_bytes,
                });
            }
            Ok(if desc.op == sys::UBLK_IO_OP_READ {
                Request::Read { lba, blocks }
            } else {
                Request::Write {
                    lba,
                    blocks,
                    fua: desc.flags & sys::UBLK_IO_F_FUA != 0,
                }
            })
        }
        sys::UBLK_IO_OP_DISCARD if geo.discard && u64::from(blocks) <= MAX_DEALLOCATE_BLOCKS => {
            Ok(Request::Discard { lba, blocks })
        }
        sys::UBLK_IO_OP_WRITE_ZEROES
            if geo.write_zeroes && u64::from(blocks) <= MAX_WRITE_ZEROES_BLOCKS =>
        {
            Ok(Request::WriteZeroes {
                lba,
                blocks,
                deallocate: desc.flags & sys::UBLK_IO_F_NOUNMAP == 0,
            })
        }
        op => Err(MapError::Unsupported { op }),
    }
}

/// The request's first block and block count, checked against the namespace.
fn blocks_of(desc: &IoDesc, geo: &Geometry) -> Result<(u64, u32), MapError> {
    let per_block = u64::from(geo.block_size >> SECTOR_SHIFT);
    let (start, count) = (desc.start_sector, desc.nr_sectors);
    if start % per_block != 0 || u64::from(count) % per_block != 0 {
        return Err(MapError::Misaligned {
            start,
            count,
            block_size: geo.block_size,
        });
    }
    let lba = start / per_block;
    let blocks = u64::from(count) / per_block;
    if blocks == 0 || lba.checked_add(blocks).map_or(true, |end| end > geo.blocks) {
        return Err(MapError::OutOfRange { start, count });
    }
    Ok((lba, blocks as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GEO: Geometry = Geometry {
        block_size: 4096,
        blocks: 1024,
        max_io_bytes: 128 << 10,
        discard: true,
        write_zeroes: true,
    };

    fn desc(op: u32, flags: u32, start_sector: u64, nr_sectors: u32) -> IoDesc {
        IoDesc {
            op,
            flags,
            start_sector,
            nr_sectors,
        }
    }

    #[test]
    fn reads_and_writes_become_block_ranges() {
        assert_eq!(
            map(&desc(sys::UBLK_IO_OP_READ, 0, 16, 8), &GEO),
            Ok(Request::Read { lba: 2, blocks: 1 })
        );
        assert_eq!(
            map(
                &desc(sys::UBLK_IO_OP_WRITE, sys::UBLK_IO_F_FUA, 0, 256),
                &GEO
            ),
            Ok(Request::Write {
                lba: 0,
                blocks: 32,
                fua: true
            })
        );
        assert_eq!(
            map(&desc(sys::UBLK_IO_OP_WRITE, 0, 8, 8), &GEO),
            Ok(Request::Write {
                lba: 1,
                blocks: 1,
                fua: false
            })
        );
    }

    #[test]
    fn the_descriptor_splits_op_and_flags() {
        let iod = sys::ublksrv_io_desc {
            op_flags: sys::UBLK_IO_OP_WRITE | sys::UBLK_IO_F_FUA,
            nr_sectors: 8,
            start_sector: 24,
            ..Default::default()
        };
        let d = IoDesc::from_ublk(&iod);
        assert_eq!(d, desc(sys::UBLK_IO_OP_WRITE, sys::UBLK_IO_F_FUA, 24, 8));
        assert_eq!(d.bytes(), 4096);
    }

    #[test]
    fn flush_discard_and_write_zeroes() {
        assert_eq!(
            map(&desc(sys::UBLK_IO_OP_FLUSH, 0, 0, 0), &GEO),
            Ok(Request::Flush)
        );
        assert_eq!(
            map(&desc(sys::UBLK_IO_OP_DISCARD, 0, 80, 800), &GEO),
            Ok(Request::Discard {
                lba: 10,
                blocks: 100
            })
        );
        assert_eq!(
            map(&desc(sys::UBLK_IO_OP_WRITE_ZEROES, 0, 8, 16), &GEO),
            Ok(Request::WriteZeroes {
                lba: 1,
                blocks: 2,
                deallocate: true
            })
        );
        assert_eq!(
            map(
                &desc(sys::UBLK_IO_OP_WRITE_ZEROES, sys::UBLK_IO_F_NOUNMAP, 8, 16),
                &GEO
            ),
            Ok(Request::WriteZeroes {
                lba: 1,
                blocks: 2,
                deallocate: false
            })
        );
    }

    #[test]
    fn what_the_device_lacks_is_eopnotsupp() {
        let bare = Geometry {
            discard: false,
            write_zeroes: false,
            ..GEO
        };
        for op in [sys::UBLK_IO_OP_DISCARD, sys::UBLK_IO_OP_WRITE_ZEROES] {
            let e = map(&desc(op, 0, 0, 8), &bare).unwrap_err();
            assert_eq!(e, MapError::Unsupported { op });
            assert_eq!(e.errno(), -libc::EOPNOTSUPP);
        }
        let e = map(&desc(sys::UBLK_IO_OP_WRITE_SAME, 0, 0, 8), &GEO).unwrap_err();
        assert_eq!(e.errno(), -libc::EOPNOTSUPP);
        assert_eq!(bare.max_discard_sectors(), 0);
        assert_eq!(bare.max_write_zeroes_sectors(), 0);
    }

    #[test]
    fn misaligned_out_of_range_and_oversized_are_einval() {
        for (d, e) in [
            (
                desc(sys::UBLK_IO_OP_READ, 0, 1, 8),
                MapError::Misaligned {
                    start: 1,
                    count: 8,
                    block_size: 4096,
                },
            ),
            (
                desc(sys::UBLK_IO_OP_READ, 0, 8, 1),
                MapError::Misaligned {
                    start: 8,
                    count: 1,
                    block_size: 4096,
                },
            ),
            (
                desc(sys::UBLK_IO_OP_WRITE, 0, 1023 * 8, 16),
                MapError::OutOfRange {
                    start: 1023 * 8,
                    count: 16,
                },
            ),
            (
                desc(sys::UBLK_IO_OP_READ, 0, 0, 0),
                MapError::OutOfRange { start: 0, count: 0 },
            ),
            (
                desc(sys::UBLK_IO_OP_READ, 0, 0, 264),
                MapError::TooLarge {
                    bytes: 264 * 512,
                    max: 128 << 10,
                },
            ),
        ] {
            assert_eq!(map(&d, &GEO), Err(e));
            assert_eq!(e.errno(), -libc::EINVAL);
        }
        // The last block is in range.
        assert!(map(&desc(sys::UBLK_IO_OP_READ, 0, 1023 * 8, 8), &GEO).is_ok());
    }

    #[test]
    fn limits_are_whole_blocks_in_sectors() {
        assert_eq!(GEO.sectors(), 1024 * 8);
        assert_eq!(GEO.block_shift(), 12);
        assert_eq!(GEO.max_write_zeroes_sectors(), (1 << 16) * 8);
        assert_eq!(GEO.max_discard_sectors() % 8, 0);
        assert!(GEO.max_discard_sectors() > u32::MAX - 8);
        let small = Geometry {
            block_size: 512,
            ..GEO
        };
        assert_eq!(small.max_write_zeroes_sectors(), 1 << 16);
    }
}
