//! The `metrics` feature: every series, in both namings, read from a `DebuggingRecorder`
//! set as the test thread's local recorder (the tests run on a current-thread runtime;
//! the one on a multi-thread runtime installs a global recorder).
//!
//! A snapshot hands over each counter's increments since the last one and resets every
//! gauge to 0, so a gauge read after a change shows what the change wrote, and a gauge
//! nothing wrote since the last read shows 0.
#![cfg(feature = "metrics")]

use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use metrics::Unit;
use metrics_util::debugging::{DebuggingRecorder, Snapshotter};
use tower::{service_fn, BoxError, Service, ServiceExt};
use tower_circuit_breaker::config::RateWindow;
use tower_circuit_breaker::keyed::KeyedCircuitBreakerLayer;
use tower_circuit_breaker::metrics::{Metrics, Naming, Series};
use tower_circuit_breaker::{Builder, Cooldown, Event, Mode, State};

#[path = "common/recorded.rs"]
mod recorded;
use recorded::{read, record_here, Read, Reads, Value};

/// A request: succeed, fail, or succeed after a while.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Req {
    Ok,
    Fail,
    Slow(Duration),
}

async fn serve(req: Req) -> Result<&'static str, std::io::Error> {
    match req {
        Req::Ok => Ok("ok"),
        Req::Fail => Err(std::io::Error::other("refused")),
        Req::Slow(wait) => {
            tokio::time::sleep(wait).await;
            Ok("slow")
        }
    }
}

fn series<'m>(metrics: &'m Reads, name: &str, labels: &[&str]) -> &'m Read {
    let mut labels: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
    labels.sort();
    metrics
        .get(&(name.to_string(), labels.clone()))
        .unwrap_or_else(|| panic!("no series {name} {labels:?} in {metrics:#?}"))
}

fn count(metrics: &Reads, name: &str, labels: &[&str]) -> u64 {
    match series(metrics, name, labels).value {
        Value::Counter(n) => n,
        ref other => panic!("{name} is not a counter: {other:?}"),
    }
}

fn gauge(metrics: &Reads, name: &str, labels: &[&str]) -> f64 {
    match series(metrics, name, labels).value {
        Value::Gauge(g) => g,
        ref other => panic!("{name} is not a gauge: {other:?}"),
    }
}

fn recorded(metrics: &Reads, name: &str, labels: &[&str]) -> Vec<f64> {
    match &series(metrics, name, labels).value {
        Value::Histogram(values) => values.clone(),
        other => panic!("{name} is not a histogram: {other:?}"),
    }
}

const SHOWN: [&str; 6] = [
    "closed",
    "open",
    "half_open",
    "forced_open",
    "disabled",
    "observe_only",
];

/// The state gauge's six series for `breaker`, every one present: exactly one is 1, the
/// others 0. Returns the one that is 1.
fn shown(metrics: &Reads, breaker: &str) -> &'static str {
    let label = format!("breaker={breaker}");
    let values = SHOWN.map(|state| {
        gauge(
            metrics,
            "circuit_breaker_state",
            &[&label, &format!("state={state}")],
        )
    });
    let ones: Vec<&str> = SHOWN
        .iter()
        .zip(values)
        .filter(|(_, v)| *v == 1.0)
        .map(|(s, _)| *s)
        .collect();
    assert!(
        values.iter().all(|v| *v == 0.0 || *v == 1.0) && ones.len() == 1,
        "not exactly one state at 1 for {breaker}: {:?}",
        SHOWN.iter().zip(values).collect::<Vec<_>>()
    );
    ones[0]
}

/// Whether any state-gauge series of `breaker` was written since the last read (a
/// snapshot resets gauges to 0, so an unwritten gauge reads 0).
fn state_written(metrics: &Reads, breaker: &str) -> bool {
    let label = format!("breaker={breaker}");
    metrics.iter().any(|((name, labels), read)| {
        name == "circuit_breaker_state"
            && labels.contains(&label)
            && read.value != Value::Gauge(0.0)
    })
}

fn rate(metrics: &Reads, breaker: &str) -> f64 {
    gauge(
        metrics,
        "circuit_breaker_failure_rate",
        &[&format!("breaker={breaker}")],
    )
}

async fn send<S>(svc: &mut S, req: Req)
where
    S: Service<Req, Error = BoxError>,
{
    let _ = svc.ready().await.expect("always ready").call(req).await;
}

