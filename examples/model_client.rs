//! A model client with a circuit breaker, saved answers and an admin endpoint, over real
//! HTTP on loopback.
//!
//! The example starts an OpenAI-compatible `/v1/chat/completions` server on 127.0.0.1
//! that can answer, fail (503), rate-limit (429 with OpenAI's `retry-after-ms`) or hang,
//! and calls it through a `reqwest::Client` wrapped in the whole stack. It also mounts
//! the breaker's admin service on a second loopback port, behind a bearer token, and
//! acts on the breaker through it as an operator would with `curl`.
//!
//! ```text
//! cargo run --example model_client
//! ```
//!
//! The run: the model answers (the answer is saved); it fails, and the call that fails
//! and the calls the open breaker skips are answered with the saved answer, labelled
//! with its age; it recovers (one probe closes the breaker); it rate-limits, and the
//! breaker opens at once for the wait it asked for, so the next call does not reach it;
//! it hangs (the timeout turns each hang into a failure); an operator kills the breaker
//! through the admin service, and the next call is answered by the fallback without
//! reaching the server; a revive lets calls through again.

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
use tower::retry::Policy;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};
use tower_circuit_breaker::admin::Admin;
use tower_circuit_breaker::http::{
    provenance, stale, unavailable, BufferBodyLayer, BufferedResponse, HttpClassifier,
    ProvenanceLayer, X_CIRCUIT_BREAKER, X_CIRCUIT_BREAKER_STALE,
};
use tower_circuit_breaker::recover::RecoverLayer;
use tower_circuit_breaker::saved::{SaveLayer, SavedAnswers, Unavailable};
use tower_circuit_breaker::{CircuitBreakerHandle, CircuitBreakerLayer, Cooldown, Source};

/// Each attempt's deadline: a hang longer than this is a failed attempt.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(300);
/// Attempts per user call, the first included.
const ATTEMPTS: usize = 2;
/// How long the breaker stays open before it lets a probe through.
const COOLDOWN: Duration = Duration::from_millis(800);
/// What the rate-limited server asks for (OpenAI's `retry-after-ms`).
const RETRY_AFTER_MS: u64 = 700;
/// The operator's token for the admin service's changes.
const TOKEN: &str = "s3cret-operator-token";

