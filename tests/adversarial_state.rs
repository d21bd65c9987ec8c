//! An attacker's and a careful user's look at state that outlives a call: the keyed
//! registry under churn and races, the metrics against the snapshot's counts, snapshots
//! and their JSON at extreme values, the handle's answers against the calls that follow,
//! the expediter's report and tool offer against the breakers, and saved answers' ages.
//!
//! Time is tokio's paused clock wherever time matters.
#![cfg(all(feature = "metrics", feature = "serde"))]

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::advance;
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
use tower_circuit_breaker::error::Rejected;
use tower_circuit_breaker::expediter::{Expediter, NextTry, ToolSpec, Unusable};
use tower_circuit_breaker::keyed::KeyedCircuitBreakerLayer;
use tower_circuit_breaker::metrics::{Metrics, Naming};
use tower_circuit_breaker::saved::{stale_label, SaveLayer, SavedAnswers, Unavailable};
use tower_circuit_breaker::{
    Advice, Builder, CircuitBreakerLayer, Cooldown, Mode, NextProbe, Reason, Source, State,
};

#[path = "common/recorded.rs"]
mod recorded;
use recorded::{read, record_here, Reads};

type TestResult = Result<(), BoxError>;

// ---------------------------------------------------------------------------------
// Requests for keyed tests: a key, and what the service does with it.
// ---------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Act {
    Ok,
    Fail,
    /// Never answers.
    Hang,
    /// Answers (with success) once the gate gives a permit.
    Gate(Arc<Semaphore>, bool),
}

#[derive(Clone, Debug)]
struct Req {
    key: u32,
    act: Act,
}

fn req(key: u32, act: Act) -> Req {
    Req { key, act }
}

async fn serve(request: Req) -> Result<u32, std::io::Error> {
    match request.act {
        Act::Ok => Ok(request.key),
        Act::Fail => Err(std::io::Error::other("refused")),
        Act::Hang => std::future::pending().await,
        Act::Gate(gate, ok) => {
            let _permit = gate.acquire().await.expect("open gate");
            if ok {
                Ok(request.key)
            } else {
                Err(std::io::Error::other("refused after a wait"))
            }
        }
    }
}

fn by_key(request: &Req) -> u32 {
    request.key
}

async fn send<S>(svc: &mut S, request: Req) -> Result<S::Response, BoxError>
where
    S: Service<Req, Error = BoxError>,
{
    svc.ready().await?.call(request).await
}

// ---------------------------------------------------------------------------------
// The keyed registry.
// ---------------------------------------------------------------------------------

/// Keys that fail, go half-open, and whose probe is dropped (a client that hangs up)
/// are idle and, once their dwell limit passes, no better than open: the registry's
/// promise that "the overflow stops at twice the capacity" must hold for them too, or
/// keys from the network grow it without bound.
#[tokio::test(start_paused = true)]
async fn idle_half_open_keys_do_not_grow_the_registry_past_twice_its_capacity() -> TestResult {
    let layer = KeyedCircuitBreakerLayer::builder(
        Builder::new()
            .name("host")
            .failure_threshold(1)
            .cooldown(Cooldown::Time(Duration::from_secs(1)))
            .max_half_open_dwell(Some(Duration::from_secs(10))),
        by_key,
    )
    .capacity(2)
    .build()?;
    let registry = layer.handle();
    let mut svc = layer.layer(service_fn(serve));
    for key in 0..20 {
        assert!(send(&mut svc, req(key, Act::Fail)).await.is_err());
        advance(Duration::from_secs(2)).await;
        // The probe goes out and its caller hangs up.
        let probe = svc.ready().await?.call(req(key, Act::Hang));
        drop(probe);
    }
    // Long past every dwell limit: each of these breakers is open if anyone looks.
    advance(Duration::from_secs(60)).await;
    for key in 100..140 {
        assert!(send(&mut svc, req(key, Act::Fail)).await.is_err());
    }
    let bound = 2 * registry.capacity() + registry.capacity() / 16 + 1;
    assert!(
        registry.len() <= bound,
        "{} breakers held with capacity {} (bound {bound})",
        registry.len(),
        registry.capacity()
    );
    Ok(())
}