#[tokio::test]
async fn counts_successes_failures_rejections_and_transitions() -> Result<(), BoxError> {
    let (snapshotter, _local) = record_here();

    let layer = Builder::new()
        .name("tool")
        .failure_threshold(2)
        .cooldown(Cooldown::Calls(3))
        .metrics()
        .build()?;
    let handle = layer.handle();
    let mut svc = tower::Layer::layer(&layer, service_fn(serve));

    for req in [Req::Ok, Req::Ok, Req::Ok, Req::Fail, Req::Fail] {
        send(&mut svc, req).await;
    }
    assert_eq!(handle.state(), State::Open);
    // Two skipped while open, then the probe fails and re-opens.
    for req in [Req::Ok, Req::Ok, Req::Fail] {
        send(&mut svc, req).await;
    }
    assert_eq!(handle.state(), State::Open);
    handle.kill_switch().kill();
    send(&mut svc, Req::Ok).await;
    handle.kill_switch().revive();

    let m = read(&snapshotter);
    let calls = |outcome: &str| {
        count(
            &m,
            "circuit_breaker_calls_total",
            &["breaker=tool", &format!("outcome={outcome}")],
        )
    };
    assert_eq!((calls("success"), calls("failure")), (3, 3));
    let rejected = |reason: &str| {
        count(
            &m,
            "circuit_breaker_rejections_total",
            &["breaker=tool", &format!("reason={reason}")],
        )
    };
    assert_eq!((rejected("open"), rejected("killed")), (2, 1));
    let transitions = |from: &str, to: &str| {
        count(
            &m,
            "circuit_breaker_transitions_total",
            &["breaker=tool", &format!("from={from}"), &format!("to={to}")],
        )
    };
    assert_eq!(transitions("closed", "open"), 1);
    assert_eq!(transitions("open", "half_open"), 1);
    assert_eq!(transitions("half_open", "open"), 1);
    assert_eq!(shown(&m, "tool"), "open");
    Ok(())
}

#[tokio::test]
async fn every_series_is_described_with_its_unit_and_help() -> Result<(), BoxError> {
    for naming in [Naming::CircuitBreaker, Naming::Resilience4j] {
        let (snapshotter, _local) = record_here();

        let layer = Builder::new()
            .name("described")
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1))
            .metrics_with(Metrics::new().naming(naming).call_durations(true))
            .build()?;
        let mut svc = tower::Layer::layer(&layer, service_fn(serve));
        // A success, a failure that opens, a skip (cooldown 1: the next is the probe,
        // so force it open to skip).
        send(&mut svc, Req::Ok).await;
        send(&mut svc, Req::Fail).await;
        layer.handle().force_open();
        send(&mut svc, Req::Ok).await;

        let m = read(&snapshotter);
        for series in Series::ALL {
            let name = series.name(naming);
            let reads: Vec<&Read> = m
                .iter()
                .filter(|((n, _), _)| n == name)
                .map(|(_, r)| r)
                .collect();
            assert!(!reads.is_empty(), "{name} recorded");
            let unit = match series {
                Series::FailureRate | Series::SlowCallRate => Unit::Percent,
                Series::CallDuration => Unit::Seconds,
                _ => Unit::Count,
            };
            for read in reads {
                assert_eq!(read.unit, Some(unit), "{name}'s unit");
                let help = read.help.as_deref().unwrap_or("");
                assert!(help.len() > 20, "{name} has a help text: {help:?}");
            }
        }
    }
    Ok(())
}

#[tokio::test]
async fn call_durations_are_not_described_when_off() -> Result<(), BoxError> {
    let (snapshotter, _local) = record_here();

    let layer = Builder::new().name("untimed").metrics().build()?;
    let mut svc = tower::Layer::layer(&layer, service_fn(serve));
    send(&mut svc, Req::Ok).await;
    let m = read(&snapshotter);
    assert!(
        m.keys()
            .all(|(name, _)| name != "circuit_breaker_call_duration_seconds"),
        "{m:#?}"
    );
    Ok(())
}

#[tokio::test]
async fn state_gauge_starts_closed_or_in_the_starting_mode() -> Result<(), BoxError> {
    let (snapshotter, _local) = record_here();

    let _idle = Builder::new().name("idle").metrics().build()?;
    // The mode set after `metrics` still counts: the series start when the breaker is
    // built.
    let _off = Builder::new()
        .metrics()
        .name("off")
        .mode(Mode::Disabled)
        .build()?;
    let m = read(&snapshotter);
    assert_eq!(shown(&m, "idle"), "closed");
    assert_eq!(shown(&m, "off"), "disabled");
    assert_eq!((rate(&m, "idle"), rate(&m, "off")), (-1.0, -1.0));
    Ok(())
}

