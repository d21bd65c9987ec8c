//! The synchronisation primitives the breaker's shared state is built on: the standard
//! library's, or, under `--cfg tcb_loom`, loom's, so that `tests/loom.rs` can check every
//! interleaving of admission, recording and the kill switch.

#[cfg(tcb_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU64};
#[cfg(tcb_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

#[cfg(not(tcb_loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU64};
#[cfg(not(tcb_loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};
