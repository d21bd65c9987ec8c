//! The `http` feature end to end over real TCP on loopback: a hyper server started by
//! each test (`tests/common/server.rs`: scripted, counting every request it receives,
//! stopped and restarted on the same port) and hyper-util's client in the stack a model
//! client would use.
//!
//! The stack, outside in: `ProvenanceLayer`, the breaker (`HttpClassifier`, a fallback),
//! `retry`, `timeout`, `ErrorBodyLayer`, the client. Retry is inside the breaker so that
//! one user call counts once however many attempts it took; timeout is inside the
//! breaker so that a hang ends as an error the breaker counts, and inside retry so that
//! each attempt has its own deadline.
//!
//! Time: real sockets need the real clock (a paused clock would fire the timeouts of
//! idle I/O). Cooldowns and `Retry-After` waits are therefore crossed with
//! [`skip`]: pause tokio's clock while no request is in flight, `advance` it, resume.
//! The breaker measures time on tokio's clock, so it sees the wait as passed, and no
//! test sleeps for it. The only real waits are the client's short timeouts against a
//! hanging server (100 ms each), and every wait on the network is bounded by
//! `tokio::time::timeout`.
#![cfg(feature = "http")]

#[path = "common/server.rs"]
mod server;

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use server::{Reply, TestServer, CHAT_BODY, QUOTA_BODY, RATE_LIMIT_BODY};
use tower::retry::Policy;
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_circuit_breaker::http::{
    provenance, ErrorBodyLayer, HttpClassifier, ProvenanceLayer, ResponseBody, X_CIRCUIT_BREAKER,
};
use tower_circuit_breaker::{
    Builder, CircuitBreakerHandle, CircuitBreakerLayer, Cooldown, NextProbe, Reason, Source, State,
};

/// Each attempt's deadline.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(100);
/// The bound on any one user call, retries included: a test that exceeds it fails
/// instead of hanging.
const CALL_BOUND: Duration = Duration::from_secs(5);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

// ---------------------------------------------------------------------------------
// The client stack.

type ReqBody = Full<Bytes>;
type ChatResponse = Response<ResponseBody<Incoming>>;

/// Retries a transport error, a timeout or a 5xx, up to `attempts` attempts in all.
/// A 429 is not retried: its `Retry-After` is the breaker's to honour.
#[derive(Debug, Clone)]
struct RetryTransient {
    attempts: usize,
}

impl<B> Policy<Request<ReqBody>, Response<B>, BoxError> for RetryTransient {
    type Future = Ready<()>;

    fn retry(
        &mut self,
        _: &mut Request<ReqBody>,
        result: &mut Result<Response<B>, BoxError>,
    ) -> Option<Self::Future> {
        let transient = match result {
            Ok(response) => response.status().is_server_error(),
            Err(_) => true,
        };
        // The policy is cloned for each user call, so this counts that call's attempts.
        if transient && self.attempts > 1 {
            self.attempts -= 1;
            Some(ready(()))
        } else {
            None
        }
    }

    fn clone_request(&mut self, request: &Request<ReqBody>) -> Option<Request<ReqBody>> {
        let mut clone = Request::new(request.body().clone());
        *clone.method_mut() = request.method().clone();
        *clone.uri_mut() = request.uri().clone();
        *clone.version_mut() = request.version();
        *clone.headers_mut() = request.headers().clone();
        Some(clone)
    }
}

/// The fallback: an honest 503 that names itself.
fn unavailable(_: Request<ReqBody>) -> Ready<Result<ChatResponse, Infallible>> {
    let response = Response::builder()
        .status(StatusCode::SERVICE_UNAVAILABLE)
        .body(ResponseBody::full("fallback: the model is unavailable"))
        .expect("a valid response");
    ready(Ok(response))
}

/// A breaker that opens after `threshold` failed user calls, with a 30 s cooldown.
fn breaker(threshold: u32) -> Builder {
    CircuitBreakerLayer::builder()
        .name("chat")
        .failure_threshold(threshold)
        .cooldown(Cooldown::Time(secs(30)))
}

