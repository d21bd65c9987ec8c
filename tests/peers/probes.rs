//! Half-open and its probes: slots held and given back, racing callers, probes whose service
//! cannot get ready, the dwell limit, and probes that end late, ignored or dropped.

use super::*;

// resilience4j transitionToOpenStateFor from HALF_OPEN (an operator's hold while a trial
// call runs): the hold wins, the trial's late result changes nothing, and no slot is left
// taken.
#[tokio::test(start_paused = true)]
async fn a_hold_made_while_a_probe_runs_writes_the_probe_off() {
    let (lines, observer) = recorder();
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1))
        .on_event(observer));
    fail_n(&mut svc, 1).await;
    let (probe, tx) = start_waiting(&mut svc).await;
    handle.open_for(secs(60));
    assert_eq!(handle.snapshot().probes_in_flight, 0);
    taken(&lines);
    tx.send(false).unwrap();
    assert!(probe.await.is_err());
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::ForcedOpen);
    assert_eq!(snapshot.counts.late, 1);
    assert!(taken(&lines).is_empty(), "a late result is not reported");
    advance(secs(60)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
}

// resilience4j CircuitBreakerStateMachineTest (the kill switch has no peer; the nearest is
// a state change during a call): a probe that completes while the kill switch is on is
// still recorded; the switch changes neither state nor counts.
#[tokio::test(start_paused = true)]
async fn a_probe_completing_while_killed_is_still_recorded() {
    let kill = KillSwitch::new();
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1))
        .kill_switch(kill.clone()));
    fail_n(&mut svc, 1).await;
    let (probe, tx) = start_waiting(&mut svc).await;
    kill.kill();
    tx.send(true).unwrap();
    assert_eq!(probe.await.unwrap().source(), Source::Probe);
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Killed));
}

// resilience4j maxWaitDurationInHalfOpenState with an IntervalFunction: a half-open that
// outlives its dwell limit is a re-open in a row, so the backoff grows.
#[tokio::test(start_paused = true)]
async fn a_dwell_limit_reopen_grows_the_backoff_like_a_failed_probe() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(5)))
        .backoff(Backoff::exponential(2.0, Cooldown::Time(secs(60))))
        .max_half_open_dwell(Some(secs(1))));
    fail_n(&mut svc, 1).await;
    advance(secs(5)).await;
    let (_hung, _tx) = start_waiting(&mut svc).await;
    advance(secs(1)).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.cause, Some(Cause::DwellExceeded));
    assert_eq!(snapshot.retry_after(), Some(secs(10)));
}

