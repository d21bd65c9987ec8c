//! The `http` feature: which statuses and errors count as failures, `Retry-After` (in
//! seconds and as an HTTP date, under its cap), quota errors kept open until reset
//! versus rate limits that probe again, error bodies read for the classifier but kept
//! for the caller, and provenance on the plain `http::Response`.
//!
//! Breaker tests run on tokio's paused clock and move it with `tokio::time::advance`;
//! nothing waits on the wall clock. (An HTTP-date `Retry-After` is measured from the
//! wall clock by design; those tests leave a second of slack for the date's
//! one-second resolution.)
#![cfg(feature = "http")]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::{ready, Ready};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::channel::mpsc;
use futures::FutureExt;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full, StreamBody};
use tokio::time::advance;
use tower::{service_fn, BoxError, Layer, Service, ServiceBuilder, ServiceExt};
use tower_circuit_breaker::classify::Classify;
use tower_circuit_breaker::http::{
    parse_retry_after, provenance, source_from_header, AnswerInfo, BodyBrokeOff, BodyTooLarge,
    BufferBodyLayer, ErrorBody, ErrorBodyBytes, ErrorBodyFuture, ErrorBodyLayer, HttpClassifier,
    Provenance, ProvenanceLayer, ResponseBody, MAX_EMPTY_FRAMES, X_CIRCUIT_BREAKER,
};
use tower_circuit_breaker::{
    Builder, CircuitBreakerHandle, CircuitBreakerLayer, Cooldown, Failure, Mode, NextProbe,
    Outcome, Reason, Source, State,
};

const NS: Duration = Duration::from_nanos(1);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

const QUOTA_BODY: &str = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
const RATE_LIMIT_BODY: &str = r#"{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;

/// A response with this status, these headers and this body.
fn reply(status: u16, headers: &[(&str, &str)], body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::builder().status(status);
    for (name, value) in headers {
        response = response.header(*name, *value);
    }
    response
        .body(Full::new(Bytes::copy_from_slice(body.as_bytes())))
        .expect("a valid response")
}

fn status(status: u16) -> Response<Full<Bytes>> {
    reply(status, &[], "")
}

/// What the classifier makes of `response` on its own (no error body read).
fn classify<B>(classifier: &HttpClassifier, response: Response<B>) -> Outcome {
    classifier.classify(&Ok::<_, io::Error>(response))
}