/// A call in flight keeps its key's breaker through any churn, open keys' evictions
/// included, and its outcome lands on the breaker the registry still holds.
#[tokio::test(start_paused = true)]
async fn a_call_in_flight_keeps_its_breaker_through_churn_and_its_outcome_counts() -> TestResult {
    let layer =
        KeyedCircuitBreakerLayer::builder(Builder::new().name("host").failure_threshold(1), by_key)
            .capacity(1)
            .build()?;
    let registry = layer.handle();
    let mut svc = layer.layer(service_fn(serve));
    let gate = Arc::new(Semaphore::new(0));
    let in_flight = svc
        .ready()
        .await?
        .call(req(7, Act::Gate(gate.clone(), false)));
    let in_flight = tokio::spawn(in_flight);
    tokio::task::yield_now().await;
    for key in 100..160 {
        assert!(send(&mut svc, req(key, Act::Fail)).await.is_err());
    }
    assert!(
        registry.keys().contains(&7),
        "the key in flight was evicted"
    );
    gate.add_permits(1);
    assert!(in_flight.await?.is_err());
    let seven = registry.get(&7).expect("still held");
    let snapshot = seven.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!((snapshot.counts.made, snapshot.counts.failures), (1, 1));
    assert!(registry.len() <= 2 * registry.capacity() + 1);
    Ok(())
}

/// A key that comes back after its breaker was evicted gets a fresh breaker: closed,
/// nothing counted, the template's settings; while the kill switch is on, it is killed
/// like every other key.
#[tokio::test(start_paused = true)]
async fn a_recreated_key_starts_afresh_but_obeys_the_shared_kill_switch() -> TestResult {
    let layer =
        KeyedCircuitBreakerLayer::builder(Builder::new().name("host").failure_threshold(3), by_key)
            .capacity(1)
            .build()?;
    let registry = layer.handle();
    let mut svc = layer.layer(service_fn(serve));
    for _ in 0..2 {
        assert!(send(&mut svc, req(1, Act::Fail)).await.is_err());
    }
    registry.get(&1).expect("made").set_mode(Mode::ObserveOnly);
    send(&mut svc, req(2, Act::Ok)).await?; // evicts 1
    assert!(registry.get(&1).is_none());
    send(&mut svc, req(1, Act::Ok)).await?; // 1 again, evicting 2
    let one = registry.get(&1).expect("made again");
    let snapshot = one.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.mode, Mode::Enabled);
    assert_eq!(snapshot.consecutive_failures, 0);
    assert_eq!(snapshot.counts.arrived, 1);
    assert!(snapshot.last_failure.is_none());
    drop(one);

    registry.kill_switch().kill();
    let error = send(&mut svc, req(3, Act::Ok)).await.unwrap_err();
    let rejected = error.downcast_ref::<Rejected>().expect("rejected");
    assert_eq!(rejected.reason(), Reason::Killed);
    assert_eq!(rejected.name(), "host[3]");
    registry.kill_switch().revive();
    assert_eq!(
        send(&mut svc, req(3, Act::Ok)).await?.source(),
        Source::Service
    );
    Ok(())
}

/// A transition stream of an evicted breaker ends (as the docs say), rather than
/// hanging forever on a breaker nobody can reach.
#[tokio::test(start_paused = true)]
async fn a_subscription_on_an_evicted_breaker_ends() -> TestResult {
    let layer = KeyedCircuitBreakerLayer::builder(Builder::new().name("host"), by_key)
        .capacity(1)
        .build()?;
    let registry = layer.handle();
    let mut svc = layer.layer(service_fn(serve));
    send(&mut svc, req(1, Act::Ok)).await?;
    let mut transitions = registry.get(&1).expect("made").subscribe();
    send(&mut svc, req(2, Act::Ok)).await?; // evicts 1: the handle was dropped
    assert!(registry.get(&1).is_none());
    let ended = tokio::time::timeout(Duration::from_secs(5), transitions.recv()).await;
    assert!(
        matches!(
            ended,
            Ok(Err(tokio::sync::broadcast::error::RecvError::Closed))
        ),
        "{ended:?}"
    );
    Ok(())
}

/// Many threads racing to create the same keys get one breaker per key: every call
/// is counted on it, none on a breaker made and thrown away.
#[test]
fn keys_racing_creation_on_many_threads_share_one_breaker_each() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .expect("runtime");
    for round in 0..10u32 {
        let layer =
            KeyedCircuitBreakerLayer::builder(Builder::new().name(format!("race{round}")), by_key)
                .capacity(1_000)
                .build()
                .expect("valid");
        let registry = layer.handle();
        let svc = layer.layer(service_fn(serve));
        const TASKS: u32 = 8;
        const KEYS: u32 = 64;
        runtime.block_on(async {
            let mut tasks = Vec::new();
            for task in 0..TASKS {
                let mut svc = svc.clone();
                tasks.push(tokio::spawn(async move {
                    for i in 0..KEYS {
                        let key = (i * 7 + task * 13) % KEYS;
                        send(&mut svc, req(key, Act::Ok)).await.expect("closed");
                    }
                }));
            }
            for task in tasks {
                task.await.expect("no panic");
            }
        });
        assert_eq!(registry.len(), KEYS as usize);
        assert_eq!(registry.keys().len(), KEYS as usize);
        for key in 0..KEYS {
            let counts = registry.get(&key).expect("made").snapshot().counts;
            assert_eq!(
                counts.successes,
                u64::from(TASKS),
                "key {key} round {round}"
            );
        }
    }
}

