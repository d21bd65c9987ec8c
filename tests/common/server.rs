//! A scripted HTTP/1 server on loopback, shared by the tests that go over real TCP
//! (`tests/http_tcp.rs`, `tests/http_reqwest.rs`, `tests/async_openai.rs`,
//! `tests/llm_stack.rs`, `tests/failover.rs`, `tests/retry.rs`, `tests/balance.rs`), each
//! of which includes it with `#[path = "common/server.rs"] mod server;` (it is not part
//! of `tests/common/mod.rs`, whose users need no hyper).
//!
//! A [`TestServer`] stands in for an OpenAI-compatible API on 127.0.0.1: it answers any
//! path, with the next [`Reply`] of its script and then with its default reply, counts
//! every request it receives (across restarts), can be stopped and restarted on the
//! same port, and closes its listener and every connection when dropped.
#![allow(dead_code)] // each test file uses its own subset

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

/// A chat completion whose answer is "42".
pub(crate) const CHAT_BODY: &str = r#"{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"42"},"finish_reason":"stop"}]}"#;
/// OpenAI's body for an exhausted quota (sent with a 429).
pub(crate) const QUOTA_BODY: &str = r#"{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
/// OpenAI's body for a rate limit (sent with a 429).
pub(crate) const RATE_LIMIT_BODY: &str =
    r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#;

/// What the server does with one request.
#[derive(Debug)]
enum Answer {
    /// Answers with this response.
    Respond(Response<Full<Bytes>>),
    /// Answers with this response's head and the start of its body, then sends nothing
    /// more: the body never ends.
    Stall(Response<Full<Bytes>>),
    /// Never answers: the request stays in flight until the client gives up or the
    /// server stops.
    Hang,
}

impl Answer {
    /// `status` with `body`, and no header.
    fn new(status: u16, body: &'static str) -> Self {
        let mut response = Response::new(Full::from(body));
        *response.status_mut() = StatusCode::from_u16(status).expect("a valid status code");
        Answer::Respond(response)
    }

    /// `status` with a JSON `body` (`content-type: application/json`).
    fn json(status: u16, body: &'static str) -> Self {
        Answer::new(status, body).header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
    }

    /// The same answer with `Retry-After: <secs>`; a hang stays a hang.
    fn retry_after(self, secs: u64) -> Self {
        self.header(RETRY_AFTER, HeaderValue::from(secs))
    }

    /// The same answer with this header (`retry-after-ms: 1500`, say); a hang stays a
    /// hang.
    fn with_header(self, name: &'static str, value: &'static str) -> Self {
        self.header(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        )
    }

    fn header(self, name: HeaderName, value: HeaderValue) -> Self {
        match self {
            Answer::Respond(mut response) => {
                response.headers_mut().insert(name, value);
                Answer::Respond(response)
            }
            Answer::Stall(mut response) => {
                response.headers_mut().insert(name, value);
                Answer::Stall(response)
            }
            Answer::Hang => Answer::Hang,
        }
    }
}