// gobreaker TestCircuitBreakerInParallel and Hystrix testSingleTestOnOpenCircuit..., on
// two threads: callers racing at a half-open breaker never have more probes at the
// service at once than the limit, siblings of a failed probe included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_callers_never_have_more_probes_at_the_service_than_the_limit() {
    #[derive(Default)]
    struct Gauge {
        now: AtomicUsize,
        max: AtomicUsize,
        calls: AtomicUsize,
    }
    let gauge = Arc::new(Gauge::default());
    let inner = gauge.clone();
    let layer = Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1))
        .half_open_probes(2)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer
        .with_fallback(service_fn(|_: ()| async {
            Ok::<_, Infallible>("fallback")
        }))
        .layer(service_fn(move |()| {
            let gauge = inner.clone();
            async move {
                gauge.calls.fetch_add(1, Ordering::SeqCst);
                let now = gauge.now.fetch_add(1, Ordering::SeqCst) + 1;
                gauge.max.fetch_max(now, Ordering::SeqCst);
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                gauge.now.fetch_sub(1, Ordering::SeqCst);
                Err::<&'static str, _>(io::Error::other(FAILED))
            }
        }));
    // The first failure, alone: from then on every call that reaches the service is a probe.
    let mut first = svc.clone();
    let _ = first.ready().await.unwrap().call(()).await;
    assert_eq!(handle.state(), State::Open);
    gauge.max.store(0, Ordering::SeqCst);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let mut svc = svc.clone();
            tokio::spawn(async move {
                for _ in 0..500 {
                    let _ = svc.ready().await.unwrap().call(()).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert!(
        gauge.max.load(Ordering::SeqCst) <= 2,
        "{}",
        gauge.max.load(Ordering::SeqCst)
    );
    let counts = handle.snapshot().counts;
    assert_eq!(
        counts.probes as usize,
        gauge.calls.load(Ordering::SeqCst) - 1
    );
    assert_eq!(counts.arrived, 8_001);
    assert_eq!(
        counts.arrived,
        counts.made + counts.skipped() + counts.abandoned
    );
}

// A failed probe's siblings (resilience4j permits 4 half-open calls; ours writes the
// half-open off at the first failure): the siblings still running hold their slots until
// they end, so a later half-open cannot exceed the limit.
#[tokio::test(start_paused = true)]
async fn the_siblings_of_a_failed_probe_hold_their_slots_until_they_end() {
    let (mut svc, handle, calls) = half_open_rig(2);
    let (b, tx_b) = a_failed_probe_and_its_running_sibling(&mut svc).await;
    assert_eq!(handle.state(), State::Open);
    assert_eq!(handle.snapshot().probes_in_flight, 1, "b, still running");
    // The next call is due (cooldown 1 call): half-open again, with one slot free.
    let (c, tx_c) = start_waiting(&mut svc).await;
    assert_eq!(handle.state(), State::HalfOpen);
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::HalfOpenFull));
    tx_b.send(true).unwrap();
    assert!(b.await.is_ok());
    assert_eq!(handle.peek(), Advice::Probe, "b's slot is free now");
    tx_c.send(true).unwrap();
    assert!(c.await.is_ok());
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

/// A service whose readiness is scripted: never ready, or failing to get ready.
#[derive(Clone, Debug)]
struct Readiness {
    fail: bool,
    calls: Arc<AtomicUsize>,
}

impl Service<()> for Readiness {
    type Response = &'static str;
    type Error = io::Error;
    type Future = std::future::Ready<Result<&'static str, io::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        if self.fail {
            Poll::Ready(Err(io::Error::other("no connection")))
        } else {
            Poll::Pending
        }
    }

    fn call(&mut self, (): ()) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok("ok"))
    }
}

// Hystrix testShortCircuit... (a short-circuited command never touches its thread pool)
// and Polly (an open circuit throws before the delegate): an open breaker answers from
// the fallback without waiting for the wrapped service to be ready.
#[tokio::test(start_paused = true)]
async fn an_open_breaker_answers_without_waiting_for_the_service_to_be_ready() {
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = Builder::new().build().unwrap();
    let handle = layer.handle();
    let mut svc = layer
        .with_fallback(service_fn(|()| async { Ok::<_, Infallible>("fallback") }))
        .layer(Readiness {
            fail: false,
            calls: calls.clone(),
        });
    handle.force_open();
    let answer = tokio::time::timeout(secs(1), async {
        svc.ready().await.unwrap().call(()).await.unwrap()
    })
    .await
    .expect("the fallback answers at once");
    assert_eq!(answer.source(), Source::Fallback(Reason::ForcedOpen));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

// failsafe-go / resilience4j count a failure to get a connection as a failure of the
// call; ours documents "an inner poll_ready error is a failure too", for a probe as well.
#[tokio::test(start_paused = true)]
async fn a_probe_whose_service_cannot_get_ready_is_a_failed_probe() {
    let layer = Builder::new()
        .failure_threshold(2)
        .cooldown(Cooldown::Calls(1))
        .build()
        .unwrap();
    let handle = layer.handle();
    let mut svc = layer.layer(Readiness {
        fail: true,
        calls: Arc::new(AtomicUsize::new(0)),
    });
    for _ in 0..2 {
        let error = svc.ready().await.unwrap_err();
        assert!(error.to_string().contains("no connection"), "{error}");
    }
    assert_eq!(handle.state(), State::Open);
    let mut transitions = handle.subscribe();
    assert!(svc.ready().await.is_err());
    assert_eq!(
        summary(&drain(&mut transitions)),
        vec![
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Open, Cause::ProbeFailed),
        ]
    );
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.probes_in_flight, 0);
    assert_eq!(snapshot.counts.failures, 3);
    assert_eq!(snapshot.counts.probes, 1);
}

