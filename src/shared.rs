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
    epoch_generation, Admission, Advice, Cause, Counted, LockFree, LockFreeGate, Machine, Mode,
    NextProbe, Permit, Reason, Skip, Snapshot, State, Transition,
};
use crate::sync::{AtomicU64, Mutex, MutexGuard};

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

/// The machine's state as one number: `epoch << 9 | slots_taken << 8 | half_open_full << 7
/// | state << 5 | flags`, flags being `closed` (1), `passthrough` (2), `open` (4),
/// `counts` (8) and `forced_open` (16).
///
/// - `closed`: closed, enabled, no failure counted, no slow-call rule
///   (`Machine::lock_free`): a call is admitted, and its success counted, with atomics.
/// - `passthrough`: disabled mode: a call is admitted with no bookkeeping at all.
/// - `open`: open and enabled: a call is skipped with atomics until the step reaches
///   `open_until` and the clock `open_time` (or never, for a gate only a person opens).
/// - `counts`: not disabled: a killed call is counted as a skipped step.
/// - `forced_open`: forced open and enabled: a call is skipped with atomics.
/// - `half_open_full`: half-open, enabled, every probe slot taken: a call is skipped
///   with atomics until `open_time` (the dwell limit), if set.
/// - `slots_taken`: with `open`, probes of an earlier half-open still take every slot:
///   a skipped call whose successor would reach the gate is told a probe is in flight.
#[derive(Clone, Copy)]
struct Word(u64);

impl Word {
    fn of(machine: &Machine, lock_free: &LockFree) -> Word {
        let flags = u64::from(lock_free.closed)
            | u64::from(machine.mode() == Mode::Disabled) << 1
            | u64::from(lock_free.open.is_some()) << 2
            | u64::from(machine.mode() != Mode::Disabled) << 3
            | u64::from(lock_free.forced_open) << 4
            | u64::from(lock_free.half_open_full.is_some()) << 7
            | u64::from(lock_free.open.is_some_and(|gate| gate.slots_taken)) << 8;
        Word(machine.epoch() << 9 | machine.state().code() << 5 | flags)
    }

    fn epoch(self) -> u64 {
        self.0 >> 9
    }

    fn state(self) -> State {
        State::from_code(self.0 >> 5)
    }

    fn closed(self) -> bool {
        self.0 & 1 != 0
    }

    fn passthrough(self) -> bool {
        self.0 & 2 != 0
    }

    fn open(self) -> bool {
        self.0 & 4 != 0
    }

    fn counts(self) -> bool {
        self.0 & 8 != 0
    }

    fn forced_open(self) -> bool {
        self.0 & 16 != 0
    }

    fn half_open_full(self) -> bool {
        self.0 & 128 != 0
    }

    fn slots_taken(self) -> bool {
        self.0 & 256 != 0
    }

    /// The low 16 bits of the epoch, which tag the gates published with this word.
    fn tag(self) -> u64 {
        self.epoch() & 0xFFFF
    }
}

/// The open gate's step, tagged with the low 16 bits of its epoch: `tag << 48 | step`.
/// Step 0: no gate in calls; [`Gate::MANUAL`]: only a person opens it.
#[derive(Clone, Copy)]
struct Gate(u64);

impl Gate {
    const STEP: u64 = (1 << 48) - 1;
    const MANUAL: u64 = Self::STEP;

    fn of(machine: &Machine, lock_free: &LockFree) -> Gate {
        let step = match lock_free.open {
            Some(LockFreeGate { manual: true, .. }) => Self::MANUAL,
            Some(LockFreeGate {
                step: Some(step), ..
            }) => step.min(Self::STEP - 1),
            _ => 0,
        };
        Gate((machine.epoch() & 0xFFFF) << 48 | step)
    }

    /// The step, if this gate was published with `word`.
    fn step_for(self, word: Word) -> Option<u64> {
        (self.0 >> 48 == word.tag()).then_some(self.0 & Self::STEP)
    }
}

/// A gate's time, in whole microseconds since [`Shared::base`] rounded down, tagged like
/// [`Gate`]: `tag << 48 | micros`; [`TimeGate::NONE`]: no gate in time. 48 bits of
/// microseconds last nine years; a time further off is not published (the machine
/// decides).
#[derive(Clone, Copy)]
struct TimeGate(u64);

impl TimeGate {
    const NONE: u64 = (1 << 48) - 1;

    fn of(machine: &Machine, lock_free: &LockFree, base: Instant) -> TimeGate {
        let time = lock_free
            .open
            .or(lock_free.half_open_full)
            .and_then(|gate| gate.time);
        let micros = time.map_or(Self::NONE, |time| {
            let micros = time.saturating_duration_since(base).as_micros();
            u64::try_from(micros).unwrap_or(Self::NONE).min(Self::NONE)
        });
        TimeGate((machine.epoch() & 0xFFFF) << 48 | micros)
    }