type ChatRequest = reqwest::Request;
type ChatResponse = BufferedResponse;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let model = ModelServer::start().await?;

    // Saved answers: the last good answer to each prompt, for a day.
    let saved = SavedAnswers::new(1_000, Duration::from_secs(24 * 3600))?;
    let save = SaveLayer::new(
        saved.clone(),
        prompt_of as fn(&ChatRequest) -> Option<String>,
    );
    // The crate's ready-made answers: a saved answer with `Age`, the
    // `x-circuit-breaker-stale` marker and the stale label in the message content (the
    // JSON kept valid), or an honest 503 with `Retry-After` when the wait is known.
    let fallback = save.fallback(
        stale as fn(ChatResponse, Duration) -> ChatResponse,
        unavailable as fn(Unavailable) -> ChatResponse,
    );
    let breaker = CircuitBreakerLayer::builder()
        .name("chat-model")
        .failure_threshold(2)
        .cooldown(Cooldown::Time(COOLDOWN))
        .build()?
        .with_classifier(HttpClassifier::new())
        .with_fallback_context(fallback.clone());
    let handle = breaker.handle();
    // Failed calls get the saved answer too (their requests kept before the call).
    let recover = RecoverLayer::new(handle.clone(), fallback)
        .keep_requests_with(ChatRequest::try_clone as fn(&ChatRequest) -> Option<ChatRequest>);

    // The order of the layers, outside in (a request goes down this list, the response
    // comes back up it):
    //
    // 1. ProvenanceLayer: unwraps the breaker's `Answer` into a plain response labelled
    //    with where it came from (`x-circuit-breaker` header, `AnswerInfo` extension).
    // 2. RecoverLayer: a call that fails gets the fallback's answer instead of the
    //    error (`fallback; reason=failed`); the breaker still counts the failure once.
    // 3. SaveLayer: saves each answer the breaker's classifier called a success; it
    //    reads the breaker's verdict, so a 503 (an `Ok` to tower) is never saved.
    // 4. The breaker: decides whether the call goes out, counts its outcome, and answers
    //    skipped calls from the saved answers (or an honest "unavailable, retry after").
    // 5. retry, INSIDE the breaker: one outcome per user call however many attempts it
    //    took, and an open breaker stops the retries too.
    // 6. timeout, INSIDE the breaker (and retry): a hang ends as an error the breaker
    //    counts as a failure; each attempt has its own deadline.
    // 7. BufferBodyLayer: reads each response whole into a `BufferedResponse`, which is
    //    `Clone` (a saved answer is served again) and whose error body the classifier
    //    reads (an exhausted quota stays open until reset; a rate limit does not).
    // 8. The client: `reqwest::Client`, itself a `tower::Service<reqwest::Request>`.
    let svc = ServiceBuilder::new()
        .layer(ProvenanceLayer::new())
        .layer(recover)
        .layer(save)
        .layer(breaker)
        .retry(RetryTransient { attempts: ATTEMPTS })
        .timeout(ATTEMPT_TIMEOUT)
        .layer(BufferBodyLayer::new())
        .service(reqwest::Client::new());

    // The operators' endpoint: reads and changes behind the operator's token (compared
    // in constant time); the health path open to a load balancer's probe.
    let admin = Admin::builder()
        .breaker(handle.clone())
        .bearer_token(TOKEN)
        .open_health_to_anyone()
        .allow_mutations(true)
        .build()?;
    let admin = AdminServer::start(admin).await?;

    let url = format!("http://{}/v1/chat/completions", model.addr);
    println!("model server on {url}");
    println!("admin service on {}", admin.url(""));
    scripted_run(svc, &handle, &model, &admin, &url, &saved).await
}

