//! Per-call overhead of a circuit breaker on a no-op service, side by side with the
//! floor (a bare call, and a hand-written lock-free breaker) and the crates users would
//! pick instead: tower-resilience 0.13 (`circuitbreaker`, consecutive failures) and
//! failsafe 1.3 (futures API, consecutive failures).
//!
//! ```text
//! cargo bench --bench overhead
//! ```
//!
//! `per_call/*`: one `poll_ready` + `call` + one poll of the response future with a
//! no-op waker, on one thread: the breaker's own cost, no runtime in the way. Open calls
//! are measured with a fallback, with typed errors (`with_typed_errors`: a `CallError`
//! carrying the `Rejected`, as failsafe's `Error::Rejected`) and with the default boxed
//! error (a `Rejected` boxed into tower's `BoxError`: an allocation per call); forced
//! open, with a cooldown in calls, and with the default cooldown in time.
//! `contended/*`: 64 tasks on a 2-worker multi-thread runtime share one breaker, each
//! awaiting `ready()` then the call in a loop; the figure is wall time per call. The
//! same breakers as `per_call`, but for the floor's open path (it never probes).

use std::convert::Infallible;
use std::future::{ready, Future};
use std::hint::black_box;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use failsafe::futures::CircuitBreaker as _;
use tower::{Layer, Service, ServiceExt};
use tower_circuit_breaker::fallback::{Fallback, NoFallback, TypedErrors};
use tower_circuit_breaker::{Builder, CircuitBreaker, CircuitBreakerLayer, Cooldown, Outcome};

mod common;
use common::{call_once, noop, Noop};

/// The floor for a breaker: a lock-free consecutive-failure breaker written by hand,
/// with atomics and an `Arc` clone per call, and no counts, fallback or provenance.
mod lock_free {
    use super::*;

    #[derive(Default)]
    pub(crate) struct State {
        open: AtomicU8,
        failures: AtomicU32,
    }

    #[derive(Clone)]
    pub(crate) struct Breaker<S> {
        pub(crate) inner: S,
        pub(crate) state: Arc<State>,
    }

    impl State {
        pub(crate) fn open(&self) {
            self.open.store(1, Ordering::Relaxed);
        }
    }

    pub(crate) struct Call<F> {
        future: F,
        state: Arc<State>,
    }

    impl<F: Future<Output = Result<u64, Infallible>> + Unpin> Future for Call<F> {
        type Output = Result<u64, &'static str>;

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            let Poll::Ready(result) = Pin::new(&mut self.future).poll(cx) else {
                return Poll::Pending;
            };
            Poll::Ready(match result {
                Ok(value) => {
                    if self.state.failures.load(Ordering::Relaxed) != 0 {
                        self.state.failures.store(0, Ordering::Relaxed);
                    }
                    Ok(value)
                }
                Err(never) => match never {},
            })
        }
    }

    pub(crate) enum Answer<F> {
        Called(Call<F>),
        Open,
    }

    impl<F: Future<Output = Result<u64, Infallible>> + Unpin> Future for Answer<F> {
        type Output = Result<u64, &'static str>;

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            match self.get_mut() {
                Answer::Called(call) => Pin::new(call).poll(cx),
                Answer::Open => Poll::Ready(Err("open")),
            }
        }
    }

    impl<S> Service<u64> for Breaker<S>
    where
        S: Service<u64, Response = u64, Error = Infallible>,
        S::Future: Unpin,
    {
        type Response = u64;
        type Error = &'static str;
        type Future = Answer<S::Future>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            self.inner.poll_ready(cx).map_err(|never| match never {})
        }

        fn call(&mut self, request: u64) -> Self::Future {
            if self.state.open.load(Ordering::Relaxed) == 1 {
                return Answer::Open;
            }
            Answer::Called(Call {
                future: self.inner.call(request),
                state: self.state.clone(),
            })
        }
    }
}

fn lock_free_breaker() -> lock_free::Breaker<Noop> {
    lock_free::Breaker {
        inner: noop(),
        state: Arc::new(lock_free::State::default()),
    }
}

fn ours() -> CircuitBreakerLayer {
    CircuitBreakerLayer::builder()
        .build()
        .expect("valid settings")
}

/// Request 0 fails, any other succeeds.
fn zero_fails(result: &Result<u64, Infallible>) -> Outcome {
    match result {
        Ok(0) => Outcome::failure(),
        _ => Outcome::Success,
    }
}

