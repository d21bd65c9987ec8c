//! Adversarial tests of the clock's proof (src/clock.rs): every decision equals the one
//! an exact read of tokio's clock would give, and paused-time tests behave as before.
//!
//! Tokio's clock is the clock of the *current handle*, which a thread can change at any
//! time (`Handle::enter`, a runtime driven inside `spawn_blocking` or `block_in_place`): a
//! thread that once ran under a multi-thread runtime's handle, whose clock cannot be
//! paused, may next run under a paused one. The breaker follows it, but for the one rule
//! the clock's docs state: a task of a multi-thread runtime runs on the system's clock
//! throughout, also under a paused runtime it enters or drives.
//!
//! Every test here builds a situation where tokio's exact clock says a deadline has
//! passed (a paused clock moved on past it) and checks that the breaker decides as that
//! exact read says. No test waits on the wall clock: the paused clocks are moved on.

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::runtime::{Builder as RtBuilder, Runtime};
use tower::{service_fn, Layer, Service};
use tower_circuit_breaker::error::{BoxError, Rejected};
use tower_circuit_breaker::{
    Answer, CircuitBreaker, CircuitBreakerHandle, CircuitBreakerLayer, Cooldown, Outcome, Reason,
    Source, State,
};

type Inner = tower::util::ServiceFn<Box<dyn FnMut(u64) -> Ready<Result<u64, Infallible>> + Send>>;
type Breaker = CircuitBreaker<Inner, tower_circuit_breaker::fallback::NoFallback, Classifier>;
type Classifier = fn(&Result<u64, Infallible>) -> Outcome;

const HOUR: Duration = Duration::from_secs(3600);
/// The request that the classifier counts as a failure.
const FAIL: u64 = u64::MAX;

fn classify(result: &Result<u64, Infallible>) -> Outcome {
    match result {
        Ok(FAIL) => Outcome::failure(),
        _ => Outcome::Success,
    }
}

/// A breaker over a service that counts how often it is called.
fn breaker(
    builder: tower_circuit_breaker::Builder,
) -> (Breaker, CircuitBreakerHandle, Arc<AtomicUsize>) {
    let layer = builder
        .build()
        .expect("valid settings")
        .with_classifier(classify as Classifier);
    let handle = layer.handle();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let inner: Box<dyn FnMut(u64) -> Ready<Result<u64, Infallible>> + Send> = Box::new(move |x| {
        counted.fetch_add(1, Ordering::SeqCst);
        ready(Ok(x))
    });
    (layer.layer(service_fn(inner)), handle, calls)
}

fn poll_ready(svc: &mut Breaker) {
    let mut cx = Context::from_waker(Waker::noop());
    assert!(matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))));
}

fn call_now(svc: &mut Breaker, request: u64) -> Result<Answer<u64>, BoxError> {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(svc.call(request)).poll(&mut cx) {
        Poll::Ready(result) => result,
        Poll::Pending => unreachable!("ready at once"),
    }
}

/// One call driven by hand, synchronously: it can run under an `EnterGuard`.
fn call(svc: &mut Breaker, request: u64) -> Result<Answer<u64>, BoxError> {
    poll_ready(svc);
    call_now(svc, request)
}

fn tokio_now() -> Instant {
    tokio::time::Instant::now().into_std()
}

fn paused_current_thread() -> Runtime {
    RtBuilder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
}

fn multi_thread(workers: usize) -> Runtime {
    RtBuilder::new_multi_thread()
        .worker_threads(workers)
        .enable_time()
        .build()
        .expect("runtime")
}

/// Makes a call at a breaker forced open an hour ahead on the real clock, from the thread
/// and context it runs in, so that the thread has run a call under the current handle.
/// The call is skipped either way.
fn prime_with_a_far_deadline() {
    let (mut far, handle, _) = breaker(CircuitBreakerLayer::builder());
    handle.open_until(tokio_now() + HOUR);
    let error = call(&mut far, 1).expect_err("forced open an hour ahead");
    assert!(error.downcast_ref::<Rejected>().is_some());
}

