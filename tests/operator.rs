//! A person's acts in the middle of calls: reset, force open, hold open for a time or
//! until an instant, and mode switches, while calls and probes are under way. Paused
//! `tokio::time`; each call's outcome is given by the test through a channel, so a call
//! can be held in flight across the act.

use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
use tower_circuit_breaker::error::Rejected;
use tower_circuit_breaker::{
    Advice, Answer, Builder, Cause, CircuitBreaker, CircuitBreakerHandle, Cooldown, Mode,
    NextProbe, Reason, Source, State,
};

type Request = oneshot::Receiver<bool>;
type Inner = tower::util::BoxCloneService<Request, (), BoxError>;
type Svc = CircuitBreaker<Inner>;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// The wrapped service answers when its request says: `true` succeeds, `false` (or a
/// dropped sender) fails.
fn inner() -> Inner {
    tower::util::BoxCloneService::new(service_fn(|done: Request| async move {
        match done.await {
            Ok(true) => Ok(()),
            _ => Err(BoxError::from("down")),
        }
    }))
}

/// No fallback: a skipped call fails with `Rejected`, which tells why.
fn breaker(builder: Builder) -> (Svc, CircuitBreakerHandle) {
    let layer = builder.name("model").build().expect("valid settings");
    let handle = layer.handle();
    (layer.layer(inner()), handle)
}

/// One call that answers at once: `Ok(source)` if it was made (a failed call's error
/// does not say whether it was a probe: it reads as `Source::Service`), the rejection if
/// not.
async fn call(svc: &mut Svc, ok: bool) -> Result<Source, Rejected> {
    let (tx, rx) = oneshot::channel();
    tx.send(ok).unwrap();
    outcome(svc.ready().await.unwrap().call(rx).await)
}

fn outcome(result: Result<Answer<()>, BoxError>) -> Result<Source, Rejected> {
    match result {
        Ok(answer) => Ok(answer.source()),
        Err(error) => match error.downcast_ref::<Rejected>() {
            Some(rejected) => Err(rejected.clone()),
            None => Ok(Source::Service), // made, and failed
        },
    }
}

/// A call made and held in flight until the test answers it.
struct Held {
    answer: oneshot::Sender<bool>,
    task: JoinHandle<Result<Source, Rejected>>,
}

async fn hold(svc: &mut Svc) -> Held {
    let (answer, rx) = oneshot::channel();
    let future = svc.ready().await.unwrap().call(rx);
    let task = tokio::spawn(async move { outcome(future.await) });
    // Let the call reach the wrapped service.
    tokio::task::yield_now().await;
    Held { answer, task }
}

impl Held {
    async fn end(self, ok: bool) -> Result<Source, Rejected> {
        let _ = self.answer.send(ok);
        self.task.await.unwrap()
    }
}

async fn trip(svc: &mut Svc, handle: &CircuitBreakerHandle) {
    while handle.state() != State::Open {
        call(svc, false)
            .await
            .expect("a closed breaker makes the call");
    }
}

// ---------------------------------------------------------------------------------
// A probe under way when a person acts.
// ---------------------------------------------------------------------------------

/// The probe of one half-open hangs; a person resets the breaker; it trips again. Its
/// next half-open must probe as soon as the cooldown has passed: the hung probe belonged
/// to a phase that is over.
#[tokio::test(start_paused = true)]
async fn a_probe_hung_through_a_reset_does_not_keep_the_next_half_open_from_probing() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(10))),
    );
    trip(&mut svc, &handle).await;
    tokio::time::advance(secs(10)).await;
    let hung = hold(&mut svc).await;
    assert_eq!(handle.state(), State::HalfOpen);
    assert_eq!(handle.snapshot().probes_in_flight, 1);

    handle.reset();
    assert_eq!(
        handle.snapshot().probes_in_flight,
        0,
        "a reset writes the probe off"
    );
    trip(&mut svc, &handle).await;
    tokio::time::advance(secs(10)).await;
    assert_eq!(call(&mut svc, true).await.ok(), Some(Source::Probe));
    assert_eq!(handle.state(), State::Closed);

    // The hung probe's late answer changes nothing.
    assert_eq!(hung.end(false).await.ok(), Some(Source::Service));
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().counts.late, 1);
}

