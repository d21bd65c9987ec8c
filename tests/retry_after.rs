//! A `Retry-After` through the real layer, on paused time: a later, longer wait (a 429 for
//! a call admitted before the breaker opened, answered late) lengthens the opening so the
//! probe does not go out early into another 429; a shorter one never brings the probe
//! forward; neither touches a person's act (a reset, a forced open, the kill switch); and
//! a wait above the cap (a provider's monthly spend limit: days) is reported as asked
//! while the breaker probes at the cap.

mod common;

use common::reply::Reply;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Response, StatusCode};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{advance, Instant};
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
use tower_circuit_breaker::classify::Classify;
use tower_circuit_breaker::fallback::Skipped;
use tower_circuit_breaker::http::HttpClassifier;
use tower_circuit_breaker::{
    Answer, CircuitBreakerHandle, CircuitBreakerLayer, Cooldown, Failure, Outcome, Reason, Source,
    State,
};

const DAY: u64 = 24 * 3600;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A call's request: the wrapped service answers what the test sends.
struct Req(oneshot::Receiver<Reply>);

fn classify(result: &Result<Reply, Infallible>) -> Outcome {
    match result {
        Ok(Reply::Limited(wait)) => {
            Outcome::Failure(Failure::new("429 Too Many Requests").retry_after(secs(*wait)))
        }
        Ok(_) => Outcome::Success,
        Err(never) => match *never {},
    }
}

type Svc = Box<
    dyn Service<
            Req,
            Response = Answer<Reply>,
            Error = BoxError,
            Future = std::pin::Pin<
                Box<dyn std::future::Future<Output = Result<Answer<Reply>, BoxError>> + Send>,
            >,
        > + Send,
>;

/// A breaker with `threshold` and a 30 s cooldown, `Retry-After` capped at 5 minutes, a
/// fallback that tells the wait the service asked for, and a count of the calls that
/// reached the wrapped service.
fn stack(threshold: u32) -> (Svc, CircuitBreakerHandle, Arc<AtomicU64>) {
    let layer = CircuitBreakerLayer::builder()
        .name("chat")
        .failure_threshold(threshold)
        .cooldown(Cooldown::Time(secs(30)))
        .max_retry_after(secs(300))
        .build()
        .unwrap();
    let handle = layer.handle();
    let made = Arc::new(AtomicU64::new(0));
    let inner = {
        let made = made.clone();
        service_fn(move |Req(reply): Req| {
            made.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, Infallible>(reply.await.unwrap_or(Reply::Ok)) }
        })
    };
    let svc = layer
        .with_classifier(classify)
        .with_fallback_context(service_fn(|skipped: Skipped<Req>| async move {
            let now = Instant::now().into_std();
            let asked = skipped
                .requested_until
                .map(|until| until.saturating_duration_since(now).as_secs());
            Ok::<_, Infallible>(Reply::FallbackAfter(asked))
        }))
        .layer(inner);
    let svc = svc.map_future(|future| Box::pin(future) as _);
    (Box::new(svc), handle, made)
}

/// A call sent now, answered when the test says.
struct InFlight {
    reply: oneshot::Sender<Reply>,
    answer: JoinHandle<Result<Answer<Reply>, BoxError>>,
}

async fn send(svc: &mut Svc) -> InFlight {
    let (reply, rx) = oneshot::channel();
    let future = svc.ready().await.unwrap().call(Req(rx));
    let answer = tokio::spawn(future);
    tokio::task::yield_now().await;
    InFlight { reply, answer }
}

impl InFlight {
    async fn answer(self, reply: Reply) -> Answer<Reply> {
        // A skipped call's request is gone: nobody waits for the reply.
        let _ = self.reply.send(reply);
        self.answer.await.unwrap().unwrap()
    }
}

/// A call answered at once with `reply` (if it is made).
async fn call(svc: &mut Svc, reply: Reply) -> Answer<Reply> {
    send(svc).await.answer(reply).await
}

