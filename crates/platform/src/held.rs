//! Memory one owner keeps allocated while another reads it: a latency buffer's ring lent to a
//! sink that writes from it after the borrow ended (io_uring's zero-copy writes).

use std::ops::Range;

/// Memory that stays allocated for as long as this owner of it lives (a latency buffer's ring):
/// what a sink holds to write from it after the borrow the caller lent ended.
pub trait HeldMemory: Send + Sync {
    /// The addresses of the memory held.
    fn address_range(&self) -> Range<usize>;
}

/// A shared hold on memory: while a clone of it lives, the memory stays allocated.
pub type Hold = std::sync::Arc<dyn HeldMemory>;
