//! The `metrics` feature: counters and the state gauge, read from a `DebuggingRecorder`
//! set as the test thread's local recorder (the tests run on a current-thread runtime).
#![cfg(feature = "metrics")]

use std::collections::BTreeMap;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tower::{service_fn, BoxError, Service, ServiceExt};
use tower_circuit_breaker::keyed::KeyedCircuitBreakerLayer;
use tower_circuit_breaker::{Builder, Cooldown, State};

/// A request: succeed or fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Req {
    Ok,
    Fail,
}

async fn serve(req: Req) -> Result<&'static str, std::io::Error> {
    match req {
        Req::Ok => Ok("ok"),
        Req::Fail => Err(std::io::Error::other("refused")),
    }
}

/// Every series in a snapshot (which resets counters and gauges to 0), by name and
/// sorted `label=value` pairs.
fn read(snapshotter: &Snapshotter) -> BTreeMap<(String, Vec<String>), f64> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let value = match value {
                DebugValue::Counter(n) => n as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(_) => unreachable!("no histograms"),
            };
            ((key.name().to_string(), labels), value)
        })
        .collect()
}

fn get(metrics: &BTreeMap<(String, Vec<String>), f64>, name: &str, labels: &[&str]) -> f64 {
    let mut labels: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
    labels.sort();
    metrics
        .get(&(name.to_string(), labels.clone()))
        .copied()
        .unwrap_or_else(|| panic!("no series {name} {labels:?} in {metrics:#?}"))
}

fn states(metrics: &BTreeMap<(String, Vec<String>), f64>, breaker: &str) -> [f64; 4] {
    let label = format!("breaker={breaker}");
    ["closed", "open", "half_open", "forced_open"].map(|state| {
        get(
            metrics,
            "circuit_breaker_state",
            &[&label, &format!("state={state}")],
        )
    })
}

#[tokio::test]
async fn counts_successes_failures_rejections_and_transitions() -> Result<(), BoxError> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let layer = Builder::new()
        .name("tool")
        .failure_threshold(2)
        .cooldown(Cooldown::Calls(3))
        .metrics()
        .build()?;
    let handle = layer.handle();
    let mut svc = tower::Layer::layer(&layer, service_fn(serve));

    for req in [Req::Ok, Req::Ok, Req::Ok, Req::Fail, Req::Fail] {
        let _ = svc.ready().await?.call(req).await;
    }
    assert_eq!(handle.state(), State::Open);
    // Two skipped while open, then the probe fails and re-opens.
    for req in [Req::Ok, Req::Ok, Req::Fail] {
        let _ = svc.ready().await?.call(req).await;
    }
    assert_eq!(handle.state(), State::Open);
    handle.kill_switch().kill();
    let _ = svc.ready().await?.call(Req::Ok).await;
    handle.kill_switch().revive();

    let m = read(&snapshotter);
    let calls = |outcome: &str| {
        get(
            &m,
            "circuit_breaker_calls_total",
            &["breaker=tool", &format!("outcome={outcome}")],
        )
    };
    assert_eq!((calls("success"), calls("failure")), (3.0, 3.0));
    let rejected = |reason: &str| {
        get(
            &m,
            "circuit_breaker_rejections_total",
            &["breaker=tool", &format!("reason={reason}")],
        )
    };
    assert_eq!((rejected("open"), rejected("killed")), (2.0, 1.0));
    let transitions = |from: &str, to: &str| {
        get(
            &m,
            "circuit_breaker_transitions_total",
            &["breaker=tool", &format!("from={from}"), &format!("to={to}")],
        )
    };
    assert_eq!(transitions("closed", "open"), 1.0);
    assert_eq!(transitions("open", "half_open"), 1.0);
    assert_eq!(transitions("half_open", "open"), 1.0);
    assert_eq!(states(&m, "tool"), [0.0, 1.0, 0.0, 0.0]);
    Ok(())
}

#[tokio::test]
async fn state_gauge_starts_closed_when_built() -> Result<(), BoxError> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let _layer = Builder::new().name("idle").metrics().build()?;
    assert_eq!(states(&read(&snapshotter), "idle"), [1.0, 0.0, 0.0, 0.0]);
    Ok(())
}

