//! An adversary's suite for the core breaker: the layer, its service and future, the
//! handle, the kill switch, observers and events, modes and snapshots. Each test names
//! the behaviour it checks; where it found a defect it is ignored with the defect named.
//! Paused `tokio::time` wherever time matters; the multi-thread tests check invariants,
//! never timings.

mod common;
use common::counts::assert_counts_add_up;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
use tower_circuit_breaker::error::{ConfigError, Rejected};
use tower_circuit_breaker::{
    Answer, Backoff, Builder, Cause, CircuitBreaker, CircuitBreakerHandle, CircuitBreakerLayer,
    Cooldown, Event, Failure, KillSwitch, Mode, NextProbe, Outcome, Reason, Source, State,
    Transition,
};

/// What the wrapped service is asked to do.
enum Req {
    Ok,
    Fail,
    /// Answers when told: `true` succeeds, `false` or a dropped sender fails.
    Held(oneshot::Receiver<bool>),
    /// Panics in `call`'s future.
    Panic,
}

type Inner = tower::util::BoxCloneService<Req, u32, BoxError>;
type Svc = CircuitBreaker<Inner>;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

async fn advance(by: Duration) {
    tokio::time::advance(by).await;
}

/// The wrapped service, counting the calls that reach it.
fn inner(calls: Arc<AtomicUsize>) -> Inner {
    tower::util::BoxCloneService::new(service_fn(move |req: Req| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move {
            match req {
                Req::Ok => Ok(1),
                Req::Fail => Err(BoxError::from("down")),
                Req::Held(done) => match done.await {
                    Ok(true) => Ok(1),
                    _ => Err(BoxError::from("down")),
                },
                Req::Panic => panic!("the service's future panicked"),
            }
        }
    }))
}

/// A service that answers each request with its own number, at once.
type Echo = tower::util::BoxCloneService<u32, u32, BoxError>;

fn echo() -> Echo {
    tower::util::BoxCloneService::new(service_fn(|n: u32| async move { Ok::<u32, BoxError>(n) }))
}

struct Rig {
    svc: Svc,
    handle: CircuitBreakerHandle,
    calls: Arc<AtomicUsize>,
}

fn rig(builder: Builder) -> Rig {
    let layer = builder.name("core").build().expect("valid settings");
    let handle = layer.handle();
    let calls = Arc::new(AtomicUsize::new(0));
    Rig {
        svc: layer.layer(inner(calls.clone())),
        handle,
        calls,
    }
}

/// A breaker that opens on its first failure and whose next call is the probe, with no
/// dwell limit: a probe may hang as long as a test likes.
fn rig_probing_next_call() -> Rig {
    rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1))
        .max_half_open_dwell(None))
}

/// A call running on its own task, and the sender that says how it ends.
type HeldCall = (
    oneshot::Sender<bool>,
    JoinHandle<Result<Answer<u32>, BoxError>>,
);

impl Rig {
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// One call that the service fails (its own error, not a rejection).
    async fn fail(&mut self) {
        assert_eq!(send(&mut self.svc, Req::Fail).await, Err(None));
    }

    /// Starts a call on its own task that hangs at the service until its sender says how
    /// it ends (`true` succeeds, `false` or a dropped sender fails); returns once the
    /// call is at the service.
    async fn start_held(&mut self) -> HeldCall {
        let (tx, rx) = oneshot::channel();
        let call = tokio::spawn(self.svc.ready().await.unwrap().call(Req::Held(rx)));
        tokio::task::yield_now().await;
        (tx, call)
    }
}

/// `Ok(source)` if the call was made and answered, the rejection if it was skipped,
/// `Err(None)` for the service's own error.
async fn send(svc: &mut Svc, req: Req) -> Result<Source, Option<Reason>> {
    match svc.ready().await.unwrap().call(req).await {
        Ok(answer) => Ok(answer.source()),
        Err(error) => Err(error.downcast_ref::<Rejected>().map(Rejected::reason)),
    }
}

/// Every transition the receiver has.
fn drain(rx: &mut tokio::sync::broadcast::Receiver<Transition>) -> Vec<Transition> {
    let mut out = Vec::new();
    while let Ok(t) = rx.try_recv() {
        out.push(t);
    }
    out
}

fn steps(ts: &[Transition]) -> Vec<(State, State, Cause)> {
    ts.iter().map(|t| (t.from, t.to, t.cause)).collect()
}

/// A chain of transitions is continuous (each starts where the last ended) and its
/// generations grow.
fn assert_chain(ts: &[Transition]) {
    for pair in ts.windows(2) {
        assert_eq!(pair[0].to, pair[1].from, "continuous: {:?}", steps(ts));
        assert!(
            pair[0].generation < pair[1].generation,
            "generations grow: {ts:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// The half-open dwell limit and reservations
// ---------------------------------------------------------------------------------------

/// A probe reserved in `poll_ready` and used after its half-open's dwell limit: the
/// breaker re-opened at the deadline "even when nobody looks" (docs/guarantees.md), so the stale
/// reservation must be turned away whether or not anyone looked in between, as it is when
/// someone did (`tests/timing.rs`, `a_probe_reservation_never_used_is_reclaimed_*`).
#[tokio::test(start_paused = true)]
async fn a_probe_reserved_before_the_dwell_limit_is_not_sent_after_it_even_unlooked() {
    let mut r = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(10)))
        .max_half_open_dwell(Some(secs(5))));
    r.fail().await;
    advance(secs(10)).await;
    let mut sitter = r.svc.clone();
    sitter.ready().await.unwrap();
    advance(secs(5)).await;
    // Nobody looks: no snapshot, no other call.
    let answer = sitter.call(Req::Ok).await;
    let rejected = answer
        .err()
        .and_then(|e| e.downcast_ref::<Rejected>().map(Rejected::reason));
    assert_eq!(
        (rejected, r.calls()),
        (Some(Reason::Open), 1),
        "the reservation outlived its half-open: it must be skipped as open, and the \
         service called only for the first failure"
    );
}

/// The same through a service that is not ready until after the dwell limit: the
/// permit is kept across `Pending`, and must not be used as a probe once its half-open
/// has ended.
#[tokio::test(start_paused = true)]
async fn a_probe_waiting_for_readiness_past_the_dwell_limit_is_not_sent() {
    let layer = Builder::new()
        .name("core")
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(10)))
        .max_half_open_dwell(Some(secs(5)))
        .build()
        .unwrap();
    let handle = layer.handle();
    let (mock, mut control) = tower_test::mock::pair::<u32, u32>();
    let mut svc = layer.layer(mock);
    control.allow(1);
    let failing = tokio::spawn(svc.ready().await.unwrap().call(0));
    let (_, respond) = control.next_request().await.unwrap();
    respond.send_error(BoxError::from("down"));
    assert!(failing.await.unwrap().is_err());
    assert_eq!(handle.snapshot().state, State::Open);

    advance(secs(10)).await;
    // The probe is reserved; the service is not ready.
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(svc.poll_ready(&mut cx).is_pending());
    advance(secs(6)).await;
    // Nobody looked; the service becomes ready now.
    control.allow(1);
    let ready = svc.poll_ready(&mut cx);
    assert!(matches!(ready, std::task::Poll::Ready(Ok(()))));
    let fut = svc.call(7);
    let fut = tokio::spawn(fut);
    tokio::task::yield_now().await;
    let reached = control.next_request().now_or_never().is_some();
    fut.abort();
    assert!(
        !reached,
        "a probe reserved in a half-open past its dwell limit reached the service"
    );
}