type Classifier = fn(&Result<u64, Infallible>) -> Outcome;

/// A breaker of `settings` that one failure (request 0) opens, with a no-op fallback.
fn tripping(settings: Builder) -> CircuitBreaker<Noop, Fallback<Noop>, Classifier> {
    tripping_layer(settings).with_fallback(noop()).layer(noop())
}

/// The same with no fallback, tripped: a skipped call fails with a typed `CallError`.
fn tripped_typed(cx: &mut Context<'_>) -> CircuitBreaker<Noop, TypedErrors, Classifier> {
    let mut breaker = tripping_layer(Builder::new())
        .with_typed_errors()
        .layer(noop());
    call_once(&mut breaker, cx, 0);
    breaker
}

/// The same, boxing each rejection into tower's `BoxError` (the default): an allocation.
fn tripped_boxed(cx: &mut Context<'_>) -> CircuitBreaker<Noop, NoFallback, Classifier> {
    let mut breaker = tripping_layer(Builder::new()).layer(noop());
    call_once(&mut breaker, cx, 0);
    breaker
}

fn tripping_layer(settings: Builder) -> CircuitBreakerLayer<NoFallback, Classifier> {
    let classify: Classifier = zero_fails;
    settings
        .failure_threshold(1)
        .build()
        .expect("valid settings")
        .with_classifier(classify)
}

fn resilience() -> tower_resilience::circuitbreaker::CircuitBreakerLayer {
    tower_resilience::circuitbreaker::CircuitBreakerLayer::builder()
        .consecutive_failures(3)
        .build()
        .expect("valid settings")
}

type Failsafe = failsafe::StateMachine<
    failsafe::failure_policy::ConsecutiveFailures<failsafe::backoff::Constant>,
    (),
>;

fn failsafe_breaker() -> Failsafe {
    let policy = failsafe::failure_policy::consecutive_failures(
        3,
        failsafe::backoff::constant(Duration::from_secs(30)),
    );
    failsafe::Config::new().failure_policy(policy).build()
}

/// failsafe is not a tower service: one call is `breaker.call(future)`.
fn failsafe_call(breaker: &Failsafe, cx: &mut Context<'_>, request: u64) -> bool {
    let future = pin!(breaker.call(ready(Ok::<u64, ()>(request))));
    match future.poll(cx) {
        Poll::Ready(result) => result.is_ok(),
        Poll::Pending => unreachable!("ready at once"),
    }
}

fn trip_failsafe(breaker: &Failsafe, cx: &mut Context<'_>) {
    for _ in 0..3 {
        let future = pin!(breaker.call(ready(Err::<u64, ()>(()))));
        let _ = future.poll(cx);
    }
    assert!(!breaker.is_call_permitted(), "failsafe opened");
}

