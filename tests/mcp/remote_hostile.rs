//! Remote servers that misbehave, written here as a tiny HTTP server on loopback: one
//! that accepts and never answers (everything, or only its tool calls), and ones whose
//! tool calls are answered with garbage (an HTML page, JSON that is not JSON-RPC, an
//! event stream that breaks off). Each failure is a typed error, the breakers count
//! what is the server's fault, and once the server's breaker is open calls fail at once.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};
use tower_circuit_breaker::mcp::{Down, McpError, McpServer, ServerState, StartError};
use tower_circuit_breaker::State;

use crate::common::{
    args, running, tool_breaker, until, waiting_for_its_probe, TestResult, PATIENCE,
};

/// What the server does.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// Accepts every request and never answers.
    HangEverything,
    /// Serves its handshake and tool list; never answers a tool call.
    HangCalls,
    /// Answers a tool call with an HTML page.
    Html,
    /// Answers a tool call with JSON that is not a JSON-RPC message.
    BadJson,
    /// Answers a tool call with an event stream that breaks off mid-event.
    BrokenStream,
    /// Answers a tool call with a JSON-RPC error that says the request's
    /// `Authorization` and `X-Api-Key` headers back, and `whoami_tool` with an `isError`
    /// result that does.
    EchoCredentials,
}

type Body = BoxBody<Bytes, std::io::Error>;

