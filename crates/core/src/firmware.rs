//! Firmware update over the typed admin primitive: how an image is cut into Firmware Image
//! Download pieces (NVMe Base 2.0 §5.13) and what a Firmware Commit's completion means
//! (§5.12). The commands themselves are [`crate::AdminCommands::firmware_download`] and
//! [`crate::AdminCommands::firmware_commit`]; both are refused before anything is sent when
//! Identify Controller OACS bit 2 is clear.
//!
//! Pieces: each at most the controller's largest transfer (MDTS) and the caller's chunk size,
//! a whole number of dwords, and, where Identify Controller FWUG states a granularity, at an
//! offset and of a size that are multiples of it (only the image's last piece may be
//! shorter, ending where the image does).

use nvme_spec::firmware::{self, CommitOutcome, FirmwareCommit, FirmwareStatus, Fwug};
use nvme_spec::firmware::{DWORD_BYTES, MAX_FIRMWARE_SLOT};

use crate::admin::{AdminCommand, AdminData};
use crate::error::{Error, Result};

/// Why an image, its offset or the chunk size cannot be sent as Firmware Image Download
/// pieces (nothing was sent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FirmwareImageError {
    /// The image is empty.
    #[error("the firmware image is empty: give the image file's bytes")]
    Empty,
    /// The image's length is not a whole number of dwords.
    #[error(
        "the firmware image is {len} bytes, not a multiple of 4 (Firmware Image Download \
         moves whole dwords): check the file is the vendor's image, unpadded images are not \
         valid"
    )]
    LengthNotDwords {
        /// The image's length in bytes.
        len: usize,
    },
    /// The offset is not a whole number of dwords.
    #[error("offset {offset} is not a multiple of 4 bytes (OFST counts dwords)")]
    OffsetNotDwords {
        /// The offset in bytes.
        offset: u64,
    },
    /// The offset is not a multiple of the controller's update granularity.
    #[error(
        "offset {offset} is not a multiple of the controller's firmware update granularity \
         ({granularity} bytes, Identify Controller FWUG)"
    )]
    OffsetNotGranular {
        /// The offset in bytes.
        offset: u64,
        /// FWUG in bytes.
        granularity: usize,
    },
    /// The chunk size is not a whole number of dwords.
    #[error("transfer size {chunk} is not a multiple of 4 bytes")]
    ChunkNotDwords {
        /// The chunk size asked for.
        chunk: usize,
    },
    /// No piece fits both the largest transfer and the update granularity.
    #[error(
        "a piece can be at most {limit} bytes ({why}), less than the controller's firmware \
         update granularity of {granularity} bytes (FWUG): give a transfer size that is a \
         multiple of {granularity}"
    )]
    ChunkBelowGranularity {
        /// The largest piece allowed.
        limit: usize,
        /// What sets the limit.
        why: &'static str,
        /// FWUG in bytes.
        granularity: usize,
    },
    /// The image ends beyond what OFST (32 bits of dwords) can address.
    #[error("the image would end at byte {end}, beyond the 16 GiB OFST can address")]
    TooLarge {
        /// The end of the image in bytes.
        end: u64,
    },
}

/// One Firmware Image Download: `len` bytes of the image at byte `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirmwarePiece {
    /// Byte offset in the image (a multiple of 4).
    pub offset: u64,
    /// Bytes (a multiple of 4).
    pub len: usize,
}

/// The pieces that send `len` bytes of an image at byte `offset`, for a controller whose
/// largest transfer is `max_transfer` bytes and whose FWUG is `fwug`, with at most `chunk`
/// bytes per piece when given.
pub fn plan_pieces(
    offset: u64,
    len: usize,
    max_transfer: usize,
    fwug: Fwug,
    chunk: Option<usize>,
) -> std::result::Result<Vec<FirmwarePiece>, FirmwareImageError> {
    if len == 0 {
        return Err(FirmwareImageError::Empty);
    }
    if len % DWORD_BYTES != 0 {
        return Err(FirmwareImageError::LengthNotDwords { len });
    }
    if offset % DWORD_BYTES as u64 != 0 {
        return Err(FirmwareImageError::OffsetNotDwords { offset });
    }
    let end = offset.saturating_add(len as u64);
    // The last dword's offset must fit OFST.
    if (end - DWORD_BYTES as u64) / DWORD_BYTES as u64 > u64::from(u32::MAX) {
        return Err(FirmwareImageError::TooLarge { end });
    }
    if let Some(c) = chunk.filter(|c| c % DWORD_BYTES != 0 || *c == 0) {
        return Err(FirmwareImageError::ChunkNotDwords { chunk: c });
    }
    let (mut limit, mut why) = (max_transfer, "the controller's MDTS");
    if let Some(c) = chunk.filter(|&c| c < max_transfer) {
        (limit, why) = (c, "the transfer size given");
    }
    // The transport's limit need not be a whole number of dwords.
    let mut piece = limit / DWORD_BYTES * DWORD_BYTES;
    if let Some(granularity) = fwug.bytes() {
        if offset % granularity as u64 != 0 {
            return Err(FirmwareImageError::OffsetNotGranular {
                offset,
                granularity,
            });
        }
        piece = piece / granularity * granularity;
        if piece == 0 {
            return Err(FirmwareImageError::ChunkBelowGranularity {
                limit,
                why,
                granularity,
            });
        }
    }
    if piece == 0 {
        return Err(FirmwareImageError::ChunkNotDwords { chunk: limit });
    }
    let mut pieces = Vec::with_capacity(len.div_ceil(piece));
    let mut done = 0;
    while done < len {
        let n = piece.min(len - done);
        pieces.push(FirmwarePiece {
            offset: offset + done as u64,
            len: n,
        });
        done += n;
    }
    Ok(pieces)
}

