//! Adversarial tests of the HTTP integration, the recover and saved-answer layers, the
//! admin route and snapshot JSON: hostile headers and bodies from a server, bodies
//! dropped or cut short, bad requests to the admin endpoint. Every HTTP test goes over
//! real TCP on loopback (a raw server that writes exactly the bytes a test scripts, so
//! it can lie about lengths and cut connections); after each one the breaker's counts
//! must still add up.
//!
//! Real sockets need the real clock, so these tests use cooldowns in calls and read
//! waits from snapshots rather than letting time pass; nothing waits on the wall clock
//! except bounded network waits.
#![cfg(all(feature = "http", feature = "admin", feature = "reqwest"))]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_circuit_breaker::admin::Admin;
use tower_circuit_breaker::http::{
    parse_retry_after, source_from_header, BodyTooLarge, BufferBodyLayer, BufferedResponse,
    ErrorBodyBytes, ErrorBodyLayer, HttpClassifier, StreamBodyLayer, StreamClassifier,
};
use tower_circuit_breaker::recover::{Failed, RecoverLayer};
use tower_circuit_breaker::saved::{SaveLayer, SavedAnswers, Unavailable};

#[path = "common/admin_server.rs"]
mod admin_server;
use admin_server::AdminServer;
use tower_circuit_breaker::{
    CircuitBreakerHandle, CircuitBreakerLayer, Cooldown, Outcome, Source, State,
};

/// The bound on any one network wait: a test that exceeds it fails instead of hanging.
const BOUND: Duration = Duration::from_secs(10);

async fn bounded<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(BOUND, future)
        .await
        .expect("within its bound")
}

// ---------------------------------------------------------------------------------
// A raw HTTP/1 server: it reads a request's head and writes exactly the bytes scripted.

/// What the raw server does after writing its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    /// Closes the connection (a body cut short if its length said more).
    Close,
    /// Keeps the connection open and writes nothing more.
    Hold,
}

#[derive(Debug, Clone)]
struct Raw {
    bytes: Vec<u8>,
    then: Then,
}

fn raw(bytes: impl Into<Vec<u8>>, then: Then) -> Raw {
    Raw {
        bytes: bytes.into(),
        then,
    }
}

/// A whole response with this status line, extra header lines and body, and
/// `connection: close`.
fn whole(status: &str, headers: &[&str], body: &str) -> Raw {
    let mut text = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\n", body.len());
    for header in headers {
        text.push_str(header);
        text.push_str("\r\n");
    }
    text.push_str("connection: close\r\n\r\n");
    text.push_str(body);
    raw(text, Then::Close)
}