/// The server; it stops when dropped.
struct Hostile {
    port: u16,
    calls: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Hostile {
    async fn start(mode: Mode) -> Hostile {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("address").port();
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let calls = counted.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        answer(request, mode, calls.clone())
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Hostile { port, calls, task }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Tool calls that reached it.
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(
        Full::new(body.into())
            .map_err(|never: Infallible| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    if !content_type.is_empty() {
        response
            .headers_mut()
            .insert("content-type", content_type.parse().unwrap());
    }
    response
        .headers_mut()
        .insert("mcp-session-id", "hostile-session".parse().unwrap());
    response
}

fn result(id: &Value, result: Value) -> Response<Body> {
    let message = json!({"jsonrpc": "2.0", "id": id, "result": result});
    full(StatusCode::OK, "application/json", message.to_string())
}

async fn answer(
    request: Request<Incoming>,
    mode: Mode,
    calls: Arc<AtomicUsize>,
) -> Result<Response<Body>, Infallible> {
    if mode == Mode::HangEverything {
        std::future::pending::<()>().await;
    }
    match *request.method() {
        hyper::Method::GET => return Ok(full(StatusCode::METHOD_NOT_ALLOWED, "", "")),
        hyper::Method::DELETE => return Ok(full(StatusCode::OK, "", "")),
        _ => {}
    }
    // As they came, with nothing around them a pattern would know a secret by.
    let header = |name: &str| {
        let value = request.headers().get(name);
        String::from_utf8_lossy(value.map_or(&b"none"[..], |v| v.as_bytes())).into_owned()
    };
    let said_back = format!(
        "rejected credentials: {} / {}",
        header("authorization"),
        header("x-api-key")
    );
    let body = request.into_body().collect().await.map(|b| b.to_bytes());
    let message: Value = body
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    let id = &message["id"];
    Ok(match message["method"].as_str() {
        Some("initialize") => result(
            id,
            json!({
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "0"},
            }),
        ),
        Some("tools/list") => result(
            id,
            json!({"tools": [
                {"name": "work", "inputSchema": {"type": "object"}},
                {"name": "whoami_tool", "inputSchema": {"type": "object"}},
            ]}),
        ),
        Some("tools/call") => {
            calls.fetch_add(1, Ordering::SeqCst);
            match mode {
                Mode::EchoCredentials if message["params"]["name"] == "whoami_tool" => result(
                    id,
                    json!({"isError": true, "content": [{"type": "text", "text": said_back}]}),
                ),
                Mode::EchoCredentials => {
                    let error = json!({"code": -32001, "message": said_back});
                    let message = json!({"jsonrpc": "2.0", "id": id, "error": error});
                    full(StatusCode::OK, "application/json", message.to_string())
                }
                Mode::HangEverything | Mode::HangCalls => std::future::pending().await,
                Mode::Html => full(
                    StatusCode::OK,
                    "text/html",
                    "<html><body>Gateway says hello</body></html>",
                ),
                Mode::BadJson => full(
                    StatusCode::OK,
                    "application/json",
                    "{\"jsonrpc\": \"2.0\", oops",
                ),
                Mode::BrokenStream => {
                    // Half an event, and a moment later the connection breaks.
                    let frames = futures::stream::unfold(0, |n| async move {
                        let frame = match n {
                            0 => Ok(Frame::data(Bytes::from_static(
                                b"event: message\ndata: {\"jsonrpc\": \"2.0\", \"id\": ",
                            ))),
                            1 => {
                                tokio::time::sleep(Duration::from_millis(100)).await;
                                Err(std::io::Error::other("the stream breaks off"))
                            }
                            _ => return None,
                        };
                        Some((frame, n + 1))
                    });
                    let mut response = full(StatusCode::OK, "text/event-stream", "");
                    *response.body_mut() = StreamBody::new(frames).boxed();
                    response
                }
            }
        }
        // Notifications (and anything else): accepted.
        _ => full(StatusCode::ACCEPTED, "", ""),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_hangs_on_calls_holds_the_first_calls_for_the_call_timeout_then_fails_fast(
) -> TestResult {
    let hostile = Hostile::start(Mode::HangCalls).await;
    let call_timeout = Duration::from_millis(400);
    let server = McpServer::remote("hung", &hostile.url())
        .call_timeout(call_timeout)
        .unresponsive_after(3)
        .restart(
            tower_circuit_breaker::mcp::RestartPolicy::new()
                .backoff(Duration::from_secs(30), Duration::from_secs(30)),
        )
        .start()?;
    running(&server).await;

    // The first calls wait for the call timeout, each; no longer.
    for n in 0..3 {
        let started = Instant::now();
        let error = failed_work_call(&server).await;
        let took = started.elapsed();
        assert!(
            matches!(error, McpError::Timeout { .. }),
            "call {n}: {error}"
        );
        assert!(
            took >= call_timeout && took < call_timeout + Duration::from_secs(2),
            "call {n} took {took:?}"
        );
    }
    // Three timeouts: it is unresponsive, its breaker open; calls fail at once.
    let down = until(&server, "down as unresponsive", |s| {
        matches!(s.state, ServerState::Down(Down::Unresponsive { .. }))
    })
    .await;
    assert!(down.unavailable_because().is_some());
    assert_eq!(server.breaker().state(), State::Open);
    twenty_calls_fail_at_once(&server).await;
    assert_eq!(hostile.calls(), 3, "no call sent while open");
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_fails_its_start_within_the_start_timeout_and_calls_fail_fast(
) -> TestResult {
    let hostile = Hostile::start(Mode::HangEverything).await;
    let start_timeout = Duration::from_millis(500);
    let started = Instant::now();
    let server = McpServer::remote("silent", &hostile.url())
        .start_timeout(start_timeout)
        .start()?;
    // While it starts, calls fail at once.
    let error = failed_work_call(&server).await;
    assert!(matches!(error, McpError::Unavailable { .. }), "{error}");
    let down = waiting_for_its_probe(&server).await;
    assert!(
        matches!(
            down.state,
            ServerState::Down(Down::StartFailed(StartError::Timeout {
                step: "initialize",
                ..
            }))
        ),
        "{down}"
    );
    assert!(
        started.elapsed() < start_timeout + Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    twenty_calls_fail_at_once(&server).await;
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_answers_are_typed_errors_counted_by_the_breakers() -> TestResult {
    for mode in [Mode::Html, Mode::BadJson, Mode::BrokenStream] {
        let hostile = Hostile::start(mode).await;
        let server = McpServer::remote("garbage", &hostile.url())
            .unresponsive_after(2)
            .restart(
                tower_circuit_breaker::mcp::RestartPolicy::new()
                    .backoff(Duration::from_secs(30), Duration::from_secs(30)),
            )
            .start()?;
        running(&server).await;
        let breaker = tool_breaker("work", 2);
        let tool_handle = breaker.handle();
        let mut work = breaker.layer(server.tool("work"));

        let error = work.ready().await?.call(args(json!({}))).await.unwrap_err();
        let mcp = error.downcast_ref::<McpError>().expect("an MCP error");
        match mode {
            Mode::Html | Mode::BadJson => {
                assert!(matches!(mcp, McpError::Protocol { .. }), "{mode:?}: {mcp}")
            }
            _ => assert!(
                matches!(
                    mcp,
                    McpError::ConnectionLost { .. } | McpError::Protocol { .. }
                ),
                "{mode:?}: {mcp}"
            ),
        }
        assert_eq!(tool_handle.snapshot().consecutive_failures, 1, "{mode:?}");
        // A second failure (of the server, or finding it down) opens the tool's breaker;
        // the server's breaker is open too by then, and no further call reaches it.
        let _ = work.ready().await?.call(args(json!({}))).await.unwrap_err();
        assert_eq!(tool_handle.state(), State::Open, "{mode:?}");
        waiting_for_its_probe(&server).await;
        assert_eq!(server.breaker().state(), State::Open, "{mode:?}");
        let reached = hostile.calls();
        assert!(reached <= 2, "{mode:?}: {reached}");
        let error = failed_work_call(&server).await;
        assert!(
            matches!(error, McpError::Unavailable { .. }),
            "{mode:?}: {error}"
        );
        assert_eq!(hostile.calls(), reached, "{mode:?}: sent while open");
        server.stop().await;
    }
    Ok(())
}

/// One call to `server`'s `work` tool, which fails: its error.
async fn failed_work_call(server: &McpServer) -> McpError {
    server
        .tool("work")
        .oneshot(args(json!({})))
        .await
        .unwrap_err()
}

/// Twenty calls to a server that is down each fail as unavailable, all within 500 ms: its
/// breaker answers them without waiting on the server.
async fn twenty_calls_fail_at_once(server: &McpServer) {
    let started = Instant::now();
    for _ in 0..20 {
        let error = failed_work_call(server).await;
        assert!(matches!(error, McpError::Unavailable { .. }), "{error}");
    }
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "20 calls while down took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_server_saying_its_headers_back_in_an_error_never_shows_their_values() -> TestResult
{
    let hostile = Hostile::start(Mode::EchoCredentials).await;
    let server = McpServer::remote("echoing", &hostile.url())
        .bearer_token("BEARERSECRET")
        .header("X-Api-Key", "HEADERSECRET")
        .start()?;
    running(&server).await;
    for tool in ["work", "whoami_tool"] {
        let error = tokio::time::timeout(PATIENCE, server.tool(tool).oneshot(args(json!({}))))
            .await?
            .expect_err("it refuses every call");
        assert!(
            matches!(
                (tool, &error),
                ("work", McpError::Server { code: -32001, .. })
                    | ("whoami_tool", McpError::Tool { .. })
            ),
            "{tool}: {error:?}"
        );
        let shown = format!("{error} | {error:?}");
        // It did say them back (the request carried them); they are taken out.
        assert!(
            shown.contains("rejected credentials: Bearer [redacted] / [redacted]"),
            "{shown}"
        );
        for secret in ["BEARERSECRET", "HEADERSECRET"] {
            assert!(!shown.contains(secret), "{tool}: {secret} shown: {shown}");
        }
    }
    server.stop().await;
    Ok(())
}
