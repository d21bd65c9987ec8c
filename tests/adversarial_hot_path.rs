//! Adversarial tests of the call's hot path (a permit taken at `call` without the clock
//! unless a half-open's deadline may have passed, the response future's drop, the start
//! of a timed call) and of the counts spread under contention.
//!
//! Claims attacked: the wrapped service is never called while open or killed, or after a
//! half-open's dwell limit passed between `poll_ready` and `call`; a dropped future or
//! permit still frees its probe slot and counts as cancelled or abandoned; panics are
//! recorded as failures; counts add up at every instant and nothing is lost under any
//! contention.

mod common;
use common::counts::assert_counts_add_up;

use std::future::Future;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tower::{service_fn, Layer, Service};
use tower_circuit_breaker::error::{BoxError, CallError, Rejected};
use tower_circuit_breaker::snapshot::Counts;
use tower_circuit_breaker::Mode as BreakerMode;
use tower_circuit_breaker::{
    Answer, Builder, CircuitBreakerHandle, Cooldown, Mode, Outcome, Reason, Source, State,
};

const OK: u64 = 0;
const FAIL: u64 = 1;
const HANG: u64 = 3;

type Fut = Pin<Box<dyn Future<Output = Result<u64, io::Error>> + Send>>;

/// A service that counts its calls.
fn counting(
    calls: Arc<AtomicUsize>,
) -> impl Service<u64, Response = u64, Error = io::Error, Future = Fut> + Clone + std::fmt::Debug {
    service_fn(move |request: u64| -> Fut {
        calls.fetch_add(1, Ordering::SeqCst);
        match request {
            FAIL => Box::pin(async { Err(io::Error::other("down")) }),
            HANG => Box::pin(std::future::pending()),
            n => Box::pin(async move { Ok(n) }),
        }
    })
}

// ---------------------------------------------------------------------------------------
// A person's act between `poll_ready` and `call`, from every starting state.

#[derive(Debug, Clone, Copy, PartialEq)]
enum Start {
    Closed,
    /// Half-open with a 30 s dwell limit; `poll_ready` reserves the probe.
    HalfOpen,
    /// Half-open with no dwell limit.
    HalfOpenNoDwell,
    /// Open (cooldown 10 s) in observe-only mode: calls are made as shadows.
    ObserveOnlyOpen,
    Disabled,
}

/// A typed breaker that one failure opens for ten seconds, with this half-open dwell limit.
fn one_failure_opens(
    dwell: Option<Duration>,
) -> tower_circuit_breaker::CircuitBreakerLayer<tower_circuit_breaker::fallback::TypedErrors> {
    Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(Duration::from_secs(10)))
        .max_half_open_dwell(dwell)
        .build()
        .expect("valid")
        .with_typed_errors()
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Act {
    Nothing,
    Kill,
    ForceOpen,
    OpenFor,
    HoldOpen,
    Reset,
    AllowProbe,
    Mode(Mode),
    /// Time passes the half-open's dwell limit (31 s), and nothing looks.
    PastDwell,
    /// Time passes the dwell limit and a snapshot looks.
    PastDwellLooked,
}

fn start(
    kind: Start,
) -> (
    impl Service<u64, Response = Answer<u64>, Error = CallError> + Clone,
    CircuitBreakerHandle,
    Arc<AtomicUsize>,
) {
    let dwell = match kind {
        Start::HalfOpenNoDwell => None,
        _ => Some(Duration::from_secs(30)),
    };
    let layer = one_failure_opens(dwell);
    let handle = layer.handle();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = layer.layer(counting(calls.clone()));
    (svc, handle, calls)
}

fn drive<S>(svc: &mut S, request: u64) -> Result<Answer<u64>, CallError>
where
    S: Service<u64, Response = Answer<u64>, Error = CallError>,
{
    let mut cx = Context::from_waker(Waker::noop());
    assert!(matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))));
    match pin!(svc.call(request)).poll(&mut cx) {
        Poll::Ready(result) => result,
        Poll::Pending => panic!("pending"),
    }
}

