//! What callers and observers are told: what a call would get (`peek`, `advise`), each outcome
//! as what it was, the failure kept, rejections that name their breaker, settings refused
//! when built, and a registry's breakers.

use super::*;

// resilience4j CircuitBreakerUtilIsCallPermittedTest (isCallPermitted in each state) and
// gobreaker TestTwoStepCircuitBreaker (Allow): what a call now would get, in every state.
#[tokio::test(start_paused = true)]
async fn peek_says_what_a_call_would_get_in_every_state() {
    let kill = KillSwitch::new();
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(5)))
        .kill_switch(kill.clone()));
    assert_eq!(handle.peek(), Advice::Call);
    fail_n(&mut svc, 1).await;
    let skip_reason = |advice: Advice| match advice {
        Advice::Skip(skip) => Some(skip.reason()),
        _ => None,
    };
    assert_eq!(skip_reason(handle.peek()), Some(Reason::Open));
    advance(secs(5)).await;
    assert_eq!(handle.peek(), Advice::Probe);
    let (probe, tx) = start_waiting(&mut svc).await;
    assert_eq!(skip_reason(handle.peek()), Some(Reason::HalfOpenFull));
    kill.kill();
    assert_eq!(skip_reason(handle.peek()), Some(Reason::Killed));
    kill.revive();
    tx.send(true).unwrap();
    probe.await.unwrap();
    assert_eq!(handle.peek(), Advice::Call);
    handle.force_open();
    assert_eq!(skip_reason(handle.peek()), Some(Reason::ForcedOpen));
    handle.set_mode(Mode::Disabled);
    assert_eq!(handle.peek(), Advice::Call, "disabled: every call is made");
    handle.set_mode(Mode::ObserveOnly);
    assert_eq!(
        handle.peek(),
        Advice::Call,
        "observe-only: every call is made"
    );
    assert_eq!(
        handle.snapshot().counts.skipped(),
        0,
        "looking counts nothing"
    );
}

// gobreaker TestTwoStepCircuitBreaker: a caller that asks first and is turned away is a
// rejected request. Ours: `advise` counts it (so a cooldown in calls runs on), `peek`
// does not.
#[tokio::test(start_paused = true)]
async fn advise_counts_a_turned_away_attempt_and_peek_does_not() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(3)));
    fail_n(&mut svc, 1).await;
    for _ in 0..5 {
        assert!(matches!(handle.peek(), Advice::Skip(_)));
    }
    assert_eq!(handle.snapshot().counts.skipped_open, 0);
    let told = |advice: Advice| match advice {
        Advice::Skip(skip) => skip.next_probe().calls(),
        _ => None,
    };
    assert_eq!(told(handle.advise()), Some(2));
    assert_eq!(told(handle.advise()), Some(1));
    assert_eq!(handle.advise(), Advice::Probe);
    assert_eq!(handle.snapshot().counts.skipped_open, 2);
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
}

// Polly Should_report_cancellation_during_faulting_action_execution_when_user_delegate_observes_cancellationToken:
// a classifier may call the caller's own cancellation "ignored": it says nothing of the
// service.
#[tokio::test(start_paused = true)]
async fn a_cancellation_the_classifier_ignores_says_nothing_about_the_service() {
    let layer = Builder::new().failure_threshold(1).build().unwrap();
    let handle = layer.handle();
    let mut svc = layer
        .with_classifier(|result: &Result<(), io::Error>| match result {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Outcome::Ignored,
            Err(_) => Outcome::failure(),
            Ok(_) => Outcome::Success,
        })
        .layer(service_fn(|()| async {
            Err::<(), _>(io::Error::new(io::ErrorKind::Interrupted, "cancelled"))
        }));
    for _ in 0..5 {
        assert!(svc.ready().await.unwrap().call(()).await.is_err());
    }
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().counts.ignored, 5);
}