// Polly CircuitStateControllerTests OnActionPreExecute_HalfOpen: a second call while the
// trial runs is turned away, the breaker still half-open. Polly's rejection carries a
// retry-after of one break duration; ours says the trial decides (no time is known).
#[tokio::test(start_paused = true)]
async fn a_call_turned_away_during_the_trial_is_told_the_trial_decides() {
    let (mut svc, handle, _) = rig_rejecting(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(5))),
    );
    fail_n(&mut svc, 1).await;
    advance(secs(5)).await;
    let (trial, _tx) = start_waiting(&mut svc).await;
    let error = call(&mut svc, Req::Ok).await.unwrap_err();
    let rejected = error.downcast_ref::<Rejected>().expect("a typed rejection");
    assert_eq!(
        (rejected.reason(), rejected.state(), rejected.next_probe()),
        (Reason::HalfOpenFull, State::HalfOpen, NextProbe::InFlight)
    );
    assert_eq!(rejected.retry_after_from(now()), None);
    assert_eq!(handle.state(), State::HalfOpen);
    drop(trial);
}

// Polly Should_call_onhalfopen_when_automatically_transitioning_to_halfopen_due_to_state_read:
// in Polly, reading the state after the break duration shows half-open. Ours never turns
// half-open by time alone (as documented): reading shows open with the next call as the
// probe, nothing is published, and the change to half-open comes with that call.
#[tokio::test(start_paused = true)]
async fn reading_the_state_after_the_cooldown_changes_nothing_until_the_next_call() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(30))));
    let mut transitions = handle.subscribe();
    fail_n(&mut svc, 1).await;
    assert_eq!(drain(&mut transitions).len(), 1);
    advance(secs(30)).await;
    assert_eq!(handle.state(), State::Open);
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    // The wait is over: the next call is the probe, with no time left to wait.
    assert_eq!(snapshot.next_probe, NextProbe::After { calls: 1, at: None });
    assert_eq!(snapshot.retry_after(), Some(Duration::ZERO));
    assert_eq!(handle.peek(), Advice::Probe);
    assert_eq!(summary(&drain(&mut transitions)), vec![]);
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(
        summary(&drain(&mut transitions)),
        probe_closed_from(State::Open)
    );
}

// Hystrix testUnsubscriptionDoesNotLeaveCircuitStuckHalfOpen: a trial started after the
// sleep window and then given up (unsubscribed) does not leave the breaker stuck
// half-open: ten sleep windows later a successful call closes it.
#[tokio::test(start_paused = true)]
async fn a_trial_given_up_unfinished_does_not_leave_the_breaker_stuck_half_open() {
    let sleep_window = Duration::from_millis(200);
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(4)
        .cooldown(Cooldown::Time(sleep_window)));
    fail_n(&mut svc, 4).await;
    assert_eq!(handle.state(), State::Open);
    advance(sleep_window + Duration::from_millis(50)).await;
    let trial = start(&mut svc, Req::Slow(secs(5))).await;
    assert_eq!(handle.state(), State::HalfOpen);
    drop(trial);
    advance(sleep_window * 10).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.counts.cancelled, 1);
}

