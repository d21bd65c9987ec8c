//! The pure decision core: one breaker's state machine, with no clock, lock or I/O.
//!
//! [`Machine`] holds a breaker's state and answers what changes it: an arriving call
//! that must be decided by the machine ([`Machine::admit`]: a probe, or a half-open past
//! its dwell limit), a call's outcome ([`Machine::record`]), a call that ended without
//! one ([`Machine::release`]), and a person's act (force open, hold open, reset, mode).
//! Every arriving call is decided by [`Door::admit`] on the door the machine derives
//! from its state ([`Machine::door`]); the layer publishes that door so that calls are
//! decided without the lock, by the same function (see `door`). Time and the count of
//! calls come in as arguments, so the same machine runs under `tokio::time`, a test's
//! fake clock or a replay.
//!
//! The machine counts nothing but what its decisions need: the layer keeps the running
//! totals.

pub(in crate::breaker) mod door;
mod window;

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use self::door::{Admission, Clock, Door, Due, Epoch, Fixed};
use self::window::Window;
use crate::breaker::outcome::{Failure, Outcome};
use crate::breaker::settings::{Config, Cooldown, Mode, TripPolicy};
use crate::breaker::snapshot::{Counts, Snapshot};
use crate::breaker::state::{
    Advice, Cause, FailureRecord, NextProbe, Reason, Skip, State, Transition,
};
use crate::later::later;

/// What a call admitted by the machine, or on its door, is. Its discriminant is its
/// code in a permit's word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::breaker) enum Kind {
    /// A call in the closed state.
    Call = 0,
    /// A half-open probe: it holds a slot of its half-open until it ends.
    Probe = 1,
    /// An observe-only call an enabled breaker would have skipped: its outcome is
    /// counted, and changes no state.
    Shadow = 2,
}

/// How the machine took an outcome.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::breaker) enum Recorded {
    /// Counted, as this outcome (after the slow-call rule); `failure_rate`: the trip
    /// policy's reading after it (see [`Machine::reading`]), if the outcome entered
    /// the policy's count.
    Counted {
        outcome: Outcome,
        failure_rate: Option<f64>,
    },
    /// The breaker moved on since the call was admitted (another state or mode): the
    /// outcome counts for nothing. A failure's wait may still have lengthened an opening
    /// (see [`Machine::record`]).
    Late,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Closed,
    /// Open until `due`, kept open by `by`. `asked`: the latest end of a wait a failure
    /// of this opening asked for (its `Retry-After`, uncut), which the probe does not
    /// wait for when it is above the cap: reported, not obeyed (see
    /// [`Machine::requested_until`]).
    Open {
        due: Due,
        by: Opener,
        asked: Option<Instant>,
    },
    /// Successes of this half-open's probes so far (its probes under way are in
    /// [`Machine::probes`]).
    HalfOpen {
        entered_at: Instant,
        successes: u32,
    },
}

/// Who keeps an open breaker open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opener {
    /// Its own calls (a trip, a failed probe): `due` is its cooldown.
    Breaker,
    /// A hint from outside opened it or lengthened its wait; `own` is the wait of its
    /// own underneath (the next call, if it had none), back in force when the hint is
    /// released.
    Hint { own: Due },
    /// A person (until a reset, or until `due`).
    Person,
}

/// The probes of one half-open (of one epoch) still running, each holding a slot until it
/// ends. A failed probe's siblings keep theirs after their half-open has ended: until
/// they end they take slots from any later half-open, so the service never sees more
/// probes at once than the limit; but never past their half-open's dwell limit, `until`:
/// a probe that hangs is written off then, so it cannot keep a later half-open from
/// probing; and never past a person's act (a reset, a forced open) or a change of mode,
/// which write them off. (When a person acts, the mode changes or the dwell limit passes,
/// the probes under way are written off at once: their results come late and count for
/// nothing.)
#[derive(Debug, Clone, Copy)]
struct Probes {
    epoch: Epoch,
    running: u32,
    until: Option<Instant>,
}