/// A reset while a probe hangs: the breaker is closed and usable at once, and the hung
/// probe's late answer (a failure) changes nothing, counts as late, and frees nothing
/// twice.
#[tokio::test(start_paused = true)]
async fn a_hung_probe_failing_after_a_reset_changes_nothing() {
    let mut r = rig_probing_next_call();
    let mut changes = r.handle.subscribe();
    r.fail().await;
    let (tx, probe) = r.start_held().await;
    assert_eq!(r.handle.snapshot().probes_in_flight, 1);
    r.handle.reset();
    assert_eq!(r.handle.snapshot().probes_in_flight, 0);
    assert_eq!(send(&mut r.svc, Req::Ok).await, Ok(Source::Service));
    tx.send(false).unwrap();
    assert!(probe.await.unwrap().is_err());
    let snap = r.handle.snapshot();
    assert_eq!(snap.state, State::Closed);
    assert_eq!(snap.consecutive_failures, 0);
    assert_eq!(snap.counts.late, 1);
    assert_eq!(snap.probes_in_flight, 0);
    assert_counts_add_up(&snap.counts);
    let ts = drain(&mut changes);
    assert_chain(&ts);
    assert_eq!(
        steps(&ts),
        vec![
            (State::Closed, State::Open, Cause::Tripped),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Closed, Cause::Reset),
        ]
    );
}

/// Every operator act in the middle of a hung probe, one after another; after each the
/// breaker must not be stuck: a reset closes it, and the counts add up.
#[tokio::test(start_paused = true)]
async fn operator_acts_during_a_hung_probe_never_leave_the_breaker_stuck() {
    type Act = fn(&CircuitBreakerHandle);
    let acts: [(&str, Act); 9] = [
        ("reset", |h| h.reset()),
        ("force_open", |h| h.force_open()),
        ("open_for", |h| h.open_for(secs(1))),
        ("open_for_max", |h| h.open_for(Duration::MAX)),
        ("open_until_past", |h| h.open_until(now() - secs(1))),
        ("allow_probe", |h| {
            h.allow_probe();
        }),
        ("release_hold", |h| {
            h.release_hold();
        }),
        ("observe_only", |h| h.set_mode(Mode::ObserveOnly)),
        ("disabled", |h| h.set_mode(Mode::Disabled)),
    ];
    for (name, act) in acts {
        let mut r = rig_probing_next_call();
        r.fail().await;
        let (tx, probe) = r.start_held().await;
        assert_eq!(r.handle.snapshot().state, State::HalfOpen, "{name}");
        act(&r.handle);
        r.handle.set_mode(Mode::Enabled);
        // Whatever the act did, a new probe or call can get through without the hung one.
        r.handle.reset();
        assert_eq!(
            send(&mut r.svc, Req::Ok).await,
            Ok(Source::Service),
            "after {name}"
        );
        tx.send(true).unwrap();
        let _ = probe.await.unwrap();
        let snap = r.handle.snapshot();
        assert_eq!(snap.state, State::Closed, "after {name}");
        assert_eq!(snap.probes_in_flight, 0, "after {name}");
        assert_counts_add_up(&snap.counts);
    }
}

/// A person's act that writes off a hung probe's slot must let the next half-open probe
/// without a reset: open_for a short time while the probe hangs, then the hold ends and
/// the next call is a probe even though the old one still hangs.
#[tokio::test(start_paused = true)]
async fn a_hold_set_during_a_hung_probe_ends_in_a_new_probe() {
    let mut r = rig_probing_next_call();
    r.fail().await;
    let (_tx, _probe) = r.start_held().await;
    r.handle.open_for(secs(3));
    assert_eq!(
        send(&mut r.svc, Req::Ok).await,
        Err(Some(Reason::ForcedOpen))
    );
    advance(secs(3)).await;
    assert_eq!(send(&mut r.svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(r.handle.snapshot().state, State::Closed);
}

/// Kill and revive while a probe hangs: the probe's answer is still recorded (docs/guarantees.md:
/// "a probe that completes while the kill switch flips is recorded").
#[tokio::test(start_paused = true)]
async fn a_probe_answering_while_killed_is_recorded() {
    let mut r = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1)));
    r.fail().await;
    let (tx, probe) = r.start_held().await;
    r.handle.kill_switch().kill();
    tx.send(true).unwrap();
    assert_eq!(probe.await.unwrap().unwrap().source(), Source::Probe);
    assert_eq!(r.handle.snapshot().state, State::Closed);
    assert_eq!(send(&mut r.svc, Req::Ok).await, Err(Some(Reason::Killed)));
    r.handle.kill_switch().revive();
    assert_eq!(send(&mut r.svc, Req::Ok).await, Ok(Source::Service));
    assert_counts_add_up(&r.handle.snapshot().counts);
}

// ---------------------------------------------------------------------------------------
// Between poll_ready and call
// ---------------------------------------------------------------------------------------

/// Every act between `poll_ready` and `call` of a reserved closed call: the inner service
/// is reached only when the breaker still lets calls through.
#[tokio::test(start_paused = true)]
async fn acts_between_poll_ready_and_call_are_obeyed() {
    type Act = fn(&CircuitBreakerHandle);
    let cases: [(&str, Act, bool); 7] = [
        ("kill", |h| h.kill_switch().kill(), false),
        (
            "kill_revive",
            |h| {
                h.kill_switch().kill();
                h.kill_switch().revive();
            },
            true,
        ),
        ("force_open", |h| h.force_open(), false),
        ("open_for", |h| h.open_for(secs(5)), false),
        (
            "force_open_reset",
            |h| {
                h.force_open();
                h.reset();
            },
            true,
        ),
        ("disabled", |h| h.set_mode(Mode::Disabled), true),
        (
            "observe_only_forced",
            |h| {
                h.set_mode(Mode::ObserveOnly);
                h.force_open();
            },
            true,
        ),
    ];
    for (name, act, reaches) in cases {
        let mut r = rig(Builder::new().failure_threshold(1));
        r.svc.ready().await.unwrap();
        act(&r.handle);
        let result = r.svc.call(Req::Ok).await;
        assert_eq!(
            r.calls() == 1,
            reaches,
            "{name}: {:?}",
            result.map(|a| a.source())
        );
        assert_counts_add_up(&r.handle.snapshot().counts);
    }
}