fn assert_skipped_open(answer: &Answer<Reply>, wait: u64) {
    assert_eq!(
        answer.source(),
        Source::Fallback(Reason::Open),
        "{answer:?}"
    );
    let left = answer
        .next_probe()
        .retry_after(Instant::now().into_std())
        .expect("a wait in time");
    assert_eq!(left, secs(wait), "next probe");
}

#[tokio::test(start_paused = true)]
async fn a_late_longer_retry_after_keeps_the_probe_from_going_out_early() {
    let (mut svc, handle, made) = stack(5);
    let first = send(&mut svc).await;
    let second = send(&mut svc).await;
    // The first 429 asks for 5 s: open at once.
    first.answer(Reply::Limited(5)).await;
    assert_eq!(handle.state(), State::Open);
    // A second later, the other call's 429 asks for a minute: late, and longer.
    advance(secs(1)).await;
    let late = second.answer(Reply::Limited(60)).await;
    assert_eq!(late.source(), Source::Service, "its caller gets its answer");
    let counts = handle.snapshot().counts;
    assert_eq!(
        (counts.failures, counts.late),
        (1, 1),
        "counted once, the late one not"
    );
    // Where the first wait would have let a probe out, the breaker still waits.
    advance(secs(5)).await;
    let answer = call(&mut svc, Reply::Ok).await;
    assert_skipped_open(&answer, 55);
    assert_eq!(made.load(Ordering::SeqCst), 2, "no probe went out early");
    // A minute after the late 429 arrived, the probe goes.
    advance(secs(55)).await;
    let probe = call(&mut svc, Reply::Ok).await;
    assert_eq!(probe.source(), Source::Probe);
    assert_eq!(handle.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_late_shorter_retry_after_never_brings_the_probe_forward() {
    let (mut svc, handle, made) = stack(5);
    let first = send(&mut svc).await;
    let second = send(&mut svc).await;
    first.answer(Reply::Limited(60)).await;
    advance(secs(1)).await;
    second.answer(Reply::Limited(5)).await;
    advance(secs(5)).await;
    let answer = call(&mut svc, Reply::Ok).await;
    assert_skipped_open(&answer, 54);
    advance(secs(54)).await;
    assert_eq!(call(&mut svc, Reply::Ok).await.source(), Source::Probe);
    assert_eq!(made.load(Ordering::SeqCst), 3);
    assert_eq!(handle.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_late_retry_after_never_undoes_a_reset_made_after_its_call_was_admitted() {
    let (mut svc, handle, _) = stack(5);
    let first = send(&mut svc).await;
    let before_reset = send(&mut svc).await;
    first.answer(Reply::Limited(5)).await;
    assert_eq!(handle.state(), State::Open);
    // A person resets the breaker, whose own calls then open it again for 5 s.
    handle.reset();
    assert_eq!(handle.state(), State::Closed);
    call(&mut svc, Reply::Limited(5)).await;
    assert_eq!(handle.state(), State::Open);
    // The call admitted before the reset answers with a 429 asking for a minute.
    advance(secs(1)).await;
    before_reset.answer(Reply::Limited(60)).await;
    assert_eq!(handle.snapshot().counts.late, 1);
    // The opening stands as the breaker's own calls made it: the probe at 5 s.
    assert_eq!(handle.snapshot().retry_after(), Some(secs(4)));
    advance(secs(4)).await;
    assert_eq!(call(&mut svc, Reply::Ok).await.source(), Source::Probe);
    assert_eq!(handle.state(), State::Closed);

    // Reset while open, and nothing since: the late 429 finds it closed, and leaves it so.
    let first = send(&mut svc).await;
    let before_reset = send(&mut svc).await;
    first.answer(Reply::Limited(5)).await;
    handle.reset();
    before_reset.answer(Reply::Limited(60)).await;
    let snapshot = handle.snapshot();
    assert_eq!(
        (snapshot.state, snapshot.consecutive_failures),
        (State::Closed, 0)
    );
    assert_eq!(call(&mut svc, Reply::Ok).await.source(), Source::Service);
}

#[tokio::test(start_paused = true)]
async fn a_late_retry_after_never_alters_a_forced_open_or_a_hold_for_a_time() {
    let (mut svc, handle, _) = stack(5);
    // Held open for 10 s by a person after the breaker opened: the hold decides.
    let first = send(&mut svc).await;
    let second = send(&mut svc).await;
    first.answer(Reply::Limited(5)).await;
    handle.open_for(secs(10));
    advance(secs(1)).await;
    second.answer(Reply::Limited(60)).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::ForcedOpen);
    assert_eq!(
        snapshot.retry_after(),
        Some(secs(9)),
        "the person's 10 s, not a minute"
    );
    assert_eq!(snapshot.requested_until, None);
    advance(secs(9)).await;
    assert_eq!(call(&mut svc, Reply::Ok).await.source(), Source::Probe);

    // Forced open until a reset: a late wait leaves it so.
    let first = send(&mut svc).await;
    let second = send(&mut svc).await;
    first.answer(Reply::Limited(5)).await;
    handle.force_open();
    second.answer(Reply::Limited(60)).await;
    let answer = call(&mut svc, Reply::Ok).await;
    assert_eq!(answer.source(), Source::Fallback(Reason::ForcedOpen));
    assert_eq!(
        answer.next_probe(),
        tower_circuit_breaker::NextProbe::Manual
    );
}

#[tokio::test(start_paused = true)]
async fn a_late_retry_after_while_killed_leaves_the_kill_switch_on_and_the_wait_the_breakers() {
    let (mut svc, handle, made) = stack(5);
    let first = send(&mut svc).await;
    let second = send(&mut svc).await;
    first.answer(Reply::Limited(5)).await;
    handle.kill_switch().kill();
    advance(secs(1)).await;
    second.answer(Reply::Limited(60)).await;
    // The person's act stands: every call is skipped as killed.
    assert!(handle.kill_switch().is_killed());
    let answer = call(&mut svc, Reply::Ok).await;
    assert_eq!(answer.source(), Source::Fallback(Reason::Killed));
    // Revived after the first wait: the breaker's own wait, lengthened, still holds.
    advance(secs(5)).await;
    handle.kill_switch().revive();
    let answer = call(&mut svc, Reply::Ok).await;
    assert_skipped_open(&answer, 55);
    assert_eq!(made.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_late_retry_after_leaves_a_half_open_breaker_to_its_probe() {
    let (mut svc, handle, _) = stack(5);
    let first = send(&mut svc).await;
    let second = send(&mut svc).await;
    first.answer(Reply::Limited(5)).await;
    advance(secs(5)).await;
    let probe = send(&mut svc).await;
    assert_eq!(handle.state(), State::HalfOpen);
    second.answer(Reply::Limited(60)).await;
    assert_eq!(handle.state(), State::HalfOpen, "the probe decides");
    assert_eq!(probe.answer(Reply::Ok).await.source(), Source::Probe);
    assert_eq!(handle.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_three_day_wait_is_reported_as_three_days_while_the_breaker_probes_at_the_cap() {
    let (mut svc, handle, made) = stack(5);
    let mut changes = handle.subscribe();
    call(&mut svc, Reply::Limited(3 * DAY)).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(snapshot.retry_after(), Some(secs(300)), "probes at the cap");
    assert_eq!(
        snapshot.requested_wait(),
        Some(secs(3 * DAY)),
        "says what was asked"
    );
    let json = serde_json::to_value(&snapshot).unwrap();
    assert_eq!(json["retry_after_ms"], 300_000);
    assert_eq!(json["requested_wait_ms"], 3 * DAY * 1000);
    let opened = changes.try_recv().unwrap();
    assert_eq!(opened.requested_until, snapshot.requested_until);
    assert!(
        opened
            .to_string()
            .ends_with("; next probe in 300s; the service asked to wait 259200s"),
        "{opened}"
    );
    // A skipped call is told both: the next probe at the cap, and what the service asked.
    advance(secs(60)).await;
    let answer = call(&mut svc, Reply::Ok).await;
    assert_skipped_open(&answer, 240);
    assert_eq!(*answer.get_ref(), Reply::FallbackAfter(Some(3 * DAY - 60)));
    // At the cap the probe goes, into the service's answer.
    advance(secs(240)).await;
    let probe = call(&mut svc, Reply::Limited(3 * DAY - 300)).await;
    assert_eq!(probe.source(), Source::Probe);
    assert_eq!(made.load(Ordering::SeqCst), 2);
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.retry_after(), Some(secs(300)));
    assert_eq!(snapshot.requested_wait(), Some(secs(3 * DAY - 300)));
    // The sentence a caller or a model is given says both waits.
    let told = tower_circuit_breaker::saved::Unavailable::from_snapshot(&snapshot).to_string();
    assert!(
        told.ends_with("; retry after 5m 0s (the service asked to wait 2d 23h 55m 0s)"),
        "{told}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_the_breaker_keeps_whole_reports_nothing_more() {
    let (mut svc, handle, _) = stack(5);
    call(&mut svc, Reply::Limited(60)).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.retry_after(), Some(secs(60)));
    assert_eq!(snapshot.requested_until, None);
    let json = serde_json::to_value(&snapshot).unwrap();
    assert_eq!(json["requested_wait_ms"], serde_json::Value::Null);
    let answer = call(&mut svc, Reply::Ok).await;
    assert_eq!(*answer.get_ref(), Reply::FallbackAfter(None));
}

#[tokio::test(start_paused = true)]
async fn a_late_wait_above_the_cap_lengthens_to_the_cap_and_reports_the_rest() {
    let (mut svc, handle, _) = stack(5);
    let first = send(&mut svc).await;
    let second = send(&mut svc).await;
    first.answer(Reply::Limited(5)).await;
    advance(secs(2)).await;
    second.answer(Reply::Limited(3 * DAY)).await;
    let snapshot = handle.snapshot();
    assert_eq!(
        snapshot.retry_after(),
        Some(secs(300)),
        "the cap, from its arrival"
    );
    assert_eq!(snapshot.requested_wait(), Some(secs(3 * DAY)));
}

/// The HTTP classifier hands the breaker the server's wait uncut, with its bound beside
/// it: the breaker probes at the bound and reports the rest.
#[tokio::test(start_paused = true)]
async fn the_http_classifier_keeps_a_monthly_limits_wait_whole_and_the_breaker_reports_it() {
    let three_days = (3 * DAY).to_string();
    let response: Result<_, Infallible> = Ok(Response::builder()
        .status(StatusCode::TOO_MANY_REQUESTS)
        .header("retry-after", three_days.as_str())
        .body(())
        .unwrap());
    let classifier = HttpClassifier::new().max_retry_after(secs(120));
    let Outcome::Failure(failure) = classifier.classify(&response) else {
        panic!("a failure")
    };
    assert_eq!(failure.retry_after_hint(), Some(secs(120)));
    assert_eq!(failure.requested_wait(), Some(secs(3 * DAY)));

    let layer = CircuitBreakerLayer::builder()
        .build()
        .unwrap()
        .with_classifier(classifier);
    let handle = layer.handle();
    let mut svc = layer.layer(service_fn(|()| async {
        Ok::<_, Infallible>(
            Response::builder()
                .status(StatusCode::TOO_MANY_REQUESTS)
                .header("retry-after", (3 * DAY).to_string())
                .body(())
                .unwrap(),
        )
    }));
    svc.ready().await.unwrap().call(()).await.unwrap();
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.retry_after(), Some(secs(120)), "the smaller bound");
    assert_eq!(snapshot.requested_wait(), Some(secs(3 * DAY)));
}
