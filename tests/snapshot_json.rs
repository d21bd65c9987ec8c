//! With `serde`, a breaker's `Snapshot` and everything in it serialize in the documented
//! shape, every time relative to the moment the snapshot was taken. Paused time.
#![cfg(feature = "serde")]

use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::advance;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_circuit_breaker::{
    Builder, CircuitBreakerLayer, Cooldown, Failure, NextProbe, Outcome, State,
};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// One call through `layer` that succeeds (`ok`) or fails with a 429 asking for 7 s.
async fn call(layer: &CircuitBreakerLayer, ok: bool) {
    let classify = move |_: &Result<(), std::io::Error>| {
        if ok {
            Outcome::Success
        } else {
            Outcome::Failure(Failure::new("429 Too Many Requests").retry_after(secs(7)))
        }
    };
    let mut svc = layer
        .clone()
        .with_classifier(classify)
        .layer(service_fn(|()| async { Ok::<_, std::io::Error>(()) }));
    let _ = svc.ready().await.unwrap().call(()).await;
}

#[tokio::test(start_paused = true)]
async fn a_snapshot_serializes_in_the_documented_shape_with_times_relative_to_when_it_was_taken() {
    let layer = Builder::new()
        .name("chat")
        .cooldown(Cooldown::Time(secs(30)))
        .build()
        .unwrap();
    let handle = layer.handle();

    let closed = serde_json::to_value(handle.snapshot()).unwrap();
    assert_eq!(
        closed,
        json!({
            "name": "chat",
            "state": "closed",
            "cause": null,
            "forced_open": null,
            "mode": "enabled",
            "killed": false,
            "advice": { "kind": "call" },
            "consecutive_failures": 0,
            "window": { "failures": 0, "calls": 0 },
            "probes_in_flight": 0,
            "last_failure": null,
            "next_probe": { "kind": "not_needed" },
            "retry_after_ms": null,
            "requested_wait_ms": null,
            "counts": {
                "arrived": 0, "made": 0, "probes": 0, "skipped": 0, "skipped_open": 0,
                "skipped_half_open_full": 0, "skipped_killed": 0, "skipped_forced_open": 0,
                "abandoned": 0, "successes": 0, "failures": 0, "ignored": 0,
                "cancelled": 0, "late": 0, "would_have_skipped": 0
            },
            "generation": 0
        })
    );

    call(&layer, true).await;
    call(&layer, false).await; // a 429 asking for 7 s opens it at once
    advance(Duration::from_millis(250)).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    let open = serde_json::to_value(&snapshot).unwrap();
    assert_eq!(open["state"], "open");
    assert_eq!(open["cause"], "retry_after");
    assert_eq!(open["advice"], json!({ "kind": "skip", "reason": "open" }));
    assert_eq!(open["consecutive_failures"], 1);
    assert_eq!(
        open["last_failure"],
        json!({ "message": "429 Too Many Requests", "ago_ms": 250 })
    );
    assert_eq!(
        open["next_probe"],
        json!({ "kind": "after", "calls": 1, "retry_after_ms": 6750 })
    );
    assert_eq!(open["retry_after_ms"], 6750);
    assert_eq!(
        open["requested_wait_ms"],
        Value::Null,
        "the breaker waits as asked"
    );
    assert_eq!(open["counts"]["made"], 2);
    assert_eq!(open["counts"]["failures"], 1);
    assert_eq!(open["generation"], 1);

    // Serialized later, the same snapshot says the same: its times are its own.
    advance(secs(5)).await;
    assert_eq!(serde_json::to_value(&snapshot).unwrap(), open);

    // Everything in it serializes on its own too, measured from now.
    let failure = snapshot.last_failure.clone().unwrap();
    assert_eq!(
        serde_json::to_value(&failure).unwrap(),
        json!({ "message": "429 Too Many Requests", "ago_ms": 5250 })
    );
    assert_eq!(
        serde_json::to_value(snapshot.next_probe).unwrap(),
        json!({ "kind": "after", "calls": 1, "retry_after_ms": 1750 })
    );
    assert_eq!(serde_json::to_value(snapshot.mode).unwrap(), "enabled");
    assert_eq!(
        serde_json::to_value(snapshot.counts).unwrap(),
        open["counts"]
    );
}