    /// `Some(None)`: published with `word`, no gate in time; `Some(Some(micros))`: the
    /// time; `None`: not published with `word`, or too far off.
    fn micros_for(self, word: Word) -> Option<Option<u64>> {
        if self.0 >> 48 != word.tag() {
            return None;
        }
        match self.0 & Self::NONE {
            Self::NONE => Some(None),
            micros => Some(Some(micros)),
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
    /// a pass-through call, a call skipped while forced open or open with a cooldown in
    /// calls.
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
        // This call's step.
        let step = self.step.load(Ordering::Acquire)
            + self.pending.killed.load(Ordering::Acquire)
            + self.pending.open_skips.load(Ordering::Acquire)
            + 1;
        let calls = (step < step_gate).then(|| step_gate - step);
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
    fn still_valid_epoch(&self, epoch: u64) -> bool {
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

/// A permit held by a reserved service or a call in flight. Dropped without an outcome,
/// it hands the permit back: a probe slot is freed, nothing counts as a success.
pub(crate) struct Ticket {
    shared: Arc<Shared>,
    permit: Permit,
    called: bool,
    settled: bool,
}

impl Ticket {
    #[inline]
    pub(crate) fn new(shared: Arc<Shared>, permit: Permit) -> Self {
        Ticket {
            shared,
            permit,
            called: false,
            settled: false,
        }
    }

    pub(crate) fn permit(&self) -> &Permit {
        &self.permit
    }

    /// Whether the call must be timed (a slow-call rule is set).
    pub(crate) fn times_calls(&self) -> bool {
        self.shared.times_calls
    }

    /// The wrapped service is about to be called with this permit.
    pub(crate) fn mark_called(&mut self) {
        self.called = true;
    }

    #[inline]
    pub(crate) fn settle(mut self, outcome: Outcome, elapsed: Option<Duration>) {
        self.settled = true;
        self.shared.record(self.permit, outcome, elapsed);
    }

    /// The permit went stale before its call: decide again.
    pub(crate) fn revalidate(mut self) -> Admission {
        self.settled = true;
        self.shared.revalidate(self.permit)
    }
}

impl Drop for Ticket {
    #[inline]
    fn drop(&mut self) {
        if !self.settled {
            self.shared.release(self.permit, self.called);
        }
    }
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("breaker", &self.shared.name)
            .field("permit", &self.permit)
            .field("called", &self.called)
            .finish()
    }
}

/// A call admitted on the closed state's lock-free path, held by a reserved service
/// (`CALLED == false`) or by the call's future (`CALLED == true`). Two words, the
/// breaker and the epoch, so that the path most calls take moves nothing bigger (a
/// [`Ticket`] carries a whole [`Permit`]). Dropped while held, it hands the call back
/// to the machine: abandoned before the call, or cancelled after it.
pub(crate) struct Lease<const CALLED: bool> {
    /// `None` once settled or handed on, or for an empty slot.
    shared: Option<Arc<Shared>>,
    epoch: u64,
}

impl<const CALLED: bool> Lease<CALLED> {
    /// An empty slot.
    pub(crate) const EMPTY: Self = Lease {
        shared: None,
        epoch: 0,
    };

    /// A lease on `shared` for a call admitted on the lock-free path in `epoch`.
    #[inline]
    pub(crate) fn new(shared: Arc<Shared>, epoch: u64) -> Self {
        Lease {
            shared: Some(shared),
            epoch,
        }
    }

    #[inline]
    pub(crate) fn is_held(&self) -> bool {
        self.shared.is_some()
    }

    /// Takes the lease out, leaving an empty slot.
    #[inline]
    pub(crate) fn take(&mut self) -> Self {
        Lease {
            shared: self.shared.take(),
            epoch: self.epoch,
        }
    }

    fn permit(&self) -> Permit {
        Permit::fast(epoch_generation(self.epoch))
    }
}

impl Lease<false> {
    /// Whether the call may go ahead as admitted: no kill, no change since.
    #[inline]
    pub(crate) fn still_valid(&self) -> bool {
        self.shared
            .as_ref()
            .is_some_and(|shared| shared.still_valid_epoch(self.epoch))
    }

    /// The wrapped service is about to be called.
    #[inline]
    pub(crate) fn called(mut self) -> Lease<true> {
        Lease {
            shared: self.shared.take(),
            epoch: self.epoch,
        }
    }

    /// The lease, on `shared`, went stale before its call: decide again.
    pub(crate) fn revalidate(mut self, shared: &Shared) -> Admission {
        self.shared = None;
        shared.revalidate(self.permit())
    }
}

impl Lease<true> {
    /// Records the call's outcome.
    #[inline(always)]
    pub(crate) fn settle(mut self, outcome: Outcome, elapsed: Option<Duration>) {
        if let Some(shared) = self.shared.take() {
            shared.record(self.permit(), outcome, elapsed);
        }
    }
}

impl<const CALLED: bool> Drop for Lease<CALLED> {
    #[inline]
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            release_lease(shared, self.permit(), CALLED);
        }
    }
}

/// A lease dropped while held: kept out of line, so that dropping an empty one (which
/// every call does) stays a test and a jump.
#[cold]
#[inline(never)]
fn release_lease(shared: Arc<Shared>, permit: Permit, called: bool) {
    shared.release(permit, called);
}

impl<const CALLED: bool> std::fmt::Debug for Lease<CALLED> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("breaker", &self.shared.as_ref().map(|shared| &shared.name))
            .field("epoch", &self.epoch)
            .field("called", &CALLED)
            .finish()
    }
}