/// One breaker's state machine. See the [module docs](self).
#[derive(Debug, Clone)]
pub(in crate::breaker) struct Machine {
    /// The settings, but for the name and the jitter seed: one copy shared by every key's
    /// breaker of a keyed registry.
    config: Arc<Config>,
    /// The breaker's name (in a keyed registry, with its key).
    name: Arc<str>,
    /// The jitter seed it was made with (in a keyed registry, its key's).
    jitter_seed: Option<u64>,
    phase: Phase,
    /// Why it is in its state: the latest transition's cause (`None`: closed since built).
    cause: Option<Cause>,
    generation: u64,
    mode: Mode,
    consecutive: u32,
    threshold_relief: u32,
    window: Window,
    reopens: u32,
    rng: u64,
    last_failure: Option<FailureRecord>,
    /// The probes under way: this half-open's, and earlier ones' that still hold slots.
    probes: Vec<Probes>,
    /// The first generation whose calls were admitted after a person's latest act (a
    /// reset, a forced open, a probe allowed, a change of mode): a late outcome of a call
    /// admitted before it never lengthens an opening (see [`Machine::record`]), so it
    /// cannot undo what the person did.
    acted: u64,
}

impl Machine {
    /// A closed breaker with these settings; `now` starts its time windows.
    pub(in crate::breaker) fn new(config: Config, now: Instant) -> Self {
        let (name, jitter_seed) = (config.name.clone(), config.jitter_seed);
        Machine::made(Arc::new(config), name, jitter_seed, now)
    }

    /// A closed breaker with the settings `config` shares with other breakers (each key's
    /// of a keyed registry), but for its own `name` and a jitter seed of its own, derived
    /// from `config`'s and its name: breakers that opened together do not probe together,
    /// and runs with a seed set repeat.
    pub(in crate::breaker) fn sharing(config: Arc<Config>, name: Arc<str>, now: Instant) -> Self {
        let jitter_seed = Some(match config.jitter_seed {
            Some(seed) => seed ^ BuildHasherDefault::<DefaultHasher>::default().hash_one(&*name),
            None => RandomState::new().hash_one(&*name),
        });
        Machine::made(config, name, jitter_seed, now)
    }

    /// Whether a machine made from `config` by [`sharing`](Self::sharing) at any time is
    /// the one made now: its trip policy keeps no window of time, which would start when
    /// it is made. (With a seed set in `config`; with none, its seed is as random then as
    /// now.)
    pub(in crate::breaker) fn alike_made_later(config: &Config) -> bool {
        matches!(config.trip, TripPolicy::ConsecutiveFailures(_))
    }

    fn made(config: Arc<Config>, name: Arc<str>, jitter_seed: Option<u64>, now: Instant) -> Self {
        Machine {
            window: Window::new(&config.trip, now),
            rng: jitter_seed.unwrap_or(0x9E37_79B9_7F4A_7C15) | 1,
            mode: config.mode,
            config,
            name,
            jitter_seed,
            phase: Phase::Closed,
            cause: None,
            generation: 0,
            consecutive: 0,
            threshold_relief: 0,
            reopens: 0,
            last_failure: None,
            probes: Vec::new(),
            acted: 0,
        }
    }

    /// The settings it shares with other breakers, but for its name and jitter seed.
    pub(in crate::breaker) fn settings(&self) -> &Arc<Config> {
        &self.config
    }

    /// The settings it was made with, its name and jitter seed included.
    pub(in crate::breaker) fn config(&self) -> Config {
        Config {
            name: self.name.clone(),
            jitter_seed: self.jitter_seed,
            ..Config::clone(&self.config)
        }
    }

    /// The breaker's name.
    pub(in crate::breaker) fn name(&self) -> &Arc<str> {
        &self.name
    }

    pub(in crate::breaker) fn epoch(&self) -> Epoch {
        Epoch::new(self.generation, self.mode)
    }

    pub(in crate::breaker) fn state(&self) -> State {
        self.door().state()
    }

    /// Probes under way: this half-open's, and those of earlier ones that still hold a
    /// slot.
    pub(in crate::breaker) fn probes_in_flight(&self) -> u32 {
        self.probes.iter().map(|p| p.running).sum()
    }

    /// A view of the breaker as of `at`, with the layer's running totals (`counts`) and
    /// its kill switch (`killed`), which the machine does not keep.
    pub(in crate::breaker) fn snapshot(&self, at: Fixed, killed: bool, counts: Counts) -> Snapshot {
        let next_probe = self.door().next_probe(at);
        Snapshot {
            name: self.name.clone(),
            state: self.state(),
            cause: self.cause,
            mode: self.mode,
            killed,
            consecutive_failures: self.consecutive,
            window: self.window.totals(at.now),
            probes_in_flight: self.probes_in_flight(),
            last_failure: self.last_failure.clone(),
            counts,
            next_probe: if killed {
                NextProbe::Manual
            } else {
                next_probe
            },
            next_probe_once_revived: next_probe,
            requested_until: self.requested_until(),
            advice: self.advice(killed, at),
            forced_until: match self.phase {
                Phase::Open {
                    due: Due::At { time, .. },
                    by: Opener::Person,
                    ..
                } => time,
                _ => None,
            },
            generation: self.generation,
            taken_at: at.now,
        }
    }