async fn act(handle: &CircuitBreakerHandle, act: Act) {
    let in_5s = tokio::time::Instant::now().into_std() + Duration::from_secs(5);
    match act {
        Act::Nothing => {}
        Act::Kill => handle.kill_switch().kill(),
        Act::ForceOpen => handle.force_open(),
        Act::OpenFor => handle.open_for(Duration::from_secs(5)),
        Act::HoldOpen => {
            handle.hold_open_until(in_5s);
        }
        Act::Reset => handle.reset(),
        Act::AllowProbe => {
            handle.allow_probe();
        }
        Act::Mode(mode) => handle.set_mode(mode),
        Act::PastDwell => tokio::time::advance(Duration::from_secs(31)).await,
        Act::PastDwellLooked => {
            tokio::time::advance(Duration::from_secs(31)).await;
            let _ = handle.snapshot();
        }
    }
}

/// Whether the call reserved in `start` and called after `act` may reach the service,
/// and whether it must. `None`: either is right (a new decision may make it).
fn expected(start: Start, act: Act) -> Option<bool> {
    use Act::*;
    if act == Kill {
        return Some(false);
    }
    match start {
        // Pass-through: every call made but a killed one.
        Start::Disabled => Some(true),
        Start::ObserveOnlyOpen => Some(match act {
            Mode(BreakerMode::Enabled) => false,
            // Still observe-only: every call made (a probe, a shadow or a call).
            _ => true,
        }),
        Start::Closed => Some(!matches!(act, ForceOpen | OpenFor | HoldOpen)),
        Start::HalfOpen | Start::HalfOpenNoDwell => Some(match act {
            ForceOpen | OpenFor => false,
            PastDwell | PastDwellLooked => start == Start::HalfOpenNoDwell,
            // A hint leaves a half-open as it is; a reset closes it; a probe allowed
            // changes nothing here; a mode change re-decides (observe-only or disabled:
            // made).
            _ => true,
        }),
    }
}

async fn reach(
    kind: Start,
) -> (
    impl Service<u64, Response = Answer<u64>, Error = CallError> + Clone,
    CircuitBreakerHandle,
    Arc<AtomicUsize>,
) {
    let (mut svc, handle, calls) = start(kind);
    match kind {
        Start::Closed => {}
        Start::HalfOpen | Start::HalfOpenNoDwell => {
            let _ = drive(&mut svc, FAIL);
            tokio::time::advance(Duration::from_secs(10)).await;
        }
        Start::ObserveOnlyOpen => {
            handle.set_mode(Mode::ObserveOnly);
            let _ = drive(&mut svc, FAIL);
            assert_eq!(handle.state(), State::Open);
        }
        Start::Disabled => handle.set_mode(Mode::Disabled),
    }
    (svc, handle, calls)
}

