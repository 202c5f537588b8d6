//! The counting global allocator of the `no_alloc` tests (driver and NVMe/TCP), included by
//! path: it counts the allocations and reallocations of the calling thread only, so the
//! emulator's or the fake target's threads do not disturb the count.
//!
//! Use: `#[path = "../../../tests/support/counting_alloc.rs"] mod counting_alloc;` in the test
//! file (the `#[global_allocator]` below then serves that test binary), then
//! `counting_alloc::allocations()` before and after the measured loop.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

pub struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; the counter is a
// thread-local `Cell` with const initialisation, so touching it never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations (and reallocations) made so far by the calling thread.
pub fn allocations() -> u64 {
    ALLOCATIONS.with(|c| c.get())
}