/// The whole stack around hyper-util's client, and the breaker's handle.
fn stack(
    builder: Builder,
    attempts: usize,
) -> (
    impl Service<Request<ReqBody>, Response = ChatResponse, Error = BoxError> + Clone,
    CircuitBreakerHandle,
) {
    // No idle connections kept: every attempt opens its own connection, so a stopped
    // server refuses it and a restarted one counts it, with no stale pooled
    // connection in between.
    let client = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build_http::<ReqBody>();
    let breaker = builder
        .build()
        .expect("a valid configuration")
        .with_classifier(HttpClassifier::new())
        .with_fallback(service_fn(unavailable));
    let handle = breaker.handle();
    let svc = ServiceBuilder::new()
        .layer(ProvenanceLayer::new()) // unwraps the Answer, labels the response
        .layer(breaker) // counts one outcome per user call
        .retry(RetryTransient { attempts }) // inside: retries are not seen by the breaker
        .timeout(ATTEMPT_TIMEOUT) // inside: a hang becomes an error, per attempt
        .layer(ErrorBodyLayer::new()) // reads error bodies for the quota marker
        .service(client);
    (svc, handle)
}

fn chat_request(server: &TestServer) -> Request<ReqBody> {
    Request::post(server.url())
        .header("content-type", "application/json")
        .body(Full::from(
            r#"{"model":"local","messages":[{"role":"user","content":"six times seven?"}]}"#,
        ))
        .expect("a valid request")
}

/// One user call, bounded by [`CALL_BOUND`].
async fn call<S>(svc: &mut S, server: &TestServer) -> Result<ChatResponse, BoxError>
where
    S: Service<Request<ReqBody>, Response = ChatResponse, Error = BoxError>,
{
    let request = chat_request(server);
    let call = async { svc.ready().await?.call(request).await };
    tokio::time::timeout(CALL_BOUND, call)
        .await
        .expect("a user call ends within its bound")
}

/// One user call that must be answered (by the service or the fallback).
async fn send<S>(svc: &mut S, server: &TestServer) -> ChatResponse
where
    S: Service<Request<ReqBody>, Response = ChatResponse, Error = BoxError>,
{
    call(svc, server).await.expect("an answer")
}

#[track_caller]
fn source(response: &ChatResponse) -> Source {
    provenance(response)
        .expect("labelled by ProvenanceLayer")
        .source
}

#[track_caller]
fn label(response: &ChatResponse) -> &str {
    response.headers()[X_CIRCUIT_BREAKER]
        .to_str()
        .expect("an ASCII label")
}

async fn body_of(response: ChatResponse) -> Bytes {
    response
        .into_body()
        .collect()
        .await
        .expect("a whole body")
        .to_bytes()
}

/// Lets `wait` pass on tokio's clock, the breaker's clock, without waiting for it.
/// Call it only with no request in flight: the clock is paused for the jump.
async fn skip(wait: Duration) {
    tokio::time::pause();
    tokio::time::advance(wait).await;
    tokio::time::resume();
}

fn retry_after(handle: &CircuitBreakerHandle) -> Duration {
    handle
        .snapshot()
        .retry_after()
        .expect("a probe scheduled in time")
}

// ---------------------------------------------------------------------------------
// Tests.

#[tokio::test]
async fn a_stopped_server_opens_the_breaker_gets_no_calls_while_open_and_one_probe_closes_it() {
    let mut server = TestServer::start([], Reply::Ok).await;
    let (mut svc, handle) = stack(breaker(3), 1);

    for _ in 0..2 {
        let response = send(&mut svc, &server).await;
        assert_eq!(response.status(), 200);
        assert_eq!(source(&response), Source::Service);
        assert_eq!(body_of(response).await, CHAT_BODY);
    }
    assert_eq!(server.requests(), 2);

    server.stop().await;
    for _ in 0..3 {
        let error = call(&mut svc, &server)
            .await
            .expect_err("connection refused");
        assert!(error.to_string().contains("client error"), "{error}");
    }
    assert_eq!(handle.state(), State::Open);
    assert_eq!(handle.snapshot().consecutive_failures, 3);

    // Open: the fallback answers, labelled, without touching the network.
    for _ in 0..3 {
        let response = send(&mut svc, &server).await;
        assert_eq!(source(&response), Source::Fallback(Reason::Open));
        assert_eq!(label(&response), "fallback; reason=open");
        assert_eq!(response.status(), 503);
        assert_eq!(
            body_of(response).await,
            "fallback: the model is unavailable"
        );
    }

    // Back on the same port, but the breaker is still open: the server, which can
    // now count what it receives, receives nothing.
    server.restart().await;
    for _ in 0..3 {
        let response = send(&mut svc, &server).await;
        assert_eq!(source(&response), Source::Fallback(Reason::Open));
    }
    assert_eq!(
        server.requests(),
        2,
        "no call reached the server while open"
    );

    // The cooldown passes: one probe, answered by the restarted server, closes it.
    skip(secs(30)).await;
    let probe = send(&mut svc, &server).await;
    assert_eq!(source(&probe), Source::Probe);
    assert_eq!(label(&probe), "probe");
    assert_eq!(probe.status(), 200);
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(server.requests(), 3);

    let response = send(&mut svc, &server).await;
    assert_eq!(source(&response), Source::Service);
    assert_eq!(server.requests(), 4);
}

