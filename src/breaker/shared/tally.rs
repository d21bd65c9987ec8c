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
//! Only what calls count on the way through is counted in the breaker itself; the rest
//! (outcomes the machine recorded, calls cancelled or abandoned, the steps) is in an
//! allocation made at its first count, which a breaker that only passes calls (most keys
//! of a keyed registry) never makes.
//!
//! The counts that calls write on the way through (a skip, a closed call's success that
//! changed nothing else) are the only shared memory those calls write but the breaker's
//! reference count. Where one thread makes the calls (a current-thread runtime's, or a
//! thread outside any runtime), it owns their words, as the first to count them: it alone
//! writes them, so it adds with a plain read and write, which no other thread's count can
//! come between (an atomic add costs a call about 4 ns more on a virtual machine, as much
//! as the rest of its counting). Another thread counts elsewhere: a quiet success with the
//! other successes, a skip over the lines below. A breaker of its own first counted on a
//! multi-thread runtime, whose tasks move between threads, gives each thread that counts
//! a line of its own (a `ThreadLocal` of the thread_local crate, whose lines a thread that
//! exits hands on to the next thread made), where it adds with a plain read and write as
//! an owner does: an atomic add is about 5 ns of a multi-thread runtime's call, a third
//! of its closed call's time. One key's breaker of a keyed registry, which cannot spend
//! half a kilobyte on that, is counted by every thread alike, in one word each with an
//! atomic add; counted in one word, calls from several threads at once would pass that
//! word's cache line from core to core on every call, so once two such counts are seen to
//! collide, they spread over one cache line per thread group (as Java's `LongAdder`
//! does), made when first needed. A snapshot sums them all.

// Each `#[inline(always)]` here pays in the awaited benchmark (the permit, the tally and
// the service: docs/performance.md, "Inlining").
use once_cell::race::OnceBox;
use std::cell::Cell;
use std::sync::atomic::Ordering;
use thread_local::ThreadLocal;

use crate::breaker::machine::{Kind, Recorded};
use crate::breaker::outcome::Outcome;
use crate::breaker::snapshot::Counts;
use crate::breaker::state::Reason;
use crate::breaker::sync::AtomicU64;

/// See the [module docs](self).
#[repr(C)]
pub(super) struct Tally {
    /// What calls count on the way through, spread, once two collided (or, for a breaker
    /// counted per thread, once a multi-thread runtime's thread first counts). First: read
    /// by every call, written once, it may share a line with what calls read; the counts
    /// after it are written.
    spread: OnceBox<Spread>,
    /// The thread that owns [`passing`](Self::passing): its [`thread_token`];
    /// [`UNOWNED`] or [`UNOWNED_PER_THREAD`] before the first count, [`SHARED`] if every
    /// thread adds to them.
    owner: AtomicU64,
    /// What calls count on the way through (until two collide, if shared).
    passing: Passing,
    /// The rest, made when first counted: a breaker that only ever passes calls (most
    /// keys of a keyed registry) never has one.
    rest: OnceBox<Rest>,
}

/// What calls count on the way through, spread so that threads counting at once do not
/// write the same cache line.
// Always behind its one pointer (`Tally::spread`): the variants' sizes cost nothing.
#[allow(clippy::large_enum_variant)]
enum Spread {
    /// Over thread groups, each thread adding atomically to its group's line.
    Groups(Box<[Group]>),
    /// Over the threads themselves, each adding to its own line with a plain read and
    /// write: a breaker first counted on a multi-thread runtime, unless it is one key's of
    /// a keyed registry (about half a kilobyte, and a line per thread that counts).
    Threads(ThreadLocal<Group>),
}

impl Spread {
    /// Adds one to count `i` of this thread's line.
    #[inline]
    fn add(&self, i: usize) {
        match self {
            Spread::Groups(groups) => add(&groups[group(groups.len())].0 .0[i]),
            Spread::Threads(threads) => owned_add(&threads.get_or(Group::default).0 .0[i]),
        }
    }