/// The same through a forced open: the probe under way is written off, and hours later
/// the breaker, tripped again, still probes on time.
#[tokio::test(start_paused = true)]
async fn a_probe_hung_through_a_forced_open_does_not_keep_the_breaker_open_for_good() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(10))),
    );
    trip(&mut svc, &handle).await;
    tokio::time::advance(secs(10)).await;
    let _hung = hold(&mut svc).await;
    handle.force_open();
    handle.reset();
    trip(&mut svc, &handle).await;
    for hour in 1..=3 {
        tokio::time::advance(Duration::from_secs(3600)).await;
        let result = call(&mut svc, false).await;
        assert!(
            result.is_ok(),
            "a probe every cooldown, never 'a probe is under way': {result:?}"
        );
        assert_eq!(handle.snapshot().counts.probes, hour);
        assert_eq!(handle.state(), State::Open);
    }
}

/// With two probes, one fails while the other hangs: the breaker re-opens, and the
/// hanging sibling keeps its slot (the service never sees more probes than allowed) —
/// but only until its half-open's dwell limit.
#[tokio::test(start_paused = true)]
async fn a_failed_probes_sibling_keeps_its_slot_only_until_its_dwell_limit() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(10)))
            .half_open_probes(2)
            .max_half_open_dwell(Some(secs(60))),
    );
    trip(&mut svc, &handle).await;
    tokio::time::advance(secs(10)).await;
    let failing = hold(&mut svc).await;
    let _sibling = hold(&mut svc).await;
    assert_eq!(handle.snapshot().probes_in_flight, 2);
    assert!(failing.end(false).await.is_ok());
    assert_eq!(handle.state(), State::Open);
    assert_eq!(
        handle.snapshot().probes_in_flight,
        1,
        "the sibling still runs"
    );

    // The next half-open has one free slot while the sibling runs.
    tokio::time::advance(secs(10)).await;
    let _first = hold(&mut svc).await;
    assert_eq!(handle.state(), State::HalfOpen);
    let full = call(&mut svc, true).await.unwrap_err();
    assert_eq!(full.reason(), Reason::HalfOpenFull);

    // The first half-open's dwell limit passes (60 s after it began, at 10 s): the
    // sibling is written off, and its slot is free again; the second half-open (begun
    // at 20 s) still stands.
    tokio::time::advance(secs(49)).await;
    assert_eq!(handle.snapshot().probes_in_flight, 2);
    tokio::time::advance(secs(1)).await;
    assert_eq!(handle.state(), State::HalfOpen);
    assert_eq!(handle.snapshot().probes_in_flight, 1);
    assert_eq!(call(&mut svc, true).await.ok(), Some(Source::Probe));
}

/// A breaker of two probes with no dwell limit (a cooldown of 10 s) whose first probe
/// failed while its sibling runs on: the breaker is open, the sibling holds a slot.
async fn a_failed_probe_and_its_hung_sibling() -> (Svc, CircuitBreakerHandle, Held) {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(10)))
            .half_open_probes(2)
            .max_half_open_dwell(None),
    );
    trip(&mut svc, &handle).await;
    tokio::time::advance(secs(10)).await;
    let failing = hold(&mut svc).await;
    let sibling = hold(&mut svc).await;
    assert!(failing.end(false).await.is_ok());
    assert_eq!(handle.state(), State::Open);
    assert_eq!(handle.snapshot().probes_in_flight, 1, "the sibling runs on");
    (svc, handle, sibling)
}

/// A failed probe's sibling, written off by each of a person's acts and a change of
/// mode, ends later (a failure, then a success): its result is late, moves nothing, and
/// gives back no slot it no longer holds, so the next half-open has all its slots and no
/// more.
#[tokio::test(start_paused = true)]
async fn a_written_off_siblings_late_result_moves_nothing_and_frees_no_slot_twice() {
    for act in ["reset", "force_open", "open_for", "set_mode"] {
        for ok in [false, true] {
            let (mut svc, handle, sibling) = a_failed_probe_and_its_hung_sibling().await;
            match act {
                "reset" => handle.reset(),
                "force_open" => handle.force_open(),
                "open_for" => handle.open_for(secs(5)),
                _ => handle.set_mode(Mode::ObserveOnly),
            }
            let before = handle.snapshot();
            assert_eq!(before.probes_in_flight, 0, "{act}");
            assert!(sibling.end(ok).await.is_ok());
            let after = handle.snapshot();
            assert_eq!(
                (after.state, after.generation, after.probes_in_flight),
                (before.state, before.generation, 0),
                "{act} {ok}: the late result moves nothing"
            );
            assert_eq!(after.counts.late, before.counts.late + 1, "{act} {ok}");
            if act == "set_mode" {
                handle.set_mode(Mode::Enabled);
            }
            // Into the next half-open: exactly two probes, whatever the sibling did.
            handle.reset();
            trip(&mut svc, &handle).await;
            tokio::time::advance(secs(10)).await;
            let _a = hold(&mut svc).await;
            let _b = hold(&mut svc).await;
            assert_eq!(handle.snapshot().probes_in_flight, 2, "{act} {ok}");
            let full = call(&mut svc, true).await.unwrap_err();
            assert_eq!(full.reason(), Reason::HalfOpenFull, "{act} {ok}");
        }
    }
}

