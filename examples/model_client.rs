//! A model client with a circuit breaker, over real HTTP on loopback.
//!
//! The example starts an OpenAI-compatible `/v1/chat/completions` server on
//! 127.0.0.1 that can answer, fail (503) or hang, and calls it through a
//! `reqwest::Client` (a `tower::Service<reqwest::Request>`) wrapped in the breaker,
//! `retry` and `timeout`. Each answer is printed with where it came from: the model, a
//! probe, or the fallback and why.
//!
//! ```text
//! cargo run --example model_client --features reqwest                  # the scripted run, a few seconds
//! cargo run --example model_client --features reqwest -- --interactive  # flip the kill switch yourself
//! ```
//!
//! The scripted run goes through a schedule: the model answers, fails (the breaker
//! opens and the fallback answers), recovers (one probe closes the breaker), hangs
//! (the timeout turns the hang into failures), is killed by an operator, and comes
//! back. In interactive mode a call goes out every second while you type `kill`,
//! `revive`, `status` or `quit` (and `up`, `fail`, `hang` to change the server).

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tower::retry::Policy;
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_circuit_breaker::http::{
    provenance, ErrorBodyLayer, HttpClassifier, ProvenanceLayer, X_CIRCUIT_BREAKER,
};
use tower_circuit_breaker::{CircuitBreakerHandle, CircuitBreakerLayer, Cooldown, Source};

/// Each attempt's deadline: a hang longer than this is a failed attempt.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(300);
/// Attempts per user call, the first included.
const ATTEMPTS: usize = 2;
/// How long the breaker stays open before it lets a probe through.
const COOLDOWN: Duration = Duration::from_millis(800);

type ChatRequest = reqwest::Request;
type ChatResponse = reqwest::Response;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let interactive = std::env::args().skip(1).any(|arg| arg == "--interactive");
    let model = ModelServer::start().await?;

    let breaker = CircuitBreakerLayer::builder()
        .name("chat-model")
        .failure_threshold(2)
        .cooldown(Cooldown::Time(COOLDOWN))
        .build()?
        .with_classifier(HttpClassifier::new());
    let handle = breaker.handle();
    let breaker = breaker.with_fallback(service_fn({
        let handle = handle.clone();
        move |_: ChatRequest| unavailable(&handle)
    }));

    // The order of the layers, outside in (a request goes down this list, the response
    // comes back up it):
    //
    // 1. ProvenanceLayer: unwraps the breaker's `Answer` into a plain
    //    `reqwest::Response` and labels it (`x-circuit-breaker` header, `AnswerInfo`
    //    extension), so code that expects a `reqwest::Response` can still tell a
    //    fallback from the model.
    // 2. The breaker: decides whether the call goes out, and counts its outcome.
    // 3. retry, INSIDE the breaker: the breaker sees one outcome per user call however
    //    many attempts it took, so three attempts of one call are one failure, not
    //    three, and an open breaker stops the retries too (they never start). Outside,
    //    retries would hammer a service the breaker has given up on and each attempt
    //    would count as a failure of its own.
    // 4. timeout, INSIDE the breaker: a hang ends as an error that the breaker counts
    //    as a failure. Outside, the breaker would never see the hung call end as a
    //    failure (the future is just dropped). Inside retry as well, so each attempt
    //    has its own deadline and a hung attempt is retried.
    // 5. ErrorBodyLayer: reads the start of error bodies, so the classifier can
    //    tell an exhausted quota (open until reset) from a rate limit (probe again).
    //    Inside timeout, so an error body that hangs is cut off by the deadline too.
    // 6. The client: `reqwest::Client`, itself a `tower::Service<reqwest::Request>`,
    //    HTTP/1 over plain TCP (the crate's `reqwest` feature has no TLS).
    let client = reqwest::Client::new();
    let svc = ServiceBuilder::new()
        .layer(ProvenanceLayer::new())
        .layer(breaker)
        .retry(RetryTransient { attempts: ATTEMPTS })
        .timeout(ATTEMPT_TIMEOUT)
        .layer(ErrorBodyLayer::new())
        .service(client);

    let url = format!("http://{}/v1/chat/completions", model.addr);
    println!("model server on {url}");
    if interactive {
        interactive_run(svc, &handle, &model, &url).await
    } else {
        scripted_run(svc, &handle, &model, &url).await
    }
}