/// Racing creation under churn (a registry far smaller than its keys): no panic, the
/// registry's count agrees with the keys it holds, and with every call over it comes
/// back within its capacity as closed idle breakers are evicted.
#[test]
fn churn_racing_on_many_threads_keeps_len_honest() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .expect("runtime");
    let layer = KeyedCircuitBreakerLayer::builder(Builder::new().name("churn"), by_key)
        .capacity(16)
        .build()
        .expect("valid");
    let registry = layer.handle();
    let svc = layer.layer(service_fn(serve));
    runtime.block_on(async {
        let mut tasks = Vec::new();
        for task in 0..8u32 {
            let mut svc = svc.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..2_000u32 {
                    send(&mut svc, req((i * 31 + task) % 500, Act::Ok))
                        .await
                        .expect("closed");
                }
            }));
        }
        for task in tasks {
            task.await.expect("no panic");
        }
    });
    assert_eq!(registry.len(), registry.keys().len());
    // A few more keys, one at a time, bring it back within capacity.
    runtime.block_on(async {
        let mut svc = svc.clone();
        for key in 1_000..1_040 {
            send(&mut svc, req(key, Act::Ok)).await.expect("closed");
        }
    });
    assert!(
        registry.len() <= registry.capacity(),
        "{} > {}",
        registry.len(),
        registry.capacity()
    );
    assert_eq!(registry.len(), registry.keys().len());
}

// ---------------------------------------------------------------------------------
// Metrics against the snapshot's counts.
// ---------------------------------------------------------------------------------

/// The sum of every series named `name` whose labels include all of `labels`.
fn total(m: &Reads, name: &str, labels: &[&str]) -> u64 {
    m.iter()
        .filter(|((n, l), _)| n == name && labels.iter().all(|x| l.iter().any(|y| y == x)))
        .map(|(_, read)| read.value.number() as u64)
        .sum()
}

/// After calls, skips, probes, advised skips, observe-only shadow calls, late results
/// and cancelled calls, the metrics' counters say what the snapshot's counts say, in
/// both namings.
#[tokio::test(start_paused = true)]
async fn metrics_counters_equal_the_snapshots_counts_after_every_kind_of_call() -> TestResult {
    for naming in [Naming::CircuitBreaker, Naming::Resilience4j] {
        let (snapshotter, _local) = record_here();
        let layer = Builder::new()
            .name("mix")
            .failure_threshold(2)
            .cooldown(Cooldown::Calls(2))
            .metrics_with(Metrics::new().naming(naming))
            .build()?;
        let handle = layer.handle();
        let mut svc = layer.layer(service_fn(serve));
        let ok = || req(0, Act::Ok);
        let fail = || req(0, Act::Fail);
        let _ = send(&mut svc, ok()).await;
        let _ = send(&mut svc, fail()).await;
        let _ = send(&mut svc, fail()).await; // open
        assert!(matches!(handle.advise(), Advice::Skip(_))); // a skip, counted
        let _ = send(&mut svc, fail()).await; // the probe fails
        let _ = send(&mut svc, ok()).await; // skipped
        let _ = send(&mut svc, ok()).await; // probe succeeds: closed
                                            // Cancelled: a call dropped while in flight.
        let call = svc.ready().await?.call(req(0, Act::Hang));
        drop(call);
        // Late: a call in flight when the breaker is forced open.
        let gate = Arc::new(Semaphore::new(0));
        let late = tokio::spawn(
            svc.ready()
                .await?
                .call(req(0, Act::Gate(gate.clone(), false))),
        );
        tokio::task::yield_now().await;
        handle.force_open();
        let _ = send(&mut svc, ok()).await; // skipped, forced open
        gate.add_permits(1);
        let _ = late.await?;
        handle.reset();
        // Observe-only: trips, then shadow calls.
        handle.set_mode(Mode::ObserveOnly);
        let _ = send(&mut svc, fail()).await;
        let _ = send(&mut svc, fail()).await;
        let _ = send(&mut svc, ok()).await;
        let _ = send(&mut svc, fail()).await;
        handle.set_mode(Mode::Enabled);
        handle.kill_switch().kill();
        let _ = send(&mut svc, ok()).await;
        handle.kill_switch().revive();

        let counts = handle.snapshot().counts;
        assert!(counts.late >= 1 && counts.cancelled >= 1, "{counts:?}");
        assert!(counts.would_have_skipped >= 1, "{counts:?}");
        let m = read(&snapshotter);
        let (calls, rejections, outcome) = match naming {
            Naming::CircuitBreaker => (
                "circuit_breaker_calls_total",
                "circuit_breaker_rejections_total",
                ["outcome=success", "outcome=failure", "outcome=ignored"],
            ),
            _ => (
                "resilience4j_circuitbreaker_calls_total",
                "resilience4j_circuitbreaker_not_permitted_calls_total",
                ["kind=successful", "kind=failed", "kind=ignored"],
            ),
        };
        let name = match naming {
            Naming::CircuitBreaker => "breaker=mix",
            _ => "name=mix",
        };
        assert_eq!(
            total(&m, calls, &[name, outcome[0]]),
            counts.successes,
            "{naming:?}"
        );
        assert_eq!(
            total(&m, calls, &[name, outcome[1]]),
            counts.failures,
            "{naming:?}"
        );
        assert_eq!(
            total(&m, calls, &[name, outcome[2]]),
            counts.ignored,
            "{naming:?}"
        );
        for (reason, skipped) in [
            ("reason=open", counts.skipped_open),
            ("reason=half_open_full", counts.skipped_half_open_full),
            ("reason=killed", counts.skipped_killed),
            ("reason=forced_open", counts.skipped_forced_open),
        ] {
            assert_eq!(
                total(&m, rejections, &[name, reason]),
                skipped,
                "{naming:?} {reason}"
            );
        }
    }
    Ok(())
}