// Polly Should_only_allow_single_execution_on_first_entering_halfopen_state__integration_test:
// callers racing on two threads at a breaker whose next call is the trial: exactly one
// reaches the service while the trial runs; every other is turned away as half-open
// full; the trial's success closes the breaker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_callers_at_the_end_of_the_break_send_exactly_one_trial() {
    let reached = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let layer = Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(3600)))
        .build()
        .unwrap();
    let handle = layer.handle();
    let (seen, gate) = (reached.clone(), release.clone());
    let svc = layer
        .with_fallback(service_fn(|_: bool| async {
            Ok::<_, Infallible>("fallback")
        }))
        .layer(service_fn(move |fail: bool| {
            let first = seen.fetch_add(1, Ordering::SeqCst) == 1;
            let gate = gate.clone();
            async move {
                // The trial (the call after the failure) waits until released; any other
                // call that reaches the service returns at once, so nothing can hang.
                if first {
                    let _ = gate.acquire().await;
                }
                if fail {
                    Err(io::Error::other(FAILED))
                } else {
                    Ok("ok")
                }
            }
        }));
    let mut opener = svc.clone();
    let _ = opener.ready().await.unwrap().call(true).await;
    assert_eq!(handle.state(), State::Open);
    assert!(handle.allow_probe());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..16 {
        let mut svc = svc.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let answer = svc.ready().await.unwrap().call(false).await.unwrap();
            tx.send(answer.source()).unwrap();
        });
    }
    drop(tx);
    let mut others = Vec::new();
    for _ in 0..15 {
        others.push(rx.recv().await.unwrap());
    }
    assert_eq!(
        reached.load(Ordering::SeqCst),
        2,
        "the failure and one trial"
    );
    assert!(
        others
            .iter()
            .all(|s| *s == Source::Fallback(Reason::HalfOpenFull)),
        "{others:?}"
    );
    assert_eq!(handle.state(), State::HalfOpen);
    release.add_permits(1);
    assert_eq!(rx.recv().await, Some(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// failsafe-go TestHalfOpenFailureWithSuccessAndFailureThresholds and
// TestHalfOpenSuccessWithSuccessAndFailureThresholds (success threshold 3, failure
// threshold 2): in half-open the failure threshold is ignored: two successes and a
// failure re-open it; three successes close it.
#[tokio::test(start_paused = true)]
async fn in_half_open_the_failure_threshold_is_ignored() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(2)
        .cooldown(Cooldown::Calls(1))
        .half_open_probes(3));
    fail_n(&mut svc, 2).await;
    probes_succeed_half_open(&mut svc, &handle, 2).await;
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
    probes_succeed_half_open(&mut svc, &handle, 2).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// resilience4j shouldResetToClosedState / shouldResetClosedState and Polly
// CircuitStateControllerTests BreakAsync_Ok (a manual close): a reset starts the
// breaker afresh. A failed probe's sibling still running holds a slot of the next
// half-open (so the service never sees more probes than the limit); a reset writes
// every probe under way off, the sibling too, as it writes off the probes of the
// half-open it ends: the closed breaker shows none in flight, and the next half-open
// has all its slots.
#[tokio::test(start_paused = true)]
async fn a_reset_gives_back_the_slot_of_a_failed_probes_sibling() {
    let (mut svc, handle, _) = half_open_rig(2);
    let (sibling, _tx_sibling) = a_failed_probe_and_its_running_sibling(&mut svc).await;
    assert_eq!(handle.state(), State::Open);
    assert_eq!(handle.snapshot().probes_in_flight, 1, "the sibling runs on");
    handle.reset();
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(
        snapshot.probes_in_flight, 0,
        "a closed breaker has no probes"
    );
    fail_n(&mut svc, 1).await;
    let (a, _tx_a) = start_waiting(&mut svc).await;
    let (b, _tx_b) = start_waiting(&mut svc).await;
    assert_eq!(handle.snapshot().probes_in_flight, 2);
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::HalfOpenFull));
    drop((a, b, sibling));
}