/// Other probes close the breaker while a failed probe's sibling still runs: the
/// sibling still holds its slot of later half-opens (a closed breaker shows it in
/// flight) until it ends; its result then is late.
#[tokio::test(start_paused = true)]
async fn a_failed_probes_sibling_holds_its_slot_through_a_close_by_other_probes() {
    let (mut svc, handle, sibling) = a_failed_probe_and_its_hung_sibling().await;
    tokio::time::advance(secs(10)).await;
    assert_eq!(call(&mut svc, true).await.ok(), Some(Source::Probe));
    assert_eq!(call(&mut svc, true).await.ok(), Some(Source::Probe));
    let closed = handle.snapshot();
    assert_eq!((closed.state, closed.probes_in_flight), (State::Closed, 1));
    assert!(sibling.end(false).await.is_ok());
    let after = handle.snapshot();
    assert_eq!((after.state, after.probes_in_flight), (State::Closed, 0));
    assert_eq!(after.counts.late, closed.counts.late + 1);
}

// ---------------------------------------------------------------------------------
// Mode changes with calls in flight.
// ---------------------------------------------------------------------------------

/// Calls in flight when the mode changes are not counted when they end, in every
/// direction: a failing call started enabled cannot open a disabled breaker, nor one
/// started disabled an enabled one.
#[tokio::test(start_paused = true)]
async fn calls_in_flight_across_a_mode_change_are_not_counted() {
    let modes = [Mode::Enabled, Mode::ObserveOnly, Mode::Disabled];
    for from in modes {
        for to in modes.into_iter().filter(|&to| to != from) {
            let (mut svc, handle) = breaker(Builder::new().failure_threshold(1).mode(from));
            let in_flight = hold(&mut svc).await;
            handle.set_mode(to);
            in_flight.end(false).await.expect("it was made");
            let snapshot = handle.snapshot();
            assert_eq!(
                (snapshot.state, snapshot.mode, snapshot.consecutive_failures),
                (State::Closed, to, 0),
                "{from:?} -> {to:?}"
            );
            handle.set_mode(Mode::Enabled);
            assert!(
                call(&mut svc, true).await.is_ok(),
                "{from:?} -> {to:?}: the next call is made"
            );
        }
    }
}

/// A probe under way when the mode changes gives up its slot: the half-open does not
/// wait for it.
#[tokio::test(start_paused = true)]
async fn a_probe_under_way_when_the_mode_changes_gives_up_its_slot() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1)),
    );
    trip(&mut svc, &handle).await;
    let _probe = hold(&mut svc).await;
    assert_eq!(handle.snapshot().probes_in_flight, 1);
    handle.set_mode(Mode::ObserveOnly);
    handle.set_mode(Mode::Enabled);
    assert_eq!(handle.snapshot().probes_in_flight, 0);
    assert_eq!(call(&mut svc, true).await.ok(), Some(Source::Probe));
}