/// Calling `call` twice after one `poll_ready` panics (tower's contract) and leaves the
/// breaker consistent: no probe slot is lost, counts add up.
#[tokio::test(start_paused = true)]
async fn calling_twice_panics_without_leaving_a_probe_slot_taken() {
    let mut r = rig_probing_next_call();
    r.fail().await;
    r.svc.ready().await.unwrap();
    let probe = r.svc.call(Req::Ok);
    let second = catch_unwind(AssertUnwindSafe(|| {
        drop(r.svc.call(Req::Ok));
    }));
    assert!(second.is_err(), "a second call without poll_ready panics");
    assert_eq!(probe.await.unwrap().source(), Source::Probe);
    let snap = r.handle.snapshot();
    assert_eq!((snap.state, snap.probes_in_flight), (State::Closed, 0));
    assert_counts_add_up(&snap.counts);
}

/// A clone of a service that reserved the probe starts unreserved, and the reservation
/// dropped with the original frees the slot.
#[tokio::test(start_paused = true)]
async fn dropping_a_reserved_service_frees_its_probe_slot_for_its_clone() {
    let mut r = rig_probing_next_call();
    r.fail().await;
    r.svc.ready().await.unwrap();
    let mut clone = r.svc.clone();
    assert_eq!(
        send(&mut clone, Req::Ok).await,
        Err(Some(Reason::HalfOpenFull))
    );
    let Rig { svc, handle, calls } = r;
    drop(svc);
    assert_eq!(handle.snapshot().probes_in_flight, 0);
    assert_eq!(send(&mut clone, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let snap = handle.snapshot();
    assert_eq!(snap.counts.abandoned, 1);
    assert_counts_add_up(&snap.counts);
}

// ---------------------------------------------------------------------------------------
// Panics
// ---------------------------------------------------------------------------------------

/// A probe whose future panics counts as a failed probe: the breaker re-opens (it is not
/// stuck half-open) and the panic reaches the caller.
#[tokio::test(start_paused = true)]
async fn a_panicking_probe_reopens_the_breaker() {
    let mut r = rig_probing_next_call();
    r.fail().await;
    let fut = r.svc.ready().await.unwrap().call(Req::Panic);
    let panicked = AssertUnwindSafe(fut).catch_unwind().await;
    assert!(panicked.is_err());
    let snap = r.handle.snapshot();
    assert_eq!((snap.state, snap.probes_in_flight), (State::Open, 0));
    assert_eq!(snap.counts.failures, 2);
    assert_counts_add_up(&snap.counts);
}

/// A classifier that panics on a probe's answer: the probe is a failure, its slot free.
#[tokio::test(start_paused = true)]
async fn a_classifier_panicking_on_a_probe_reopens_the_breaker() {
    let layer = Builder::new()
        .name("core")
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1))
        .max_half_open_dwell(None)
        .build()
        .unwrap()
        .with_classifier(|r: &Result<u32, BoxError>| match r {
            Ok(7) => panic!("the classifier panicked"),
            Ok(_) => Outcome::Success,
            Err(_) => Outcome::failure(),
        });
    let handle = layer.handle();
    let mut svc = layer.layer(service_fn(|n: u32| async move {
        if n == 0 {
            Err(BoxError::from("down"))
        } else {
            Ok(n)
        }
    }));
    assert!(svc.ready().await.unwrap().call(0).await.is_err());
    let fut = svc.ready().await.unwrap().call(7);
    assert!(AssertUnwindSafe(fut).catch_unwind().await.is_err());
    let snap = handle.snapshot();
    assert_eq!((snap.state, snap.probes_in_flight), (State::Open, 0));
    assert_counts_add_up(&snap.counts);
    assert_eq!(
        svc.ready().await.unwrap().call(1).await.unwrap().source(),
        Source::Probe
    );
}

/// A fallback that panics in `call`: the skip is counted once, and the breaker answers the
/// next call.
#[tokio::test(start_paused = true)]
async fn a_panicking_fallback_leaves_the_breaker_usable() {
    let layer = Builder::new()
        .name("core")
        .build()
        .unwrap()
        .with_fallback(service_fn(|n: u32| {
            if n == 13 {
                panic!("the fallback panicked");
            }
            async move { Ok::<u32, BoxError>(n + 100) }
        }));
    let handle = layer.handle();
    let mut svc = layer.layer(echo());
    handle.force_open();
    svc.ready().await.unwrap();
    assert!(catch_unwind(AssertUnwindSafe(|| drop(svc.call(13)))).is_err());
    let answer = svc.ready().await.unwrap().call(1).await.unwrap();
    assert_eq!(answer.source(), Source::Fallback(Reason::ForcedOpen));
    let snap = handle.snapshot();
    assert_eq!(snap.counts.skipped_forced_open, 2);
    assert_counts_add_up(&snap.counts);
}

// ---------------------------------------------------------------------------------------
// Callbacks that call back in
// ---------------------------------------------------------------------------------------

/// Where an observer finds a breaker it calls through, once the breaker is built.
type Slot = Arc<Mutex<Option<CircuitBreaker<Echo>>>>;

/// A breaker named `name` whose events go to `observer`.
fn observed_by(
    name: &'static str,
    observer: impl Fn(&Event<'_>) + Send + Sync + 'static,
) -> CircuitBreakerLayer {
    Builder::new()
        .name(name)
        .on_event(observer)
        .build()
        .unwrap()
}

/// One call through the breaker in `slot`, which must answer at once: it is made from
/// inside an observer, which cannot await.
fn call_through(slot: &Slot) {
    let mut svc = slot.lock().unwrap().clone().expect("set");
    let fut = async move { svc.ready().await?.call(1).await };
    fut.now_or_never()
        .expect("answers at once")
        .expect("answered");
}

/// Two breakers whose observers call through each other: breaker A's observer makes a
/// call through B, whose observer makes one through A. A's observer must never run
/// inside itself ("an observer is never run inside itself"): the event of the call
/// made from inside it is delivered after it returns.
#[tokio::test(start_paused = true)]
async fn an_observer_is_never_run_inside_itself_through_a_second_breaker() {
    let a_svc: Slot = Arc::new(Mutex::new(None));
    let b_svc: Slot = Arc::new(Mutex::new(None));
    let depth = Arc::new(AtomicUsize::new(0));
    let deepest = Arc::new(AtomicUsize::new(0));
    let (a_fired, b_fired) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );

    let observer_a = {
        let (depth, deepest, fired, b_svc) = (
            depth.clone(),
            deepest.clone(),
            a_fired.clone(),
            b_svc.clone(),
        );
        move |event: &Event<'_>| {
            let d = depth.fetch_add(1, Ordering::SeqCst) + 1;
            deepest.fetch_max(d, Ordering::SeqCst);
            if matches!(event, Event::Recorded { .. }) && !fired.swap(true, Ordering::SeqCst) {
                call_through(&b_svc);
            }
            depth.fetch_sub(1, Ordering::SeqCst);
        }
    };
    let observer_b = {
        let (fired, a_svc) = (b_fired.clone(), a_svc.clone());
        move |event: &Event<'_>| {
            if matches!(event, Event::Recorded { .. }) && !fired.swap(true, Ordering::SeqCst) {
                call_through(&a_svc);
            }
        }
    };
    *a_svc.lock().unwrap() = Some(observed_by("a", observer_a).layer(echo()));
    *b_svc.lock().unwrap() = Some(observed_by("b", observer_b).layer(echo()));

    call_through(&a_svc);
    assert!(a_fired.load(Ordering::SeqCst) && b_fired.load(Ordering::SeqCst));
    assert_eq!(
        deepest.load(Ordering::SeqCst),
        1,
        "breaker a's observer ran inside itself (through breaker b's observer)"
    );
}