fn per_call(c: &mut Criterion) {
    // For setting breakers up; each benchmark polls with a context of its own.
    let mut cx = Context::from_waker(Waker::noop());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("per_call");
    // Generic, not `dyn`: each entrant's call is compiled into its own loop, as it would
    // be in a user's code.
    fn run<F: FnMut(&mut Context<'_>, u64) -> bool>(
        group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
        name: &str,
        mut f: F,
    ) {
        let mut cx = Context::from_waker(Waker::noop());
        group.bench_function(name, |b| b.iter(|| black_box(f(&mut cx, black_box(1)))));
    }
    macro_rules! bench {
        ($name:expr, $f:expr) => {
            run(&mut group, $name, $f)
        };
    }

    let mut bare = noop();
    bench!("bare_service", |cx, r| call_once(&mut bare, cx, r));

    let mut floor = lock_free_breaker();
    bench!("lock_free_floor/closed", |cx, r| {
        call_once(&mut floor, cx, r)
    });
    let mut floor_open = lock_free_breaker();
    floor_open.state.open();
    bench!("lock_free_floor/open", |cx, r| {
        call_once(&mut floor_open, cx, r)
    });

    let mut closed = ours().layer(noop());
    bench!("ours/closed", |cx, r| call_once(&mut closed, cx, r));

    let layer = ours();
    layer.handle().force_open();
    let mut open = layer.with_fallback(noop()).layer(noop());
    bench!("ours/open_fallback", |cx, r| {
        call_once(&mut open, cx, r)
    });

    let layer = ours();
    layer.handle().force_open();
    let mut rejecting = layer.with_typed_errors().layer(noop());
    bench!("ours/open_typed_error", |cx, r| {
        call_once(&mut rejecting, cx, r)
    });

    let layer = ours();
    layer.handle().force_open();
    let mut boxing = layer.layer(noop());
    bench!("ours/open_boxed_error", |cx, r| {
        call_once(&mut boxing, cx, r)
    });

    // Open after a failure, with a cooldown in calls: no clock read.
    let mut open_calls = tripping(Builder::new().cooldown(Cooldown::Calls(Cooldown::MAX_CALLS)));
    call_once(&mut open_calls, &mut cx, 0);
    bench!("ours/open_call_cooldown", |cx, r| {
        call_once(&mut open_calls, cx, r)
    });

    // Open after a failure with the default cooldown (30 s in time): each skipped call
    // knows the cooldown has not passed (from the coarse clock, a deadline this far
    // ahead).
    let mut open_time = tripping(Builder::new());
    call_once(&mut open_time, &mut cx, 0);
    bench!("ours/open_time_cooldown", |cx, r| {
        call_once(&mut open_time, cx, r)
    });

    // The same, with no fallback: each skipped call fails with a typed `CallError`...
    let mut open_time_error = tripped_typed(&mut cx);
    bench!("ours/open_time_typed_error", |cx, r| {
        call_once(&mut open_time_error, cx, r)
    });

    // ...or with a `Rejected` boxed into tower's `BoxError` (the default), an allocation.
    let mut open_time_boxed = tripped_boxed(&mut cx);
    bench!("ours/open_time_boxed_error", |cx, r| {
        call_once(&mut open_time_boxed, cx, r)
    });

    let layer = ours();
    layer.handle().kill_switch().kill();
    let mut killed = layer.with_fallback(noop()).layer(noop());
    bench!("ours/killed", |cx, r| call_once(&mut killed, cx, r));

    // Half-open with the probe slot taken by a reservation never used: every call
    // meets a full half-open and goes to the fallback.
    let mut half_open = tripping(
        Builder::new()
            .cooldown(Cooldown::Calls(1))
            .max_half_open_dwell(None),
    );
    let handle = half_open.handle();
    call_once(&mut half_open, &mut cx, 0); // trips
    let mut holder = half_open.clone();
    assert!(holder.poll_ready(&mut cx).is_ready()); // takes the probe slot
    assert_eq!(handle.snapshot().probes_in_flight, 1);
    bench!("ours/half_open_probe_taken", |cx, r| {
        call_once(&mut half_open, cx, r)
    });

    let mut res_closed = resilience().layer(noop());
    bench!("tower_resilience/closed", |cx, r| {
        call_once(&mut res_closed, cx, r)
    });
    let mut res_open = resilience().layer(noop());
    runtime.block_on(res_open.force_open());
    bench!("tower_resilience/open", |cx, r| {
        call_once(&mut res_open, cx, r)
    });

    let fs_closed = failsafe_breaker();
    bench!("failsafe/closed", |cx, r| {
        failsafe_call(&fs_closed, cx, r)
    });
    let fs_open = failsafe_breaker();
    trip_failsafe(&fs_open, &mut cx);
    bench!("failsafe/open", |cx, r| failsafe_call(&fs_open, cx, r));

    drop(group);
    drop(holder);
}

const TASKS: u64 = 64;