// Each check reads right after a change, which writes all six series: a series left at
// 1 by an earlier change would show.
#[tokio::test(start_paused = true)]
async fn exactly_one_state_is_shown_through_every_state_and_mode_change() -> Result<(), BoxError> {
    let (snapshotter, _local) = record_here();

    let layer = Builder::new()
        .name("model")
        .failure_threshold(2)
        .cooldown(Cooldown::Calls(2))
        .metrics()
        .build()?;
    let handle = layer.handle();
    let mut svc = tower::Layer::layer(&layer, service_fn(serve));
    let now = |snapshotter: &Snapshotter| shown(&read(snapshotter), "model");
    assert_eq!(now(&snapshotter), "closed");

    for _ in 0..2 {
        send(&mut svc, Req::Fail).await;
    }
    assert_eq!(now(&snapshotter), "open");
    send(&mut svc, Req::Ok).await; // skipped
    let probe = svc.ready().await?; // the probe is admitted: half-open
    assert_eq!(handle.state(), State::HalfOpen);
    assert_eq!(now(&snapshotter), "half_open");
    probe.call(Req::Ok).await?;
    assert_eq!(now(&snapshotter), "closed");

    handle.force_open();
    assert_eq!(now(&snapshotter), "forced_open");
    // Observe-only and disabled show the mode, whatever the state.
    handle.set_mode(Mode::ObserveOnly);
    assert_eq!(now(&snapshotter), "observe_only");
    handle.reset(); // a transition while observing: still observe-only
    assert_eq!(now(&snapshotter), "observe_only");
    for _ in 0..2 {
        send(&mut svc, Req::Fail).await; // opens, as if enabled
    }
    assert_eq!(handle.state(), State::Open);
    assert_eq!(now(&snapshotter), "observe_only");
    handle.set_mode(Mode::Disabled);
    assert_eq!(now(&snapshotter), "disabled");
    // Back to enabled: the state the breaker kept.
    handle.set_mode(Mode::Enabled);
    assert_eq!(now(&snapshotter), "open");

    // Setting the mode it has changes nothing, and writes nothing.
    handle.set_mode(Mode::Enabled);
    assert!(!state_written(&read(&snapshotter), "model"));

    // The kill switch is not a state: it writes nothing to the gauge, and its skips are
    // counted as rejections.
    handle.reset();
    assert_eq!(now(&snapshotter), "closed");
    handle.kill_switch().kill();
    send(&mut svc, Req::Ok).await;
    handle.kill_switch().revive();
    let m = read(&snapshotter);
    assert!(!state_written(&m, "model"), "{m:#?}");
    assert_eq!(
        count(
            &m,
            "circuit_breaker_rejections_total",
            &["breaker=model", "reason=killed"]
        ),
        1
    );
    Ok(())
}