    /// What a call arriving at `at` would get, with nothing counted: the door's own
    /// decision, as [`peek`](crate::CircuitBreakerHandle::peek) tells it (the call is the
    /// next step).
    fn advice(&self, killed: bool, at: Fixed) -> Advice {
        let mut looking = Fixed {
            step: at.step + 1,
            now: at.now,
        };
        // A snapshot is taken after the deadlines passed by `at` are applied
        // (`Machine::tick`), so the door has none left: `Expired` cannot come. Were one
        // left, the next call would be decided after it re-opens, so not made now.
        self.door()
            .admit(killed, &mut looking)
            .advice()
            .unwrap_or(Advice::Skip(Skip::new(
                Reason::Open,
                State::Open,
                NextProbe::After { calls: 1, at: None },
            )))
    }

    /// The failure of the service's own that holds it open until a reset, if one does
    /// now (the transition into its state was for one: only a person's act or a change
    /// of state ends such a hold). Nothing is recorded while it holds, so the last failure
    /// is the one.
    pub(in crate::breaker) fn permanent_failure(&self) -> Option<&FailureRecord> {
        self.last_failure
            .as_ref()
            .filter(|_| self.cause == Some(Cause::PermanentFailure))
    }

    /// When the service asked to be left alone until, if that is later than the breaker
    /// waits: an opening whose `Retry-After` was above the cap (the probe goes at the
    /// cap), open by the breaker's own calls or a hint. `None` for any other state, a
    /// person's hold included (the person's wait is the one that holds).
    pub(in crate::breaker) fn requested_until(&self) -> Option<Instant> {
        let Phase::Open {
            due: Due::At { time, .. },
            by: Opener::Breaker | Opener::Hint { .. },
            asked: Some(asked),
        } = self.phase
        else {
            return None;
        };
        time.is_none_or(|time| time < asked).then_some(asked)
    }

    /// What an arriving call is decided on, derived from the state.
    pub(in crate::breaker) fn door(&self) -> Door {
        let epoch = self.epoch();
        let door = match self.phase {
            Phase::Closed => Door::closed(
                epoch,
                self.consecutive == 0
                    && matches!(self.config.trip, TripPolicy::ConsecutiveFailures(_))
                    && self.config.slow_call.is_none(),
            ),
            Phase::Open { due, by, .. } => Door::open(
                epoch,
                due,
                by == Opener::Person,
                self.requested_until().is_some(),
            ),
            Phase::HalfOpen { entered_at, .. } => Door::half_open(
                epoch,
                self.probes_in_flight() < self.config.half_open_probes,
                // The first deadline: this half-open's dwell limit, or an earlier one's
                // whose probes still hold slots.
                self.probes
                    .iter()
                    .filter_map(|p| p.until)
                    .chain(self.dwell_limit(entered_at))
                    .min(),
            ),
        };
        door.timed_if(self.config.times_calls())
    }

