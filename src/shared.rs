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
use crate::machine::{Admission, Advice, Cause, Machine, Mode, Permit, Snapshot, Transition};

/// An observer run on every event.
pub(crate) type Observer = Arc<dyn Fn(&Event<'_>) + Send + Sync>;

/// The breaker's clock: `tokio::time`, so paused-time tests run instantly.
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

pub(crate) struct Shared {
    pub(crate) name: Arc<str>,
    machine: Mutex<Machine>,
    /// The machine's epoch (generation and mode), readable without the lock: a permit
    /// whose epoch still matches (and no kill) needs no second look before its call.
    epoch: AtomicU64,
    pub(crate) kill: KillSwitch,
    pub(crate) times_calls: bool,
    events: broadcast::Sender<Transition>,
    observers: Box<[Observer]>,
}

impl Shared {
    pub(crate) fn new(machine: Machine, kill: KillSwitch, observers: Vec<Observer>) -> Self {
        let (events, _) = broadcast::channel(64);
        Shared {
            name: machine.config().name.clone(),
            epoch: AtomicU64::new(machine.epoch()),
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

    /// Runs `f` on the machine, publishes its epoch, then reports the transition
    /// it returned, outside the lock.
    fn with<R>(&self, f: impl FnOnce(&mut Machine) -> (R, Option<Transition>)) -> R {
        let (result, transition) = {
            let mut machine = self.lock();
            let out = f(&mut machine);
            self.epoch.store(machine.epoch(), Ordering::Release);
            out
        };
        if let Some(transition) = transition {
            self.emit(transition);
        }
        result
    }

    pub(crate) fn admit(&self) -> Admission {
        let killed = self.kill.is_killed();
        let admission = self.with(|m| m.admit(now(), killed));
        self.observe_skip(&admission);
        admission
    }

    pub(crate) fn advise(&self) -> Advice {
        let killed = self.kill.is_killed();
        let advice = self.with(|m| m.advise(now(), killed));
        if let Advice::Skip(skip) = &advice {
            self.observe_skip(&Admission::Skip(*skip));
        }
        advice
    }

    /// Whether a permit may be used as it is: no kill, and no change of state since.
    pub(crate) fn still_valid(&self, permit: &Permit) -> bool {
        !self.kill.is_killed() && self.epoch.load(Ordering::Acquire) == permit.epoch()
    }

    pub(crate) fn revalidate(&self, permit: Permit) -> Admission {
        let killed = self.kill.is_killed();
        let admission = self.with(|m| m.revalidate(permit, now(), killed));
        self.observe_skip(&admission);
        admission
    }

    pub(crate) fn record(&self, permit: Permit, outcome: Outcome, elapsed: Option<Duration>) {
        if self.observers.is_empty() {
            self.with(|m| ((), m.record(permit, outcome, elapsed, now())));
            return;
        }
        let at = now();
        let counted = self.with(|m| {
            let outcome = m.apply_slow_call_rule(outcome, elapsed);
            let counted = m.counts_towards_state(&permit).then(|| outcome.clone());
            (counted, m.record(permit, outcome, None, at))
        });
        if let Some(outcome) = counted {
            self.notify(&Event::Recorded {
                name: &self.name,
                outcome: &outcome,
                probe: permit.is_probe(),
                at,
            });
        }
    }

    pub(crate) fn release(&self, permit: Permit, called: bool) {
        self.with(|m| (m.release(permit, called), None));
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        let killed = self.kill.is_killed();
        self.with(|m| {
            let now = now();
            let transition = m.tick(now);
            (m.snapshot(now, killed), transition)
        })
    }

    pub(crate) fn force_open(&self) {
        self.with(|m| ((), m.force_open(now())));
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