// gobreaker TestNewCircuitBreaker (the defaults), Polly Should_initialise_to_closed_state,
// Should_initialise_LastException_to_null_on_creation and CircuitStateControllerTests
// Ctor_EnsureDefaults: a new breaker is closed, has recorded nothing and says no probe is
// needed; with the defaults, three failures in a row open it for thirty seconds.
#[tokio::test(start_paused = true)]
async fn a_new_breaker_is_closed_with_nothing_recorded_and_opens_on_the_defaults() {
    let config = Builder::new().build_config().unwrap();
    assert_eq!(config.trip_policy(), TripPolicy::ConsecutiveFailures(3));
    assert_eq!(config.cooldown(), Cooldown::Time(secs(30)));
    assert_eq!(config.half_open_probes(), 1);
    assert_eq!(config.max_half_open_dwell(), Some(secs(60)));
    assert_eq!(config.mode(), Mode::Enabled);

    let (mut svc, handle, _) = rig(Builder::new());
    let snapshot = handle.snapshot();
    assert_eq!(
        (
            snapshot.state,
            snapshot.cause,
            snapshot.mode,
            snapshot.killed
        ),
        (State::Closed, None, Mode::Enabled, false)
    );
    assert_eq!(snapshot.last_failure, None);
    assert_eq!(snapshot.consecutive_failures, 0);
    assert_eq!(snapshot.next_probe, NextProbe::NotNeeded);
    assert_eq!((snapshot.generation, snapshot.counts.arrived), (0, 0));
    fail_n(&mut svc, 2).await;
    assert_eq!(handle.state(), State::Closed);
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
    assert_eq!(handle.snapshot().retry_after(), Some(secs(30)));
}

// resilience4j CircuitBreakerEventPublisherTest shouldConsumeIgnoredErrorEvent,
// shouldConsumeOnSuccessEvent, shouldConsumeOnErrorEvent and
// shouldConsumeCallNotPermittedEvent: each outcome is reported as what it was, and a
// call turned away as not permitted.
#[tokio::test(start_paused = true)]
async fn each_outcome_is_reported_as_what_it_was() {
    let (lines, observer) = recorder();
    let (mut svc, _, _) = rig(Builder::new().failure_threshold(2).on_event(observer));
    assert_eq!(got(&mut svc, Req::Ignore).await, Err("bad request".into()));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    fail_n(&mut svc, 2).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    assert_eq!(
        taken(&lines),
        vec![
            "recorded ignored",
            "recorded success",
            "recorded failure",
            "recorded failure",
            "transition closed->open tripped",
            "skipped open",
        ]
    );
}

// resilience4j CircuitBreakerResultHandlingTest
// shouldRecordSpecificStringResultAsAFailureAndAnyOtherAsSuccess (recordResult), gobreaker
// IsSuccessful and failsafe-go HandleResult(false): a response the classifier calls a
// failure counts as one and trips the breaker, though the service answered; other
// responses are successes.
#[tokio::test(start_paused = true)]
async fn a_response_the_classifier_calls_a_failure_trips_the_breaker() {
    let layer = Builder::new().failure_threshold(2).build().unwrap();
    let handle = layer.handle();
    let mut svc = layer
        .with_classifier(|result: &Result<&'static str, io::Error>| match result {
            Ok("busy") => Outcome::Failure(Failure::new("the service said it was busy")),
            Ok(_) => Outcome::Success,
            Err(_) => Outcome::failure(),
        })
        .layer(service_fn(|reply: &'static str| async move {
            Ok::<_, io::Error>(reply)
        }));
    for (reply, state) in [
        ("busy", State::Closed),
        ("fine", State::Closed),
        ("busy", State::Closed),
        ("busy", State::Open),
    ] {
        let answer = svc.ready().await.unwrap().call(reply).await.unwrap();
        assert_eq!(
            (answer.source(), answer.into_inner()),
            (Source::Service, reply)
        );
        assert_eq!(handle.state(), state, "after {reply}");
    }
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(
        snapshot.last_failure.unwrap().message.as_ref(),
        "the service said it was busy"
    );
    assert_eq!(
        (snapshot.counts.failures, snapshot.counts.successes),
        (3, 1)
    );
}

