//! Model checking of the breaker's shared state with loom: every interleaving of the
//! threads below is run, and the invariants hold in each.
//!
//! ```text
//! RUSTFLAGS="--cfg tcb_loom" cargo test --release --test loom
//! ```
//!
//! Only the shared state's atomics, lock and kill switch are modelled (src/sync/mod.rs);
//! calls are driven by hand with a no-op waker, without a runtime.
#![cfg(tcb_loom)]

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use loom::thread;
use tower::{service_fn, Layer, Service};
use tower_circuit_breaker::error::BoxError;
use tower_circuit_breaker::{
    Answer, CircuitBreakerLayer, Cooldown, NextProbe, Outcome, Reason, Source, State,
};

type Reply = Result<u64, Infallible>;
type Inner = tower::util::ServiceFn<fn(u64) -> Ready<Reply>>;

fn inner() -> Inner {
    service_fn(|x: u64| ready(Ok(x)))
}

/// Runs `f` under every interleaving with at most three preemptions: the bound loom's
/// authors recommend, which finds the races that matter in seconds instead of hours.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

/// `0` fails, anything else succeeds.
fn classify(result: &Reply) -> Outcome {
    match result {
        Ok(0) => Outcome::failure_with("refused"),
        _ => Outcome::Success,
    }
}

fn call<S>(svc: &mut S, request: u64) -> Result<Answer<u64>, BoxError>
where
    S: Service<u64, Response = Answer<u64>, Error = BoxError>,
{
    let mut cx = Context::from_waker(Waker::noop());
    assert!(svc.poll_ready(&mut cx).is_ready());
    let future = pin!(svc.call(request));
    match future.poll(&mut cx) {
        Poll::Ready(result) => result,
        Poll::Pending => unreachable!("everything here is ready at once"),
    }
}

type Layered =
    CircuitBreakerLayer<tower_circuit_breaker::fallback::Fallback<Inner>, fn(&Reply) -> Outcome>;

/// A closed breaker that one failure opens for `cooldown` calls, with a fallback.
fn breaker(cooldown: u64) -> (Layered, tower_circuit_breaker::CircuitBreakerHandle) {
    let layer = CircuitBreakerLayer::builder()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(cooldown))
        .max_half_open_dwell(None)
        .build()
        .expect("valid");
    let handle = layer.handle();
    let layer = layer
        .with_classifier(classify as fn(&Reply) -> Outcome)
        .with_fallback(inner());
    (layer, handle)
}

/// A breaker tripped by one failure whose next call is the probe.
fn tripped() -> (Layered, tower_circuit_breaker::CircuitBreakerHandle) {
    let (layer, handle) = breaker(1);
    let mut svc = layer.layer(inner());
    let _ = call(&mut svc, 0);
    assert_eq!(handle.state(), State::Open);
    (layer, handle)
}

#[test]
fn two_callers_race_for_the_one_probe_and_only_one_gets_it() {
    model(|| {
        let (layer, handle) = tripped();
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let mut svc = layer.layer(inner());
                thread::spawn(move || call(&mut svc, 1).expect("answered").source())
            })
            .collect();
        let sources: Vec<Source> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let probes = sources.iter().filter(|s| **s == Source::Probe).count();
        assert_eq!(probes, 1, "{sources:?}");
        // The other caller met the probe under way, or came after it closed the breaker.
        assert!(
            sources.contains(&Source::Fallback(Reason::HalfOpenFull))
                || sources.contains(&Source::Service),
            "{sources:?}"
        );
        let snapshot = handle.snapshot();
        assert_eq!(snapshot.counts.probes, 1);
        assert_eq!(snapshot.probes_in_flight, 0);
        assert_eq!(snapshot.state, State::Closed);
        let c = snapshot.counts;
        assert_eq!(c.arrived, c.made + c.skipped() + c.abandoned);
    });
}

