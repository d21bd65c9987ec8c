//! Property tests of the pure machine: any settings that build, any sequence of calls,
//! outcomes, deadlines and a person's acts. What must hold after every step:
//!
//! - probes in flight never exceed the limit, and are exactly the probe permits still
//!   held (of this half-open, and of earlier ones that keep their slots);
//! - a door that says a success is quiet means it: recording one changes nothing;
//! - a deadline is never left standing: after a look at the clock, no door says the
//!   machine must look again at that same instant, and a half-open never outlives its
//!   dwell limit;
//! - a probe is only granted in half-open, and a call only in closed.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::door::{Admission, Clock, Epoch, Fixed};
use super::*;
use crate::breaker::builder::Builder;
use crate::breaker::settings::{Backoff, RateWindow};

#[derive(Debug, Clone)]
enum Op {
    Admit {
        killed: bool,
    },
    Record {
        which: usize,
        outcome: Fate,
        slow: bool,
    },
    Release {
        which: usize,
    },
    Tick,
    ForceOpen {
        for_secs: Option<u64>,
    },
    Reset,
    AllowProbe,
    /// A hint: hold open for this many seconds.
    Hint {
        for_secs: u64,
    },
    ReleaseHold,
    SetMode(Mode),
    Advance(Duration),
}

#[derive(Debug, Clone, Copy)]
enum Fate {
    Success,
    Failure,
    RetryAfter(u64),
    Permanent,
    Ignored,
}

impl Fate {
    fn outcome(self) -> Outcome {
        match self {
            Fate::Success => Outcome::Success,
            Fate::Failure => Outcome::failure_with("down"),
            Fate::RetryAfter(secs) => {
                Outcome::Failure(Failure::new("busy").retry_after(Duration::from_secs(secs)))
            }
            Fate::Permanent => Outcome::Failure(Failure::new("quota").permanent()),
            Fate::Ignored => Outcome::Ignored,
        }
    }
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![
        6 => Just(Mode::Enabled),
        1 => Just(Mode::ObserveOnly),
        1 => Just(Mode::Disabled)
    ]
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        4 => Just(Fate::Success),
        4 => Just(Fate::Failure),
        1 => (0u64..100).prop_map(Fate::RetryAfter),
        1 => Just(Fate::Permanent),
        1 => Just(Fate::Ignored),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => proptest::bool::weighted(0.1).prop_map(|killed| Op::Admit { killed }),
        8 => (any::<usize>(), fate(), proptest::bool::weighted(0.1))
            .prop_map(|(which, outcome, slow)| Op::Record { which, outcome, slow }),
        2 => any::<usize>().prop_map(|which| Op::Release { which }),
        1 => Just(Op::Tick),
        1 => proptest::option::of(0u64..100).prop_map(|for_secs| Op::ForceOpen { for_secs }),
        1 => Just(Op::Reset),
        1 => Just(Op::AllowProbe),
        1 => (0u64..120).prop_map(|for_secs| Op::Hint { for_secs }),
        1 => Just(Op::ReleaseHold),
        1 => mode().prop_map(Op::SetMode),
        4 => prop_oneof![
            Just(Duration::from_millis(1)),
            Just(Duration::from_secs(1)),
            Just(Duration::from_secs(10)),
            Just(Duration::from_secs(61)),
            Just(Duration::from_secs(3600)),
        ]
        .prop_map(Op::Advance),
    ]
}

fn settings() -> impl Strategy<Value = Builder> {
    let cooldown = prop_oneof![
        (1u64..6).prop_map(Cooldown::Calls),
        (1u64..30).prop_map(|s| Cooldown::Time(Duration::from_secs(s))),
    ];
    let trip = prop_oneof![
        3 => (1u32..4).prop_map(TripPolicy::ConsecutiveFailures),
        1 => (1u32..5, 1u32..10).prop_map(|(min, n)| TripPolicy::FailureRate {
            rate: 0.5,
            window: RateWindow::Calls(n.max(min)),
            minimum_calls: min,
        }),
    ];
    (
        cooldown,
        trip,
        1u32..4,
        proptest::option::of(1u64..120),
        proptest::bool::weighted(0.2),
        proptest::bool::weighted(0.3),
        proptest::bool::weighted(0.8),
        proptest::bool::weighted(0.3),
        1u64..120,
    )
        .prop_map(
            |(cooldown, trip, probes, dwell, slow, backoff, open_on_hint, timed, cap)| {
                let mut builder = Builder::new()
                    .max_retry_after(Duration::from_secs(cap))
                    .cooldown(cooldown)
                    .trip_policy(trip)
                    .half_open_probes(probes)
                    .max_half_open_dwell(dwell.map(Duration::from_secs))
                    .open_on_retry_after(open_on_hint)
                    .jitter_seed(7);
                if slow {
                    builder = builder.slow_call_threshold(Duration::from_secs(5));
                }
                if timed {
                    builder = builder.time_calls();
                }
                if backoff {
                    let cap = match cooldown {
                        Cooldown::Calls(n) => Cooldown::Calls(n * 8),
                        Cooldown::Time(d) => Cooldown::Time(d * 8),
                    };
                    builder = builder.backoff(Backoff::exponential(2.0, cap));
                }
                builder
            },
        )
}