// ---------------------------------------------------------------------------------
// Holding the breaker open for a time.
// ---------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn open_for_skips_with_forced_open_says_when_it_ends_then_probes() {
    let (mut svc, handle) = breaker(Builder::new());
    let mut events = handle.subscribe();
    handle.open_for(secs(300));
    let until = now() + secs(300);
    let transition = events.try_recv().expect("a transition");
    assert_eq!(
        (transition.from, transition.to, transition.cause),
        (State::Closed, State::ForcedOpen, Cause::ForcedOpen)
    );
    assert_eq!(
        transition.next_probe,
        NextProbe::After {
            calls: 1,
            at: Some(until)
        }
    );

    tokio::time::advance(secs(100)).await;
    let rejected = call(&mut svc, true).await.unwrap_err();
    assert_eq!(
        (rejected.reason(), rejected.state()),
        (Reason::ForcedOpen, State::ForcedOpen)
    );
    assert_eq!(rejected.retry_after_from(now()), Some(secs(200)));
    assert!(
        rejected.to_string().contains("forced open; next probe"),
        "{rejected}"
    );
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::ForcedOpen);
    assert_eq!(snapshot.retry_after(), Some(secs(200)));
    assert_eq!(snapshot.counts.skipped_forced_open, 1);

    // One nanosecond short: still held.
    tokio::time::advance(secs(200) - Duration::from_nanos(1)).await;
    assert!(call(&mut svc, true).await.is_err());
    tokio::time::advance(Duration::from_nanos(1)).await;
    assert_eq!(call(&mut svc, true).await.ok(), Some(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn open_until_a_past_instant_lets_the_next_call_probe() {
    let (mut svc, handle) = breaker(Builder::new());
    tokio::time::advance(secs(5)).await;
    handle.open_until(now() - secs(1));
    assert_eq!(handle.state(), State::ForcedOpen);
    assert_eq!(call(&mut svc, true).await.ok(), Some(Source::Probe));
}

#[tokio::test(start_paused = true)]
async fn a_new_hold_replaces_the_old_and_reset_ends_it_early() {
    let (mut svc, handle) = breaker(Builder::new());
    let mut events = handle.subscribe();
    handle.open_for(secs(60));
    handle.open_for(secs(600));
    handle.force_open();
    let holds: Vec<_> = std::iter::from_fn(|| events.try_recv().ok()).collect();
    assert_eq!(
        holds.len(),
        1,
        "one transition: the later holds replace the first"
    );
    let rejected = call(&mut svc, true).await.unwrap_err();
    assert_eq!(rejected.next_probe(), NextProbe::Manual);
    handle.open_for(secs(1));
    tokio::time::advance(secs(1)).await;
    assert!(call(&mut svc, false).await.is_ok());
    assert_eq!(handle.snapshot().counts.probes, 1);
    assert_eq!(handle.state(), State::Open, "a failed probe re-opens it");

    handle.open_for(secs(3600));
    handle.reset();
    assert_eq!(call(&mut svc, true).await.ok(), Some(Source::Service));
}

/// A hold replaces a trip, and a probe's permission (`allow_probe`) does not shorten a
/// person's hold.
#[tokio::test(start_paused = true)]
async fn a_hold_is_not_shortened_by_allow_probe() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(10))),
    );
    trip(&mut svc, &handle).await;
    handle.open_for(secs(600));
    assert!(!handle.allow_probe());
    tokio::time::advance(secs(10)).await;
    let rejected = call(&mut svc, true).await.unwrap_err();
    assert_eq!(rejected.reason(), Reason::ForcedOpen);
    assert_eq!(rejected.retry_after_from(now()), Some(secs(590)));
}

/// The longest holds build and run: a hold beyond what the clock holds means "until a
/// reset".
#[tokio::test(start_paused = true)]
async fn a_hold_of_any_length_does_not_panic() {
    let (mut svc, handle) = breaker(Builder::new());
    handle.open_for(Duration::MAX);
    let rejected = call(&mut svc, true).await.unwrap_err();
    assert_eq!(rejected.reason(), Reason::ForcedOpen);
    assert!(rejected.retry_after_from(now()).unwrap() >= secs(99 * 365 * 24 * 3600));
    handle.open_for(Duration::ZERO);
    assert_eq!(call(&mut svc, true).await.ok(), Some(Source::Probe));
}

// ---------------------------------------------------------------------------------
// Opening on a hint from outside.
// ---------------------------------------------------------------------------------

/// A hint opens a closed breaker as its own opening would: skipped as open, told when
/// the wait ends, and the next call after it is the probe.
#[tokio::test(start_paused = true)]
async fn a_hint_opens_the_breaker_as_open_until_its_time_then_probes() {
    let (mut svc, handle) = breaker(Builder::new());
    let mut events = handle.subscribe();
    let until = now() + secs(60);
    assert!(handle.hold_open_until(until));
    let t = events.try_recv().unwrap();
    assert_eq!(
        (t.from, t.to, t.cause),
        (State::Closed, State::Open, Cause::Hint)
    );
    let rejected = call(&mut svc, true).await.unwrap_err();
    assert_eq!(
        (rejected.reason(), rejected.state()),
        (Reason::Open, State::Open)
    );
    assert_eq!(rejected.retry_after_from(now()), Some(secs(60)));
    tokio::time::advance(secs(60)).await;
    assert_eq!(call(&mut svc, true).await.ok(), Some(Source::Probe));
    assert_eq!(handle.state(), State::Closed);
}