/// What the exact clock says of a breaker forced open for an hour on a paused clock moved
/// on by two hours: the hold is over, the next call is the probe.
fn assert_probe_after_the_hold(result: Result<Answer<u64>, BoxError>, what: &str) {
    match result {
        Ok(answer) => assert_eq!(answer.source(), Source::Probe, "{what}"),
        Err(error) => {
            panic!("{what}: tokio's clock is past the deadline, but the call was skipped: {error}")
        }
    }
}

/// Control: on a paused current-thread runtime, a breaker forced open for an hour and a
/// clock moved on two hours sends the probe, also when `pause()` is called after the
/// breaker opened.
#[test]
fn control_a_paused_clock_moved_past_a_hold_sends_the_probe() {
    let ct = paused_current_thread();
    ct.block_on(async {
        let (mut svc, handle, calls) = breaker(CircuitBreakerLayer::builder());
        handle.open_for(HOUR);
        tokio::time::advance(2 * HOUR).await;
        assert_probe_after_the_hold(call(&mut svc, 1), "paused from the start");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(handle.state(), State::Closed);
    });

    let ct = RtBuilder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    ct.block_on(async {
        let (mut svc, handle, _) = breaker(CircuitBreakerLayer::builder());
        handle.open_for(HOUR);
        tokio::time::pause();
        tokio::time::advance(2 * HOUR).await;
        assert_probe_after_the_hold(call(&mut svc, 1), "paused after the breaker opened");
    });
}