async fn scripted_run<S>(
    mut svc: S,
    handle: &CircuitBreakerHandle,
    model: &ModelServer,
    admin: &AdminServer,
    url: &str,
    saved: &SavedAnswers<String, ChatResponse>,
) -> Result<(), BoxError>
where
    S: Service<ChatRequest, Response = ChatResponse, Error = BoxError>,
{
    let question = "What is six times seven?";
    let mut ask = Asker {
        n: 0,
        url,
        last: http::HeaderMap::new(),
    };

    println!("\n-- the model answers; the answer is saved");
    model.set(Mode::Up);
    let first = ask.call(&mut svc, question).await?;
    assert_eq!(first, Source::Service);
    ask.call(&mut svc, "What is the capital of France?").await?;
    assert_eq!(saved.len(), 2);

    println!("\n-- a second later the model fails (503): the saved answer is served, with its age");
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    model.set(Mode::Failing);
    assert_eq!(
        ask.call(&mut svc, question).await?,
        Source::FallbackAfterFailure
    );
    assert!(ask.last.contains_key(X_CIRCUIT_BREAKER_STALE));
    ask.call(&mut svc, "A question never asked before").await?;
    // Two failed calls opened the breaker: skipped calls get the saved answer too, with
    // when to ask again.
    let before = model.requests();
    assert!(ask.call(&mut svc, question).await?.is_fallback());
    assert_eq!(model.requests(), before, "no call while open");
    assert!(ask.last.contains_key(X_CIRCUIT_BREAKER_STALE));
    assert!(ask.last.contains_key("retry-after"));
    assert_eq!(saved.stored(), 2, "no failure was saved");

    println!("\n-- the model recovers; after the cooldown one probe closes the breaker");
    model.set(Mode::Up);
    tokio::time::sleep(COOLDOWN).await;
    assert_eq!(ask.call(&mut svc, question).await?, Source::Probe);

    println!(
        "\n-- the model rate-limits (retry-after-ms: {RETRY_AFTER_MS}): the breaker opens at once"
    );
    model.set(Mode::RateLimited);
    ask.call(&mut svc, question).await?;
    println!("   breaker {}", status(handle));
    let before = model.requests();
    assert!(ask.call(&mut svc, question).await?.is_fallback());
    assert_eq!(
        model.requests(),
        before,
        "the wait the server asked for is respected"
    );
    model.set(Mode::Up);
    tokio::time::sleep(Duration::from_millis(RETRY_AFTER_MS)).await;
    assert_eq!(ask.call(&mut svc, question).await?, Source::Probe);

    println!("\n-- the model hangs: the timeout turns each hang into a failure");
    model.set(Mode::Hanging);
    ask.call(&mut svc, "Are you there?").await?;
    ask.call(&mut svc, "Are you there?").await?;
    println!("   breaker {}", status(handle));
    model.set(Mode::Up);
    tokio::time::sleep(COOLDOWN).await;
    ask.call(&mut svc, "Are you there?").await?;

    println!("\n-- an operator kills the breaker through the admin service");
    let (code, _) = admin
        .send(Method::GET, "/breakers/chat-model", None)
        .await?;
    println!("   GET /breakers/chat-model without the token: {code}");
    assert_eq!(code, StatusCode::UNAUTHORIZED, "reads are guarded too");
    let (code, body) = admin
        .send(Method::POST, "/breakers/chat-model/kill", None)
        .await?;
    println!("   POST /breakers/chat-model/kill without the token: {code} {body}");
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    let (code, body) = admin
        .send(Method::POST, "/breakers/chat-model/kill", Some(TOKEN))
        .await?;
    println!(
        "   POST /breakers/chat-model/kill with the token: {code}, killed = {}, stops {}",
        body["killed"], body["kill_switch"]["breakers"]
    );
    assert!(handle.kill_switch().is_killed());
    let (code, health) = admin.send(Method::GET, "/health", None).await?;
    println!("   GET /health (no token needed): {code} {health}");
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    let before = model.requests();
    assert!(ask.call(&mut svc, question).await?.is_fallback());
    assert_eq!(model.requests(), before, "no call while killed");

    println!("\n-- the operator revives it: calls go through again");
    let (code, _) = admin
        .send(Method::POST, "/breakers/chat-model/revive", Some(TOKEN))
        .await?;
    assert_eq!(code, StatusCode::OK);
    assert!(ask.call(&mut svc, question).await?.is_service());
    assert_eq!(model.requests(), before + 1);

    let (_, snapshot) = admin
        .send(Method::GET, "/breakers/chat-model", Some(TOKEN))
        .await?;
    println!(
        "\nGET /breakers/chat-model: state {}, {} calls arrived, {} made, {} skipped, {} failures",
        snapshot["state"],
        snapshot["counts"]["arrived"],
        snapshot["counts"]["made"],
        snapshot["counts"]["skipped"],
        snapshot["counts"]["failures"],
    );
    println!(
        "{} user calls, {} requests reached the model; {} saved answers served",
        ask.n,
        model.requests(),
        saved.served()
    );
    Ok(())
}

/// Numbers the user calls and prints each answer with where it came from.
struct Asker<'a> {
    n: usize,
    url: &'a str,
    /// The last answer's headers.
    last: http::HeaderMap,
}

impl Asker<'_> {
    async fn call<S>(&mut self, svc: &mut S, prompt: &str) -> Result<Source, BoxError>
    where
        S: Service<ChatRequest, Response = ChatResponse, Error = BoxError>,
    {
        self.n += 1;
        let n = self.n;
        let response = svc
            .ready()
            .await?
            .call(chat_request(self.url, prompt))
            .await?;
        let source = provenance(&response).map_or(Source::Service, |info| info.source);
        let label = response.headers()[X_CIRCUIT_BREAKER]
            .to_str()
            .unwrap_or("?")
            .to_string();
        let who = if source.is_service() {
            "model"
        } else {
            "fallback"
        };
        // What HTTP clients and machines read: the stale marker, and when to ask again.
        let mut marks = String::new();
        if let Some(stale) = response.headers().get(X_CIRCUIT_BREAKER_STALE) {
            marks.push_str(&format!(" (stale {})", stale.to_str().unwrap_or("?")));
        }
        if let Some(wait) = response.headers().get("retry-after") {
            marks.push_str(&format!(" (retry-after {})", wait.to_str().unwrap_or("?")));
        }
        // One line per answer: the stale label's line break printed as a space.
        let text = content_of(response.body()).replace('\n', " ");
        self.last = response.headers().clone();
        println!(
            "{n:>2} {who:<8} [{label}] {}{marks} {text}",
            response.status().as_u16()
        );
        Ok(source)
    }
}

