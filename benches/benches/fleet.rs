//! The fleet on loopback: how fast a kill reaches every replica, and what sharing a
//! breaker with the fleet costs a call (nothing: the figures with and without are the
//! same path).
//!
//! ```text
//! cargo bench -p tower-circuit-breaker-benches --bench fleet
//! ```
//!
//! It needs a real redis-server: the one in `TCB_REDIS_URL`, or one it starts from the
//! `redis-server` binary on a free loopback port.
//!
//! `propagation/*`: an operator's `Fleet::kill` (then `revive`, alternately) until the
//! last of [`REPLICAS`] (20) replicas, each its own `Fleet` with its own connections, has
//! flipped its kill switch (seen through its events). Criterion's figure is the time per flip;
//! the median and the 99th percentile over a separate run of samples are printed first.
//!
//! `per_call/*`: one `poll_ready` + `call` + one poll of the response future on a no-op
//! service, closed, driven by hand on one thread, as in the overhead bench's hand-polled
//! column: `fleet_off` is a breaker alone, `fleet_on` the same breaker with its kill switch and
//! itself shared with a live fleet (link up, hints read under `Follow`). Both killed,
//! too.

mod common;
#[path = "../../tests/fleet/server.rs"]
mod server;

use std::hint::black_box;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use tokio::runtime::Runtime;
use tokio::sync::broadcast;
use tower::{Layer, Service};
use tower_circuit_breaker::fleet::{Fleet, FleetEvent, HintPolicy};
use tower_circuit_breaker::{CircuitBreakerLayer, KillSwitch};

use common::{call_once, noop};

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// How many replicas a kill must reach.
const REPLICAS: usize = 20;

fn replica(url: &str, prefix: &str, name: &str) -> Fleet {
    Fleet::builder()
        .address(url)
        .prefix(prefix)
        .replica(name)
        .start()
        .expect("fleet settings")
}

struct Fleetwide {
    operator: Fleet,
    replicas: Vec<(Fleet, KillSwitch, broadcast::Receiver<FleetEvent>)>,
    killed: bool,
}

impl Fleetwide {
    async fn new(url: &str) -> Fleetwide {
        let prefix = server::unique_prefix("bench");
        let operator = replica(url, &prefix, "operator");
        operator
            .wait_for_link(Duration::from_secs(10))
            .await
            .unwrap();
        let mut replicas = Vec::new();
        for i in 0..REPLICAS {
            let fleet = replica(url, &prefix, &format!("replica-{i}"));
            let stop = KillSwitch::new();
            fleet.share_kill_switch("model", &stop).unwrap();
            fleet.wait_for_link(Duration::from_secs(10)).await.unwrap();
            fleet.sync().await.unwrap();
            let events = fleet.events();
            replicas.push((fleet, stop, events));
        }
        Fleetwide {
            operator,
            replicas,
            killed: false,
        }
    }

    /// Flips the switch for the fleet; how long until the last replica applied it.
    async fn flip(&mut self) -> Duration {
        self.killed = !self.killed;
        let started = Instant::now();
        if self.killed {
            self.operator.kill("model").await.unwrap();
        } else {
            self.operator.revive("model").await.unwrap();
        }
        for (_, stop, events) in &mut self.replicas {
            loop {
                match events.recv().await {
                    Ok(FleetEvent::KillSwitch { killed, .. }) if killed == self.killed => break,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(error) => panic!("events: {error}"),
                }
            }
            assert_eq!(stop.is_killed(), self.killed);
        }
        started.elapsed()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank]
}

fn propagation(c: &mut Criterion) {
    let runtime = runtime();
    let Some(redis) = runtime.block_on(server::Redis::get()) else {
        return;
    };
    let mut fleet = runtime.block_on(Fleetwide::new(&redis.url));

    let samples = 2000;
    let mut took: Vec<Duration> = runtime.block_on(async {
        let mut took = Vec::with_capacity(samples);
        for _ in 0..samples {
            took.push(fleet.flip().await);
        }
        took
    });
    took.sort_unstable();
    println!(
        "propagation/kill_to_last_of_{REPLICAS}_replicas: {samples} flips, median {:?}, p99 {:?}, max {:?}",
        percentile(&took, 0.5),
        percentile(&took, 0.99),
        took[took.len() - 1]
    );

    let mut group = c.benchmark_group("propagation");
    group.bench_function(format!("kill_to_last_of_{REPLICAS}_replicas"), |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += fleet.flip().await;
                }
                total
            })
        })
    });
    group.finish();
    drop(fleet);
    runtime.shutdown_timeout(Duration::from_secs(1));
    drop(redis);
}

fn breaker(kill: &KillSwitch) -> CircuitBreakerLayer {
    CircuitBreakerLayer::builder()
        .name("model")
        .kill_switch(kill.clone())
        .build()
        .unwrap()
}

fn bench_calls<S: Service<u64>>(group: &mut BenchmarkGroup<'_, WallTime>, name: &str, mut svc: S) {
    let mut cx = Context::from_waker(Waker::noop());
    group.bench_function(name, |b| {
        b.iter(|| black_box(call_once(&mut svc, &mut cx, black_box(1))))
    });
}

fn per_call(c: &mut Criterion) {
    let runtime = runtime();
    let Some(redis) = runtime.block_on(server::Redis::get()) else {
        return;
    };
    let prefix = server::unique_prefix("bench-per-call");
    let fleet = runtime.block_on(async {
        let fleet = replica(&redis.url, &prefix, "bench");
        fleet.wait_for_link(Duration::from_secs(10)).await.unwrap();
        fleet
    });

    let off_kill = KillSwitch::new();
    let off = breaker(&off_kill);
    let on_kill = KillSwitch::new();
    let on = breaker(&on_kill);
    fleet.share_kill_switch("model", &on_kill).unwrap();
    fleet
        .share_breaker(&on.handle(), HintPolicy::Follow)
        .unwrap();
    runtime.block_on(fleet.sync()).unwrap();
    assert!(fleet.link().is_up());

    let mut group = c.benchmark_group("per_call");
    bench_calls(&mut group, "fleet_off/closed", off.layer(noop()));
    bench_calls(&mut group, "fleet_on/closed", on.layer(noop()));
    off_kill.kill();
    runtime.block_on(fleet.kill("model")).unwrap();
    assert!(on_kill.is_killed());
    let off = off.with_fallback(noop()).layer(noop());
    bench_calls(&mut group, "fleet_off/killed", off);
    let on = on.with_fallback(noop()).layer(noop());
    bench_calls(&mut group, "fleet_on/killed", on);
    group.finish();
    drop(fleet);
    runtime.shutdown_timeout(Duration::from_secs(1));
    drop(redis);
}

criterion_group!(benches, per_call, propagation);
criterion_main!(benches);
