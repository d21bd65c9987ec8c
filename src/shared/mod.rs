//! The state every clone of a breaker shares: the machine behind a lock, the kill
//! switch, and the channels that report transitions.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use crate::classify::Outcome;
use crate::event::Event;
use crate::kill::KillSwitch;
use crate::machine::{
    epoch_generation, Admission, Advice, Cause, Counted, Machine, Mode, Permit, Reason, Snapshot,
    State, Transition,
};
use crate::sync::{AtomicU64, Mutex, MutexGuard};

mod brief;
mod hold;
mod stamp;
mod word;

pub(crate) use self::brief::{Brief, Quick};
pub(crate) use self::hold::{Lease, Ticket};
use self::word::{Gate, TimeGate, Word};

/// An observer run on every event.
pub(crate) type Observer = Arc<dyn Fn(&Event<'_>) + Send + Sync>;

/// The breaker's clock: `tokio::time`, so paused-time tests run instantly.
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Laid out for the lock-free paths: the counters they write come first, next to the
/// `Arc`'s reference counts (which every call writes anyway), so that a call under
/// contention moves one cache line between cores, not several; what calls only read is
/// kept apart from both.
#[repr(C)]
pub(crate) struct Shared {
    /// Counted by the lock-free paths since the machine last took them in.
    pending: Pending,
    _written: [u8; 128],
    /// What a call may know without the lock. See [`Word`].
    word: AtomicU64,
    /// With [`Word::open`]: the machine's step at which the probe is due, tagged with
    /// the epoch it belongs to (see [`Gate`]).
    open_until: AtomicU64,
    /// With [`Word::open`] or [`Word::half_open_full`]: the time before which calls are
    /// skipped, in microseconds since `base`, tagged the same way (see [`TimeGate`]).
    open_time: AtomicU64,
    /// The machine's step as of the last change.
    step: AtomicU64,
    _read: [u8; 128],
    /// What [`TimeGate`]s count from.
    base: Instant,
    /// `base` as a stamp (see `stamp`).
    base_stamp: i64,
    pub(crate) name: Arc<str>,
    machine: Mutex<Machine>,
    pub(crate) kill: KillSwitch,
    pub(crate) times_calls: bool,
    /// Made on the first `subscribe`: a channel costs a few kilobytes, too much for
    /// every breaker of a keyed registry.
    events: OnceLock<broadcast::Sender<Transition>>,
    observers: Box<[Observer]>,
}

/// Counters the lock-free paths add to and the machine takes in.
#[repr(C)]
struct Pending {
    closed_successes: AtomicU64,
    killed: AtomicU64,
    open_skips: AtomicU64,
    half_open_skips: AtomicU64,
    forced_skips: AtomicU64,
}

impl Pending {
    fn new() -> Self {
        Pending {
            closed_successes: AtomicU64::new(0),
            killed: AtomicU64::new(0),
            open_skips: AtomicU64::new(0),
            half_open_skips: AtomicU64::new(0),
            forced_skips: AtomicU64::new(0),
        }
    }

    fn take(&self) -> Counted {
        Counted {
            closed_successes: self.closed_successes.swap(0, Ordering::AcqRel),
            killed: self.killed.swap(0, Ordering::AcqRel),
            open_skips: self.open_skips.swap(0, Ordering::AcqRel),
            half_open_skips: self.half_open_skips.swap(0, Ordering::AcqRel),
            forced_skips: self.forced_skips.swap(0, Ordering::AcqRel),
        }
    }
}

impl Shared {
    pub(crate) fn new(machine: Machine, kill: KillSwitch, observers: Vec<Observer>) -> Self {
        let lock_free = machine.lock_free();
        let base = now();
        Shared {
            pending: Pending::new(),
            _written: [0; 128],
            word: AtomicU64::new(Word::of(&machine, &lock_free).0),
            open_until: AtomicU64::new(Gate::of(&machine, &lock_free).0),
            open_time: AtomicU64::new(TimeGate::of(&machine, &lock_free, base).0),
            step: AtomicU64::new(lock_free.step),
            _read: [0; 128],
            base,
            base_stamp: stamp::of(base),
            name: machine.config().name.clone(),
            times_calls: machine.config().slow_call.is_some(),
            machine: Mutex::new(machine),
            kill,
            events: OnceLock::new(),
            observers: observers.into_boxed_slice(),
        }
    }

    /// The machine. No user code runs under this lock, so a poisoned lock only means a
    /// panic inside the machine's own bookkeeping; the state it left is still the best
    /// there is, so the breaker goes on with it rather than taking every call down.
    fn lock(&self) -> MutexGuard<'_, Machine> {
        self.machine
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    #[inline]
    fn word(&self) -> Word {
        Word(self.word.load(Ordering::Acquire))
    }

    /// Runs `f` on the machine, publishes what the lock-free paths may do now, then
    /// reports the transition `f` returned, outside the lock.
    fn with<R>(&self, f: impl FnOnce(&mut Machine) -> (R, Option<Transition>)) -> R {
        let (result, transition) = self.locked(f);
        if let Some(transition) = transition {
            self.emit(transition);
        }
        result
    }

    /// Runs `f` on the machine, after it has taken in what the lock-free paths counted,
    /// and publishes the result; the caller reports the transition.
    fn locked<R>(
        &self,
        f: impl FnOnce(&mut Machine) -> (R, Option<Transition>),
    ) -> (R, Option<Transition>) {
        let mut machine = self.lock();
        machine.absorb(self.pending.take());
        let out = f(&mut machine);
        let lock_free = machine.lock_free();
        self.step.store(lock_free.step, Ordering::Release);
        self.open_until
            .store(Gate::of(&machine, &lock_free).0, Ordering::Release);
        self.open_time.store(
            TimeGate::of(&machine, &lock_free, self.base).0,
            Ordering::Release,
        );
        self.word
            .store(Word::of(&machine, &lock_free).0, Ordering::Release);
        out
    }

    /// The decision in full, from the machine if the lock-free paths could not decide.
    #[inline]
    pub(crate) fn admission(&self, quick: Quick) -> Admission {
        match quick {
            Quick::Lease(epoch) => Admission::Call(Permit::fast(epoch_generation(epoch))),
            Quick::Pass(permit) => Admission::Call(permit),
            Quick::Skip(brief) => Admission::Skip(brief.skip()),
            Quick::Locked(killed) => self.admit_locked(killed),
        }
    }

    /// The closed state's lock-free path alone: the epoch to lease a call in, if a
    /// call now is admitted without the lock (see [`Lease`]).
    #[inline]
    pub(crate) fn admit_fast(&self) -> Option<u64> {
        let word = self.word();
        (word.closed() && !self.kill.is_killed()).then(|| word.epoch())
    }

    /// Decides a call with atomics alone where the state allows (see [`Word`]), or says
    /// the machine must. A skip is counted and reported to the observers.
    #[inline(always)]
    pub(crate) fn admit_quick(&self) -> Quick {
        let word = self.word();
        let killed = self.kill.is_killed();
        let quick = self.admit_lock_free(word, killed);
        if let (Quick::Skip(brief), false) = (quick, self.observers.is_empty()) {
            self.notify_skipped(brief);
        }
        quick
    }

    #[cold]
    #[inline(never)]
    fn notify_skipped(&self, brief: Brief) {
        self.notify(&Event::Skipped {
            name: &self.name,
            skip: &brief.skip(),
        });
    }

    #[inline(never)]
    pub(crate) fn admit_locked(&self, killed: bool) -> Admission {
        let now = now();
        let admission = self.with(|m| m.admit(now, killed));
        self.observe_skip(&admission);
        admission
    }

    /// The common cases, with atomics alone: a killed call, a call in the closed state,
    /// a pass-through call, a call skipped while forced open, open (see `admit_gated`)
    /// or half-open with every probe slot taken.
    #[inline(always)]
    fn admit_lock_free(&self, word: Word, killed: bool) -> Quick {
        if killed {
            if !word.counts() {
                return Quick::Locked(killed);
            }
            self.pending.killed.fetch_add(1, Ordering::AcqRel);
            return Quick::Skip(Brief::manual(Reason::Killed, word.state()));
        }
        if word.closed() {
            // Counted when it ends (see `Counts`): `record_fast_success`, or by the
            // machine.
            return Quick::Lease(word.epoch());
        }
        if word.passthrough() {
            let generation = epoch_generation(word.epoch());
            return Quick::Pass(Permit::passthrough(generation, word.state()));
        }
        if word.forced_open() {
            self.pending.forced_skips.fetch_add(1, Ordering::AcqRel);
            return Quick::Skip(Brief::manual(Reason::ForcedOpen, State::ForcedOpen));
        }
        if word.open() || word.half_open_full() {
            return self.admit_gated(word, killed);
        }
        Quick::Locked(killed)
    }

    /// Open, or half-open with every probe slot taken: the call is skipped, with atomics
    /// (and a clock read if the gate has a time), unless the gate is reached, which the
    /// machine decides.
    #[inline(never)]
    fn admit_gated(&self, word: Word, killed: bool) -> Quick {
        // The gates must belong to the word read: they are published one after the
        // other, and a gate from another state would skip a call that must be decided
        // by the machine.
        let Some(step_gate) = Gate(self.open_until.load(Ordering::Acquire)).step_for(word) else {
            return Quick::Locked(killed);
        };
        let Some(time_gate) = TimeGate(self.open_time.load(Ordering::Acquire)).micros_for(word)
        else {
            return Quick::Locked(killed);
        };
        // Before the time gate, to the microsecond, rounded so as never to skip a call
        // the machine would let through; the probe's time as a stamp (see `stamp`),
        // reckoned from the base's. (No 128-bit division: `as_micros` costs more than
        // the rest of the check.)
        let before = |micros: u64| {
            let since = now().saturating_duration_since(self.base);
            let now = since
                .as_secs()
                .saturating_mul(1_000_000)
                .saturating_add(u64::from(since.subsec_micros()));
            (now < micros).then(|| {
                let nanos = i64::try_from(micros.saturating_mul(1000)).unwrap_or(i64::MAX);
                self.base_stamp.saturating_add(nanos)
            })
        };
        if word.half_open_full() {
            if time_gate.is_some_and(|micros| before(micros).is_none()) {
                // The dwell limit passed: the machine re-opens.
                return Quick::Locked(killed);
            }
            self.pending.half_open_skips.fetch_add(1, Ordering::AcqRel);
            return Quick::Skip(Brief::in_flight());
        }
        if step_gate == Gate::MANUAL {
            self.pending.open_skips.fetch_add(1, Ordering::AcqRel);
            return Quick::Skip(Brief::manual(Reason::Open, State::Open));
        }
        // Calls to go, by this call's step; with no gate in calls (step 0), no need to
        // read the counters other callers are writing.
        let calls = (step_gate != 0)
            .then(|| {
                let step = self.step.load(Ordering::Acquire)
                    + self.pending.killed.load(Ordering::Acquire)
                    + self.pending.open_skips.load(Ordering::Acquire)
                    + 1;
                (step < step_gate).then(|| step_gate - step)
            })
            .flatten();
        let at = time_gate.and_then(before);
        if calls.is_none() && at.is_none() {
            // The probe may be due: the machine decides.
            return Quick::Locked(killed);
        }
        // Callers racing here may each count a skip at the last step before the probe:
        // the probe then goes to the next caller, a call later.
        self.pending.open_skips.fetch_add(1, Ordering::AcqRel);
        if calls == Some(1) && at.is_none() && word.slots_taken() {
            // The next call would reach the gate, but probes of an earlier half-open
            // hold every slot.
            return Quick::Skip(Brief::open_in_flight());
        }
        Quick::Skip(Brief::open(calls.unwrap_or(1), at))
    }

    pub(crate) fn advise(&self) -> Advice {
        let killed = self.kill.is_killed();
        let word = self.word();
        if !killed && (word.closed() || word.passthrough()) {
            return Advice::Call;
        }
        let now = now();
        let advice = self.with(|m| m.advise(now, killed));
        if let Advice::Skip(skip) = &advice {
            self.observe_skip(&Admission::Skip(*skip));
        }
        advice
    }

    /// Whether a permit may be used as it is: no kill, and no change of state or mode
    /// since it was given.
    #[inline]
    pub(crate) fn still_valid(&self, permit: &Permit) -> bool {
        self.still_valid_epoch(permit.epoch())
    }

    #[inline]
    pub(super) fn still_valid_epoch(&self, epoch: u64) -> bool {
        !self.kill.is_killed() && self.word().epoch() == epoch
    }

    pub(crate) fn revalidate(&self, permit: Permit) -> Admission {
        let killed = self.kill.is_killed();
        let now = now();
        let admission = self.with(|m| m.revalidate(permit, now, killed));
        self.observe_skip(&admission);
        admission
    }

    #[inline(always)]
    pub(crate) fn record(&self, permit: Permit, outcome: Outcome, elapsed: Option<Duration>) {
        if !permit.is_recorded() {
            return;
        }
        if permit.is_fast()
            && outcome == Outcome::Success
            && self.record_fast_success(permit.epoch())
        {
            return;
        }
        self.record_locked(permit, outcome, elapsed);
    }

    /// Counts the success of a call admitted on the closed-state path in `epoch`, with
    /// one atomic add, if that state still stands with no failure counted: the success
    /// then changes nothing but the count. (A success racing a failure that is being
    /// recorded counts as having come first.) Returns whether it did.
    #[inline(always)]
    fn record_fast_success(&self, epoch: u64) -> bool {
        let word = self.word();
        if !(word.closed() && word.epoch() == epoch) {
            return false;
        }
        self.pending.closed_successes.fetch_add(1, Ordering::AcqRel);
        if !self.observers.is_empty() {
            self.notify_success();
        }
        true
    }

    #[inline(never)]
    fn notify_success(&self) {
        self.notify(&Event::Recorded {
            name: &self.name,
            outcome: &Outcome::Success,
            probe: false,
        });
    }

    #[inline(never)]
    fn record_locked(&self, permit: Permit, outcome: Outcome, elapsed: Option<Duration>) {
        let at = now();
        if self.observers.is_empty() {
            self.with(|m| ((), m.record(permit, outcome, elapsed, at)));
            return;
        }
        let (counted, transition) = self.locked(|m| {
            let outcome = m.apply_slow_call_rule(outcome, elapsed);
            let counted = m.counts_towards_state(&permit).then(|| outcome.clone());
            (counted, m.record(permit, outcome, None, at))
        });
        // The outcome first, then the change of state it caused.
        if let Some(outcome) = counted {
            self.notify(&Event::Recorded {
                name: &self.name,
                outcome: &outcome,
                probe: permit.is_probe(),
            });
        }
        if let Some(transition) = transition {
            self.emit(transition);
        }
    }

    pub(crate) fn release(&self, permit: Permit, called: bool) {
        if !permit.is_recorded() {
            return;
        }
        self.with(|m| (m.release(permit, called), None));
    }

    /// The machine's snapshot, with everything the lock-free paths counted taken in.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let killed = self.kill.is_killed();
        let now = now();
        self.with(|m| {
            let transition = m.tick(now);
            (m.snapshot(now, killed), transition)
        })
    }

    pub(crate) fn force_open(&self) {
        self.with(|m| ((), m.force_open(now())));
    }

    pub(crate) fn allow_probe(&self) -> bool {
        self.with(|m| (m.allow_probe(), None))
    }

    pub(crate) fn reset(&self) {
        self.with(|m| ((), m.reset(now())));
    }

    pub(crate) fn set_mode(&self, mode: Mode) {
        self.with(|m| (m.set_mode(mode), None));
        tracing::info!(target: "tower_circuit_breaker", breaker = %self.name, mode = mode.as_str(), "mode changed");
    }

    pub(crate) fn mode(&self) -> Mode {
        self.lock().mode()
    }

    /// The state as last published for the lock-free paths, read without the lock: a
    /// keyed registry checks it on every breaker it considers evicting.
    pub(crate) fn published_state(&self) -> State {
        self.word().state()
    }

    pub(crate) fn set_threshold_relief(&self, relief: u32) {
        self.with(|m| (m.set_threshold_relief(relief), None));
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Transition> {
        self.events
            .get_or_init(|| broadcast::channel(64).0)
            .subscribe()
    }

    /// Reports a transition: a tracing event, the observers, then the broadcast channel
    /// (which never waits: a slow subscriber loses the oldest events). A panicking
    /// observer is logged and does not reach the caller.
    fn emit(&self, t: Transition) {
        let opening = matches!(
            t.cause,
            Cause::Tripped
                | Cause::ProbeFailed
                | Cause::DwellExceeded
                | Cause::PermanentFailure
                | Cause::ForcedOpen
        );
        if opening {
            tracing::warn!(
                target: "tower_circuit_breaker",
                breaker = %t.name, from = t.from.as_str(), to = t.to.as_str(), cause = ?t.cause,
                consecutive_failures = t.consecutive_failures, mode = t.mode.as_str(),
                "circuit {} for {}", t.to, t.name,
            );
        } else {
            tracing::info!(
                target: "tower_circuit_breaker",
                breaker = %t.name, from = t.from.as_str(), to = t.to.as_str(), cause = ?t.cause,
                mode = t.mode.as_str(),
                "circuit {} for {}", t.to, t.name,
            );
        }
        self.notify(&Event::Transition(&t));
        if let Some(events) = self.events.get() {
            let _ = events.send(t);
        }
    }

    #[inline]
    fn observe_skip(&self, admission: &Admission) {
        if let (false, Admission::Skip(skip)) = (self.observers.is_empty(), admission) {
            self.notify(&Event::Skipped {
                name: &self.name,
                skip,
            });
        }
    }

    fn notify(&self, event: &Event<'_>) {
        for observer in self.observers.iter() {
            if catch_unwind(AssertUnwindSafe(|| observer(event))).is_err() {
                tracing::error!(target: "tower_circuit_breaker", breaker = %self.name, "an event observer panicked");
            }
        }
    }
}
