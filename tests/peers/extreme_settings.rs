//! Extreme settings (gobreaker's zero and negative settings, Polly's `MaxValue`): the largest
//! and smallest thresholds, cooldowns and windows this crate accepts, and those it refuses.

use super::*;

// gobreaker with ReadyToTrip never true (a threshold no run reaches): u32::MAX never
// opens however many fail, and the reading stays below 100.
#[tokio::test(start_paused = true)]
async fn the_largest_threshold_never_trips_on_a_long_run() {
    let (rates, observer) = rate_recorder();
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(u32::MAX)
        .on_event(observer));
    fail_n(&mut svc, 1000).await;
    let s = handle.snapshot();
    assert_eq!((s.state, s.consecutive_failures), (State::Closed, 1000));
    let last = taken(&rates).pop().unwrap().unwrap();
    assert!(last > 0.0 && last < 100.0, "{last}");
}

// failsafe-go changing the threshold at runtime, at its extreme: relief of u32::MAX
// lowers any threshold to 1, never 0.
#[tokio::test(start_paused = true)]
async fn the_largest_relief_lowers_the_threshold_to_one() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(u32::MAX));
    handle.set_threshold_relief(u32::MAX);
    succeed_n(&mut svc, 3).await;
    assert_eq!(handle.state(), State::Closed, "successes never trip");
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
}

// gobreaker MaxRequests of the largest value: half-open admits many probes at once and
// does not close after a few successes.
#[tokio::test(start_paused = true)]
async fn the_largest_probe_limit_admits_many_at_once_and_does_not_close_early() {
    let (mut svc, handle, calls) = half_open_rig(u32::MAX);
    fail_n(&mut svc, 1).await;
    let mut running = Vec::new();
    for _ in 0..100 {
        running.push(start_waiting(&mut svc).await);
    }
    assert_eq!(handle.snapshot().probes_in_flight, 100);
    for (probe, tx) in running {
        tx.send(true).unwrap();
        assert_eq!(probe.await.unwrap().source(), Source::Probe);
    }
    assert_eq!(handle.state(), State::HalfOpen);
    assert_eq!(calls.load(Ordering::SeqCst), 101);
}

// gobreaker newNegativeDurationCB (a zero or negative timeout falls back to the
// default) against ours: a zero cooldown is refused when built (bad configuration
// gets a clear error at build time); a one-call and a one-nanosecond cooldown work.
#[tokio::test(start_paused = true)]
async fn the_shortest_cooldowns_work_and_zero_is_refused() {
    use tower_circuit_breaker::error::ConfigError;
    for zero in [Cooldown::Calls(0), Cooldown::Time(Duration::ZERO)] {
        assert_eq!(
            Builder::new().cooldown(zero).build().unwrap_err(),
            ConfigError::ZeroCooldown
        );
    }
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(NS)));
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    advance(NS).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// Polly break duration of zero for a result-derived wait (retry-after 0): the next call
// is the probe, and a second zero wait from the probe does the same.
#[tokio::test(start_paused = true)]
async fn a_zero_retry_after_from_a_probe_makes_the_next_call_the_probe_again() {
    let (mut svc, handle, _) = rig(Builder::new().cooldown(Cooldown::Time(secs(30))));
    let _ = got(&mut svc, Req::RetryAfter(Duration::ZERO)).await;
    assert_eq!(handle.state(), State::Open);
    assert_eq!(handle.peek(), Advice::Probe);
    let _ = got(&mut svc, Req::RetryAfter(Duration::ZERO)).await;
    let s = handle.snapshot();
    assert_eq!((s.state, s.cause), (State::Open, Some(Cause::ProbeFailed)));
    assert_eq!(handle.peek(), Advice::Probe);
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
}
