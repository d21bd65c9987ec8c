//! Acts of a person: the kill switch, isolating and closing by hand, and changes of mode
//! (enabled, observe-only, disabled), as callers and observers see them.

use super::*;

// The README's replay (the kill switch on at steps 9 and 10): killed calls are
// skipped and still take their steps; the state is untouched; step 11 is the probe.
#[tokio::test(start_paused = true)]
async fn the_kill_switch_skips_calls_that_still_count_as_steps() {
    let kill = KillSwitch::new();
    let (mut svc, handle, calls) = rig(Builder::new()
        .failure_threshold(3)
        .cooldown(Cooldown::Calls(4))
        .kill_switch(kill.clone()));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    fail_n(&mut svc, 3).await; // steps 3-5: open at 5
    for _ in 6..=8 {
        assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    }
    kill.kill();
    for _ in 9..=10 {
        assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Killed));
        assert_eq!(handle.state(), State::Open);
    }
    kill.revive();
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe)); // step 11
    assert_eq!(calls.load(Ordering::SeqCst), 6);
    assert_eq!(handle.snapshot().counts.skipped_killed, 2);
}

// The kill switch applies in every mode, disabled included, and leaves a closed
// breaker's counts alone.
#[tokio::test(start_paused = true)]
async fn the_kill_switch_stops_calls_in_every_mode_and_counts_nothing_against_the_service() {
    let kill = KillSwitch::new();
    let (mut svc, handle, calls) = rig(Builder::new()
        .failure_threshold(1)
        .kill_switch(kill.clone()));
    kill.kill();
    for mode in [Mode::Enabled, Mode::ObserveOnly, Mode::Disabled] {
        handle.set_mode(mode);
        assert_eq!(got(&mut svc, Req::Fail).await, skipped(Reason::Killed));
    }
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.consecutive_failures, 0);
    assert_eq!(snapshot.next_probe, NextProbe::Manual);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

// resilience4j transitionToDisabledState / back to enabled (ours keeps the state across
// a change of mode, documented on `set_mode`): an open breaker disabled and enabled
// again is still open, and probes after its cooldown.
#[tokio::test(start_paused = true)]
async fn a_change_of_mode_leaves_an_open_breaker_open() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(10))));
    fail_n(&mut svc, 1).await;
    handle.set_mode(Mode::Disabled);
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(handle.state(), State::Open);
    handle.set_mode(Mode::Enabled);
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    advance(secs(10)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
}

// resilience4j METRICS_ONLY reaching the half-open's permitted calls (adapted: ours
// observes as an enabled breaker would): after the cooldown the next call is a real
// probe, and the calls an enabled breaker would have turned away are made and marked.
#[tokio::test(start_paused = true)]
async fn observe_only_probes_like_an_enabled_breaker_and_marks_the_rest() {
    let (mut svc, handle, calls) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(2))
        .mode(Mode::ObserveOnly));
    fail_n(&mut svc, 1).await;
    assert_eq!(
        got(&mut svc, Req::Ok).await,
        Ok(Source::Shadowed(Reason::Open))
    );
    let (probe, tx) = start_waiting(&mut svc).await;
    assert_eq!(handle.state(), State::HalfOpen);
    assert_eq!(
        got(&mut svc, Req::Ok).await,
        Ok(Source::Shadowed(Reason::HalfOpenFull))
    );
    tx.send(true).unwrap();
    assert_eq!(probe.await.unwrap().source(), Source::Probe);
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

// Polly CircuitBreakerManualControlTests (one manual control isolating several
// strategies): one kill switch shared by two breakers stops both and revives both.
#[tokio::test(start_paused = true)]
async fn one_kill_switch_stops_and_revives_every_breaker_that_shares_it() {
    let kill = KillSwitch::new();
    let (mut model, model_handle, model_calls) =
        rig(Builder::new().name("model").kill_switch(kill.clone()));
    let (mut search, search_handle, search_calls) =
        rig(Builder::new().name("search").kill_switch(kill.clone()));
    kill.kill();
    assert_eq!(got(&mut model, Req::Ok).await, skipped(Reason::Killed));
    assert_eq!(got(&mut search, Req::Ok).await, skipped(Reason::Killed));
    assert_eq!(model_handle.kill_switch(), search_handle.kill_switch());
    kill.revive();
    assert_eq!(got(&mut model, Req::Ok).await, Ok(Source::Service));
    assert_eq!(got(&mut search, Req::Ok).await, Ok(Source::Service));
    assert_eq!(
        (
            model_calls.load(Ordering::SeqCst),
            search_calls.load(Ordering::SeqCst)
        ),
        (1, 1)
    );
}