#[test]
fn a_probe_completing_while_the_kill_switch_flips_is_still_recorded() {
    model(|| {
        let (layer, handle) = tripped();
        let kill = handle.kill_switch().clone();
        let mut svc = layer.layer(inner());
        let prober = thread::spawn(move || call(&mut svc, 1).expect("answered").source());
        let killer = thread::spawn(move || kill.kill());
        let source = prober.join().unwrap();
        killer.join().unwrap();
        let snapshot = handle.snapshot();
        match source {
            // The probe went first: its success closed the breaker, kill or not.
            Source::Probe => assert_eq!(snapshot.state, State::Closed),
            // The kill went first, or came between the probe's reservation and its
            // call: nothing was called, and no probe is left holding the slot, so the
            // first call after revival is the probe.
            Source::Fallback(Reason::Killed) => {
                assert_ne!(snapshot.state, State::Closed);
                assert_eq!(snapshot.counts.probes, 0);
                handle.kill_switch().revive();
                let mut svc = layer.layer(inner());
                assert_eq!(call(&mut svc, 1).expect("answered").source(), Source::Probe);
            }
            other => panic!("unexpected source {other:?}"),
        }
        assert!(snapshot.killed);
        assert_eq!(snapshot.probes_in_flight, 0);
        let c = snapshot.counts;
        assert_eq!(c.arrived, c.made + c.skipped() + c.abandoned);
        assert_eq!(
            c.made,
            c.successes + c.failures + c.ignored + c.cancelled + c.late
        );
    });
}

#[test]
fn a_late_result_from_an_earlier_generation_never_moves_the_breaker() {
    model(|| {
        let layer = CircuitBreakerLayer::builder()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(100))
            .build()
            .expect("valid");
        let handle = layer.handle();
        let layer = layer.with_classifier(classify as fn(&Reply) -> Outcome);
        // A call admitted while closed, whose answer comes after the breaker opened.
        let mut slow = layer.layer(inner());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(slow.poll_ready(&mut cx).is_ready());
        let pending = slow.call(7);

        let mut failing = layer.layer(inner());
        let tripper = thread::spawn(move || {
            let _ = call(&mut failing, 0);
        });
        let finisher = thread::spawn(move || {
            let mut cx = Context::from_waker(Waker::noop());
            let future = pin!(pending);
            matches!(future.poll(&mut cx), Poll::Ready(Ok(_)))
        });
        tripper.join().unwrap();
        assert!(finisher.join().unwrap());
        let snapshot = handle.snapshot();
        // Whatever the order, the success never closes the breaker the failure opened:
        // it either came first (and counted) or arrived late (and was not counted).
        assert_eq!(snapshot.state, State::Open);
        let c = snapshot.counts;
        assert_eq!(c.failures, 1);
        assert_eq!(c.successes + c.late, 1, "{c:?}");
        assert_eq!(
            c.made,
            c.successes + c.failures + c.ignored + c.cancelled + c.late
        );
    });
}

#[test]
fn a_call_racing_the_failure_that_opens_the_breaker_is_made_or_skipped_as_open() {
    model(|| {
        let (layer, handle) = breaker(3);
        let mut failing = layer.layer(inner());
        let mut other = layer.layer(inner());
        let tripper = thread::spawn(move || call(&mut failing, 0).expect("answered").source());
        let caller = thread::spawn(move || call(&mut other, 1).expect("answered"));
        assert_eq!(tripper.join().unwrap(), Source::Service);
        let answer = caller.join().unwrap();
        match answer.source() {
            // Admitted while closed: its success came first, or late.
            Source::Service => {}
            // Skipped as open: the probe is the third call after the opening one. If this
            // call arrived after the opening, it was the first of the three (two to go);
            // if it arrived before and was decided again at `call`, it is none of them.
            Source::Fallback(Reason::Open) => assert!(
                matches!(
                    answer.next_probe(),
                    NextProbe::After {
                        calls: 2 | 3,
                        at: None
                    }
                ),
                "{:?}",
                answer.next_probe()
            ),
            other => panic!("unexpected source {other:?}"),
        }
        let snapshot = handle.snapshot();
        assert_eq!(snapshot.state, State::Open);
        let c = snapshot.counts;
        assert_eq!(c.failures, 1);
        assert_eq!(c.arrived, c.made + c.skipped() + c.abandoned);
        assert_eq!(
            c.made,
            c.successes + c.failures + c.ignored + c.cancelled + c.late
        );
    });
}

