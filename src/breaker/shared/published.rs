//! The machine's door, published for calls to read without the machine's lock.
//!
//! The door's three words are written under the machine's lock after every change (one
//! writer), behind a sequence number (a seqlock): a reader that sees the sequence
//! unchanged around its reads has read one whole door, exactly as the machine derived
//! it; one that does not decides under the lock instead. A closed door, and a half-open
//! one without a deadline, are their first word alone, which is read alone.

// Each `#[inline(always)]` here pays in the awaited benchmark (the shared state:
// docs/performance.md, "Inlining").
use std::sync::atomic::Ordering;

use crate::breaker::machine::door::Door;
use crate::breaker::sync::{fence, AtomicU64};

/// A door behind a sequence number. See the [module docs](self).
pub(super) struct Published {
    /// Odd while a door is being written.
    seq: AtomicU64,
    word: AtomicU64,
    step: AtomicU64,
    time: AtomicU64,
}

impl Published {
    pub(super) fn new(door: &Door) -> Self {
        Published {
            seq: AtomicU64::new(0),
            word: AtomicU64::new(door.word),
            step: AtomicU64::new(door.step),
            time: AtomicU64::new(door.time as u64),
        }
    }

    /// Publishes `door`. Only under the machine's lock: there is one writer.
    pub(super) fn store(&self, door: &Door) {
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        self.step.store(door.step, Ordering::Relaxed);
        self.time.store(door.time as u64, Ordering::Relaxed);
        self.word.store(door.word, Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(2), Ordering::Release);
    }

    /// The first word of the door as last published: enough for what depends on the
    /// epoch and the flags alone.
    #[inline(always)]
    pub(super) fn word(&self) -> u64 {
        self.word.load(Ordering::Acquire)
    }

    /// The door as last published if it is its first word alone.
    #[inline(always)]
    pub(super) fn load_alone(&self) -> Option<Door> {
        let word = self.word.load(Ordering::Acquire);
        Door::word_alone(word).then_some(Door::alone(word))
    }

    /// The door as last published, whatever it is, or `None` while it is being written.
    #[inline]
    pub(super) fn load_whole(&self) -> Option<Door> {
        let seq = self.seq.load(Ordering::Acquire);
        if seq & 1 != 0 {
            return None;
        }
        let word = self.word.load(Ordering::Relaxed);
        let step = self.step.load(Ordering::Relaxed);
        let time = self.time.load(Ordering::Relaxed) as i64;
        fence(Ordering::Acquire);
        (self.seq.load(Ordering::Relaxed) == seq).then_some(Door { word, step, time })
    }
}