#[tokio::test(start_paused = true)]
async fn every_kind_of_next_probe_and_a_kill_serialize() {
    let layer = Builder::new()
        .name("chat")
        .cooldown(Cooldown::Calls(3))
        .failure_threshold(1)
        .open_on_retry_after(false)
        .build()
        .unwrap();
    let handle = layer.handle();
    let kinds = |probe: NextProbe| serde_json::to_value(probe).unwrap();
    assert_eq!(kinds(NextProbe::InFlight), json!({ "kind": "in_flight" }));
    assert_eq!(kinds(NextProbe::Manual), json!({ "kind": "manual" }));
    assert_eq!(
        kinds(NextProbe::After { calls: 3, at: None }),
        json!({ "kind": "after", "calls": 3, "retry_after_ms": null })
    );

    // A cooldown in calls with a wait in time (the 429's): both are told.
    call(&layer, false).await;
    let open = serde_json::to_value(handle.snapshot()).unwrap();
    assert_eq!(open["next_probe"]["calls"], 3);
    assert_eq!(open["next_probe"]["retry_after_ms"], 7000);

    handle.kill_switch().kill();
    let killed = serde_json::to_value(handle.snapshot()).unwrap();
    assert_eq!(killed["killed"], true);
    assert_eq!(killed["next_probe"], json!({ "kind": "manual" }));
    assert_eq!(killed["retry_after_ms"], Value::Null);
    assert_eq!(
        killed["advice"],
        json!({ "kind": "skip", "reason": "killed" })
    );

    handle.kill_switch().revive();
    handle.force_open();
    let forced = serde_json::to_value(handle.snapshot()).unwrap();
    assert_eq!(forced["state"], "forced_open");
    assert_eq!(forced["next_probe"], json!({ "kind": "manual" }));
    assert_eq!(forced["forced_open"], json!({ "until": "reset" }));
}

#[tokio::test(start_paused = true)]
async fn a_closed_breaker_under_a_kill_says_its_calls_are_skipped_and_a_timed_opening_shows_its_end(
) {
    let layer = Builder::new().name("chat").build().unwrap();
    let handle = layer.handle();

    handle.kill_switch().kill();
    handle.reset();
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.advice, handle.peek(), "what peek says");
    let killed = serde_json::to_value(&snapshot).unwrap();
    assert_eq!(killed["state"], "closed");
    assert_eq!(
        killed["advice"],
        json!({ "kind": "skip", "reason": "killed" })
    );
    handle.kill_switch().revive();

    handle.open_for(secs(30));
    advance(secs(10)).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.forced_until, Some(snapshot.taken_at + secs(20)));
    let held = serde_json::to_value(&snapshot).unwrap();
    assert_eq!(held["state"], "forced_open");
    assert_eq!(
        held["forced_open"],
        json!({ "until": "time", "ends_in_ms": 20_000 })
    );
    assert_eq!(
        held["advice"],
        json!({ "kind": "skip", "reason": "forced_open" })
    );
    // Its end is kept while the kill switch is on; the skips then end only by a person.
    handle.kill_switch().kill();
    let both = serde_json::to_value(handle.snapshot()).unwrap();
    assert_eq!(
        both["forced_open"],
        json!({ "until": "time", "ends_in_ms": 20_000 })
    );
    assert_eq!(
        both["advice"],
        json!({ "kind": "skip", "reason": "killed" })
    );
    handle.kill_switch().revive();
    // Once the time is over, the next call is the probe.
    advance(secs(20)).await;
    let over = serde_json::to_value(handle.snapshot()).unwrap();
    assert_eq!(
        over["forced_open"],
        json!({ "until": "time", "ends_in_ms": 0 })
    );
    assert_eq!(over["advice"], json!({ "kind": "probe" }));

    handle.force_open();
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.forced_until, None);
    assert_eq!(
        serde_json::to_value(&snapshot).unwrap()["forced_open"],
        json!({ "until": "reset" })
    );
}
