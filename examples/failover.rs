//! Provider failover over real HTTP on loopback: two OpenAI-compatible model servers, the
//! primary and a second provider, behind one `LlmClient`.
//!
//! ```text
//! cargo run --example failover
//! ```
//!
//! The run, phase by phase: both answer (the primary does); the primary fails with 503s
//! (each call retried, then answered by the second provider; after three failed calls
//! the primary's breaker opens and nothing more is sent to it); it comes back
//! rate-limited for an hour (`Retry-After: 3600`: not retried, its breaker opens at once
//! for the wait); an operator resets it and then kills it (passed as killed, nothing
//! sent); the operator revives it and it answers again. Finally both providers are down:
//! the saved answer to the same question is served, labelled with its age.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tower::{BoxError, ServiceExt};
use tower_circuit_breaker::http::{route_of, BufferedResponse, X_CIRCUIT_BREAKER};
use tower_circuit_breaker::llm::{LlmClient, Provider};
use tower_circuit_breaker::retry::RetryBuilder;
use tower_circuit_breaker::{Builder, Cooldown};

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let primary = ModelServer::start("primary").await?;
    let second = ModelServer::start("second").await?;
    let llm = LlmClient::builder()
        .provider(Provider::new("primary", primary.base_url()).model("big-model"))
        .provider(Provider::new("second", second.base_url()).model("small-model"))
        .breaker(
            Builder::new()
                .failure_threshold(3)
                .cooldown(Cooldown::Time(Duration::from_secs(30))),
        )
        .retry(
            RetryBuilder::new()
                .max_attempts(2)
                .backoff(Duration::from_millis(10), Duration::from_millis(50)),
        )
        .timeout(Duration::from_secs(2))
        // A provider's redirect is its answer: nothing is sent on to where it points.
        .build(
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()?,
        )?;
    let operator = llm
        .handle("primary")
        .expect("a provider named primary")
        .clone();

    println!("-- both providers answer");
    let by = ask(&llm, &primary, &second, "What is six times seven?").await?;
    assert_eq!(by.as_deref(), Some("primary"));

    println!("\n-- the primary fails (503): retried once, then the second provider answers");
    primary.set(Mode::Failing);
    for question in ["Q1", "Q2", "Q3"] {
        let by = ask(&llm, &primary, &second, question).await?;
        assert_eq!(by.as_deref(), Some("second"));
    }
    println!("   primary's breaker: {}", operator.state());
    let sent = primary.requests();
    assert_eq!(
        ask(&llm, &primary, &second, "Q4").await?.as_deref(),
        Some("second")
    );
    assert_eq!(primary.requests(), sent, "nothing reaches an open provider");

    println!(
        "\n-- an operator resets the primary; it is rate-limited for an hour (Retry-After: 3600)"
    );
    operator.reset();
    primary.set(Mode::RateLimited);
    ask(&llm, &primary, &second, "Q5").await?;
    let sent = primary.requests();
    assert_eq!(
        ask(&llm, &primary, &second, "Q6").await?.as_deref(),
        Some("second")
    );
    assert_eq!(
        primary.requests(),
        sent,
        "nothing reaches a rate-limited provider"
    );

    println!("\n-- the primary is back; the operator resets it, then kills it");
    primary.set(Mode::Ok);
    operator.reset();
    operator.kill_switch().kill();
    let sent = primary.requests();
    assert_eq!(
        ask(&llm, &primary, &second, "Q7").await?.as_deref(),
        Some("second")
    );
    assert_eq!(
        primary.requests(),
        sent,
        "nothing reaches a killed provider"
    );

    println!("\n-- the operator revives it: the primary answers again");
    operator.kill_switch().revive();
    assert_eq!(
        ask(&llm, &primary, &second, "Q8").await?.as_deref(),
        Some("primary")
    );

    println!("\n-- both providers are down: the saved answer, with its age");
    primary.set(Mode::Failing);
    second.set(Mode::Failing);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let by = ask(&llm, &primary, &second, "What is six times seven?").await?;
    assert_eq!(by, None, "the saved answer, no provider");
    Ok(())
}

/// Asks `question`, prints what the caller saw and what reached each server.
async fn ask(
    llm: &LlmClient,
    primary: &ModelServer,
    second: &ModelServer,
    question: &str,
) -> Result<Option<String>, BoxError> {
    let before = (primary.requests(), second.requests());
    let request = reqwest::Client::new()
        .post(llm.url("/chat/completions"))
        .json(&serde_json::json!({"model": "any", "messages": [{"role": "user", "content": question}]}))
        .build()?;
    let answer: BufferedResponse = llm.service().oneshot(request).await?;
    let route = route_of(&answer)
        .map(ToString::to_string)
        .unwrap_or_default();
    let age = answer
        .headers()
        .get("age")
        .map(|age| format!(" age={}s", age.to_str().unwrap_or("?")))
        .unwrap_or_default();
    println!(
        "   {question:<26} {} [{}]{age} {}",
        answer.status().as_u16(),
        answer
            .headers()
            .get(X_CIRCUIT_BREAKER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-"),
        content(&answer),
    );
    println!(
        "   {:<26} {route}; requests sent: primary +{}, second +{}",
        "",
        primary.requests() - before.0,
        second.requests() - before.1
    );
    Ok(route_of(&answer)
        .and_then(|route| route.provider())
        .map(str::to_owned))
}

/// The model's words, or the error's message.
fn content(answer: &BufferedResponse) -> String {
    let json: serde_json::Value = serde_json::from_slice(answer.body()).unwrap_or_default();
    let text = json["choices"][0]["message"]["content"]
        .as_str()
        .or_else(|| json["error"]["message"].as_str());
    text.unwrap_or("(no text)").to_owned()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Mode {
    Ok,
    Failing,
    RateLimited,
}

/// An OpenAI-compatible chat server on loopback, whose mode the example switches.
struct ModelServer {
    addr: SocketAddr,
    mode: Arc<AtomicU8>,
    requests: Arc<AtomicUsize>,
}

impl ModelServer {
    async fn start(name: &'static str) -> Result<Self, BoxError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let (mode, requests) = (
            Arc::new(AtomicU8::new(Mode::Ok as u8)),
            Arc::new(AtomicUsize::new(0)),
        );
        let server = ModelServer {
            addr: listener.local_addr()?,
            mode: mode.clone(),
            requests: requests.clone(),
        };
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (mode, requests) = (mode.clone(), requests.clone());
                let answer = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let n = requests.fetch_add(1, Ordering::SeqCst) + 1;
                    let mode = mode.load(Ordering::SeqCst);
                    async move { Ok::<_, Infallible>(reply(name, mode, n, request)) }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), answer),
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

    fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

fn reply(name: &str, mode: u8, n: usize, _request: Request<Incoming>) -> Response<Full<Bytes>> {
    let (status, body) = match mode {
        m if m == Mode::Ok as u8 => (
            StatusCode::OK,
            serde_json::json!({"object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("42 (from {name}, request {n})")}, "finish_reason": "stop"}]}),
        ),
        m if m == Mode::Failing as u8 => (
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"error": {"message": "overloaded", "code": "server_error"}}),
        ),
        _ => (
            StatusCode::TOO_MANY_REQUESTS,
            serde_json::json!({"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}}),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        "application/json".parse().expect("a header value"),
    );
    if status == StatusCode::TOO_MANY_REQUESTS {
        response.headers_mut().insert(RETRY_AFTER, 3600.into());
    }
    response
}