#[tokio::test]
async fn a_hanging_server_trips_the_breaker_through_the_timeout() {
    let server = TestServer::start([], Reply::Hang).await;
    let (mut svc, handle) = stack(breaker(2), 2);

    for failures in 1..=2 {
        let error = call(&mut svc, &server).await.expect_err("timed out");
        assert!(
            error.is::<tower::timeout::error::Elapsed>(),
            "the timeout's error reaches the caller: {error}"
        );
        assert_eq!(handle.snapshot().consecutive_failures, failures);
    }
    assert_eq!(handle.state(), State::Open);
    assert_eq!(
        handle.snapshot().last_failure.unwrap().message.to_string(),
        "request timed out"
    );
    // Two user calls of two attempts each.
    assert_eq!(server.requests(), 4);

    let response = send(&mut svc, &server).await;
    assert_eq!(source(&response), Source::Fallback(Reason::Open));
    assert_eq!(server.requests(), 4);
}

#[tokio::test]
async fn a_429_with_retry_after_2_holds_the_breaker_open_for_two_seconds() {
    let server = TestServer::start([Reply::RateLimited(2)], Reply::Ok).await;
    let (mut svc, handle) = stack(breaker(1), 3);

    let limited = send(&mut svc, &server).await;
    assert_eq!(limited.status(), 429);
    assert_eq!(limited.headers()["retry-after"], "2");
    assert_eq!(body_of(limited).await, RATE_LIMIT_BODY);
    assert_eq!(handle.state(), State::Open);
    assert_eq!(server.requests(), 1, "a 429 is not retried");

    // Not the breaker's own 30 s cooldown: the server's 2 s (less the real time the
    // test took since the answer, well under 100 ms).
    let wait = retry_after(&handle);
    assert!(
        wait <= secs(2) && wait > secs(2) - Duration::from_millis(100),
        "{wait:?}"
    );
    assert!(matches!(
        handle.snapshot().next_probe,
        NextProbe::After { at: Some(_), .. }
    ));

    // One second in: still open, still no call.
    skip(secs(1)).await;
    let skipped = send(&mut svc, &server).await;
    assert_eq!(source(&skipped), Source::Fallback(Reason::Open));
    let left = retry_after(&handle);
    assert!(
        left <= secs(1) && left > secs(1) - Duration::from_millis(100),
        "{left:?}"
    );
    assert_eq!(server.requests(), 1);

    // Two seconds in: the probe goes, and the server, no longer limiting, closes it.
    skip(secs(1)).await;
    let probe = send(&mut svc, &server).await;
    assert_eq!(source(&probe), Source::Probe);
    assert_eq!(probe.status(), 200);
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn a_404_does_not_trip_the_breaker() {
    let server = TestServer::start([], Reply::NotFound).await;
    let (mut svc, handle) = stack(breaker(1), 3);

    for _ in 0..3 {
        let response = send(&mut svc, &server).await;
        assert_eq!(response.status(), 404);
        assert_eq!(source(&response), Source::Service);
    }
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().consecutive_failures, 0);
    assert_eq!(server.requests(), 3, "a 404 is not retried");
}

#[tokio::test]
async fn a_rate_limit_probes_again_but_an_insufficient_quota_stays_open_until_reset() {
    let limited = TestServer::start([Reply::RateLimited(2)], Reply::Ok).await;
    let exhausted = TestServer::start([Reply::QuotaExhausted], Reply::Ok).await;
    let (mut limited_svc, limited_handle) = stack(breaker(1), 3);
    let (mut exhausted_svc, exhausted_handle) = stack(breaker(1), 3);

    // Both are a 429; only the body tells them apart.
    let response = send(&mut limited_svc, &limited).await;
    assert_eq!(response.status(), 429);
    let response = send(&mut exhausted_svc, &exhausted).await;
    assert_eq!(response.status(), 429);
    assert_eq!(body_of(response).await, QUOTA_BODY);

    assert_eq!(limited_handle.state(), State::Open);
    assert_eq!(exhausted_handle.state(), State::Open);
    assert!(limited_handle.snapshot().retry_after().is_some());
    assert_eq!(exhausted_handle.snapshot().next_probe, NextProbe::Manual);
    assert_eq!(
        exhausted_handle
            .snapshot()
            .last_failure
            .unwrap()
            .message
            .to_string(),
        "429 Too Many Requests: insufficient_quota (the quota is exhausted)"
    );

    // Past the Retry-After and the breaker's own cooldown: the rate limit probes and
    // closes; the exhausted quota sends nothing.
    skip(secs(60)).await;
    assert_eq!(
        source(&send(&mut limited_svc, &limited).await),
        Source::Probe
    );
    assert_eq!(limited_handle.state(), State::Closed);
    let skipped = send(&mut exhausted_svc, &exhausted).await;
    assert_eq!(source(&skipped), Source::Fallback(Reason::Open));
    assert_eq!(exhausted_handle.state(), State::Open);
    assert!(!exhausted_handle.allow_probe(), "only a reset ends it");
    assert_eq!((limited.requests(), exhausted.requests()), (2, 1));

    exhausted_handle.reset();
    let response = send(&mut exhausted_svc, &exhausted).await;
    assert_eq!(source(&response), Source::Service);
    assert_eq!(response.status(), 200);
    assert_eq!(exhausted.requests(), 2);
}