/// A clock whose calls take the next step when asked.
struct Steps<'a> {
    steps: &'a mut u64,
    taken: Option<u64>,
    now: Instant,
}

impl Clock for Steps<'_> {
    fn step(&mut self) -> u64 {
        *self.taken.get_or_insert_with(|| {
            *self.steps += 1;
            *self.steps
        })
    }

    fn counted(&mut self) -> u64 {
        self.taken.unwrap_or(*self.steps)
    }

    fn now(&mut self) -> Instant {
        self.now
    }
}

/// What a late outcome may change: nothing but an opening's wait, and only to lengthen an
/// opening of the breaker's own, for a call admitted since a person's latest act.
fn late_changes_only_the_wait(
    before: &Machine,
    after: &Machine,
    permit: Held,
    at: Fixed,
) -> Result<(), TestCaseError> {
    let mut ticked = before.clone();
    ticked.tick(at);
    // A late probe's slot is free again, as any ended probe's.
    ticked.release(permit.epoch, permit.kind);
    prop_assert_eq!(after.state(), ticked.state());
    prop_assert_eq!(after.generation, ticked.generation);
    prop_assert_eq!(after.cause, ticked.cause);
    prop_assert_eq!(after.consecutive, ticked.consecutive);
    let may_lengthen = permit.kind != Kind::Shadow
        && permit.epoch.generation() >= Epoch::new(ticked.acted, ticked.mode).generation()
        && matches!(
            ticked.phase,
            Phase::Open {
                by: Opener::Breaker | Opener::Hint { .. },
                due: super::door::Due::At { .. },
                ..
            }
        );
    if !may_lengthen {
        prop_assert_eq!(
            after.door(),
            ticked.door(),
            "a late outcome changed the door"
        );
        prop_assert_eq!(after.requested_until(), ticked.requested_until());
        return Ok(());
    }
    use super::door::Due;
    let (
        Some(Due::At { step, time }),
        Some(Due::At {
            step: was_step,
            time: was,
        }),
    ) = (after.door().due(), ticked.door().due())
    else {
        return Err(TestCaseError::fail("an opening in time is still one"));
    };
    prop_assert_eq!(step, was_step, "the wait in calls is untouched");
    prop_assert!(time >= was, "a late wait shortened the opening");
    if let Some(asked) = after.requested_until() {
        prop_assert!(time.is_none_or(|time| time < asked));
    }
    Ok(())
}

/// A permit held by the test.
#[derive(Debug, Clone, Copy)]
struct Held {
    epoch: Epoch,
    kind: Kind,
}