/// The documented rule (src/clock.rs): a task of a multi-thread runtime runs on the
/// system's clock, the one that runtime keeps, for the rest of the task once its first
/// call found it so, also under a paused runtime's handle it enters later. A breaker held
/// open for an hour on a paused clock that then moved two hours on: for such a task the
/// hold ends an hour from the system's now, not the paused clock's, so the call is
/// skipped; and every time the breaker tells is on that one clock.
#[test]
fn a_multi_thread_task_under_a_paused_runtimes_entered_handle_decides_on_the_system_clock() {
    let ct = paused_current_thread();
    let (svc, handle, calls) = breaker(CircuitBreakerLayer::builder());
    let deadline = ct.block_on(async {
        handle.open_for(HOUR);
        let deadline = tokio_now() + HOUR;
        tokio::time::advance(2 * HOUR).await;
        deadline
    });
    let paused = ct.handle().clone();
    let mt = multi_thread(1);
    let (result, paused_now, system_before) = mt.block_on(async move {
        tokio::spawn(async move {
            let mut svc = svc;
            // The task's first call, under its own runtime's handle.
            prime_with_a_far_deadline();
            let _entered = paused.enter();
            let (paused_now, system_before) = (tokio_now(), Instant::now());
            (call(&mut svc, 1), paused_now, system_before)
        })
        .await
        .expect("task")
    });
    assert!(
        paused_now >= deadline,
        "tokio's entered clock is past the hold"
    );
    assert!(system_before < deadline, "the system's clock is not");
    let error = result.expect_err("skipped: on the system's clock the hold is on");
    let rejected = error.downcast_ref::<Rejected>().expect("a rejection");
    assert_eq!(rejected.reason(), Reason::ForcedOpen);
    assert_eq!(
        rejected.next_probe(),
        tower_circuit_breaker::NextProbe::After {
            calls: 1,
            at: Some(deadline)
        }
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

/// The same without priming: the first call on the worker is made under the entered
/// handle, so the exact clock is read and the probe goes. (The test above differs only in
/// the call made first under the multi-thread handle.)
#[test]
fn control_a_fresh_worker_under_a_paused_runtimes_handle_sends_the_probe() {
    let ct = paused_current_thread();
    let (svc, handle, _) = breaker(CircuitBreakerLayer::builder());
    ct.block_on(async {
        handle.open_for(HOUR);
        tokio::time::advance(2 * HOUR).await;
    });
    let paused = ct.handle().clone();
    let mt = multi_thread(1);
    let result = mt.block_on(async move {
        tokio::spawn(async move {
            let mut svc = svc;
            let _entered = paused.enter();
            call(&mut svc, 1)
        })
        .await
        .expect("task")
    });
    assert_probe_after_the_hold(result, "a fresh worker under a paused runtime's handle");
}

/// The thread of a paused current-thread runtime (what `#[tokio::test(start_paused =
/// true)]` runs on) once makes a call while a multi-thread runtime's handle is entered.
/// From then on, every call on that thread, back on the paused clock, is decided by the
/// kernel's coarse clock: a paused-time test no longer behaves as before.
#[test]
fn a_paused_test_thread_that_once_entered_a_multi_thread_handle_still_decides_on_its_paused_clock()
{
    let mt = multi_thread(1);
    let ct = paused_current_thread();
    ct.block_on(async {
        {
            let _entered = mt.handle().enter();
            prime_with_a_far_deadline();
        }
        // A breaker forced open for an hour on the paused clock, which then moves two
        // hours on.
        let (mut svc, handle, calls) = breaker(CircuitBreakerLayer::builder());
        handle.open_for(HOUR);
        tokio::time::advance(2 * HOUR).await;
        assert_probe_after_the_hold(call(&mut svc, 1), "back on the paused clock");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    });
}

/// The same thread, a breaker opened by failures with a cooldown in time (reason Open).
#[test]
fn a_cooldown_in_time_on_a_paused_test_thread_ends_when_the_paused_clock_passes_it() {
    let mt = multi_thread(1);
    let ct = paused_current_thread();
    ct.block_on(async {
        {
            let _entered = mt.handle().enter();
            prime_with_a_far_deadline();
        }
        let (mut svc, handle, _) = breaker(
            CircuitBreakerLayer::builder()
                .failure_threshold(1)
                .cooldown(Cooldown::Time(HOUR)),
        );
        assert!(
            call(&mut svc, FAIL).is_ok(),
            "a failure the classifier counts"
        );
        assert_eq!(handle.state(), State::Open);
        tokio::time::advance(2 * HOUR).await;
        match call(&mut svc, 1) {
            Ok(answer) => assert_eq!(answer.source(), Source::Probe),
            Err(error) => panic!("cooldown over on tokio's clock, but skipped: {error}"),
        }
    });
}

/// The claim that matters most: the wrapped service is never called after a half-open's
/// dwell limit passed between `poll_ready` and `call`, also on a paused test thread that
/// once ran a call under a multi-thread handle: a probe reserved before the limit and
/// called two hours after it must not reach the service.
#[test]
fn a_probe_reserved_before_the_dwell_limit_is_not_sent_after_it_on_a_paused_test_thread() {
    probe_across_the_dwell_limit(true);
}

/// Control: the same without the earlier call under the multi-thread handle holds.
#[test]
fn control_a_probe_reserved_before_the_dwell_limit_is_not_sent_after_it() {
    probe_across_the_dwell_limit(false);
}

fn probe_across_the_dwell_limit(primed_under_a_multi_thread_handle: bool) {
    let mt = multi_thread(1);
    let ct = paused_current_thread();
    ct.block_on(async {
        if primed_under_a_multi_thread_handle {
            let _entered = mt.handle().enter();
            prime_with_a_far_deadline();
        }
        let (mut svc, handle, calls) = breaker(
            CircuitBreakerLayer::builder()
                .failure_threshold(1)
                // In calls, so that reaching half-open needs no deadline decided; two,
                // so that the call decided again after the dwell limit re-opened the
                // breaker is skipped rather than made the next half-open's probe.
                .cooldown(Cooldown::Calls(2))
                .max_half_open_dwell(Some(HOUR)),
        );
        assert!(call(&mut svc, FAIL).is_ok());
        assert_eq!(handle.state(), State::Open);
        assert!(
            call(&mut svc, 1).is_err(),
            "the first of the cooldown's two calls"
        );
        poll_ready(&mut svc); // the probe is reserved: half-open, dwell limit in an hour
        assert_eq!(handle.state(), State::HalfOpen);
        let made = calls.load(Ordering::SeqCst);
        tokio::time::advance(2 * HOUR).await;
        let result = call_now(&mut svc, 1);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            made,
            "the probe reached the service two hours after its dwell limit ({:?})",
            result
                .as_ref()
                .map(Answer::source)
                .map_err(ToString::to_string)
        );
        let error = result.expect_err("the dwell limit re-opened the breaker");
        let rejected = error.downcast_ref::<Rejected>().expect("rejected");
        assert_eq!(rejected.reason(), Reason::Open);
    });
}

/// A thread that was a multi-thread runtime's worker goes back to the blocking pool when
/// `block_in_place` hands its core to another thread; a later `spawn_blocking` task on it
/// that drives a paused current-thread runtime (a common way to run `!Send` futures) must
/// be decided on that runtime's paused clock.
#[test]
fn a_former_worker_reused_by_spawn_blocking_for_a_paused_runtime_decides_on_the_paused_clock() {
    let mt = multi_thread(1);
    let outcome = mt.block_on(async {
        // On the one worker: a call, then hand its core to another thread.
        let worker = tokio::spawn(async {
            prime_with_a_far_deadline();
            let me = std::thread::current().id();
            tokio::task::block_in_place(|| {
                // Wait, without the wall clock, until another thread runs the runtime's
                // tasks: it has taken the core.
                let (tx, rx) = std::sync::mpsc::channel();
                tokio::spawn(async move { tx.send(std::thread::current().id()).unwrap() });
                let other = rx.recv().expect("another worker");
                assert_ne!(other, me);
            });
            me
        })
        .await
        .expect("task");
        // The former worker is idle in the blocking pool once its loop notices it has no
        // core; find it (a few tries: it gets there right after the task above ended).
        for _ in 0..1_000 {
            let result = tokio::task::spawn_blocking(move || {
                if std::thread::current().id() != worker {
                    return None;
                }
                let ct = paused_current_thread();
                Some(ct.block_on(async {
                    let (mut svc, handle, _) = breaker(CircuitBreakerLayer::builder());
                    handle.open_for(HOUR);
                    tokio::time::advance(2 * HOUR).await;
                    call(&mut svc, 1)
                        .map(|answer| answer.source())
                        .map_err(|e| e.to_string())
                }))
            })
            .await
            .expect("blocking task");
            if let Some(result) = result {
                return Some(result);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        None
    });
    match outcome {
        None => eprintln!("the former worker was not reused by spawn_blocking: nothing shown"),
        Some(result) => assert_eq!(
            result,
            Ok(Source::Probe),
            "a paused runtime on a former worker decided on the coarse clock"
        ),
    }
}

/// The documented rule again: a task of a multi-thread runtime that drives a paused
/// current-thread runtime inside `block_in_place` runs on the system's clock throughout.
/// A hold set there for an hour is on the system's clock, and is still on after the
/// paused clock moves two hours on; a hold that ended on the system's clock has ended.
#[test]
fn a_multi_thread_task_driving_a_paused_runtime_in_block_in_place_decides_on_the_system_clock() {
    let mt = multi_thread(1);
    let (held, ended) = mt.block_on(async {
        tokio::spawn(async {
            prime_with_a_far_deadline();
            tokio::task::block_in_place(|| {
                let ct = paused_current_thread();
                ct.block_on(async {
                    let (mut svc, handle, _) = breaker(CircuitBreakerLayer::builder());
                    handle.open_for(HOUR);
                    tokio::time::advance(2 * HOUR).await;
                    let held = call(&mut svc, 1).map(|answer| answer.source());
                    handle.open_until(Instant::now());
                    let ended = call(&mut svc, 1).map(|answer| answer.source());
                    (
                        held.map_err(|e| e.to_string()),
                        ended.map_err(|e| e.to_string()),
                    )
                })
            })
        })
        .await
        .expect("task")
    });
    assert!(
        held.is_err(),
        "on the system's clock the hour's hold is on: {held:?}"
    );
    assert_eq!(ended, Ok(Source::Probe));
}

/// Held: a paused current-thread runtime and a multi-thread runtime side by side in one
/// process, each on its own threads, every decision as its own clock says. The
/// multi-thread side decides deadlines an hour ahead (skipped) and a nanosecond behind
/// (probe) on the real clock; the paused side opens for an hour and moves two on.
#[test]
fn a_paused_runtime_and_a_multi_thread_runtime_side_by_side_each_decide_on_their_clock() {
    let mt = multi_thread(2);
    let threads: Vec<_> = (0..4)
        .map(|i| {
            std::thread::spawn(move || {
                let ct = paused_current_thread();
                ct.block_on(async move {
                    for round in 0..50 {
                        let (mut svc, handle, _) = breaker(CircuitBreakerLayer::builder());
                        handle.open_for(HOUR);
                        let skipped = call(&mut svc, 1).expect_err("an hour ahead");
                        assert!(skipped.downcast_ref::<Rejected>().is_some());
                        // spawn_blocking and a task of this runtime see the same clock.
                        let blocking = tokio::task::spawn_blocking(move || {
                            let e = call(&mut svc, 1).expect_err("still an hour ahead");
                            assert!(e.downcast_ref::<Rejected>().is_some());
                            svc
                        });
                        let mut svc = blocking.await.expect("blocking");
                        tokio::time::advance(2 * HOUR).await;
                        let answer = tokio::spawn(async move { call(&mut svc, 1) })
                            .await
                            .expect("task");
                        assert_probe_after_the_hold(answer, &format!("thread {i} round {round}"));
                    }
                });
            })
        })
        .collect();
    mt.block_on(async {
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                tokio::spawn(async {
                    for _ in 0..200 {
                        let (mut svc, handle, _) = breaker(CircuitBreakerLayer::builder());
                        handle.open_until(tokio_now() + HOUR);
                        assert!(call(&mut svc, 1).is_err());
                        let passed = tokio_now()
                            .checked_sub(Duration::from_nanos(1))
                            .expect("past");
                        handle.open_until(passed);
                        let answer = call(&mut svc, 1).expect("deadline passed: probe");
                        assert_eq!(answer.source(), Source::Probe);
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("task");
        }
    });
    for thread in threads {
        thread.join().expect("paused thread");
    }
}

/// Held: deadlines at and around the proof's 50 ms margin, before the anchor of the
/// breaker's clock, and a century ahead, decided outside any runtime against the clock
/// read around each call.
#[test]
fn deadlines_around_the_margin_and_far_off_are_decided_as_the_clock_read_around_says() {
    let (mut svc, handle, _) = breaker(CircuitBreakerLayer::builder());
    let offsets_ns: [i128; 14] = [
        -(100 * 365 * 24 * 3_600 * 1_000_000_000),
        -50_000_000,
        -1,
        0,
        49_999_999,
        50_000_000,
        50_000_001,
        50_100_000,
        54_000_000,
        58_000_000,
        60_000_000,
        100_000_000,
        365 * 24 * 3_600 * 1_000_000_000,
        200 * 365 * 24 * 3_600 * 1_000_000_000,
    ];
    for _ in 0..200 {
        for offset in offsets_ns {
            let read = tokio_now();
            let magnitude = Duration::from_nanos(offset.unsigned_abs() as u64);
            let deadline = if offset >= 0 {
                read.checked_add(magnitude).unwrap_or(read)
            } else {
                match read.checked_sub(magnitude) {
                    Some(at) => at,
                    None => continue,
                }
            };
            handle.open_until(deadline);
            let before = tokio_now();
            let result = call(&mut svc, 1);
            let after = tokio_now();
            match result {
                Err(error) => {
                    let rejected = error.downcast_ref::<Rejected>().expect("rejected");
                    assert_eq!(rejected.reason(), Reason::ForcedOpen);
                    assert!(before < deadline, "{offset}: skipped past its deadline");
                }
                Ok(answer) => {
                    assert_eq!(answer.source(), Source::Probe);
                    assert!(after >= deadline, "{offset}: probed before its deadline");
                }
            }
            handle.reset();
        }
    }
}
