//! The layer decides most calls with atomics alone: closed, open (a cooldown in calls,
//! in time, or only a reset), forced open, half-open with every probe slot taken, killed.
//! Only the rest reach its machine, behind a lock. These property tests drive the layer
//! and a bare [`Machine`] with the same calls, outcomes, clock and a person's actions,
//! and check that every call is decided the same way: made or skipped, probe or not, the
//! reason, the state found, and when the next probe may go; and that the counts agree
//! once every call has ended.
//!
//! The layer runs on a current-thread runtime with paused time; the machine is given the
//! same `tokio::time` instants.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tokio::sync::oneshot;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_circuit_breaker::machine::{Admission, Machine, Permit};
use tower_circuit_breaker::{
    Answer, Backoff, BoxError, Builder, CircuitBreakerLayer, Cooldown, Failure, NextProbe, Outcome,
    Reason, Source, State,
};

/// How a call ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Ok,
    Fail,
    /// A failure that says when to come back.
    RetryAfter(u64),
    /// A failure no cooldown ends: open until a reset.
    Permanent,
    Ignored,
}

impl End {
    fn outcome(self) -> Outcome {
        match self {
            End::Ok => Outcome::Success,
            End::Fail => Outcome::failure(),
            End::RetryAfter(ms) => {
                Outcome::Failure(Failure::new("busy").retry_after(Duration::from_millis(ms)))
            }
            End::Permanent => Outcome::Failure(Failure::new("quota").permanent()),
            End::Ignored => Outcome::Ignored,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    /// A call that ends at once.
    Call(End),
    /// A call whose answer is held back: a probe it is keeps its slot.
    Hold,
    /// The oldest held call ends.
    Finish(End),
    /// The oldest held call's future is dropped.
    Drop,
    Advance(u64),
    Kill,
    Revive,
    ForceOpen,
    Reset,
    AllowProbe,
}

fn end() -> impl Strategy<Value = End> {
    prop_oneof![
        4 => Just(End::Ok),
        4 => Just(End::Fail),
        1 => (1u64..3_000).prop_map(End::RetryAfter),
        1 => Just(End::Permanent),
        1 => Just(End::Ignored),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => end().prop_map(Op::Call),
        2 => Just(Op::Hold),
        2 => end().prop_map(Op::Finish),
        1 => Just(Op::Drop),
        5 => (1u64..4_000).prop_map(Op::Advance),
        1 => Just(Op::Kill),
        2 => Just(Op::Revive),
        1 => Just(Op::ForceOpen),
        1 => Just(Op::Reset),
        1 => Just(Op::AllowProbe),
    ]
}

fn cooldown() -> impl Strategy<Value = Cooldown> {
    prop_oneof![
        (1u64..6).prop_map(Cooldown::Calls),
        (1u64..3_000).prop_map(|ms| Cooldown::Time(Duration::from_millis(ms))),
    ]
}

prop_compose! {
    fn settings()(
        threshold in 1u32..4,
        cooldown in cooldown(),
        backoff in proptest::option::of(cooldown()),
        probes in 1u32..3,
        dwell in proptest::option::of(500u64..6_000),
        jitter in prop_oneof![Just(0.0), Just(0.3)],
    ) -> Builder {
        let mut builder = Builder::new()
            .name("lock-free")
            .failure_threshold(threshold)
            .cooldown(cooldown)
            .half_open_probes(probes)
            .max_half_open_dwell(dwell.map(Duration::from_millis))
            .jitter(jitter)
            .jitter_seed(7);
        // The cap in the cooldown's own unit, at least the cooldown.
        if let Some(cap) = backoff {
            let cap = match (cooldown, cap) {
                (Cooldown::Calls(n), Cooldown::Calls(m)) => Some(Cooldown::Calls(n.max(m) * 2)),
                (Cooldown::Time(a), Cooldown::Time(b)) => Some(Cooldown::Time(a.max(b) * 2)),
                _ => None,
            };
            if let Some(cap) = cap {
                builder = builder.backoff(Backoff::exponential(2.0, cap));
            }
        }
        builder
    }
}

/// A decision as the caller can see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Made {
        probe: bool,
        state: State,
    },
    Skipped {
        reason: Reason,
        state: State,
        next_probe: NextProbe,
    },
}

