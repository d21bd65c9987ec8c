//! The state every clone of a breaker shares: the machine behind a lock, the kill
//! switch, and the channels that report transitions.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use crate::classify::Outcome;
use crate::event::Event;
use crate::kill::KillSwitch;
use crate::machine::{
    epoch_generation, Admission, Advice, Cause, Machine, Mode, Permit, Snapshot, State, Transition,
};

/// An observer run on every event.
pub(crate) type Observer = Arc<dyn Fn(&Event<'_>) + Send + Sync>;

/// The breaker's clock: `tokio::time`, so paused-time tests run instantly.
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

pub(crate) struct Shared {
    pub(crate) name: Arc<str>,
    machine: Mutex<Machine>,
    /// What a call may know without the lock: the machine's epoch (generation and
    /// mode), its state, and whether the lock-free paths are open. See [`Word`].
    word: AtomicU64,
    /// Calls that counted as steps, on either path: the machine takes its step numbers
    /// from here, and the lock-free path's arrivals are this minus the machine's.
    steps: AtomicU64,
    /// Successes counted on the lock-free path.
    fast_successes: AtomicU64,
    /// The step of a recent success counted on the lock-free path (0: none).
    fast_last_success: AtomicU64,
    pub(crate) kill: KillSwitch,
    pub(crate) times_calls: bool,
    events: broadcast::Sender<Transition>,
    observers: Box<[Observer]>,
}

/// The machine's state as one number: `epoch << 4 | state << 2 | passthrough << 1 |
/// fast`.
///
/// - `fast`: closed, enabled, no failure counted (see `Machine::fast_path_open`): a call
///   is admitted, and its success counted, with atomics alone.
/// - `passthrough`: disabled mode: a call is admitted with no bookkeeping at all.
#[derive(Clone, Copy)]
struct Word(u64);

impl Word {
    fn of(machine: &Machine) -> Word {
        let fast = u64::from(machine.fast_path_open());
        let passthrough = u64::from(machine.mode() == Mode::Disabled);
        Word(machine.epoch() << 4 | machine.state().code() << 2 | passthrough << 1 | fast)
    }

    fn epoch(self) -> u64 {
        self.0 >> 4
    }

    fn state(self) -> State {
        State::from_code(self.0 >> 2)
    }

    fn fast(self) -> bool {
        self.0 & 1 == 1
    }

    fn passthrough(self) -> bool {
        self.0 & 2 == 2
    }
}

impl Shared {
    pub(crate) fn new(machine: Machine, kill: KillSwitch, observers: Vec<Observer>) -> Self {
        let (events, _) = broadcast::channel(64);
        Shared {
            name: machine.config().name.clone(),
            word: AtomicU64::new(Word::of(&machine).0),
            steps: AtomicU64::new(0),
            fast_successes: AtomicU64::new(0),
            fast_last_success: AtomicU64::new(0),
            times_calls: machine.config().slow_call.is_some(),
            machine: Mutex::new(machine),
            kill,
            events,
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

    fn word(&self) -> Word {
        Word(self.word.load(Ordering::Acquire))
    }

    fn next_step(&self) -> u64 {
        self.steps.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Runs `f` on the machine, publishes its word, then reports the transition it
    /// returned, outside the lock.
    fn with<R>(&self, f: impl FnOnce(&mut Machine) -> (R, Option<Transition>)) -> R {
        let (result, transition) = self.locked(f);
        if let Some(transition) = transition {
            self.emit(transition);
        }
        result
    }

    /// Runs `f` on the machine and publishes its word; the caller reports the
    /// transition.
    fn locked<R>(
        &self,
        f: impl FnOnce(&mut Machine) -> (R, Option<Transition>),
    ) -> (R, Option<Transition>) {
        let mut machine = self.lock();
        machine.catch_up_steps(self.steps.load(Ordering::Acquire));
        let out = f(&mut machine);
        self.word.store(Word::of(&machine).0, Ordering::Release);
        out
    }

    pub(crate) fn admit(&self) -> Admission {
        let killed = self.kill.is_killed();
        let word = self.word();
        if !killed {
            let generation = epoch_generation(word.epoch());
            if word.fast() {
                return Admission::Call(Permit::fast(generation, self.next_step()));
            }
            if word.passthrough() {
                return Admission::Call(Permit::passthrough(generation, word.state()));
            }
        }
        let now = now();
        let admission = self.with(|m| m.admit_with(|| self.next_step(), now, killed));
        self.observe_skip(&admission);
        admission
    }

    pub(crate) fn advise(&self) -> Advice {
        let killed = self.kill.is_killed();
        let now = now();
        let advice = self.with(|m| m.advise_with(|| self.next_step(), now, killed));
        if let Advice::Skip(skip) = &advice {
            self.observe_skip(&Admission::Skip(*skip));
        }
        advice
    }

    /// Whether a permit may be used as it is: no kill, and no change of state or mode
    /// since it was given.
    pub(crate) fn still_valid(&self, permit: &Permit) -> bool {
        !self.kill.is_killed() && self.word().epoch() == permit.epoch()
    }

    pub(crate) fn revalidate(&self, permit: Permit) -> Admission {
        let killed = self.kill.is_killed();
        let now = now();
        let admission = self.with(|m| m.revalidate_with(permit, || self.next_step(), now, killed));
        self.observe_skip(&admission);
        admission
    }

    pub(crate) fn record(&self, permit: Permit, outcome: Outcome, elapsed: Option<Duration>) {
        if !permit.is_recorded() {
            return;
        }
        if permit.is_fast() && outcome == Outcome::Success {
            let word = self.word();
            // Still closed with no failure counted, same generation: a success changes
            // nothing but the count. (A success racing a failure that is being recorded
            // counts as having come first.)
            if word.fast() && word.epoch() == permit.epoch() {
                self.fast_successes.fetch_add(1, Ordering::Relaxed);
                self.fast_last_success
                    .store(permit.step(), Ordering::Relaxed);
                if !self.observers.is_empty() {
                    self.notify(&Event::Recorded {
                        name: &self.name,
                        outcome: &outcome,
                        probe: false,
                        at: now(),
                    });
                }
                return;
            }
        }
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
                at,
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

    /// The machine's snapshot, with what the lock-free path counted added in.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let killed = self.kill.is_killed();
        let now = now();
        self.with(|m| {
            let transition = m.tick(now);
            let mut snapshot = m.snapshot(now, killed);
            // Read after the machine: every step the machine counted is in `steps`.
            let steps = self.steps.load(Ordering::Acquire).max(snapshot.step);
            let fast_arrivals = steps - snapshot.counts.arrived.min(steps);
            let counts = &mut snapshot.counts;
            counts.arrived += fast_arrivals;
            counts.made += fast_arrivals - m.fast_corrections().min(fast_arrivals);
            counts.successes += self.fast_successes.load(Ordering::Relaxed);
            let fast_last = self.fast_last_success.load(Ordering::Relaxed);
            if fast_last > 0 {
                snapshot.last_success_step = snapshot.last_success_step.max(Some(fast_last));
            }
            snapshot.step = steps;
            (snapshot, transition)
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

    pub(crate) fn set_threshold_relief(&self, relief: u32) {
        self.with(|m| (m.set_threshold_relief(relief), None));
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Transition> {
        self.events.subscribe()
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
        let _ = self.events.send(t);
    }

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

    /// The wrapped service is about to be called with this permit.
    pub(crate) fn mark_called(&mut self) {
        self.called = true;
    }

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
