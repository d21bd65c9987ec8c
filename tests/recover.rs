//! `RecoverLayer`: a call that was made and failed gets the fallback's answer instead of
//! the error, labelled `Source::FallbackAfterFailure`; the breaker counts the failure
//! once and the wrapped service is not called again. Paused time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::advance;
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_circuit_breaker::error::Rejected;
use tower_circuit_breaker::recover::{Failed, RecoverLayer};
use tower_circuit_breaker::saved::{SaveLayer, SavedAnswers, Unavailable};
use tower_circuit_breaker::{
    Answer, Builder, CircuitBreakerHandle, Cooldown, Failure, NextProbe, Outcome, Reason, Source,
    State,
};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// What the service does with a prompt: answers `ok:<prompt>` or fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Up,
    /// An error: connection refused.
    Refused,
    /// An `Ok` the classifier calls a failure (an HTTP 503).
    Overloaded,
    /// A 429 asking for 7 s.
    Limited,
}

#[derive(Clone)]
struct Server {
    mode: Arc<Mutex<Mode>>,
    calls: Arc<AtomicUsize>,
}

impl Server {
    fn new() -> Self {
        Server {
            mode: Arc::new(Mutex::new(Mode::Up)),
            calls: Arc::default(),
        }
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn service(
        &self,
    ) -> impl Service<String, Response = String, Error = std::io::Error, Future: Send> + Clone {
        let server = self.clone();
        service_fn(move |prompt: String| {
            server.calls.fetch_add(1, Ordering::SeqCst);
            let mode = *server.mode.lock().unwrap();
            async move {
                match mode {
                    Mode::Up => Ok(format!("ok:{prompt}")),
                    Mode::Refused => Err(std::io::Error::other("connection refused")),
                    Mode::Overloaded => Ok("503 overloaded".to_string()),
                    Mode::Limited => Ok("429 slow down".to_string()),
                }
            }
        })
    }
}

fn classify(result: &Result<String, std::io::Error>) -> Outcome {
    match result {
        Ok(text) if text.starts_with("503") => Outcome::failure_with("503 Service Unavailable"),
        Ok(text) if text.starts_with("429") => {
            Outcome::Failure(Failure::new("429 Too Many Requests").retry_after(secs(7)))
        }
        Ok(_) => Outcome::Success,
        Err(_) => Outcome::failure(),
    }
}

/// What the recovering fallback was given, for the test to look at.
type Seen = Arc<Mutex<Vec<Failed<String>>>>;

/// The fallback for failed calls: `recovered:<prompt>`, recording what it was given.
fn recovering(
    seen: &Seen,
) -> impl Service<Failed<String>, Response = String, Error = BoxError, Future: Send> + Clone {
    let seen = seen.clone();
    service_fn(move |failed: Failed<String>| {
        let answer = format!("recovered:{}", failed.request);
        seen.lock().unwrap().push(failed);
        async move { Ok::<_, BoxError>(answer) }
    })
}

type Stack = tower::util::BoxCloneService<String, Answer<String>, BoxError>;

fn stack(builder: Builder, server: &Server, seen: &Seen) -> (Stack, CircuitBreakerHandle) {
    let breaker = builder
        .name("model")
        .build()
        .unwrap()
        .with_classifier(classify as fn(&Result<String, std::io::Error>) -> Outcome);
    let handle = breaker.handle();
    let svc = ServiceBuilder::new()
        .layer(RecoverLayer::new(handle.clone(), recovering(seen)))
        .layer(breaker)
        .service(server.service());
    (Stack::new(svc), handle)
}

async fn ask<S>(svc: &mut S, prompt: &str) -> Result<Answer<String>, BoxError>
where
    S: Service<String, Response = Answer<String>, Error = BoxError>,
{
    svc.ready().await?.call(prompt.to_string()).await
}

#[tokio::test(start_paused = true)]
async fn a_failed_call_gets_the_fallbacks_answer_and_is_counted_once() {
    let (server, seen) = (Server::new(), Seen::default());
    let (mut svc, handle) = stack(Builder::new().failure_threshold(3), &server, &seen);

    let answer = ask(&mut svc, "a").await.unwrap();
    assert_eq!(
        (answer.source(), answer.get_ref().as_str()),
        (Source::Service, "ok:a")
    );
    assert!(seen.lock().unwrap().is_empty());

    // An error of the service.
    server.set(Mode::Refused);
    let answer = ask(&mut svc, "b").await.unwrap();
    assert_eq!(answer.source(), Source::FallbackAfterFailure);
    assert!(answer.is_fallback());
    assert_eq!(answer.verdict(), None, "a fallback's answer has no verdict");
    assert_eq!(answer.get_ref(), "recovered:b");
    assert_eq!(answer.state(), State::Closed);
    assert_eq!(answer.next_probe(), NextProbe::NotNeeded);
    {
        let seen = seen.lock().unwrap();
        let failed = &seen[0];
        assert_eq!(failed.request, "b");
        assert_eq!(&*failed.breaker, "model");
        assert_eq!(failed.failure.as_deref(), Some("connection refused"));
        assert_eq!(
            failed.error.as_ref().unwrap().to_string(),
            "connection refused"
        );
        assert_eq!(failed.snapshot.consecutive_failures, 1);
    }

    // An `Ok` the classifier calls a failure: the breaker's verdict, not a second one.
    server.set(Mode::Overloaded);
    let answer = ask(&mut svc, "c").await.unwrap();
    assert_eq!(
        (answer.source(), answer.get_ref().as_str()),
        (Source::FallbackAfterFailure, "recovered:c")
    );
    {
        let seen = seen.lock().unwrap();
        assert!(seen[1].error.is_none());
        assert_eq!(seen[1].failure.as_deref(), Some("503 Service Unavailable"));
    }

    // Counted once each, and each made once: the service was not called again.
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.consecutive_failures, 2);
    assert_eq!((snapshot.counts.failures, snapshot.counts.made), (2, 3));
    assert_eq!(server.calls(), 3);

