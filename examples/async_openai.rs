//! The circuit breaker inside async-openai's tower middleware slot
//! (`Client::with_http_service`, async-openai's `middleware` feature), over real HTTP
//! on loopback.
//!
//! ```text
//! cargo run --example async_openai --features reqwest
//! ```
//!
//! The example starts an OpenAI-compatible `/v1/chat/completions` server on 127.0.0.1
//! and calls it with async-openai's chat client through a scripted schedule: the model
//! answers, fails (503: the breaker opens and the fallback answers without calling
//! the server), recovers (one probe closes the breaker), and is killed and revived by
//! an operator. Each answer is printed with its source; the run checks the sources and
//! the server's request count, and exits 0 when they are as expected.
//!
//! # How a fallback reaches the caller
//!
//! async-openai's slot takes a tower service from `HttpRequestFactory` to
//! `reqwest::Response`: [`ProvenanceLayer`] unwraps the breaker's `Answer` and
//! labels the response with an `x-circuit-breaker` header and an `AnswerInfo`
//! extension. But async-openai's API groups (`client.chat().create(..)`) read the
//! response into their own types and drop its headers and extensions, and turn a
//! non-2xx response into `OpenAIError::ApiError` with the body as its message. So the
//! top layer of the slot, `http::fallback_as_error`, turns a labelled fallback response
//! into a typed error, `http::FallbackAnswer`, which async-openai hands to the caller
//! untouched as `OpenAIError::Boxed`: the caller downcasts it and reads why the model
//! was not asked and when it will be again. A fallback never poses as a completion.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::{HttpRequestFactory, ReqwestService};
use async_openai::types::chat::{
    ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequestArgs,
};
use async_openai::Client;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tower::{service_fn, BoxError, ServiceBuilder};
use tower_circuit_breaker::http::{
    fallback_as_error, FallbackAnswer, HttpClassifier, ProvenanceLayer,
};
use tower_circuit_breaker::{CircuitBreakerHandle, CircuitBreakerLayer, Cooldown};

/// A call's deadline: a hang longer than this is a failure.
const TIMEOUT: Duration = Duration::from_secs(2);
/// How long the breaker stays open before it lets a probe through.
const COOLDOWN: Duration = Duration::from_millis(500);

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let model = ModelServer::start().await?;
    let (client, handle) = chat_client(&format!("http://{}/v1", model.addr))?;
    println!("model server on http://{}/v1/chat/completions", model.addr);

    println!("\n-- the model answers");
    phase(&client, &model, 2, "model", 2).await?;

    println!("\n-- the model fails: two 503s open the breaker, the fallback answers");
    model.failing.store(true, Ordering::SeqCst);
    phase(&client, &model, 2, "model error", 2).await?;
    // No call reaches the server while the breaker is open.
    phase(&client, &model, 2, "fallback open", 0).await?;

    println!("\n-- the model recovers; after the cooldown one probe closes the breaker");
    model.failing.store(false, Ordering::SeqCst);
    tokio::time::sleep(COOLDOWN).await;
    phase(&client, &model, 2, "model", 2).await?;

    println!("\n-- an operator kills the model, then revives it");
    handle.kill_switch().kill();
    phase(&client, &model, 2, "fallback killed", 0).await?;
    handle.kill_switch().revive();
    phase(&client, &model, 1, "model", 1).await?;

    let counts = handle.snapshot().counts;
    println!(
        "\nthe server received {} requests; the breaker saw {} calls, made {}",
        model.requests(),
        counts.arrived,
        counts.made
    );
    Ok(())
}

/// async-openai's client with the breaker in its middleware slot, and the breaker's
/// handle.
fn chat_client(api_base: &str) -> Result<(Client<OpenAIConfig>, CircuitBreakerHandle), BoxError> {
    let breaker = CircuitBreakerLayer::builder()
        .name("chat-model")
        .failure_threshold(2)
        .cooldown(Cooldown::Time(COOLDOWN))
        .build()?;
    let handle = breaker.handle();
    let breaker = breaker
        // `reqwest::Response` classified: 5xx, 429, transport errors and timeouts fail.
        .with_classifier(HttpClassifier::new())
        .with_fallback(service_fn(unavailable));

    // Outside in: the fallback turned into a typed error (async-openai would drop the
    // labels), the labels, the breaker, a timeout inside it so that a hang counts as
    // a failure, and async-openai's own reqwest transport.
    let service = ServiceBuilder::new()
        .map_result(fallback_as_error)
        .layer(ProvenanceLayer::new())
        .layer(breaker)
        .timeout(TIMEOUT)
        .service(ReqwestService::new(reqwest::Client::new()));

    let config = OpenAIConfig::new()
        .with_api_base(api_base)
        .with_api_key("not-a-real-key");
    let client = Client::with_config(config).with_http_service(service);
    Ok((client, handle))
}

