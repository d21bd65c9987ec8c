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

use std::sync::atomic::Ordering;

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
    /// By [`Reason`]: open, half-open full, killed, forced open.
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

    #[inline(always)]
    pub(super) fn skipped(&self, reason: Reason) {
        add(&self.skipped[reason.code() as usize]);
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
        let skipped = self.skipped.each_ref().map(get);
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