impl AdminCommand {
    /// Firmware Image Download (§5.13) of `data` (a non-empty multiple of 4 bytes) at byte
    /// `offset` (a multiple of 4) of the image; [`plan_pieces`] cuts an image into these.
    pub fn firmware_image_download(offset: u64, data: &[u8]) -> Result<Self> {
        let bad = |e| Error::FirmwareImage(e);
        if data.is_empty() {
            return Err(bad(FirmwareImageError::Empty));
        }
        if data.len() % DWORD_BYTES != 0 {
            return Err(bad(FirmwareImageError::LengthNotDwords { len: data.len() }));
        }
        if offset % DWORD_BYTES as u64 != 0 {
            return Err(bad(FirmwareImageError::OffsetNotDwords { offset }));
        }
        let end = offset.saturating_add(data.len() as u64);
        let ofst = u32::try_from(offset / DWORD_BYTES as u64)
            .map_err(|_| bad(FirmwareImageError::TooLarge { end }))?;
        let dwords = u32::try_from(data.len() / DWORD_BYTES)
            .map_err(|_| bad(FirmwareImageError::TooLarge { end }))?;
        Ok(AdminCommand::from_parts(
            firmware::firmware_image_download(ofst, dwords),
            AdminData::ToDevice(data.to_vec()),
        ))
    }

    /// Firmware Commit (§5.12) with `commit`: no data. A slot above 7 is refused.
    pub fn firmware_commit(commit: &FirmwareCommit) -> Result<Self> {
        if commit.slot > MAX_FIRMWARE_SLOT {
            return Err(Error::InvalidRequest(format!(
                "firmware slot {} does not exist: slots are 1..={MAX_FIRMWARE_SLOT} (0 lets \
                 the controller choose)",
                commit.slot
            )));
        }
        Ok(AdminCommand::from_parts(
            firmware::firmware_commit(commit),
            AdminData::None,
        ))
    }
}

/// A firmware command's error, with the firmware statuses typed ([`Error::Firmware`]).
pub(crate) fn typed_error(command: &'static str, e: Error) -> Error {
    match e.status().and_then(FirmwareStatus::from_status) {
        Some(kind) => Error::Firmware {
            command,
            status: e.status().expect("checked above"),
            kind,
        },
        None => e,
    }
}