/// A hint never overrides what knows better: a person's hold, a probe under way, an
/// opening until a reset, or a longer wait of the breaker's own. It only lengthens a
/// shorter one.
#[tokio::test(start_paused = true)]
async fn a_hint_never_overrides_a_person_a_probe_or_a_longer_wait() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(30))),
    );
    handle.force_open();
    assert!(
        !handle.hold_open_until(now() + secs(10)),
        "a person's act wins"
    );
    assert_eq!(handle.state(), State::ForcedOpen);
    handle.reset();

    trip(&mut svc, &handle).await;
    assert!(
        !handle.hold_open_until(now() + secs(10)),
        "its own wait is longer"
    );
    assert!(
        handle.hold_open_until(now() + secs(90)),
        "a longer wait applies"
    );
    tokio::time::advance(secs(30)).await;
    assert_eq!(
        call(&mut svc, true).await.unwrap_err().reason(),
        Reason::Open
    );
    assert!(handle.allow_probe(), "allow_probe ends a hint early");

    let _probe = hold(&mut svc).await;
    assert_eq!(handle.state(), State::HalfOpen);
    assert!(
        !handle.hold_open_until(now() + secs(90)),
        "the probe decides"
    );
}

/// A hold whose time has already passed (a late or stale hint) does not open a closed
/// breaker: its calls go on as before.
#[tokio::test(start_paused = true)]
async fn a_hold_that_has_already_ended_leaves_a_closed_breaker_closed() {
    let (mut svc, handle) = breaker(Builder::new().failure_threshold(1));
    tokio::time::advance(secs(60)).await;
    assert!(!handle.hold_open_until(now() - secs(1)));
    assert!(!handle.hold_open_until(now()));
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(call(&mut svc, true).await.ok(), Some(Source::Service));
}

/// Releasing a hint's hold puts the breaker's own wait back: the rest of a cooldown the
/// hint lengthened, or none (the next call probes) if the hint opened it.
#[tokio::test(start_paused = true)]
async fn releasing_a_hold_puts_the_breakers_own_wait_back() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(30))),
    );
    assert!(handle.hold_open_until(now() + secs(60)));
    assert!(handle.release_hold());
    assert_eq!(
        handle.peek(),
        Advice::Probe,
        "opened by the hint: no wait of its own"
    );
    assert!(!handle.release_hold(), "nothing left to release");
    assert_eq!(call(&mut svc, true).await.ok(), Some(Source::Probe));

    trip(&mut svc, &handle).await;
    tokio::time::advance(secs(10)).await;
    assert!(handle.hold_open_until(now() + secs(600)));
    assert!(
        handle.hold_open_until(now() + secs(900)),
        "a hold lengthens a hold"
    );
    assert!(handle.release_hold());
    let rejected = call(&mut svc, true).await.unwrap_err();
    assert_eq!(
        rejected.retry_after_from(now()),
        Some(secs(20)),
        "the rest of its own cooldown, not the hold's"
    );
    tokio::time::advance(secs(20)).await;
    assert_eq!(call(&mut svc, true).await.ok(), Some(Source::Probe));
}

/// A release never touches what the hint no longer holds: a breaker that opened again
/// on its own calls since (its probe failed), a person's hold, a closed breaker.
#[tokio::test(start_paused = true)]
async fn a_release_after_the_breaker_reopened_on_its_own_leaves_its_cooldown() {
    let (mut svc, handle) = breaker(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(secs(30))),
    );
    assert!(!handle.release_hold(), "closed: nothing to release");
    assert!(handle.hold_open_until(now() + secs(60)));
    tokio::time::advance(secs(60)).await;
    assert_eq!(
        call(&mut svc, false).await.ok(),
        Some(Source::Service),
        "the probe fails"
    );
    assert_eq!(handle.state(), State::Open);
    assert!(!handle.release_hold(), "its own opening now");
    let rejected = call(&mut svc, true).await.unwrap_err();
    assert_eq!(rejected.retry_after_from(now()), Some(secs(30)));

    handle.force_open();
    assert!(!handle.release_hold(), "a person's hold");
    assert_eq!(handle.state(), State::ForcedOpen);
}

/// A kill switch's watchers see every flip, from any clone, without waiting.
#[tokio::test(start_paused = true)]
async fn a_kill_switch_tells_its_watchers_every_flip() {
    let (_svc, handle) = breaker(Builder::new());
    let switch = handle.kill_switch().clone();
    let mut watching = switch.watch();
    assert!(!*watching.borrow_and_update());
    let other = switch.clone();
    other.kill();
    watching.changed().await.unwrap();
    assert!(*watching.borrow_and_update());
    switch.kill(); // already on: nothing to tell
    assert!(!watching.has_changed().unwrap());
    other.revive();
    watching.changed().await.unwrap();
    assert!(!*watching.borrow_and_update());
}