fn seen_by_machine(admission: &Admission) -> Seen {
    match *admission {
        Admission::Call(permit) => Seen::Made {
            probe: permit.is_probe(),
            state: permit.state(),
        },
        Admission::Skip(skip) => Seen::Skipped {
            reason: skip.reason,
            state: skip.state,
            next_probe: skip.next_probe,
        },
    }
}

fn seen_by_layer<T>(answer: &Answer<T>) -> Seen {
    match answer.source() {
        Source::Fallback(reason) => Seen::Skipped {
            reason,
            state: answer.state(),
            next_probe: answer.next_probe(),
        },
        source => Seen::Made {
            probe: source == Source::Probe,
            state: answer.state(),
        },
    }
}

/// The same decision. The lock-free path gives a probe's time to the microsecond,
/// rounded down, so times may differ by less than one.
fn same(layer: Seen, machine: Seen) -> bool {
    match (layer, machine) {
        (
            Seen::Skipped {
                reason: r1,
                state: s1,
                next_probe: NextProbe::After { calls: c1, at: a1 },
            },
            Seen::Skipped {
                reason: r2,
                state: s2,
                next_probe: NextProbe::After { calls: c2, at: a2 },
            },
        ) => {
            let close = match (a1, a2) {
                (Some(a1), Some(a2)) => {
                    a1 <= a2 && a2.duration_since(a1) < Duration::from_micros(1)
                }
                (a1, a2) => a1 == a2,
            };
            (r1, s1, c1) == (r2, s2, c2) && close
        }
        (layer, machine) => layer == machine,
    }
}

/// The service: each request carries its ending, or a channel to wait on.
enum Req {
    Now(End),
    Later(oneshot::Receiver<End>),
}

/// The service's error: the ending it was told to give.
#[derive(Debug)]
struct Failed(End);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl std::error::Error for Failed {}

type Reply = Result<End, Failed>;

fn reply(end: End) -> Reply {
    match end {
        End::Ok | End::Ignored => Ok(end),
        other => Err(Failed(other)),
    }
}

fn classify(result: &Reply) -> Outcome {
    match result {
        Ok(end) | Err(Failed(end)) => end.outcome(),
    }
}

type Call = Pin<Box<dyn Future<Output = Result<Answer<End>, BoxError>> + Send>>;

/// Polls a held call once, so that the wrapped service is called and waits.
fn start(call: &mut Call) {
    let mut cx = Context::from_waker(Waker::noop());
    assert!(
        call.as_mut().poll(&mut cx).is_pending(),
        "a held call waits"
    );
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// A current-thread runtime whose clock is paused.
fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime")
}

/// The scripted service behind `layer`'s breaker, with a fallback that answers `Ok`.
fn service(
    layer: CircuitBreakerLayer,
) -> impl Service<Req, Response = Answer<End>, Error = BoxError, Future: Send + 'static> {
    layer
        .with_classifier(classify)
        .with_fallback(service_fn(|_: Req| async { Ok::<_, Infallible>(End::Ok) }))
        .layer(service_fn(|req: Req| async move {
            match req {
                Req::Now(end) => reply(end),
                Req::Later(rx) => reply(rx.await.unwrap_or(End::Ok)),
            }
        }))
}

