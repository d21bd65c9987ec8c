//! The running totals of one breaker, each counted in one place, with atomics: calls
//! decided without the lock count themselves, and the machine counts nothing.
//!
//! A call is counted once, when it is over: a skip when it is decided, a call made when
//! it ends (with its outcome, cancelled, or late), a reservation never used when it is
//! dropped. So `made` and `arrived` are sums of what is counted, and they add up at
//! every instant; a call still in flight is not in them yet.
//!
//! Apart from the totals, the tally keeps the count of calls an open breaker waits for
//! (a cooldown in calls): every call that reaches an open breaker whose wait is counted
//! in calls takes the next step, killed and skipped calls too.
//!
//! A skipped call writes nothing shared but its count. Counted in one word, skips from
//! several threads at once would pass that word's cache line from core to core on every
//! call, the whole cost of a skip under contention; so once two skips are seen to
//! collide, the skip counts spread over one cache line per thread group (as Java's
//! `LongAdder` does), and a snapshot sums them.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use crate::machine::{Kind, Reason, Recorded};
use crate::outcome::Outcome;
use crate::snapshot::Counts;
use crate::sync::AtomicU64;

/// See the [module docs](self). The counters most calls write come first, so that they
/// share a cache line with the breaker's reference counts, which every call writes too.
#[repr(C)]
#[derive(Default)]
pub(super) struct Tally {
    /// Closed-state calls whose success changed nothing but this count: each arrived,
    /// was made and succeeded.
    quiet_successes: AtomicU64,
    /// By [`Reason`]: open, half-open full, killed, forced open; until skips collide.
    skipped: [AtomicU64; 4],
    /// The count of calls an open breaker waits for.
    steps: AtomicU64,
    successes: AtomicU64,
    failures: AtomicU64,
    ignored: AtomicU64,
    cancelled: AtomicU64,
    late: AtomicU64,
    abandoned: AtomicU64,
    probes: AtomicU64,
    shadowed: AtomicU64,
    /// The skip counts, spread, once skips collided (see the [module docs](self)).
    spread: OnceLock<Box<[Skips]>>,
}

/// One thread group's skip counts, on a cache line of its own (two, where the hardware
/// fetches lines in pairs).
#[repr(align(128))]
#[derive(Default)]
struct Skips([AtomicU64; 4]);

/// This thread's group: threads are dealt round the groups as they first skip.
fn group(groups: usize) -> usize {
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static GROUP: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    let group = GROUP
        .try_with(|group| {
            if group.get() == usize::MAX {
                group.set(NEXT.fetch_add(1, Ordering::Relaxed));
            }
            group.get()
        })
        .unwrap_or(0);
    group % groups
}