/// What the server answers one request with: the replies an OpenAI-compatible API
/// gives, a response of the test's own, or none at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    /// 200 with a chat completion ([`CHAT_BODY`]).
    Ok,
    /// 200 with a chat completion and this header (name, value).
    OkWith(&'static str, &'static str),
    /// 307 Temporary Redirect to this URL.
    Redirect(&'static str),
    /// 503 Service Unavailable.
    Unavailable,
    /// 404: the model does not exist.
    NotFound,
    /// 400: the caller's mistake.
    BadRequest,
    /// 400: the context is too long for this model.
    ContextTooLong,
    /// 429 with `Retry-After: <secs>` and a rate-limit body ([`RATE_LIMIT_BODY`]).
    RateLimited(u64),
    /// 429 with `Retry-After: <secs>` whose rate-limit body stops halfway and never ends.
    RateLimitedStalling(u64),
    /// 429 with `retry-after-ms: <ms>` and a rate-limit body.
    RateLimitedMs(&'static str),
    /// 429 with `Retry-After: <secs>` and a body of this many spaces (no content type).
    RateLimitedOversized { retry_after: u64, len: usize },
    /// 429 with an OpenAI `insufficient_quota` body ([`QUOTA_BODY`]).
    QuotaExhausted,
    /// 429 with an OpenAI `insufficient_quota` body and `Retry-After: <secs>` (which a
    /// quota error does not honour).
    QuotaExhaustedRetryAfter(u64),
    /// This status with this JSON body (`content-type: application/json`).
    Json(u16, &'static str),
    /// This status with this body, and no header.
    Plain(u16, &'static str),
    /// Never answers: the request stays in flight until the client gives up or the
    /// server stops.
    Hang,
}

impl Reply {
    /// What the server does with the request this reply is for.
    fn answer(self) -> Answer {
        match self {
            Reply::Ok => Answer::json(200, CHAT_BODY),
            Reply::OkWith(name, value) => Answer::json(200, CHAT_BODY).with_header(name, value),
            Reply::Redirect(to) => Answer::new(307, "").with_header("location", to),
            Reply::Unavailable => Answer::json(503, r#"{"error":{"code":"server_error"}}"#),
            Reply::NotFound => Answer::json(404, r#"{"error":{"code":"model_not_found"}}"#),
            Reply::BadRequest => Answer::json(400, r#"{"error":{"code":"invalid_request_error"}}"#),
            Reply::ContextTooLong => {
                Answer::json(400, r#"{"error":{"code":"context_length_exceeded"}}"#)
            }
            Reply::RateLimited(wait) => Answer::json(429, RATE_LIMIT_BODY).retry_after(wait),
            Reply::RateLimitedStalling(wait) => {
                let half = &RATE_LIMIT_BODY[..RATE_LIMIT_BODY.len() / 2];
                let mut response = Response::new(Full::from(half));
                *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                Answer::Stall(response).retry_after(wait)
            }
            Reply::RateLimitedMs(ms) => {
                Answer::json(429, RATE_LIMIT_BODY).with_header("retry-after-ms", ms)
            }
            Reply::RateLimitedOversized { retry_after, len } => {
                let mut response = Response::new(Full::from(vec![b' '; len]));
                *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                Answer::Respond(response).retry_after(retry_after)
            }
            Reply::QuotaExhausted => Answer::json(429, QUOTA_BODY),
            Reply::QuotaExhaustedRetryAfter(wait) => {
                Answer::json(429, QUOTA_BODY).retry_after(wait)
            }
            Reply::Json(status, body) => Answer::json(status, body),
            Reply::Plain(status, body) => Answer::new(status, body),
            Reply::Hang => Answer::Hang,
        }
    }
}

/// An address on loopback that nothing listens on (it was free a moment ago): a
/// connection to it is refused.
pub(crate) fn refused_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("local address")
}

/// What the server and its connections share, across restarts.
struct ServerState {
    requests: AtomicUsize,
    /// Each request's headers, in order.
    heads: Mutex<Vec<http::HeaderMap>>,
    script: Mutex<VecDeque<Reply>>,
    otherwise: Reply,
}

/// A hyper HTTP/1 server on 127.0.0.1 that answers each request with the next reply of
/// its script (then with its default reply) and counts every request it receives,
/// across restarts. Dropping it closes the listener and every open connection.
pub(crate) struct TestServer {
    addr: SocketAddr,
    state: Arc<ServerState>,
    /// The accept loop, which owns the connections; `None` while stopped.
    task: Option<JoinHandle<()>>,
}

impl TestServer {
    /// Listens on a free port; answers with `script`, in order, then with `otherwise`.
    pub(crate) async fn start(script: impl IntoIterator<Item = Reply>, otherwise: Reply) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local address");
        let state = Arc::new(ServerState {
            requests: AtomicUsize::new(0),
            heads: Mutex::new(Vec::new()),
            script: Mutex::new(script.into_iter().collect()),
            otherwise,
        });
        let task = tokio::spawn(serve(listener, state.clone()));
        TestServer {
            addr,
            state,
            task: Some(task),
        }
    }

    /// Closes the listener and every open connection: from now on a connection to the
    /// port is refused.
    pub(crate) async fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            // Dropping the task drops the listener and the connections it owns.
            let _ = task.await;
        }
    }

    /// Listens again on the same port, with the script where it was and the count
    /// kept.
    pub(crate) async fn restart(&mut self) {
        assert!(self.task.is_none(), "stop the server first");
        let listener = TcpListener::bind(self.addr).await.expect("the same port");
        self.task = Some(tokio::spawn(serve(listener, self.state.clone())));
    }

    /// Requests received so far.
    pub(crate) fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// The headers of each request received so far, in order.
    pub(crate) fn headers_seen(&self) -> Vec<http::HeaderMap> {
        self.state
            .heads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The address it listens on.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The chat completions endpoint's URL.
    pub(crate) fn url(&self) -> String {
        format!("{}/chat/completions", self.api_base())
    }

    /// The API's base URL, as an OpenAI client is configured with.
    pub(crate) fn api_base(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Accepts connections until aborted. The connections are tasks of a `JoinSet` owned
/// here, so aborting this task closes them too, keep-alive or hanging.
async fn serve(listener: TcpListener, state: Arc<ServerState>) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let state = state.clone();
        connections.spawn(async move {
            let answer = hyper::service::service_fn(move |request: Request<Incoming>| {
                state
                    .heads
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(request.headers().clone());
                answer(state.clone())
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), answer)
                .await;
        });
        while connections.try_join_next().is_some() {}
    }
}

/// A body that sends its start and then nothing, without end.
struct Stalling(Option<Bytes>);

impl http_body::Body for Stalling {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.0.take() {
            Some(start) => Poll::Ready(Some(Ok(Frame::data(start)))),
            None => Poll::Pending,
        }
    }
}

/// Counts the request and answers it with the next reply.
async fn answer(
    state: Arc<ServerState>,
) -> Result<Response<BoxBody<Bytes, Infallible>>, Infallible> {
    state.requests.fetch_add(1, Ordering::SeqCst);
    let next = state
        .script
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .pop_front();
    let reply = next.unwrap_or(state.otherwise);
    match reply.answer() {
        Answer::Respond(response) => Ok(response.map(BodyExt::boxed)),
        Answer::Stall(response) => {
            let (head, body) = response.into_parts();
            let start = body.collect().await?.to_bytes();
            Ok(Response::from_parts(head, Stalling(Some(start)).boxed()))
        }
        Answer::Hang => std::future::pending().await,
    }
}