/// A person holds the breaker open for a time and releases it while a call is decided:
/// the call reads one whole door, never a torn one. It is made (the breaker was closed),
/// or skipped as forced open and told exactly when the hold ends.
#[test]
fn a_call_racing_a_hold_reads_the_whole_door() {
    model(|| {
        let (layer, handle) = breaker(3);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(3600);
        let person = {
            let handle = handle.clone();
            thread::spawn(move || {
                handle.open_until(until);
                handle.reset();
            })
        };
        let mut svc = layer.layer(inner());
        let answer = call(&mut svc, 1).expect("answered");
        person.join().unwrap();
        match answer.source() {
            Source::Service => assert_eq!(answer.state(), State::Closed),
            Source::Fallback(Reason::ForcedOpen) => {
                assert_eq!(answer.state(), State::ForcedOpen);
                assert_eq!(
                    answer.next_probe(),
                    NextProbe::After {
                        calls: 1,
                        at: Some(until)
                    }
                );
            }
            other => panic!("unexpected source {other:?}"),
        }
        assert_eq!(handle.state(), State::Closed);
    });
}

/// Two threads cause transitions at once: the subscriber receives each, once, in the
/// order of their generations (the one that delivers also delivers what the other
/// queued meanwhile).
#[test]
fn transitions_made_at_once_are_each_delivered_once_in_order() {
    model(|| {
        let (layer, handle) = breaker(3);
        let mut events = handle.subscribe();
        let mut failing = layer.layer(inner());
        let tripper = thread::spawn(move || {
            let _ = call(&mut failing, 0);
        });
        let person = {
            let handle = handle.clone();
            thread::spawn(move || handle.force_open())
        };
        tripper.join().unwrap();
        person.join().unwrap();
        let mut generations = Vec::new();
        while let Ok(t) = events.try_recv() {
            generations.push(t.generation);
        }
        let made = handle.snapshot().generation;
        assert_eq!(generations.len() as u64, made, "{generations:?}");
        assert!(
            generations.windows(2).all(|w| w[0] < w[1]),
            "{generations:?}"
        );
    });
}

/// The first thread to count a breaker's quiet successes and skips owns those counts and
/// adds to them with plain writes; another thread counting at the same time counts
/// elsewhere. Every count is kept, and the counts add up.
#[test]
fn counts_made_at_once_by_the_thread_that_owns_them_and_another_are_all_kept() {
    model(|| {
        let succeeding = CircuitBreakerLayer::builder().build().expect("valid");
        let killed = CircuitBreakerLayer::builder().build().expect("valid");
        killed.handle().kill_switch().kill();
        let (mut ok, mut skip) = (succeeding.layer(inner()), killed.layer(inner()));
        // This thread counts first on both: it owns their counts.
        call(&mut ok, 1).expect("answered");
        call(&mut skip, 1).expect_err("killed");
        let (mut other_ok, mut other_skip) = (succeeding.layer(inner()), killed.layer(inner()));
        let thread = thread::spawn(move || {
            call(&mut other_ok, 1).expect("answered");
            call(&mut other_skip, 1).expect_err("killed");
        });
        call(&mut ok, 1).expect("answered");
        call(&mut skip, 1).expect_err("killed");
        thread.join().unwrap();
        let c = succeeding.handle().snapshot().counts;
        assert_eq!((c.successes, c.made, c.arrived), (3, 3, 3), "{c:?}");
        let c = killed.handle().snapshot().counts;
        assert_eq!((c.skipped_killed, c.made, c.arrived), (3, 0, 3), "{c:?}");
    });
}