/// The schedule: each phase sets the server's behaviour, optionally waits or flips
/// the kill switch, and makes a few calls.
async fn scripted_run<S>(
    mut svc: S,
    handle: &CircuitBreakerHandle,
    model: &ModelServer,
    url: &str,
) -> Result<(), BoxError>
where
    S: Service<ChatRequest, Response = ChatResponse, Error = BoxError>,
{
    let mut n = 0;

    println!("\n-- the model answers");
    model.set(Mode::Up);
    calls(&mut svc, url, &mut n, 2).await;

    println!("\n-- the model fails (503): two failed calls open the breaker");
    model.set(Mode::Failing);
    calls(&mut svc, url, &mut n, 4).await;

    println!("\n-- the model recovers; after the cooldown one probe closes the breaker");
    model.set(Mode::Up);
    tokio::time::sleep(COOLDOWN).await;
    calls(&mut svc, url, &mut n, 2).await;

    println!("\n-- the model hangs: the timeout turns each hang into a failure");
    model.set(Mode::Hanging);
    calls(&mut svc, url, &mut n, 3).await;

    println!("\n-- the model is back, but an operator has flipped the kill switch");
    model.set(Mode::Up);
    tokio::time::sleep(COOLDOWN).await;
    handle.kill_switch().kill();
    let before = model.requests();
    calls(&mut svc, url, &mut n, 2).await;
    assert_eq!(model.requests(), before, "no call while killed");

    println!("\n-- revived: the cooldown passed while killed, so the next call probes");
    handle.kill_switch().revive();
    calls(&mut svc, url, &mut n, 2).await;

    println!(
        "\n{n} user calls, {} requests reached the server; breaker {}",
        model.requests(),
        status(handle)
    );
    Ok(())
}

/// A call every second, while the person types commands.
async fn interactive_run<S>(
    mut svc: S,
    handle: &CircuitBreakerHandle,
    model: &ModelServer,
    url: &str,
) -> Result<(), BoxError>
where
    S: Service<ChatRequest, Response = ChatResponse, Error = BoxError>,
{
    println!("commands: kill, revive, status, up, fail, hang, reset, quit");
    // A blocking thread reads stdin and hands each line to the runtime.
    let (lines, mut commands) = mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });

    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    let mut n = 0;
    loop {
        tokio::select! {
            command = commands.recv() => {
                let Some(command) = command else { break }; // stdin closed
                match command.trim() {
                    "kill" => handle.kill_switch().kill(),
                    "revive" => handle.kill_switch().revive(),
                    "reset" => handle.reset(),
                    "up" => model.set(Mode::Up),
                    "fail" => model.set(Mode::Failing),
                    "hang" => model.set(Mode::Hanging),
                    "status" => {}
                    "quit" | "exit" => break,
                    "" => continue,
                    other => {
                        println!("unknown command {other:?}");
                        continue;
                    }
                }
                println!("breaker {}; server {:?}, {} requests", status(handle), model.mode(), model.requests());
            }
            _ = ticks.tick() => {
                n += 1;
                let answer = one_call(&mut svc, chat_request(url, &format!("question {n}"))).await;
                print_answer(n, answer).await;
            }
        }
    }
    println!("{}", status(handle));
    Ok(())
}

/// `count` calls, numbered on from `n`, each answer printed.
async fn calls<S>(svc: &mut S, url: &str, n: &mut usize, count: usize)
where
    S: Service<ChatRequest, Response = ChatResponse, Error = BoxError>,
{
    for _ in 0..count {
        *n += 1;
        let request = chat_request(url, &format!("question {n}"));
        let answer = one_call(svc, request).await;
        print_answer(*n, answer).await;
    }
}

async fn one_call<S>(svc: &mut S, request: ChatRequest) -> Result<ChatResponse, BoxError>
where
    S: Service<ChatRequest, Response = ChatResponse, Error = BoxError>,
{
    svc.ready().await?.call(request).await
}

/// Prints an answer with its source, or the error of a failed call.
async fn print_answer(n: usize, answer: Result<ChatResponse, BoxError>) {
    let response = match answer {
        Ok(response) => response,
        Err(error) => {
            println!("{n:>2} error     {error}");
            return;
        }
    };
    let source = provenance(&response).map_or(Source::Service, |info| info.source);
    let label = response.headers()[X_CIRCUIT_BREAKER]
        .to_str()
        .unwrap_or("?")
        .to_string();
    let status = response.status();
    let text = match response.bytes().await {
        Ok(body) => content_of(&body),
        Err(error) => format!("(body broke off: {error})"),
    };
    let who = match source {
        Source::Service | Source::Probe => "model",
        _ => "fallback",
    };
    println!("{n:>2} {who:<9} [{label}] {} {text}", status.as_u16());
}

/// The assistant's message of a chat completion, the error message of an error
/// body, or the text as it is.
fn content_of(body: &[u8]) -> String {
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) else {
        return String::from_utf8_lossy(body).into_owned();
    };
    let text = json["choices"][0]["message"]["content"]
        .as_str()
        .or_else(|| json["error"]["message"].as_str());
    text.map_or_else(|| json.to_string(), str::to_string)
}

fn status(handle: &CircuitBreakerHandle) -> String {
    let snapshot = handle.snapshot();
    let mut text = format!(
        "{:?}, {} failures in a row",
        snapshot.state, snapshot.consecutive_failures
    );
    if snapshot.killed {
        text.push_str(", KILLED");
    }
    if let Some(wait) = snapshot.retry_after() {
        text.push_str(&format!(", next probe in {wait:.1?}"));
    }
    text
}