fn run(builder: Builder, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let config = builder.build_config().expect("valid settings");
    let limit = config.half_open_probes;
    let dwell = config.max_half_open_dwell;
    let mut now = Instant::now();
    let mut machine = Machine::new(config, now);
    let mut steps = 0u64;
    let mut held: Vec<Held> = Vec::new();
    let mut entered_half_open: Option<Instant> = None;
    for op in ops {
        let at = Fixed { step: steps, now };
        match op {
            Op::Admit { killed } => {
                let state_before = machine.state();
                let mut clock = Steps {
                    steps: &mut steps,
                    taken: None,
                    now,
                };
                let (admission, first, then) = machine.admit(killed, &mut clock);
                let kind = match admission {
                    Admission::Call => Some(Kind::Call),
                    Admission::Probe => Some(Kind::Probe),
                    Admission::Shadow(_) => Some(Kind::Shadow),
                    Admission::Expired => {
                        return Err(TestCaseError::fail("admit left a deadline standing"))
                    }
                    Admission::Pass | Admission::Skip(_) => None,
                };
                match admission {
                    Admission::Call => prop_assert_eq!(machine.state(), State::Closed),
                    Admission::Probe => prop_assert_eq!(machine.state(), State::HalfOpen),
                    _ => {}
                }
                // Each change from the state the one before left, the last to the state now.
                let mut from = state_before;
                for t in first.iter().chain(&then) {
                    prop_assert_eq!(t.from, from);
                    from = t.to;
                }
                prop_assert_eq!(from, machine.state());
                prop_assert!(
                    then.is_none() || first.is_some(),
                    "the first change comes first"
                );
                if machine.state() == State::HalfOpen && state_before != State::HalfOpen {
                    entered_half_open = Some(now);
                }
                if let Some(kind) = kind {
                    held.push(Held {
                        epoch: machine.epoch(),
                        kind,
                    });
                }
            }
            Op::Record {
                which,
                outcome,
                slow,
            } if !held.is_empty() => {
                let permit = held.swap_remove(which % held.len());
                let quiet = super::door::Door::quiet_in(machine.door().word, permit.epoch)
                    && permit.kind == Kind::Call
                    && matches!(outcome, Fate::Success);
                let before = machine.clone();
                let elapsed = slow.then_some(Duration::from_secs(6));
                let (recorded, transition) =
                    machine.record(permit.epoch, permit.kind, outcome.outcome(), elapsed, at);
                if recorded == Recorded::Late {
                    late_changes_only_the_wait(&before, &machine, permit, at)?;
                }
                if quiet {
                    // The door's promise, on which a success is counted without the lock.
                    prop_assert!(transition.is_none());
                    prop_assert_eq!(machine.door(), before.door());
                    prop_assert_eq!(machine.consecutive, before.consecutive);
                    // What observers are told of a success counted without the lock.
                    prop_assert_eq!(machine.reading(at.now).0, Machine::QUIET_FAILURE_RATE);
                }
            }
            Op::Release { which } if !held.is_empty() => {
                let permit = held.swap_remove(which % held.len());
                machine.release(permit.epoch, permit.kind);
            }
            Op::Record { .. } | Op::Release { .. } => {}
            Op::Tick => {
                machine.tick(at);
            }
            Op::ForceOpen { for_secs } => {
                let until = for_secs.map(|s| now + Duration::from_secs(s));
                machine.force_open(until, at);
            }
            Op::Reset => {
                machine.reset(at);
            }
            Op::AllowProbe => {
                machine.allow_probe(at);
            }
            Op::Hint { for_secs } => {
                machine.hold_open(now + Duration::from_secs(for_secs), at);
            }
            Op::ReleaseHold => {
                machine.release_hold(at);
            }
            Op::SetMode(mode) => {
                machine.set_mode(mode);
            }
            Op::Advance(by) => now += by,
        }
        // After a look at the clock, no deadline stands at this instant.
        machine.tick(Fixed { step: steps, now });
        if let Some(until) = machine.door().until() {
            prop_assert!(
                now < until,
                "a deadline stands after a look: {until:?} <= {now:?}"
            );
        }
        if machine.state() == State::HalfOpen {
            if let (Some(dwell), Some(entered)) = (dwell, entered_half_open) {
                prop_assert!(now < entered + dwell, "half-open past its dwell limit");
            }
        } else {
            entered_half_open = None;
        }
        // Probes in flight: within the limit, and exactly those held that still hold a
        // slot (this epoch's, and earlier ones' the machine keeps).
        let in_flight = machine.probes_in_flight();
        prop_assert!(
            in_flight <= limit,
            "{} probes in flight, limit {}",
            in_flight,
            limit
        );
        let held_in = |epoch: Epoch| {
            held.iter()
                .filter(|p| p.kind == Kind::Probe && p.epoch == epoch)
                .count() as u32
        };
        let running_in = |epoch: Epoch| {
            machine
                .probes
                .iter()
                .filter(|p| p.epoch == epoch)
                .map(|p| p.running)
                .sum::<u32>()
        };
        // This epoch's are exactly those held; earlier ones' at most those (a person's
        // act, a change of mode or a dwell limit wrote the rest off), one entry an epoch.
        prop_assert_eq!(running_in(machine.epoch()), held_in(machine.epoch()));
        for probes in &machine.probes {
            prop_assert!(probes.running > 0);
            prop_assert_eq!(probes.running, running_in(probes.epoch));
            prop_assert!(probes.running <= held_in(probes.epoch));
        }
    }
    // Every permit ends: nothing is left in flight.
    for permit in held.drain(..) {
        machine.release(permit.epoch, permit.kind);
    }
    prop_assert_eq!(machine.probes_in_flight(), 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2048,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_sequence_keeps_the_probe_slots_the_quiet_promise_and_the_deadlines(
        builder in settings(),
        ops in proptest::collection::vec(op(), 0..80),
    ) {
        run(builder, ops)?;
    }
}

#[test]
fn a_known_twenty_call_trace_through_the_bare_machine() {
    let config = Builder::new()
        .failure_threshold(3)
        .cooldown(Cooldown::Calls(4))
        .build_config()
        .unwrap();
    let now = Instant::now();
    let mut machine = Machine::new(config, now);
    let mut steps = 0;
    let mut trace = Vec::new();
    for (i, c) in "11000111101100001111".chars().enumerate() {
        let killed = false;
        let mut clock = Steps {
            steps: &mut steps,
            taken: None,
            now,
        };
        let state = machine.state();
        let (admission, ..) = machine.admit(killed, &mut clock);
        let found = if admission == Admission::Probe {
            State::HalfOpen
        } else {
            state
        };
        let word = match admission {
            Admission::Skip(_) => "skipped",
            _ => {
                let outcome = if c == '1' {
                    Outcome::Success
                } else {
                    Outcome::failure()
                };
                let kind = if admission == Admission::Probe {
                    Kind::Probe
                } else {
                    Kind::Call
                };
                let at = Fixed { step: steps, now };
                machine.record(machine.epoch(), kind, outcome, None, at);
                if c == '1' {
                    "model"
                } else {
                    "failed"
                }
            }
        };
        trace.push(format!("{} {found}:{word}", i + 1));
    }
    assert_eq!(
        trace.join(" "),
        "1 closed:model 2 closed:model 3 closed:failed 4 closed:failed 5 closed:failed \
         6 open:skipped 7 open:skipped 8 open:skipped 9 half_open:model 10 closed:failed \
         11 closed:model 12 closed:model 13 closed:failed 14 closed:failed 15 closed:failed \
         16 open:skipped 17 open:skipped 18 open:skipped 19 half_open:model 20 closed:model"
    );
}

#[test]
fn a_failure_with_a_retry_after_opens_the_breaker_at_once_unless_told_to_only_count_it() {
    let now = Instant::now();
    let busy = || Outcome::Failure(Failure::new("429").retry_after(Duration::from_secs(7)));
    for open in [true, false] {
        let config = Builder::new()
            .failure_threshold(3)
            .cooldown(Cooldown::Time(Duration::from_secs(30)))
            .max_retry_after(Duration::from_secs(5))
            .open_on_retry_after(open)
            .build_config()
            .unwrap();
        let mut machine = Machine::new(config, now);
        let at = Fixed { step: 1, now };
        let (recorded, transition) = machine.record(machine.epoch(), Kind::Call, busy(), None, at);
        assert!(matches!(recorded, Recorded::Counted { .. }));
        if !open {
            assert_eq!(transition, None, "only counted");
            assert_eq!((machine.state(), machine.consecutive), (State::Closed, 1));
            continue;
        }
        let transition = transition.expect("opened at once");
        assert_eq!(
            (transition.from, transition.to),
            (State::Closed, State::Open)
        );
        assert_eq!(transition.cause, Cause::RetryAfter);
        assert!(transition.cause.opens());
        // For the wait the service asked for, capped by max_retry_after.
        assert_eq!(
            transition.next_probe,
            NextProbe::After {
                calls: 1,
                at: Some(now + Duration::from_secs(5))
            }
        );
    }
}

/// The failure rate reported for each closed-state outcome: the threshold in force
/// (lowered by a relief) for consecutive failures; the window as of the outcome for a
/// failure rate, whose outcomes age out of a time window.
#[test]
fn the_failure_rate_reads_the_policy_in_force() {
    let now = Instant::now();
    let record = |machine: &mut Machine, outcome: Outcome, now: Instant| {
        let at = Fixed { step: 0, now };
        match machine
            .record(machine.epoch(), Kind::Call, outcome, None, at)
            .0
        {
            Recorded::Counted { failure_rate, .. } => failure_rate,
            Recorded::Late => panic!("not late"),
        }
    };
    let config = Builder::new().failure_threshold(4).build_config().unwrap();
    let mut run = Machine::new(config, now);
    run.set_threshold_relief(2);
    assert_eq!(record(&mut run, Outcome::failure(), now), Some(50.0));
    assert_eq!(record(&mut run, Outcome::Ignored, now), None);
    assert_eq!(record(&mut run, Outcome::failure(), now), Some(100.0));
    assert_eq!(run.state(), State::Open);

    let window = RateWindow::Time(Duration::from_secs(10));
    let config = Builder::new()
        .failure_rate(0.9, window, 2)
        .build_config()
        .unwrap();
    let mut rate = Machine::new(config, now);
    assert_eq!(rate.reading(now).0, -1.0);
    assert_eq!(record(&mut rate, Outcome::failure(), now), Some(-1.0));
    assert_eq!(record(&mut rate, Outcome::Success, now), Some(50.0));
    let later = now + Duration::from_secs(11);
    assert_eq!(rate.reading(later).0, -1.0, "aged out of the window");
    assert_eq!(record(&mut rate, Outcome::Success, later), Some(-1.0));
}

// ---------------------------------------------------------------------------------------
// A late `Retry-After`: lengthens an opening of the breaker's own, never shortens it, and
// never touches a person's act.
// ---------------------------------------------------------------------------------------

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn limited(wait: u64) -> Outcome {
    Outcome::Failure(Failure::new("429 Too Many Requests").retry_after(secs(wait)))
}

/// A breaker on a 30 s cooldown, threshold 1, `Retry-After` capped at `cap` seconds.
fn breaker(cap: u64, now: Instant) -> Machine {
    let config = Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(30)))
        .max_retry_after(secs(cap))
        .build_config()
        .unwrap();
    Machine::new(config, now)
}

