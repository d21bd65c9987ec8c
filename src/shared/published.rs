//! The machine's door, published for calls to read without the machine's lock.
//!
//! The door is written under the machine's lock after every change (one writer), as
//! four atomics behind a sequence number (a seqlock): a reader that sees the sequence
//! unchanged around its reads has read one whole door, exactly as the machine derived
//! it; one that does not decides under the lock instead. A closed door, and a half-open
//! one without a dwell limit, fit in one word, which is read alone.

use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::machine::door::{Door, Due, Entry, Epoch};
use crate::sync::{fence, AtomicU64};

/// A door in four words. See the [module docs](self).
pub(super) struct Published {
    /// Odd while a door is being written.
    seq: AtomicU64,
    /// `epoch << 8 | flags`; see [`Word`].
    word: AtomicU64,
    /// An open door's step.
    step: AtomicU64,
    /// An open door's time, or a half-open door's dwell limit (see [`nanos`]).
    time: AtomicU64,
}

/// The flags of a published door's word.
struct Word;

impl Word {
    const CLOSED: u64 = 0;
    const OPEN: u64 = 1;
    const HALF_OPEN: u64 = 2;
    const KIND: u64 = 3;
    /// Closed: quiet; open: forced; half-open: a slot is free.
    const FLAG: u64 = 1 << 2;
    /// Open: due never.
    const NEVER: u64 = 1 << 3;
    const HAS_STEP: u64 = 1 << 4;
    const HAS_TIME: u64 = 1 << 5;
    const EPOCH_SHIFT: u32 = 8;
}

/// The door's word, step and time.
fn pack(door: &Door) -> (u64, u64, u64) {
    let flag = |on: bool| if on { Word::FLAG } else { 0 };
    let time = |at: Option<Instant>| at.map_or((0, 0), |at| (Word::HAS_TIME, nanos(at)));
    let (flags, step, time) = match door.entry {
        Entry::Closed { quiet } => (Word::CLOSED | flag(quiet), 0, 0),
        Entry::Open {
            due: Due::Never,
            forced,
        } => (Word::OPEN | flag(forced) | Word::NEVER, 0, 0),
        Entry::Open {
            due: Due::At { step, time: at },
            forced,
        } => {
            let (has_time, at) = time(at);
            let has_step = if step.is_some() { Word::HAS_STEP } else { 0 };
            let flags = Word::OPEN | flag(forced) | has_step | has_time;
            (flags, step.unwrap_or(0), at)
        }
        Entry::HalfOpen { free, until } => {
            let (has_time, at) = time(until);
            (Word::HALF_OPEN | flag(free) | has_time, 0, at)
        }
    };
    (door.epoch.bits() << Word::EPOCH_SHIFT | flags, step, time)
}

/// The door [`pack`] packed.
fn unpack(word: u64, step: u64, time: u64) -> Door {
    let flag = word & Word::FLAG != 0;
    let time = (word & Word::HAS_TIME != 0).then(|| instant(time));
    let entry = match word & Word::KIND {
        Word::CLOSED => Entry::Closed { quiet: flag },
        Word::OPEN if word & Word::NEVER != 0 => Entry::Open {
            due: Due::Never,
            forced: flag,
        },
        Word::OPEN => Entry::Open {
            due: Due::At {
                step: (word & Word::HAS_STEP != 0).then_some(step),
                time,
            },
            forced: flag,
        },
        _ => Entry::HalfOpen {
            free: flag,
            until: time,
        },
    };
    Door {
        epoch: Epoch::from_bits(word >> Word::EPOCH_SHIFT),
        entry,
    }
}

/// Whether the word alone is the whole door.
fn alone(word: u64) -> bool {
    word & Word::KIND == Word::CLOSED || word & (Word::KIND | Word::HAS_TIME) == Word::HALF_OPEN
}