    /// Adds its counts to `totals`.
    fn sum_into(&self, totals: &mut [u64; 5]) {
        let mut sum = |group: &Group| {
            for (total, counter) in totals.iter_mut().zip(&group.0 .0) {
                *total += get(counter);
            }
        };
        match self {
            Spread::Groups(groups) => groups.iter().for_each(&mut sum),
            Spread::Threads(threads) => threads.iter().for_each(&mut sum),
        }
    }
}

/// What a breaker counts once something but a quiet success or a skip happened to it.
/// In an allocation of its own: a thread that does not own
/// [`passing`](Tally::passing) counts its quiet successes here, and would pass their
/// line to and fro with the owner's every call if it were on it.
#[derive(Default)]
struct Rest {
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

/// Skips by [`Reason`] (open, half-open full, killed, forced open), and closed-state calls
/// whose success changed nothing but this count ([`QUIET`]): each arrived, was made and
/// succeeded.
#[derive(Default)]
struct Passing([AtomicU64; 5]);

/// A thread group's [`Passing`], on a cache line of its own (two, where the hardware
/// fetches lines in pairs).
#[repr(align(128))]
#[derive(Default)]
struct Group(Passing);

/// Where [`Passing`] counts quiet successes.
const QUIET: usize = 4;

/// Nothing has counted the passing counts yet.
const UNOWNED: u64 = 0;

/// Nothing has counted the passing counts yet, and if a multi-thread runtime's thread is
/// the first, they are counted per thread.
const UNOWNED_PER_THREAD: u64 = u64::MAX - 2;

/// Every thread adds to the passing counts.
const SHARED: u64 = u64::MAX;

/// A token no thread owns a count with: a thread that is exiting (its thread-locals are
/// gone).
const NO_TOKEN: u64 = u64::MAX - 1;

/// This thread's token: a number no other thread has (tokens are never reused), or
/// [`NO_TOKEN`]. Under loom, a model thread's own.
#[inline]
fn thread_token() -> u64 {
    #[cfg(not(tcb_loom))]
    std::thread_local! {
        static TOKEN: Cell<u64> = const { Cell::new(UNOWNED) };
    }
    #[cfg(tcb_loom)]
    loom::thread_local! {
        static TOKEN: Cell<u64> = Cell::new(UNOWNED);
    }
    TOKEN
        .try_with(|token| match token.get() {
            UNOWNED => new_token(token),
            known => known,
        })
        .unwrap_or(NO_TOKEN)
}

#[cold]
#[inline(never)]
fn new_token(token: &Cell<u64>) -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(UNOWNED + 1);
    let next = NEXT.fetch_add(1, Ordering::Relaxed);
    token.set(next);
    next
}

/// This thread's group: threads are dealt round the groups as they first collide.
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

/// Adds one to a count others may add to at once; `false` if one did (nothing is added).
#[inline]
fn try_add(counter: &AtomicU64) -> bool {
    let seen = counter.load(Ordering::Relaxed);
    counter
        .compare_exchange(seen, seen + 1, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
}

/// Whether this thread is one of a multi-thread runtime's, whose tasks move between
/// threads.
fn on_a_multi_thread_runtime() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|handle| handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread)
}