// Polly Should_set_LastException_to_last_raised_exception_when_breaking and
// Should_call_onbreak_with_the_last_raised_exception (and Should_call_onbreak_with_a_state_of_closed):
// the breaker opens from closed, and the failure that opened it is the last one
// recorded: observers hear it just before the transition, and the snapshot keeps it.
#[tokio::test(start_paused = true)]
async fn the_failure_that_opens_the_breaker_is_the_last_one_it_keeps() {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    let layer = Builder::new()
        .failure_threshold(2)
        .on_event(move |event: &Event<'_>| {
            let line = match event {
                Event::Recorded {
                    outcome: Outcome::Failure(failure),
                    ..
                } => format!("failure: {}", failure.message().unwrap_or("?")),
                Event::Transition(t) => format!("transition {}->{}", t.from, t.to),
                _ => return,
            };
            sink.lock().unwrap().push(line);
        })
        .build()
        .unwrap();
    let handle = layer.handle();
    let attempt = Arc::new(AtomicUsize::new(0));
    let mut svc = layer
        .with_classifier(|result: &Result<(), io::Error>| match result {
            Ok(()) => Outcome::Success,
            Err(e) => Outcome::Failure(Failure::new(e.to_string())),
        })
        .layer(service_fn(move |()| {
            let n = attempt.fetch_add(1, Ordering::SeqCst);
            async move { Err::<(), _>(io::Error::other(format!("attempt {n} failed"))) }
        }));
    for _ in 0..2 {
        assert!(svc.ready().await.unwrap().call(()).await.is_err());
    }
    assert_eq!(
        *lines.lock().unwrap(),
        vec![
            "failure: attempt 0 failed",
            "failure: attempt 1 failed",
            "transition closed->open",
        ]
    );
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(
        snapshot.last_failure.unwrap().message.as_ref(),
        "attempt 1 failed"
    );
}

// resilience4j shouldOpenAfterSlowCallRateThresholdExceeded with its ignored exception
// (NumberFormatException, however slow): an ignored error is neither slow nor a failure;
// a slow success is slow.
#[tokio::test(start_paused = true)]
async fn a_slow_ignored_error_is_still_ignored() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .slow_call_threshold(secs(4)));
    assert_eq!(
        got(&mut svc, Req::SlowIgnore(secs(10))).await,
        Err("bad request".into())
    );
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.counts.ignored, 1);
    assert_eq!(got(&mut svc, Req::Slow(secs(5))).await, Ok(Source::Service));
    assert_eq!(handle.state(), State::Open);
}

// Polly IssuesTests CircuitBreakerStateSharing_959: one breaker shared by calls of two
// result types (ints and strings), each with its own idea of a failure: their failures
// add up and open it for both; after the break both go through again.
#[tokio::test(start_paused = true)]
async fn services_of_different_types_behind_one_breaker_share_its_state() {
    let layer = Builder::new()
        .failure_rate(1.0, RateWindow::Time(secs(30)), 10)
        .cooldown(Cooldown::Time(secs(5)))
        .build()
        .unwrap();
    let handle = layer.handle();
    let mut numbers = layer
        .clone()
        .with_classifier(|result: &Result<i64, Infallible>| match result {
            Ok(-1) => Outcome::failure(),
            _ => Outcome::Success,
        })
        .layer(service_fn(|n: i64| async move { Ok::<_, Infallible>(n) }));
    let mut words = layer
        .with_classifier(|result: &Result<&'static str, Infallible>| match result {
            Ok("error") => Outcome::failure(),
            _ => Outcome::Success,
        })
        .layer(service_fn(|w: &'static str| async move {
            Ok::<_, Infallible>(w)
        }));
    for _ in 0..5 {
        numbers.ready().await.unwrap().call(-1).await.unwrap();
        words.ready().await.unwrap().call("error").await.unwrap();
    }
    assert_eq!(handle.state(), State::Open);
    let number = numbers.ready().await.unwrap().call(0).await.unwrap_err();
    let word = words
        .ready()
        .await
        .unwrap()
        .call("valid")
        .await
        .unwrap_err();
    for error in [number, word] {
        assert_eq!(
            error.downcast_ref::<Rejected>().map(Rejected::reason),
            Some(Reason::Open)
        );
    }
    advance(secs(5)).await;
    let answer = numbers.ready().await.unwrap().call(0).await.unwrap();
    assert_eq!((answer.source(), answer.into_inner()), (Source::Probe, 0));
    let answer = words.ready().await.unwrap().call("valid").await.unwrap();
    assert_eq!(
        (answer.source(), answer.into_inner()),
        (Source::Service, "valid")
    );
    assert_eq!(handle.state(), State::Closed);
}

