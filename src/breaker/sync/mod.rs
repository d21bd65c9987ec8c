//! The synchronisation primitives the breaker's shared state is built on: the standard
//! library's, or, under `--cfg tcb_loom`, loom's, so that `tests/loom.rs` can check every
//! interleaving of admission, recording and the kill switch; and, built on them, the
//! ordered [`delivery`] of a breaker's events.

pub(in crate::breaker) mod delivery;

#[cfg(tcb_loom)]
pub(in crate::breaker) use loom::sync::atomic::{fence, AtomicBool, AtomicU64};
#[cfg(tcb_loom)]
pub(in crate::breaker) use loom::sync::{Mutex, MutexGuard};

#[cfg(not(tcb_loom))]
pub(in crate::breaker) use std::sync::atomic::{fence, AtomicBool, AtomicU64};
#[cfg(not(tcb_loom))]
pub(in crate::breaker) use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, going on through a poisoned lock: a panic while it was held (no user
/// code runs under the breaker's locks: a panic in its own bookkeeping) left a state
/// that is still the best there is, and the breaker goes on with it rather than taking
/// every call down.
pub(in crate::breaker) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