#[tokio::test(start_paused = true)]
async fn a_persons_act_between_poll_ready_and_call_is_obeyed_from_every_state() {
    let starts = [
        Start::Closed,
        Start::HalfOpen,
        Start::HalfOpenNoDwell,
        Start::ObserveOnlyOpen,
        Start::Disabled,
    ];
    let acts = [
        Act::Nothing,
        Act::Kill,
        Act::ForceOpen,
        Act::OpenFor,
        Act::HoldOpen,
        Act::Reset,
        Act::AllowProbe,
        Act::Mode(Mode::Enabled),
        Act::Mode(Mode::ObserveOnly),
        Act::Mode(Mode::Disabled),
        Act::PastDwell,
        Act::PastDwellLooked,
    ];
    let mut failures = Vec::new();
    for kind in starts {
        for a in acts {
            let (mut svc, handle, calls) = reach(kind).await;
            let before = handle.snapshot().counts;
            let mut cx = Context::from_waker(Waker::noop());
            assert!(matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))));
            let made_before = calls.load(Ordering::SeqCst);
            act(&handle, a).await;
            let result = match pin!(svc.call(OK)).poll(&mut cx) {
                Poll::Ready(result) => result,
                Poll::Pending => panic!("pending"),
            };
            let made = calls.load(Ordering::SeqCst) > made_before;
            let snapshot = handle.snapshot();
            let c = snapshot.counts;
            let what = format!(
                "{kind:?} then {a:?}: made {made}, {:?}, {:?}",
                result
                    .as_ref()
                    .map(Answer::source)
                    .map_err(|e| e.to_string()),
                snapshot.state
            );
            assert_counts_add_up(&c);
            if std::env::var_os("REVIEW_TRACE").is_some() {
                eprintln!("{what}");
            }
            // The call is counted once, whether it was decided again or not (disabled mode
            // counts nothing).
            if kind != Start::Disabled && a != Act::Mode(Mode::Disabled) {
                assert_eq!(c.arrived - before.arrived, 1, "{what}: {before:?} -> {c:?}");
            }
            assert_eq!(
                snapshot.probes_in_flight, 0,
                "{what}: a probe slot is still held"
            );
            if let Some(expect) = expected(kind, a) {
                if made != expect {
                    failures.push(what.clone());
                }
            }
            // Made and answered by the service, or not made and rejected.
            match (&result, made) {
                (Ok(answer), true) => assert!(!answer.is_fallback(), "{what}"),
                (Err(CallError::Rejected(_)), false) => {}
                _ => panic!("{what}"),
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A probe whose response future is dropped, and one whose reservation is dropped, each
/// frees the one slot: the next call is the probe, in every order, with a dwell limit and
/// without.
#[tokio::test(start_paused = true)]
async fn dropped_probe_futures_and_reservations_free_the_slot_and_count_once() {
    for dwell in [Some(Duration::from_secs(30)), None] {
        let calls = Arc::new(AtomicUsize::new(0));
        let layer = one_failure_opens(dwell);
        let handle = layer.handle();
        let mut svc = layer.layer(counting(calls.clone()));
        let _ = drive(&mut svc, FAIL);
        tokio::time::advance(Duration::from_secs(10)).await;
        let mut cx = Context::from_waker(Waker::noop());
        for round in 0..20 {
            let before = handle.snapshot().counts;
            let mut holder = svc.clone();
            assert!(holder.poll_ready(&mut cx).is_ready());
            // The slot is taken: another call is skipped as half-open full.
            match drive(&mut svc, OK) {
                Err(CallError::Rejected(r)) => assert_eq!(r.reason(), Reason::HalfOpenFull),
                other => panic!("round {round}: {other:?}"),
            }
            if round % 2 == 0 {
                drop(holder); // the reservation
            } else {
                let future = holder.call(HANG);
                let mut future = Box::pin(future);
                assert!(future.as_mut().poll(&mut cx).is_pending());
                drop(future); // the call, under way
            }
            let c = handle.snapshot().counts;
            assert_counts_add_up(&c);
            assert_eq!(c.arrived, before.arrived + 2, "round {round}");
            assert_eq!(
                c.abandoned + c.cancelled,
                before.abandoned + before.cancelled + 1
            );
            assert_eq!(handle.snapshot().probes_in_flight, 0, "round {round}");
        }
        // The slot is free: the next call is the probe, and closes the breaker.
        let answer = drive(&mut svc, OK).expect("the probe");
        assert_eq!(answer.source(), Source::Probe);
        assert_eq!(handle.state(), State::Closed);
    }
}

/// Panics in the wrapped service's `poll_ready`, `call` and future, with typed errors,
/// as a probe: each is a failure, the slot freed, the breaker re-opened.
#[tokio::test(start_paused = true)]
async fn a_panicking_probe_is_a_failure_with_typed_errors_wherever_it_panics() {
    #[derive(Clone)]
    struct Panicky {
        at: Arc<AtomicUsize>,
    }
    impl Service<u64> for Panicky {
        type Response = u64;
        type Error = io::Error;
        type Future = Fut;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
            if self.at.load(Ordering::SeqCst) == 1 {
                panic!("poll_ready");
            }
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, request: u64) -> Fut {
            match self.at.load(Ordering::SeqCst) {
                2 => panic!("call"),
                3 => Box::pin(async { panic!("future") }),
                _ if request == FAIL => Box::pin(async { Err(io::Error::other("down")) }),
                _ => Box::pin(async move { Ok(request) }),
            }
        }
    }
    for at in 1..=3 {
        let switch = Arc::new(AtomicUsize::new(0));
        let layer = Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(Duration::from_secs(10)))
            .build()
            .expect("valid")
            .with_typed_errors();
        let handle = layer.handle();
        let mut svc = layer.layer(Panicky { at: switch.clone() });
        let _ = drive(&mut svc, FAIL);
        tokio::time::advance(Duration::from_secs(10)).await;
        switch.store(at, Ordering::SeqCst);
        let panicked = catch_unwind(AssertUnwindSafe(|| drive(&mut svc, OK)));
        assert!(panicked.is_err(), "at {at}: the panic reaches the caller");
        let s = handle.snapshot();
        assert_counts_add_up(&s.counts);
        assert_eq!(
            s.state,
            State::Open,
            "at {at}: the probe's panic re-opened it"
        );
        assert_eq!(s.counts.failures, 2, "at {at}");
        assert_eq!(s.counts.probes, 1, "at {at}");
        assert_eq!(s.probes_in_flight, 0, "at {at}");
    }
}

