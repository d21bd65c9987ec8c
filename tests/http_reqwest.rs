//! The `reqwest` feature over real TCP on loopback: a hyper server started by each test
//! (`tests/common/server.rs`: scripted, counting every request it receives) and a `reqwest::Client` inside the
//! breaker, whose answers [`ProvenanceLayer`] turns back into labelled
//! `reqwest::Response`s, and whose error bodies [`ErrorBodyLayer`] reads for the
//! classifier.
//!
//! Time: real sockets need the real clock; nothing here waits for a cooldown (the
//! cooldowns are long, and a `Retry-After` wait is read from the snapshot, or crossed
//! with [`skip`]: tokio's clock, the breaker's, paused and advanced while no request
//! is in flight). The only real wait is the client's 100 ms timeout against a hanging
//! server, and every call is bounded by `tokio::time::timeout`.
#![cfg(feature = "reqwest")]

#[path = "common/server.rs"]
mod server;

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use server::{refused_addr, Reply, TestServer, CHAT_BODY, QUOTA_BODY, RATE_LIMIT_BODY};
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_circuit_breaker::http::ErrorBodyLayer;
use tower_circuit_breaker::http::{
    provenance, source_from_header, ErrorBodyBytes, HttpClassifier, ProvenanceLayer,
    X_CIRCUIT_BREAKER,
};
use tower_circuit_breaker::{
    CircuitBreakerHandle, CircuitBreakerLayer, Cooldown, NextProbe, Reason, Source, State,
};

const CALL_BOUND: Duration = Duration::from_secs(5);
const CLIENT_TIMEOUT: Duration = Duration::from_millis(100);
const FALLBACK_BODY: &str = "fallback: the model is unavailable";

// ---------------------------------------------------------------------------------
// The client stack.

/// The fallback: an honest 503 built as a `reqwest::Response`.
async fn unavailable(_: reqwest::Request) -> Result<reqwest::Response, Infallible> {
    let response = Response::builder()
        .status(503)
        .body(FALLBACK_BODY)
        .expect("a valid response");
    Ok(reqwest::Response::from(response))
}

/// Provenance, the breaker (opens after `threshold` failures, 30 s cooldown), a
/// fallback, error bodies read for the classifier, and a reqwest client with a 100 ms
/// timeout.
fn stack(
    threshold: u32,
) -> (
    impl Service<reqwest::Request, Response = reqwest::Response, Error = BoxError>,
    CircuitBreakerHandle,
) {
    let client = reqwest::Client::builder()
        .timeout(CLIENT_TIMEOUT)
        .build()
        .expect("a client");
    let breaker = CircuitBreakerLayer::builder()
        .name("chat")
        .failure_threshold(threshold)
        .cooldown(Cooldown::Time(Duration::from_secs(30)))
        .build()
        .expect("a valid configuration")
        .with_classifier(HttpClassifier::new())
        .with_fallback(service_fn(unavailable));
    let handle = breaker.handle();
    let svc = ServiceBuilder::new()
        .layer(ProvenanceLayer::new())
        .layer(breaker)
        .layer(ErrorBodyLayer::new())
        .service(client);
    (svc, handle)
}