    /// Decides an arriving call on the door, and carries out a decision that changes
    /// the state: a deadline that passed is applied first (see [`Machine::tick`]); a
    /// probe turns an open breaker half-open and takes a slot. A returned
    /// [`Admission::Probe`] was granted in [`Machine::epoch`] as it is now. The changes
    /// come in the order made: a half-open past its dwell limit re-opened, then the
    /// half-open this call started (both, when the cooldown of the re-opening is over too).
    pub(in crate::breaker) fn admit(
        &mut self,
        killed: bool,
        clock: &mut impl Clock,
    ) -> (Admission, Option<Transition>, Option<Transition>) {
        let mut admission = self.door().admit(killed, clock);
        let mut reopened = None;
        if admission == Admission::Expired {
            reopened = self.tick(clock.fixed());
            admission = self.door().admit(killed, clock);
        }
        let mut transition = None;
        if admission == Admission::Probe && matches!(self.phase, Phase::Open { .. }) {
            // The wait is over: half-open starts, whatever probes of earlier ones still
            // run; the call is its probe if they leave a slot.
            let phase = Phase::HalfOpen {
                entered_at: clock.now(),
                successes: 0,
            };
            transition = Some(self.enter(phase, clock.fixed(), Cause::CooldownElapsed));
            admission = self.door().admit(killed, clock);
        }
        if let (Admission::Probe, Phase::HalfOpen { entered_at, .. }) = (admission, self.phase) {
            let (epoch, until) = (self.epoch(), self.dwell_limit(entered_at));
            match self.probes.iter_mut().find(|p| p.epoch == epoch) {
                Some(probes) => probes.running += 1,
                None => self.probes.push(Probes {
                    epoch,
                    running: 1,
                    until,
                }),
            }
            // A change to half-open made by this call: as of it, this probe holds its
            // slot.
            if let Some(started) = transition.as_mut().filter(|t| t.to == State::HalfOpen) {
                started.next_probe = self.door().next_probe(clock.fixed());
            }
        }
        match reopened {
            Some(reopened) => (admission, Some(reopened), transition),
            None => (admission, transition, None),
        }
    }

    /// This half-open's dwell limit, if there is one.
    fn dwell_limit(&self, entered_at: Instant) -> Option<Instant> {
        self.config
            .max_half_open_dwell
            .map(|dwell| later(entered_at, dwell))
    }

    /// The outcome as the breaker counts it: a success slower than the slow-call
    /// threshold is a failure.
    fn slow_call_rule(&self, outcome: Outcome, elapsed: Option<Duration>) -> Outcome {
        match (outcome, self.config.slow_call, elapsed) {
            (Outcome::Success, Some(limit), Some(took)) if took > limit => Outcome::Failure(
                Failure::new(format!("slow call: took {took:?}, limit {limit:?}")),
            ),
            (outcome, ..) => outcome,
        }
    }

    /// Records the outcome of a call of `kind` admitted in `epoch`; `elapsed` is how
    /// long it took, for the slow-call rule. `at.step` is the count of calls so far. A
    /// call from an earlier epoch (a deadline that passed by `at` included) is late and
    /// counts for nothing; only a wait it asked for may lengthen the opening it finds
    /// (see [`Machine::lengthen_for_late`]).
    pub(in crate::breaker) fn record(
        &mut self,
        epoch: Epoch,
        kind: Kind,
        outcome: Outcome,
        elapsed: Option<Duration>,
        at: Fixed,
    ) -> (Recorded, Option<Transition>) {
        // A deadline that passed before the outcome came applies first: a probe that
        // answers after its half-open's dwell limit is late, whoever looked or not.
        let expired = self.tick(at);
        // A probe's slot is free once it answers, whatever it says.
        self.release(epoch, kind);
        if epoch != self.epoch() {
            if kind != Kind::Shadow {
                self.lengthen_for_late(epoch, &outcome, at.now);
            }
            return (Recorded::Late, expired);
        }
        let outcome = self.slow_call_rule(outcome, elapsed);
        if let Outcome::Failure(failure) = &outcome {
            self.last_failure = Some(FailureRecord {
                at: at.now,
                message: failure.message().unwrap_or("failure").into(),
            });
        }
        let (failure_rate, transition) = match kind {
            Kind::Shadow => (None, None),
            Kind::Call => self.record_closed(&outcome, at),
            Kind::Probe => (None, self.record_probe(&outcome, at)),
        };
        let recorded = Recorded::Counted {
            outcome,
            failure_rate,
        };
        (recorded, transition)
    }

