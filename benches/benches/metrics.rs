//! Per-call cost of the `metrics` feature on a closed breaker and a no-op service.
//!
//! `cargo bench -p tower-circuit-breaker-benches --bench metrics`. Each iteration is one
//! `poll_ready` + `call` + one poll of the response future with a no-op waker, as in the
//! overhead bench's hand-polled column.
//!
//! - `plain`: no observer.
//! - `observer_doing_nothing`: one observer that does nothing: the cost of reporting
//!   every success.
//! - `metrics_no_recorder`: `Builder::metrics()` with no recorder installed (the facade's
//!   handles do nothing).
//! - `metrics_call_durations_no_recorder`: the same with call durations: two clock reads
//!   per call.
//! - `metrics_debugging_recorder`: `Builder::metrics()` into metrics-util's
//!   `DebuggingRecorder` (a counter is an atomic add on a kept handle).

use std::hint::black_box;
use std::task::{Context, Waker};

use criterion::{criterion_group, criterion_main, Criterion};
use metrics_util::debugging::DebuggingRecorder;
use tower::Layer;
use tower_circuit_breaker::metrics::Metrics;
use tower_circuit_breaker::Builder;

mod common;
use common::{call_once, noop};

fn metrics_per_call(c: &mut Criterion) {
    let mut group = c.benchmark_group("metrics_per_call");
    let mut bench = |name: &str, builder: Builder| {
        let mut svc = builder.build().expect("valid").layer(noop());
        let mut cx = Context::from_waker(Waker::noop());
        group.bench_function(name, |b| {
            b.iter(|| black_box(call_once(&mut svc, &mut cx, black_box(1))))
        });
    };
    bench("plain", Builder::new());
    bench("observer_doing_nothing", Builder::new().on_event(|_| {}));
    bench("metrics_no_recorder", Builder::new().metrics());
    bench(
        "metrics_call_durations_no_recorder",
        Builder::new().metrics_with(Metrics::new().call_durations(true)),
    );
    let recorder = DebuggingRecorder::new();
    let _installed = metrics::set_default_local_recorder(&recorder);
    bench("metrics_debugging_recorder", Builder::new().metrics());
}

criterion_group!(benches, metrics_per_call);
criterion_main!(benches);