/// A disabled breaker counts nothing, the docs say; its kill switch still skips
/// calls. The rejections counter and the snapshot's skip counts must agree on it.
#[tokio::test]
async fn metrics_and_snapshot_agree_on_killed_calls_in_disabled_mode() -> TestResult {
    let (snapshotter, _local) = record_here();
    let layer = Builder::new()
        .name("off")
        .mode(Mode::Disabled)
        .metrics()
        .build()?;
    let handle = layer.handle();
    let mut svc = layer.layer(service_fn(serve));
    handle.kill_switch().kill();
    let error = send(&mut svc, req(0, Act::Ok)).await.unwrap_err();
    assert_eq!(
        error.downcast_ref::<Rejected>().expect("rejected").reason(),
        Reason::Killed
    );
    let counts = handle.snapshot().counts;
    let m = read(&snapshotter);
    let metric = total(
        &m,
        "circuit_breaker_rejections_total",
        &["breaker=off", "reason=killed"],
    );
    assert_eq!(
        metric, counts.skipped_killed,
        "metrics count {metric} killed calls, the snapshot {}",
        counts.skipped_killed
    );
    Ok(())
}

/// The state gauge of a key's breaker that is evicted and then made again shows the
/// new breaker's state (closed), not the eviction's zeros.
#[tokio::test(start_paused = true)]
async fn a_recreated_keys_gauge_shows_closed_after_its_eviction() -> TestResult {
    let (snapshotter, _local) = record_here();
    let layer = KeyedCircuitBreakerLayer::builder(
        Builder::new().name("tool").failure_threshold(5).metrics(),
        by_key,
    )
    .capacity(1)
    .build()?;
    let mut svc = layer.layer(service_fn(serve));
    let _ = send(&mut svc, req(1, Act::Fail)).await;
    send(&mut svc, req(2, Act::Ok)).await?; // evicts 1
    send(&mut svc, req(1, Act::Ok)).await?; // 1 again, evicting 2
    let m = read(&snapshotter);
    let state = |breaker: &str, state: &str| {
        m.get(&(
            "circuit_breaker_state".to_string(),
            vec![format!("breaker={breaker}"), format!("state={state}")],
        ))
        .map(|read| read.value.number())
    };
    assert_eq!(state("tool[1]", "closed"), Some(1.0));
    assert_eq!(state("tool[2]", "closed"), Some(0.0));
    let rate = m
        .get(&(
            "circuit_breaker_failure_rate".to_string(),
            vec!["breaker=tool[1]".to_string()],
        ))
        .map(|read| read.value.number());
    assert_eq!(rate, Some(0.0), "the success after re-creation: 0 of 5");
    Ok(())
}

// ---------------------------------------------------------------------------------
// Snapshots and their JSON.
// ---------------------------------------------------------------------------------