#[tokio::test]
async fn rejections_count_every_skip_by_reason() -> Result<(), BoxError> {
    let (snapshotter, _local) = record_here();

    let layer = Builder::new()
        .name("skips")
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(5))
        .metrics()
        .build()?;
    let handle = layer.handle();
    let mut svc = tower::Layer::layer(&layer, service_fn(serve));
    send(&mut svc, Req::Fail).await; // opens
    for _ in 0..3 {
        send(&mut svc, Req::Ok).await; // open
    }
    handle.force_open();
    for _ in 0..2 {
        send(&mut svc, Req::Ok).await; // forced open
    }
    handle.kill_switch().kill();
    send(&mut svc, Req::Ok).await; // killed
    handle.kill_switch().revive();
    // A look that counts a skip counts here too; one that counts nothing does not.
    let _ = handle.advise();
    let _ = handle.peek();

    let m = read(&snapshotter);
    let skipped = |reason: &str| {
        count(
            &m,
            "circuit_breaker_rejections_total",
            &["breaker=skips", &format!("reason={reason}")],
        )
    };
    assert_eq!(
        (skipped("open"), skipped("forced_open"), skipped("killed")),
        (3, 3, 1)
    );
    let counts = handle.snapshot().counts;
    assert_eq!(
        (
            counts.skipped_open,
            counts.skipped_forced_open,
            counts.skipped_killed
        ),
        (3, 3, 1),
        "the counter agrees with the breaker's own counts"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn call_durations_are_recorded_by_outcome_only_when_asked() -> Result<(), BoxError> {
    let (snapshotter, _local) = record_here();

    let timed = Builder::new()
        .name("timed")
        .metrics_with(Metrics::new().call_durations(true))
        .build()?;
    // A slow-call rule times calls too, but without call durations nothing is recorded.
    let untimed = Builder::new()
        .name("untimed")
        .slow_call_threshold(Duration::from_millis(100))
        .metrics()
        .build()?;
    let mut timed = tower::Layer::layer(&timed, service_fn(serve));
    let mut untimed = tower::Layer::layer(&untimed, service_fn(serve));

    send(&mut timed, Req::Slow(Duration::from_millis(250))).await;
    send(&mut timed, Req::Slow(Duration::from_millis(30))).await;
    send(&mut timed, Req::Fail).await;
    send(&mut untimed, Req::Slow(Duration::from_millis(250))).await;

    let m = read(&snapshotter);
    let name = "circuit_breaker_call_duration_seconds";
    assert_eq!(
        recorded(&m, name, &["breaker=timed", "outcome=success"]),
        [0.25, 0.03]
    );
    // Paused time: a call that does not wait takes no time at all.
    assert_eq!(
        recorded(&m, name, &["breaker=timed", "outcome=failure"]),
        [0.0]
    );
    assert!(
        m.keys()
            .all(|(n, labels)| n != name || !labels.contains(&"breaker=untimed".to_string())),
        "{m:#?}"
    );
    // The slow call counted as a failure, and is counted once.
    assert_eq!(
        count(
            &m,
            "circuit_breaker_calls_total",
            &["breaker=untimed", "outcome=failure"]
        ),
        1
    );
    Ok(())
}

#[tokio::test]
async fn failure_rate_follows_a_rate_window() -> Result<(), BoxError> {
    let (snapshotter, _local) = record_here();

    let layer = Builder::new()
        .name("window")
        .failure_rate(0.5, RateWindow::Calls(4), 4)
        .cooldown(Cooldown::Calls(2))
        .metrics()
        .build()?;
    let mut svc = tower::Layer::layer(&layer, service_fn(serve));
    let now = |snapshotter: &Snapshotter| rate(&read(snapshotter), "window");
    assert_eq!(now(&snapshotter), -1.0);

    // Fewer than the minimum: -1.
    for req in [Req::Ok, Req::Fail, Req::Ok] {
        send(&mut svc, req).await;
        assert_eq!(now(&snapshotter), -1.0);
    }
    send(&mut svc, Req::Ok).await;
    assert_eq!(now(&snapshotter), 25.0);
    send(&mut svc, Req::Fail).await; // the window: F S S F
    assert_eq!(now(&snapshotter), 50.0);
    // That opened it, and the opening writes no reading: the one that opened it stays
    // (the read after a read shows 0 for a gauge nothing wrote).
    assert_eq!(layer.handle().state(), State::Open);
    send(&mut svc, Req::Ok).await; // skipped
    assert_eq!(now(&snapshotter), 0.0, "nothing written while open");
    send(&mut svc, Req::Ok).await; // the probe closes it: the count starts afresh
    assert_eq!(layer.handle().state(), State::Closed);
    assert_eq!(now(&snapshotter), -1.0);
    Ok(())
}

#[tokio::test]
async fn failure_rate_under_consecutive_failures_is_the_run_against_the_threshold(
) -> Result<(), BoxError> {
    let (snapshotter, _local) = record_here();

    let layer = Builder::new()
        .name("run")
        .failure_threshold(4)
        .metrics()
        .build()?;
    let mut svc = tower::Layer::layer(&layer, service_fn(serve));
    let now = |snapshotter: &Snapshotter| rate(&read(snapshotter), "run");
    assert_eq!(now(&snapshotter), -1.0);

    // A success with no failure counted is counted without the lock: 0.
    send(&mut svc, Req::Ok).await;
    assert_eq!(now(&snapshotter), 0.0);
    send(&mut svc, Req::Fail).await;
    assert_eq!(now(&snapshotter), 25.0);
    send(&mut svc, Req::Fail).await;
    assert_eq!(now(&snapshotter), 50.0);
    send(&mut svc, Req::Ok).await; // ends the run
    assert_eq!(now(&snapshotter), 0.0);
    for expected in [25.0, 50.0, 75.0, 100.0] {
        send(&mut svc, Req::Fail).await;
        assert_eq!(now(&snapshotter), expected);
    }
    assert_eq!(layer.handle().state(), State::Open);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn resilience4j_naming_emits_its_names_and_labels() -> Result<(), BoxError> {
    let (snapshotter, _local) = record_here();

    let layer = Builder::new()
        .name("backendA")
        .failure_threshold(2)
        .cooldown(Cooldown::Calls(100))
        .metrics_with(
            Metrics::new()
                .naming(Naming::Resilience4j)
                .call_durations(true),
        )
        .build()?;
    let handle = layer.handle();
    let mut svc = tower::Layer::layer(&layer, service_fn(serve));
    send(&mut svc, Req::Slow(Duration::from_millis(100))).await;
    send(&mut svc, Req::Fail).await;
    send(&mut svc, Req::Fail).await; // opens
    send(&mut svc, Req::Ok).await; // not permitted

    let m = read(&snapshotter);
    let name = "name=backendA";
    assert_eq!(
        count(
            &m,
            "resilience4j_circuitbreaker_calls_total",
            &[name, "kind=successful"]
        ),
        1
    );
    assert_eq!(
        count(
            &m,
            "resilience4j_circuitbreaker_calls_total",
            &[name, "kind=failed"]
        ),
        2
    );
    assert_eq!(
        recorded(
            &m,
            "resilience4j_circuitbreaker_calls_seconds",
            &[name, "kind=successful"]
        ),
        [0.1]
    );
    assert_eq!(
        count(
            &m,
            "resilience4j_circuitbreaker_not_permitted_calls_total",
            &[name, "kind=not_permitted", "reason=open"]
        ),
        1
    );
    assert_eq!(
        gauge(
            &m,
            "resilience4j_circuitbreaker_state",
            &[name, "state=open"]
        ),
        1.0
    );
    assert_eq!(
        gauge(&m, "resilience4j_circuitbreaker_failure_rate", &[name]),
        100.0
    );
    // No series under this crate's names.
    assert!(
        m.keys().all(|(n, _)| n.starts_with("resilience4j_")),
        "{m:#?}"
    );

    // Observe-only is resilience4j's metrics_only.
    handle.set_mode(Mode::ObserveOnly);
    let m = read(&snapshotter);
    let state = |s: &str| {
        gauge(
            &m,
            "resilience4j_circuitbreaker_state",
            &[name, &format!("state={s}")],
        )
    };
    assert_eq!((state("metrics_only"), state("open")), (1.0, 0.0));
    Ok(())
}

/// A breaker evicted from its keyed registry shows no state and no failure rate, so
/// that a dashboard counting breakers in each state counts the live ones, and an alert on
/// its old failure rate stops.
#[tokio::test(start_paused = true)]
async fn an_evicted_keys_series_show_no_state_and_no_failure_rate() -> Result<(), BoxError> {
    let (snapshotter, _local) = record_here();
    let layer = KeyedCircuitBreakerLayer::builder(
        Builder::new().name("tool").failure_threshold(2).metrics(),
        |req: &Req| *req,
    )
    .capacity(1)
    .build()?;
    let mut svc = tower::Layer::layer(&layer, service_fn(serve));
    send(&mut svc, Req::Fail).await; // tool[Fail]: closed, one failure of two
    send(&mut svc, Req::Ok).await; // tool[Ok] evicts tool[Fail]
    let registry = layer.handle();
    assert_eq!(registry.keys(), [Req::Ok]);
    assert_eq!(registry.evictions(), 1);
    let m = read(&snapshotter);
    for state in SHOWN {
        let label = format!("state={state}");
        assert_eq!(
            gauge(&m, "circuit_breaker_state", &["breaker=tool[Fail]", &label]),
            0.0,
            "{state}"
        );
    }
    assert_eq!(rate(&m, "tool[Fail]"), -1.0);
    assert_eq!(shown(&m, "tool[Ok]"), "closed");
    Ok(())
}

/// A registry tells an eviction once it has let go of the key (an observer may call back
/// in), so the key can come back, its new breaker made, before its old breaker's
/// `Evicted` reaches the metrics (here the observer before them waits for it): the live
/// breaker still shows exactly one state, and its failure rate.
#[test]
fn a_key_back_before_its_old_breakers_eviction_is_told_shows_its_new_breakers_state() {
    let (snapshotter, _local) = record_here();
    let (evicting, told) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = Mutex::new(released);
    let layer = KeyedCircuitBreakerLayer::builder(
        Builder::new()
            .name("back")
            .failure_threshold(2)
            .on_event(move |event| {
                if let Event::Evicted { name, .. } = event {
                    if *name == "back[Fail]" {
                        let _ = evicting.send(());
                        // Bounded: the test fails, rather than hangs, if never released.
                        let _ = released
                            .lock()
                            .unwrap()
                            .recv_timeout(Duration::from_secs(10));
                    }
                }
            })
            .metrics(),
        |req: &Req| *req,
    )
    .capacity(1)
    .build()
    .expect("valid");
    let registry = layer.handle();
    let svc = tower::Layer::layer(&layer, service_fn(serve));
    // Made here, so that their series are this thread's recorder's.
    let mut here = svc.clone();
    futures::executor::block_on(send(&mut here, Req::Fail)); // one failure of two
    let mut there = svc.clone();
    // Ok's first call evicts Fail's breaker, and tells its eviction on that thread.
    let evicting_thread =
        std::thread::spawn(move || futures::executor::block_on(send(&mut there, Req::Ok)));
    told.recv_timeout(Duration::from_secs(10))
        .expect("Fail's eviction is being told");
    assert!(registry.get(&Req::Fail).is_none());
    futures::executor::block_on(send(&mut here, Req::Fail)); // Fail is back
    release.send(()).expect("the observer waits");
    evicting_thread.join().expect("no panic");

    assert!(registry.get(&Req::Fail).is_some());
    let m = read(&snapshotter);
    assert_eq!(shown(&m, "back[Fail]"), "closed");
    assert_eq!(rate(&m, "back[Fail]"), 50.0, "its one failure of two");
}

#[tokio::test]
async fn a_keyed_registrys_breakers_get_series_of_their_own() -> Result<(), BoxError> {
    let (snapshotter, _local) = record_here();

    let layer = KeyedCircuitBreakerLayer::builder(
        Builder::new().name("tool").failure_threshold(1).metrics(),
        |req: &Req| *req,
    )
    .build()?;
    // Nothing for the template's own name: no breaker has it.
    assert!(read(&snapshotter).is_empty());
    let mut svc = tower::Layer::layer(&layer, service_fn(serve));
    send(&mut svc, Req::Ok).await;
    send(&mut svc, Req::Fail).await;

    let m = read(&snapshotter);
    assert_eq!(
        count(
            &m,
            "circuit_breaker_calls_total",
            &["breaker=tool[Ok]", "outcome=success"]
        ),
        1
    );
    assert_eq!(
        count(
            &m,
            "circuit_breaker_transitions_total",
            &["breaker=tool[Fail]", "from=closed", "to=open"]
        ),
        1
    );
    // Each key's breaker starts its gauge when it is made.
    assert_eq!(shown(&m, "tool[Ok]"), "closed");
    assert_eq!(shown(&m, "tool[Fail]"), "open");
    assert_eq!((rate(&m, "tool[Ok]"), rate(&m, "tool[Fail]")), (0.0, 100.0));
    assert!(m
        .keys()
        .all(|(_, labels)| !labels.contains(&"breaker=tool".to_string())));

    // A mode set on one key's handle shows on that key's gauge only.
    let registry = layer.handle();
    registry
        .get(&Req::Ok)
        .expect("made")
        .set_mode(Mode::Disabled);
    let m = read(&snapshotter);
    assert_eq!(shown(&m, "tool[Ok]"), "disabled");
    assert!(!state_written(&m, "tool[Fail]"));
    Ok(())
}

#[tokio::test]
async fn a_panicking_observer_does_not_stop_the_metrics() -> Result<(), BoxError> {
    let (snapshotter, _local) = record_here();

    let layer = Builder::new()
        .name("brave")
        .failure_threshold(1)
        .on_event(|_| panic!("an observer that always panics"))
        .metrics()
        .build()?;
    let mut svc = tower::Layer::layer(&layer, service_fn(serve));
    send(&mut svc, Req::Ok).await;
    send(&mut svc, Req::Fail).await;
    let m = read(&snapshotter);
    assert_eq!(
        count(
            &m,
            "circuit_breaker_calls_total",
            &["breaker=brave", "outcome=success"]
        ),
        1
    );
    assert_eq!(shown(&m, "brave"), "open");
    Ok(())
}

#[tokio::test]
async fn breakers_sharing_a_name_share_their_series() -> Result<(), BoxError> {
    let (snapshotter, _local) = record_here();

    let twin = || {
        Builder::new()
            .name("twin")
            .failure_threshold(1)
            .metrics()
            .build()
    };
    let (first, second) = (twin()?, twin()?);
    let mut first_svc = tower::Layer::layer(&first, service_fn(serve));
    let mut second_svc = tower::Layer::layer(&second, service_fn(serve));
    send(&mut first_svc, Req::Ok).await;
    send(&mut second_svc, Req::Ok).await;
    send(&mut first_svc, Req::Fail).await; // the first opens
    let m = read(&snapshotter);
    assert_eq!(
        count(
            &m,
            "circuit_breaker_calls_total",
            &["breaker=twin", "outcome=success"]
        ),
        2,
        "counters add up"
    );
    assert_eq!(
        shown(&m, "twin"),
        "open",
        "the gauge shows the last change, still one state"
    );
    assert_eq!(second.handle().state(), State::Closed);
    Ok(())
}

/// A recorder for the whole process, for the one test whose observers run on worker
/// threads; the other tests' local recorders take precedence on their own threads.
fn global_snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::set_global_recorder(recorder).expect("the only global recorder");
        snapshotter
    })
}

