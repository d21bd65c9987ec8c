//! The state every clone of a breaker shares: the machine behind a lock (for one key's
//! breaker of a keyed registry, made when first needed), its door published for calls to
//! read without the lock, the running totals, the kill switch, and the events.
//!
//! A call is decided by [`Door::admit`] on the published door, with atomics alone,
//! unless the decision changes the state (a probe, a half-open past its dwell limit) or
//! the door is being written: then the machine decides, under its lock, with the same
//! function on its own door. Either way the decision is carried out by one function
//! ([`Shared::carry_out`]) into one [`Decision`]. A plain call at a closed door with the
//! kill switch off, the decision of most calls, is made from the door's first word and the
//! switch before the door is asked ([`Shared::admit_at_once`]): the call `Door::admit`
//! would admit there.

// Each `#[inline(always)]` here pays in the awaited benchmark (the shared state:
// docs/performance.md, "Inlining").
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use once_cell::race::OnceBox;
use tokio::sync::{broadcast, watch};

use crate::breaker::changed::Changed;
use crate::breaker::clock::{self, now};
use crate::breaker::error::BreakerName;
use crate::breaker::kill::KillSwitch;
use crate::breaker::machine::door::{Admission, Clock, Door, Fixed};
use crate::breaker::machine::{Kind, Machine, Recorded};
use crate::breaker::nanos::Nanos;
use crate::breaker::outcome::Outcome;
use crate::breaker::settings::{Config, Mode};
use crate::breaker::snapshot::{Counts, Snapshot};
use crate::breaker::state::{Advice, FailureRecord, NextProbe, Reason, Skip, State, Transition};
pub(in crate::breaker) use crate::breaker::sync::delivery::DeliveryGroup;
use crate::breaker::sync::{lock, Mutex, MutexGuard};

mod events;
mod permit;
mod published;
mod tally;

pub(in crate::breaker) use self::events::Observer;
use self::events::{Events, Queued, Reporter};
use self::permit::Ticket;
pub(in crate::breaker) use self::permit::{Admitted, HeldCall, Permit};
use self::published::Published;
use self::tally::Tally;

/// What was decided for one call.
pub(in crate::breaker) enum Decision {
    /// Make the call.
    Call(Permit),
    /// Do not make it; the fallback answers.
    Skip(Skip),
}

impl From<Owned<&Arc<Shared>>> for Decision {
    #[inline(always)]
    fn from(decision: Owned<&Arc<Shared>>) -> Self {
        match decision {
            Ok(permit) => Decision::Call(permit),
            Err((skip, _)) => Decision::Skip(skip),
        }
    }
}

/// The caller's reference to the breaker, as a decision takes it: borrowed (a call's
/// permit holds a clone of it) or handed on (a call's permit holds it, and a skip gives it
/// back), which spares a keyed registry's call a second count of the same reference.
trait Owner: Sized {
    fn shared(&self) -> &Arc<Shared>;
    fn permit(self, ticket: Ticket) -> Permit;
}

impl Owner for &Arc<Shared> {
    #[inline(always)]
    fn shared(&self) -> &Arc<Shared> {
        self
    }

    #[inline(always)]
    fn permit(self, ticket: Ticket) -> Permit {
        Permit::new(self.clone(), ticket)
    }
}

impl Owner for Arc<Shared> {
    #[inline(always)]
    fn shared(&self) -> &Arc<Shared> {
        self
    }

    #[inline(always)]
    fn permit(self, ticket: Ticket) -> Permit {
        Permit::new(self, ticket)
    }
}

/// A decision with the caller's reference: in the permit, or given back with a skip.
type Owned<O> = Result<Permit, (Skip, O)>;