// A snapshot resets every gauge to 0, so each check below reads only after the state
// left was set to 1 and not read since: a series left at 1 would show.
#[tokio::test]
async fn state_gauge_zeroes_the_previous_state() -> Result<(), BoxError> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let layer = Builder::new()
        .name("model")
        .failure_threshold(2)
        .cooldown(Cooldown::Calls(2))
        .metrics()
        .build()?;
    let handle = layer.handle();
    let mut svc = tower::Layer::layer(&layer, service_fn(serve));

    // closed (set at build) -> open -> half_open, read once.
    for _ in 0..2 {
        let _ = svc.ready().await?.call(Req::Fail).await;
    }
    assert_eq!(handle.state(), State::Open);
    let _ = svc.ready().await?.call(Req::Ok).await; // skipped
    let probe = svc.ready().await?; // the probe is admitted: half-open
    assert_eq!(handle.state(), State::HalfOpen);
    assert_eq!(states(&read(&snapshotter), "model"), [0.0, 0.0, 1.0, 0.0]);

    // half_open -> closed.
    probe.call(Req::Ok).await?;
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(states(&read(&snapshotter), "model"), [1.0, 0.0, 0.0, 0.0]);

    // closed -> open -> half_open -> closed, read once.
    for req in [Req::Fail, Req::Fail, Req::Ok, Req::Ok] {
        let _ = svc.ready().await?.call(req).await;
    }
    assert_eq!(handle.state(), State::Closed);
    let m = read(&snapshotter);
    assert_eq!(states(&m, "model"), [1.0, 0.0, 0.0, 0.0]);
    let transitions = |from: &str, to: &str| {
        get(
            &m,
            "circuit_breaker_transitions_total",
            &[
                "breaker=model",
                &format!("from={from}"),
                &format!("to={to}"),
            ],
        )
    };
    assert_eq!(transitions("closed", "open"), 1.0);
    assert_eq!(transitions("open", "half_open"), 1.0);
    assert_eq!(transitions("half_open", "closed"), 1.0);

    // closed (set by the probe, unread) -> forced_open.
    let _ = svc.ready().await?.call(Req::Ok).await;
    handle.force_open();
    let _ = svc.ready().await?.call(Req::Ok).await;
    let m = read(&snapshotter);
    assert_eq!(states(&m, "model"), [0.0, 0.0, 0.0, 1.0]);
    assert_eq!(
        get(
            &m,
            "circuit_breaker_rejections_total",
            &["breaker=model", "reason=forced_open"]
        ),
        1.0
    );
    handle.reset();
    assert_eq!(states(&read(&snapshotter), "model"), [1.0, 0.0, 0.0, 0.0]);
    Ok(())
}

#[tokio::test]
async fn a_name_set_after_metrics_still_labels_every_series() -> Result<(), BoxError> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let layer = Builder::new()
        .failure_threshold(1)
        .metrics()
        .name("late")
        .build()?;
    let mut svc = tower::Layer::layer(&layer, service_fn(serve));
    let _ = svc.ready().await?.call(Req::Ok).await;
    let _ = svc.ready().await?.call(Req::Fail).await;

    let m = read(&snapshotter);
    let late = |outcome: &str| {
        get(
            &m,
            "circuit_breaker_calls_total",
            &["breaker=late", &format!("outcome={outcome}")],
        )
    };
    assert_eq!((late("success"), late("failure")), (1.0, 1.0));
    assert_eq!(states(&m, "late"), [0.0, 1.0, 0.0, 0.0]);
    Ok(())
}

#[tokio::test]
async fn keyed_breakers_are_labelled_with_their_own_names() -> Result<(), BoxError> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let layer = KeyedCircuitBreakerLayer::builder(
        Builder::new().name("tool").failure_threshold(1).metrics(),
        |req: &Req| *req,
    )
    .build()?;
    let mut svc = tower::Layer::layer(&layer, service_fn(serve));
    let _ = svc.ready().await?.call(Req::Ok).await;
    let _ = svc.ready().await?.call(Req::Fail).await;

    let m = read(&snapshotter);
    assert_eq!(
        get(
            &m,
            "circuit_breaker_calls_total",
            &["breaker=tool[Ok]", "outcome=success"]
        ),
        1.0
    );
    assert_eq!(
        get(
            &m,
            "circuit_breaker_transitions_total",
            &["breaker=tool[Fail]", "from=closed", "to=open"]
        ),
        1.0
    );
    assert_eq!(states(&m, "tool[Fail]"), [0.0, 1.0, 0.0, 0.0]);
    Ok(())
}
