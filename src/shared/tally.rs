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

use crate::machine::{Kind, Reason};
use crate::snapshot::Counts;
use crate::sync::AtomicU64;

/// How a call made (or reserved) ended, for the totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    Success,
    Failure,
    Ignored,
    /// Its future was dropped after the wrapped service was called.
    Cancelled,
    /// It ended after the breaker had moved on: not counted towards the state.
    Late,
    /// Reserved, never called.
    Abandoned,
}

/// See the [module docs](self). The counters most calls write come first, so that they
/// share a cache line with the breaker's reference counts, which every call writes too.
#[repr(C)]
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
    pub(super) fn new() -> Self {
        let zero = || AtomicU64::new(0);
        Tally {
            quiet_successes: zero(),
            skipped: [zero(), zero(), zero(), zero()],
            steps: zero(),
            successes: zero(),
            failures: zero(),
            ignored: zero(),
            cancelled: zero(),
            late: zero(),
            abandoned: zero(),
            probes: zero(),
            shadowed: zero(),
        }
    }

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
        add(&self.skipped[match reason {
            Reason::Open => 0,
            Reason::HalfOpenFull => 1,
            Reason::Killed => 2,
            Reason::ForcedOpen => 3,
        }]);
    }

    /// A closed-state call succeeded and changed nothing else.
    #[inline(always)]
    pub(super) fn quiet_success(&self) {
        add(&self.quiet_successes);
    }

    /// A call of `kind` ended (or its reservation was dropped).
    pub(super) fn ended(&self, kind: Kind, ended: Ended) {
        add(match ended {
            Ended::Success => &self.successes,
            Ended::Failure => &self.failures,
            Ended::Ignored => &self.ignored,
            Ended::Cancelled => &self.cancelled,
            Ended::Late => &self.late,
            Ended::Abandoned => return add(&self.abandoned),
        });
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