/// Every documented field is present, with the documented spelling.
#[tokio::test(start_paused = true)]
async fn snapshot_json_has_every_documented_field() -> TestResult {
    let layer = Builder::new()
        .name("chat")
        .failure_threshold(1)
        .cooldown(Cooldown::Time(Duration::from_secs(7)))
        .build()?;
    let handle = layer.handle();
    let mut svc = layer.layer(service_fn(serve));
    let _ = send(&mut svc, req(0, Act::Fail)).await;
    advance(Duration::from_millis(250)).await;
    let json = serde_json::to_value(handle.snapshot())?;
    for field in [
        "name",
        "state",
        "cause",
        "mode",
        "killed",
        "consecutive_failures",
        "window",
        "probes_in_flight",
        "last_failure",
        "next_probe",
        "retry_after_ms",
        "requested_wait_ms",
        "counts",
        "generation",
    ] {
        assert!(json.get(field).is_some(), "no {field} in {json}");
    }
    for field in [
        "arrived",
        "made",
        "probes",
        "skipped",
        "skipped_open",
        "skipped_half_open_full",
        "skipped_killed",
        "skipped_forced_open",
        "abandoned",
        "successes",
        "failures",
        "ignored",
        "cancelled",
        "late",
        "would_have_skipped",
    ] {
        assert!(json["counts"].get(field).is_some(), "no counts.{field}");
    }
    assert_eq!(json["state"], "open");
    assert_eq!(json["cause"], "tripped");
    assert_eq!(json["last_failure"]["ago_ms"], 250);
    assert_eq!(json["retry_after_ms"], 6_750);
    assert_eq!(json["next_probe"]["retry_after_ms"], 6_750);
    assert_eq!(json["next_probe"]["kind"], "after");
    assert_eq!(json["window"]["failures"], 0);
    Ok(())
}

/// A paused clock centuries on, a hold of `Duration::MAX`, a wait of a nanosecond:
/// nothing panics, waits round up, ages round down.
#[tokio::test(start_paused = true)]
async fn snapshot_json_survives_extreme_times() -> TestResult {
    const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);
    let layer = Builder::new()
        .name("far")
        .failure_threshold(1)
        .cooldown(Cooldown::Time(Duration::from_nanos(1_500_000_001)))
        .build()?;
    let handle = layer.handle();
    let mut svc = layer.layer(service_fn(serve));
    advance(YEAR * 150).await;
    let _ = send(&mut svc, req(0, Act::Fail)).await;
    let json = serde_json::to_value(handle.snapshot())?;
    assert_eq!(json["retry_after_ms"], 1_501, "a wait rounds up");
    advance(Duration::from_nanos(1_500_000_000)).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.retry_after(), Some(Duration::from_nanos(1)));
    let json = serde_json::to_value(&snapshot)?;
    assert_eq!(
        json["retry_after_ms"], 1,
        "one nanosecond left is 1 ms, not 0"
    );
    assert_eq!(json["last_failure"]["ago_ms"], 1_500, "an age rounds down");
    assert!(matches!(handle.peek(), Advice::Skip(_)), "not yet");

    handle.open_for(Duration::MAX);
    let json = serde_json::to_value(handle.snapshot())?;
    let held = json["retry_after_ms"].as_u64().expect("a time");
    assert!(held >= (YEAR * 99).as_millis() as u64, "{held}");
    advance(YEAR * 120).await;
    let snapshot = handle.snapshot();
    let json = serde_json::to_value(&snapshot)?;
    assert_eq!(json["retry_after_ms"], 0);
    assert_eq!(handle.peek(), Advice::Probe);
    let ago = json["last_failure"]["ago_ms"].as_u64().expect("an age");
    assert!(ago >= (YEAR * 120).as_millis() as u64);
    Ok(())
}