/// Wall time for `iters` calls spread over 64 tasks on a 2-worker runtime.
fn contended<S>(runtime: &tokio::runtime::Runtime, svc: &S, iters: u64) -> Duration
where
    S: Service<u64> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
    S::Error: Send,
{
    let per_task = iters.div_ceil(TASKS);
    runtime.block_on(async {
        let start = Instant::now();
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let mut svc = svc.clone();
                tokio::spawn(async move {
                    for i in 0..per_task {
                        if let Ok(ready) = svc.ready().await {
                            let _ = black_box(ready.call(i).await.is_ok());
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("task");
        }
        start.elapsed()
    })
}

fn contended_failsafe(
    runtime: &tokio::runtime::Runtime,
    breaker: &Failsafe,
    iters: u64,
) -> Duration {
    let per_task = iters.div_ceil(TASKS);
    runtime.block_on(async {
        let start = Instant::now();
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let breaker = breaker.clone();
                tokio::spawn(async move {
                    for i in 0..per_task {
                        let _ = black_box(breaker.call(ready(Ok::<u64, ()>(i))).await.is_ok());
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("task");
        }
        start.elapsed()
    })
}

fn under_contention(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("contended");
    group.bench_function(BenchmarkId::new("bare_service", TASKS), |b| {
        b.iter_custom(|iters| contended(&runtime, &noop(), iters))
    });
    let floor = lock_free_breaker();
    group.bench_function(BenchmarkId::new("lock_free_floor", TASKS), |b| {
        b.iter_custom(|iters| contended(&runtime, &floor, iters))
    });
    let closed = ours().layer(noop());
    group.bench_function(BenchmarkId::new("ours/closed", TASKS), |b| {
        b.iter_custom(|iters| contended(&runtime, &closed, iters))
    });
    let layer = ours();
    layer.handle().force_open();
    let open = layer.with_fallback(noop()).layer(noop());
    group.bench_function(BenchmarkId::new("ours/open_fallback", TASKS), |b| {
        b.iter_custom(|iters| contended(&runtime, &open, iters))
    });
    let layer = ours();
    layer.handle().force_open();
    let rejecting = layer.with_typed_errors().layer(noop());
    group.bench_function(BenchmarkId::new("ours/open_typed_error", TASKS), |b| {
        b.iter_custom(|iters| contended(&runtime, &rejecting, iters))
    });
    let layer = ours();
    layer.handle().force_open();
    let boxing = layer.layer(noop());
    group.bench_function(BenchmarkId::new("ours/open_boxed_error", TASKS), |b| {
        b.iter_custom(|iters| contended(&runtime, &boxing, iters))
    });
    let mut cx = Context::from_waker(Waker::noop());
    let mut open_time = tripping(Builder::new());
    call_once(&mut open_time, &mut cx, 0);
    group.bench_function(BenchmarkId::new("ours/open_time_cooldown", TASKS), |b| {
        b.iter_custom(|iters| contended(&runtime, &open_time, iters))
    });
    let open_time_error = tripped_typed(&mut cx);
    group.bench_function(BenchmarkId::new("ours/open_time_typed_error", TASKS), |b| {
        b.iter_custom(|iters| contended(&runtime, &open_time_error, iters))
    });
    let open_time_boxed = tripped_boxed(&mut cx);
    group.bench_function(BenchmarkId::new("ours/open_time_boxed_error", TASKS), |b| {
        b.iter_custom(|iters| contended(&runtime, &open_time_boxed, iters))
    });
    let layer = ours();
    layer.handle().kill_switch().kill();
    let killed = layer.with_fallback(noop()).layer(noop());
    group.bench_function(BenchmarkId::new("ours/killed", TASKS), |b| {
        b.iter_custom(|iters| contended(&runtime, &killed, iters))
    });
    let mut half_open = tripping(
        Builder::new()
            .cooldown(Cooldown::Calls(1))
            .max_half_open_dwell(None),
    );
    call_once(&mut half_open, &mut cx, 0);
    let mut holder = half_open.clone();
    assert!(holder.poll_ready(&mut cx).is_ready());
    group.bench_function(BenchmarkId::new("ours/half_open_probe_taken", TASKS), |b| {
        b.iter_custom(|iters| contended(&runtime, &half_open, iters))
    });
    let res = resilience().layer(noop());
    group.bench_function(BenchmarkId::new("tower_resilience/closed", TASKS), |b| {
        b.iter_custom(|iters| contended(&runtime, &res, iters))
    });
    let res_open = resilience().layer(noop());
    runtime.block_on(res_open.force_open());
    group.bench_function(BenchmarkId::new("tower_resilience/open", TASKS), |b| {
        b.iter_custom(|iters| contended(&runtime, &res_open, iters))
    });
    let fs = failsafe_breaker();
    group.bench_function(BenchmarkId::new("failsafe/closed", TASKS), |b| {
        b.iter_custom(|iters| contended_failsafe(&runtime, &fs, iters))
    });
    let fs_open = failsafe_breaker();
    trip_failsafe(&fs_open, &mut cx);
    group.bench_function(BenchmarkId::new("failsafe/open", TASKS), |b| {
        b.iter_custom(|iters| contended_failsafe(&runtime, &fs_open, iters))
    });
    group.finish();
    drop(holder);
}

criterion_group!(benches, per_call, under_contention);
criterion_main!(benches);