struct RawServer {
    addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    heads: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl RawServer {
    /// Answers the n-th request with `script[n]`, then with the last entry.
    async fn start(script: Vec<Raw>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let requests = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (count, seen) = (requests.clone(), heads.clone());
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((mut stream, _)) = listener.accept().await {
                let n = count.fetch_add(1, Ordering::SeqCst);
                let reply = script[n.min(script.len() - 1)].clone();
                let seen = seen.clone();
                connections.spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    seen.lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&head).into_owned());
                    if stream.write_all(&reply.bytes).await.is_err() {
                        return;
                    }
                    let _ = stream.flush().await;
                    match reply.then {
                        Then::Close => {
                            let _ = stream.shutdown().await;
                        }
                        Then::Hold => std::future::pending::<()>().await,
                    }
                });
                while connections.try_join_next().is_some() {}
            }
        });
        RawServer {
            addr,
            requests,
            heads,
            task,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/v1/chat/completions", self.addr)
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------------
// Helpers.

type HyperBody = hyper::body::Incoming;

fn hyper_client() -> Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>> {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build_http::<Empty<Bytes>>()
}

fn get(url: &str) -> Request<Empty<Bytes>> {
    Request::get(url).body(Empty::new()).unwrap()
}

/// The snapshot's JSON, with the counts checked to add up as documented.
#[track_caller]
fn checked_json(handle: &CircuitBreakerHandle) -> Value {
    let json = serde_json::to_value(handle.snapshot()).expect("a snapshot serializes");
    let c = &json["counts"];
    let n = |field: &str| {
        c[field]
            .as_u64()
            .unwrap_or_else(|| panic!("{field} in {c}"))
    };
    assert_eq!(
        n("arrived"),
        n("made") + n("skipped") + n("abandoned"),
        "arrived = made + skipped + abandoned: {c}"
    );
    assert_eq!(
        n("made"),
        n("successes") + n("failures") + n("ignored") + n("cancelled") + n("late"),
        "made = successes + failures + ignored + cancelled + late: {c}"
    );
    assert_eq!(
        n("skipped"),
        n("skipped_open")
            + n("skipped_half_open_full")
            + n("skipped_killed")
            + n("skipped_forced_open")
    );
    json
}

fn counts(json: &Value) -> (u64, u64, u64) {
    let c = &json["counts"];
    (
        c["successes"].as_u64().unwrap(),
        c["failures"].as_u64().unwrap(),
        c["cancelled"].as_u64().unwrap(),
    )
}

fn headers(pairs: &[(&'static str, &[u8])]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            *name,
            HeaderValue::from_bytes(value).expect("a header value"),
        );
    }
    map
}

fn hint(outcome: Outcome) -> Option<Duration> {
    match outcome {
        Outcome::Failure(failure) => failure.retry_after_hint(),
        other => panic!("a failure, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------
// HttpClassifier: hostile Retry-After and retry-after-ms values.

#[test]
fn hostile_retry_after_values_never_panic_and_fall_back_to_the_cooldown() {
    let classifier = HttpClassifier::new().max_retry_after(Duration::from_secs(60));
    let cap = Some(Duration::from_secs(60));
    let cases: &[(&[u8], Option<Duration>)] = &[
        (b"", None),
        (b"   ", None),
        (b"-1", None),
        (b"+5", None),
        (b"1.5", None),
        (b"0x10", None),
        (b"12abc", None),
        (b"\xff\xfe", None),
        (b"120, 30", None),
        (b"Wed, 21 Oct 2015 07:28:00 GMT", None), // in the past
        (b"Mon, 32 Oct 2015 07:28:00 GMT", None), // no such day
        (b"Wed, 21 Oct 99999 07:28:00 GMT", None), // no such year
        (b"Fri, 31 Dec 9999 23:59:59 GMT", cap),  // far away: cut to the cap
        (b"99999999999999999999999999999999", cap), // too long for u64: the cap
        (b"7", Some(Duration::from_secs(7))),
        (b" 7 ", Some(Duration::from_secs(7))),
    ];
    for (value, expected) in cases {
        let map = headers(&[("retry-after", value)]);
        let outcome = classifier.classify_parts(StatusCode::TOO_MANY_REQUESTS, &map, None);
        assert_eq!(
            hint(outcome),
            *expected,
            "Retry-After: {:?}",
            String::from_utf8_lossy(value)
        );
    }
}

#[test]
fn hostile_retry_after_ms_values_never_panic_and_otherwise_retry_after_is_read() {
    let classifier = HttpClassifier::new().max_retry_after(Duration::from_secs(60));
    // With `Retry-After: 9` beside it, a bad `retry-after-ms` leaves that one to be read.
    let cases: &[(&[u8], Duration)] = &[
        (b"", Duration::from_secs(9)),
        (b"NaN", Duration::from_secs(9)),
        (b"-5", Duration::from_secs(9)),
        (b"-inf", Duration::from_secs(9)),
        (b"abc", Duration::from_secs(9)),
        (b"1_000", Duration::from_secs(9)),
        (b"\x80", Duration::from_secs(9)),
        (b"1500", Duration::from_millis(1500)),
        (b"2.5e3", Duration::from_millis(2500)),
        (b"1e3", Duration::from_secs(1)),
        (b"1e300", Duration::from_secs(60)), // beyond a Duration: the cap
    ];
    for (value, expected) in cases {
        let map = headers(&[("retry-after-ms", value), ("retry-after", b"9")]);
        let outcome = classifier.classify_parts(StatusCode::SERVICE_UNAVAILABLE, &map, None);
        assert_eq!(
            hint(outcome),
            Some(*expected),
            "retry-after-ms: {:?}",
            String::from_utf8_lossy(value)
        );
    }
    // parse_retry_after is public: nothing it is given makes it panic.
    let now = SystemTime::UNIX_EPOCH;
    for value in ["0", "18446744073709551616", "Thu, 01 Jan 1970 00:00:00 GMT"] {
        let _ = parse_retry_after(&HeaderValue::from_static(value), now);
    }
}

/// A `retry-after-ms` too large for an `f64` is a very long wait, as a `Retry-After` too
/// large for a `u64` is: the cap, not the breaker's own (shorter) cooldown.
#[test]
fn a_retry_after_ms_too_large_for_a_float_is_cut_to_the_cap_like_retry_after() {
    let classifier = HttpClassifier::new().max_retry_after(Duration::from_secs(60));
    let huge = "9".repeat(400);
    for value in ["1e999", huge.as_str()] {
        let map = headers(&[("retry-after-ms", value.as_bytes())]);
        let outcome = classifier.classify_parts(StatusCode::TOO_MANY_REQUESTS, &map, None);
        assert_eq!(
            hint(outcome),
            Some(Duration::from_secs(60)),
            "retry-after-ms: {value}"
        );
    }
}

// ---------------------------------------------------------------------------------
// Streamed bodies and their settlement, over TCP.

type StreamAnswer =
    tower_circuit_breaker::Answer<Response<tower_circuit_breaker::http::StreamBody<HyperBody>>>;

/// A breaker (threshold `threshold`, a cooldown of one call) with `StreamClassifier` over
/// `layer` over hyper's client.
fn stream_stack(
    threshold: u32,
    layer: StreamBodyLayer,
) -> (
    impl Service<Request<Empty<Bytes>>, Response = StreamAnswer, Error = BoxError>,
    CircuitBreakerHandle,
) {
    let breaker = CircuitBreakerLayer::builder()
        .name("stream")
        .failure_threshold(threshold)
        .cooldown(Cooldown::Calls(1))
        .build()
        .expect("valid");
    let handle = breaker.handle();
    let svc = ServiceBuilder::new()
        .layer(breaker.with_classifier(StreamClassifier::default()))
        .layer(layer)
        .service(hyper_client());
    (svc, handle)
}

async fn call_with<S, T>(svc: &mut S, request: Request<Empty<Bytes>>) -> Result<T, BoxError>
where
    S: Service<Request<Empty<Bytes>>, Response = T, Error = BoxError>,
{
    bounded(async { svc.ready().await?.call(request).await }).await
}

/// Calls until the breaker lets a probe through (a skip without a fallback is an error).
async fn probe<S, T>(svc: &mut S, handle: &CircuitBreakerHandle, url: &str) -> T
where
    S: Service<Request<Empty<Bytes>>, Response = T, Error = BoxError>,
{
    for _ in 0..4 {
        let before = handle.snapshot().counts.probes;
        match call_with(svc, get(url)).await {
            Ok(answer) => return answer,
            Err(error) if handle.snapshot().counts.probes == before => {
                assert!(
                    error.is::<tower_circuit_breaker::error::Rejected>(),
                    "only skips before the probe: {error}"
                );
            }
            Err(error) => panic!("the probe failed: {error}"),
        }
    }
    panic!("no probe after four calls");
}

#[tokio::test]
async fn an_empty_end_marker_is_refused_or_harmless_never_a_panic_while_streaming() {
    let server = RawServer::start(vec![whole("200 OK", &[], "hello")]).await;
    let (mut svc, handle) = stream_stack(3, StreamBodyLayer::new().end_marker(b""));
    let answer = call_with(&mut svc, get(&server.url()))
        .await
        .expect("an answer");
    let read = tokio::spawn(async move {
        answer
            .into_inner()
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
    });
    let body = bounded(read)
        .await
        .expect("reading the body does not panic");
    assert_eq!(body.expect("a whole body"), "hello");
    let json = checked_json(&handle);
    assert_eq!(counts(&json), (1, 0, 0));
}

#[tokio::test]
async fn a_204_probe_whose_empty_body_is_dropped_unread_closes_the_breaker() {
    let server = RawServer::start(vec![
        whole("503 Service Unavailable", &[], ""),
        raw(
            "HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n",
            Then::Close,
        ),
    ])
    .await;
    let (mut svc, handle) = stream_stack(1, StreamBodyLayer::new());
    let failed = call_with(&mut svc, get(&server.url()))
        .await
        .expect("a 503");
    drop(failed);
    assert_eq!(handle.state(), State::Open);
    let answer = probe(&mut svc, &handle, &server.url()).await;
    assert_eq!(answer.source(), Source::Probe);
    assert_eq!(answer.get_ref().status(), StatusCode::NO_CONTENT);
    // A 204 has no body: there is nothing to read, and callers do not read it.
    drop(answer);
    let json = checked_json(&handle);
    assert_eq!(handle.state(), State::Closed, "{json}");
    assert_eq!(counts(&json), (1, 1, 0));
}

#[tokio::test]
async fn a_head_response_with_a_content_length_is_not_a_body_cut_short() {
    let server = RawServer::start(vec![raw(
        "HTTP/1.1 200 OK\r\ncontent-length: 1000\r\nconnection: close\r\n\r\n",
        Then::Close,
    )])
    .await;
    let (mut svc, handle) = stream_stack(1, StreamBodyLayer::new());
    let head = Request::head(server.url()).body(Empty::new()).unwrap();
    let answer = call_with(&mut svc, head).await.expect("an answer");
    assert!(server.heads.lock().unwrap()[0].starts_with("HEAD "));
    let body = bounded(answer.into_inner().into_body().collect()).await;
    assert!(body.expect("an empty body").to_bytes().is_empty());
    let json = checked_json(&handle);
    assert_eq!(counts(&json), (1, 0, 0), "{json}");
    assert_eq!(handle.state(), State::Closed);
}

#[tokio::test]
async fn a_stream_dropped_half_read_over_tcp_is_cancelled_and_frees_its_probe_slot() {
    let half = raw(
        "HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789",
        Then::Hold,
    );
    let server = RawServer::start(vec![whole("503 Service Unavailable", &[], ""), half]).await;
    let (mut svc, handle) = stream_stack(1, StreamBodyLayer::new());
    drop(
        call_with(&mut svc, get(&server.url()))
            .await
            .expect("a 503"),
    );
    assert_eq!(handle.state(), State::Open);
    let answer = probe(&mut svc, &handle, &server.url()).await;
    let mut body = answer.into_inner().into_body();
    let first = bounded(body.frame()).await.expect("a frame").expect("data");
    assert_eq!(first.into_data().unwrap(), "0123456789");
    assert_eq!(
        handle.snapshot().probes_in_flight,
        1,
        "held while streaming"
    );
    drop(body);
    let json = checked_json(&handle);
    assert_eq!(counts(&json), (0, 1, 1));
    assert_eq!(json["probes_in_flight"], 0);
    // The slot is free: the next call is a probe again, and reaches the server.
    let before = server.requests();
    let _ = probe(&mut svc, &handle, &server.url()).await;
    assert_eq!(server.requests(), before + 1);
}

#[tokio::test]
async fn a_stream_the_server_cuts_short_is_a_failure_and_two_open_the_breaker() {
    let cut = raw(
        "HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789",
        Then::Close,
    );
    let server = RawServer::start(vec![cut]).await;
    let (mut svc, handle) = stream_stack(2, StreamBodyLayer::new());
    for _ in 0..2 {
        let answer = call_with(&mut svc, get(&server.url()))
            .await
            .expect("headers");
        let read = bounded(answer.into_inner().into_body().collect()).await;
        assert!(read.is_err(), "the body broke");
    }
    let json = checked_json(&handle);
    assert_eq!(counts(&json), (0, 2, 0));
    assert_eq!(handle.state(), State::Open);
    assert!(json["last_failure"]["message"]
        .as_str()
        .unwrap()
        .contains("the answer's stream broke"));
}

#[tokio::test]
async fn an_event_stream_that_closes_before_its_marker_is_a_failure_and_after_it_a_success() {
    let chunked = |body: &str| {
        raw(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
                body.len()
            ),
            Then::Close,
        )
    };
    let server = RawServer::start(vec![
        chunked("data: hi\n\n"),
        chunked("data: hi\n\ndata: [DONE]\n\n"),
    ])
    .await;
    let (mut svc, handle) = stream_stack(3, StreamBodyLayer::new().end_marker(b"data: [DONE]"));
    for _ in 0..2 {
        let answer = call_with(&mut svc, get(&server.url()))
            .await
            .expect("headers");
        bounded(answer.into_inner().into_body().collect())
            .await
            .expect("a whole body");
    }
    let json = checked_json(&handle);
    assert_eq!(counts(&json), (1, 1, 0));
}

// ---------------------------------------------------------------------------------
// Error bodies and bounded reads, over TCP.

type ErrorAnswer =
    tower_circuit_breaker::Answer<Response<tower_circuit_breaker::http::ResponseBody<HyperBody>>>;

/// A breaker (threshold 3, HttpClassifier) over an ErrorBodyLayer of `limit` bytes over
/// hyper's client.
fn error_body_stack(
    limit: usize,
) -> (
    impl Service<Request<Empty<Bytes>>, Response = ErrorAnswer, Error = BoxError>,
    CircuitBreakerHandle,
) {
    let breaker = CircuitBreakerLayer::builder()
        .name("errors")
        .failure_threshold(3)
        .cooldown(Cooldown::Calls(1))
        .build()
        .expect("valid");
    let handle = breaker.handle();
    let svc = ServiceBuilder::new()
        .layer(breaker.with_classifier(HttpClassifier::new()))
        .layer(ErrorBodyLayer::new().limit(limit))
        .service(hyper_client());
    (svc, handle)
}

/// A breaker (threshold 3, HttpClassifier) over a BufferBodyLayer of `limit` bytes.
fn buffer_stack(
    limit: usize,
) -> (
    impl Service<
        Request<Empty<Bytes>>,
        Response = tower_circuit_breaker::Answer<BufferedResponse>,
        Error = BoxError,
    >,
    CircuitBreakerHandle,
) {
    let breaker = CircuitBreakerLayer::builder()
        .name("buffered")
        .failure_threshold(3)
        .cooldown(Cooldown::Calls(1))
        .build()
        .expect("valid");
    let handle = breaker.handle();
    let svc = ServiceBuilder::new()
        .layer(breaker.with_classifier(HttpClassifier::new()))
        .layer(BufferBodyLayer::new().limit(limit))
        .service(hyper_client());
    (svc, handle)
}

#[tokio::test]
async fn a_huge_error_body_is_read_only_to_the_limit_and_the_caller_still_gets_all_of_it() {
    let body = "x".repeat(1024 * 1024);
    let server = RawServer::start(vec![whole("503 Service Unavailable", &[], &body)]).await;
    let (mut svc, handle) = error_body_stack(1024);
    let answer = call_with(&mut svc, get(&server.url()))
        .await
        .expect("the 503");
    let response = answer.into_inner();
    let read = response
        .extensions()
        .get::<ErrorBodyBytes>()
        .expect("read")
        .clone();
    // At most the limit, plus the rest of the frame that crossed it (hyper's frames are
    // small next to a mebibyte).
    assert!(read.as_bytes().len() >= 1024 && read.as_bytes().len() < 512 * 1024);
    let all = bounded(response.into_body().collect())
        .await
        .expect("whole");
    assert_eq!(all.to_bytes().len(), body.len());
    let json = checked_json(&handle);
    assert_eq!(counts(&json), (0, 1, 0));
}

#[tokio::test]
async fn a_body_announced_past_the_buffer_limit_is_refused_without_waiting_for_it() {
    // The server announces a gigabyte and sends nothing: no byte needs to be read to
    // know it is too large, and the call must not hang on it.
    let server = RawServer::start(vec![raw(
        "HTTP/1.1 200 OK\r\ncontent-length: 1000000000\r\n\r\n",
        Then::Hold,
    )])
    .await;
    let (mut svc, handle) = buffer_stack(1024);
    let error = call_with(&mut svc, get(&server.url())).await.unwrap_err();
    let too_large = error.downcast_ref::<BodyTooLarge>().expect("BodyTooLarge");
    assert_eq!(too_large.status(), StatusCode::OK);
    let json = checked_json(&handle);
    assert_eq!(counts(&json), (0, 1, 0));
}

#[tokio::test]
async fn a_chunked_body_past_the_buffer_limit_stops_the_read_and_fails_the_call() {
    let mut text = String::from("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n");
    for _ in 0..64 {
        text.push_str(&format!("400\r\n{}\r\n", "y".repeat(1024)));
    }
    // ... and never ends: the read must stop at the limit, not wait for the end.
    let server = RawServer::start(vec![raw(text, Then::Hold)]).await;
    let (mut svc, handle) = buffer_stack(4096);
    let error = call_with(&mut svc, get(&server.url())).await.unwrap_err();
    assert!(error.is::<BodyTooLarge>(), "{error}");
    let json = checked_json(&handle);
    assert_eq!(counts(&json), (0, 1, 0));
}

/// Serves, through `stack`, a 429 that asks for 30 s and whose body the server cuts
/// short: the server's wait is in the head, which arrived whole; as for a body too large
/// to buffer, the breaker must open at once for that wait.
async fn a_cut_429_opens_for_its_wait<S, T>((mut svc, handle): (S, CircuitBreakerHandle))
where
    S: Service<Request<Empty<Bytes>>, Response = T, Error = BoxError>,
{
    let cut = raw(
        "HTTP/1.1 429 Too Many Requests\r\nretry-after: 30\r\ncontent-length: 200\r\n\r\n{\"error\":",
        Then::Close,
    );
    let server = RawServer::start(vec![cut]).await;
    let _ = call_with(&mut svc, get(&server.url())).await;
    let json = checked_json(&handle);
    assert_eq!(counts(&json), (0, 1, 0));
    assert_eq!(handle.state(), State::Open, "{json}");
    assert!(handle.snapshot().retry_after() > Some(Duration::from_secs(29)));
}

#[tokio::test]
async fn a_429_whose_error_body_breaks_off_still_opens_the_breaker_for_its_retry_after() {
    a_cut_429_opens_for_its_wait(error_body_stack(64 * 1024)).await;
}

#[tokio::test]
async fn a_429_whose_body_breaks_off_while_buffered_still_opens_the_breaker_for_its_retry_after() {
    a_cut_429_opens_for_its_wait(buffer_stack(64 * 1024)).await;
}

#[tokio::test]
async fn a_hostile_retry_after_over_tcp_opens_for_at_most_the_cap() {
    let server = RawServer::start(vec![whole(
        "429 Too Many Requests",
        &[
            "retry-after: 99999999999999999999999999",
            "retry-after-ms: NaN",
        ],
        "{}",
    )])
    .await;
    let breaker = CircuitBreakerLayer::builder()
        .name("capped")
        .failure_threshold(5)
        .build()
        .unwrap();
    let handle = breaker.handle();
    let mut svc = ServiceBuilder::new()
        .layer(
            breaker.with_classifier(HttpClassifier::new().max_retry_after(Duration::from_secs(60))),
        )
        .layer(ErrorBodyLayer::new())
        .service(hyper_client());
    let _ = call_with(&mut svc, get(&server.url()))
        .await
        .expect("the 429");
    assert_eq!(handle.state(), State::Open);
    let wait = handle.snapshot().retry_after().expect("a wait");
    assert!(wait <= Duration::from_secs(60) && wait > Duration::from_secs(59));
    let json = checked_json(&handle);
    assert_eq!(json["retry_after_ms"], 60_000);
}

#[tokio::test]
async fn reqwest_through_the_error_body_layer_keeps_the_quota_marker_and_the_url() {
    let quota = r#"{"error":{"code":"insufficient_quota"}}"#;
    let server = RawServer::start(vec![whole(
        "429 Too Many Requests",
        &["retry-after: 1"],
        quota,
    )])
    .await;
    let breaker = CircuitBreakerLayer::builder()
        .name("reqwest")
        .failure_threshold(3)
        .build()
        .unwrap();
    let handle = breaker.handle();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut svc = ServiceBuilder::new()
        .layer(breaker.with_classifier(HttpClassifier::new()))
        .layer(ErrorBodyLayer::new())
        .service(client);
    let request = reqwest::Request::new(Method::POST, server.url().parse().unwrap());
    let answer = bounded(async { svc.ready().await?.call(request).await })
        .await
        .expect("the 429");
    let response = answer.into_inner();
    assert_eq!(response.url().as_str(), server.url());
    assert_eq!(bounded(response.text()).await.unwrap(), quota);
    let json = checked_json(&handle);
    assert_eq!(json["state"], "open");
    assert_eq!(json["next_probe"]["kind"], "manual");
    assert!(json["last_failure"]["message"]
        .as_str()
        .unwrap()
        .contains("the quota is exhausted"));
}

/// The snapshot and the reports name a failure by its cause ("connect ...:
/// Connection refused"); through `Classify<http::Response<B>, E>` a transport error is
/// named by its top-level text only.
#[tokio::test]
async fn a_refused_connection_is_recorded_with_its_cause_for_an_http_response_client() {
    // A port that was just free: nothing listens on it.
    let addr = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let (mut svc, handle) = error_body_stack(1024);
    let url = format!("http://{addr}/");
    assert!(call_with(&mut svc, get(&url)).await.is_err());
    let json = checked_json(&handle);
    assert_eq!(counts(&json), (0, 1, 0));
    let message = json["last_failure"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.to_lowercase().contains("refused"),
        "the failure names its cause: {message:?}"
    );
}

// ---------------------------------------------------------------------------------
// Provenance.

#[test]
fn hostile_provenance_header_values_are_not_believed_and_never_panic() {
    let values: &[&[u8]] = &[
        b"",
        b";",
        b"fallback",
        b"fallback;",
        b"fallback; reason=",
        b"fallback; reason=open; reason=killed",
        b"fallback; reason=nope",
        b"probe; reason=open",
        b"service; reason=open",
        b"SERVICE",
        b"\xff\xfe",
        b"fallback; reason=\xc3\xa9",
        b"shadowed",
        b"fallback;;reason=failed",
    ];
    for value in values {
        let value = HeaderValue::from_bytes(value).unwrap();
        assert_eq!(source_from_header(&value), None, "{value:?}");
    }
}

// ---------------------------------------------------------------------------------
// RecoverLayer and saved answers, over TCP.

type Recovered = tower_circuit_breaker::Answer<BufferedResponse>;

fn unavailable_response(unavailable: Unavailable) -> BufferedResponse {
    let body = Bytes::from(unavailable.to_string());
    Response::builder().status(503).body(body).unwrap().into()
}

/// The LLM stack of docs/llm-stack.md, minus provenance: recover, save, breaker (threshold 2,
/// cooldown of one call, saved fallback), buffer, hyper's client.
fn saved_stack() -> (
    impl Service<Request<Empty<Bytes>>, Response = Recovered, Error = BoxError>,
    CircuitBreakerHandle,
    SavedAnswers<String, BufferedResponse>,
) {
    let saved = SavedAnswers::new(16, Duration::from_secs(3600)).unwrap();
    let key = |request: &Request<Empty<Bytes>>| Some(request.uri().to_string());
    let save = SaveLayer::new(saved.clone(), key)
        .only_if(|answer: &BufferedResponse| answer.status().is_success());
    let fallback = save.fallback(
        |answer: BufferedResponse, age: Duration| answer.with_age(age),
        unavailable_response,
    );
    let breaker = CircuitBreakerLayer::builder()
        .name("chat")
        .failure_threshold(2)
        .cooldown(Cooldown::Calls(1))
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new())
        .with_fallback_context(fallback.clone());
    let handle = breaker.handle();
    let keep = |request: &Request<Empty<Bytes>>| {
        let mut copy = Request::new(Empty::new());
        *copy.uri_mut() = request.uri().clone();
        Some(copy)
    };
    let svc = ServiceBuilder::new()
        .layer(RecoverLayer::new(handle.clone(), fallback).keep_requests_with(keep))
        .layer(save)
        .layer(breaker)
        .timeout(Duration::from_secs(2))
        .layer(BufferBodyLayer::new().limit(64 * 1024))
        .service(hyper_client());
    (svc, handle, saved)
}

#[tokio::test]
async fn a_503_a_cut_body_and_a_refused_connection_each_get_the_saved_answer_counted_once() {
    let server = RawServer::start(vec![
        whole("200 OK", &[], "the answer is 42"),
        whole("503 Service Unavailable", &["retry-after: 1"], "busy"),
        raw(
            "HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\ncut",
            Then::Close,
        ),
    ])
    .await;
    let (mut svc, handle, saved) = saved_stack();
    let url = server.url();
    let first = call_with(&mut svc, get(&url)).await.unwrap();
    assert_eq!(first.source(), Source::Service);
    assert_eq!(saved.len(), 1);

    let second = call_with(&mut svc, get(&url)).await.unwrap();
    assert_eq!(second.source(), Source::FallbackAfterFailure);
    assert_eq!(second.get_ref().body(), "the answer is 42");
    assert!(second.get_ref().headers().contains_key("age"));
    // The 503 asked for a wait: the breaker opened at once.
    assert_eq!(handle.state(), State::Open);

    let json = checked_json(&handle);
    assert_eq!(counts(&json), (1, 1, 0));
    assert_eq!(server.requests(), 2, "the failed call was not sent again");
    assert_eq!(saved.stored(), 1, "a fallback's answer is never saved");
}

#[tokio::test]
async fn a_cut_body_gets_the_saved_answer_and_is_counted_once_as_a_failure() {
    let server = RawServer::start(vec![
        whole("200 OK", &[], "the answer is 42"),
        raw(
            "HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\ncut",
            Then::Close,
        ),
    ])
    .await;
    let (mut svc, handle, saved) = saved_stack();
    let url = server.url();
    call_with(&mut svc, get(&url)).await.unwrap();
    let answer = call_with(&mut svc, get(&url)).await.unwrap();
    assert_eq!(answer.source(), Source::FallbackAfterFailure);
    assert_eq!(answer.get_ref().body(), "the answer is 42");
    let json = checked_json(&handle);
    assert_eq!(counts(&json), (1, 1, 0));
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(saved.stored(), 1);
    assert_eq!(saved.served(), 1);
}

#[tokio::test]
async fn a_recover_future_dropped_while_the_server_hangs_is_cancelled_and_nothing_is_saved() {
    let server = RawServer::start(vec![raw("", Then::Hold)]).await;
    let (mut svc, handle, saved) = saved_stack();
    let url = server.url();
    {
        let future = bounded(svc.ready()).await.unwrap().call(get(&url));
        // Let the request reach the server (a bounded retry loop), then give up on it.
        let reached = async {
            while server.heads.lock().unwrap().is_empty() {
                tokio::task::yield_now().await;
            }
        };
        tokio::select! {
            _ = future => panic!("the server never answers"),
            () = bounded(reached) => {}
        }
    }
    let json = checked_json(&handle);
    assert_eq!(counts(&json), (0, 0, 1));
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(
        (saved.stored(), saved.served(), saved.unavailable()),
        (0, 0, 0)
    );
}

#[tokio::test]
async fn a_recover_fallback_that_fails_reaches_the_caller_and_the_failure_counts_once() {
    let server = RawServer::start(vec![whole("500 Internal Server Error", &[], "")]).await;
    let breaker = CircuitBreakerLayer::builder()
        .name("chat")
        .failure_threshold(3)
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new());
    let handle = breaker.handle();
    let fallback = service_fn(|failed: Failed<Request<Empty<Bytes>>>| async move {
        assert_eq!(failed.failure.as_deref(), Some("500 Internal Server Error"));
        assert_eq!(failed.snapshot.consecutive_failures, 1);
        Err::<BufferedResponse, _>(std::io::Error::other("the fallback is down too"))
    });
    let keep = |request: &Request<Empty<Bytes>>| {
        let mut copy = Request::new(Empty::new());
        *copy.uri_mut() = request.uri().clone();
        Some(copy)
    };
    let mut svc = ServiceBuilder::new()
        .layer(RecoverLayer::new(handle.clone(), fallback).keep_requests_with(keep))
        .layer(breaker)
        .layer(BufferBodyLayer::new())
        .service(hyper_client());
    let error = call_with(&mut svc, get(&server.url())).await.unwrap_err();
    assert_eq!(error.to_string(), "the fallback is down too");
    let json = checked_json(&handle);
    assert_eq!(counts(&json), (0, 1, 0));
    assert_eq!(server.requests(), 1);
}

/// A panic in the client is documented to reach the caller (resumed, not turned into an
/// error), so the recover layer does not answer it; it counts once, and the breaker
/// stays usable.
#[tokio::test]
async fn a_panicking_client_reaches_the_caller_counts_once_and_the_breaker_stays_usable() {
    let breaker = CircuitBreakerLayer::builder()
        .name("chat")
        .failure_threshold(3)
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new());
    let handle = breaker.handle();
    let fallback = service_fn(|_: Failed<String>| async move {
        Ok::<_, Infallible>(BufferedResponse::from(Response::new(Bytes::from(
            "recovered",
        ))))
    });
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = ServiceBuilder::new()
        .layer(RecoverLayer::new(handle.clone(), fallback))
        .layer(breaker)
        .service(service_fn(move |_: String| {
            let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                assert!(!first, "the client blew up");
                Ok::<_, BoxError>(BufferedResponse::from(Response::new(Bytes::from("ok"))))
            }
        }));
    let mut task_svc = svc.clone();
    let panicked = tokio::spawn(async move {
        let _ = task_svc.ready().await.unwrap().call("q".to_string()).await;
    });
    assert!(bounded(panicked).await.unwrap_err().is_panic());
    let json = checked_json(&handle);
    assert_eq!(counts(&json), (0, 1, 0));
    let mut svc = svc;
    let answer = bounded(async { svc.ready().await?.call("q".to_string()).await })
        .await
        .expect("the breaker is usable");
    assert_eq!(answer.source(), Source::Service);
    assert_eq!(counts(&checked_json(&handle)), (1, 1, 0));
}

