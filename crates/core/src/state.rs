//! The controller state word both transports keep: one atomic `u64` with the flags below in
//! its low bits, any transport-specific flags above them, and a reset generation above all
//! flags. A queue pair keeps the value its queues were created under and compares it on every
//! submission and poll (one load): any difference takes the cold path (refuse the submission,
//! or recover after a reset).
//!
//! One definition for every transport, so that "failed" and "resetting" mean the same bit
//! everywhere. A transport's own flags start at [`STATE_TRANSPORT_FLAGS`].

/// State word bit: the controller failed; unusable until a reset succeeds.
pub const STATE_FAILED: u64 = 1;

/// State word bit: a reset is running; submissions are refused (retryable).
pub const STATE_RESETTING: u64 = 2;

/// The lowest bit a transport may use for flags of its own (NVMe/TCP: "association lost");
/// its reset generation counts in units of the bit above its last flag.
pub const STATE_TRANSPORT_FLAGS: u64 = 4;