// Polly CircuitStateControllerTests IsolateAsync_Ok and BreakAsync_Ok, and
// CircuitBreakerSpecs Should_call_onbreak_when_breaking_circuit_manually and
// Should_call_onreset_when_manually_resetting_circuit: isolating opens the breaker with
// no end (Polly's BreakDuration is MaxValue; ours says only a person ends it) and its
// rejections carry no retry-after; closing it by hand is one transition, and the next
// call is made.
#[tokio::test(start_paused = true)]
async fn isolating_tells_no_retry_after_and_closing_by_hand_lets_calls_through() {
    let (lines, observer) = recorder();
    let (mut svc, handle, calls) = rig_rejecting(Builder::new().on_event(observer));
    let mut transitions = handle.subscribe();
    advance(secs(1)).await;
    handle.force_open();
    let opened = transitions.try_recv().unwrap();
    assert_eq!(
        (opened.from, opened.to, opened.cause, opened.next_probe),
        (
            State::Closed,
            State::ForcedOpen,
            Cause::ForcedOpen,
            NextProbe::Manual
        )
    );
    let error = call(&mut svc, Req::Ok).await.unwrap_err();
    let rejected = error.downcast_ref::<Rejected>().expect("a typed rejection");
    assert_eq!(rejected.reason(), Reason::ForcedOpen);
    assert_eq!(rejected.retry_after_from(now()), None);
    assert_eq!(rejected.calls_until_probe(), None);
    handle.reset();
    let closed = transitions.try_recv().unwrap();
    assert_eq!(
        (closed.from, closed.to, closed.cause),
        (State::ForcedOpen, State::Closed, Cause::Reset)
    );
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        taken(&lines),
        vec![
            "transition closed->forced_open forced_open",
            "skipped forced_open",
            "transition forced_open->closed reset",
            "recorded success",
        ]
    );
}

// Polly CircuitStateControllerTests OnActionSuccess_EnsureCorrectBehavior (Isolated
// stays Isolated) and OnActionFailureAsync_EnsureCorrectBehavior (Isolated stays
// Isolated): calls in flight when a person isolates the breaker end as they end, reach
// their callers, and change nothing: they are late.
#[tokio::test(start_paused = true)]
async fn calls_that_end_after_an_isolation_leave_it_isolated() {
    let (mut svc, handle, _) = rig(Builder::new().failure_threshold(1));
    let (ok, tx_ok) = start_waiting(&mut svc).await;
    let (bad, tx_bad) = start_waiting(&mut svc).await;
    handle.force_open();
    tx_ok.send(true).unwrap();
    assert_eq!(ok.await.unwrap().source(), Source::Service);
    tx_bad.send(false).unwrap();
    assert_eq!(bad.await.unwrap_err().to_string(), FAILED);
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::ForcedOpen);
    assert_eq!(snapshot.consecutive_failures, 0);
    assert_eq!(snapshot.counts.late, 2);
    assert_eq!(snapshot.next_probe, NextProbe::Manual);
}

// resilience4j shouldPublishEachEventOnceInMetricOnlyState: in metrics-only, the breaker
// tells of exceeding its rate once, however many failures follow (and publishes each
// error). Ours (observe-only moves through the states): one transition to open; the
// failures after it are shadow calls, made and reported as such.
#[tokio::test(start_paused = true)]
async fn observe_only_publishes_its_opening_once_however_many_failures_follow() {
    let (lines, observer) = recorder();
    let (mut svc, handle, calls) = rig(Builder::new()
        .failure_rate(0.5, RateWindow::Calls(5), 5)
        .mode(Mode::ObserveOnly)
        .on_event(observer));
    fail_n(&mut svc, 10).await;
    let lines = taken(&lines);
    let transitions: Vec<_> = lines
        .iter()
        .filter(|l| l.starts_with("transition"))
        .collect();
    assert_eq!(transitions, vec!["transition closed->open tripped"]);
    let recorded = |line: &str| lines.iter().filter(|l| *l == line).count();
    assert_eq!(recorded("recorded failure"), 5);
    assert_eq!(recorded("recorded failure shadow"), 5);
    assert_eq!(calls.load(Ordering::SeqCst), 10);
    assert_eq!(handle.snapshot().counts.would_have_skipped, 5);
}

// resilience4j CircuitBreakerEventPublisherTest shouldNotProduceEventsInDisabledState: a
// disabled breaker publishes nothing for its calls, failures, successes or errors: only
// its change of mode is heard; and it stays closed.
#[tokio::test(start_paused = true)]
async fn a_disabled_breaker_reports_nothing_but_its_change_of_mode() {
    let (lines, observer) = recorder();
    let (mut svc, handle, calls) = rig(Builder::new().failure_threshold(1).on_event(observer));
    handle.set_mode(Mode::Disabled);
    fail_n(&mut svc, 2).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Ignore).await, Err("bad request".into()));
    assert_eq!(taken(&lines), vec!["mode enabled->disabled"]);
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(calls.load(Ordering::SeqCst), 5);
}