/// The key a prompt's answer is saved under: the request's JSON body (the model and
/// the messages), as sent.
fn prompt_of(request: &ChatRequest) -> Option<String> {
    let body = request.body()?.as_bytes()?;
    Some(String::from_utf8_lossy(body).into_owned())
}

/// The assistant's message of a chat completion, the error message of an error body,
/// or the text as it is.
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
    let failures = snapshot.consecutive_failures;
    let plural = if failures == 1 { "" } else { "s" };
    let mut text = format!("{}, {failures} failure{plural} in a row", snapshot.state);
    if snapshot.killed {
        text.push_str(", KILLED");
    }
    if let Some(wait) = snapshot.retry_after() {
        text.push_str(&format!(", next probe in {wait:.1?}"));
    }
    text
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

/// Retries a transport error, a timeout or a 5xx; a 429's wait is left to the breaker,
/// and a 4xx is the caller's to fix.
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
        // `None` for a streamed body, which cannot be sent twice; these bodies are bytes.
        request.try_clone()
    }
}

// ---------------------------------------------------------------------------------
// The admin service, on loopback, behind its built-in bearer-token guard.

/// The admin service served by hyper on a loopback port.
struct AdminServer {
    addr: SocketAddr,
}

impl AdminServer {
    async fn start(service: Admin) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let service = service.clone();
                let serve =
                    hyper::service::service_fn(move |request| service.clone().oneshot(request));
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), serve),
                );
            }
        });
        Ok(AdminServer { addr })
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// What `curl -X <method> [-H 'Authorization: Bearer <token>'] <url>` would get.
    async fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
    ) -> Result<(StatusCode, serde_json::Value), BoxError> {
        let mut request = reqwest::Client::new().request(method, self.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await?;
        Ok((response.status(), response.json().await?))
    }
}

// ---------------------------------------------------------------------------------
// The model server: OpenAI-compatible enough for this client.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Up = 0,
    Failing = 1,
    RateLimited = 2,
    Hanging = 3,
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

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// `POST /v1/chat/completions`: a completion that echoes the prompt, a 503, a 429 with
/// `retry-after-ms`, or no answer at all, as the mode says.
async fn completion(
    request: Request<Incoming>,
    mode: Arc<AtomicU8>,
    requests: Arc<AtomicUsize>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let n = requests.fetch_add(1, Ordering::SeqCst) + 1;
    let json = |status: u16, body: serde_json::Value| {
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Full::from(body.to_string()))
            .expect("a valid response")
    };
    if request.uri().path() != "/v1/chat/completions" {
        let body = serde_json::json!({ "error": { "message": "not found", "code": "not_found" } });
        return Ok(json(404, body));
    }
    let body = request.into_body().collect().await.map(|b| b.to_bytes());
    let prompt = body
        .ok()
        .and_then(|body| serde_json::from_slice::<serde_json::Value>(&body).ok())
        .and_then(|json| json["messages"][0]["content"].as_str().map(str::to_string))
        .unwrap_or_default();
    let response = match mode.load(Ordering::SeqCst) {
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
        2 => {
            let mut response = json(
                429,
                serde_json::json!({ "error": { "message": "Rate limit reached", "code": "rate_limit_exceeded" } }),
            );
            response
                .headers_mut()
                .insert("retry-after-ms", HeaderValue::from(RETRY_AFTER_MS));
            response
        }
        _ => std::future::pending().await,
    };
    Ok(response)
}