/// The fallback: an honest 503, never a made-up completion.
async fn unavailable(_: HttpRequestFactory) -> Result<reqwest::Response, Infallible> {
    let response = http::Response::builder()
        .status(503)
        .header("content-type", "application/json")
        .body(r#"{"error":{"message":"the model is unavailable","type":"circuit_breaker_open"}}"#)
        .expect("a valid response");
    Ok(reqwest::Response::from(response))
}

/// Asks `n` questions; returns how each was answered (`model`, `model error`,
/// `fallback <reason>`).
async fn ask(client: &Client<OpenAIConfig>, n: usize) -> Vec<String> {
    let mut seen = Vec::new();
    for _ in 0..n {
        let request = CreateChatCompletionRequestArgs::default()
            .model("local")
            .messages([ChatCompletionRequestUserMessageArgs::default()
                .content("six times seven?")
                .build()
                .expect("a valid message")
                .into()])
            .build()
            .expect("a valid request");
        let (label, line) = match client.chat().create(request).await {
            Ok(completion) => {
                let content = completion.choices[0].message.content.clone();
                ("model".to_string(), content.unwrap_or_default())
            }
            Err(OpenAIError::Boxed(error)) if error.is::<FallbackAnswer>() => {
                let fallback = error.downcast_ref::<FallbackAnswer>().expect("checked");
                let reason = match fallback.info.source.reason() {
                    Some(reason) => reason.as_str(),
                    None => "unavailable",
                };
                let next = match fallback
                    .info
                    .next_probe
                    .retry_after(tokio::time::Instant::now().into_std())
                {
                    Some(wait) => format!("next probe in {} ms", wait.as_millis()),
                    None => "no probe scheduled: an operator decides".to_string(),
                };
                (format!("fallback {reason}"), format!("{fallback}; {next}"))
            }
            Err(error) => ("model error".to_string(), error.to_string()),
        };
        println!("  [{label}] {line}");
        seen.push(label);
    }
    seen
}

/// Asks `n` questions; checks that each was answered as `expected` and that the server
/// received `requests` of them.
async fn phase(
    client: &Client<OpenAIConfig>,
    model: &ModelServer,
    n: usize,
    expected: &str,
    requests: usize,
) -> Result<(), BoxError> {
    let before = model.requests();
    let seen = ask(client, n).await;
    if let Some(label) = seen.iter().find(|label| *label != expected) {
        return Err(format!("expected {expected}, got {label}").into());
    }
    let received = model.requests() - before;
    if received != requests {
        return Err(format!("expected {requests} requests at the server, got {received}").into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// The model server.

/// An OpenAI-compatible chat-completions server on 127.0.0.1 that answers 200 or,
/// while `failing`, 503, and counts the requests it receives.
struct ModelServer {
    addr: SocketAddr,
    failing: Arc<AtomicBool>,
    requests: Arc<AtomicUsize>,
}

impl ModelServer {
    async fn start() -> Result<Self, BoxError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let failing = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicUsize::new(0));
        let (f, r) = (failing.clone(), requests.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (f, r) = (f.clone(), r.clone());
                tokio::spawn(async move {
                    let answer = hyper::service::service_fn(move |request: Request<Incoming>| {
                        completion(request, f.clone(), r.clone())
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), answer)
                        .await;
                });
            }
        });
        Ok(ModelServer {
            addr,
            failing,
            requests,
        })
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

async fn completion(
    request: Request<Incoming>,
    failing: Arc<AtomicBool>,
    requests: Arc<AtomicUsize>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    requests.fetch_add(1, Ordering::SeqCst);
    let (status, body) = if request.uri().path() != "/v1/chat/completions" {
        (
            404,
            r#"{"error":{"message":"no such route","type":"invalid_request_error"}}"#,
        )
    } else if failing.load(Ordering::SeqCst) {
        (
            503,
            r#"{"error":{"message":"overloaded","type":"server_error"}}"#,
        )
    } else {
        (200, CHAT_COMPLETION)
    };
    Ok(Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::from(body))
        .expect("a valid response"))
}

const CHAT_COMPLETION: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"local","choices":[{"index":0,"message":{"role":"assistant","content":"42"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#;
