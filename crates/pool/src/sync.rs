//! Synchronisation shims: `loom`'s model-checked primitives under `cfg(loom)`, `std`'s otherwise.
//! Every atomic in this crate is reached through this module so the loom tests check the real code.

#[cfg(loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicPtr, AtomicU32, Ordering},
    Arc,
};

#[cfg(not(loom))]
pub(crate) use std::sync::{
    atomic::{AtomicPtr, AtomicU32, Ordering},
    Arc,
};
