//! Per-call cost of a keyed breaker next to a single breaker, on a no-op service.
//!
//! `cargo bench -p tower-circuit-breaker-benches --bench keyed -- --warm-up-time 1
//! --measurement-time 2`. Each iteration is one `poll_ready` + `call` + one poll of the
//! response future with a no-op waker, as in the overhead bench's hand-polled column: no
//! runtime in the way, just the breaker.
//!
//! - `single_breaker`: a `CircuitBreakerLayer`, closed: the reference.
//! - `keyed_1_key`: a keyed layer with one live key.
//! - `keyed_10k_keys_same_key`: 10,000 live keys, every call on the same one.
//! - `keyed_10k_keys_round_robin`: 10,000 live keys, each call on the next one, so
//!   each call meets a breaker that is cold in the cache, as a client of 10,000 hosts
//!   would.
//! - `keyed_10k_keys_open_fallback`: 10,000 live keys, the called one forced open, a
//!   fallback answering.

use std::hint::black_box;
use std::task::{Context, Waker};

use criterion::{criterion_group, criterion_main, Criterion};
use tower::Layer;
use tower_circuit_breaker::keyed::KeyedCircuitBreakerLayer;
use tower_circuit_breaker::{Builder, CircuitBreakerLayer};

mod common;
use common::{call_once, noop};

const KEYS: u64 = 10_000;

fn keyed(c: &mut Criterion) {
    let mut cx = Context::from_waker(Waker::noop());
    let mut group = c.benchmark_group("keyed_per_call");

    let layer = CircuitBreakerLayer::builder().build().expect("valid");
    let mut single = layer.layer(noop());
    group.bench_function("single_breaker", |b| {
        b.iter(|| black_box(call_once(&mut single, &mut cx, black_box(1))))
    });

    let layer = KeyedCircuitBreakerLayer::builder(Builder::new(), |x: &u64| *x)
        .build()
        .expect("valid");
    let mut one_key = layer.layer(noop());
    call_once(&mut one_key, &mut cx, 1);
    group.bench_function("keyed_1_key", |b| {
        b.iter(|| black_box(call_once(&mut one_key, &mut cx, black_box(1))))
    });

    let layer = KeyedCircuitBreakerLayer::builder(Builder::new(), |x: &u64| *x)
        .capacity(KEYS as usize)
        .build()
        .expect("valid");
    let registry = layer.handle();
    let mut many = layer.with_fallback(noop()).layer(noop());
    for key in 0..KEYS {
        call_once(&mut many, &mut cx, key);
    }
    assert_eq!(registry.len(), KEYS as usize);
    group.bench_function("keyed_10k_keys_same_key", |b| {
        b.iter(|| black_box(call_once(&mut many, &mut cx, black_box(4_321))))
    });
    let mut next = 0;
    group.bench_function("keyed_10k_keys_round_robin", |b| {
        b.iter(|| {
            next = (next + 1) % KEYS;
            black_box(call_once(&mut many, &mut cx, black_box(next)))
        })
    });
    registry.get(&4_321).expect("live").force_open();
    group.bench_function("keyed_10k_keys_open_fallback", |b| {
        b.iter(|| black_box(call_once(&mut many, &mut cx, black_box(4_321))))
    });
    assert_eq!((registry.len(), registry.evictions()), (KEYS as usize, 0));
    group.finish();
}

criterion_group!(benches, keyed);
criterion_main!(benches);