/// One call, bounded by [`CALL_BOUND`].
async fn call<S>(svc: &mut S, url: &str) -> Result<reqwest::Response, BoxError>
where
    S: Service<reqwest::Request, Response = reqwest::Response, Error = BoxError>,
{
    let mut request = reqwest::Request::new(http::Method::POST, url.parse().expect("a URL"));
    *request.body_mut() = Some(r#"{"model":"local","messages":[]}"#.into());
    let call = async { svc.ready().await?.call(request).await };
    tokio::time::timeout(CALL_BOUND, call)
        .await
        .expect("a call ends within its bound")
}

/// One call that must be answered (by the service or the fallback).
async fn send<S>(svc: &mut S, url: &str) -> reqwest::Response
where
    S: Service<reqwest::Request, Response = reqwest::Response, Error = BoxError>,
{
    call(svc, url).await.expect("an answer")
}

#[track_caller]
fn label(response: &reqwest::Response) -> &str {
    response.headers()[X_CIRCUIT_BREAKER]
        .to_str()
        .expect("an ASCII header")
}

fn last_failure(handle: &CircuitBreakerHandle) -> String {
    let snapshot = handle.snapshot();
    snapshot
        .last_failure
        .expect("a failure")
        .message
        .to_string()
}

/// Lets `wait` pass on tokio's clock, the breaker's clock, without waiting for it.
/// Call it only with no request in flight: the clock is paused for the jump.
async fn skip(wait: Duration) {
    tokio::time::pause();
    tokio::time::advance(wait).await;
    tokio::time::resume();
}

// ---------------------------------------------------------------------------------
// The tests.

#[tokio::test]
async fn a_503_trips_the_breaker_and_the_server_is_left_alone() {
    let server = TestServer::start([Reply::Unavailable, Reply::Unavailable], Reply::Ok).await;
    let (mut svc, handle) = stack(2);

    for _ in 0..2 {
        let response = send(&mut svc, &server.url()).await;
        assert_eq!(response.status(), 503);
        assert_eq!(label(&response), "service");
    }
    assert_eq!(handle.state(), State::Open);
    assert_eq!(last_failure(&handle), "503 Service Unavailable");
    assert_eq!(server.requests(), 2);

    for _ in 0..3 {
        let response = send(&mut svc, &server.url()).await;
        assert_eq!(label(&response), "fallback; reason=open");
    }
    assert_eq!(
        server.requests(),
        2,
        "no call reaches the server while open"
    );
}

#[tokio::test]
async fn a_404_does_not_trip_the_breaker() {
    let server = TestServer::start([Reply::NotFound; 5], Reply::Ok).await;
    let (mut svc, handle) = stack(1);

    for _ in 0..5 {
        let response = send(&mut svc, &server.url()).await;
        assert_eq!(response.status(), 404);
        assert_eq!(label(&response), "service");
        assert!(response.text().await.unwrap().contains("model_not_found"));
    }
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().consecutive_failures, 0);
    assert_eq!(server.requests(), 5);
}

#[tokio::test]
async fn a_refused_connection_trips_the_breaker_with_the_error_text() {
    // A port that was free a moment ago and has no listener now.
    let url = format!("http://{}/v1/chat/completions", refused_addr());
    let (mut svc, handle) = stack(1);

    // The failed call's own error reaches the caller, typed.
    let error = call(&mut svc, &url).await.expect_err("refused");
    let error = error.downcast::<reqwest::Error>().expect("reqwest's error");
    assert!(error.is_connect(), "{error:?}");
    assert_eq!(handle.state(), State::Open);
    let message = last_failure(&handle);
    assert!(message.starts_with("error sending request"), "{message}");
    assert!(
        message.to_lowercase().contains("connection refused"),
        "the message names the cause: {message}"
    );
}