    // The third failure opens it; the answer says when the breaker tries again.
    server.set(Mode::Refused);
    let answer = ask(&mut svc, "d").await.unwrap();
    assert_eq!(answer.source(), Source::FallbackAfterFailure);
    assert_eq!(answer.state(), State::Open, "the state after the failure");
    assert!(matches!(
        answer.next_probe(),
        NextProbe::After { at: Some(_), .. }
    ));
    assert_eq!(seen.lock().unwrap()[2].snapshot.state, State::Open);

    // Skipped now: no fallback on the breaker, so a typed error, which is not a failed
    // call and passes through.
    let error = ask(&mut svc, "e").await.unwrap_err();
    let rejected = error.downcast_ref::<Rejected>().expect("a skip");
    assert_eq!(rejected.reason(), Reason::Open);
    assert_eq!(seen.lock().unwrap().len(), 3);
    assert_eq!(server.calls(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_is_answered_and_reopens_the_breaker() {
    let (server, seen) = (Server::new(), Seen::default());
    let builder = Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(10)));
    let (mut svc, handle) = stack(builder, &server, &seen);
    server.set(Mode::Refused);
    ask(&mut svc, "a").await.unwrap();
    assert_eq!(handle.state(), State::Open);

    advance(secs(10)).await;
    let answer = ask(&mut svc, "probe").await.unwrap();
    assert_eq!(answer.source(), Source::FallbackAfterFailure);
    assert_eq!(answer.state(), State::Open);
    assert_eq!(handle.snapshot().counts.probes, 1);
    assert_eq!(server.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_retry_after_of_a_failed_call_reaches_the_unavailable_answer() {
    // A saved fallback for both: skips and failures.
    let server = Server::new();
    let saved = SavedAnswers::<String, String>::new(10, secs(3600)).unwrap();
    let save = SaveLayer::new(saved.clone(), |prompt: &String| Some(prompt.clone()));
    let fallback = save.fallback(
        |answer: String, age: Duration| format!("[saved {}s ago] {answer}", age.as_secs()),
        |unavailable: Unavailable| unavailable.to_string(),
    );
    let breaker = Builder::new()
        .name("model")
        .failure_threshold(3)
        .build()
        .unwrap()
        .with_classifier(classify as fn(&Result<String, std::io::Error>) -> Outcome)
        .with_fallback_context(fallback.clone());
    let handle = breaker.handle();
    let mut svc = ServiceBuilder::new()
        .layer(RecoverLayer::new(handle.clone(), fallback))
        .layer(save)
        .layer(breaker)
        .service(server.service());

    let first = ask(&mut svc, "q").await.unwrap();
    assert_eq!(first.get_ref(), "ok:q");
    advance(secs(60)).await;

    // The call that fails gets the saved answer, labelled, not an error.
    server.set(Mode::Limited);
    let answer = ask(&mut svc, "q").await.unwrap();
    assert_eq!(answer.source(), Source::FallbackAfterFailure);
    assert_eq!(answer.get_ref(), "[saved 60s ago] ok:q");
    // The 429 opened the breaker at once, for its 7 s.
    assert_eq!(handle.state(), State::Open);
    // A new question that fails has nothing saved: it is told why and when.
    handle.reset();
    let answer = ask(&mut svc, "new").await.unwrap();
    assert_eq!(
        answer.get_ref(),
        "model is unavailable: the call failed (429 Too Many Requests); retry after 7s"
    );
    // Neither the failures nor the fallback's answers were saved.
    assert_eq!((saved.len(), saved.stored()), (1, 1));
    assert_eq!((saved.served(), saved.unavailable()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_request_that_cannot_be_kept_fails_as_it_would_have_and_the_fallbacks_error_surfaces() {
    let server = Server::new();
    server.set(Mode::Refused);
    let breaker = Builder::new().failure_threshold(10).build().unwrap();
    let handle = breaker.handle();
    // Keeps nothing: the failure reaches the caller as the service gave it.
    let never = |_: &String| None;
    let recover = RecoverLayer::new(
        handle.clone(),
        service_fn(|_: Failed<String>| async { Ok::<_, BoxError>("unused".to_string()) }),
    )
    .keep_requests_with(never);
    let mut svc = ServiceBuilder::new()
        .layer(recover)
        .layer(breaker)
        .service(server.service());
    let error = ask(&mut svc, "x").await.unwrap_err();
    assert_eq!(error.to_string(), "connection refused");

    // A fallback that fails: its error, boxed.
    let breaker = Builder::new().failure_threshold(10).build().unwrap();
    let recover = RecoverLayer::new(
        breaker.handle(),
        service_fn(|_: Failed<String>| async {
            Err::<String, _>(std::io::Error::other("the fallback is down too"))
        }),
    );
    let mut svc = ServiceBuilder::new()
        .layer(recover)
        .layer(breaker)
        .service(server.service());
    let error = ask(&mut svc, "x").await.unwrap_err();
    assert_eq!(error.to_string(), "the fallback is down too");
    assert_eq!(handle.snapshot().counts.failures, 1);
}

#[tokio::test(start_paused = true)]
async fn a_poll_ready_error_passes_through_and_a_dropped_call_records_nothing_extra() {
    let breaker = Builder::new().failure_threshold(10).build().unwrap();
    let handle = breaker.handle();
    let seen = Seen::default();
    let recover = RecoverLayer::new(handle.clone(), recovering(&seen));
    let (inner, mut mock) = tower_test::mock::pair::<String, String>();
    let mut svc = ServiceBuilder::new()
        .layer(recover)
        .layer(breaker)
        .service(inner);
    mock.allow(1);
    let future = svc.ready().await.unwrap().call("x".into());
    drop(future);
    let snapshot = handle.snapshot();
    assert_eq!(
        (snapshot.counts.cancelled, snapshot.counts.failures),
        (1, 0)
    );
    assert!(seen.lock().unwrap().is_empty());

    mock.send_error(std::io::Error::other("not ready"));
    let error = svc.ready().await.unwrap_err();
    assert_eq!(error.to_string(), "not ready");
    assert!(seen.lock().unwrap().is_empty());
    assert_eq!(handle.snapshot().counts.failures, 1);
}

#[test]
fn recover_types_are_send_sync_and_clone() {
    fn send_sync<T: Send + Sync>() {}
    fn clone<T: Clone>() {}
    type Fallback =
        tower::util::ServiceFn<fn(Failed<String>) -> std::future::Ready<Result<String, BoxError>>>;
    send_sync::<RecoverLayer<Fallback>>();
    send_sync::<Failed<String>>();
    clone::<RecoverLayer<Fallback>>();
    clone::<Failed<String>>();
}
