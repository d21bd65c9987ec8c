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

use super::door::{Clock, Epoch, Fixed, Verdict};
use super::*;
use crate::builder::Builder;
use crate::settings::{Backoff, RateWindow};

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
    )
        .prop_map(
            |(cooldown, trip, probes, dwell, slow, backoff, open_on_hint, timed)| {
                let mut builder = Builder::new()
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
                let (verdict, transition) = machine.admit(killed, &mut clock);
                let kind = match verdict {
                    Verdict::Call => Some(Kind::Call),
                    Verdict::Probe => Some(Kind::Probe),
                    Verdict::Shadow(_) => Some(Kind::Shadow),
                    Verdict::Expired => {
                        return Err(TestCaseError::fail("admit left a deadline standing"))
                    }
                    Verdict::Pass | Verdict::Skip(_) => None,
                };
                match verdict {
                    Verdict::Call => prop_assert_eq!(machine.state(), State::Closed),
                    Verdict::Probe => prop_assert_eq!(machine.state(), State::HalfOpen),
                    _ => {}
                }
                if let Some(t) = &transition {
                    prop_assert_eq!(t.from, state_before);
                    prop_assert_eq!(t.to, machine.state());
                }
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
                let (_, transition) =
                    machine.record(permit.epoch, permit.kind, outcome.outcome(), elapsed, at);
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
        let (verdict, _) = machine.admit(killed, &mut clock);
        let found = if verdict == Verdict::Probe {
            State::HalfOpen
        } else {
            state
        };
        let word = match verdict {
            Verdict::Skip(_) => "skipped",
            _ => {
                let outcome = if c == '1' {
                    Outcome::Success
                } else {
                    Outcome::failure()
                };
                let kind = if verdict == Verdict::Probe {
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