/// The same through a transition: breaker A's observer calls through B, whose observer
/// forces A open. A's transition must reach A's observer after it returns, not inside it.
#[tokio::test(start_paused = true)]
async fn a_transition_caused_from_a_second_breakers_observer_is_not_delivered_inside_the_first() {
    let b_svc: Slot = Arc::new(Mutex::new(None));
    let a_handle: Arc<Mutex<Option<CircuitBreakerHandle>>> = Arc::new(Mutex::new(None));
    let inside = Arc::new(AtomicBool::new(false));
    let nested = Arc::new(AtomicBool::new(false));
    let fired = Arc::new(AtomicBool::new(false));
    let observer_a = {
        let (b_svc, inside, nested, fired) =
            (b_svc.clone(), inside.clone(), nested.clone(), fired.clone());
        move |event: &Event<'_>| {
            if inside.swap(true, Ordering::SeqCst) {
                nested.store(true, Ordering::SeqCst);
                return;
            }
            if matches!(event, Event::Recorded { .. }) && !fired.swap(true, Ordering::SeqCst) {
                call_through(&b_svc);
            }
            inside.store(false, Ordering::SeqCst);
        }
    };
    let observer_b = {
        let a_handle = a_handle.clone();
        move |event: &Event<'_>| {
            if matches!(event, Event::Recorded { .. }) {
                a_handle.lock().unwrap().clone().unwrap().force_open();
            }
        }
    };
    let a = observed_by("a", observer_a);
    *a_handle.lock().unwrap() = Some(a.handle());
    *b_svc.lock().unwrap() = Some(observed_by("b", observer_b).layer(echo()));
    let mut a_svc = a.layer(echo());
    a_svc.ready().await.unwrap().call(1).await.unwrap();
    assert!(fired.load(Ordering::SeqCst));
    assert_eq!(a.handle().snapshot().state, State::ForcedOpen);
    assert!(
        !nested.load(Ordering::SeqCst),
        "breaker a's transition was delivered to a's observer while it was running"
    );
}

/// An observer that acts on its own breaker at every transition (reset when it opens,
/// force open when it closes, mode switches): no deadlock, and subscribers and the
/// observer see one chain in the same order.
#[tokio::test(start_paused = true)]
async fn an_observer_fighting_its_breaker_sees_the_chain_subscribers_see() {
    let handle_slot: Arc<Mutex<Option<CircuitBreakerHandle>>> = Arc::new(Mutex::new(None));
    let seen: Arc<Mutex<Vec<Transition>>> = Arc::new(Mutex::new(Vec::new()));
    let acts = Arc::new(AtomicUsize::new(0));
    let observer = {
        let (handle_slot, seen, acts) = (handle_slot.clone(), seen.clone(), acts.clone());
        move |t: &Transition| {
            seen.lock().unwrap().push(t.clone());
            let handle = handle_slot.lock().unwrap().clone().unwrap();
            if acts.fetch_add(1, Ordering::SeqCst) >= 20 {
                return;
            }
            let _ = handle.snapshot();
            match t.to {
                State::Open => handle.reset(),
                State::Closed => {
                    handle.set_mode(Mode::ObserveOnly);
                    handle.set_mode(Mode::Enabled);
                    handle.force_open();
                }
                State::ForcedOpen => handle.open_until(now() - secs(1)),
                State::HalfOpen => handle.reset(),
            }
        }
    };
    let mut r = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1))
        .on_transition(observer));
    *handle_slot.lock().unwrap() = Some(r.handle.clone());
    let mut sub = r.handle.subscribe();
    for i in 0..30 {
        let req = if i % 3 == 0 { Req::Fail } else { Req::Ok };
        let _ = send(&mut r.svc, req).await;
    }
    let subscribed = drain(&mut sub);
    let observed = seen.lock().unwrap().clone();
    assert_chain(&observed);
    assert_eq!(observed, subscribed);
    assert_counts_add_up(&r.handle.snapshot().counts);
}

/// A fallback that resets the breaker, and a classifier that forces it open: neither
/// deadlocks, and the call they belong to is counted once.
#[tokio::test(start_paused = true)]
async fn a_fallback_and_a_classifier_acting_on_the_breaker_do_not_deadlock() {
    let slot: Arc<Mutex<Option<CircuitBreakerHandle>>> = Arc::new(Mutex::new(None));
    let classify_slot = slot.clone();
    let fallback_slot = slot.clone();
    let layer = Builder::new()
        .name("core")
        .failure_threshold(1)
        .build()
        .unwrap()
        .with_classifier(move |r: &Result<u32, BoxError>| {
            let h = classify_slot.lock().unwrap().clone().unwrap();
            let _ = h.snapshot();
            if matches!(r, Ok(5)) {
                h.force_open();
            }
            Outcome::Success
        })
        .with_fallback(service_fn(move |n: u32| {
            let h = fallback_slot.lock().unwrap().clone().unwrap();
            let _ = h.snapshot();
            h.reset();
            async move { Ok::<u32, BoxError>(n + 100) }
        }));
    let handle = layer.handle();
    *slot.lock().unwrap() = Some(handle.clone());
    let mut svc = layer.layer(echo());
    let a = svc.ready().await.unwrap().call(5).await.unwrap();
    assert_eq!(a.source(), Source::Service);
    assert_eq!(handle.snapshot().state, State::ForcedOpen);
    let b = svc.ready().await.unwrap().call(1).await.unwrap();
    assert_eq!(b.source(), Source::Fallback(Reason::ForcedOpen));
    assert_eq!(handle.snapshot().state, State::Closed);
    let snap = handle.snapshot();
    assert_eq!(snap.counts.arrived, 2);
    assert_eq!(
        snap.counts.late, 1,
        "the call its classifier forced open is late"
    );
    assert_counts_add_up(&snap.counts);
}