/// Admits one call (or probe) at `now`, and returns its epoch and kind.
fn admit(machine: &mut Machine, steps: &mut u64, now: Instant) -> (Epoch, Kind) {
    let mut clock = Steps {
        steps,
        taken: None,
        now,
    };
    let kind = match machine.admit(false, &mut clock).0 {
        Admission::Call => Kind::Call,
        Admission::Probe => Kind::Probe,
        other => panic!("admitted, got {other:?}"),
    };
    (machine.epoch(), kind)
}

/// The time the open breaker's probe waits for.
fn probe_at(machine: &Machine) -> Option<Instant> {
    match machine.door().due() {
        Some(super::door::Due::At { time, .. }) => time,
        other => panic!("open in time, got {other:?}"),
    }
}

/// Two calls admitted while closed; the first's 429 (`first` s) opens the breaker at `now`;
/// returns the machine and the second call, still in flight.
fn opened_by_one_of_two(first: u64, cap: u64, now: Instant) -> (Machine, (Epoch, Kind), u64) {
    let mut machine = breaker(cap, now);
    let mut steps = 0;
    let opener = admit(&mut machine, &mut steps, now);
    let late = admit(&mut machine, &mut steps, now);
    let at = Fixed { step: steps, now };
    let (_, opened) = machine.record(opener.0, opener.1, limited(first), None, at);
    assert_eq!(opened.map(|t| t.cause), Some(Cause::RetryAfter));
    (machine, late, steps)
}