/// See the [module docs](self). What every call reads comes first: the door, the kill
/// switch, whether anyone observes, and the head of the totals (where they are counted
/// once spread); what calls write follows (what the totals count on the way through), and
/// the `Arc`'s reference counts, also written by every call, come just before. A call on
/// a breaker that is not in the cache (one key of many in a keyed registry) waits for two
/// or three lines, side by side. It is not aligned to a cache line: aligned, each breaker
/// took 64 bytes more (the `Arc`'s counts on a line of their own), and the awaited
/// benchmark measured no call slower unaligned, while a call to one of 10,000 keys cost
/// microseconds in most of its full runs aligned (docs/performance.md).
///
/// Public to the fallback trait's hidden methods (a fallback that says why it answered
/// reads the breaker's name and, for a permanent failure, its message), and unnameable
/// outside the crate: the module is private.
#[repr(C)]
pub struct Shared {
    published: Published,
    pub(in crate::breaker) kill: KillSwitch,
    /// Whether anyone is told of outcomes and skips: read by every quiet success and skip.
    observed: bool,
    tally: Tally,
    pub(in crate::breaker) name: BreakerName,
    /// The state machine and what goes with it: made with the breaker, or, for a breaker
    /// made by [`Shared::sharing`] (each key's of a keyed registry), when first needed.
    /// Calls that pass a closed breaker and succeed need none of it: the published door
    /// decides them and the tally counts them, so most keys never have one.
    rest: OnceBox<Rest>,
    /// The settings it was built with but for its name and jitter seed: a machine made
    /// later is made from them.
    settings: Arc<Config>,
}

/// The state machine behind its lock, and what is made when first needed with it.
struct Rest {
    machine: Mutex<Machine>,
    /// Made when first needed ([`Shared::events`]), unless there are observers or a
    /// group to count them in: most breakers of a keyed registry never report an event.
    events: OnceLock<Arc<Events>>,
    /// Told of every change of the published door, once something waits for changes
    /// ([`Shared::changed`]): made then, under the machine's lock, so that a change is
    /// either seen by the waiter's look or told to it.
    changes: OnceLock<watch::Sender<()>>,
}

impl Rest {
    fn new(machine: Machine) -> Box<Self> {
        Box::new(Rest {
            machine: Mutex::new(machine),
            events: OnceLock::new(),
            changes: OnceLock::new(),
        })
    }
}

/// Whether `counts` hold only what a breaker counts before its machine is needed: quiet
/// successes, killed calls, and calls cancelled or abandoned in the closed state. Anything
/// else (a failure, a skip of an open breaker, a probe) went through the machine.
fn counted_without_a_machine(counts: &Counts) -> bool {
    let by_a_machine = [
        counts.failures,
        counts.ignored,
        counts.late,
        counts.probes,
        counts.would_have_skipped,
        counts.skipped_open,
        counts.skipped_half_open_full,
        counts.skipped_forced_open,
    ];
    by_a_machine.iter().all(|&count| count == 0)
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// An arriving call's clocks, read when its decision first needs them.
struct Arrival<'a> {
    tally: &'a Tally,
    step: Option<u64>,
    now: Option<Instant>,
}

/// What an arriving call read of its clocks on the door, for the machine to decide with
/// the same values.
#[derive(Clone, Copy, Default)]
struct Read {
    step: Option<u64>,
    now: Option<Instant>,
}

impl Arrival<'_> {
    #[inline(always)]
    fn read(&self) -> Read {
        Read {
            step: self.step,
            now: self.now,
        }
    }
}

impl Clock for Arrival<'_> {
    #[inline(always)]
    fn step(&mut self) -> u64 {
        *self.step.get_or_insert_with(|| self.tally.take_step())
    }

    #[inline(always)]
    fn counted(&mut self) -> u64 {
        self.step.unwrap_or_else(|| self.tally.steps())
    }

    #[inline(always)]
    fn now(&mut self) -> Instant {
        *self.now.get_or_insert_with(now)
    }

    /// Proven without reading the clock when it can be (see [`clock`]); once read, the
    /// clock's time decides, so that one call is decided at one time.
    #[inline(always)]
    fn before(&mut self, at: Nanos) -> bool {
        (self.now.is_none() && clock::surely_before(at)) || self.now() < at.instant()
    }
}

impl Shared {
    /// A breaker of `machine`, obeying `kill`, telling `observers` in order and
    /// `at_once` by the task that made each event; its events are counted in `group`
    /// too, if it is in one.
    pub(in crate::breaker) fn new(
        machine: Machine,
        kill: KillSwitch,
        (observers, at_once): (Vec<Observer>, Vec<Observer>),
        group: Option<Arc<DeliveryGroup>>,
    ) -> Self {
        let name = machine.name().clone();
        let observed = !(observers.is_empty() && at_once.is_empty());
        let name_copied = BreakerName::new(name.clone());
        let shared = Shared::made(&machine, name_copied, Tally::per_thread(), kill, observed);
        let rest = Rest::new(machine);
        if observed || group.is_some() {
            let reporter = Reporter::new(name, observers, at_once);
            let _ = rest.events.set(Arc::new(Events::new(reporter, group)));
        }
        let _ = shared.rest.set(rest);
        shared
    }