/// An observer that kills the switch at the first failure and revives it at the next
/// event: no deadlock, no lost event.
#[tokio::test(start_paused = true)]
async fn an_observer_flipping_the_kill_switch_does_not_deadlock() {
    let kill = KillSwitch::new();
    let flips = Arc::new(AtomicUsize::new(0));
    let observer = {
        let (kill, flips) = (kill.clone(), flips.clone());
        move |event: &Event<'_>| {
            if flips.fetch_add(1, Ordering::SeqCst) > 50 {
                return;
            }
            match event {
                Event::Recorded { .. } => kill.kill(),
                Event::Skipped { .. } => kill.revive(),
                _ => {}
            }
        }
    };
    let mut r = rig(Builder::new()
        .failure_threshold(2)
        .kill_switch(kill.clone())
        .on_event(observer));
    for _ in 0..10 {
        let _ = send(&mut r.svc, Req::Fail).await;
    }
    assert_counts_add_up(&r.handle.snapshot().counts);
    assert_eq!(r.handle.snapshot().counts.arrived, 10);
}

// ---------------------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------------------

/// Every bad setting is a typed error at build, never a panic.
#[test]
fn every_bad_setting_is_a_typed_error_at_build() {
    use tower_circuit_breaker::config::RateWindow;
    let cases: Vec<(Builder, ConfigError)> = vec![
        (
            Builder::new().failure_threshold(0),
            ConfigError::ZeroThreshold,
        ),
        (Builder::new().name(""), ConfigError::EmptyName),
        (
            Builder::new().cooldown(Cooldown::Calls(0)),
            ConfigError::ZeroCooldown,
        ),
        (
            Builder::new().cooldown(Cooldown::Time(Duration::ZERO)),
            ConfigError::ZeroCooldown,
        ),
        (
            Builder::new().cooldown(Cooldown::Calls(u64::MAX)),
            ConfigError::CooldownTooLong,
        ),
        (
            Builder::new().half_open_probes(0),
            ConfigError::ZeroHalfOpenProbes,
        ),
        (
            Builder::new().max_half_open_dwell(Some(Duration::ZERO)),
            ConfigError::ZeroDwell,
        ),
        (
            Builder::new().slow_call_threshold(Duration::ZERO),
            ConfigError::ZeroSlowCall,
        ),
        (
            Builder::new().max_retry_after(Duration::ZERO),
            ConfigError::ZeroMaxRetryAfter,
        ),
        (
            Builder::new().failure_rate(f64::NAN, RateWindow::Calls(10), 1),
            ConfigError::InvalidFailureRate(f64::NAN),
        ),
        (
            Builder::new().failure_rate(0.5, RateWindow::Calls(0), 0),
            ConfigError::EmptyWindow,
        ),
        (
            Builder::new().failure_rate(0.5, RateWindow::Time(Duration::ZERO), 0),
            ConfigError::EmptyWindow,
        ),
        (
            Builder::new().failure_rate(0.5, RateWindow::Calls(u32::MAX), 1),
            ConfigError::WindowTooLong { window: u32::MAX },
        ),
        (
            Builder::new().failure_rate(0.5, RateWindow::Calls(5), 6),
            ConfigError::MinimumCallsAboveWindow {
                minimum_calls: 6,
                window: 5,
            },
        ),
        (Builder::new().jitter(1.0), ConfigError::InvalidJitter(1.0)),
        (
            Builder::new().jitter(-0.0001),
            ConfigError::InvalidJitter(-0.0001),
        ),
        (
            Builder::new().backoff(Backoff::exponential(0.5, Cooldown::Time(secs(60)))),
            ConfigError::InvalidMultiplier(0.5),
        ),
        (
            Builder::new().backoff(Backoff::exponential(
                f64::INFINITY,
                Cooldown::Time(secs(60)),
            )),
            ConfigError::InvalidMultiplier(f64::INFINITY),
        ),
        (
            Builder::new().backoff(Backoff::exponential(2.0, Cooldown::Time(secs(1)))),
            ConfigError::BackoffCapBelowBase,
        ),
        (
            Builder::new()
                .cooldown(Cooldown::Calls(5))
                .backoff(Backoff::exponential(2.0, Cooldown::Calls(u64::MAX))),
            ConfigError::CooldownTooLong,
        ),
    ];
    for (builder, expected) in cases {
        let got = catch_unwind(AssertUnwindSafe(|| builder.build().map(|_| ())));
        let got = got.expect("build never panics");
        match (&got, &expected) {
            (Err(ConfigError::InvalidFailureRate(a)), ConfigError::InvalidFailureRate(b))
                if a.is_nan() && b.is_nan() => {}
            _ => assert_eq!(got, Err(expected)),
        }
    }
}

/// The most extreme settings that build are driven through trips, probes, holds and acts
/// on a paused clock moved on by decades; nothing panics, the counts add up.
#[tokio::test(start_paused = true)]
async fn extreme_settings_that_build_never_panic_when_driven() {
    use tower_circuit_breaker::config::RateWindow;
    let builders: Vec<Builder> = vec![
        Builder::new().failure_threshold(u32::MAX),
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1)),
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(Cooldown::MAX_CALLS)),
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(Cooldown::MAX_CALLS))
            .jitter(0.999)
            .backoff(Backoff::exponential(
                f64::MAX,
                Cooldown::Calls(Cooldown::MAX_CALLS),
            )),
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(Duration::MAX)),
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(Duration::from_nanos(1)))
            .jitter(0.999)
            .backoff(Backoff::exponential(1e300, Cooldown::Time(Duration::MAX))),
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1))
            .half_open_probes(u32::MAX)
            .max_half_open_dwell(Some(Duration::MAX)),
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1))
            .max_half_open_dwell(Some(Duration::from_nanos(1))),
        Builder::new().failure_rate(1e-300, RateWindow::Time(Duration::from_nanos(1)), 0),
        Builder::new().failure_rate(1.0, RateWindow::Time(Duration::MAX), u32::MAX),
        Builder::new().failure_rate(0.5, RateWindow::Calls(RateWindow::MAX_CALLS), 1),
        Builder::new()
            .failure_threshold(1)
            .slow_call_threshold(Duration::from_nanos(1))
            .max_retry_after(Duration::MAX),
    ];
    for (i, builder) in builders.into_iter().enumerate() {
        let mut r = rig(builder);
        for round in 0..40u64 {
            let req = match round % 4 {
                0 | 1 => Req::Fail,
                2 => Req::Ok,
                _ => Req::Held({
                    let (tx, rx) = oneshot::channel();
                    let _ = tx.send(round % 8 == 3);
                    rx
                }),
            };
            let _ = send(&mut r.svc, req).await;
            match round {
                10 => r.handle.open_for(Duration::MAX),
                11 => {
                    r.handle.reset();
                }
                15 => {
                    r.handle.allow_probe();
                }
                20 => r
                    .handle
                    .open_until(now() + Duration::from_secs(3_000 * 365 * 86_400)),
                21 => r.handle.open_until(now() - secs(1)),
                25 => advance(Duration::from_secs(60 * 365 * 86_400)).await,
                30 => {
                    r.handle
                        .hold_open_until(now() + Duration::from_secs(1_000 * 365 * 86_400));
                }
                31 => {
                    r.handle.release_hold();
                }
                _ => advance(secs(round)).await,
            }
            let snap = r.handle.snapshot();
            let _ = snap.retry_after();
            let _ = r.handle.peek();
            assert_counts_add_up(&snap.counts);
        }
        let _ = i;
    }
}