// resilience4j allCircuitBreakerStatesAllowTransitionToMetricsOnlyMode and
// allCircuitBreakerStatesAllowTransitionToItsOwnState: every state may switch to
// metrics-only, and to what it already is. Ours: from every state the mode changes to
// observe-only and the state is kept; setting the same mode again is no event.
#[tokio::test(start_paused = true)]
async fn every_state_can_switch_to_observe_only_and_keeps_its_state() {
    for state in [
        State::Closed,
        State::Open,
        State::HalfOpen,
        State::ForcedOpen,
    ] {
        let (lines, observer) = recorder();
        let (mut svc, handle, _) = rig(Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1))
            .on_event(observer));
        let mut trial = None;
        match state {
            State::Closed => {}
            State::Open => fail_n(&mut svc, 1).await,
            State::HalfOpen => {
                fail_n(&mut svc, 1).await;
                trial = Some(start_waiting(&mut svc).await);
            }
            State::ForcedOpen => handle.force_open(),
        }
        assert_eq!(handle.state(), state);
        taken(&lines);
        handle.set_mode(Mode::ObserveOnly);
        handle.set_mode(Mode::ObserveOnly);
        assert_eq!(handle.state(), state, "{state}");
        assert_eq!(handle.mode(), Mode::ObserveOnly);
        assert_eq!(taken(&lines), vec!["mode enabled->observe_only"], "{state}");
        assert_eq!(handle.snapshot().probes_in_flight, 0, "{state}");
        drop(trial);
    }
}

// Polly CircuitBreakerManualControlTests Ctor_Isolated and
// IsolateAsync_NotInitialized_Ok: a manual control isolated before the breaker exists
// isolates the breaker from its first call; closing it lets calls through. Ours: a
// breaker built on a kill switch already killed skips its very first call, and reviving
// the switch lets the next one through.
#[tokio::test(start_paused = true)]
async fn a_breaker_built_on_a_killed_switch_skips_its_first_call() {
    let kill = KillSwitch::new();
    kill.kill();
    let (mut svc, handle, calls) = rig(Builder::new().kill_switch(kill.clone()));
    assert!(handle.snapshot().killed);
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Killed));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    kill.revive();
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    assert_eq!(handle.state(), State::Closed);
}

// Polly CircuitBreakerResiliencePipelineBuilderTests
// AddCircuitBreakers_WithIsolatedManualControl_ShouldBeIsolated: one manual control,
// isolated before two breakers are built, isolates both; their rejections carry no
// retry-after. Ours: one kill switch.
#[tokio::test(start_paused = true)]
async fn two_breakers_built_on_one_killed_switch_both_reject_with_no_retry_after() {
    let kill = KillSwitch::new();
    kill.kill();
    let (mut first, _, first_calls) =
        rig_rejecting(Builder::new().name("first").kill_switch(kill.clone()));
    let (mut second, _, second_calls) =
        rig_rejecting(Builder::new().name("second").kill_switch(kill.clone()));
    for svc in [&mut first, &mut second] {
        let error = call(svc, Req::Ok).await.unwrap_err();
        let rejected = error.downcast_ref::<Rejected>().expect("a typed rejection");
        assert_eq!(rejected.reason(), Reason::Killed);
        assert_eq!(rejected.retry_after_from(now()), None);
    }
    assert_eq!(
        first_calls.load(Ordering::SeqCst) + second_calls.load(Ordering::SeqCst),
        0
    );
}

// gobreaker TestTwoStepCircuitBreaker (Allow while killed, ours): `advise` turned away
// by the kill switch counts a killed skip, and the totals still add up.
#[tokio::test(start_paused = true)]
async fn advise_under_the_kill_switch_counts_a_killed_skip() {
    let (_svc, handle, _) = rig(Builder::new());
    handle.kill_switch().kill();
    assert!(matches!(handle.peek(), Advice::Skip(s) if s.reason() == Reason::Killed));
    assert_eq!(handle.snapshot().counts.arrived, 0);
    assert!(matches!(handle.advise(), Advice::Skip(s) if s.reason() == Reason::Killed));
    let c = handle.snapshot().counts;
    assert_eq!((c.skipped_killed, c.arrived), (1, 1));
    assert_counts_add_up(&c);
}

// resilience4j shouldRecordMetricsInMetricsOnlyState with the state transition events:
// an observe-only breaker's transitions say they are what an enabled breaker would have
// done.
#[tokio::test(start_paused = true)]
async fn observe_only_transitions_carry_their_mode() {
    let (mut svc, handle, calls) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(2))
        .mode(Mode::ObserveOnly));
    let mut changes = handle.subscribe();
    fail_n(&mut svc, 1).await;
    let _ = got(&mut svc, Req::Ok).await;
    let _ = got(&mut svc, Req::Ok).await;
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let all = drain(&mut changes);
    assert_eq!(
        summary(&all),
        vec![
            (State::Closed, State::Open, Cause::Tripped),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Closed, Cause::ProbeSucceeded),
        ]
    );
    assert!(all.iter().all(|t| t.mode == Mode::ObserveOnly));
    assert_eq!(handle.snapshot().counts.would_have_skipped, 1);
}