    /// A late failure that asked for a wait (a 429's `Retry-After` for a call admitted
    /// before the breaker opened): the service said, as of `now`, not to call before
    /// then, so an opening that would probe sooner waits that long (up to the cap, as an
    /// opening of its own would); the wait asked for beyond the cap is reported. It
    /// never shortens a wait, counts no failure and changes no state, and it never
    /// touches a person's act: only an opening of the breaker's own (its calls, or a hint)
    /// is lengthened, and only by a call admitted since a person's latest act (a reset, a
    /// forced open, a probe allowed, a change of mode), so that no act is undone by a
    /// message older than it. A half-open breaker is left to its probes, whose own
    /// results decide, and a closed one to its calls.
    fn lengthen_for_late(&mut self, epoch: Epoch, outcome: &Outcome, now: Instant) {
        let Outcome::Failure(failure) = outcome else {
            return;
        };
        let Some(hint) = failure.retry_after_hint() else {
            return;
        };
        // Admitted before a person's act: too old to change what the person did.
        let acted = Epoch::new(self.acted, self.mode).generation();
        if failure.is_permanent() || epoch.generation() < acted {
            return;
        }
        let until = later(now, hint.min(self.config.max_retry_after));
        let requested = failure.requested_wait().map(|wait| later(now, wait));
        let Phase::Open {
            due: Due::At { time, .. },
            by: by @ (Opener::Breaker | Opener::Hint { .. }),
            asked,
        } = &mut self.phase
        else {
            return;
        };
        if time.is_none_or(|time| time < until) {
            *time = Some(until);
        }
        // The breaker's own wait under a hint is lengthened too: it is back in force
        // when the hint is released.
        if let Opener::Hint {
            own: Due::At { time: own, .. },
        } = by
        {
            if own.is_none_or(|own| own < until) {
                *own = Some(until);
            }
        }
        if requested > *asked {
            *asked = requested;
        }
    }

    /// A person acted: calls admitted until now are older than the act (see
    /// [`Machine::acted`]). `transitioned`: the act started a new generation, so the
    /// calls of this one are all older; otherwise they are counted older too (no call of
    /// an open breaker's generation but a shadow one is still running; in a closed one,
    /// a call admitted since a reset that changed nothing is counted older than it, and
    /// its late wait lost: the safe side).
    fn person_acted(&mut self, transitioned: bool) {
        self.acted = self.generation + u64::from(!transitioned);
    }

    /// Counts a closed-state outcome; returns the trip policy's reading after it (taken
    /// before an opening clears the count), if the outcome entered the count, and the
    /// transition it caused.
    fn record_closed(&mut self, outcome: &Outcome, at: Fixed) -> (Option<f64>, Option<Transition>) {
        let failure = match outcome {
            Outcome::Ignored => return (None, None),
            Outcome::Success => None,
            Outcome::Failure(failure) => Some(failure),
        };
        self.consecutive = failure.map_or(0, |_| self.consecutive.saturating_add(1));
        self.window.push(failure.is_some(), at.now);
        let (rate, trips) = self.reading(at.now);
        let cause = match failure {
            // A permanent failure opens it until a reset; a failure that says how long
            // to wait opens it for that long: calling again before then only earns
            // another refusal (LiteLLM cools a deployment down on the first 429;
            // resilience4j opens for a result-derived wait).
            Some(failure) if failure.is_permanent() => Some(Cause::PermanentFailure),
            Some(failure)
                if failure.retry_after_hint().is_some() && self.config.open_on_retry_after =>
            {
                Some(Cause::RetryAfter)
            }
            // The trip policy is a state of the window: checked after every outcome.
            _ => trips.then_some(Cause::Tripped),
        };
        (Some(rate), cause.map(|cause| self.open(at, cause, failure)))
    }

    fn record_probe(&mut self, outcome: &Outcome, at: Fixed) -> Option<Transition> {
        let probes = self.config.half_open_probes;
        let Phase::HalfOpen { successes, .. } = &mut self.phase else {
            return None;
        };
        match outcome {
            Outcome::Ignored => None,
            Outcome::Success => {
                self.consecutive = 0;
                *successes += 1;
                if *successes < probes {
                    return None;
                }
                self.close(at, Cause::ProbeSucceeded)
            }
            Outcome::Failure(failure) => {
                self.consecutive = self.consecutive.saturating_add(1);
                self.reopens = self.reopens.saturating_add(1);
                let cause = if failure.is_permanent() {
                    Cause::PermanentFailure
                } else {
                    Cause::ProbeFailed
                };
                Some(self.open(at, cause, Some(failure)))
            }
        }
    }

    /// A call of `kind` admitted in `epoch` ended: with an outcome (on time or late), or
    /// without one (its future was dropped, or it was never called). A probe's slot is
    /// free again, whichever half-open it belonged to, unless a person's act or a change
    /// of mode already wrote it off.
    pub(in crate::breaker) fn release(&mut self, epoch: Epoch, kind: Kind) {
        if kind != Kind::Probe {
            return;
        }
        if let Some(i) = self.probes.iter().position(|p| p.epoch == epoch) {
            self.probes[i].running -= 1;
            if self.probes[i].running == 0 {
                self.probes.swap_remove(i);
            }
        }
    }