/// A failure that asks for the longest wait there is, under the longest cap: open, told
/// a wait, and nothing panics when the skip is turned into words.
#[tokio::test(start_paused = true)]
async fn the_longest_retry_after_is_told_and_never_panics() {
    let layer = Builder::new()
        .name("core")
        .max_retry_after(Duration::MAX)
        .build()
        .unwrap()
        .with_classifier(|r: &Result<u32, BoxError>| match r {
            Ok(_) => Outcome::Success,
            Err(_) => Outcome::Failure(Failure::new("429").retry_after(Duration::MAX)),
        });
    let handle = layer.handle();
    let mut svc = layer.layer(service_fn(|n: u32| async move {
        if n == 0 {
            Err(BoxError::from("429"))
        } else {
            Ok(n)
        }
    }));
    assert!(svc.ready().await.unwrap().call(0).await.is_err());
    let snap = handle.snapshot();
    assert_eq!(snap.state, State::Open);
    assert!(snap.retry_after().is_some());
    let err = svc.ready().await.unwrap().call(1).await.unwrap_err();
    let rejected = err.downcast_ref::<Rejected>().unwrap();
    let _ = rejected.to_string();
    assert!(matches!(
        rejected.next_probe(),
        NextProbe::After { at: Some(_), .. }
    ));
}

// ---------------------------------------------------------------------------------------
// Many tasks on a multi-thread runtime
// ---------------------------------------------------------------------------------------

/// What the racing callers and the service share.
#[derive(Default)]
struct Race {
    /// Odd while the kill switch is on (bumped after `kill` returns, before `revive`).
    kill_period: AtomicUsize,
    /// Odd while a person holds it forced open (bumped after `force_open`, before `reset`).
    forced_period: AtomicUsize,
    inner_calls: AtomicUsize,
    seq: AtomicUsize,
    violations: Mutex<Vec<String>>,
    /// Each call at the service: its request id, start and end on `seq`, and the
    /// breaker's generation when it reached the service.
    spans: Mutex<Vec<CallSpan>>,
    /// The breaker, for the generation a call reaches the service in (taken at the end:
    /// the breaker's channel closes once every handle is gone).
    handle: Mutex<Option<CircuitBreakerHandle>>,
}

#[derive(Debug, Clone, Copy)]
struct CallSpan {
    id: usize,
    start: usize,
    end: usize,
    generation: u64,
}

struct RaceReq {
    id: usize,
    fail: bool,
    yields: u32,
    /// The kill and forced periods the attempt began in, if it began in one.
    killed_in: Option<usize>,
    forced_in: Option<usize>,
}

/// Records a call's span at the service when it answers or its future is dropped.
struct Span {
    race: Arc<Race>,
    id: usize,
    start: usize,
    generation: u64,
}

impl Drop for Span {
    fn drop(&mut self) {
        let end = self.race.seq.fetch_add(1, Ordering::SeqCst);
        self.race.spans.lock().unwrap().push(CallSpan {
            id: self.id,
            start: self.start,
            end,
            generation: self.generation,
        });
    }
}

fn race_inner(race: Arc<Race>) -> tower::util::BoxCloneService<RaceReq, u32, BoxError> {
    tower::util::BoxCloneService::new(service_fn(move |req: RaceReq| {
        let race = race.clone();
        race.inner_calls.fetch_add(1, Ordering::SeqCst);
        if let Some(k) = req.killed_in {
            if race.kill_period.load(Ordering::SeqCst) == k {
                race.violations
                    .lock()
                    .unwrap()
                    .push(format!("call {} reached the service while killed", req.id));
            }
        }
        if let Some(f) = req.forced_in {
            if race.forced_period.load(Ordering::SeqCst) == f {
                race.violations.lock().unwrap().push(format!(
                    "call {} reached the service while forced open",
                    req.id
                ));
            }
        }
        let generation = race
            .handle
            .lock()
            .unwrap()
            .as_ref()
            .map_or(0, |h| h.snapshot().generation);
        let start = race.seq.fetch_add(1, Ordering::SeqCst);
        let span = Span {
            race: race.clone(),
            id: req.id,
            start,
            generation,
        };
        async move {
            let span = span;
            for _ in 0..req.yields {
                tokio::task::yield_now().await;
            }
            // The call is over at the service once it answers: its span ends before the
            // breaker sees the answer and frees its probe slot (the future itself is
            // dropped later, after the slot may have gone to another probe).
            drop(span);
            if req.fail {
                Err(BoxError::from("down"))
            } else {
                Ok(1)
            }
        }
    }))
}

/// The most spans among `ids` open at once that compete for probe slots: those that
/// reached the service with no close of the breaker between them (`closes`: the
/// generations the breaker closed in). A probe whose half-open closed the breaker is a
/// call in flight like any other once it has: it no longer holds a slot.
fn max_overlap(
    spans: &[CallSpan],
    ids: &std::collections::HashSet<usize>,
    closes: &[u64],
) -> usize {
    let era = |generation: u64| closes.iter().filter(|&&c| c <= generation).count();
    let mut points: Vec<(usize, usize, i32)> = Vec::new();
    for span in spans.iter().filter(|span| ids.contains(&span.id)) {
        let era = era(span.generation);
        points.push((era, span.start, 1));
        points.push((era, span.end, -1));
    }
    points.sort();
    let (mut era, mut now, mut most) = (usize::MAX, 0i32, 0i32);
    for (at_era, _, d) in points {
        if at_era != era {
            (era, now) = (at_era, 0);
        }
        now += d;
        most = most.max(now);
    }
    most as usize
}