    /// A closed breaker with the settings `config` shares with other breakers, but for
    /// its own `name` (and the jitter seed derived from it: see [`Machine::sharing`]),
    /// obeying `kill`, with no observers. Its machine is made when first needed, if one
    /// made then is the one made now ([`Machine::alike_made_later`]).
    pub(in crate::breaker) fn sharing(
        config: Arc<Config>,
        name: Arc<str>,
        kill: KillSwitch,
    ) -> Self {
        let later = Machine::alike_made_later(&config);
        let machine = Machine::sharing(config, name, now());
        let name = BreakerName::copied_when_rejected(machine.name().clone());
        let shared = Shared::made(&machine, name, Tally::default(), kill, false);
        if !later {
            let _ = shared.rest.set(Rest::new(machine));
        }
        shared
    }

    /// A breaker named `name`, counting in `tally`, whose machine, if it has one yet, is
    /// `machine` as it is now.
    fn made(
        machine: &Machine,
        name: BreakerName,
        tally: Tally,
        kill: KillSwitch,
        observed: bool,
    ) -> Self {
        Shared {
            tally,
            published: Published::new(&machine.door()),
            observed,
            name,
            kill,
            rest: OnceBox::new(),
            settings: machine.settings().clone(),
        }
    }

    /// The machine and what goes with it, made now if they were not.
    #[inline]
    fn rest(&self) -> &Rest {
        self.rest.get_or_init(|| self.made_again())
    }

    /// The machine, made now: a breaker whose machine is made later was made when it
    /// would be the same.
    #[cold]
    #[inline(never)]
    fn made_again(&self) -> Box<Rest> {
        Rest::new(self.machine_made_now())
    }

    fn machine_made_now(&self) -> Machine {
        Machine::sharing(self.settings.clone(), self.name.full().clone(), now())
    }

    /// The events, made now if they were not: a breaker made without observers or a group
    /// reports to the log and its subscribers alone.
    fn events(&self) -> &Arc<Events> {
        self.rest().events.get_or_init(|| {
            let reporter = Reporter::new(self.name.full().clone(), Vec::new(), Vec::new());
            Arc::new(Events::new(reporter, None))
        })
    }

    /// The events, if they have been made.
    fn events_made(&self) -> Option<&Arc<Events>> {
        self.rest.get()?.events.get()
    }