    /// Applies what time alone changes: probes of earlier half-opens past their dwell
    /// limit give up their slots, and a half-open breaker past its own re-opens, as of
    /// its deadline (the cooldown runs from there, not from this later look). Open never
    /// turns half-open by itself: the next call does that.
    pub(in crate::breaker) fn tick(&mut self, at: Fixed) -> Option<Transition> {
        self.drop_past_dwell(at.now);
        let Phase::HalfOpen { entered_at, .. } = self.phase else {
            return None;
        };
        let deadline = self.dwell_limit(entered_at)?;
        if at.now < deadline {
            return None;
        }
        self.reopens = self.reopens.saturating_add(1);
        let at = Fixed {
            now: deadline,
            ..at
        };
        Some(self.open(at, Cause::DwellExceeded, None))
    }

    /// Opens the breaker until [`Machine::reset`] (`until: None`) or until a time, after
    /// which the next call is the probe. A person's decision: it replaces whatever
    /// opened the breaker before.
    pub(in crate::breaker) fn force_open(
        &mut self,
        until: Option<Instant>,
        at: Fixed,
    ) -> Option<Transition> {
        self.write_off_probes();
        let phase = Phase::Open {
            due: until.map_or(Due::Never, Due::at),
            by: Opener::Person,
            asked: None,
        };
        if self.state() == State::ForcedOpen {
            // Already held by a person: the new hold replaces the old, no transition.
            self.phase = phase;
            self.person_acted(false);
            return None;
        }
        let transition = self.enter(phase, at, Cause::ForcedOpen);
        self.person_acted(true);
        Some(transition)
    }

    /// Opens the breaker until `until` on a hint from outside it (another replica saw
    /// the service fail, a provider announced an outage): the breaker's own kind of
    /// opening, so its calls are skipped as open and the next one after `until` is the
    /// probe. A hint never overrides what knows better: a breaker a person forced open,
    /// one half-open (its probe decides), one open until a reset, or one already open
    /// until `until` or later is left as it is, and a closed one is not opened for a
    /// time that has passed. Returns whether it applied. What time
    /// alone changes applies first: a half-open past its dwell limit is open again, and a
    /// hint may then lengthen its wait.
    pub(in crate::breaker) fn hold_open(
        &mut self,
        until: Instant,
        at: Fixed,
    ) -> (bool, Option<Transition>) {
        let expired = self.tick(at);
        let applied = match self.phase {
            // A hold that has already ended holds nothing.
            Phase::Closed if until <= at.now => false,
            Phase::Closed => {
                let phase = Phase::Open {
                    due: Due::at(until),
                    by: Opener::Hint {
                        own: Due::NEXT_CALL,
                    },
                    asked: None,
                };
                // Closed: no deadline had passed, and the opening is the transition.
                return (true, Some(self.enter(phase, at, Cause::Hint)));
            }
            // Open by its own calls or a hint, for a wait that ends before `until`: the
            // wait is lengthened, the breaker's own kept underneath.
            Phase::Open {
                due: due @ Due::At { step, time },
                by,
                asked,
            } if by != Opener::Person && time.is_none_or(|time| time < until) => {
                let by = match by {
                    Opener::Breaker => Opener::Hint { own: due },
                    hint => hint,
                };
                let due = Due::At {
                    step,
                    time: Some(until),
                };
                self.phase = Phase::Open { due, by, asked };
                true
            }
            _ => false,
        };
        (applied, expired)
    }

    /// Ends a hold made by [`Machine::hold_open`]: the breaker's own wait underneath is
    /// back in force (the next call probes if it had none, or it has passed). Nothing
    /// else is touched: a breaker its own calls opened again since, one a person holds,
    /// closed or half-open. Returns whether it applied (after what time alone changes,
    /// as [`Machine::hold_open`]).
    pub(in crate::breaker) fn release_hold(&mut self, at: Fixed) -> (bool, Option<Transition>) {
        let expired = self.tick(at);
        let Phase::Open {
            by: Opener::Hint { own },
            asked,
            ..
        } = self.phase
        else {
            return (false, expired);
        };
        self.phase = Phase::Open {
            due: own,
            by: Opener::Breaker,
            asked,
        };
        (true, expired)
    }