/// What Firmware Commit with `commit` did, from how the command ended: success per the
/// action, the three "activation requires a reset" statuses as
/// [`CommitOutcome::RequiresReset`] (the image is committed), every other failure an error.
pub(crate) fn commit_outcome(
    commit: &FirmwareCommit,
    result: Result<crate::admin::AdminReply>,
) -> Result<CommitOutcome> {
    match result {
        Ok(_) => Ok(commit.action.success()),
        Err(e) => match typed_error("Firmware Commit", e) {
            Error::Firmware { kind, .. } if kind.activation_reset().is_some() => Ok(
                CommitOutcome::RequiresReset(kind.activation_reset().expect("checked")),
            ),
            e => Err(e),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_spec::firmware::{ActivationReset, CommitAction};
    use nvme_spec::Status;

    fn plan(
        offset: u64,
        len: usize,
        mdts: usize,
        fwug: Fwug,
        chunk: Option<usize>,
    ) -> std::result::Result<Vec<(u64, usize)>, FirmwareImageError> {
        plan_pieces(offset, len, mdts, fwug, chunk)
            .map(|p| p.into_iter().map(|p| (p.offset, p.len)).collect())
    }

    #[test]
    fn pieces_respect_mdts_chunk_and_granularity() {
        // 20 KiB at 0 with MDTS 8 KiB: 8 + 8 + 4 KiB.
        assert_eq!(
            plan(0, 20 << 10, 8 << 10, Fwug::NoRestriction, None).unwrap(),
            vec![(0, 8192), (8192, 8192), (16384, 4096)]
        );
        // A smaller chunk wins; a larger one is cut to MDTS.
        assert_eq!(
            plan(4096, 8192, 8 << 10, Fwug::NoInformation, Some(4096)).unwrap(),
            vec![(4096, 4096), (8192, 4096)]
        );
        assert_eq!(
            plan(0, 16384, 8192, Fwug::NoRestriction, Some(1 << 20)).unwrap(),
            vec![(0, 8192), (8192, 8192)]
        );
        // FWUG 8 KiB with MDTS 12 KiB: pieces of 8 KiB, the last shorter.
        assert_eq!(
            plan(0, 20 << 10, 12 << 10, Fwug::Bytes(8192), None).unwrap(),
            vec![(0, 8192), (8192, 8192), (16384, 4096)]
        );
        // Dword-sized pieces where nothing restricts them.
        assert_eq!(
            plan(8, 12, 1 << 20, Fwug::NoRestriction, Some(4)).unwrap(),
            vec![(8, 4), (12, 4), (16, 4)]
        );
    }

    #[test]
    fn bad_layouts_are_typed() {
        let no = Fwug::NoRestriction;
        assert_eq!(plan(0, 0, 4096, no, None), Err(FirmwareImageError::Empty));
        assert_eq!(
            plan(0, 4097, 8192, no, None),
            Err(FirmwareImageError::LengthNotDwords { len: 4097 })
        );
        assert_eq!(
            plan(2, 4096, 8192, no, None),
            Err(FirmwareImageError::OffsetNotDwords { offset: 2 })
        );
        assert_eq!(
            plan(0, 4096, 8192, no, Some(6)),
            Err(FirmwareImageError::ChunkNotDwords { chunk: 6 })
        );
        assert_eq!(
            plan(4096, 8192, 8192, Fwug::Bytes(8192), None),
            Err(FirmwareImageError::OffsetNotGranular {
                offset: 4096,
                granularity: 8192
            })
        );
        let e = plan(0, 8192, 4096, Fwug::Bytes(8192), None).unwrap_err();
        assert_eq!(
            e,
            FirmwareImageError::ChunkBelowGranularity {
                limit: 4096,
                why: "the controller's MDTS",
                granularity: 8192
            }
        );
        assert!(e.to_string().contains("multiple of 8192"), "{e}");
        let e = plan(0, 8192, 1 << 20, Fwug::Bytes(8192), Some(4096)).unwrap_err();
        assert!(e.to_string().contains("transfer size given"), "{e}");
        assert!(matches!(
            plan(16 << 30, 4096, 4096, no, None),
            Err(FirmwareImageError::TooLarge { .. })
        ));
        // The last dword at OFST u32::MAX still fits.
        assert!(plan((u64::from(u32::MAX)) * 4, 4, 4096, no, None).is_ok());
    }

    #[test]
    fn commands_carry_their_data_and_refusals() {
        let c = AdminCommand::firmware_image_download(8192, &[7u8; 4096]).unwrap();
        assert_eq!((c.sqe().cdw10, c.sqe().cdw11), (1023, 2048));
        assert!(matches!(c.data(), AdminData::ToDevice(d) if d.len() == 4096));
        assert!(matches!(
            AdminCommand::firmware_image_download(0, &[0; 6]),
            Err(Error::FirmwareImage(FirmwareImageError::LengthNotDwords {
                len: 6
            }))
        ));
        assert!(AdminCommand::firmware_image_download(1, &[0; 4]).is_err());
        assert!(AdminCommand::firmware_image_download(0, &[]).is_err());
        let commit = FirmwareCommit::new(8, CommitAction::Replace);
        let e = AdminCommand::firmware_commit(&commit).unwrap_err();
        assert!(e.to_string().contains("slot 8 does not exist"), "{e}");
        let commit = FirmwareCommit::new(2, CommitAction::ActivateAtReset);
        let c = AdminCommand::firmware_commit(&commit).unwrap();
        assert_eq!(c.sqe().cdw10, 2 | 2 << 3);
        assert!(c.data().is_empty());
    }

    #[test]
    fn commit_statuses_become_outcomes_or_typed_errors() {
        let commit = FirmwareCommit::new(2, CommitAction::ReplaceAndActivateNow);
        let failed = |kind: FirmwareStatus| {
            Err(Error::Command {
                command: "Firmware Commit",
                status: kind.status(),
            })
        };
        assert_eq!(
            commit_outcome(
                &commit,
                Ok(crate::admin::AdminReply {
                    dw0: 0,
                    data: vec![]
                })
            )
            .unwrap(),
            CommitOutcome::Activated
        );
        assert_eq!(
            commit_outcome(&commit, failed(FirmwareStatus::RequiresControllerReset)).unwrap(),
            CommitOutcome::RequiresReset(ActivationReset::ControllerLevel)
        );
        assert_eq!(
            commit_outcome(&commit, failed(FirmwareStatus::RequiresConventionalReset)).unwrap(),
            CommitOutcome::RequiresReset(ActivationReset::Conventional)
        );
        match commit_outcome(&commit, failed(FirmwareStatus::InvalidSlot)) {
            Err(e @ Error::Firmware { .. }) => {
                assert!(e.to_string().contains("Invalid Firmware Slot"), "{e}");
                assert!(e.to_string().contains("pick a slot"), "{e}");
                assert_eq!(e.status(), Some(FirmwareStatus::InvalidSlot.status()));
                assert!(!e.is_retryable());
            }
            other => panic!("{other:?}"),
        }
        // A status that is not a firmware one stays as it was.
        let generic = Err(Error::Command {
            command: "Firmware Commit",
            status: Status::new(0, 0x02, true),
        });
        assert!(matches!(
            commit_outcome(&commit, generic),
            Err(Error::Command { .. })
        ));
    }
}