/// The fallback: an honest 503 that says why and when to come back, never made-up
/// content.
fn unavailable(handle: &CircuitBreakerHandle) -> Ready<Result<ChatResponse, Infallible>> {
    let snapshot = handle.snapshot();
    let message = if snapshot.killed {
        "the model is switched off by an operator".to_string()
    } else {
        match snapshot.retry_after() {
            Some(wait) => format!("the model is unavailable; retry after {wait:.1?}"),
            None => "the model is unavailable".to_string(),
        }
    };
    let body = serde_json::json!({ "error": { "message": message, "code": "circuit_open" } });
    let response = Response::builder()
        .status(StatusCode::SERVICE_UNAVAILABLE)
        .header("content-type", "application/json")
        .body(body.to_string())
        .expect("a valid response");
    ready(Ok(reqwest::Response::from(response)))
}

fn chat_request(url: &str, prompt: &str) -> ChatRequest {
    let body = serde_json::json!({
        "model": "local-model",
        "messages": [{ "role": "user", "content": prompt }],
    });
    let mut request = reqwest::Request::new(Method::POST, url.parse().expect("a valid URL"));
    request
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    *request.body_mut() = Some(body.to_string().into());
    request
}

/// Retries a transport error, a timeout or a 5xx; a 429's `Retry-After` is left to
/// the breaker, and a 4xx is the caller's to fix.
#[derive(Debug, Clone)]
struct RetryTransient {
    attempts: usize,
}

impl Policy<ChatRequest, ChatResponse, BoxError> for RetryTransient {
    type Future = Ready<()>;

    fn retry(
        &mut self,
        _: &mut ChatRequest,
        result: &mut Result<ChatResponse, BoxError>,
    ) -> Option<Self::Future> {
        let transient = match result {
            Ok(response) => response.status().is_server_error(),
            Err(_) => true,
        };
        // The policy is cloned for each user call: this counts that call's attempts.
        if transient && self.attempts > 1 {
            self.attempts -= 1;
            Some(ready(()))
        } else {
            None
        }
    }

    fn clone_request(&mut self, request: &ChatRequest) -> Option<ChatRequest> {
        // `None` for a streamed body, which cannot be sent twice; this example's bodies
        // are bytes.
        request.try_clone()
    }
}

// ---------------------------------------------------------------------------------
// The model server: OpenAI-compatible enough for this client.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Up = 0,
    Failing = 1,
    Hanging = 2,
}

struct ModelServer {
    addr: SocketAddr,
    mode: Arc<AtomicU8>,
    requests: Arc<AtomicUsize>,
}

impl ModelServer {
    async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let server = ModelServer {
            addr: listener.local_addr()?,
            mode: Arc::default(),
            requests: Arc::default(),
        };
        let (mode, requests) = (server.mode.clone(), server.requests.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (mode, requests) = (mode.clone(), requests.clone());
                let complete = hyper::service::service_fn(move |request| {
                    completion(request, mode.clone(), requests.clone())
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), complete),
                );
            }
        });
        Ok(server)
    }

    fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    fn mode(&self) -> Mode {
        match self.mode.load(Ordering::SeqCst) {
            0 => Mode::Up,
            1 => Mode::Failing,
            _ => Mode::Hanging,
        }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// `POST /v1/chat/completions`: a completion that echoes the prompt, a 503, or no
/// answer at all, as the mode says.
async fn completion(
    request: Request<Incoming>,
    mode: Arc<AtomicU8>,
    requests: Arc<AtomicUsize>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let n = requests.fetch_add(1, Ordering::SeqCst) + 1;
    let json = |status: u16, body: serde_json::Value| {
        let response = Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Full::from(body.to_string()))
            .expect("a valid response");
        Ok(response)
    };
    if request.uri().path() != "/v1/chat/completions" {
        return json(
            404,
            serde_json::json!({ "error": { "message": "not found", "code": "not_found" } }),
        );
    }
    let body = request.into_body().collect().await.map(|b| b.to_bytes());
    let prompt = body
        .ok()
        .and_then(|body| serde_json::from_slice::<serde_json::Value>(&body).ok())
        .and_then(|json| json["messages"][0]["content"].as_str().map(str::to_string))
        .unwrap_or_default();
    match mode.load(Ordering::SeqCst) {
        0 => json(
            200,
            serde_json::json!({
                "id": format!("chatcmpl-{n}"),
                "object": "chat.completion",
                "model": "local-model",
                "choices": [{
                    "index": 0,
                    "message": { "role": "assistant", "content": format!("the answer to {prompt:?} (request {n})") },
                    "finish_reason": "stop",
                }],
            }),
        ),
        1 => json(
            503,
            serde_json::json!({ "error": { "message": "the model is overloaded", "code": "server_error" } }),
        ),
        _ => std::future::pending().await,
    }
}