fn run(builder: Builder, ops: &[Op]) -> Result<(), TestCaseError> {
    paused_runtime().block_on(async {
        let mut machine = Machine::new(builder.build_config().expect("valid"), now());
        let layer = builder.build().expect("valid");
        let handle = layer.handle();
        let kill = handle.kill_switch().clone();
        let mut svc = service(layer);
        // Held calls: the layer's future and its channel, and the machine's permit.
        let mut held: Vec<(Call, oneshot::Sender<End>, Option<Permit>)> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let killed = kill.is_killed();
            match *op {
                Op::Call(end) => {
                    let answer = svc.ready().await.unwrap().call(Req::Now(end)).await;
                    let (admission, _) = machine.admit(now(), killed);
                    let layer_saw = answer.as_ref().map(seen_by_layer);
                    let machine_saw = seen_by_machine(&admission);
                    if let Ok(layer_saw) = layer_saw {
                        prop_assert!(
                            same(layer_saw, machine_saw),
                            "op {}: the layer {:?}, the machine {:?}",
                            i,
                            layer_saw,
                            machine_saw
                        );
                    } else {
                        // The service's failure reached the caller: the call was made.
                        prop_assert!(
                            matches!(machine_saw, Seen::Made { .. }),
                            "op {}: the layer made the call, the machine {:?}",
                            i,
                            machine_saw
                        );
                    }
                    if let Admission::Call(permit) = admission {
                        let _ = machine.record(permit, end.outcome(), None, now());
                    }
                }
                Op::Hold => {
                    let (tx, rx) = oneshot::channel();
                    let ready = svc.ready().await.unwrap();
                    let mut call: Call = Box::pin(ready.call(Req::Later(rx)));
                    let (admission, _) = machine.admit(now(), killed);
                    match admission {
                        Admission::Call(permit) => {
                            start(&mut call);
                            held.push((call, tx, Some(permit)));
                        }
                        Admission::Skip(_) => {
                            let answer = call.await.expect("a fallback answer");
                            let (layer_saw, machine_saw) =
                                (seen_by_layer(&answer), seen_by_machine(&admission));
                            prop_assert!(
                                same(layer_saw, machine_saw),
                                "op {}: the layer {:?}, the machine {:?}",
                                i,
                                layer_saw,
                                machine_saw
                            );
                        }
                    }
                }
                Op::Finish(end) if !held.is_empty() => {
                    let (call, tx, permit) = held.remove(0);
                    let _ = tx.send(end);
                    let _ = call.await;
                    if let Some(permit) = permit {
                        let _ = machine.record(permit, end.outcome(), None, now());
                    }
                }
                Op::Drop if !held.is_empty() => {
                    let (call, _, permit) = held.remove(0);
                    drop(call);
                    if let Some(permit) = permit {
                        machine.release(permit, true);
                    }
                }
                Op::Finish(_) | Op::Drop => {}
                Op::Advance(ms) => tokio::time::advance(Duration::from_millis(ms)).await,
                Op::Kill => kill.kill(),
                Op::Revive => kill.revive(),
                Op::ForceOpen => {
                    handle.force_open();
                    machine.force_open(now());
                }
                Op::Reset => {
                    handle.reset();
                    machine.reset(now());
                }
                Op::AllowProbe => {
                    prop_assert_eq!(handle.allow_probe(), machine.allow_probe(), "op {}", i);
                }
            }
        }
        for (call, tx, permit) in held.drain(..) {
            let _ = tx.send(End::Ok);
            let _ = call.await;
            if let Some(permit) = permit {
                let _ = machine.record(permit, Outcome::Success, None, now());
            }
        }
        let snapshot = handle.snapshot();
        let _ = machine.tick(now());
        let expected = machine.snapshot(now(), kill.is_killed());
        prop_assert_eq!(snapshot.state, expected.state);
        prop_assert_eq!(snapshot.counts, expected.counts);
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_layer_decides_every_call_as_its_machine_would(
        builder in settings(),
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        run(builder, &ops)?;
    }
}

#[test]
fn a_gate_too_far_off_for_the_lock_free_clock_is_left_to_the_machine() {
    // The lock-free paths count time in 48 bits of microseconds (nine years); a gate
    // further off is decided by the machine, which reports it exactly.
    paused_runtime().block_on(async {
        let twenty_years = Duration::from_secs(20 * 365 * 24 * 3600);
        let builder = Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(3))
            .max_retry_after(twenty_years * 2);
        let mut svc = service(builder.build().expect("valid"));
        let retry_after = End::RetryAfter(twenty_years.as_millis() as u64);
        let opened_at = now();
        let _ = svc.ready().await.unwrap().call(Req::Now(retry_after)).await;
        let answer = svc
            .ready()
            .await
            .unwrap()
            .call(Req::Now(End::Ok))
            .await
            .expect("a fallback answer");
        assert_eq!(answer.source(), Source::Fallback(Reason::Open));
        assert_eq!(
            answer.next_probe(),
            NextProbe::After {
                calls: 2,
                at: Some(opened_at + twenty_years),
            }
        );
    });
}