impl Published {
    pub(super) fn new(door: &Door) -> Self {
        let (word, step, time) = pack(door);
        Published {
            seq: AtomicU64::new(0),
            word: AtomicU64::new(word),
            step: AtomicU64::new(step),
            time: AtomicU64::new(time),
        }
    }

    /// Publishes `door`. Only under the machine's lock: there is one writer.
    pub(super) fn store(&self, door: &Door) {
        let (word, step, time) = pack(door);
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        self.step.store(step, Ordering::Relaxed);
        self.time.store(time, Ordering::Relaxed);
        self.word.store(word, Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(2), Ordering::Release);
    }

    /// The door as last published, or `None` while it is being written.
    #[inline]
    pub(super) fn load(&self) -> Option<Door> {
        let word = self.word.load(Ordering::Acquire);
        if alone(word) {
            return Some(unpack(word, 0, 0));
        }
        self.load_whole()
    }

    fn load_whole(&self) -> Option<Door> {
        let seq = self.seq.load(Ordering::Acquire);
        if seq & 1 != 0 {
            return None;
        }
        let word = self.word.load(Ordering::Relaxed);
        let step = self.step.load(Ordering::Relaxed);
        let time = self.time.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        (self.seq.load(Ordering::Relaxed) == seq).then(|| unpack(word, step, time))
    }
}

/// What published times count from: an instant taken once per process. Times before it
/// (a paused test clock may stand before it) are negative.
fn anchor() -> Instant {
    static ANCHOR: OnceLock<Instant> = OnceLock::new();
    *ANCHOR.get_or_init(Instant::now)
}

/// `at` as signed nanoseconds from the anchor, in a word: exact for 292 years either way
/// (the machine never sets a time further off than a century).
fn nanos(at: Instant) -> u64 {
    let anchor = anchor();
    let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    let signed = match at.checked_duration_since(anchor) {
        Some(after) => nanos(after),
        None => -nanos(anchor.saturating_duration_since(at)),
    };
    signed as u64
}

/// The instant [`nanos`] gave this word for.
fn instant(word: u64) -> Instant {
    let signed = word as i64;
    let by = Duration::from_nanos(signed.unsigned_abs());
    let anchor = anchor();
    let at = if signed >= 0 {
        anchor.checked_add(by)
    } else {
        anchor.checked_sub(by)
    };
    at.unwrap_or(anchor)
}

#[cfg(all(test, not(tcb_loom)))]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::machine::Mode;

    fn doors() -> impl Strategy<Value = Door> {
        let time = proptest::option::of(-(1i64 << 61)..(1i64 << 61));
        let at = |t: Option<i64>| {
            t.map(|nanos| {
                let by = Duration::from_nanos(nanos.unsigned_abs());
                if nanos >= 0 {
                    anchor() + by
                } else {
                    anchor().checked_sub(by).unwrap_or(anchor())
                }
            })
        };
        let entry = prop_oneof![
            any::<bool>().prop_map(|quiet| Entry::Closed { quiet }),
            any::<bool>().prop_map(|forced| Entry::Open {
                due: Due::Never,
                forced
            }),
            (proptest::option::of(1u64..), time.clone(), any::<bool>()).prop_map(
                move |(step, t, forced)| Entry::Open {
                    due: Due::At { step, time: at(t) },
                    forced
                }
            ),
            (any::<bool>(), time).prop_map(move |(free, t)| Entry::HalfOpen { free, until: at(t) }),
        ];
        let mode = prop_oneof![
            Just(Mode::Enabled),
            Just(Mode::ObserveOnly),
            Just(Mode::Disabled)
        ];
        (0u64..1 << 54, mode, entry).prop_map(|(generation, mode, entry)| Door {
            epoch: Epoch::new(generation, mode),
            entry,
        })
    }

    proptest! {
        #[test]
        fn a_published_door_reads_back_exactly_as_the_machine_derived_it(door in doors(), before in doors()) {
            let published = Published::new(&before);
            published.store(&door);
            prop_assert_eq!(published.load(), Some(door));
        }
    }
}