// The same with no dwell limit, through a forced open and a change of mode: a sibling
// that hangs for good would otherwise hold its slot for good, whatever a person does.
#[tokio::test(start_paused = true)]
async fn a_person_or_a_change_of_mode_writes_off_a_hung_siblings_slot_with_no_dwell_limit() {
    for act in ["force_open", "set_mode"] {
        let (mut svc, handle, _) = rig(Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1))
            .half_open_probes(2)
            .max_half_open_dwell(None));
        let (hung, _tx_hung) = a_failed_probe_and_its_running_sibling(&mut svc).await;
        advance(secs(24 * 3600)).await;
        assert_eq!(handle.snapshot().probes_in_flight, 1, "{act}");
        match act {
            "force_open" => handle.force_open(),
            _ => handle.set_mode(Mode::ObserveOnly),
        }
        assert_eq!(handle.snapshot().probes_in_flight, 0, "{act}");
        drop(hung);
    }
}

// gobreaker TestTwoStepCircuitBreaker (MaxRequests 2, 5 failures below the default
// trip, 6 in a row above it): in half-open, while the two permitted requests run, others
// are turned away; once both end excluded, requests are accepted again; a success then a
// failure re-opens it; after the timeout two successes close it, with the counts clear.
#[tokio::test(start_paused = true)]
async fn probes_that_end_ignored_let_the_next_ones_in_and_two_successes_close() {
    let (mut svc, handle, _) = rig(Builder::new()
        .failure_threshold(6)
        .cooldown(Cooldown::Time(secs(60)))
        .half_open_probes(2));
    fail_n(&mut svc, 5).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Service));
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.snapshot().consecutive_failures, 1);
    fail_n(&mut svc, 5).await;
    assert_eq!(handle.state(), State::Open);
    for req in [Req::Ok, Req::Fail, Req::Ignore] {
        assert_eq!(got(&mut svc, req).await, skipped(Reason::Open));
    }
    advance(secs(60) - Duration::from_millis(1)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::Open));
    advance(secs(1)).await;
    let ms = Duration::from_millis(100);
    let first = start(&mut svc, Req::SlowIgnore(ms)).await;
    let second = start(&mut svc, Req::SlowIgnore(ms)).await;
    assert_eq!(handle.state(), State::HalfOpen);
    assert_eq!(got(&mut svc, Req::Ok).await, skipped(Reason::HalfOpenFull));
    assert_eq!(
        got(&mut svc, Req::Fail).await,
        skipped(Reason::HalfOpenFull)
    );
    assert!(first.await.is_err());
    assert!(second.await.is_err());
    assert_eq!(handle.snapshot().probes_in_flight, 0);
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    fail_n(&mut svc, 1).await;
    assert_eq!(handle.state(), State::Open);
    advance(secs(60)).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.consecutive_failures, 0);
}

// resilience4j circuitBreakerTransitionsToOpenAfterWaitDurationInHalfOpenState, as its
// listeners see it: the re-open at the dwell limit is a transition like any other,
// published once, whether the breaker is looked at through its state, a snapshot or the
// next call.
#[tokio::test(start_paused = true)]
async fn the_reopen_at_the_dwell_limit_is_published_once_whoever_looks_first() {
    for look in ["state", "snapshot", "call"] {
        let (lines, observer) = recorder();
        let (mut svc, handle, _) = rig(Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(5)))
            .max_half_open_dwell(Some(secs(1)))
            .on_event(observer));
        let mut transitions = handle.subscribe();
        fail_n(&mut svc, 1).await;
        advance(secs(5)).await;
        let (trial, _tx) = start_waiting(&mut svc).await;
        advance(secs(1)).await;
        match look {
            "state" => assert_eq!(handle.state(), State::Open, "{look}"),
            "snapshot" => assert_eq!(handle.snapshot().state, State::Open, "{look}"),
            _ => assert_eq!(
                got(&mut svc, Req::Ok).await,
                skipped(Reason::Open),
                "{look}"
            ),
        }
        assert_eq!(handle.state(), State::Open, "{look}");
        assert_eq!(
            summary(&drain(&mut transitions)),
            vec![
                (State::Closed, State::Open, Cause::Tripped),
                (State::Open, State::HalfOpen, Cause::CooldownElapsed),
                (State::HalfOpen, State::Open, Cause::DwellExceeded),
            ],
            "{look}"
        );
        let heard = taken(&lines);
        assert_eq!(
            heard
                .iter()
                .filter(|l| l.as_str() == "transition half_open->open dwell_exceeded")
                .count(),
            1,
            "{look}: {heard:?}"
        );
        drop(trial);
    }
}