/// Names with quotes, backslashes, control characters and non-ASCII survive the JSON.
#[tokio::test]
async fn snapshot_json_keeps_names_with_odd_characters() -> TestResult {
    for name in [
        "a\"b",
        "back\\slash",
        "line\nbreak\ttab\u{0}nul",
        "ünïcödé 🦀",
        "</script>",
    ] {
        let layer = Builder::new().name(name).build()?;
        let json = serde_json::to_string(&layer.handle().snapshot())?;
        let value: serde_json::Value = serde_json::from_str(&json)?;
        assert_eq!(value["name"], name);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// The handle's answers against the calls that follow.
// ---------------------------------------------------------------------------------

/// The time the snapshot and a skip report is never earlier than the probe's real
/// time, with backoff and jitter: one nanosecond before it the call is still skipped,
/// at it the call is the probe.
#[tokio::test(start_paused = true)]
async fn retry_after_is_never_earlier_than_the_probe_with_jitter_and_backoff() -> TestResult {
    for seed in 0..20u64 {
        let layer = Builder::new()
            .name("jit")
            .failure_threshold(1)
            .cooldown(Cooldown::Time(Duration::from_millis(997)))
            .backoff(tower_circuit_breaker::Backoff::exponential(
                2.0,
                Cooldown::Time(Duration::from_secs(60)),
            ))
            .jitter(0.5)
            .jitter_seed(seed)
            .build()?;
        let handle = layer.handle();
        let mut svc = layer.layer(service_fn(serve));
        let _ = send(&mut svc, req(0, Act::Fail)).await;
        for round in 0..4 {
            let snapshot = handle.snapshot();
            let wait = snapshot.retry_after().expect("a time cooldown");
            let error = send(&mut svc, req(0, Act::Ok)).await.unwrap_err();
            let rejected = error.downcast_ref::<Rejected>().expect("skipped");
            let told = rejected
                .retry_after_from(tokio::time::Instant::now().into_std())
                .expect("a time");
            assert_eq!(told, wait, "seed {seed} round {round}");
            advance(wait - Duration::from_nanos(1)).await;
            assert!(
                matches!(handle.peek(), Advice::Skip(_)),
                "seed {seed} round {round}: a probe before the time told"
            );
            let error = send(&mut svc, req(0, Act::Ok)).await.unwrap_err();
            assert!(error.is::<Rejected>(), "seed {seed} round {round}");
            advance(Duration::from_nanos(1)).await;
            assert_eq!(handle.peek(), Advice::Probe, "seed {seed} round {round}");
            let _ = send(&mut svc, req(0, Act::Fail)).await; // the probe fails: longer
        }
    }
    Ok(())
}

/// With a cooldown in calls, the snapshot's "probe on the Nth call" is exact, peek
/// agrees with the call that follows, and calls skipped by the kill switch count as
/// steps as the docs say.
#[tokio::test]
async fn next_probe_in_calls_is_exact_and_peek_matches_the_next_call() -> TestResult {
    let layer = Builder::new()
        .name("calls")
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(5))
        .build()?;
    let handle = layer.handle();
    let mut svc = layer.layer(service_fn(serve));
    let _ = send(&mut svc, req(0, Act::Fail)).await;
    // Two killed calls take steps.
    handle.kill_switch().kill();
    assert_eq!(handle.snapshot().next_probe, NextProbe::Manual);
    let _ = send(&mut svc, req(0, Act::Ok)).await;
    let _ = send(&mut svc, req(0, Act::Ok)).await;
    handle.kill_switch().revive();
    // And one advised skip.
    assert!(matches!(handle.advise(), Advice::Skip(_)));
    loop {
        let calls = handle.snapshot().next_probe.calls().expect("scheduled");
        let peeked = handle.peek();
        let answer = send(&mut svc, req(0, Act::Ok)).await;
        if calls == 1 {
            assert_eq!(peeked, Advice::Probe);
            assert_eq!(answer?.source(), Source::Probe);
            break;
        }
        assert!(matches!(peeked, Advice::Skip(_)), "{calls} calls left");
        assert!(answer.is_err(), "{calls} calls left, yet the call was made");
    }
    let counts = handle.snapshot().counts;
    assert_eq!(counts.skipped_killed, 2);
    // 5 calls of cooldown: two killed, one advised, one skipped, then the probe.
    assert_eq!(counts.skipped_open, 2);
    assert_eq!(counts.probes, 1);
    Ok(())
}

// ---------------------------------------------------------------------------------
// The expediter's report and offer against the handles.
// ---------------------------------------------------------------------------------

fn tool(name: &str) -> ToolSpec {
    ToolSpec::new(name)
        .provides(&format!("{name}'s work"))
        .fallback(&format!("ask the user for {name}'s work"))
}

/// Every statement of the offer and the report about each tool agrees with its
/// breaker's handle: open, forced open, held, killed and closed tools.
#[tokio::test(start_paused = true)]
async fn report_and_offer_agree_with_every_tools_handle() -> TestResult {
    let breaker = || {
        Builder::new()
            .failure_threshold(2)
            .cooldown(Cooldown::Time(Duration::from_secs(30)))
    };
    let expediter = Expediter::builder()
        .tools(["ok", "open", "forced", "held"].map(|n| tool(n).breaker(breaker())))
        .failure_budget(100)
        .build()?;
    let mut open = expediter.layer("open")?.layer(service_fn(|_: ()| async {
        Err::<(), _>(std::io::Error::other("refused"))
    }));
    for _ in 0..2 {
        let _ = expediter
            .default_run()
            .execute("open", &mut open, ())
            .await?;
    }
    expediter
        .handle("forced")?
        .open_for(Duration::from_millis(1_500));
    let until = tokio::time::Instant::now().into_std() + Duration::from_secs(90);
    assert!(expediter.handle("held")?.hold_open_until(until));
    advance(Duration::from_millis(500)).await;

    let offer = expediter.offered_tools();
    let report = expediter.report();
    for name in ["ok", "open", "forced", "held"] {
        let handle = expediter.handle(name)?;
        let snapshot = handle.snapshot();
        let offered = offer.offered.iter().any(|t| &**t == name);
        assert_eq!(offered, snapshot.state == State::Closed, "{name}");
        let row = report.tools.iter().find(|t| &*t.name == name).expect("row");
        assert_eq!(row.state, snapshot.state, "{name}");
        assert_eq!(row.consecutive_failures, snapshot.consecutive_failures);
        if let NextTry::Probe { not_before, .. } = &row.next_try {
            let truth = snapshot.retry_after().expect("in time");
            assert!(
                not_before.unwrap_or_default() <= truth + Duration::from_millis(1)
                    && not_before.unwrap_or_default() + Duration::from_millis(1) >= truth,
                "{name}: report says {not_before:?}, breaker {truth:?}"
            );
        }
    }
    let withheld = |name: &str| {
        offer
            .withheld
            .iter()
            .find(|w| &*w.name == name)
            .expect(name)
    };
    assert_eq!(withheld("open").unusable, Unusable::Open);
    assert!(
        withheld("open").line.contains("not before 30s"),
        "{}",
        withheld("open").line
    );
    assert_eq!(withheld("forced").unusable, Unusable::ForcedOpen);
    assert!(
        withheld("forced").line.contains("not before 1s"),
        "{}",
        withheld("forced").line
    );
    assert_eq!(withheld("held").unusable, Unusable::Held);
    assert!(
        withheld("held").line.contains("not before 90s"),
        "{}",
        withheld("held").line
    );

    // Killed: nothing is offered, and nothing invites a retry before a revive; what
    // follows the revive is what each breaker said before the kill.
    let before = expediter.report();
    expediter.kill_switch().kill();
    let offer = expediter.offered_tools();
    assert!(offer.offered.is_empty(), "{offer}");
    for (w, row) in offer.withheld.iter().zip(&before.tools) {
        assert_eq!(w.unusable, Unusable::Killed, "{}", w.line);
        let once_revived = match row.next_try.clone() {
            NextTry::Now => NextTry::WhenRevived,
            then => NextTry::WhenRevivedThen {
                then: Box::new(then),
            },
        };
        assert_eq!(w.next_try, once_revived, "{}", w.line);
        assert!(!w.line.contains("now"), "{}", w.line);
    }
    let text = expediter.report().to_string();
    assert!(!text.contains("| CLOSED"), "{text}");
    Ok(())
}

/// A tool whose half-open probe is under way is not offered, and the report does not
/// claim it is closed.
#[tokio::test(start_paused = true)]
async fn a_tool_with_its_probe_under_way_is_not_offered() -> TestResult {
    let expediter = Expediter::builder()
        .tool(
            tool("t").breaker(
                Builder::new()
                    .failure_threshold(1)
                    .cooldown(Cooldown::Time(Duration::from_secs(1))),
            ),
        )
        .failure_budget(100)
        .build()?;
    let gate = Arc::new(Semaphore::new(0));
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = expediter.layer("t")?.layer(service_fn({
        let (gate, calls) = (gate.clone(), calls.clone());
        move |_: ()| {
            let (gate, n) = (gate.clone(), calls.fetch_add(1, SeqCst));
            async move {
                if n == 0 {
                    return Err(std::io::Error::other("refused"));
                }
                let _permit = gate.acquire().await.expect("open");
                Ok(())
            }
        }
    }));
    let mut first = svc.clone();
    let _ = expediter.default_run().execute("t", &mut first, ()).await?;
    advance(Duration::from_secs(2)).await;
    let probe = {
        let expediter = expediter.clone();
        let mut svc = svc.clone();
        tokio::spawn(async move {
            expediter
                .default_run()
                .execute("t", &mut svc, ())
                .await
                .map(|_| ())
        })
    };
    tokio::task::yield_now().await;
    assert_eq!(expediter.handle("t")?.state(), State::HalfOpen);
    let offer = expediter.offered_tools();
    assert!(offer.offered.is_empty(), "{offer}");
    let row = &expediter.report().tools[0];
    assert_eq!(row.state, State::HalfOpen);
    assert_eq!(row.next_try, NextTry::ProbeUnderWay);
    gate.add_permits(1);
    probe.await??;
    assert_eq!(expediter.offered_tools().offered, [Arc::<str>::from("t")]);
    Ok(())
}

// ---------------------------------------------------------------------------------
// Saved answers: freshness labels and ages.
// ---------------------------------------------------------------------------------

/// A saved answer is served with its true age up to the age limit, and never past it.
#[tokio::test(start_paused = true)]
async fn a_saved_answer_is_served_with_its_age_up_to_the_limit_and_never_after() -> TestResult {
    let saved: SavedAnswers<u32, String> = SavedAnswers::new(10, Duration::from_secs(60))?;
    let save = SaveLayer::new(saved.clone(), |r: &Req| Some(r.key));
    let fallback = save.fallback(
        |answer: String, age: Duration| format!("{} {answer}", stale_label(age)),
        |unavailable: Unavailable| unavailable.to_string(),
    );
    let breaker = CircuitBreakerLayer::builder()
        .name("m")
        .failure_threshold(1)
        .cooldown(Cooldown::Time(Duration::from_secs(3600)))
        .build()?;
    let mut svc = tower::ServiceBuilder::new()
        .layer(save)
        .layer(breaker.with_fallback_context(fallback))
        .service(service_fn(|r: Req| async move {
            serve(r).await.map(|n| n.to_string())
        }));
    let up = svc.ready().await?.call(req(1, Act::Ok)).await?;
    assert_eq!(up.source(), Source::Service);
    advance(Duration::from_millis(59_999)).await;
    let _ = svc.ready().await?.call(req(2, Act::Fail)).await; // opens
    advance(Duration::from_millis(1)).await; // exactly 60 s old
    let answer = svc.ready().await?.call(req(1, Act::Ok)).await?;
    assert_eq!(answer.source(), Source::Fallback(Reason::Open));
    assert_eq!(
        answer.into_inner(),
        "[STALE DATA — saved 1m 0s ago, may not reflect current state] 1"
    );
    advance(Duration::from_nanos(1)).await;
    let answer = svc.ready().await?.call(req(1, Act::Ok)).await?.into_inner();
    assert!(answer.starts_with("m is unavailable"), "{answer}");
    // Opened at 59.999 s for an hour: 3,599.999 s left, rounded up.
    assert!(answer.ends_with("retry after 1h 0m 0s"), "{answer}");
    Ok(())
}

/// Looking at a half-open breaker whose dwell limit has passed, in every mode and with
/// the kill switch on or off, answers (the handle re-opens it and looks again) and
/// agrees with the call that follows.
#[tokio::test(start_paused = true)]
async fn peek_and_advise_answer_past_a_half_open_dwell_limit_in_every_mode() -> TestResult {
    for mode in [Mode::Enabled, Mode::ObserveOnly, Mode::Disabled] {
        for killed in [false, true] {
            let layer = Builder::new()
                .name("dwell")
                .failure_threshold(1)
                .cooldown(Cooldown::Time(Duration::from_secs(60)))
                .max_half_open_dwell(Some(Duration::from_secs(5)))
                .build()?;
            let handle = layer.handle();
            let mut svc = layer.layer(service_fn(serve));
            let _ = send(&mut svc, req(0, Act::Fail)).await;
            advance(Duration::from_secs(61)).await;
            let probe = tokio::spawn(svc.ready().await?.call(req(0, Act::Hang)));
            tokio::task::yield_now().await;
            assert_eq!(handle.snapshot().state, State::HalfOpen);
            handle.set_mode(mode);
            if killed {
                handle.kill_switch().kill();
            }
            advance(Duration::from_secs(10)).await;
            let (tx, rx) = std::sync::mpsc::channel();
            let looking = handle.clone();
            let runtime = tokio::runtime::Handle::current();
            std::thread::spawn(move || {
                let _entered = runtime.enter();
                let _ = tx.send((looking.peek(), looking.advise()));
            });
            let answers = rx
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("{mode:?} killed={killed}: peek did not return"));
            let snapshot = handle.snapshot();
            assert_ne!(snapshot.state, State::HalfOpen, "{mode:?} killed={killed}");
            if killed || mode == Mode::Enabled {
                assert!(
                    matches!(answers.0, Advice::Skip(_)),
                    "{mode:?} {killed}: {answers:?}"
                );
            }
            probe.abort();
        }
    }
    Ok(())
}