    /// Lets the next call be the probe, whatever is left of the cooldown: for an
    /// orchestrator whose own schedule says it is time, or an operator. Only a breaker
    /// the breaker itself opened (or a hint holds) is affected; one a person forced open
    /// or a permanent failure holds stays as it is. Returns whether it applied (after what
    /// time alone changes, as [`Machine::hold_open`]).
    pub(in crate::breaker) fn allow_probe(&mut self, at: Fixed) -> (bool, Option<Transition>) {
        let expired = self.tick(at);
        let allowed = match &mut self.phase {
            Phase::Open {
                due: due @ Due::At { .. },
                by: by @ (Opener::Breaker | Opener::Hint { .. }),
                ..
            } => {
                *due = Due::NEXT_CALL;
                *by = Opener::Breaker;
                true
            }
            _ => false,
        };
        if allowed {
            // No late wait may take the probe back.
            self.person_acted(false);
        }
        (allowed, expired)
    }

    /// Closes the breaker and clears its failure counts and backoff.
    pub(in crate::breaker) fn reset(&mut self, at: Fixed) -> Option<Transition> {
        self.write_off_probes();
        let transition = self.close(at, Cause::Reset);
        self.person_acted(transition.is_some());
        transition
    }

    /// A person's act or a change of mode: the probes under way hold no slot any more
    /// (their results are already late), the siblings of an earlier failed probe
    /// included. Without this, a sibling that hangs with no dwell limit would hold its
    /// slot through every reset for good.
    fn write_off_probes(&mut self) {
        self.probes.clear();
    }

    /// Switches the mode, and returns the mode left if it changed. A change starts a new
    /// epoch: calls admitted under the old mode and still in flight are not counted, and
    /// a half-open breaker's probes hold no slot.
    pub(in crate::breaker) fn set_mode(&mut self, mode: Mode) -> Option<Mode> {
        if mode == self.mode {
            return None;
        }
        self.write_off_probes();
        let left = std::mem::replace(&mut self.mode, mode);
        self.generation += 1;
        self.person_acted(true);
        // A half-open breaker starts over: no probe holds a slot, none has succeeded.
        if let Phase::HalfOpen { successes, .. } = &mut self.phase {
            *successes = 0;
        }
        Some(left)
    }

    /// Lowers the consecutive-failure threshold by `relief` (never below 1), for a
    /// service known to be degraded: it trips sooner. 0 restores the configured
    /// threshold.
    pub(in crate::breaker) fn set_threshold_relief(&mut self, relief: u32) {
        self.threshold_relief = relief;
    }

    /// The trip policy's reading of the closed state's count, in percent, as of `now`,
    /// and whether it trips the breaker:
    ///
    /// - a failure rate: the failures among the outcomes in the window, or -1 while the
    ///   window holds fewer than the minimum number of calls (at least one;
    ///   resilience4j's value then);
    /// - consecutive failures: the run of failures as a percent of the threshold in
    ///   force (the configured one lowered by the relief, never below 1), at most 100.
    ///   The policy keeps no window, so this is how far the breaker is from tripping (it
    ///   trips at 100), not a share of calls.
    ///
    /// A success the breaker counts without its lock leaves the run of failures at 0:
    /// [`Machine::QUIET_FAILURE_RATE`].
    pub(in crate::breaker) fn reading(&self, now: Instant) -> (f64, bool) {
        match self.config.trip {
            TripPolicy::ConsecutiveFailures(configured) => {
                let threshold = configured.saturating_sub(self.threshold_relief).max(1);
                let rate = f64::from(self.consecutive) * 100.0 / f64::from(threshold);
                (rate.min(100.0), self.consecutive >= threshold)
            }
            TripPolicy::FailureRate {
                rate,
                minimum_calls,
                ..
            } => {
                let counts = self.window.totals(now);
                if counts.calls < u64::from(minimum_calls.max(1)) {
                    return (-1.0, false);
                }
                let (failures, calls) = (counts.failures as f64, counts.calls as f64);
                // The share, divided out and rounded once, against the rate as given: a
                // share exactly at a decimal rate (7 of 25 at 0.28) reaches it, which
                // `failures >= rate * calls` (rounded on the other side) can miss.
                (failures * 100.0 / calls, failures / calls >= rate)
            }
        }
    }

    /// [`Machine::reading`]'s rate after a success that changed nothing: only a breaker
    /// on consecutive failures with none counted has such successes.
    pub(in crate::breaker) const QUIET_FAILURE_RATE: f64 = 0.0;