// resilience4j circuitBreakerTransitionsToOpenAfterWaitDurationInHalfOpenState, at the
// edge: a probe that answers a nanosecond before the dwell limit decides; one that
// answers at the limit is late, and the breaker re-opened at the limit.
#[tokio::test(start_paused = true)]
async fn a_probe_answering_just_before_the_dwell_limit_decides_and_at_it_is_late() {
    let dwell = secs(10);
    for (took, closes) in [(dwell - NS, true), (dwell, false)] {
        let (mut svc, handle, _) = rig(Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1))
            .max_half_open_dwell(Some(dwell)));
        fail_n(&mut svc, 1).await;
        // Told when to end by hand: tokio's timers round a sleep up to the millisecond.
        let (probe, tx) = start_waiting(&mut svc).await;
        advance(took).await;
        tx.send(true).unwrap();
        assert_eq!(probe.await.unwrap().source(), Source::Probe);
        let s = handle.snapshot();
        if closes {
            assert_eq!((s.state, s.counts.late), (State::Closed, 0), "{took:?}");
        } else {
            assert_eq!(
                (s.state, s.cause),
                (State::Open, Some(Cause::DwellExceeded))
            );
            assert_eq!(s.counts.late, 1);
            assert_eq!(s.probes_in_flight, 0);
        }
    }
}

// gobreaker TestGeneration for a probe (resilience4j: a permission acquired in an old
// state): a probe that ends after a reset is counted as a probe made, late, and frees no
// slot twice; the totals add up.
#[tokio::test(start_paused = true)]
async fn a_probe_ending_after_a_reset_is_a_late_probe_in_the_totals() {
    let (mut svc, handle, _) = half_open_rig(1);
    fail_n(&mut svc, 1).await;
    let (probe, tx) = start_waiting(&mut svc).await;
    handle.reset();
    assert_eq!(handle.snapshot().probes_in_flight, 0);
    tx.send(false).unwrap();
    assert!(probe.await.is_err());
    let s = handle.snapshot();
    assert_eq!(s.state, State::Closed);
    assert_eq!(
        (s.counts.probes, s.counts.late, s.consecutive_failures),
        (1, 1, 0)
    );
    assert_eq!(s.probes_in_flight, 0);
    assert!(s.counts.probes <= s.counts.made);
    assert_counts_add_up(&s.counts);
}

// resilience4j CircuitBreakerFutureTest (a cancelled probe releases its permission):
// a dropped probe is counted as made and cancelled, the next call probes.
#[tokio::test(start_paused = true)]
async fn a_dropped_probe_is_cancelled_and_the_next_call_probes() {
    let (mut svc, handle, _) = half_open_rig(1);
    fail_n(&mut svc, 1).await;
    let (probe, _tx) = start_waiting(&mut svc).await;
    drop(probe);
    let s = handle.snapshot();
    assert_eq!((s.state, s.probes_in_flight), (State::HalfOpen, 0));
    assert_eq!((s.counts.cancelled, s.counts.probes), (1, 1));
    assert_counts_add_up(&s.counts);
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

// Polly HalfOpen with an ignored (unhandled) outcome after successes: with three probe
// slots, two successes, an ignored probe, then a third success closes.
#[tokio::test(start_paused = true)]
async fn an_ignored_probe_between_successes_neither_closes_nor_reopens() {
    let (mut svc, handle, _) = half_open_rig(3);
    fail_n(&mut svc, 1).await;
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(got(&mut svc, Req::Ignore).await, Err("bad request".into()));
    assert_eq!(handle.state(), State::HalfOpen);
    assert_eq!(got(&mut svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}