#[tokio::test]
async fn a_hang_trips_the_breaker_through_the_client_timeout() {
    let server = TestServer::start([Reply::Hang], Reply::Ok).await;
    let (mut svc, handle) = stack(1);

    let error = call(&mut svc, &server.url()).await.expect_err("timed out");
    let error = error.downcast::<reqwest::Error>().expect("reqwest's error");
    assert!(error.is_timeout(), "{error:?}");
    assert_eq!(handle.state(), State::Open);
    let message = last_failure(&handle);
    assert!(message.contains("timed out"), "{message}");
    // And the next call is the fallback's.
    let response = send(&mut svc, &server.url()).await;
    assert_eq!(label(&response), "fallback; reason=open");
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn retry_after_on_a_429_sets_the_opening() {
    let server = TestServer::start([Reply::RateLimited(20)], Reply::Ok).await;
    let (mut svc, handle) = stack(1);

    let response = send(&mut svc, &server.url()).await;
    assert_eq!(response.status(), 429);
    assert_eq!(label(&response), "service");
    assert_eq!(handle.state(), State::Open);
    let wait = handle.snapshot().retry_after().expect("a wait");
    assert!(
        wait > Duration::from_secs(19) && wait <= Duration::from_secs(20),
        "{wait:?}"
    );
}

#[tokio::test]
async fn fallback_answers_carry_the_header_and_the_extension() {
    let server = TestServer::start([], Reply::Ok).await;
    let (mut svc, handle) = stack(1);

    let response = send(&mut svc, &server.url()).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        provenance(&response).expect("labelled").source,
        Source::Service
    );

    handle.force_open();
    let response = send(&mut svc, &server.url()).await;
    assert_eq!(response.status(), 503);
    assert_eq!(label(&response), "fallback; reason=forced_open");
    assert_eq!(
        source_from_header(&response.headers()[X_CIRCUIT_BREAKER]),
        Some(Source::Fallback(Reason::ForcedOpen))
    );
    let info = provenance(&response).expect("labelled by ProvenanceLayer");
    assert!(info.is_fallback());
    assert_eq!(info.source, Source::Fallback(Reason::ForcedOpen));
    assert_eq!(info.state, State::ForcedOpen);
    assert_eq!(info.next_probe, NextProbe::Manual);
    assert_eq!(response.text().await.unwrap(), FALLBACK_BODY);
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn an_insufficient_quota_stays_open_until_reset_but_a_rate_limit_probes_after_its_retry_after(
) {
    let limited = TestServer::start([Reply::RateLimited(2)], Reply::Ok).await;
    let exhausted = TestServer::start([Reply::QuotaExhaustedRetryAfter(1)], Reply::Ok).await;
    let (mut limited_svc, limited_handle) = stack(1);
    let (mut exhausted_svc, exhausted_handle) = stack(1);

    // Both are a 429; only the body tells them apart, and the caller still reads it.
    let response = send(&mut limited_svc, &limited.url()).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "2");
    assert_eq!(response.text().await.unwrap(), RATE_LIMIT_BODY);
    let response = send(&mut exhausted_svc, &exhausted.url()).await;
    assert_eq!(response.status(), 429);
    assert_eq!(label(&response), "service");
    assert_eq!(response.url().as_str(), exhausted.url(), "the URL is kept");
    assert_eq!(response.remote_addr(), Some(exhausted.addr()));
    assert_eq!(
        response.extensions().get::<ErrorBodyBytes>(),
        Some(&ErrorBodyBytes(Bytes::from_static(QUOTA_BODY.as_bytes())))
    );
    assert_eq!(response.text().await.unwrap(), QUOTA_BODY);

    assert_eq!(limited_handle.state(), State::Open);
    assert_eq!(exhausted_handle.state(), State::Open);
    let wait = limited_handle.snapshot().retry_after().expect("a wait");
    assert!(
        wait <= Duration::from_secs(2) && wait > Duration::from_millis(1900),
        "the server's 2 s, not the breaker's 30 s: {wait:?}"
    );
    assert_eq!(exhausted_handle.snapshot().next_probe, NextProbe::Manual);
    assert_eq!(
        last_failure(&exhausted_handle),
        "429 Too Many Requests: insufficient_quota (the quota is exhausted)"
    );

    // Past the rate limit's Retry-After (and the quota error's): the rate limit probes
    // and closes; the exhausted quota sends nothing.
    skip(Duration::from_secs(3)).await;
    let probe = send(&mut limited_svc, &limited.url()).await;
    assert_eq!(provenance(&probe).expect("labelled").source, Source::Probe);
    assert_eq!(probe.status(), 200);
    assert_eq!(limited_handle.state(), State::Closed);
    let skipped = send(&mut exhausted_svc, &exhausted.url()).await;
    assert_eq!(label(&skipped), "fallback; reason=open");
    assert_eq!(skipped.text().await.unwrap(), FALLBACK_BODY);
    assert_eq!(exhausted_handle.state(), State::Open);
    assert!(!exhausted_handle.allow_probe(), "only a reset ends it");
    assert_eq!((limited.requests(), exhausted.requests()), (2, 1));

    exhausted_handle.reset();
    let response = send(&mut exhausted_svc, &exhausted.url()).await;
    assert_eq!(label(&response), "service");
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), CHAT_BODY);
    assert_eq!(exhausted.requests(), 2);
}

#[tokio::test]
async fn an_error_body_past_the_limit_reaches_the_caller_whole() {
    let server = TestServer::start([Reply::QuotaExhaustedRetryAfter(1)], Reply::Ok).await;
    let client = reqwest::Client::builder()
        .timeout(CLIENT_TIMEOUT)
        .build()
        .expect("a client");
    let mut svc = ServiceBuilder::new()
        .layer(ErrorBodyLayer::new().limit(10))
        .service(client);

    let request = reqwest::Request::new(http::Method::POST, server.url().parse().unwrap());
    let response =
        tokio::time::timeout(CALL_BOUND, async { svc.ready().await?.call(request).await })
            .await
            .expect("a call ends within its bound")
            .expect("an answer");
    assert_eq!(response.status(), 429);
    assert_eq!(
        response
            .extensions()
            .get::<ErrorBodyBytes>()
            .unwrap()
            .as_bytes(),
        &QUOTA_BODY.as_bytes()[..10]
    );
    assert_eq!(response.text().await.unwrap(), QUOTA_BODY);
}

#[tokio::test]
async fn a_success_passes_through_unread() {
    let server = TestServer::start([], Reply::Ok).await;
    let (mut svc, _handle) = stack(1);

    let response = send(&mut svc, &server.url()).await;
    assert_eq!(response.status(), 200);
    assert!(response.extensions().get::<ErrorBodyBytes>().is_none());
    assert_eq!(response.text().await.unwrap(), CHAT_BODY);
}