// ---------------------------------------------------------------------------------------
// Counts under contention.

/// Threads skipping at a forced-open breaker and succeeding at a closed one, all at once,
/// while another thread takes snapshots: every snapshot adds up and no count goes back;
/// the totals are exact.
#[test]
fn counts_under_contention_add_up_in_every_snapshot_and_lose_nothing() {
    const THREADS: usize = 8;
    const CALLS: u64 = 20_000;
    let open_layer = Builder::new().name("open").build().expect("valid");
    open_layer.handle().force_open();
    let closed_layer = Builder::new().name("closed").build().expect("valid");
    let (open_handle, closed_handle) = (open_layer.handle(), closed_layer.handle());
    let calls = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (open_handle, closed_handle, done) =
            (open_handle.clone(), closed_handle.clone(), done.clone());
        std::thread::spawn(move || {
            let mut last = [Counts::default(), Counts::default()];
            let mut looks = 0u64;
            while !done.load(Ordering::SeqCst) || looks < 10 {
                for (i, handle) in [&open_handle, &closed_handle].into_iter().enumerate() {
                    let c = handle.snapshot().counts;
                    assert_counts_add_up(&c);
                    let p = last[i];
                    for (now, then) in [
                        (c.arrived, p.arrived),
                        (c.made, p.made),
                        (c.successes, p.successes),
                        (c.skipped_forced_open, p.skipped_forced_open),
                    ] {
                        assert!(now >= then, "a count went back: {p:?} -> {c:?}");
                    }
                    last[i] = c;
                }
                looks += 1;
            }
        })
    };
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            let mut open = open_layer.clone().layer(counting(calls.clone()));
            let mut closed = closed_layer.clone().layer(counting(calls.clone()));
            scope.spawn(move || {
                let mut cx = Context::from_waker(Waker::noop());
                for i in 0..CALLS {
                    let svc: &mut dyn FnMut(&mut Context<'_>) -> bool = if i % 2 == 0 {
                        &mut |cx| {
                            assert!(open.poll_ready(cx).is_ready());
                            matches!(pin!(open.call(OK)).poll(cx), Poll::Ready(Err(_)))
                        }
                    } else {
                        &mut |cx| {
                            assert!(closed.poll_ready(cx).is_ready());
                            matches!(pin!(closed.call(OK)).poll(cx), Poll::Ready(Ok(_)))
                        }
                    };
                    assert!(svc(&mut cx));
                }
            });
        }
    });
    done.store(true, Ordering::SeqCst);
    watcher.join().expect("every snapshot added up");
    let per = THREADS as u64 * CALLS / 2;
    let open = open_handle.snapshot().counts;
    let closed = closed_handle.snapshot().counts;
    assert_eq!(
        (open.arrived, open.skipped_forced_open, open.made),
        (per, per, 0)
    );
    assert_eq!(
        (closed.arrived, closed.successes, closed.made),
        (per, per, per)
    );
    assert_eq!(calls.load(Ordering::SeqCst) as u64, per);
}