/// Many callers race a person who kills, revives, forces open, resets, holds, switches
/// to observe-only and allows probes. Checked: no attempt begun while killed or forced
/// open (and still so) reaches the service; the probes at the service at once never
/// exceed the limit while nobody writes one off (the person's acts run only in the
/// first half); the snapshot's counts add up and match what the callers saw; the
/// transitions observers saw form one chain, the same the subscriber saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_callers_and_a_person_keep_every_invariant() {
    const TASKS: usize = 16;
    const CALLS: usize = 400;
    const PROBES: u32 = 2;
    let race = Arc::new(Race::default());
    let observed: Arc<Mutex<Vec<Transition>>> = Arc::new(Mutex::new(Vec::new()));
    let layer = Builder::new()
        .name("race")
        .failure_threshold(2)
        .cooldown(Cooldown::Calls(5))
        .half_open_probes(PROBES)
        .max_half_open_dwell(None)
        .on_transition({
            let observed = observed.clone();
            move |t| observed.lock().unwrap().push(t.clone())
        })
        .build()
        .unwrap();
    let handle = layer.handle();
    *race.handle.lock().unwrap() = Some(handle.clone());
    let mut sub = handle.subscribe();
    let subscribed = tokio::spawn(async move {
        let mut got = Vec::new();
        let mut lagged = false;
        loop {
            match sub.recv().await {
                Ok(t) => got.push(t),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => lagged = true,
                Err(_) => return (got, lagged),
            }
        }
    });
    let acting = Arc::new(AtomicBool::new(true));
    let svc = layer.layer(race_inner(race.clone()));

    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..TASKS {
        let (mut svc, race, acting) = (svc.clone(), race.clone(), acting.clone());
        tasks.spawn(async move {
            let mut rng = (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let mut next = move || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            let (mut rejected, mut probes, mut attempts) = (0u64, Vec::new(), 0u64);
            for c in 0..CALLS {
                let id = t * CALLS + c;
                let calm = !acting.load(Ordering::SeqCst);
                let k = race.kill_period.load(Ordering::SeqCst);
                let f = race.forced_period.load(Ordering::SeqCst);
                let r = next();
                let req = RaceReq {
                    id,
                    fail: r % 3 == 0,
                    yields: (r >> 8) as u32 % 4,
                    killed_in: (k % 2 == 1).then_some(k),
                    forced_in: (f % 2 == 1).then_some(f),
                };
                attempts += 1;
                let ready = svc.ready().await.unwrap();
                let fut = ready.call(req);
                // Some futures are dropped unfinished.
                let result = if r % 17 == 0 {
                    futures::select_biased! {
                        r = fut.fuse() => Some(r),
                        _ = tokio::task::yield_now().fuse() => None,
                    }
                } else {
                    Some(fut.await)
                };
                match result {
                    // Only probes begun in the second half, where nobody acts, count.
                    Some(Ok(answer)) if answer.source() == Source::Probe && calm => probes.push(id),
                    Some(Err(e)) if e.downcast_ref::<Rejected>().is_some() => rejected += 1,
                    _ => {}
                }
                if r % 5 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            (attempts, rejected, probes)
        });
    }

    // The person, for the first half of the run.
    let person = {
        let (handle, race, acting) = (handle.clone(), race.clone(), acting.clone());
        tokio::spawn(async move {
            for round in 0..60 {
                match round % 6 {
                    0 => {
                        handle.kill_switch().kill();
                        race.kill_period.fetch_add(1, Ordering::SeqCst);
                        for _ in 0..20 {
                            tokio::task::yield_now().await;
                        }
                        race.kill_period.fetch_add(1, Ordering::SeqCst);
                        handle.kill_switch().revive();
                    }
                    1 => {
                        handle.force_open();
                        race.forced_period.fetch_add(1, Ordering::SeqCst);
                        for _ in 0..20 {
                            tokio::task::yield_now().await;
                        }
                        race.forced_period.fetch_add(1, Ordering::SeqCst);
                        handle.reset();
                    }
                    2 => {
                        handle.open_for(Duration::from_millis(1));
                    }
                    3 => {
                        handle.set_mode(Mode::ObserveOnly);
                        tokio::task::yield_now().await;
                        handle.set_mode(Mode::Enabled);
                    }
                    4 => {
                        handle.allow_probe();
                    }
                    _ => {
                        let at = now() + Duration::from_millis(1);
                        handle.hold_open_until(at);
                        tokio::task::yield_now().await;
                        handle.release_hold();
                    }
                }
                let snap = handle.snapshot();
                assert!(snap.probes_in_flight <= PROBES, "{snap:?}");
                assert_counts_add_up(&snap.counts);
                tokio::task::yield_now().await;
            }
            // The last act; probes begun after it are never written off.
            handle.reset();
            acting.store(false, Ordering::SeqCst);
        })
    };
    person.await.unwrap();

    let (mut attempts, mut rejected, mut probe_ids) =
        (0u64, 0u64, std::collections::HashSet::new());
    while let Some(done) = tasks.join_next().await {
        let (a, r, p) = done.unwrap();
        attempts += a;
        rejected += r;
        probe_ids.extend(p);
    }
    drop(svc);
    let snap = handle.snapshot();
    assert_counts_add_up(&snap.counts);
    assert_eq!(snap.probes_in_flight, 0);
    assert_eq!(snap.counts.arrived, attempts, "every attempt counted once");
    assert_eq!(
        snap.counts.made,
        race.inner_calls.load(Ordering::SeqCst) as u64,
        "made = calls that reached the service"
    );
    assert_eq!(
        snap.counts.skipped(),
        rejected,
        "skipped = rejections the callers saw"
    );
    let violations = race.violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "{violations:?}");
    race.handle.lock().unwrap().take();
    drop(handle);
    drop(layer);
    // The channel closes once every part of the breaker is gone: every event delivered.
    let (subscribed, lagged) = subscribed.await.unwrap();
    let observed = observed.lock().unwrap().clone();
    assert_chain(&observed);
    let spans = race.spans.lock().unwrap().clone();
    let closes: Vec<u64> = observed
        .iter()
        .filter(|t| t.to == State::Closed)
        .map(|t| t.generation)
        .collect();
    let overlap = max_overlap(&spans, &probe_ids, &closes);
    assert!(
        overlap <= PROBES as usize,
        "{overlap} successful probes at the service at once, limit {PROBES}"
    );

    if !lagged {
        assert_eq!(
            subscribed, observed,
            "subscribers and observers see one order"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Modes, peeks and snapshots
// ---------------------------------------------------------------------------------------

/// `peek` is "the same decision a call now would get": checked in every state a person
/// or the breaker can reach, the call made right after.
#[tokio::test(start_paused = true)]
async fn peek_tells_what_the_next_call_gets_in_every_state() {
    use tower_circuit_breaker::Advice;
    let mut r = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(3))
        .half_open_probes(1)
        .max_half_open_dwell(Some(secs(5))));
    let mut held_probe = None;
    for step in 0..14 {
        match step {
            0 => {}
            1 => {
                let _ = send(&mut r.svc, Req::Fail).await;
            }
            4 => {
                held_probe = Some(r.start_held().await);
            }
            6 => advance(secs(5)).await,
            7 => r.handle.kill_switch().kill(),
            8 => r.handle.kill_switch().revive(),
            9 => r.handle.open_for(secs(2)),
            10 => advance(secs(2)).await,
            11 => r.handle.set_mode(Mode::ObserveOnly),
            12 => r.handle.force_open(),
            _ => r.handle.set_mode(Mode::Disabled),
        }
        let advice = r.handle.peek();
        let got = r.svc.ready().await.unwrap().call(Req::Ok).await;
        let got = match got {
            Ok(a) if a.source() == Source::Probe => Advice::Probe,
            Ok(a) if a.is_fallback() => panic!("no fallback"),
            Ok(_) => Advice::Call,
            Err(e) => {
                let rejected = e.downcast_ref::<Rejected>().expect("rejected");
                let skip = tower_circuit_breaker::Skip::new(
                    rejected.reason(),
                    rejected.state(),
                    rejected.next_probe(),
                );
                Advice::Skip(skip)
            }
        };
        assert_eq!(advice, got, "step {step}");
        // A successful probe closes it: trip it again for the next steps.
        if got == Advice::Probe {
            let _ = send(&mut r.svc, Req::Fail).await;
        }
    }
    drop(held_probe);
}

/// A call in flight across each change of mode counts as late and moves nothing;
/// calls after the change obey the new mode.
#[tokio::test(start_paused = true)]
async fn a_failure_in_flight_across_any_mode_change_is_late() {
    let modes = [
        (Mode::Enabled, Mode::ObserveOnly),
        (Mode::Enabled, Mode::Disabled),
        (Mode::ObserveOnly, Mode::Enabled),
        (Mode::ObserveOnly, Mode::Disabled),
    ];
    for (from, to) in modes {
        let mut r = rig(Builder::new().failure_threshold(1).mode(from));
        let (tx, call) = r.start_held().await;
        r.handle.set_mode(to);
        tx.send(false).unwrap();
        assert!(call.await.unwrap().is_err());
        let snap = r.handle.snapshot();
        assert_eq!(
            (snap.state, snap.counts.late, snap.consecutive_failures),
            (State::Closed, 1, 0),
            "{from:?} -> {to:?}"
        );
        assert_counts_add_up(&snap.counts);
        let _ = send(&mut r.svc, Req::Ok).await;
    }
}

/// In observe-only, an opened breaker lets every call through (shadowed), and the
/// observer is told of the transitions an enabled breaker would have made.
#[tokio::test(start_paused = true)]
async fn observe_only_calls_everything_and_reports_the_would_be_transitions() {
    let mut r = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(2))
        .mode(Mode::ObserveOnly));
    let mut sub = r.handle.subscribe();
    r.fail().await;
    assert_eq!(
        send(&mut r.svc, Req::Ok).await,
        Ok(Source::Shadowed(Reason::Open))
    );
    assert_eq!(send(&mut r.svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(r.calls(), 3);
    let ts = drain(&mut sub);
    assert_chain(&ts);
    assert!(ts.iter().all(|t| t.mode == Mode::ObserveOnly));
    assert_eq!(
        steps(&ts),
        vec![
            (State::Closed, State::Open, Cause::Tripped),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Closed, Cause::ProbeSucceeded),
        ]
    );
    let counts = r.handle.snapshot().counts;
    assert_eq!(counts.would_have_skipped, 1);
    assert_counts_add_up(&counts);
}