    /// The machine (see [`lock`]).
    fn lock(&self) -> MutexGuard<'_, Machine> {
        lock(&self.rest().machine)
    }

    /// Runs `f` on the machine and publishes its door; queues what `f` reports (an
    /// outcome or a change of mode, then the transition it caused) and delivers it once
    /// the lock is released.
    fn locked<R>(
        &self,
        f: impl FnOnce(&mut Machine, &Tally) -> (R, Option<Queued>, Option<Transition>),
    ) -> R {
        let rest = self.rest();
        let mut machine = lock(&rest.machine);
        let (value, event, transition) = f(&mut machine, &self.tally);
        let door = machine.door();
        // Read under the lock: a waiter made before this sees the change told, one made
        // after sees the door stored here. The published door is this writer's own.
        let changes = rest
            .changes
            .get()
            .filter(|_| self.published.load_whole() != Some(door));
        self.published.store(&door);
        let reported = event.is_some() || transition.is_some();
        let mut at_once = None;
        for event in event.into_iter().chain(transition.map(Queued::Transition)) {
            if self.events().told_at_once() {
                at_once.get_or_insert_with(Vec::new).push(event.clone());
            }
            self.events().queue(event);
        }
        drop(machine);
        if let Some(changes) = changes {
            changes.send_replace(());
        }
        for event in at_once.iter().flatten() {
            self.events().tell_at_once(event);
        }
        if reported {
            self.events().deliver();
        }
        value
    }

    /// [`locked`](Self::locked), for what reports a transition at most.
    fn with<R>(&self, f: impl FnOnce(&mut Machine, Fixed) -> (R, Option<Transition>)) -> R {
        let now = now();
        self.locked(|machine, tally| {
            let at = Fixed {
                step: tally.steps(),
                now,
            };
            let (value, transition) = f(machine, at);
            (value, None, transition)
        })
    }

    /// Decides the next call. See the [module docs](self).
    #[inline(always)]
    pub(in crate::breaker) fn decide(self: &Arc<Self>) -> Decision {
        Self::decide_by(self, Decision::from)
    }

    /// [`decide`](Self::decide), by a caller that hands its reference on: a call's permit
    /// holds it, a skip gives it back.
    #[inline(always)]
    pub(in crate::breaker) fn decide_owned(self: Arc<Self>) -> Result<Permit, (Skip, Arc<Self>)> {
        Self::decide_by(self, |decision| decision)
    }

    /// [`decide`](Self::decide), by a caller whose call [`admit_at_once`](Self::admit_at_once)
    /// did not admit, handing the decision to `hold`: a decision made here goes on in
    /// registers, one made out of line is handed on from there.
    #[inline(always)]
    pub(in crate::breaker) fn decide_by_door_with<R>(
        self: &Arc<Self>,
        hold: impl FnOnce(Decision) -> R,
    ) -> R {
        Self::decide_by_door(self, |decision| hold(Decision::from(decision)))
    }

    /// The decision, taking the caller's reference as `this` says; see
    /// [`decide`](Self::decide). A call [admitted at once](Self::admit_at_once) is decided
    /// first.
    #[inline(always)]
    fn decide_by<O: Owner, R>(this: O, hold: impl FnOnce(Owned<O>) -> R) -> R {
        match Self::called_at_once(this) {
            Ok(permit) => hold(Ok(permit)),
            Err(this) => Self::decide_by_door(this, hold),
        }
    }

    /// A plain call's permit, if the door admits one at once (see
    /// [`decide_by`](Self::decide_by) and [`admit_at_once`](Self::admit_at_once)), or the
    /// caller's reference back.
    #[inline(always)]
    fn called_at_once<O: Owner>(this: O) -> Result<Permit, O> {
        match this.shared().admit_at_once() {
            Some(admitted) => Ok(this.permit(admitted.ticket())),
            None => Err(this),
        }
    }

    /// A plain call, if the door admits one at once, without its permit: a service
    /// holds it from `poll_ready` to `call`, where [`permit_for`](Self::permit_for) makes
    /// the permit.
    #[inline]
    pub(in crate::breaker) fn admit_at_once(&self) -> Option<Admitted> {
        let word = self.published.word();
        if Door::calls_at_once(word) && !self.kill.is_killed() {
            return Some(Admitted::new(Ticket::new(
                &Door::alone(word),
                Kind::Call,
                None,
            )));
        }
        None
    }

    /// The permit of a call [admitted at once](Self::admit_at_once).
    #[inline]
    pub(in crate::breaker) fn permit_for(self: &Arc<Self>, admitted: Admitted) -> Permit {
        Permit::new(self.clone(), admitted.ticket())
    }

    /// Whether a call [admitted at once](Self::admit_at_once) may still be made as
    /// admitted, as [`Permit::stands`] says of a permit.
    #[inline]
    pub(in crate::breaker) fn still_admits(&self, admitted: Admitted) -> bool {
        self.stands(admitted.ticket(), true)
    }

    /// The decision of a door that does not admit a plain call at once: by the door, or
    /// by the machine.
    #[inline(always)]
    fn decide_by_door<O: Owner, R>(this: O, hold: impl FnOnce(Owned<O>) -> R) -> R {
        let shared = this.shared();
        let killed = shared.kill.is_killed();
        // A door that is its first word alone (closed, killed or disabled; half-open
        // without a dwell limit) is decided with nothing else read. Its clocks are made
        // here, and not before: made before, they are written to memory on every call,
        // for a slow path to read.
        if let Some(door) = shared.published.load_alone() {
            return hold(Self::decide_at(this, door, killed));
        }
        // Held in each arm: a decision made here then goes on in registers, rather than
        // meeting the one from out of line in memory.
        match shared.published.load_whole() {
            Some(door) => hold(Self::decide_at(this, door, killed)),
            None => hold(Self::decide_locked(this, killed, Read::default())),
        }
    }

    /// The decision at a published `door`, or the machine's if the admission changes the
    /// state.
    #[inline(always)]
    fn decide_at<O: Owner>(this: O, door: Door, killed: bool) -> Owned<O> {
        let mut clock = this.shared().arrival();
        let admission = door.admit(killed, &mut clock);
        // Only the machine carries out what changes the state.
        if matches!(admission, Admission::Probe | Admission::Expired) {
            let read = clock.read();
            return Self::decide_locked(this, killed, read);
        }
        Self::carry_out(this, &door, admission)
    }

    /// The machine's decision, with the clocks as the call read them on the door.
    #[inline(never)]
    fn decide_locked<O: Owner>(this: O, killed: bool, read: Read) -> Owned<O> {
        let (door, admission) = this.shared().locked(|machine, tally| {
            let mut clock = Arrival {
                tally,
                step: read.step,
                now: read.now,
            };
            let (admission, first, then) = machine.admit(killed, &mut clock);
            (
                (machine.door(), admission),
                first.map(Queued::Transition),
                then,
            )
        });
        Self::carry_out(this, &door, admission)
    }

    /// Turns an admission reached on `door` into the call's decision, and counts a skip.
    #[inline(always)]
    fn carry_out<O: Owner>(this: O, door: &Door, admission: Admission) -> Owned<O> {
        let ticket = match admission {
            Admission::Call => Ticket::new(door, Kind::Call, None),
            Admission::Probe => Ticket::new(door, Kind::Probe, None),
            Admission::Shadow(reason) => Ticket::new(door, Kind::Shadow, Some(reason)),
            Admission::Pass => Ticket::pass(door),
            Admission::Skip(skip) => return Err((this.shared().skipped(door, skip), this)),
            Admission::Expired => unreachable!("the machine re-opens an expired half-open"),
        };
        Ok(this.permit(ticket))
    }

    /// Counts a skip and reports it; in disabled mode, which counts and reports nothing
    /// (a killed call included), neither.
    #[inline(always)]
    fn skipped(&self, door: &Door, skip: Skip) -> Skip {
        if door.mode() == Mode::Disabled {
            return skip;
        }
        self.tally.skipped(skip.reason());
        if self.observed {
            self.events().skipped(skip);
        }
        skip
    }

    /// What a call now would get, without making it: with nothing counted
    /// (`count: false`), or with a skip counted as a skipped call, and a step of a
    /// cooldown in calls (`count: true`). A probe is not granted, and a call or a probe
    /// counts nothing: the call, when it comes through the layer, is decided then.
    pub(in crate::breaker) fn advise(&self, count: bool) -> Advice {
        let killed = self.kill.is_killed();
        loop {
            let door = self.door();
            let mut looking = Fixed {
                step: self.tally.steps() + 1,
                now: now(),
            };
            let admission = match door.admit(killed, &mut looking) {
                Admission::Skip(_) if count => door.admit(killed, &mut self.arrival()),
                admission => admission,
            };
            return match admission {
                Admission::Expired => {
                    // The machine re-opens it; then look again.
                    self.with(|machine, at| ((), machine.tick(at)));
                    continue;
                }
                Admission::Skip(skip) if count => Advice::Skip(self.skipped(&door, skip)),
                admission => admission
                    .advice()
                    .expect("an expired door is applied above"),
            };
        }
    }

    #[inline(always)]
    fn arrival(&self) -> Arrival<'_> {
        Arrival {
            tally: &self.tally,
            step: None,
            now: None,
        }
    }

    /// When `skip` was decided on a breaker open until a reset by a failure of the
    /// service's own (open, with no probe scheduled, and not killed or forced: a
    /// permanent failure), that failure, if it still holds the breaker (a person may have
    /// reset it since, and another failure opened it). Reads the machine: only a rejection
    /// or a context-aware fallback asks, and only in this state, which only a person ends.
    #[inline]
    pub(in crate::breaker) fn permanent_failure(&self, skip: &Skip) -> Option<FailureRecord> {
        skip.held_by_a_permanent_failure()
            .then(|| self.permanent_failure_now())
            .flatten()
    }

    #[cold]
    #[inline(never)]
    fn permanent_failure_now(&self) -> Option<FailureRecord> {
        self.lock().permanent_failure().cloned()
    }

    /// When `skip` says the service asked to wait longer than its next probe
    /// ([`Skip::asked_longer`]: a `Retry-After` above the cap), the time it asked for, if
    /// the breaker still says so (a person may have reset it since). Reads the machine:
    /// only a skip of such an opening asks.
    #[inline]
    pub(in crate::breaker) fn requested_until(&self, skip: &Skip) -> Option<Instant> {
        skip.asked_longer()
            .then(|| self.requested_until_now())
            .flatten()
    }

    #[cold]
    #[inline(never)]
    fn requested_until_now(&self) -> Option<Instant> {
        self.lock().requested_until()
    }

    /// A call decided as made while the kill switch was on, then found not killed: it
    /// stays decided as killed (its service was not made ready), counted as such.
    pub(in crate::breaker) fn keep_killed(&self, permit: Permit) -> Skip {
        let state = permit.state();
        permit.withdraw();
        let skip = Skip::new(Reason::Killed, state, NextProbe::Manual);
        self.skipped(&self.door(), skip)
    }

    /// Whether a call admitted with `ticket` may still be made: the kill switch is off,
    /// the breaker is in the same epoch, and no deadline of that epoch has passed (a
    /// probe reserved before a half-open's dwell limit and called after it is not made,
    /// whether or not anything made the machine apply the limit meanwhile). Without the
    /// `clock`, a call at a door whose deadline may have passed is said not to stand, for
    /// the caller to ask again with it.
    #[inline(always)]
    fn stands(&self, ticket: Ticket, clock: bool) -> bool {
        let word = self.published.word();
        !self.kill.is_killed()
            && Door::in_epoch(word, ticket.epoch())
            && !(Door::may_expire(word) && (!clock || self.expired()))
    }

    /// Whether the door's deadline has passed. Out of line: only a half-open with a dwell
    /// limit asks.
    #[cold]
    #[inline(never)]
    fn expired(&self) -> bool {
        self.door().expired(&mut self.arrival())
    }

    /// Records a call's outcome: a success that changes nothing is counted with one
    /// atomic add; anything else goes to the machine.
    #[inline(always)]
    fn settle(&self, ticket: Ticket, outcome: Outcome, elapsed: Option<Duration>) {
        if matches!(outcome, Outcome::Success)
            && ticket.kind() == Some(Kind::Call)
            && Door::quiet_in(self.published.word(), ticket.epoch())
        {
            // Looked up before the count: after an atomic add a load waits for it.
            let observed = self.observed;
            self.tally.quiet_success();
            if observed {
                self.events().succeeded(elapsed);
            }
            return;
        }
        self.record(ticket, outcome, elapsed);
    }

    /// Records an outcome in the machine; a disabled-mode call's, nowhere.
    #[inline(never)]
    fn record(&self, ticket: Ticket, outcome: Outcome, elapsed: Option<Duration>) {
        let Some(kind) = ticket.kind() else {
            return;
        };
        let epoch = ticket.epoch();
        let now = now();
        let observed = self.observed;
        self.locked(|machine, tally| {
            let at = Fixed {
                step: tally.steps(),
                now,
            };
            let (recorded, transition) = machine.record(epoch, kind, outcome, elapsed, at);
            tally.recorded(kind, &recorded);
            // A shadow call's outcome is reported too (it is counted, though it could
            // not move the breaker): observers count the failures a breaker records.
            let reported = match recorded {
                Recorded::Counted {
                    outcome,
                    failure_rate,
                } if observed => Some(Queued::Recorded {
                    outcome,
                    probe: kind == Kind::Probe,
                    shadow: kind == Kind::Shadow,
                    elapsed,
                    failure_rate,
                }),
                _ => None,
            };
            ((), reported, transition)
        });
    }

    /// A call ended without an outcome (its permit was dropped): cancelled if it was
    /// made, abandoned if not; or a call reserved but not made is decided again, and
    /// handed back uncounted (`counted: false`: its new decision counts it). Only a
    /// probe needs the machine, for its slot. Out of line: every call's permit is
    /// settled instead.
    #[cold]
    #[inline(never)]
    fn release(&self, ticket: Ticket, counted: bool) {
        let Some(kind) = ticket.kind() else {
            return;
        };
        if kind == Kind::Probe {
            self.locked(|machine, _| {
                machine.release(ticket.epoch(), kind);
                ((), None, None)
            });
        }
        if counted {
            self.tally.released(kind, ticket.called());
        }
    }

    /// A view of the breaker now; taking it applies the half-open dwell limit.
    pub(in crate::breaker) fn snapshot(&self) -> Snapshot {
        let killed = self.kill.is_killed();
        if self.rest.get().is_none() {
            // A closed breaker with nothing but passed calls: a machine made now is its
            // own, and it is not made for a look. Unless the counts, read after that look,
            // show what only a machine counts: then it was made meanwhile, and is asked.
            let counts = self.tally.counts();
            if counted_without_a_machine(&counts) {
                let at = Fixed {
                    step: self.tally.steps(),
                    now: now(),
                };
                return self.machine_made_now().snapshot(at, killed, counts);
            }
        }
        self.with(|machine, at| {
            let transition = machine.tick(at);
            let snapshot = machine.snapshot(at, killed, self.tally.counts());
            (snapshot, transition)
        })
    }

    pub(in crate::breaker) fn force_open(&self, until: Option<Instant>) {
        self.with(|machine, at| ((), machine.force_open(until, at)));
    }

    pub(in crate::breaker) fn hold_open(&self, until: Instant) -> bool {
        self.with(|machine, at| machine.hold_open(until, at))
    }

    pub(in crate::breaker) fn release_hold(&self) -> bool {
        self.with(|machine, at| machine.release_hold(at))
    }

    pub(in crate::breaker) fn allow_probe(&self) -> bool {
        self.with(|machine, at| machine.allow_probe(at))
    }

    pub(in crate::breaker) fn reset(&self) {
        self.with(|machine, at| ((), machine.reset(at)));
    }

    /// Switches the mode; a change is reported (logged, and told to observers) in order
    /// with the transitions.
    pub(in crate::breaker) fn set_mode(&self, mode: Mode) {
        self.locked(|machine, _| {
            let changed = machine.set_mode(mode).map(|from| Queued::ModeChanged {
                from,
                to: mode,
                state: machine.state(),
            });
            ((), changed, None)
        });
    }

    /// The mode, as the door last published says.
    pub(in crate::breaker) fn mode(&self) -> Mode {
        self.door().mode()
    }

    /// The door as last published, or the machine's while one is being published.
    fn door(&self) -> Door {
        self.published
            .load_whole()
            .unwrap_or_else(|| self.lock().door())
    }

    /// The state as last published, read without the lock.
    pub(in crate::breaker) fn published_state(&self) -> State {
        self.door().state()
    }

    /// Whether a failure of the service's own holds it open until a person resets it
    /// ([`Failure::permanent`](crate::Failure::permanent)): open, with no probe
    /// scheduled, whatever the kill switch says.
    pub(in crate::breaker) fn held_until_reset(&self) -> bool {
        let door = self.door();
        let at = Fixed {
            step: self.tally.steps() + 1,
            now: now(),
        };
        // Whatever the mode: an observe-only breaker is held all the same.
        door.state() == State::Open && door.next_probe(at) == NextProbe::Manual
    }

    pub(in crate::breaker) fn set_threshold_relief(&self, relief: u32) {
        self.with(|machine, _| (machine.set_threshold_relief(relief), None));
    }

    /// Waits until every event the breaker made before this call has reached its
    /// observers (see [`Delivery::delivered`](crate::breaker::sync::delivery::Delivery::delivered)).
    pub(in crate::breaker) async fn events_delivered(&self) {
        // Events not made yet have had nothing to deliver.
        if let Some(events) = self.events_made() {
            events.delivered().await;
        }
    }

    pub(in crate::breaker) fn subscribe(&self) -> broadcast::Receiver<Transition> {
        self.events().subscribe()
    }

    /// A future that completes at the next change of the door or of the kill switch
    /// (see [`Changed`]). Both are subscribed before it returns, so the caller's look
    /// after it sees what changed before.
    pub(in crate::breaker) fn changed(&self) -> Changed {
        let rest = self.rest();
        let changes = match rest.changes.get() {
            Some(changes) => changes,
            None => {
                // Made under the lock: a change stored before is seen by the caller's
                // look, one stored after finds the channel and tells it.
                let _machine = lock(&rest.machine);
                rest.changes.get_or_init(|| watch::channel(()).0)
            }
        };
        let breaker = changes.subscribe();
        let kill = self.kill.watch();
        Changed::new(self.name.full().clone(), breaker, kill)
    }

    /// The breaker's settings, as it was built with them.
    pub(in crate::breaker) fn config(&self) -> Config {
        self.lock().config()
    }

    /// Tells the observers that the breaker was evicted from its keyed registry, after
    /// whatever is queued.
    pub(in crate::breaker) fn evicted(&self) {
        // Events not made yet have no one to tell: the log does not report an eviction.
        let Some(events) = self.events_made() else {
            return;
        };
        if events.told_at_once() {
            events.tell_at_once(&Queued::Evicted);
        }
        events.queue(Queued::Evicted);
        events.deliver();
    }
}