/// Adds one to a count only this thread writes.
#[inline]
fn owned_add(counter: &AtomicU64) {
    counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

impl Default for Tally {
    /// Counts that spread over thread groups when they collide: one key's of a keyed
    /// registry.
    fn default() -> Self {
        Tally::starting(UNOWNED)
    }
}

impl Tally {
    /// Counts that a multi-thread runtime's threads, if one counts first, keep each on a
    /// line of its own: a breaker of its own.
    pub(super) fn per_thread() -> Self {
        // Under loom a thread's line is not modelled: its counts spread over groups.
        Tally::starting(if cfg!(tcb_loom) {
            UNOWNED
        } else {
            UNOWNED_PER_THREAD
        })
    }

    fn starting(owner: u64) -> Self {
        Tally {
            spread: OnceBox::new(),
            owner: AtomicU64::new(owner),
            passing: Passing::default(),
            // Under loom, made with the tally: loom does not see the pointer a rest made
            // later is reached by, so it would not see its counts made before they are
            // read.
            rest: if cfg!(tcb_loom) {
                OnceBox::with_value(Box::default())
            } else {
                OnceBox::new()
            },
        }
    }

    /// The counts made when first needed.
    #[inline]
    fn rest(&self) -> &Rest {
        self.rest.get_or_init(Box::default)
    }

    /// Takes the next step for an arriving call, and returns it.
    #[inline]
    pub(super) fn take_step(&self) -> u64 {
        self.rest().steps.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The steps taken so far.
    #[inline]
    pub(super) fn steps(&self) -> u64 {
        self.rest
            .get()
            .map_or(0, |rest| rest.steps.load(Ordering::Acquire))
    }

    /// Counts a call skipped for `reason`.
    #[inline(always)]
    pub(super) fn skipped(&self, reason: Reason) {
        self.passed(reason.code() as usize);
    }

    /// A closed-state call succeeded and changed nothing else.
    #[inline(always)]
    pub(super) fn quiet_success(&self) {
        self.passed(QUIET);
    }

    /// Counts a call on the way through as [`Passing`]'s count `i`: by the thread that
    /// owns the words, in them; shared, on this thread's line once counts are spread, or
    /// in the one word; else elsewhere.
    #[inline(always)]
    fn passed(&self, i: usize) {
        let owner = self.owner.load(Ordering::Relaxed);
        if owner == thread_token() {
            owned_add(&self.passing.0[i]);
        } else if owner == SHARED {
            self.shared_add(i);
        } else {
            self.passed_unowned(i);
        }
    }

    /// Adds to count `i` of words every thread adds to.
    #[inline]
    fn shared_add(&self, i: usize) {
        if !self.added_spread(i) && !try_add(&self.passing.0[i]) {
            self.collided(i);
        }
    }

    /// Adds to count `i` on this thread's line, if counts are spread; `false` if not.
    #[inline]
    fn added_spread(&self, i: usize) -> bool {
        self.spread.get().map(|spread| spread.add(i)).is_some()
    }

    /// Counts as [`passed`](Self::passed), on a thread that does not own the words: the
    /// first count decides who counts how; a thread that does not own them counts
    /// elsewhere.
    #[inline(never)]
    fn passed_unowned(&self, i: usize) {
        let me = thread_token();
        let mut owner = self.owner.load(Ordering::Relaxed);
        if owner == UNOWNED || owner == UNOWNED_PER_THREAD {
            let claim = if me != NO_TOKEN && !on_a_multi_thread_runtime() {
                me
            } else {
                SHARED
            };
            if claim == SHARED && owner == UNOWNED_PER_THREAD {
                // Made before the claim is seen: every thread that sees it shared finds
                // its line.
                self.spread
                    .get_or_init(|| Box::new(Spread::Threads(ThreadLocal::new())));
            }
            owner = match self.owner.compare_exchange(
                owner,
                claim,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => claim,
                Err(decided) => decided,
            };
        }
        if owner == me {
            owned_add(&self.passing.0[i]);
        } else if owner == SHARED {
            self.shared_add(i);
        } else if !self.added_spread(i) && (i != QUIET || !try_add(&self.rest().successes)) {
            // A quiet success is counted with the other successes, until two collide there.
            self.collided(i);
        }
    }

    /// Two counts collided, or a skip is counted by a thread that does not own the
    /// words: from now on such counts are spread (this one too).
    #[cold]
    #[inline(never)]
    fn collided(&self, i: usize) {
        let spread = self.spread.get_or_init(|| {
            // Twice as many groups as threads run at once: threads dealt round them rarely
            // share one.
            let threads = std::thread::available_parallelism().map_or(1, usize::from);
            Box::new(Spread::Groups(
                (0..(threads * 2).next_power_of_two().clamp(4, 32))
                    .map(|_| Group::default())
                    .collect(),
            ))
        });
        spread.add(i);
    }

    /// [`Passing`]'s counts, summed over their groups.
    fn passing(&self) -> [u64; 5] {
        let mut totals = self.passing.0.each_ref().map(get);
        if let Some(spread) = self.spread.get() {
            spread.sum_into(&mut totals);
        }
        totals
    }

    /// A call of `kind` ended with what the machine made of its outcome: counted as
    /// a success, a failure or ignored, or late (the breaker had moved on).
    pub(super) fn recorded(&self, kind: Kind, recorded: &Recorded) {
        let rest = self.rest();
        rest.made(
            kind,
            match recorded {
                Recorded::Counted { outcome, .. } => match outcome {
                    Outcome::Success => &rest.successes,
                    Outcome::Failure(_) => &rest.failures,
                    Outcome::Ignored => &rest.ignored,
                },
                Recorded::Late => &rest.late,
            },
        );
    }

    /// A call of `kind` ended without an outcome: cancelled (its future was dropped) if
    /// the wrapped service was `called`, abandoned (a reservation never used) if not.
    pub(super) fn released(&self, kind: Kind, called: bool) {
        let rest = self.rest();
        if called {
            rest.made(kind, &rest.cancelled);
        } else {
            add(&rest.abandoned);
        }
    }

    pub(super) fn counts(&self) -> Counts {
        let passing = self.passing();
        let none = Rest::default();
        let rest = self.rest.get().unwrap_or(&none);
        let successes = passing[QUIET] + get(&rest.successes);
        let (failures, ignored) = (get(&rest.failures), get(&rest.ignored));
        let (cancelled, late) = (get(&rest.cancelled), get(&rest.late));
        let made = successes + failures + ignored + cancelled + late;
        // Each counter is read once, so that the sums agree with the parts.
        let skipped = &passing[..QUIET];
        let abandoned = get(&rest.abandoned);
        let arrived = made + skipped.iter().sum::<u64>() + abandoned;
        Counts {
            arrived,
            made,
            probes: get(&rest.probes),
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
            would_have_skipped: get(&rest.shadowed),
        }
    }
}

impl Rest {
    /// A call of `kind` was made and ended as `counter` counts.
    fn made(&self, kind: Kind, counter: &AtomicU64) {
        add(counter);
        match kind {
            Kind::Call => {}
            Kind::Probe => add(&self.probes),
            Kind::Shadow => add(&self.shadowed),
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
    fn counts_made_before_and_after_they_spread_add_up() {
        let tally = Tally::default();
        for (n, reason) in REASONS.into_iter().enumerate() {
            for _ in 0..=n {
                tally.skipped(reason);
            }
        }
        tally.quiet_success();
        tally.collided(Reason::Open.code() as usize);
        assert!(tally.spread.get().is_some());
        std::thread::scope(|scope| {
            for _ in 0..5 {
                scope.spawn(|| {
                    for reason in REASONS {
                        tally.skipped(reason);
                    }
                    tally.quiet_success();
                });
            }
        });
        let counts = tally.counts();
        assert_eq!(skipped(&counts), [1 + 1 + 5, 2 + 5, 3 + 5, 4 + 5]);
        assert_eq!((counts.successes, counts.made), (6, 6));
        assert_eq!(counts.arrived, 1 + 1 + 5 + 2 + 5 + 3 + 5 + 4 + 5 + 6);
    }

    #[test]
    fn counts_from_many_threads_at_once_are_all_counted() {
        let tally = Tally::default();
        std::thread::scope(|scope| {
            for thread in 0..10 {
                let tally = &tally;
                scope.spawn(move || {
                    for _ in 0..20_000 {
                        match REASONS.get(thread / 2) {
                            Some(&reason) => tally.skipped(reason),
                            None => tally.quiet_success(),
                        }
                    }
                });
            }
        });
        let counts = tally.counts();
        assert_eq!(skipped(&counts), [40_000; 4]);
        assert_eq!((counts.successes, counts.arrived), (40_000, 200_000));
    }

    /// Counts `n` of each kind on this thread.
    fn count_each(tally: &Tally, n: u64) {
        for _ in 0..n {
            for reason in REASONS {
                tally.skipped(reason);
            }
            tally.quiet_success();
        }
    }

    #[test]
    fn the_first_thread_outside_a_runtime_owns_the_counts_and_others_counting_at_once_are_all_counted(
    ) {
        let tally = Tally::default();
        count_each(&tally, 1);
        assert_eq!(tally.owner.load(Ordering::Relaxed), thread_token());
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| count_each(&tally, 10_000));
            }
            count_each(&tally, 10_000);
        });
        // The owned words hold this thread's counts and no other's.
        assert_eq!(tally.passing.0.each_ref().map(get), [10_001; 5]);
        let counts = tally.counts();
        assert_eq!(skipped(&counts), [50_001; 4]);
        assert_eq!((counts.successes, counts.made), (50_001, 50_001));
        assert_eq!(counts.arrived, 5 * 50_001);
    }

    /// `tally` after four tasks on a multi-thread runtime of two workers each counted
    /// 10,000 of each kind.
    fn counted_by_four_tasks_on_a_multi_thread_runtime(tally: Tally) -> std::sync::Arc<Tally> {
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .expect("runtime");
        let tally = std::sync::Arc::new(tally);
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let tally = tally.clone();
                multi.spawn(async move { count_each(&tally, 10_000) })
            })
            .collect();
        multi.block_on(async {
            for task in tasks {
                task.await.expect("task");
            }
        });
        tally
    }

    #[test]
    fn a_current_thread_runtime_owns_the_counts_and_a_multi_thread_one_shares_them() {
        let current = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let owned = Tally::default();
        current.block_on(async { count_each(&owned, 3) });
        assert_eq!(owned.owner.load(Ordering::Relaxed), thread_token());

        let shared = counted_by_four_tasks_on_a_multi_thread_runtime(Tally::default());
        assert_eq!(shared.owner.load(Ordering::Relaxed), SHARED);
        count_each(&shared, 1);
        let counts = shared.counts();
        assert_eq!(skipped(&counts), [40_001; 4]);
        assert_eq!(counts.successes, 40_001);
        assert_eq!(owned.counts().successes, 3);
    }

    #[test]
    fn a_breaker_of_its_own_first_counted_on_a_multi_thread_runtime_counts_each_thread_apart() {
        let tally = counted_by_four_tasks_on_a_multi_thread_runtime(Tally::per_thread());
        assert_eq!(tally.owner.load(Ordering::Relaxed), SHARED);
        assert!(matches!(tally.spread.get(), Some(Spread::Threads(_))));
        // Threads outside the runtime, at once, each on a line of its own too.
        std::thread::scope(|scope| {
            for _ in 0..3 {
                scope.spawn(|| count_each(&tally, 1_000));
            }
        });
        let counts = tally.counts();
        assert_eq!(skipped(&counts), [43_000; 4]);
        assert_eq!((counts.successes, counts.made), (43_000, 43_000));
        assert_eq!(counts.arrived, 5 * 43_000);
        // Its passing words were never written: every count is on a thread's line.
        assert_eq!(tally.passing.0.each_ref().map(get), [0; 5]);
    }

    #[test]
    fn a_breaker_of_its_own_first_counted_outside_a_multi_thread_runtime_is_owned_as_before() {
        let tally = Tally::per_thread();
        count_each(&tally, 2);
        assert_eq!(tally.owner.load(Ordering::Relaxed), thread_token());
        assert!(tally.spread.get().is_none());
        assert_eq!(tally.passing.0.each_ref().map(get), [2; 5]);
    }
}
