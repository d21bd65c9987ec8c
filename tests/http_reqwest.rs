//! The `reqwest` feature over real TCP on loopback: a hyper server started by each test
//! (scripted, counting every request it receives) and a `reqwest::Client` inside the
//! breaker, whose answers [`ReqwestProvenanceLayer`] turns back into labelled
//! `reqwest::Response`s.
//!
//! Time: real sockets need the real clock; nothing here waits for a cooldown (the
//! cooldowns are long, and a `Retry-After` wait is read from the snapshot, not waited
//! for). The only real wait is the client's 100 ms timeout against a hanging server,
//! and every call is bounded by `tokio::time::timeout`.
#![cfg(feature = "reqwest")]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_circuit_breaker::http::reqwest::{provenance, ReqwestProvenanceLayer};
use tower_circuit_breaker::http::{source_from_header, HttpClassifier, X_CIRCUIT_BREAKER};
use tower_circuit_breaker::{
    CircuitBreakerHandle, CircuitBreakerLayer, Cooldown, NextProbe, Reason, Source, State,
};

const CALL_BOUND: Duration = Duration::from_secs(5);
const CLIENT_TIMEOUT: Duration = Duration::from_millis(100);
const CHAT_BODY: &str = r#"{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"42"},"finish_reason":"stop"}]}"#;
const FALLBACK_BODY: &str = "fallback: the model is unavailable";

// ---------------------------------------------------------------------------------
// The server.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    Ok,
    Unavailable,
    NotFound,
    RateLimited(u64),
    Hang,
}

#[derive(Debug)]
struct ServerState {
    requests: AtomicUsize,
    script: Mutex<VecDeque<Reply>>,
}

/// A hyper server on 127.0.0.1 answering each request with the next scripted reply
/// (then 200), counting what it receives.
struct TestServer {
    addr: SocketAddr,
    state: Arc<ServerState>,
    task: JoinHandle<()>,
}

impl TestServer {
    async fn start(script: impl IntoIterator<Item = Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local address");
        let state = Arc::new(ServerState {
            requests: AtomicUsize::new(0),
            script: Mutex::new(script.into_iter().collect()),
        });
        let task = tokio::spawn(serve(listener, state.clone()));
        TestServer { addr, state, task }
    }

    fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    fn url(&self) -> String {
        format!("http://{}/v1/chat/completions", self.addr)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(listener: TcpListener, state: Arc<ServerState>) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let state = state.clone();
        connections.spawn(async move {
            let answer =
                hyper::service::service_fn(move |_: Request<Incoming>| answer(state.clone()));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), answer)
                .await;
        });
        while connections.try_join_next().is_some() {}
    }
}

async fn answer(state: Arc<ServerState>) -> Result<Response<Full<Bytes>>, Infallible> {
    state.requests.fetch_add(1, Ordering::SeqCst);
    let reply = state
        .script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Reply::Ok);
    let (status, retry_after, body) = match reply {
        Reply::Ok => (200, None, CHAT_BODY),
        Reply::Unavailable => (503, None, r#"{"error":{"code":"server_error"}}"#),
        Reply::NotFound => (404, None, r#"{"error":{"code":"model_not_found"}}"#),
        Reply::RateLimited(wait) => (429, Some(wait), r#"{"error":{"code":"rate_limit"}}"#),
        Reply::Hang => std::future::pending().await,
    };
    let mut response = Response::builder()
        .status(status)
        .header("content-type", "application/json");
    if let Some(wait) = retry_after {
        response = response.header("retry-after", wait.to_string());
    }
    Ok(response.body(Full::from(body)).expect("a valid response"))
}

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
/// fallback, and a reqwest client with a 100 ms timeout.
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
        .layer(ReqwestProvenanceLayer::new())
        .layer(breaker)
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

// ---------------------------------------------------------------------------------
// The tests.

#[tokio::test]
async fn a_503_trips_the_breaker_and_the_server_is_left_alone() {
    let server = TestServer::start([Reply::Unavailable, Reply::Unavailable]).await;
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
    let server = TestServer::start([Reply::NotFound; 5]).await;
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
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!(
        "http://{}/v1/chat/completions",
        listener.local_addr().unwrap()
    );
    drop(listener);
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
    let server = TestServer::start([Reply::Hang]).await;
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
    let server = TestServer::start([Reply::RateLimited(20)]).await;
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
    let server = TestServer::start([]).await;
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
    let info = provenance(&response).expect("labelled by ReqwestProvenanceLayer");
    assert!(info.is_fallback());
    assert_eq!(info.source, Source::Fallback(Reason::ForcedOpen));
    assert_eq!(info.state, State::ForcedOpen);
    assert_eq!(info.next_probe, NextProbe::Manual);
    assert_eq!(response.text().await.unwrap(), FALLBACK_BODY);
    assert_eq!(server.requests(), 1);
}