#[inline(always)]
fn add(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

impl Tally {
    /// Takes the next step for an arriving call, and returns it.
    #[inline(always)]
    pub(super) fn take_step(&self) -> u64 {
        self.steps.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The steps taken so far.
    #[inline(always)]
    pub(super) fn steps(&self) -> u64 {
        self.steps.load(Ordering::Acquire)
    }

    /// Counts a call skipped for `reason`.
    #[inline(always)]
    pub(super) fn skipped(&self, reason: Reason) {
        let code = reason.code() as usize;
        if let Some(spread) = self.spread.get() {
            return add(&spread[group(spread.len())].0[code]);
        }
        let counter = &self.skipped[code];
        let seen = counter.load(Ordering::Relaxed);
        if counter
            .compare_exchange(seen, seen + 1, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            self.collided(code);
        }
    }

    /// Two skips collided: from now on skips are counted spread (this one too).
    #[cold]
    #[inline(never)]
    fn collided(&self, code: usize) {
        let spread = self.spread.get_or_init(|| {
            let threads = std::thread::available_parallelism().map_or(1, usize::from);
            (0..threads.next_power_of_two().clamp(2, 16))
                .map(|_| Skips::default())
                .collect()
        });
        add(&spread[group(spread.len())].0[code]);
    }

    /// The skips counted for each reason (see [`Tally::skipped`]).
    fn skips(&self) -> [u64; 4] {
        let mut skips = self.skipped.each_ref().map(get);
        for group in self.spread.get().into_iter().flatten() {
            for (total, counter) in skips.iter_mut().zip(&group.0) {
                *total += get(counter);
            }
        }
        skips
    }

    /// A closed-state call succeeded and changed nothing else.
    #[inline(always)]
    pub(super) fn quiet_success(&self) {
        add(&self.quiet_successes);
    }

    /// A call of `kind` ended with what the machine made of its outcome: counted as
    /// a success, a failure or ignored, or late (the breaker had moved on).
    pub(super) fn recorded(&self, kind: Kind, recorded: &Recorded) {
        self.made(
            kind,
            match recorded {
                Recorded::Counted { outcome, .. } => match outcome {
                    Outcome::Success => &self.successes,
                    Outcome::Failure(_) => &self.failures,
                    Outcome::Ignored => &self.ignored,
                },
                Recorded::Late => &self.late,
            },
        );
    }

    /// A call of `kind` ended without an outcome: cancelled (its future was dropped) if
    /// the wrapped service was `called`, abandoned (a reservation never used) if not.
    pub(super) fn released(&self, kind: Kind, called: bool) {
        if called {
            self.made(kind, &self.cancelled);
        } else {
            add(&self.abandoned);
        }
    }

    /// A call of `kind` was made and ended as `counter` counts.
    fn made(&self, kind: Kind, counter: &AtomicU64) {
        add(counter);
        match kind {
            Kind::Call => {}
            Kind::Probe => add(&self.probes),
            Kind::Shadow => add(&self.shadowed),
        }
    }

    pub(super) fn counts(&self) -> Counts {
        let quiet = get(&self.quiet_successes);
        let successes = quiet + get(&self.successes);
        let (failures, ignored) = (get(&self.failures), get(&self.ignored));
        let (cancelled, late) = (get(&self.cancelled), get(&self.late));
        let made = successes + failures + ignored + cancelled + late;
        // Each counter is read once, so that the sums agree with the parts.
        let skipped = self.skips();
        let abandoned = get(&self.abandoned);
        let arrived = made + skipped.iter().sum::<u64>() + abandoned;
        Counts {
            arrived,
            made,
            probes: get(&self.probes),
            skipped_open: skipped[0],
            skipped_half_open_full: skipped[1],
            skipped_killed: skipped[2],
            skipped_forced_open: skipped[3],
            abandoned,
            successes,
            failures,
            ignored,
            cancelled,
            late,
            would_have_skipped: get(&self.shadowed),
        }
    }
}

#[cfg(all(test, not(tcb_loom)))]
mod tests {
    use super::*;

    const REASONS: [Reason; 4] = [
        Reason::Open,
        Reason::HalfOpenFull,
        Reason::Killed,
        Reason::ForcedOpen,
    ];

    fn skipped(counts: &Counts) -> [u64; 4] {
        [
            counts.skipped_open,
            counts.skipped_half_open_full,
            counts.skipped_killed,
            counts.skipped_forced_open,
        ]
    }

    #[test]
    fn skips_counted_before_and_after_they_spread_add_up() {
        let tally = Tally::default();
        for (n, reason) in REASONS.into_iter().enumerate() {
            for _ in 0..=n {
                tally.skipped(reason);
            }
        }
        tally.collided(Reason::Open.code() as usize);
        assert!(tally.spread.get().is_some());
        std::thread::scope(|scope| {
            for _ in 0..5 {
                scope.spawn(|| {
                    for reason in REASONS {
                        tally.skipped(reason);
                    }
                });
            }
        });
        let counts = tally.counts();
        assert_eq!(skipped(&counts), [1 + 1 + 5, 2 + 5, 3 + 5, 4 + 5]);
        assert_eq!(counts.arrived, 1 + 1 + 5 + 2 + 5 + 3 + 5 + 4 + 5);
    }

    #[test]
    fn skips_from_many_threads_at_once_are_all_counted() {
        let tally = Tally::default();
        std::thread::scope(|scope| {
            for thread in 0..8 {
                let tally = &tally;
                scope.spawn(move || {
                    for _ in 0..20_000 {
                        tally.skipped(REASONS[thread % 4]);
                    }
                });
            }
        });
        assert_eq!(skipped(&tally.counts()), [40_000; 4]);
    }
}
