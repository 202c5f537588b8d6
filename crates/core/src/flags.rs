//! Typed flags of I/O commands, instead of positional `bool`s.

/// Flags of a Write command (NVM Command Set 1.0, 3.2.6, CDW12).
///
/// ```
/// use nvme_core::WriteFlags;
///
/// assert!(!WriteFlags::NONE.fua());
/// assert!(WriteFlags::FUA.fua());
/// assert_eq!(WriteFlags::default().with_fua(true), WriteFlags::FUA);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WriteFlags {
    fua: bool,
}

impl WriteFlags {
    /// No flags: the controller may complete the write from its volatile write cache.
    pub const NONE: Self = Self { fua: false };
    /// Force Unit Access: the data is on non-volatile media before the command completes.
    pub const FUA: Self = Self { fua: true };

    /// Whether Force Unit Access is set.
    #[inline(always)]
    pub const fn fua(self) -> bool {
        self.fua
    }

    /// These flags with Force Unit Access set to `fua`.
    #[inline(always)]
    pub const fn with_fua(self, fua: bool) -> Self {
        Self { fua }
    }
}