    /// Opens the breaker for its cooldown, or for the wait `failure` asked for, or until
    /// a reset if it is permanent.
    fn open(&mut self, at: Fixed, cause: Cause, failure: Option<&Failure>) -> Transition {
        let mut due = match self.cooldown() {
            Cooldown::Calls(n) => Due::At {
                step: Some(at.step.saturating_add(n)),
                time: None,
            },
            Cooldown::Time(d) => Due::at(later(at.now, d)),
        };
        let hint = failure.and_then(Failure::retry_after_hint);
        let mut asked = None;
        if let (Some(hint), Due::At { time, .. }) = (hint, &mut due) {
            // The probe waits at most the cap; what the service asked for is kept to be
            // reported.
            *time = Some(later(at.now, hint.min(self.config.max_retry_after)));
            asked = failure
                .and_then(Failure::requested_wait)
                .map(|wait| later(at.now, wait));
        }
        if failure.is_some_and(Failure::is_permanent) {
            due = Due::Never;
        }
        self.window.clear();
        let phase = Phase::Open {
            due,
            by: Opener::Breaker,
            asked,
        };
        self.enter(phase, at, cause)
    }

    fn close(&mut self, at: Fixed, cause: Cause) -> Option<Transition> {
        self.consecutive = 0;
        self.reopens = 0;
        self.window.clear();
        (self.state() != State::Closed).then(|| self.enter(Phase::Closed, at, cause))
    }

    /// Probes whose half-open's dwell limit has passed by `now` hold no slot (a re-open
    /// at the deadline).
    fn drop_past_dwell(&mut self, now: Instant) {
        self.probes
            .retain(|p| p.until.is_none_or(|until| now < until));
    }

    fn enter(&mut self, phase: Phase, at: Fixed, cause: Cause) -> Transition {
        let from = self.state();
        // A failed probe's siblings still running linger: they hold their slots until they
        // end or their half-open's dwell limit passes. Any other change writes this
        // epoch's probes off.
        if !matches!(cause, Cause::ProbeFailed | Cause::PermanentFailure) {
            let epoch = self.epoch();
            self.probes.retain(|p| p.epoch != epoch);
        }
        self.drop_past_dwell(at.now);
        self.phase = phase;
        self.cause = Some(cause);
        self.generation += 1;
        Transition {
            name: self.name.clone(),
            from,
            to: self.state(),
            cause,
            at: at.now,
            generation: self.generation,
            mode: self.mode,
            consecutive_failures: self.consecutive,
            next_probe: self.door().next_probe(at),
            requested_until: self.requested_until(),
        }
    }

    /// The cooldown of this opening: the base, grown by backoff for each re-open in a
    /// row, with jitter, never above the cap.
    fn cooldown(&mut self) -> Cooldown {
        let jitter = self.config.jitter;
        let factor = if jitter > 0.0 {
            1.0 + jitter * (2.0 * self.next_random() - 1.0)
        } else {
            1.0
        };
        let (backoff, reopens) = (self.config.backoff, self.reopens.min(1024) as i32);
        // Without backoff, 1: `base * 1.0` is `base`, exactly.
        let growth = backoff.map_or(1.0, |b| b.multiplier.powi(reopens));
        let exact = factor == 1.0 && (reopens == 0 || backoff.is_none());
        // The cap, in the cooldown's unit; none in the other.
        let (calls_cap, time_cap) = match backoff.map(|b| b.cap) {
            Some(Cooldown::Calls(cap)) => (cap, Duration::MAX),
            Some(Cooldown::Time(cap)) => (Cooldown::MAX_CALLS, cap),
            None => (Cooldown::MAX_CALLS, Duration::MAX),
        };
        match self.config.cooldown {
            // Exact when nothing grows or spreads it: a float holds only 53 bits (of
            // calls, or of a time's seconds and nanoseconds).
            cooldown if exact => cooldown,
            Cooldown::Calls(base) => {
                let calls = (base as f64 * growth * factor).round();
                Cooldown::Calls((calls.clamp(1.0, calls_cap as f64) as u64).min(calls_cap))
            }
            Cooldown::Time(base) => {
                let secs = (base.as_secs_f64() * growth * factor).max(0.0);
                let time = Duration::try_from_secs_f64(secs).unwrap_or(time_cap);
                Cooldown::Time(time.min(time_cap))
            }
        }
    }

    /// xorshift64*: enough for jitter, and deterministic for a given seed.
    fn next_random(&mut self) -> f64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let bits = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        bits as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests;