#[test]
fn a_late_longer_retry_after_lengthens_the_opening_and_counts_nothing() {
    let now = Instant::now();
    let (mut machine, (epoch, kind), steps) = opened_by_one_of_two(5, 300, now);
    assert_eq!(probe_at(&machine), Some(now + secs(5)));
    let (generation, cause) = (machine.generation, machine.cause);
    let arrival = now + secs(2);
    let at = Fixed {
        step: steps,
        now: arrival,
    };
    let (recorded, transition) = machine.record(epoch, kind, limited(60), None, at);
    assert_eq!((recorded, transition), (Recorded::Late, None));
    assert_eq!(
        probe_at(&machine),
        Some(arrival + secs(60)),
        "60 s from its arrival"
    );
    assert_eq!(
        (machine.state(), machine.generation, machine.cause),
        (State::Open, generation, cause),
        "no change of state"
    );
    assert_eq!(machine.consecutive, 1, "not counted again");
    assert_eq!(
        machine.requested_until(),
        None,
        "under the cap: nothing more asked"
    );
}

#[test]
fn a_late_shorter_retry_after_never_shortens_the_opening() {
    let now = Instant::now();
    let (mut machine, (epoch, kind), steps) = opened_by_one_of_two(60, 300, now);
    let before = machine.door();
    let at = Fixed {
        step: steps,
        now: now + secs(1),
    };
    let (recorded, _) = machine.record(epoch, kind, limited(5), None, at);
    assert_eq!(recorded, Recorded::Late);
    assert_eq!(machine.door(), before);
    assert_eq!(probe_at(&machine), Some(now + secs(60)));
}