#[tokio::test]
async fn retry_inside_the_breaker_counts_one_failure_per_user_call() {
    let script = [
        Reply::Unavailable,
        Reply::Unavailable,
        Reply::Unavailable, // first user call: three attempts, all fail
        Reply::Unavailable,
        Reply::Unavailable, // second user call: third attempt succeeds
    ];
    let server = TestServer::start(script, Reply::Ok).await;
    let (mut svc, handle) = stack(breaker(2), 3);

    let response = send(&mut svc, &server).await;
    assert_eq!(response.status(), 503, "the last attempt's answer");
    assert_eq!(source(&response), Source::Service);
    assert_eq!(server.requests(), 3, "the server saw every attempt");
    assert_eq!(handle.snapshot().consecutive_failures, 1, "the breaker one");
    assert_eq!(handle.state(), State::Closed);

    let response = send(&mut svc, &server).await;
    assert_eq!(response.status(), 200);
    assert_eq!(server.requests(), 6);
    assert_eq!(handle.snapshot().consecutive_failures, 0);
    assert_eq!(handle.state(), State::Closed);
}

#[tokio::test]
async fn a_kill_during_a_run_stops_all_calls_to_the_server_at_once() {
    const WORKERS: usize = 4;
    let server = TestServer::start([], Reply::Ok).await;
    let (svc, handle) = stack(breaker(3), 1);
    let killed = Arc::new(AtomicBool::new(false));

    // Four callers in a loop until each has had five answers after the kill.
    let workers = (0..WORKERS).map(|_| {
        let mut svc = svc.clone();
        let killed = killed.clone();
        let server = &server;
        async move {
            let mut after_kill = Vec::new();
            while after_kill.len() < 5 {
                let started_after_kill = killed.load(Ordering::SeqCst);
                let response = send(&mut svc, server).await;
                if started_after_kill {
                    after_kill.push(source(&response));
                }
                tokio::task::yield_now().await;
            }
            after_kill
        }
    });
    let kill = async {
        // Let the run get going, then flip the switch mid-run.
        while server.requests() < 10 {
            tokio::task::yield_now().await;
        }
        let at_kill = server.requests();
        handle.kill_switch().kill();
        killed.store(true, Ordering::SeqCst);
        at_kill
    };
    let run = async { futures::join!(futures::future::join_all(workers), kill) };
    let (answers, at_kill) = tokio::time::timeout(CALL_BOUND, run)
        .await
        .expect("the run ends");

    // Every call that started after the kill got the fallback.
    for after_kill in answers {
        assert!(
            after_kill
                .iter()
                .all(|&source| source == Source::Fallback(Reason::Killed)),
            "{after_kill:?}"
        );
    }
    // At most the calls already in flight at the kill reached the server after it.
    let frozen = server.requests();
    assert!(
        frozen <= at_kill + WORKERS,
        "{frozen} > {at_kill} + {WORKERS}"
    );

    // And nothing more reaches it while the switch is on.
    let mut svc = svc;
    for _ in 0..10 {
        let response = send(&mut svc, &server).await;
        assert_eq!(label(&response), "fallback; reason=killed");
    }
    assert_eq!(server.requests(), frozen);
    assert_eq!(
        handle.state(),
        State::Closed,
        "the kill leaves the state alone"
    );

    handle.kill_switch().revive();
    assert_eq!(source(&send(&mut svc, &server).await), Source::Service);
    assert_eq!(server.requests(), frozen + 1);
}