#[track_caller]
fn failure_of(outcome: Outcome) -> Failure {
    match outcome {
        Outcome::Failure(failure) => failure,
        other => panic!("expected a failure, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------
// The scripted HTTP endpoint and the stack around it.

type Scripted = Result<Response<Full<Bytes>>, io::Error>;

/// An HTTP endpoint that answers each call with the next scripted reply (200 once the
/// script runs out) and counts the calls it receives.
#[derive(Clone, Default)]
struct Endpoint {
    script: Arc<Mutex<VecDeque<Scripted>>>,
    calls: Arc<AtomicUsize>,
}

impl Endpoint {
    fn new(script: impl IntoIterator<Item = Scripted>) -> Self {
        Endpoint {
            script: Arc::new(Mutex::new(script.into_iter().collect())),
            calls: Arc::default(),
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Service<Request<()>> for Endpoint {
    type Response = Response<Full<Bytes>>;
    type Error = io::Error;
    type Future = Ready<Scripted>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let next = self.script.lock().unwrap().pop_front();
        ready(next.unwrap_or_else(|| Ok(status(200))))
    }
}

type ChatBody = ResponseBody<Full<Bytes>>;

/// The fallback: a 503 that says the model is unavailable.
fn unavailable(_: Request<()>) -> Ready<Result<Response<ChatBody>, Infallible>> {
    let response = Response::builder()
        .status(StatusCode::SERVICE_UNAVAILABLE)
        .body(ResponseBody::full("fallback: the model is unavailable"))
        .expect("a valid response");
    ready(Ok(response))
}

/// The whole stack, outside in: provenance, breaker (HTTP classifier, fallback), error
/// body, endpoint.
fn stack(
    endpoint: &Endpoint,
    builder: Builder,
    classifier: HttpClassifier,
) -> (
    impl Service<Request<()>, Response = Response<ChatBody>, Error = BoxError>,
    CircuitBreakerHandle,
) {
    let breaker = builder
        .build()
        .expect("a valid configuration")
        .with_classifier(classifier)
        .with_fallback(service_fn(unavailable));
    let handle = breaker.handle();
    let svc = ServiceBuilder::new()
        .layer(ProvenanceLayer::new())
        .layer(breaker)
        .layer(ErrorBodyLayer::new())
        .service(endpoint.clone());
    (svc, handle)
}

/// A breaker that opens on the first failure, with a 30 s cooldown of its own.
fn one_strike() -> Builder {
    CircuitBreakerLayer::builder()
        .name("chat")
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(30)))
}

async fn send<S>(svc: &mut S) -> Response<ChatBody>
where
    S: Service<Request<()>, Response = Response<ChatBody>, Error = BoxError>,
{
    svc.ready()
        .await
        .expect("the breaker is ready")
        .call(Request::new(()))
        .await
        .expect("an answer")
}

#[track_caller]
fn label(response: &Response<ChatBody>) -> &str {
    response.headers()[X_CIRCUIT_BREAKER]
        .to_str()
        .expect("an ASCII label")
}

#[track_caller]
fn info(response: &Response<ChatBody>) -> AnswerInfo {
    provenance(response).expect("labelled by ProvenanceLayer")
}

async fn body_of<B>(body: B) -> Bytes
where
    B: Body,
    B::Error: std::fmt::Debug,
{
    body.collect().await.expect("a whole body").to_bytes()
}

fn last_failure(handle: &CircuitBreakerHandle) -> String {
    handle
        .snapshot()
        .last_failure
        .expect("a failure was recorded")
        .message
        .to_string()
}

// ---------------------------------------------------------------------------------
// Status classes.

#[test]
fn informational_success_and_redirect_statuses_are_successes() {
    let classifier = HttpClassifier::new();
    for code in [100, 200, 201, 204, 301, 304] {
        assert_eq!(
            classify(&classifier, status(code)),
            Outcome::Success,
            "{code}"
        );
    }
}

#[test]
fn a_4xx_other_than_429_and_408_is_the_callers_fault_not_a_failure() {
    let classifier = HttpClassifier::new();
    for code in [400, 401, 403, 404, 409, 413, 422] {
        assert_eq!(
            classify(&classifier, status(code)),
            Outcome::Success,
            "{code}"
        );
    }
}

#[test]
fn a_401_or_403_is_a_failure_only_for_a_client_that_holds_its_own_key() {
    let own_key = HttpClassifier::new().auth_errors(true);
    for (code, message) in [(401, "401 Unauthorized"), (403, "403 Forbidden")] {
        let Outcome::Failure(failure) = classify(&own_key, status(code)) else {
            panic!("{code} is a failure of a key the client holds");
        };
        assert_eq!(failure.message(), Some(message));
        assert!(!failure.is_permanent(), "a probe tries the key again");
    }
    for code in [400, 404, 422] {
        assert_eq!(classify(&own_key, status(code)), Outcome::Success, "{code}");
    }
}

#[test]
fn a_5xx_a_429_or_a_408_is_a_failure_named_by_its_status() {
    let classifier = HttpClassifier::new();
    for (code, message) in [
        (408, "408 Request Timeout"),
        (429, "429 Too Many Requests"),
        (500, "500 Internal Server Error"),
        (502, "502 Bad Gateway"),
        (503, "503 Service Unavailable"),
        (504, "504 Gateway Timeout"),
        (599, "599"),
    ] {
        let failure = failure_of(classify(&classifier, status(code)));
        assert_eq!(failure.message(), Some(message));
        assert_eq!(failure.retry_after_hint(), None);
        assert!(!failure.is_permanent());
    }
}

#[test]
fn a_transport_error_is_a_failure_whose_message_the_breaker_fills_in() {
    let classifier = HttpClassifier::new();
    let refused: Result<Response<()>, _> = Err(io::Error::other("connection refused"));
    assert_eq!(classifier.classify(&refused), Outcome::failure());
}

#[tokio::test(start_paused = true)]
async fn a_200_and_a_404_leave_the_breaker_closed() {
    let endpoint = Endpoint::new([Ok(status(200)), Ok(reply(404, &[], "no such model"))]);
    let (mut svc, handle) = stack(&endpoint, one_strike(), HttpClassifier::new());

    let ok = send(&mut svc).await;
    assert_eq!(ok.status(), 200);
    let not_found = send(&mut svc).await;
    assert_eq!(not_found.status(), 404);
    assert_eq!(info(&not_found).source, Source::Service);
    assert_eq!(body_of(not_found.into_body()).await, "no such model");

    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().consecutive_failures, 0);
    assert_eq!(endpoint.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_500_opens_the_breaker_and_still_reaches_the_caller() {
    let endpoint = Endpoint::new([Ok(reply(500, &[], "upstream exploded"))]);
    let (mut svc, handle) = stack(&endpoint, one_strike(), HttpClassifier::new());

    let response = send(&mut svc).await;
    assert_eq!(response.status(), 500);
    assert_eq!(label(&response), "service");
    assert_eq!(body_of(response.into_body()).await, "upstream exploded");
    assert_eq!(handle.state(), State::Open);
    assert_eq!(last_failure(&handle), "500 Internal Server Error");
    // No Retry-After: the breaker's own cooldown.
    assert_eq!(handle.snapshot().retry_after(), Some(secs(30)));
}

#[tokio::test(start_paused = true)]
async fn a_transport_error_opens_the_breaker_with_the_errors_text() {
    let endpoint = Endpoint::new([Err(io::Error::other("connection refused"))]);
    let (mut svc, handle) = stack(&endpoint, one_strike(), HttpClassifier::new());

    let error = svc
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .expect_err("the error reaches the caller");
    assert!(error.to_string().contains("connection refused"), "{error}");
    assert_eq!(handle.state(), State::Open);
    assert_eq!(last_failure(&handle), "connection refused");
}

// ---------------------------------------------------------------------------------
// Retry-After.

#[test]
fn parse_retry_after_reads_seconds_and_dates_and_ignores_the_rest() {
    // 2015-10-21 07:28:00 UTC
    let now = SystemTime::UNIX_EPOCH + secs(1_445_412_480);
    let parse = |value: &'static str| parse_retry_after(&HeaderValue::from_static(value), now);

    assert_eq!(parse("120"), Some(secs(120)));
    assert_eq!(parse(" 7 "), Some(secs(7)));
    assert_eq!(parse("0"), Some(Duration::ZERO));
    assert_eq!(parse("99999999999999999999999"), Some(secs(u64::MAX)));
    assert_eq!(parse("Wed, 21 Oct 2015 07:28:30 GMT"), Some(secs(30)));
    // The obsolete date forms HTTP still allows.
    assert_eq!(parse("Wednesday, 21-Oct-15 07:29:00 GMT"), Some(secs(60)));
    assert_eq!(parse("Wed Oct 21 07:28:02 2015"), Some(secs(2)));
    // A date that has passed, or now, leaves the breaker's own cooldown in force.
    assert_eq!(parse("Wed, 21 Oct 2015 07:27:00 GMT"), None);
    assert_eq!(parse("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    for junk in [
        "",
        "soon",
        "-5",
        "1.5",
        "5s",
        "Wed, 32 Oct 2015 07:28:00 GMT",
    ] {
        assert_eq!(parse(junk), None, "{junk:?}");
    }
}

#[test]
fn retry_after_is_read_on_429_and_503_only() {
    let classifier = HttpClassifier::new();
    for code in [429, 503] {
        let response = reply(code, &[("retry-after", "5")], "");
        let failure = failure_of(classify(&classifier, response));
        assert_eq!(failure.retry_after_hint(), Some(secs(5)), "{code}");
    }
    for code in [500, 502, 504] {
        let response = reply(code, &[("retry-after", "5")], "");
        let failure = failure_of(classify(&classifier, response));
        assert_eq!(failure.retry_after_hint(), None, "{code}");
    }
    // A 200 that says Retry-After is still a success.
    let response = reply(200, &[("retry-after", "5")], "");
    assert_eq!(classify(&classifier, response), Outcome::Success);
}

#[test]
fn retry_after_as_an_http_date_is_measured_from_now() {
    let date = httpdate::fmt_http_date(SystemTime::now() + secs(60));
    let response = reply(503, &[("retry-after", &date)], "");
    let wait = failure_of(classify(&HttpClassifier::new(), response))
        .retry_after_hint()
        .expect("a wait");
    // The date has a one-second resolution.
    assert!(wait > secs(58) && wait <= secs(60), "{wait:?}");
}

#[test]
fn retry_after_is_cut_to_the_classifiers_cap() {
    let response = || reply(429, &[("retry-after", "3600")], "");
    let default = failure_of(classify(&HttpClassifier::new(), response()));
    assert_eq!(default.retry_after_hint(), Some(secs(5 * 60)));

    let capped = HttpClassifier::new().max_retry_after(secs(10));
    assert_eq!(
        failure_of(classify(&capped, response())).retry_after_hint(),
        Some(secs(10))
    );
    let date = httpdate::fmt_http_date(SystemTime::now() + secs(3600));
    let dated = reply(503, &[("retry-after", &date)], "");
    assert_eq!(
        failure_of(classify(&capped, dated)).retry_after_hint(),
        Some(secs(10))
    );
}

#[test]
fn openais_retry_after_ms_is_read_first_in_milliseconds() {
    let classifier = HttpClassifier::new();
    let hint = |status: u16, headers: &[(&str, &str)]| {
        failure_of(classify(&classifier, reply(status, headers, ""))).retry_after_hint()
    };
    let ms = Duration::from_millis;
    assert_eq!(hint(429, &[("retry-after-ms", "1500")]), Some(ms(1500)));
    assert_eq!(
        hint(503, &[("retry-after-ms", "0.5")]),
        Some(Duration::from_micros(500))
    );
    assert_eq!(hint(429, &[("retry-after-ms", "0")]), Some(Duration::ZERO));
    // More precise than Retry-After, which comes in whole seconds: read first.
    let both = [("retry-after-ms", "1500"), ("retry-after", "2")];
    assert_eq!(hint(429, &both), Some(ms(1500)));
    // Not a non-negative number: Retry-After decides, or the breaker's cooldown.
    for junk in ["-5", "NaN", "inf", "soon", ""] {
        let headers = [("retry-after-ms", junk), ("retry-after", "2")];
        assert_eq!(hint(429, &headers), Some(secs(2)), "{junk:?}");
        assert_eq!(hint(429, &[("retry-after-ms", junk)]), None, "{junk:?}");
    }
    // Cut to the cap like Retry-After, however large.
    assert_eq!(
        hint(429, &[("retry-after-ms", "3600000")]),
        Some(secs(5 * 60))
    );
    assert_eq!(
        hint(429, &[("retry-after-ms", "1e300")]),
        Some(secs(5 * 60))
    );
    // Read on a 429 and a 503 only.
    assert_eq!(hint(500, &[("retry-after-ms", "1500")]), None);
}

#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_2_holds_the_breaker_open_for_two_seconds() {
    let endpoint = Endpoint::new([Ok(reply(429, &[("retry-after", "2")], RATE_LIMIT_BODY))]);
    let (mut svc, handle) = stack(&endpoint, one_strike(), HttpClassifier::new());

    let limited = send(&mut svc).await;
    assert_eq!(limited.status(), 429);
    assert_eq!(handle.state(), State::Open);
    assert_eq!(last_failure(&handle), "429 Too Many Requests");
    // Retry-After, not the breaker's 30 s cooldown.
    assert_eq!(handle.snapshot().retry_after(), Some(secs(2)));

    advance(secs(2) - NS).await;
    let skipped = send(&mut svc).await;
    assert_eq!(label(&skipped), "fallback; reason=open");
    assert_eq!(
        endpoint.calls(),
        1,
        "no call reaches the endpoint while open"
    );

    advance(NS).await;
    let probe = send(&mut svc).await;
    assert_eq!(label(&probe), "probe");
    assert_eq!(probe.status(), 200);
    assert_eq!(endpoint.calls(), 2);
    assert_eq!(handle.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_503_with_an_http_date_holds_the_breaker_open_until_that_date() {
    let date = httpdate::fmt_http_date(SystemTime::now() + secs(4));
    let endpoint = Endpoint::new([Ok(reply(503, &[("retry-after", &date)], ""))]);
    let (mut svc, handle) = stack(&endpoint, one_strike(), HttpClassifier::new());

    assert_eq!(send(&mut svc).await.status(), 503);
    assert_eq!(handle.state(), State::Open);
    let wait = handle.snapshot().retry_after().expect("a wait");
    assert!(wait > secs(2) && wait <= secs(4), "{wait:?}");

    advance(secs(2)).await;
    assert!(info(&send(&mut svc).await).is_fallback());
    assert_eq!(endpoint.calls(), 1);

    advance(secs(2)).await;
    assert_eq!(label(&send(&mut svc).await), "probe");
    assert_eq!(handle.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_long_retry_after_is_cut_to_the_cap_and_the_probe_goes_then() {
    let endpoint = Endpoint::new([Ok(reply(429, &[("retry-after", "86400")], ""))]);
    let classifier = HttpClassifier::new().max_retry_after(secs(10));
    let (mut svc, handle) = stack(&endpoint, one_strike(), classifier);

    send(&mut svc).await;
    assert_eq!(handle.snapshot().retry_after(), Some(secs(10)));
    advance(secs(10) - NS).await;
    assert!(info(&send(&mut svc).await).is_fallback());
    advance(NS).await;
    assert_eq!(label(&send(&mut svc).await), "probe");
    assert_eq!(endpoint.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_breakers_own_cap_bounds_the_classifiers_wait_too() {
    let endpoint = Endpoint::new([Ok(reply(429, &[("retry-after", "120")], ""))]);
    let builder = one_strike().max_retry_after(secs(5));
    let (mut svc, handle) = stack(&endpoint, builder, HttpClassifier::new());

    send(&mut svc).await;
    assert_eq!(handle.snapshot().retry_after(), Some(secs(5)));
}

// ---------------------------------------------------------------------------------
// Quota errors versus rate limits.

#[test]
fn a_quota_error_body_makes_the_failure_permanent() {
    let classifier = HttpClassifier::new();
    let mut response = reply(429, &[("retry-after", "2")], "");
    response
        .extensions_mut()
        .insert(ErrorBodyBytes(Bytes::from_static(QUOTA_BODY.as_bytes())));
    let failure = failure_of(classify(&classifier, response));
    assert!(failure.is_permanent());
    assert_eq!(
        failure.message(),
        Some("429 Too Many Requests: insufficient_quota (the quota is exhausted)")
    );

    let mut response = reply(429, &[("retry-after", "2")], "");
    response
        .extensions_mut()
        .insert(ErrorBodyBytes(Bytes::from_static(
            RATE_LIMIT_BODY.as_bytes(),
        )));
    let failure = failure_of(classify(&classifier, response));
    assert!(!failure.is_permanent());
    assert_eq!(failure.retry_after_hint(), Some(secs(2)));
}

#[test]
fn a_quota_error_is_permanent_whatever_its_4xx_status() {
    let classifier = HttpClassifier::new();
    for code in [402, 403] {
        let mut response = status(code);
        response
            .extensions_mut()
            .insert(ErrorBodyBytes(Bytes::from_static(QUOTA_BODY.as_bytes())));
        assert!(
            failure_of(classify(&classifier, response)).is_permanent(),
            "{code}"
        );
    }
    // Below 400 the body is never looked at.
    let mut response = status(200);
    response
        .extensions_mut()
        .insert(ErrorBodyBytes(Bytes::from_static(QUOTA_BODY.as_bytes())));
    assert_eq!(classify(&classifier, response), Outcome::Success);
}

#[test]
fn permanent_markers_replace_the_default() {
    let body = r#"{"error":{"code":"billing_hard_limit_reached"}}"#;
    let with = |classifier: &HttpClassifier, body: &'static str| {
        let mut response = status(429);
        response
            .extensions_mut()
            .insert(ErrorBodyBytes(Bytes::from_static(body.as_bytes())));
        failure_of(classify(classifier, response)).is_permanent()
    };
    let billing = HttpClassifier::new().permanent_markers(&["billing_hard_limit_reached"]);
    assert!(with(&billing, body));
    assert!(!with(&billing, QUOTA_BODY));
    assert!(!with(&HttpClassifier::new(), body));
    assert!(!with(
        &HttpClassifier::new().permanent_markers(&[]),
        QUOTA_BODY
    ));
}

#[tokio::test(start_paused = true)]
async fn insufficient_quota_keeps_the_breaker_open_until_reset() {
    let endpoint = Endpoint::new([Ok(reply(429, &[("retry-after", "2")], QUOTA_BODY))]);
    let (mut svc, handle) = stack(&endpoint, one_strike(), HttpClassifier::new());

    let response = send(&mut svc).await;
    assert_eq!(response.status(), 429);
    assert_eq!(body_of(response.into_body()).await, QUOTA_BODY);
    assert_eq!(handle.state(), State::Open);
    assert_eq!(handle.snapshot().next_probe, NextProbe::Manual);
    assert_eq!(
        last_failure(&handle),
        "429 Too Many Requests: insufficient_quota (the quota is exhausted)"
    );

    // Past the Retry-After, the cooldown, and a day: no probe.
    for wait in [secs(2), secs(30), secs(24 * 3600)] {
        advance(wait).await;
        let skipped = send(&mut svc).await;
        assert_eq!(label(&skipped), "fallback; reason=open");
        assert_eq!(info(&skipped).next_probe, NextProbe::Manual);
    }
    assert_eq!(endpoint.calls(), 1);

    handle.reset();
    let response = send(&mut svc).await;
    assert_eq!(label(&response), "service");
    assert_eq!(response.status(), 200);
    assert_eq!(endpoint.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_plain_429_probes_after_retry_after_but_a_quota_429_does_not() {
    let limited = Endpoint::new([Ok(reply(429, &[("retry-after", "2")], RATE_LIMIT_BODY))]);
    let exhausted = Endpoint::new([Ok(reply(429, &[("retry-after", "2")], QUOTA_BODY))]);
    let (mut limited_svc, limited_handle) = stack(&limited, one_strike(), HttpClassifier::new());
    let (mut exhausted_svc, exhausted_handle) =
        stack(&exhausted, one_strike(), HttpClassifier::new());

    send(&mut limited_svc).await;
    send(&mut exhausted_svc).await;
    assert_eq!(limited_handle.state(), State::Open);
    assert_eq!(exhausted_handle.state(), State::Open);
    assert_eq!(limited_handle.snapshot().retry_after(), Some(secs(2)));
    assert_eq!(exhausted_handle.snapshot().retry_after(), None);

    advance(secs(2)).await;
    assert_eq!(label(&send(&mut limited_svc).await), "probe");
    assert_eq!(
        label(&send(&mut exhausted_svc).await),
        "fallback; reason=open"
    );
    assert_eq!(limited_handle.state(), State::Closed);
    assert_eq!(exhausted_handle.state(), State::Open);
    assert_eq!((limited.calls(), exhausted.calls()), (2, 1));
}

#[tokio::test(start_paused = true)]
async fn without_the_error_body_layer_a_quota_429_is_only_a_rate_limit() {
    let endpoint = Endpoint::new([Ok(reply(429, &[("retry-after", "2")], QUOTA_BODY))]);
    let breaker = one_strike()
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new());
    let handle = breaker.handle();
    let mut svc = ServiceBuilder::new()
        .layer(breaker)
        .service(endpoint.clone());

    svc.ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .unwrap();
    assert_eq!(handle.snapshot().retry_after(), Some(secs(2)));
    assert_eq!(last_failure(&handle), "429 Too Many Requests");
}

// ---------------------------------------------------------------------------------
// The error body layer.

type Chunk = Result<Frame<Bytes>, io::Error>;
type Streamed = StreamBody<mpsc::UnboundedReceiver<Chunk>>;

/// A body fed by hand, frame by frame.
fn streamed() -> (mpsc::UnboundedSender<Chunk>, Streamed) {
    let (tx, rx) = mpsc::unbounded();
    (tx, StreamBody::new(rx))
}

fn data(bytes: &'static str) -> Chunk {
    Ok(Frame::data(Bytes::from_static(bytes.as_bytes())))
}

/// An endpoint that answers once with `status` and `body`.
fn answering(
    status: u16,
    body: Streamed,
) -> impl Service<Request<()>, Response = Response<Streamed>, Error = io::Error> {
    answering_with(status, &[], body)
}

/// An endpoint that answers once with `status`, `headers` and `body`.
fn answering_with(
    status: u16,
    headers: &'static [(&'static str, &'static str)],
    body: Streamed,
) -> impl Service<Request<()>, Response = Response<Streamed>, Error = io::Error> {
    let body = Arc::new(Mutex::new(Some(body)));
    service_fn(move |_: Request<()>| {
        let body = body.lock().unwrap().take().expect("called once");
        let mut response = Response::builder().status(status);
        for (name, value) in headers {
            response = response.header(*name, *value);
        }
        ready(Ok::<_, io::Error>(response.body(body).unwrap()))
    })
}

/// A body that sends `partial`, then breaks off: `connection reset`.
fn broken_off() -> Streamed {
    let (tx, body) = streamed();
    tx.unbounded_send(data("partial")).unwrap();
    tx.unbounded_send(Err(io::Error::other("connection reset")))
        .unwrap();
    body
}

#[tokio::test]
async fn the_error_body_layer_keeps_the_body_for_the_caller() {
    let (tx, body) = streamed();
    for chunk in [r#"{"error":"#, r#"{"code":"#, r#""server_error"}}"#] {
        tx.unbounded_send(data(chunk)).unwrap();
    }
    drop(tx);
    let mut svc = ErrorBodyLayer::new().layer(answering(503, body));

    let response = svc
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .unwrap();
    let expected = r#"{"error":{"code":"server_error"}}"#;
    assert_eq!(response.status(), 503);
    assert_eq!(
        response.extensions().get::<ErrorBodyBytes>(),
        Some(&ErrorBodyBytes(Bytes::from_static(expected.as_bytes())))
    );
    assert!(response.body().is_buffered());
    assert_eq!(body_of(response.into_body()).await, expected);
}

#[tokio::test]
async fn an_error_body_over_the_limit_is_cut_short_for_classification_only() {
    let (tx, body) = streamed();
    tx.unbounded_send(data("0123456789")).unwrap();
    let mut svc = ErrorBodyLayer::new().limit(8).layer(answering(500, body));

    // The first chunk passes the limit: the response is ready without the rest.
    let response = svc
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .now_or_never()
        .expect("ready once the limit is read")
        .unwrap();
    assert_eq!(
        response
            .extensions()
            .get::<ErrorBodyBytes>()
            .unwrap()
            .as_bytes(),
        b"01234567"
    );
    assert!(!response.body().is_end_stream());

    // The rest streams on to the caller.
    tx.unbounded_send(data("abcdefghij")).unwrap();
    tx.unbounded_send(data("ABCDEFGHIJ")).unwrap();
    drop(tx);
    assert_eq!(
        body_of(response.into_body()).await,
        "0123456789abcdefghijABCDEFGHIJ"
    );
}

#[tokio::test]
async fn success_bodies_pass_through_unbuffered() {
    let (tx, body) = streamed();
    let mut svc = ErrorBodyLayer::new().layer(answering(200, body));

    // Nothing of the body has been sent, yet the response is here.
    let response = svc
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .now_or_never()
        .expect("a success is not read")
        .unwrap();
    assert!(response.extensions().get::<ErrorBodyBytes>().is_none());
    assert!(!response.body().is_buffered());

    let mut body = response.into_body();
    assert!(body.frame().now_or_never().is_none(), "nothing sent yet");
    tx.unbounded_send(data("first token")).unwrap();
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "first token");
    tx.unbounded_send(data("second token")).unwrap();
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "second token");
    drop(tx);
    assert!(body.frame().await.is_none());
}

#[tokio::test]
async fn an_error_bodys_trailers_reach_the_caller() {
    let (tx, body) = streamed();
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("14"));
    tx.unbounded_send(data("unavailable")).unwrap();
    tx.unbounded_send(Ok(Frame::trailers(trailers.clone())))
        .unwrap();
    drop(tx);
    let mut svc = ErrorBodyLayer::new().layer(answering(503, body));

    let response = svc
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .unwrap();
    let collected = response.into_body().collect().await.unwrap();
    assert_eq!(collected.trailers(), Some(&trailers));
    assert_eq!(collected.to_bytes(), "unavailable");
}

/// One call, which must fail, through a one-strike breaker with `HttpClassifier` over
/// `reader` (an `ErrorBodyLayer` or a `BufferBodyLayer`) over `client`: its error, and
/// the breaker's handle.
async fn failed_through<L, C>(reader: L, client: C) -> (BoxError, CircuitBreakerHandle)
where
    L: Layer<C>,
    L::Service: Service<Request<()>, Error = BoxError>,
    HttpClassifier: Classify<<L::Service as Service<Request<()>>>::Response, BoxError>,
{
    let breaker = one_strike()
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new());
    let handle = breaker.handle();
    let mut svc = ServiceBuilder::new()
        .layer(breaker)
        .layer(reader)
        .service(client);
    let result = svc.ready().await.unwrap().call(Request::new(())).await;
    let Err(error) = result else {
        panic!("the call succeeded");
    };
    (error, handle)
}

#[tokio::test(start_paused = true)]
async fn an_error_while_reading_an_error_body_is_a_failure_of_the_service() {
    let client = answering(502, broken_off());
    let (error, handle) = failed_through(ErrorBodyLayer::new(), client).await;
    // The error keeps the head's status, and has the body's error as its source.
    let broke_off = error.downcast_ref::<BodyBrokeOff>().expect("BodyBrokeOff");
    assert_eq!(broke_off.status(), StatusCode::BAD_GATEWAY);
    assert!(std::error::Error::source(broke_off).is_some_and(|source| source.is::<io::Error>()));
    assert_eq!(handle.state(), State::Open);
    assert_eq!(
        last_failure(&handle),
        "502 Bad Gateway response body broke off: connection reset"
    );
}

/// Read whole for saving, a body that breaks off fails the call whatever its status
/// (the answer is not whole), and a 503's `Retry-After`, which arrived whole in the head,
/// still opens the breaker for that long.
#[tokio::test(start_paused = true)]
async fn a_body_that_breaks_off_while_buffered_keeps_its_heads_status_and_wait() {
    for (status, retry_after) in [(200, None), (503, Some(secs(5)))] {
        let client = answering_with(status, &[("retry-after", "5")], broken_off());
        let (error, handle) = failed_through(BufferBodyLayer::new(), client).await;
        let broke_off = error.downcast_ref::<BodyBrokeOff>().expect("BodyBrokeOff");
        assert_eq!(broke_off.status().as_u16(), status);
        assert_eq!(
            broke_off.retry_after(),
            retry_after,
            "only a 429 or 503 asks"
        );
        let snapshot = handle.snapshot();
        assert_eq!((snapshot.state, snapshot.counts.failures), (State::Open, 1));
        // The server's wait, else the breaker's own cooldown.
        let wait = retry_after.unwrap_or(secs(30));
        assert_eq!(snapshot.retry_after(), Some(wait), "{status}");
        let reason = StatusCode::from_u16(status).unwrap();
        assert_eq!(
            last_failure(&handle),
            format!("{reason} response body broke off: connection reset")
        );
    }
}

/// A peer that sends empty data frames without end, each one at once. It counts the
/// frames it was asked for, and gives up (panics) at 100,000: a reader still reading
/// then would have held every one.
struct EmptyFrames {
    polled: Arc<AtomicUsize>,
}

impl Body for EmptyFrames {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let polled = self.polled.fetch_add(1, Ordering::SeqCst) + 1;
        assert!(
            polled < 100_000,
            "{polled} empty frames read and still reading"
        );
        Poll::Ready(Some(Ok(Frame::data(Bytes::new()))))
    }
}

/// An endpoint that answers with `status` and a body of endless empty frames, and the
/// count of the frames read from it.
fn flooding(
    status: u16,
) -> (
    impl Service<Request<()>, Response = Response<EmptyFrames>, Error = io::Error>,
    Arc<AtomicUsize>,
) {
    let polled = Arc::new(AtomicUsize::new(0));
    let counter = polled.clone();
    let svc = service_fn(move |_: Request<()>| {
        let body = EmptyFrames {
            polled: counter.clone(),
        };
        let response = Response::builder().status(status).body(body).unwrap();
        ready(Ok::<_, io::Error>(response))
    });
    (svc, polled)
}

/// One call to a layer over [`flooding`]: its read of the body must stop by itself, at
/// once, having read no more than [`MAX_EMPTY_FRAMES`] and one.
async fn call_past_the_flood<S>(svc: &mut S, polled: &AtomicUsize) -> Result<S::Response, S::Error>
where
    S: Service<Request<()>>,
{
    let call = svc.ready().await?.call(Request::new(()));
    let result = call.now_or_never().expect("the read stops by itself");
    let read = polled.load(Ordering::SeqCst);
    assert!(read <= MAX_EMPTY_FRAMES + 1, "{read} frames read");
    result
}

#[tokio::test]
async fn an_error_body_of_endless_empty_frames_is_handed_on_after_a_bounded_read() {
    let (endpoint, polled) = flooding(503);
    let mut svc = ErrorBodyLayer::new().layer(endpoint);

    // The byte limit is never reached, yet the read stops, holding nothing.
    let response = call_past_the_flood(&mut svc, &polled).await.unwrap();
    let read = polled.load(Ordering::SeqCst);
    assert_eq!(
        response.extensions().get::<ErrorBodyBytes>(),
        Some(&ErrorBodyBytes(Bytes::new()))
    );

    // The rest streams on to the caller, as past the byte limit.
    let mut body = response.into_body();
    let frame = body.frame().now_or_never().unwrap().unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "");
    assert_eq!(polled.load(Ordering::SeqCst), read + 1);
}

#[tokio::test]
async fn a_body_of_endless_empty_frames_is_over_the_buffer_limit() {
    let (endpoint, polled) = flooding(200);
    let mut svc = BufferBodyLayer::new().layer(endpoint);

    let error = call_past_the_flood(&mut svc, &polled)
        .await
        .expect_err("never whole");
    let too_large = error.downcast_ref::<BodyTooLarge>().expect("BodyTooLarge");
    assert_eq!(too_large.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_fallback_body_is_full_and_an_empty_one_is_empty() {
    let full: ResponseBody<Full<Bytes>> = ResponseBody::full("saved answer");
    assert!(full.is_buffered());
    assert_eq!(full.size_hint().exact(), Some(12));
    assert_eq!(body_of(full).await, "saved answer");
    let empty: ResponseBody<Full<Bytes>> = ResponseBody::empty();
    assert!(empty.is_end_stream());
    assert_eq!(body_of(empty).await, "");
}

// ---------------------------------------------------------------------------------
// Provenance.

#[tokio::test(start_paused = true)]
async fn provenance_labels_service_probe_and_fallback_answers() {
    let endpoint = Endpoint::new([Ok(status(200)), Ok(status(500))]);
    let builder = one_strike().cooldown(Cooldown::Time(secs(10)));
    let (mut svc, handle) = stack(&endpoint, builder, HttpClassifier::new());

    let served = send(&mut svc).await;
    assert_eq!(label(&served), "service");
    let served = info(&served);
    assert_eq!(served.source, Source::Service);
    assert_eq!(served.state, State::Closed);
    assert_eq!(served.next_probe, NextProbe::NotNeeded);
    assert!(!served.is_fallback());

    let failed = send(&mut svc).await;
    assert_eq!((failed.status().as_u16(), label(&failed)), (500, "service"));

    let skipped = send(&mut svc).await;
    assert_eq!(label(&skipped), "fallback; reason=open");
    let fallback = info(&skipped);
    assert_eq!(fallback.source, Source::Fallback(Reason::Open));
    assert_eq!(fallback.state, State::Open);
    assert_eq!(
        fallback
            .next_probe
            .retry_after(tokio::time::Instant::now().into_std()),
        Some(secs(10))
    );
    // It is the fallback's own response that carries the label.
    assert_eq!(skipped.status(), 503);
    assert_eq!(
        body_of(skipped.into_body()).await,
        "fallback: the model is unavailable"
    );

    advance(secs(10)).await;
    let probe = send(&mut svc).await;
    assert_eq!(label(&probe), "probe");
    let probe = info(&probe);
    assert_eq!(probe.source, Source::Probe);
    assert_eq!(probe.state, State::HalfOpen);
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(endpoint.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_killed_call_is_labelled_with_its_reason() {
    let endpoint = Endpoint::default();
    let (mut svc, handle) = stack(&endpoint, one_strike(), HttpClassifier::new());

    handle.kill_switch().kill();
    let killed = send(&mut svc).await;
    assert_eq!(label(&killed), "fallback; reason=killed");
    assert_eq!(info(&killed).source, Source::Fallback(Reason::Killed));
    assert_eq!(endpoint.calls(), 0);

    handle.kill_switch().revive();
    handle.force_open();
    let forced = send(&mut svc).await;
    assert_eq!(label(&forced), "fallback; reason=forced_open");
    assert_eq!(info(&forced).state, State::ForcedOpen);
}

#[tokio::test(start_paused = true)]
async fn an_observed_call_that_would_have_been_skipped_is_labelled_shadowed() {
    let endpoint = Endpoint::new([Ok(status(503))]);
    let builder = one_strike().mode(Mode::ObserveOnly);
    let (mut svc, handle) = stack(&endpoint, builder, HttpClassifier::new());

    send(&mut svc).await;
    assert_eq!(handle.state(), State::Open);
    let observed = send(&mut svc).await;
    assert_eq!(label(&observed), "shadowed; reason=open");
    assert_eq!(info(&observed).source, Source::Shadowed(Reason::Open));
    assert_eq!(observed.status(), 200, "the service answered");
    assert_eq!(endpoint.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn provenance_adds_retry_after_rounded_up_to_a_fallbacks_answer_only_when_the_wait_is_known()
{
    let endpoint = Endpoint::new([Ok(status(500))]);
    let (mut svc, handle) = stack(&endpoint, one_strike(), HttpClassifier::new());

    let failed = send(&mut svc).await;
    assert_eq!(label(&failed), "service");
    assert!(
        failed.headers().get("retry-after").is_none(),
        "the service's own answer"
    );

    advance(Duration::from_millis(12_300)).await;
    let skipped = send(&mut svc).await;
    assert_eq!(label(&skipped), "fallback; reason=open");
    assert_eq!(
        skipped.headers()["retry-after"],
        "18",
        "17.7 s left, rounded up"
    );

    // Forced open until a reset, or killed: nothing is scheduled, nothing is said.
    handle.force_open();
    assert!(send(&mut svc).await.headers().get("retry-after").is_none());
    handle.reset();
    handle.kill_switch().kill();
    assert!(send(&mut svc).await.headers().get("retry-after").is_none());
    assert_eq!(endpoint.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn provenance_keeps_a_retry_after_the_fallback_wrote_itself() {
    let breaker = one_strike()
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new())
        .with_fallback(service_fn(|_: Request<()>| async {
            let response = Response::builder()
                .status(StatusCode::SERVICE_UNAVAILABLE)
                .header("retry-after", "99")
                .body(ResponseBody::full("come back later"))
                .expect("a valid response");
            Ok::<_, Infallible>(response)
        }));
    breaker.handle().open_for(secs(5));
    let mut svc = ServiceBuilder::new()
        .layer(ProvenanceLayer::new())
        .layer(breaker)
        .layer(ErrorBodyLayer::new())
        .service(Endpoint::default());
    let skipped = send(&mut svc).await;
    assert_eq!(label(&skipped), "fallback; reason=forced_open");
    let waits: Vec<_> = skipped.headers().get_all("retry-after").iter().collect();
    assert_eq!(waits, ["99"]);
}

#[tokio::test(start_paused = true)]
async fn provenance_appends_to_a_label_from_a_breaker_farther_away() {
    let upstream = reply(200, &[("x-circuit-breaker", "fallback; reason=open")], "");
    let endpoint = Endpoint::new([Ok(upstream)]);
    let (mut svc, _handle) = stack(&endpoint, one_strike(), HttpClassifier::new());

    let response = send(&mut svc).await;
    let labels: Vec<Option<Source>> = response
        .headers()
        .get_all(X_CIRCUIT_BREAKER)
        .iter()
        .map(source_from_header)
        .collect();
    assert_eq!(
        labels,
        [Some(Source::Fallback(Reason::Open)), Some(Source::Service)]
    );
    // The extension is this process's nearest breaker's.
    assert_eq!(info(&response).source, Source::Service);
}

#[test]
fn a_response_that_went_through_no_breaker_has_no_provenance() {
    assert_eq!(provenance(&status(200)), None);
}

// ---------------------------------------------------------------------------------
// Auto traits.

#[test]
fn public_types_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<HttpClassifier>();
    send_sync::<ErrorBodyLayer>();
    send_sync::<ErrorBody<Endpoint>>();
    send_sync::<ErrorBodyBytes>();
    send_sync::<ResponseBody<Full<Bytes>>>();
    send::<ResponseBody<Streamed>>();
    send_sync::<ErrorBodyFuture<Ready<Scripted>, Response<Full<Bytes>>>>();
    send_sync::<ProvenanceLayer>();
    send_sync::<Provenance<Endpoint>>();
    send_sync::<AnswerInfo>();
    send_sync::<tower_circuit_breaker::http::NotLabelled>();
}

#[test]
fn a_callers_error_that_quotes_a_quota_code_holds_nothing_open() {
    let classifier = HttpClassifier::new();
    // A validation error that echoes the caller's input.
    let echo = br#"{"detail":[{"type":"float_parsing","input":"insufficient_quota"}]}"#;
    for status in [400, 404, 422] {
        let outcome = classifier.classify_parts(
            http::StatusCode::from_u16(status).unwrap(),
            &http::HeaderMap::new(),
            Some(echo),
        );
        assert_eq!(outcome, Outcome::Success, "{status}");
    }
    // The provider's own quota answer still holds it open until a reset.
    let quota = br#"{"error":{"code":"insufficient_quota"}}"#;
    for status in [429, 402, 403] {
        let outcome = classifier.classify_parts(
            http::StatusCode::from_u16(status).unwrap(),
            &http::HeaderMap::new(),
            Some(quota),
        );
        assert!(
            matches!(&outcome, Outcome::Failure(f) if f.is_permanent()),
            "{status}: {outcome:?}"
        );
    }
}
