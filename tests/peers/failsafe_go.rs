//! Behaviours ported from failsafe-go (`test/circuitbreaker_test.go`, `circuitbreaker/*_test.go`):
//! count- and time-based thresholds, half-open's permits, and the state-change listeners.

use super::*;

// failsafe-go "with rejected retries": a retry policy outside the breaker (7 attempts)
// sees the breaker open after 3 failures; the service is called 3 times and the other 4
// attempts are rejected.
#[tokio::test(start_paused = true)]
async fn retries_outside_the_breaker_are_rejected_once_it_opens() {
    #[derive(Clone)]
    struct Attempts(usize);
    impl<Res, E> tower::retry::Policy<(), Res, E> for Attempts {
        type Future = std::future::Ready<()>;
        fn retry(&mut self, _: &mut (), result: &mut Result<Res, E>) -> Option<Self::Future> {
            if result.is_err() && self.0 > 1 {
                self.0 -= 1;
                Some(std::future::ready(()))
            } else {
                None
            }
        }
        fn clone_request(&mut self, _: &()) -> Option<()> {
            Some(())
        }
    }
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let layer = Builder::new().failure_threshold(3).build().unwrap();
    let handle = layer.handle();
    let mut svc = ServiceBuilder::new()
        .retry(Attempts(7))
        .layer(layer)
        .service(service_fn(move |()| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Err::<(), _>(io::Error::other(FAILED)) }
        }));
    let error = svc.ready().await.unwrap().call(()).await.unwrap_err();
    assert!(
        error.is::<Rejected>(),
        "the last attempt was rejected: {error}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let counts = handle.snapshot().counts;
    assert_eq!(
        (counts.made, counts.failures, counts.skipped_open),
        (3, 3, 4)
    );
}

// failsafe-go TestClosedStateFailureWithFailureThreshold /
// TestClosedStateSuccessWithFailureThreshold: the threshold is reached only by failures
// in a row; interleaved successes keep it closed.
#[tokio::test(start_paused = true)]
async fn interleaved_successes_keep_a_consecutive_threshold_from_tripping() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(2));
    for _ in 0..10 {
        fail_n(&mut svc, 1).await;
        assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    }
    assert_eq!(handle.state(), State::Closed);
    fail_n(&mut svc, 2).await;
    assert_eq!(handle.state(), State::Open);
}

// failsafe-go TestHalfOpenStateFailureWithDefaultConfig: the default (one probe) opens
// after a single failure in half-open.
#[tokio::test(start_paused = true)]
async fn with_the_defaults_one_failed_probe_reopens() {
    let (mut svc, handle, _) = rig(Builder::new());
    fail_n(&mut svc, 3).await;
    advance(secs(30)).await;
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
    assert_eq!(handle.snapshot().retry_after(), Some(secs(30)));
}

// failsafe-go "should support time based failure rate thresholding" (rate .5, at least
// 3, over 200 ms): outcomes roll off, and the rate over the fresh ones trips it.
#[tokio::test(start_paused = true)]
async fn a_time_based_rate_trips_only_on_the_outcomes_of_its_period() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Time(Duration::from_millis(200)), 3)
        .cooldown(Cooldown::Calls(1)));
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    advance(Duration::from_millis(210)).await; // the two roll off
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    advance(Duration::from_millis(50)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(handle.state(), State::Closed, "1 of 3");
    fail_n(&mut svc, 1).await; // 2 of 4
    assert_eq!(handle.state(), State::Open);
    // failsafe-go keeps counting a rate in half-open; ours re-opens on the failed probe
    // and closes on a successful one.
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// failsafe-go "support call OnOpen listener" / "should call OnClose listener".
#[tokio::test(start_paused = true)]
async fn listeners_hear_the_opening_and_the_closing() {
    let opened = Arc::new(AtomicUsize::new(0));
    let closed = Arc::new(AtomicUsize::new(0));
    let (o, c) = (opened.clone(), closed.clone());
    let (mut svc, _, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1))
        .on_transition(move |t| {
            if t.cause.opens() {
                o.fetch_add(1, Ordering::SeqCst);
            }
            if t.to == State::Closed {
                c.fetch_add(1, Ordering::SeqCst);
            }
        }));
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(
        (opened.load(Ordering::SeqCst), closed.load(Ordering::SeqCst)),
        (1, 1)
    );
}