/// What the lock-free paths decided for a call.
#[derive(Clone, Copy)]
pub(crate) enum Quick {
    /// A call in the closed state, in this epoch: lease it (see [`Lease`]).
    Lease(u64),
    /// A disabled-mode pass-through call.
    Pass(Permit),
    /// A skip, counted.
    Skip(Brief),
    /// The machine must decide; the kill switch as read.
    Locked(bool),
}

/// A skip decided on a lock-free path, in a word and a time: the reason, the state, and
/// the calls until the probe, or that a probe is under way or only a person ends it,
/// and when the probe may go. [`Skip`] is a third bigger and made of narrower fields,
/// and moving it from where it was decided to where it is answered cost more than the
/// decision.
///
/// Bits: 0 is always set; 1-2 the reason (open, killed, forced open, half-open full);
/// 3-4 the state; 5 manual; 6 in flight; from 8, the calls until the probe.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Brief {
    bits: std::num::NonZeroU64,
    /// When the probe may go, as a stamp (see `stamp`); [`Brief::NO_TIME`]: no time.
    at: i64,
}

impl Brief {
    const MANUAL: u64 = 1 << 5;
    const IN_FLIGHT: u64 = 1 << 6;

    /// No time in `at`.
    const NO_TIME: i64 = i64::MIN;

    #[inline]
    fn new(bits: u64, at: i64) -> Brief {
        Brief {
            bits: std::num::NonZeroU64::MIN.saturating_add(bits & !1),
            at,
        }
    }

    #[inline]
    fn manual(reason: Reason, state: State) -> Brief {
        let reason = match reason {
            Reason::Open => 0,
            Reason::Killed => 1,
            _ => 2,
        };
        Brief::new(
            reason << 1 | state.code() << 3 | Self::MANUAL,
            Self::NO_TIME,
        )
    }

    /// Open, `calls` to the probe, and the probe not before the stamp `at`.
    #[inline]
    fn open(calls: u64, at: Option<i64>) -> Brief {
        Brief::new(
            State::Open.code() << 3 | calls << 8,
            at.unwrap_or(Self::NO_TIME),
        )
    }

    /// Open, and the probe waits for probes of an earlier half-open.
    #[inline]
    fn open_in_flight() -> Brief {
        Brief::new(State::Open.code() << 3 | Self::IN_FLIGHT, Self::NO_TIME)
    }

    #[inline]
    fn in_flight() -> Brief {
        Brief::new(
            3 << 1 | State::HalfOpen.code() << 3 | Self::IN_FLIGHT,
            Self::NO_TIME,
        )
    }

    /// The skip in full.
    #[inline]
    pub(crate) fn skip(self) -> Skip {
        let bits = self.bits.get();
        Skip {
            reason: self.reason(),
            state: self.state(),
            next_probe: if bits & Self::MANUAL != 0 {
                NextProbe::Manual
            } else if bits & Self::IN_FLIGHT != 0 {
                NextProbe::InFlight
            } else {
                NextProbe::After {
                    calls: bits >> 8,
                    at: (self.at != Self::NO_TIME).then(|| stamp::instant(self.at)),
                }
            },
        }
    }

    #[inline]
    pub(crate) fn reason(self) -> Reason {
        match self.bits.get() >> 1 & 3 {
            0 => Reason::Open,
            1 => Reason::Killed,
            2 => Reason::ForcedOpen,
            _ => Reason::HalfOpenFull,
        }
    }

    #[inline]
    pub(crate) fn state(self) -> State {
        State::from_code(self.bits.get() >> 3)
    }
}

/// Instants as one signed number, nanoseconds from an anchor taken once per process:
/// two words of `Instant` moved through a reservation and a future cost more than the
/// arithmetic. (Tests run runtimes whose paused clocks may stand before the anchor, so
/// the number is signed.)
mod stamp {
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    fn anchor() -> Instant {
        static ANCHOR: OnceLock<Instant> = OnceLock::new();
        *ANCHOR.get_or_init(Instant::now)
    }

    /// `at` as nanoseconds from the anchor, saturated to some 292 years either way.
    pub(super) fn of(at: Instant) -> i64 {
        let anchor = anchor();
        let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        match at.checked_duration_since(anchor) {
            Some(after) => nanos(after),
            None => -nanos(anchor.saturating_duration_since(at)),
        }
    }

    /// The instant `nanos` from the anchor.
    pub(super) fn instant(nanos: i64) -> Instant {
        let anchor = anchor();
        let by = Duration::from_nanos(nanos.unsigned_abs());
        let at = if nanos >= 0 {
            anchor.checked_add(by)
        } else {
            anchor.checked_sub(by)
        };
        at.unwrap_or(anchor)
    }
}

impl std::fmt::Debug for Brief {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.skip().fmt(f)
    }
}
