//! Deadlines on the real clock: outside any runtime and on a multi-thread runtime (whose
//! clocks cannot be paused), and on every runtime when tokio is built without its
//! `test-util` feature (as in production: the benchmarks' member runs this file so, in
//! `benches/tests/production_clock.rs`), a call at a door with a deadline is decided
//! without reading the exact clock whenever a cheap reading proves the deadline ahead. On
//! a current-thread runtime built with `test-util`, every such call reads tokio's clock,
//! which may be paused; unpaused, its decisions are held here too. These tests hold
//! every such decision to the exact clock read just before and just after the call:
//! skipped only if the deadline was still ahead when the call began, let through only if
//! it had passed when the call ended, and told the deadline to the nanosecond. Nothing
//! waits on the wall clock: the deadlines are set around the time read.

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tower::{service_fn, Layer, Service};
use tower_circuit_breaker::error::{BoxError, Rejected};
use tower_circuit_breaker::{
    Answer, CircuitBreaker, CircuitBreakerHandle, CircuitBreakerLayer, NextProbe, Reason, Source,
    State,
};

type Inner = tower::util::ServiceFn<fn(u64) -> Ready<Result<u64, Infallible>>>;
type Breaker = CircuitBreaker<Inner>;

/// The breaker's clock, as the tests see it.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

fn breaker() -> (Breaker, CircuitBreakerHandle) {
    let layer = CircuitBreakerLayer::builder()
        .build()
        .expect("valid settings");
    let handle = layer.handle();
    (layer.layer(service_fn(|x: u64| ready(Ok(x)))), handle)
}

/// One call driven by hand: no runtime needed, and none in the way.
fn call(svc: &mut Breaker) -> Result<Answer<u64>, BoxError> {
    let mut cx = Context::from_waker(Waker::noop());
    assert!(matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))));
    match pin!(svc.call(1)).poll(&mut cx) {
        Poll::Ready(result) => result,
        Poll::Pending => unreachable!("ready at once"),
    }
}

/// Opens the breaker until `offset` after (or, negative, before) the time read now, makes
/// one call, and checks its decision against the clock read around it.
fn decide_around(svc: &mut Breaker, handle: &CircuitBreakerHandle, offset: i128) {
    let read = now();
    let magnitude = Duration::from_nanos(offset.unsigned_abs() as u64);
    let deadline = if offset >= 0 {
        read + magnitude
    } else {
        read.checked_sub(magnitude).unwrap_or(read)
    };
    handle.open_until(deadline);
    let before = now();
    let result = call(svc);
    let after = now();
    match result {
        Err(error) => {
            let rejected = error.downcast_ref::<Rejected>().expect("a rejection");
            assert_eq!(rejected.reason(), Reason::ForcedOpen);
            assert!(
                before < deadline,
                "skipped {offset} ns: the deadline had passed"
            );
            assert_eq!(
                rejected.next_probe(),
                NextProbe::After {
                    calls: 1,
                    at: Some(deadline)
                },
                "skipped {offset} ns: told another time"
            );
        }
        Ok(answer) => {
            assert_eq!(answer.source(), Source::Probe, "{offset} ns");
            assert!(
                after >= deadline,
                "let through {offset} ns: the deadline was ahead"
            );
            assert_eq!(handle.state(), State::Closed);
        }
    }
    handle.reset();
}

const MS: i128 = 1_000_000;

/// Deadlines behind, at, and ahead of the time read, from a nanosecond to an hour: both
/// sides of every margin a cheap reading could use.
const OFFSETS: [i128; 16] = [
    -1_000 * MS,
    -MS,
    -1,
    0,
    1,
    1_000,
    MS,
    4 * MS,
    10 * MS,
    49 * MS,
    51 * MS,
    100 * MS,
    1_000 * MS,
    60_000 * MS,
    3_600_000 * MS,
    365 * 24 * 3_600_000 * MS,
];

fn decide_every_offset(rounds: usize) {
    let (mut svc, handle) = breaker();
    for _ in 0..rounds {
        for offset in OFFSETS {
            decide_around(&mut svc, &handle, offset);
        }
    }
}

#[test]
fn outside_a_runtime_each_deadline_is_decided_as_the_clock_read_around_the_call_says() {
    decide_every_offset(200);
}

#[test]
fn on_a_multi_thread_runtime_each_deadline_is_decided_as_the_clock_read_around_the_call_says() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let tasks: Vec<_> = (0..4)
            .map(|_| tokio::spawn(async { decide_every_offset(50) }))
            .collect();
        for task in tasks {
            task.await.expect("no decision disagreed with the clock");
        }
        // The thread blocked on the runtime, which is not one of its workers.
        decide_every_offset(20);
    });
}

#[test]
fn on_a_current_thread_runtime_each_deadline_is_decided_as_the_clock_read_around_the_call_says() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        tokio::spawn(async { decide_every_offset(50) })
            .await
            .expect("no decision disagreed with the clock");
        // In no task: the thread that drives the runtime.
        decide_every_offset(20);
    });
}

/// A deadline an hour ahead stays ahead for every call: each is skipped and told the
/// same deadline, however many calls, from however many threads.
#[test]
fn a_deadline_far_ahead_skips_every_call_and_tells_each_the_same_time() {
    let (svc, handle) = breaker();
    let deadline = now() + Duration::from_secs(3600);
    handle.open_until(deadline);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            let mut svc = svc.clone();
            scope.spawn(move || {
                for _ in 0..10_000 {
                    let error = call(&mut svc).expect_err("skipped");
                    let rejected = error.downcast_ref::<Rejected>().expect("a rejection");
                    assert_eq!(
                        rejected.next_probe(),
                        NextProbe::After {
                            calls: 1,
                            at: Some(deadline)
                        }
                    );
                }
            });
        }
    });
    let counts = handle.snapshot().counts;
    assert_eq!(counts.skipped_forced_open, 40_000, "{counts:?}");
}