// failsafe-go TestHalfOpenFailureWithSuccessThreshold (success threshold 3: a success,
// then a failure opens) and TestHalfOpenFailureWithSuccessAndFailureThresholds (two
// successes, then a failure opens; the failure threshold is ignored in half-open).
#[tokio::test(start_paused = true)]
async fn with_three_probes_a_failure_after_successes_reopens_at_once() {
    for successes in [1usize, 2] {
        let (mut svc, handle, _) = rig(Builder::new()
            .failure_threshold(2)
            .cooldown(Cooldown::Calls(1))
            .half_open_probes(3));
        let mut changes = handle.subscribe();
        fail_n(&mut svc, 2).await;
        for _ in 0..successes {
            assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
        }
        assert_eq!(handle.state(), State::HalfOpen);
        assert_eq!(got(&mut svc, Req::Fail).await, Err(FAILED.into()));
        assert_eq!(handle.state(), State::Open);
        let all = drain(&mut changes);
        assert_eq!(
            summary(&all),
            vec![
                (State::Closed, State::Open, Cause::Tripped),
                (State::Open, State::HalfOpen, Cause::CooldownElapsed),
                (State::HalfOpen, State::Open, Cause::ProbeFailed),
            ]
        );
        // The successes broke the run: the failed probe is one failure in a row.
        assert_eq!(all[2].consecutive_failures, 1);
        assert_eq!(handle.snapshot().consecutive_failures, 1);
    }
}

// failsafe-go TestHalfOpenSuccessWithSuccessThreshold, then a second half-open: the
// successes of a half-open that failed do not carry over to the next one.
#[tokio::test(start_paused = true)]
async fn successes_of_a_failed_half_open_do_not_carry_over_to_the_next() {
    let (mut svc, handle, _) = half_open_rig(3);
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(got(&mut svc, Req::Fail).await, Err(FAILED.into()));
    assert_eq!(handle.state(), State::Open);
    for _ in 0..2 {
        assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
        assert_eq!(handle.state(), State::HalfOpen);
    }
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// failsafe-go TestRemainingDelayInHalfOpenState: in half-open the remaining delay is
// zero while a probe may go; with every slot taken ours says the probes decide (no time).
#[tokio::test(start_paused = true)]
async fn half_open_with_a_free_slot_has_no_delay_left() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(1)))
        .half_open_probes(2));
    fail_n(&mut svc, 1).await;
    advance(secs(1)).await;
    let (first, _tx1) = start_waiting(&mut svc).await;
    let s = handle.snapshot();
    assert_eq!(s.state, State::HalfOpen);
    assert_eq!(s.retry_after(), Some(Duration::ZERO));
    assert_eq!(handle.peek(), Advice::Probe);
    let (second, _tx2) = start_waiting(&mut svc).await;
    assert_eq!(handle.snapshot().retry_after(), None);
    assert!(matches!(handle.peek(), Advice::Skip(s) if s.reason() == Reason::HalfOpenFull));
    drop((first, second));
}

// failsafe-go TestClosedStateFailureWithFailureThresholdRatio (2 of 3: success, failure,
// failure trips) ported to a count window of 3 with a minimum of 3.
#[tokio::test(start_paused = true)]
async fn two_failures_in_a_window_of_three_trip_at_two_thirds() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(2.0 / 3.0, RateWindow::Calls(3), 3)
        .cooldown(Cooldown::Calls(1)));
    succeed_n(&mut svc, 1).await;
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Closed);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
}

// failsafe-go TestClosedStateSuccessWithFailureThresholdRatio (failures, then successes
// push the share below the ratio): a full window whose share stays below keeps it closed.
#[tokio::test(start_paused = true)]
async fn a_share_below_the_ratio_never_trips_however_long_it_runs() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Calls(4), 4)
        .cooldown(Cooldown::Calls(1)));
    for _ in 0..50 {
        fail_n(&mut svc, 1).await;
        succeed_n(&mut svc, 3).await;
    }
    assert_eq!(handle.state(), State::Closed);
    let s = handle.snapshot();
    assert_eq!((s.window.failures, s.window.calls), (1, 4));
}

// failsafe-go "should call OnHalfOpen listener" and "OnStateChanged": every change of
// state is heard once, in order, by the transition callback.
#[tokio::test(start_paused = true)]
async fn on_transition_hears_every_change_once_in_order() {
    let heard = Arc::new(Mutex::new(Vec::new()));
    let sink = heard.clone();
    let (mut svc, _, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(10)))
        .on_transition(move |t| sink.lock().unwrap().push((t.from, t.to, t.cause))));
    fail_n(&mut svc, 1).await;
    advance(secs(10)).await;
    assert_eq!(got(&mut svc, Req::Fail).await, Err(FAILED.into()));
    advance(secs(10)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(
        taken(&heard),
        vec![
            (State::Closed, State::Open, Cause::Tripped),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Open, Cause::ProbeFailed),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Closed, Cause::ProbeSucceeded),
        ]
    );
}