// ---------------------------------------------------------------------------------
// The admin route, over TCP, with raw requests.

fn admin_of(handle: &CircuitBreakerHandle) -> Admin {
    Admin::builder()
        .breaker(handle.clone())
        .open_to_anyone()
        .allow_mutations(true)
        .build()
        .unwrap()
}

fn chat_handle() -> CircuitBreakerHandle {
    CircuitBreakerLayer::builder()
        .name("chat")
        .build()
        .unwrap()
        .handle()
}

fn post(path: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[track_caller]
fn error_code(status: u16, body: &str) -> String {
    assert!((400..500).contains(&status), "a 4xx: {status} {body}");
    let json: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("JSON: {body:?}"));
    json["error"]["code"].as_str().expect("a code").to_string()
}

#[tokio::test]
async fn open_for_bodies_that_are_not_the_json_asked_for_are_a_400_and_act_on_nothing() {
    let handle = chat_handle();
    let server = AdminServer::start(admin_of(&handle)).await;
    let deep = format!("{}{}", "[".repeat(2000), "]".repeat(2000));
    let bodies = [
        "\u{feff}{\"seconds\": 1}".to_string(),
        "{\"seconds\": 1} trailing".to_string(),
        "{\"seconds\": 1}{\"seconds\": 2}".to_string(),
        "{\"seconds\": null}".to_string(),
        "{\"seconds\": true}".to_string(),
        "{\"seconds\": [1]}".to_string(),
        "{\"duration_ms\": 1e3}".to_string(),
        "{\"duration_ms\": 18446744073709551616}".to_string(),
        "{\"seconds\": NaN}".to_string(),
        "{\"seconds\": \"\u{0}\"}".to_string(),
        deep,
        "\u{0}\u{1}\u{2}".to_string(),
    ];
    for body in bodies {
        let (status, reply) = server.raw(&post("/breakers/chat/open_for", &body)).await;
        assert_eq!(error_code(status, &reply), "bad_request", "{body:?}");
    }
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(checked_json(&handle)["generation"], 0);
}