#[test]
fn mode_changes_racing_calls_leave_the_gauge_consistent() {
    let snapshotter = global_snapshotter();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    for round in 0..20u64 {
        let name = format!("raced-{round}");
        // Counts the changes of state and mode delivered, after the metrics' observer.
        let delivered = Arc::new((Mutex::new(0u64), Condvar::new()));
        let layer = {
            let delivered = delivered.clone();
            Builder::new()
                .name(name.clone())
                .failure_threshold(2)
                .cooldown(Cooldown::Calls(3))
                .metrics()
                .on_event(move |event| {
                    if matches!(event, Event::Transition(_) | Event::ModeChanged { .. }) {
                        *delivered.0.lock().unwrap() += 1;
                        delivered.1.notify_all();
                    }
                })
                .build()
                .expect("valid")
        };
        let handle = layer.handle();
        runtime.block_on(async {
            let callers: Vec<_> = (0..4u64)
                .map(|task| {
                    let mut svc = tower::Layer::layer(&layer, service_fn(serve));
                    tokio::spawn(async move {
                        for i in 0..200u64 {
                            let req = if (i + task + round) % 3 == 0 {
                                Req::Fail
                            } else {
                                Req::Ok
                            };
                            send(&mut svc, req).await;
                            if i % 16 == 0 {
                                tokio::task::yield_now().await;
                            }
                        }
                    })
                })
                .collect();
            // Meanwhile a person switches modes, forces open and resets, longer than the
            // calls last, and ends with a change of mode: the gauge must follow the last
            // change, whichever it was.
            let switcher = {
                let handle = handle.clone();
                tokio::spawn(async move {
                    let modes = [Mode::ObserveOnly, Mode::Disabled, Mode::Enabled];
                    for i in round as usize..round as usize + 1_000 {
                        if i % 7 == 0 {
                            handle.force_open();
                        } else if i % 5 == 0 {
                            handle.reset();
                        }
                        handle.set_mode(modes[i % 3]);
                        tokio::task::yield_now().await;
                    }
                })
            };
            for caller in callers {
                caller.await.expect("no panic");
            }
            switcher.await.expect("no panic");
        });
        let snapshot = handle.snapshot();
        let expected = match snapshot.mode {
            Mode::Disabled => "disabled",
            Mode::ObserveOnly => "observe_only",
            _ => snapshot.state.as_str(),
        };
        // When more events were queued than a caller delivers at a time, a task of the
        // runtime delivers the rest and may still be at it: wait until every change (one
        // per generation) has reached the observers.
        let (count, changed) = &*delivered;
        let (count, _) = changed
            .wait_timeout_while(count.lock().unwrap(), Duration::from_secs(10), |count| {
                *count < snapshot.generation
            })
            .unwrap();
        assert_eq!(
            *count, snapshot.generation,
            "round {round}: every change delivered once"
        );
        // Every series was written at least once (when built), and the last write of
        // each is what the snapshot holds.
        let m = read(snapshotter);
        assert_eq!(shown(&m, &name), expected, "round {round}");
    }
}