// resilience4j CallNotPermittedExceptionTest shouldReturnCorrectMessageWhenStateIsOpen /
// ...ForcedOpen (and getCausingCircuitBreakerName): a rejection names its breaker and
// says why, whatever the name's length.
#[tokio::test(start_paused = true)]
async fn a_rejection_names_its_breaker_and_says_why() {
    for name in [
        "testName",
        "a-breaker-named-well-past-thirty-bytes-long",
        "ünïcødé-ñame",
    ] {
        let (mut svc, handle, _) = rig_rejecting(
            Builder::new()
                .name(name)
                .failure_threshold(1)
                .cooldown(Cooldown::Time(secs(30))),
        );
        fail_n(&mut svc, 1).await;
        let error = call(&mut svc, Req::Ok).await.unwrap_err();
        assert_eq!(error.downcast_ref::<Rejected>().unwrap().name(), name);
        assert!(
            error.to_string().starts_with(&format!(
                "circuit breaker `{name}` skipped the call: it is open"
            )),
            "{error}"
        );
        handle.force_open();
        let error = call(&mut svc, Req::Ok).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("circuit breaker `{name}` skipped the call: it was forced open")
        );
    }
}

// resilience4j CircuitBreakerRegistryTest shouldBeTheSameCircuitBreaker,
// shouldBeNotTheSameCircuitBreaker and InMemoryCircuitBreakerRegistryTest
// testCreateCircuitBreakerWithSharedConfiguration: a registry gives the same breaker for
// the same name and another for another name, each made from the shared settings. Ours:
// a keyed layer, one breaker per key; one key opening leaves the others closed.
#[tokio::test(start_paused = true)]
async fn a_registry_gives_one_breaker_per_key_each_with_the_shared_settings() {
    use tower_circuit_breaker::keyed::KeyedCircuitBreakerLayer;
    let layer = KeyedCircuitBreakerLayer::builder(
        Builder::new()
            .name("fetch")
            .failure_threshold(2)
            .cooldown(Cooldown::Time(secs(30))),
        |request: &(&'static str, bool)| request.0,
    )
    .name_keys_by_display()
    .build()
    .unwrap();
    let registry = layer.handle();
    let mut svc = layer.layer(service_fn(|(host, ok): (&'static str, bool)| async move {
        if ok {
            Ok(host)
        } else {
            Err(io::Error::other(FAILED))
        }
    }));
    for _ in 0..2 {
        assert!(svc
            .ready()
            .await
            .unwrap()
            .call(("down", false))
            .await
            .is_err());
    }
    let answer = svc.ready().await.unwrap().call(("up", true)).await.unwrap();
    assert_eq!(
        (answer.source(), answer.into_inner()),
        (Source::Service, "up")
    );
    let (down, up) = (registry.get(&"down").unwrap(), registry.get(&"up").unwrap());
    assert_eq!(down, registry.get(&"down").unwrap());
    assert_ne!(down, up);
    assert_eq!((down.name(), up.name()), ("fetch[down]", "fetch[up]"));
    assert_eq!((down.state(), up.state()), (State::Open, State::Closed));
    assert_eq!(down.snapshot().retry_after(), Some(secs(30)));
    let error = svc
        .ready()
        .await
        .unwrap()
        .call(("down", true))
        .await
        .unwrap_err();
    assert_eq!(
        error.downcast_ref::<Rejected>().map(Rejected::name),
        Some("fetch[down]")
    );
}

// resilience4j CircuitBreakerConfigTest (zeroFailureRateThresholdShouldFail,
// failureRateThresholdAboveHundredShouldFail, zeroWaitIntervalShouldFail,
// zeroSlowCallDurationThresholdShouldFail, zeroPermittedNumberOfCallsInHalfOpenStateShouldFail,
// zeroSlidingWindowSizeShouldFail), Polly AdvancedCircuitBreakerSpecs
// Should_throw_if_failure_threshold_is_zero / ..._greater_than_one and failsafe-go's
// builder: each bad setting is a typed error when the breaker is built, the peers'
// IllegalArgumentException. Where the peers clamp (resilience4j lowers a minimum above
// the window to the window) ours refuses, since such a breaker could never trip; where
// they refuse a minimum of 0 or 1 (resilience4j, Polly), ours reads it as 1.
#[test]
fn each_bad_setting_the_peers_refuse_is_a_typed_error_when_built() {
    use tower_circuit_breaker::error::ConfigError;
    let rate = |rate, window, minimum| Builder::new().failure_rate(rate, window, minimum);
    let calls = RateWindow::Calls(10);
    for (builder, error) in [
        (rate(0.0, calls, 5), ConfigError::InvalidFailureRate(0.0)),
        (rate(1.01, calls, 5), ConfigError::InvalidFailureRate(1.01)),
        (
            Builder::new().cooldown(Cooldown::Time(Duration::ZERO)),
            ConfigError::ZeroCooldown,
        ),
        (
            Builder::new().slow_call_threshold(Duration::ZERO),
            ConfigError::ZeroSlowCall,
        ),
        (
            Builder::new().half_open_probes(0),
            ConfigError::ZeroHalfOpenProbes,
        ),
        (rate(0.5, RateWindow::Calls(0), 0), ConfigError::EmptyWindow),
        (
            rate(0.5, RateWindow::Time(Duration::ZERO), 5),
            ConfigError::EmptyWindow,
        ),
        (
            rate(0.5, calls, 11),
            ConfigError::MinimumCallsAboveWindow {
                minimum_calls: 11,
                window: 10,
            },
        ),
        (
            Builder::new().failure_threshold(0),
            ConfigError::ZeroThreshold,
        ),
    ] {
        assert_eq!(builder.build().unwrap_err(), error);
    }
    for minimum in [0, 1] {
        assert!(rate(0.5, calls, minimum).build().is_ok());
    }
}

// resilience4j SlidingTimeWindowMetricsTest testRecordSlowSuccess and testSlowCallsPercentage
// (each outcome recorded with its duration; a slow success counts as slow, not failed):
// with a slow-call rule every call is timed, observers are told each call's duration to
// the nanosecond, and a slow success is recorded as the failure it counts as, saying why.
#[tokio::test(start_paused = true)]
async fn observers_are_told_how_long_each_call_took_and_why_a_slow_one_failed() {
    let heard = Arc::new(Mutex::new(Vec::new()));
    let sink = heard.clone();
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(5)
        .slow_call_threshold(secs(4))
        .on_event(move |event| {
            if let Event::Recorded {
                outcome, elapsed, ..
            } = event
            {
                let what = match outcome {
                    Outcome::Failure(failure) => failure.message().unwrap_or("?").to_string(),
                    other => format!("{other:?}"),
                };
                sink.lock().unwrap().push((what, *elapsed));
            }
        }));
    assert_eq!(
        got(&mut svc, Req::Slow(secs(10))).await,
        Ok(Source::Service)
    );
    assert_eq!(got(&mut svc, Req::Slow(secs(4))).await, Ok(Source::Service));
    assert_eq!(
        got(&mut svc, Req::SlowFail(secs(10))).await,
        Err(FAILED.into())
    );
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    let heard = heard.lock().unwrap().clone();
    assert_eq!(heard[0].1, Some(secs(10)));
    assert!(heard[0].0.starts_with("slow call"), "{:?}", heard[0]);
    assert_eq!(heard[1], ("Success".to_string(), Some(secs(4))));
    assert_eq!(heard[2].1, Some(secs(10)));
    assert!(
        !heard[2].0.starts_with("slow call"),
        "a slow failure is one failure"
    );
    assert_eq!(heard[3], ("Success".to_string(), Some(Duration::ZERO)));
    let counts = handle.snapshot().counts;
    assert_eq!((counts.failures, counts.successes), (2, 2));
}