/// Many tasks on a multi-thread runtime call one breaker while a person kills, revives,
/// forces open, resets and switches modes; some tasks drop their reservations, some their
/// futures under way. Each task keeps its own account of what it saw; the breaker's
/// counts must be exactly the sum, and the service never called while the kill switch
/// was on for the whole call.
#[test]
fn racing_callers_and_a_person_are_counted_exactly() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = Builder::new()
        .failure_threshold(3)
        .cooldown(Cooldown::Calls(50))
        .half_open_probes(2)
        .build()
        .expect("valid")
        .with_typed_errors();
    let handle = layer.handle();
    #[derive(Default)]
    struct Seen {
        arrived: AtomicU64,
        ok: AtomicU64,
        failed: AtomicU64,
        rejected: [AtomicU64; 4],
        abandoned: AtomicU64,
        skipped_unused: AtomicU64,
        cancelled: AtomicU64,
    }
    let seen = Arc::new(Seen::default());
    let stop = Arc::new(AtomicBool::new(false));
    runtime.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..32u64 {
            let mut svc = layer.clone().layer(counting(calls.clone()));
            let seen = seen.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..2_000u64 {
                    let mut step = || {
                        let mut cx = Context::from_waker(Waker::noop());
                        seen.arrived.fetch_add(1, Ordering::Relaxed);
                        let kind = (t * 7 + i) % 23;
                        if kind == 0 {
                            // A decision dropped unused: a reservation (abandoned) or a skip
                            // (counted when decided).
                            let mut clone = svc.clone();
                            assert!(clone.poll_ready(&mut cx).is_ready());
                            let reserved = holds_a_permit(&clone);
                            drop(clone);
                            if reserved {
                                seen.abandoned.fetch_add(1, Ordering::Relaxed);
                            } else {
                                seen.skipped_unused.fetch_add(1, Ordering::Relaxed);
                            }
                            return;
                        }
                        let request = if kind % 5 == 1 {
                            FAIL
                        } else if kind == 2 {
                            HANG
                        } else {
                            OK
                        };
                        assert!(svc.poll_ready(&mut cx).is_ready());
                        let mut future = Box::pin(svc.call(request));
                        match future.as_mut().poll(&mut cx) {
                            Poll::Ready(Ok(_)) => seen.ok.fetch_add(1, Ordering::Relaxed),
                            Poll::Ready(Err(CallError::Service(_))) => {
                                seen.failed.fetch_add(1, Ordering::Relaxed)
                            }
                            Poll::Ready(Err(CallError::Rejected(r))) => seen.rejected
                                [reason_index(r.reason())]
                            .fetch_add(1, Ordering::Relaxed),
                            Poll::Ready(Err(_)) => unreachable!(),
                            Poll::Pending => {
                                drop(future);
                                seen.cancelled.fetch_add(1, Ordering::Relaxed)
                            }
                        };
                    };
                    step();
                    if i % 16 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            }));
        }
        let person = {
            let handle = handle.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    match n % 9 {
                        0 => handle.kill_switch().kill(),
                        1 => handle.kill_switch().revive(),
                        2 => handle.force_open(),
                        3 => handle.reset(),
                        4 => handle.set_mode(Mode::ObserveOnly),
                        5 => handle.set_mode(Mode::Enabled),
                        6 => {
                            handle.allow_probe();
                        }
                        7 => handle.open_for(Duration::from_millis(1)),
                        _ => handle.reset(),
                    }
                    n += 1;
                    tokio::task::yield_now().await;
                }
            })
        };
        for task in tasks {
            task.await.expect("task");
        }
        stop.store(true, Ordering::Relaxed);
        person.await.expect("person");
    });
    let c = handle.snapshot().counts;
    assert_counts_add_up(&c);
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let rejected: u64 = seen.rejected.iter().map(get).sum();
    // Every call the tasks made to the end was answered by the service or rejected; a
    // reservation dropped was either abandoned (a call) or a skip (counted when decided).
    assert_eq!(
        c.successes + c.failures + c.ignored + c.late,
        get(&seen.ok) + get(&seen.failed),
        "{c:?}"
    );
    assert_eq!(c.cancelled, get(&seen.cancelled), "{c:?}");
    assert_eq!(c.abandoned, get(&seen.abandoned), "{c:?}");
    assert_eq!(c.skipped(), rejected + get(&seen.skipped_unused), "{c:?}");
    assert_eq!(c.arrived, get(&seen.arrived), "{c:?}");
    assert_eq!(
        c.made,
        calls.load(Ordering::SeqCst) as u64,
        "every call that reached the service ended and was counted"
    );
}

