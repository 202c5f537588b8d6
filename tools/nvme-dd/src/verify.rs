//! `--verify-through DEVICE`: after a write to `nvme:NSID`, read the written range back
//! through a second controller and compare it with the input, in the same process: one
//! namespace, two paths (NVMe Base 2.0 §2.4.1). Before anything is written the second
//! controller must reach the same namespace ([`NamespaceIdentity::same_namespace`]: one
//! subsystem NQN, another CNTLID, a shared namespace with the same identifiers); otherwise
//! nothing is written and the error says why.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use nvme_driver::multipath::NotSameNamespace;
use nvme_driver::{IoQueue, QueuePairOptions};
use nvme_tool_support::AnyController;

/// Why `--verify-through` failed.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error(
        "--verify-through needs of=nvme:NSID and if= a regular file (the input is read again \
         to compare), not {what}"
    )]
    NotAFile { what: String },
    #[error(
        "--verify-through {device}: it does not reach the namespace {nsid} being written \
         (nothing was written): {reason}"
    )]
    NotSameNamespace {
        device: String,
        nsid: u32,
        #[source]
        reason: NotSameNamespace,
    },
    #[error("--verify-through: cannot read {path} again to compare: {source}")]
    Reread {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "--verify-through {device}: byte {offset} of the written range differs: wrote \
         {wrote:#04x}, read {read:#04x} through controller {cntlid}"
    )]
    Mismatch {
        device: String,
        offset: u64,
        wrote: u8,
        read: u8,
        cntlid: u16,
    },
    #[error("--verify-through {device}: {source}")]
    Driver {
        device: String,
        #[source]
        source: nvme_driver::Error,
    },
}

/// The second controller, checked to reach the namespace being written.
pub struct VerifyPath {
    /// Its device string.
    pub device: String,
    /// The controller.
    pub ctrl: AnyController,
    /// Its Controller ID.
    pub cntlid: u16,
}

impl VerifyPath {
    /// Checks that `other` (opened from `device`) reaches namespace `nsid` of `first`.
    pub fn check(
        first: &AnyController,
        other: AnyController,
        device: &str,
        nsid: u32,
    ) -> Result<Self, VerifyError> {
        let driver = |source| VerifyError::Driver {
            device: device.to_string(),
            source,
        };
        let a = first.namespace_identity(nsid).map_err(driver)?;
        let b = other.namespace_identity(nsid).map_err(driver)?;
        a.same_namespace(&b)
            .map_err(|reason| VerifyError::NotSameNamespace {
                device: device.to_string(),
                nsid,
                reason,
            })?;
        Ok(VerifyPath {
            device: device.to_string(),
            ctrl: other,
            cntlid: b.cntlid,
        })
    }

    /// Reads `bytes` bytes from `start_lba` of namespace `nsid` through this controller, `bs`
    /// bytes a command, and compares them with `input` from `skip_bytes` on.
    pub fn read_back(
        &self,
        nsid: u32,
        start_lba: u64,
        bytes: u64,
        bs: usize,
        input: &Path,
        skip_bytes: u64,
    ) -> Result<(), VerifyError> {
        let driver = |source| VerifyError::Driver {
            device: self.device.clone(),
            source,
        };
        let reread = |source| VerifyError::Reread {
            path: input.to_path_buf(),
            source,
        };
        let ns = self.ctrl.namespace(nsid).map_err(driver)?;
        let block = u64::from(ns.block_size());
        let mut qp = self
            .ctrl
            .create_queue_pair(QueuePairOptions::default())
            .map_err(driver)?;
        let mut buf = self.ctrl.alloc_buffer(bs).map_err(driver)?;
        let mut file = File::open(input).map_err(reread)?;
        file.seek(SeekFrom::Start(skip_bytes)).map_err(reread)?;
        let mut want = vec![0u8; bs];
        let (mut done, mut lba) = (0u64, start_lba);
        while done < bytes {
            // bs is a whole number of blocks (the plan checked it); the last piece may be
            // shorter, padded to whole blocks on the medium.
            let chunk = (bytes - done).min(bs as u64);
            let blocks = chunk.div_ceil(block);
            buf = qp
                .read(&ns, lba, blocks as u32, buf)
                .map_err(|f| driver(f.error))?;
            let chunk = chunk as usize;
            file.read_exact(&mut want[..chunk]).map_err(reread)?;
            if let Some(i) = (0..chunk).find(|&i| buf[i] != want[i]) {
                return Err(VerifyError::Mismatch {
                    device: self.device.clone(),
                    offset: done + i as u64,
                    wrote: want[i],
                    read: buf[i],
                    cntlid: self.cntlid,
                });
            }
            done += chunk as u64;
            lba += blocks;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_driver::{Controller, ControllerOptions, Transport, WriteFlags};
    use nvme_sim::{SimConfig, SimController};

    fn open(sim: &SimController) -> AnyController {
        Controller::new(
            Transport::new(sim.mmio(), sim.dma(), "sim"),
            ControllerOptions::default(),
        )
        .expect("bring-up on the emulator")
        .into()
    }

    /// Two controllers of one subsystem (namespace 1: 512-byte blocks, shared) and a file of
    /// `len` pattern bytes written through the first at LBA 8.
    fn written(
        len: usize,
    ) -> (
        SimController,
        SimController,
        AnyController,
        AnyController,
        PathBuf,
    ) {
        let sim_a = SimController::start(SimConfig::subsystem_member(0));
        let sim_b = sim_a.start_sibling(SimConfig::subsystem_member(1));
        let (a, b) = (open(&sim_a), open(&sim_b));
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        let path =
            std::env::temp_dir().join(format!("nvme-dd-verify-{}-{len}", std::process::id()));
        std::fs::write(&path, &data).unwrap();
        let ns = a.namespace(1).unwrap();
        let mut qp = a.create_queue_pair(QueuePairOptions::default()).unwrap();
        let mut buf = a.alloc_buffer(len.next_multiple_of(512)).unwrap();
        buf[..len].copy_from_slice(&data);
        let blocks = len.div_ceil(512) as u32;
        qp.write(&ns, 8, blocks, buf, WriteFlags::NONE).unwrap();
        (sim_a, sim_b, a, b, path)
    }

    #[test]
    fn reads_back_through_the_other_controller() {
        let (_sa, _sb, a, b, path) = written(5000);
        let v = VerifyPath::check(&a, b, "B", 1).unwrap();
        assert_eq!(v.cntlid, 1);
        // 5000 bytes in records of 2048: the last piece is partial.
        v.read_back(1, 8, 5000, 2048, &path, 0).unwrap();
        // One record further on, the medium holds other bytes: a mismatch, with its offset.
        let e = v.read_back(1, 12, 5000, 2048, &path, 0).unwrap_err();
        assert!(matches!(e, VerifyError::Mismatch { cntlid: 1, .. }), "{e}");
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn refuses_a_controller_of_another_subsystem() {
        let (_sa, _sb, a, _b, path) = written(512);
        let lone = SimController::start(SimConfig {
            subnqn: "nqn.2026-01.io.example:other".into(),
            ..SimConfig::default()
        });
        let e = VerifyPath::check(&a, open(&lone), "C", 1).err().unwrap();
        assert!(
            matches!(
                e,
                VerifyError::NotSameNamespace {
                    reason: NotSameNamespace::DifferentSubsystem { .. },
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("nothing was written"), "{e}");
        std::fs::remove_file(path).unwrap();
    }
}