/// A hold replaced by a shorter one while forced open: the shorter one is told, and
/// the next call after it is the probe.
#[tokio::test(start_paused = true)]
async fn a_person_shortening_a_hold_is_obeyed_and_told() {
    let mut r = rig(Builder::new());
    r.handle.open_for(secs(600));
    r.handle.open_for(secs(5));
    let snap = r.handle.snapshot();
    assert_eq!(snap.state, State::ForcedOpen);
    assert_eq!(snap.retry_after(), Some(secs(5)));
    assert_eq!(
        send(&mut r.svc, Req::Ok).await,
        Err(Some(Reason::ForcedOpen))
    );
    advance(secs(5)).await;
    assert_eq!(send(&mut r.svc, Req::Ok).await, Ok(Source::Probe));
    // A hold until a time already past, over a hold until a reset: the next call probes.
    r.handle.force_open();
    r.handle.open_until(now() - secs(10));
    assert_eq!(send(&mut r.svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(r.handle.snapshot().state, State::Closed);
}

/// The kill switch flipped between a probe's `poll_ready` and its `call`: the probe is
/// not sent, its slot is given back, and after the revive the next call is the probe.
#[tokio::test(start_paused = true)]
async fn a_probe_turned_away_by_a_kill_gives_its_slot_back() {
    let mut r = rig_probing_next_call();
    r.fail().await;
    r.svc.ready().await.unwrap();
    assert_eq!(r.handle.snapshot().probes_in_flight, 1);
    r.handle.kill_switch().kill();
    let answer = r.svc.call(Req::Ok).await;
    let reason = answer
        .err()
        .and_then(|e| e.downcast_ref::<Rejected>().map(Rejected::reason));
    assert_eq!(reason, Some(Reason::Killed));
    assert_eq!(r.handle.snapshot().probes_in_flight, 0);
    r.handle.kill_switch().revive();
    assert_eq!(send(&mut r.svc, Req::Ok).await, Ok(Source::Probe));
    assert_eq!(r.calls(), 2);
    assert_counts_add_up(&r.handle.snapshot().counts);
}

/// Observers hear a probe's outcome before the transition it caused, and a failure's
/// before the opening, as the breaker recorded them.
#[tokio::test(start_paused = true)]
async fn observers_hear_each_outcome_before_the_transition_it_caused() {
    let log: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let observer = {
        let log = log.clone();
        move |event: &Event<'_>| {
            let line = match event {
                Event::Recorded { outcome, probe, .. } => {
                    format!("recorded {} probe={probe}", outcome.is_failure())
                }
                Event::Transition(t) => format!("{} -> {}", t.from, t.to),
                Event::Skipped { skip, .. } => format!("skipped {}", skip.reason()),
                _ => "other".into(),
            };
            log.lock().unwrap().push(line);
        }
    };
    let mut r = rig(Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(2))
        .on_event(observer));
    let _ = send(&mut r.svc, Req::Fail).await;
    let _ = send(&mut r.svc, Req::Ok).await;
    let _ = send(&mut r.svc, Req::Ok).await;
    assert_eq!(
        *log.lock().unwrap(),
        vec![
            "recorded true probe=false",
            "closed -> open",
            "skipped open",
            "open -> half_open",
            "recorded false probe=true",
            "half_open -> closed",
        ]
    );
}