fn reason_index(reason: Reason) -> usize {
    match reason {
        Reason::Open => 0,
        Reason::HalfOpenFull => 1,
        Reason::Killed => 2,
        Reason::ForcedOpen => 3,
        _ => unreachable!(),
    }
}

/// Whether the service holds a reserved call (a permit) rather than a skip: its Debug
/// output says.
fn holds_a_permit<S: std::fmt::Debug>(svc: &S) -> bool {
    format!("{svc:?}").contains("permit: Some")
}

/// Skips counted before and after a spread, from threads that start and end over and
/// over (thread-local groups made and dropped), all counted.
#[test]
fn skips_from_short_lived_threads_are_all_counted() {
    let layer = Builder::new().build().expect("valid");
    layer.handle().force_open();
    let handle = layer.handle();
    let mut total = 0u64;
    for round in 0..50u64 {
        std::thread::scope(|scope| {
            for _ in 0..4 {
                let mut svc = layer.clone().layer(counting(Arc::new(AtomicUsize::new(0))));
                scope.spawn(move || {
                    let mut cx = Context::from_waker(Waker::noop());
                    for _ in 0..100 {
                        assert!(svc.poll_ready(&mut cx).is_ready());
                        let result: Poll<Result<Answer<u64>, BoxError>> =
                            pin!(svc.call(OK)).poll(&mut cx);
                        assert!(matches!(result, Poll::Ready(Err(ref e)) if e.is::<Rejected>()));
                    }
                });
            }
        });
        total += 400;
        let c = handle.snapshot().counts;
        assert_eq!(
            (c.arrived, c.skipped_forced_open),
            (total, total),
            "round {round}"
        );
    }
}

#[allow(dead_code)]
fn _outcome(_: Outcome) {}

/// A timed call (slow-call rule) on a paused clock moved on past the 292 years a
/// one-word instant keeps: a call that takes no time at all is not a slow call. (docs/guarantees.md:
/// settings work "at any time a clock can show (a paused clock moved on by
/// centuries included)".)
#[tokio::test(start_paused = true)]
async fn a_call_that_takes_no_time_is_not_slow_on_a_clock_moved_on_by_centuries() {
    let year = Duration::from_secs(365 * 24 * 3600);
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = Builder::new()
        .failure_threshold(1)
        .slow_call_threshold(Duration::from_secs(1))
        .build()
        .expect("valid")
        .with_typed_errors();
    let handle = layer.handle();
    let mut svc = layer.layer(counting(calls));
    for centuries in 1..=4 {
        tokio::time::advance(year * 100).await;
        let answer = drive(&mut svc, OK).expect("closed");
        assert!(!answer.is_failure(), "{centuries} centuries on: {answer:?}");
        let s = handle.snapshot();
        assert_eq!(
            (s.state, s.counts.failures),
            (State::Closed, 0),
            "{centuries} centuries on: a call of no time counted as slow: {:?}",
            s.last_failure
        );
    }
}