#[tokio::test]
async fn the_longest_open_for_an_operator_can_ask_never_panics_and_the_snapshot_says_how_long() {
    let handle = chat_handle();
    let server = AdminServer::start(admin_of(&handle)).await;
    for body in [
        "{\"duration_ms\": 18446744073709551615}",
        "{\"seconds\": 1e18}",
        "{\"seconds\": 1.8e19}",
    ] {
        let (status, reply) = server.raw(&post("/breakers/chat/open_for", body)).await;
        if status == 200 {
            let json: Value = serde_json::from_str(&reply).unwrap();
            assert_eq!(json["state"], "forced_open", "{body}");
            assert!(
                json["retry_after_ms"].as_u64().unwrap() > 1_000_000,
                "{json}"
            );
        } else {
            assert_eq!(error_code(status, &reply), "bad_request", "{body}");
        }
        checked_json(&handle);
        let (status, _) = server.raw(&post("/breakers/chat/reset", "")).await;
        assert_eq!(status, 200);
    }
}

#[tokio::test]
async fn hostile_paths_and_heads_get_a_json_error_and_the_server_stays_up() {
    let handle = chat_handle();
    let server = AdminServer::start(admin_of(&handle)).await;
    let long = "a".repeat(16 * 1024);
    let cases: Vec<(String, &str)> = vec![
        (format!("GET /breakers/{long} HTTP/1.1"), "unknown_breaker"),
        ("GET /breakers/%00 HTTP/1.1".into(), "unknown_breaker"),
        ("GET /breakers/%C3%28 HTTP/1.1".into(), "bad_request"),
        ("GET /breakers/%E2%82 HTTP/1.1".into(), "bad_request"),
        (
            "GET /breakers/chat%2F..%2F HTTP/1.1".into(),
            "unknown_breaker",
        ),
        ("GET /breakers/%%% HTTP/1.1".into(), "bad_request"),
        ("GET ///////// HTTP/1.1".into(), "ok"),
        (
            "GET /breakers/chat/reset/extra/segments HTTP/1.1".into(),
            "not_found",
        ),
        ("POST /breakers/chat HTTP/1.1".into(), "method_not_allowed"),
        ("OPTIONS / HTTP/1.1".into(), "method_not_allowed"),
        ("BREW /breakers HTTP/1.1".into(), "method_not_allowed"),
    ];
    for (line, code) in cases {
        let request = format!("{line}\r\nhost: x\r\nconnection: close\r\n\r\n");
        let (status, body) = server.raw(request.as_bytes()).await;
        if code == "ok" {
            assert_eq!(status, 200, "{line}");
        } else {
            assert_eq!(
                error_code(status, &body),
                code,
                "{}",
                &line[..line.len().min(80)]
            );
        }
    }
    // A body announced past the limit is refused before it is sent.
    let request = b"POST /breakers/chat/open_for HTTP/1.1\r\nhost: x\r\ncontent-length: 99999999999\r\nconnection: close\r\n\r\n";
    let (status, body) = server.raw(request).await;
    assert_eq!(status, 413);
    assert_eq!(error_code(status, &body), "body_too_large");
    // A chunked body of many small chunks past the limit, too.
    let mut chunked = String::from(
        "POST /breakers/chat/open_for HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
    );
    for _ in 0..5000 {
        chunked.push_str("1\r\n \r\n");
    }
    chunked.push_str("0\r\n\r\n");
    let (status, _) = server.raw(chunked.as_bytes()).await;
    assert_eq!(status, 413);
    assert_eq!(handle.state(), State::Closed);
    let (status, _) = server
        .raw(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await;
    assert_eq!(status, 200);
}

/// `%+1` is no escape (RFC 3986: `%` HEXDIG HEXDIG); the docs promise a 400 for a bad
/// escape in the path.
#[tokio::test]
async fn an_escape_with_a_sign_in_it_is_a_bad_request() {
    let handle = chat_handle();
    let server = AdminServer::start(admin_of(&handle)).await;
    let (status, body) = server
        .raw(b"GET /breakers/%+1 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await;
    assert_eq!(error_code(status, &body), "bad_request");
}

/// RFC 9110 §9.1: a general-purpose server supports HEAD wherever it supports GET; load
/// balancers and uptime checks send it.
#[tokio::test]
async fn head_is_answered_wherever_get_is() {
    let handle = chat_handle();
    let server = AdminServer::start(admin_of(&handle)).await;
    for path in ["/", "/breakers", "/breakers/chat"] {
        let request = format!("HEAD {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        let (status, body) = server.raw(request.as_bytes()).await;
        assert_eq!(status, 200, "HEAD {path}");
        assert!(body.is_empty());
    }
}

#[tokio::test]
async fn a_breaker_whose_name_has_a_slash_is_reached_by_its_escaped_name() {
    let handle = CircuitBreakerLayer::builder()
        .name("openai/gpt-4o mini")
        .build()
        .unwrap()
        .handle();
    let server = AdminServer::start(admin_of(&handle)).await;
    let (status, body) = server
        .raw(&post("/breakers/openai%2Fgpt-4o%20mini/force_open", ""))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(handle.state(), State::ForcedOpen);
    let json: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["name"], "openai/gpt-4o mini");
}
