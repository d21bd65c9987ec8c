//! A scripted HTTP/1 server on loopback, shared by the tests that go over real TCP
//! (`tests/http_tcp.rs`, `tests/http_reqwest.rs`, `tests/async_openai.rs`,
//! `tests/llm_stack.rs`), each of
//! which includes it with `#[path = "common/server.rs"] mod server;` (it is not part of
//! `tests/common/mod.rs`, whose users need no hyper).
//!
//! A [`TestServer`] stands in for an OpenAI-compatible API on 127.0.0.1: it answers any
//! path, with the next reply of its script and then with its default reply, counts
//! every request it receives (across restarts), can be stopped and restarted on the
//! same port, and closes its listener and every connection when dropped. What a reply
//! is, is up to each test file: its own type, turned into an [`Answer`] (a response or
//! a hang) by [`ScriptedReply::answer`].
#![allow(dead_code)] // each test file uses its own subset

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
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
pub(crate) enum Answer {
    /// Answers with this response.
    Respond(Response<Full<Bytes>>),
    /// Never answers: the request stays in flight until the client gives up or the
    /// server stops.
    Hang,
}

impl Answer {
    /// `status` with `body`, and no header.
    pub(crate) fn new(status: u16, body: &'static str) -> Self {
        let mut response = Response::new(Full::from(body));
        *response.status_mut() = StatusCode::from_u16(status).expect("a valid status code");
        Answer::Respond(response)
    }

    /// `status` with a JSON `body` (`content-type: application/json`).
    pub(crate) fn json(status: u16, body: &'static str) -> Self {
        Answer::new(status, body).header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
    }

    /// The same answer with `Retry-After: <secs>`; a hang stays a hang.
    pub(crate) fn retry_after(self, secs: u64) -> Self {
        self.header(RETRY_AFTER, HeaderValue::from(secs))
    }

    /// The same answer with this header (`retry-after-ms: 1500`, say); a hang stays a
    /// hang.
    pub(crate) fn with_header(self, name: &'static str, value: &'static str) -> Self {
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
            Answer::Hang => Answer::Hang,
        }
    }
}

/// A reply a test file scripts for its server: its own type (status codes, bodies,
/// hangs, whatever the tests need), answered as it says.
pub(crate) trait ScriptedReply: Clone + Send + Sync + 'static {
    /// What the server does with the request this reply is for.
    fn answer(&self) -> Answer;
}

/// What the server and its connections share, across restarts.
struct ServerState<R> {
    requests: AtomicUsize,
    script: Mutex<VecDeque<R>>,
    otherwise: R,
}

/// A hyper HTTP/1 server on 127.0.0.1 that answers each request with the next reply of
/// its script (then with its default reply) and counts every request it receives,
/// across restarts. Dropping it closes the listener and every open connection.
pub(crate) struct TestServer<R> {
    addr: SocketAddr,
    state: Arc<ServerState<R>>,
    /// The accept loop, which owns the connections; `None` while stopped.
    task: Option<JoinHandle<()>>,
}

impl<R: ScriptedReply> TestServer<R> {
    /// Listens on a free port; answers with `script`, in order, then with `otherwise`.
    pub(crate) async fn start(script: impl IntoIterator<Item = R>, otherwise: R) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local address");
        let state = Arc::new(ServerState {
            requests: AtomicUsize::new(0),
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
}

impl<R> TestServer<R> {
    /// Requests received so far.
    pub(crate) fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
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

impl<R> Drop for TestServer<R> {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Accepts connections until aborted. The connections are tasks of a `JoinSet` owned
/// here, so aborting this task closes them too, keep-alive or hanging.
async fn serve<R: ScriptedReply>(listener: TcpListener, state: Arc<ServerState<R>>) {
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

/// Counts the request and answers it with the next reply.
async fn answer<R: ScriptedReply>(
    state: Arc<ServerState<R>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    state.requests.fetch_add(1, Ordering::SeqCst);
    let next = state
        .script
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .pop_front();
    let reply = next.unwrap_or_else(|| state.otherwise.clone());
    match reply.answer() {
        Answer::Respond(response) => Ok(response),
        Answer::Hang => std::future::pending().await,
    }
}