#[test]
fn a_late_failure_without_a_wait_or_from_a_shadow_call_changes_nothing() {
    let now = Instant::now();
    let (mut machine, (epoch, kind), steps) = opened_by_one_of_two(5, 300, now);
    let before = machine.door();
    let at = Fixed {
        step: steps,
        now: now + secs(1),
    };
    machine.record(epoch, kind, Outcome::failure(), None, at);
    machine.record(epoch, Kind::Shadow, limited(60), None, at);
    let quota = Outcome::Failure(Failure::new("quota").permanent().retry_after(secs(60)));
    machine.record(epoch, kind, quota, None, at);
    assert_eq!(machine.door(), before);
}

#[test]
fn a_late_retry_after_never_undoes_a_reset_made_after_its_call_was_admitted() {
    let now = Instant::now();
    let (mut machine, (epoch, kind), mut steps) = opened_by_one_of_two(5, 300, now);
    // A person resets; the breaker then opens again on its own (a new call's failure).
    machine.reset(Fixed { step: steps, now });
    assert_eq!(machine.state(), State::Closed);
    let fresh = admit(&mut machine, &mut steps, now);
    let at = Fixed { step: steps, now };
    machine.record(fresh.0, fresh.1, limited(5), None, at);
    assert_eq!(machine.state(), State::Open);
    let before = machine.door();
    // The call admitted before the reset answers 429, asking for a minute.
    let at = Fixed {
        step: steps,
        now: now + secs(1),
    };
    let (recorded, transition) = machine.record(epoch, kind, limited(60), None, at);
    assert_eq!((recorded, transition), (Recorded::Late, None));
    assert_eq!(
        machine.door(),
        before,
        "older than the reset: nothing changes"
    );
    assert_eq!(machine.requested_until(), None);
}

#[test]
fn a_late_retry_after_finds_a_reset_breaker_closed_and_leaves_it_so() {
    let now = Instant::now();
    let (mut machine, (epoch, kind), steps) = opened_by_one_of_two(5, 300, now);
    machine.reset(Fixed { step: steps, now });
    let at = Fixed {
        step: steps,
        now: now + secs(1),
    };
    machine.record(epoch, kind, limited(60), None, at);
    assert_eq!((machine.state(), machine.consecutive), (State::Closed, 0));
}

#[test]
fn a_late_retry_after_never_touches_a_persons_hold_or_an_allowed_probe() {
    let now = Instant::now();
    let at = |s: u64, steps: u64| Fixed {
        step: steps,
        now: now + secs(s),
    };
    // Forced open, until a reset or for 10 s.
    for until in [None, Some(now + secs(10))] {
        let (mut machine, (epoch, kind), steps) = opened_by_one_of_two(5, 300, now);
        machine.force_open(until, at(0, steps));
        let before = machine.door();
        machine.record(epoch, kind, limited(60), None, at(1, steps));
        assert_eq!(
            machine.door(),
            before,
            "the person's hold ({until:?}) stands"
        );
    }
    // The next call allowed to probe: a late wait does not take it back.
    let (mut machine, (epoch, kind), steps) = opened_by_one_of_two(5, 300, now);
    assert!(machine.allow_probe(at(0, steps)).0);
    machine.record(epoch, kind, limited(60), None, at(1, steps));
    assert_eq!(
        machine.door().next_probe(at(1, steps)),
        NextProbe::After { calls: 1, at: None }
    );
    // A change of mode after the call was admitted: its late wait is older than it.
    let (mut machine, (epoch, kind), steps) = opened_by_one_of_two(5, 300, now);
    machine.set_mode(Mode::ObserveOnly);
    let before = machine.door();
    machine.record(epoch, kind, limited(60), None, at(1, steps));
    assert_eq!(machine.door(), before);
}

