//! Per-call overhead of the breaker on a no-op service, next to a bare call.
//!
//! `cargo bench --bench overhead`. Each iteration is one `poll_ready` + `call` + one poll
//! of the response future with a no-op waker: no runtime in the way, just the breaker.

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use criterion::{criterion_group, criterion_main, Criterion};
use tower::{service_fn, Layer, Service};
use tower_circuit_breaker::{CircuitBreakerLayer, Cooldown, Outcome};

/// One call through `svc`, driven by hand; the service and fallback are always ready.
fn call_once<S: Service<u64>>(
    svc: &mut S,
    cx: &mut Context<'_>,
    request: u64,
) -> Option<S::Response> {
    match svc.poll_ready(cx) {
        Poll::Ready(Ok(())) => {}
        _ => unreachable!("the benchmark's services are always ready"),
    }
    let future = pin!(svc.call(request));
    match future.poll(cx) {
        Poll::Ready(Ok(response)) => Some(response),
        Poll::Ready(Err(_)) => None,
        Poll::Pending => unreachable!("the benchmark's futures are ready at once"),
    }
}

fn noop() -> impl Service<
    u64,
    Response = u64,
    Error = Infallible,
    Future = std::future::Ready<Result<u64, Infallible>>,
> + Clone {
    service_fn(|x: u64| std::future::ready(Ok::<_, Infallible>(x)))
}

fn overhead(c: &mut Criterion) {
    let mut cx = Context::from_waker(Waker::noop());
    let mut group = c.benchmark_group("per_call");

    let mut bare = noop();
    group.bench_function("bare_service", |b| {
        b.iter(|| black_box(call_once(&mut bare, &mut cx, black_box(1))))
    });

    let layer = CircuitBreakerLayer::builder().build().expect("valid");
    let mut closed = layer.layer(noop());
    group.bench_function("closed", |b| {
        b.iter(|| black_box(call_once(&mut closed, &mut cx, black_box(1))))
    });

    let layer = CircuitBreakerLayer::builder().build().expect("valid");
    layer.handle().force_open();
    let mut open = layer.with_fallback(noop()).layer(noop());
    group.bench_function("open_with_fallback", |b| {
        b.iter(|| black_box(call_once(&mut open, &mut cx, black_box(1))))
    });

    let layer = CircuitBreakerLayer::builder().build().expect("valid");
    layer.handle().force_open();
    let mut rejecting = layer.layer(noop());
    group.bench_function("open_typed_error", |b| {
        b.iter(|| black_box(call_once(&mut rejecting, &mut cx, black_box(1))))
    });

    let layer = CircuitBreakerLayer::builder().build().expect("valid");
    layer.handle().kill_switch().kill();
    let mut killed = layer.with_fallback(noop()).layer(noop());
    group.bench_function("killed", |b| {
        b.iter(|| black_box(call_once(&mut killed, &mut cx, black_box(1))))
    });

    // Half-open with the probe slot taken by a reservation that is never used: every
    // call meets a full half-open and goes to the fallback.
    let layer = CircuitBreakerLayer::builder()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1))
        .max_half_open_dwell(None)
        .build()
        .expect("valid");
    let handle = layer.handle();
    let layer = layer
        .with_classifier(|r: &Result<u64, Infallible>| {
            if matches!(r, Ok(0)) {
                Outcome::failure()
            } else {
                Outcome::Success
            }
        })
        .with_fallback(noop());
    let mut half_open = layer.layer(noop());
    call_once(&mut half_open, &mut cx, 0); // trips
    let mut holder = layer.layer(noop());
    assert!(holder.poll_ready(&mut cx).is_ready()); // takes the probe slot
    assert_eq!(handle.snapshot().probes_in_flight, 1);
    group.bench_function("half_open_probe_taken", |b| {
        b.iter(|| black_box(call_once(&mut half_open, &mut cx, black_box(1))))
    });
    drop(holder);
    group.finish();
}

criterion_group!(benches, overhead);
criterion_main!(benches);