#[test]
fn a_late_retry_after_leaves_a_half_open_breaker_to_its_probe() {
    let now = Instant::now();
    let (mut machine, (epoch, kind), mut steps) = opened_by_one_of_two(5, 300, now);
    let probe = admit(&mut machine, &mut steps, now + secs(5));
    assert_eq!((probe.1, machine.state()), (Kind::Probe, State::HalfOpen));
    let before = machine.door();
    let at = Fixed {
        step: steps,
        now: now + secs(6),
    };
    machine.record(epoch, kind, limited(60), None, at);
    assert_eq!(machine.door(), before, "the probe decides");
    assert_eq!(machine.probes_in_flight(), 1);
}

#[test]
fn a_wait_above_the_cap_probes_at_the_cap_and_reports_what_was_asked() {
    let now = Instant::now();
    let three_days = 3 * 24 * 3600;
    let mut machine = breaker(300, now);
    let mut steps = 0;
    let call = admit(&mut machine, &mut steps, now);
    let at = Fixed { step: steps, now };
    let (_, transition) = machine.record(call.0, call.1, limited(three_days), None, at);
    let transition = transition.expect("opened");
    assert_eq!(
        transition.next_probe,
        NextProbe::After {
            calls: 1,
            at: Some(now + secs(300))
        },
        "the probe goes at the cap"
    );
    assert_eq!(transition.requested_until, Some(now + secs(three_days)));
    assert!(machine.door().asked_longer());
    let Admission::Skip(skip) = machine.door().admit(false, &mut at.clone()) else {
        panic!("skipped")
    };
    assert!(skip.asked_longer());
    let snapshot = machine.snapshot(at, false, Default::default());
    assert_eq!(snapshot.retry_after(), Some(secs(300)));
    assert_eq!(snapshot.requested_wait(), Some(secs(three_days)));
    // Killed: the kill switch decides, and its skip says nothing of the service's wait.
    let Admission::Skip(killed) = machine.door().admit(true, &mut at.clone()) else {
        panic!("skipped")
    };
    assert!(!killed.asked_longer());
    // The probe at the cap turns it half-open: what was asked is no longer reported.
    let probe = admit(&mut machine, &mut steps, now + secs(300));
    assert_eq!(probe.1, Kind::Probe);
    assert_eq!(machine.requested_until(), None);
}

#[test]
fn a_late_wait_above_the_cap_lengthens_to_the_cap_from_its_arrival_and_reports_the_rest() {
    let now = Instant::now();
    let (mut machine, (epoch, kind), steps) = opened_by_one_of_two(5, 300, now);
    let arrival = now + secs(3);
    let day = 24 * 3600;
    let at = Fixed {
        step: steps,
        now: arrival,
    };
    machine.record(epoch, kind, limited(day), None, at);
    assert_eq!(probe_at(&machine), Some(arrival + secs(300)));
    assert_eq!(machine.requested_until(), Some(arrival + secs(day)));
    assert!(machine.door().asked_longer());
}

#[test]
fn a_late_wait_under_a_hint_lengthens_the_breakers_own_wait_too() {
    let now = Instant::now();
    let (mut machine, (epoch, kind), steps) = opened_by_one_of_two(5, 300, now);
    let at = |s: u64| Fixed {
        step: steps,
        now: now + secs(s),
    };
    assert!(machine.hold_open(now + secs(20), at(0)).0);
    machine.record(epoch, kind, limited(60), None, at(1));
    assert_eq!(probe_at(&machine), Some(now + secs(61)));
    // The hint withdrawn: the breaker's own wait, lengthened, is back in force.
    assert!(machine.release_hold(at(2)).0);
    assert_eq!(probe_at(&machine), Some(now + secs(61)));
}

#[test]
fn a_late_wait_lengthens_an_opening_counted_in_calls_in_time_too() {
    let now = Instant::now();
    let config = Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(3))
        .build_config()
        .unwrap();
    let mut machine = Machine::new(config, now);
    let mut steps = 0;
    let opener = admit(&mut machine, &mut steps, now);
    let (epoch, kind) = admit(&mut machine, &mut steps, now);
    let at = Fixed { step: steps, now };
    machine.record(opener.0, opener.1, Outcome::failure(), None, at);
    assert_eq!(machine.state(), State::Open);
    machine.record(epoch, kind, limited(10), None, at);
    assert_eq!(
        machine.door().due(),
        Some(super::door::Due::At {
            step: Some(steps + 3),
            time: Some(now + secs(10))
        }),
        "the probe waits for both"
    );
}
