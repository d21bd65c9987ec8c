//! An OpenAI-compatible endpoint behind the whole stack, over real TCP on loopback: a
//! hyper server (`tests/common/server.rs`) that answers, fails with 503, rate-limits
//! with `Retry-After` (or `retry-after-ms`), reports an exhausted quota and recovers,
//! called through hyper-util's client and through `reqwest::Client`.
//!
//! The stack, outside in: `ProvenanceLayer`, (`RecoverLayer`,) `SaveLayer`, the breaker
//! (`HttpClassifier`, a `SavedFallback`), `timeout`, `BufferBodyLayer`, the client.
//!
//! One test per point of what was broken: a 503 is never saved and the last good
//! answer is served with its age (1); saved answers on a reqwest stack with error
//! bodies and provenance (2); a tool adapter that reads a reqwest body into text (3); a
//! `Retry-After` respected at once (4); a failed call answered by the fallback (5); an
//! exhausted quota named in the unavailable answer (7). The snapshot's JSON (6) is in
//! `tests/snapshot_json.rs` and, over TCP, `tests/admin.rs`. Honest HTTP answers from
//! the ready-made `http::stale` and `http::unavailable` (8): `Retry-After` on what the
//! breaker makes while it knows the wait, `Age` and the stale marker on saved answers
//! whose JSON still parses with the label in it, no "retry now" after a failure, and
//! `Rejected::retry_after`.
//!
//! Time: real sockets need the real clock. Cooldowns, `Retry-After` waits and ages are
//! crossed with [`skip`]: tokio's clock (the breaker's and the store's) paused and
//! advanced while no request is in flight. Every call is bounded by
//! `tokio::time::timeout`.
#![cfg(all(feature = "http", feature = "reqwest"))]

#[path = "common/server.rs"]
mod server;

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use server::{Reply, TestServer, CHAT_BODY, QUOTA_BODY, RATE_LIMIT_BODY};
use tower::util::BoxCloneService;
use tower::{BoxError, Layer, Service, ServiceBuilder, ServiceExt};
use tower_circuit_breaker::error::Rejected;
use tower_circuit_breaker::http::{
    self as tcb_http, provenance, stale_from_header, BodyTooLarge, BufferBodyLayer,
    BufferedResponse, ErrorBodyBytes, ErrorBodyLayer, HttpClassifier, ProvenanceLayer,
    DEFAULT_BUFFER_LIMIT, X_CIRCUIT_BREAKER, X_CIRCUIT_BREAKER_STALE,
};
use tower_circuit_breaker::recover::RecoverLayer;
use tower_circuit_breaker::saved::{stale_label, SaveLayer, SavedAnswers, Unavailable};
use tower_circuit_breaker::{
    Answer, Builder, Cause, CircuitBreakerHandle, Cooldown, NextProbe, Reason, Source, State,
    Verdict,
};

const CALL_BOUND: Duration = Duration::from_secs(5);
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
const QUOTA_FAILURE: &str = "429 Too Many Requests: insufficient_quota (the quota is exhausted)";

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

// ---------------------------------------------------------------------------------
// What the server answers.

/// A chat completion whose content is [`TRICKY_CONTENT`], written with JSON escapes.
const TRICKY_BODY: &str = r#"{"id":"chatcmpl-7","object":"chat.completion","created":1712345678,"choices":[{"index":0,"message":{"role":"assistant","content":"She said \"hi\" \\ caf\u00e9 — naïve 😀\nline two"},"finish_reason":"stop"}],"usage":{"total_tokens":12}}"#;
/// What [`TRICKY_BODY`]'s content says.
const TRICKY_CONTENT: &str = "She said \"hi\" \\ café — naïve 😀\nline two";

/// Lets `wait` pass on tokio's clock, without waiting for it. Only with no request in
/// flight: the clock is paused for the jump.
async fn skip(wait: Duration) {
    tokio::time::pause();
    tokio::time::advance(wait).await;
    tokio::time::resume();
}

// ---------------------------------------------------------------------------------
// The fallback's answers.

type Stale = fn(BufferedResponse, Duration) -> BufferedResponse;
type Unav = fn(Unavailable) -> BufferedResponse;

/// A saved answer, served with its age in the `Age` header.
fn stale(response: BufferedResponse, age: Duration) -> BufferedResponse {
    response.with_age(age)
}

/// No saved answer: an honest 503 that says why and when, in OpenAI's error shape.
fn unavailable(unavailable: Unavailable) -> BufferedResponse {
    let body = serde_json::json!({
        "error": { "message": unavailable.to_string(), "code": "circuit_open" }
    });
    Response::builder()
        .status(StatusCode::SERVICE_UNAVAILABLE)
        .header("content-type", "application/json")
        .body(Bytes::from(body.to_string()))
        .expect("a valid response")
        .into()
}

fn message_of(response: &BufferedResponse) -> String {
    let json: serde_json::Value = serde_json::from_slice(response.body()).expect("JSON");
    json["error"]["message"]
        .as_str()
        .expect("an error message")
        .to_string()
}

#[track_caller]
fn source(response: &BufferedResponse) -> Source {
    provenance(response)
        .expect("labelled by ProvenanceLayer")
        .source
}

#[track_caller]
fn label(response: &BufferedResponse) -> &str {
    response.headers()[X_CIRCUIT_BREAKER]
        .to_str()
        .expect("ASCII")
}

// ---------------------------------------------------------------------------------
// The hyper stack.

type ReqBody = Full<Bytes>;
type HyperStack = BoxCloneService<Request<ReqBody>, BufferedResponse, BoxError>;

/// The key of a chat request: its prompt, which this test client also sends in a header
/// (a body of `Full<Bytes>` cannot be read without polling it).
fn prompt_of(request: &Request<ReqBody>) -> Option<String> {
    let prompt = request.headers().get("x-prompt")?;
    prompt.to_str().ok().map(str::to_string)
}

struct Model {
    svc: HyperStack,
    handle: CircuitBreakerHandle,
    saved: SavedAnswers<String, BufferedResponse>,
}

/// The stack around hyper-util's client, the breaker named `chat`; with `recover`,
/// failed calls are answered by the saved fallback too.
fn hyper_model(builder: Builder, recover: bool) -> Model {
    hyper_model_answering(builder, recover, stale, unavailable)
}

/// The same stack, its saved fallback answering with `stale` and `unavailable`.
fn hyper_model_answering(
    builder: Builder,
    recover: bool,
    stale: Stale,
    unavailable: Unav,
) -> Model {
    let client = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build_http::<ReqBody>();
    let saved = SavedAnswers::new(100, secs(24 * 3600)).expect("valid settings");
    let key = prompt_of as fn(&Request<ReqBody>) -> Option<String>;
    let save = SaveLayer::new(saved.clone(), key);
    let fallback = save.fallback(stale, unavailable);
    let breaker = builder
        .name("chat")
        .build()
        .expect("valid settings")
        .with_classifier(HttpClassifier::new())
        .with_fallback_context(fallback.clone());
    let handle = breaker.handle();
    let inner = ServiceBuilder::new()
        .layer(save)
        .layer(breaker)
        .timeout(ATTEMPT_TIMEOUT)
        .layer(BufferBodyLayer::new())
        .service(client);
    let svc = if recover {
        let recover = RecoverLayer::new(handle.clone(), fallback);
        let svc = ServiceBuilder::new()
            .layer(ProvenanceLayer::new())
            .layer(recover)
            .service(inner);
        BoxCloneService::new(svc)
    } else {
        BoxCloneService::new(ProvenanceLayer::new().layer(inner))
    };
    Model { svc, handle, saved }
}

fn chat(server: &TestServer, prompt: &str) -> Request<ReqBody> {
    let body = serde_json::json!({
        "model": "local", "messages": [{ "role": "user", "content": prompt }]
    });
    Request::post(server.url())
        .header("content-type", "application/json")
        .header("x-prompt", prompt)
        .body(Full::from(body.to_string()))
        .expect("a valid request")
}

async fn ask(model: &mut Model, server: &TestServer, prompt: &str) -> BufferedResponse {
    let request = chat(server, prompt);
    let call = async { model.svc.ready().await?.call(request).await };
    tokio::time::timeout(CALL_BOUND, call)
        .await
        .expect("a call ends within its bound")
        .expect("an answer")
}

// ---------------------------------------------------------------------------------
// 1. Only what the classifier calls a success is saved.

#[tokio::test]
async fn a_503_is_never_saved_and_the_last_good_answer_is_served_with_its_age_while_open() {
    let script = [
        Reply::Ok,
        Reply::Unavailable,
        Reply::Unavailable,
        Reply::Unavailable,
    ];
    let server = TestServer::start(script, Reply::Ok).await;
    let builder = Builder::new()
        .failure_threshold(3)
        .cooldown(Cooldown::Time(secs(30)));
    let mut model = hyper_model(builder, false);

    let first = ask(&mut model, &server, "six times seven?").await;
    assert_eq!(
        (first.status(), source(&first)),
        (StatusCode::OK, Source::Service)
    );
    assert_eq!((model.saved.len(), model.saved.stored()), (1, 1));

    // Ten minutes later the model fails: three 503s, each an `Ok` to tower and the
    // service's own answer to the caller, none saved over the good answer.
    skip(secs(600)).await;
    for _ in 0..3 {
        let failed = ask(&mut model, &server, "six times seven?").await;
        assert_eq!(failed.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(source(&failed), Source::Service);
    }
    assert_eq!(model.saved.stored(), 1, "a 503 is never saved");
    let (saved, _) = model.saved.get(&"six times seven?".into()).unwrap();
    assert_eq!(
        (saved.status(), saved.body().as_ref()),
        (StatusCode::OK, CHAT_BODY.as_bytes())
    );
    assert_eq!(model.handle.state(), State::Open);

    // Open: the same question gets the last good answer, with its age, labelled.
    let served = ask(&mut model, &server, "six times seven?").await;
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(served.body(), CHAT_BODY);
    assert_eq!(served.headers()["age"], "600");
    assert_eq!(source(&served), Source::Fallback(Reason::Open));
    assert_eq!(label(&served), "fallback; reason=open");
    assert_eq!(
        server.requests(),
        4,
        "the fallback did not reach the server"
    );

    // Another question has nothing saved: an honest answer with the real wait.
    let other = ask(&mut model, &server, "the time?").await;
    assert_eq!(other.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        message_of(&other),
        "chat is unavailable (its circuit breaker is open); retry after 30s"
    );
    assert_eq!((model.saved.served(), model.saved.unavailable()), (1, 1));

    // The model recovers: the probe's good answer replaces the saved one.
    skip(secs(30)).await;
    let probe = ask(&mut model, &server, "six times seven?").await;
    assert_eq!(
        (source(&probe), probe.status()),
        (Source::Probe, StatusCode::OK)
    );
    assert_eq!(model.handle.state(), State::Closed);
    assert_eq!(model.saved.stored(), 2);
    let age = model.saved.age(&"six times seven?".into()).unwrap();
    assert!(age < secs(1), "saved afresh: {age:?}");
}

// ---------------------------------------------------------------------------------
// 2. Saved answers on a reqwest stack.

type ReqwestStack = BoxCloneService<reqwest::Request, BufferedResponse, BoxError>;

/// The key of a reqwest chat request: its body, as sent.
fn body_of(request: &reqwest::Request) -> Option<String> {
    let bytes = request.body()?.as_bytes()?;
    Some(String::from_utf8_lossy(bytes).into_owned())
}

fn reqwest_chat(server: &TestServer, prompt: &str) -> reqwest::Request {
    let body = serde_json::json!({ "messages": [{ "role": "user", "content": prompt }] });
    let mut request = reqwest::Request::new(http::Method::POST, server.url().parse().unwrap());
    *request.body_mut() = Some(body.to_string().into());
    request
}

#[tokio::test]
async fn saved_answers_work_on_a_reqwest_stack_with_error_bodies_and_provenance() {
    let server = TestServer::start([Reply::Ok, Reply::QuotaExhausted], Reply::Ok).await;
    let saved = SavedAnswers::<String, BufferedResponse>::new(10, secs(3600)).unwrap();
    let key = body_of as fn(&reqwest::Request) -> Option<String>;
    let save = SaveLayer::new(saved.clone(), key);
    let breaker = Builder::new()
        .name("chat")
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new())
        .with_fallback_context(save.fallback(stale as Stale, unavailable as Unav));
    let handle = breaker.handle();
    let svc = ServiceBuilder::new()
        .layer(ProvenanceLayer::new())
        .layer(save)
        .layer(breaker)
        .timeout(ATTEMPT_TIMEOUT)
        .layer(BufferBodyLayer::new())
        .layer(ErrorBodyLayer::new()) // still works inside: its extension is kept
        .service(reqwest::Client::new());
    let svc = ReqwestStack::new(svc);
    let ask = |prompt: &'static str| {
        let request = reqwest_chat(&server, prompt);
        let mut svc = svc.clone();
        async move {
            tokio::time::timeout(CALL_BOUND, async { svc.ready().await?.call(request).await })
                .await
                .expect("within its bound")
                .expect("an answer")
        }
    };

    let first = ask("q").await;
    assert_eq!(
        (first.status(), source(&first)),
        (StatusCode::OK, Source::Service)
    );
    assert_eq!(saved.len(), 1);

    // An exhausted quota: the error body, read ahead, makes it permanent.
    let quota = ask("q").await;
    assert_eq!(quota.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(quota.extensions().get::<ErrorBodyBytes>().is_some());
    assert_eq!(quota.body(), QUOTA_BODY, "the caller gets the whole body");
    assert_eq!(handle.snapshot().next_probe, NextProbe::Manual);
    assert_eq!(
        &*handle.snapshot().last_failure.unwrap().message,
        QUOTA_FAILURE
    );
    assert_eq!(saved.stored(), 1);

    skip(secs(90)).await;
    let served = ask("q").await;
    assert_eq!(source(&served), Source::Fallback(Reason::Open));
    assert_eq!(served.headers()["age"], "90");
    // Back to a plain `reqwest::Response`, for code that expects one: labelled, with
    // the URL of the request that got the saved answer and its whole body.
    let response = reqwest::Response::from(served);
    assert_eq!(
        response.headers()[X_CIRCUIT_BREAKER],
        "fallback; reason=open"
    );
    assert_eq!(response.url().as_str(), server.url());
    assert_eq!(response.text().await.unwrap(), CHAT_BODY);
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn a_buffered_response_converts_to_and_from_reqwest_and_http_keeping_everything() {
    let server = TestServer::start([], Reply::RateLimited(3)).await;
    let response = reqwest::Client::new()
        .get(server.url())
        .send()
        .await
        .unwrap();
    let remote = response.remote_addr();
    let buffered = BufferedResponse::from_reqwest(response, 1024)
        .await
        .unwrap();
    assert_eq!(buffered.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(buffered.headers()["retry-after"], "3");
    assert_eq!(buffered.text().unwrap(), RATE_LIMIT_BODY);

    let copy = buffered.clone();
    let back = reqwest::Response::from(copy);
    assert_eq!(back.url().as_str(), server.url());
    assert_eq!(back.remote_addr(), remote);
    assert_eq!(back.status(), 429);
    assert_eq!(back.headers()["retry-after"], "3");
    assert_eq!(back.bytes().await.unwrap(), RATE_LIMIT_BODY);

    let http: Response<Bytes> = buffered.clone().into();
    assert_eq!(http.status(), 429);
    assert_eq!(http.body(), RATE_LIMIT_BODY);
    let again = BufferedResponse::from(http);
    assert_eq!(
        (again.status(), again.body()),
        (buffered.status(), buffered.body())
    );

    // Past the limit: a typed error, the body not read further.
    let response = reqwest::Client::new()
        .get(server.url())
        .send()
        .await
        .unwrap();
    let error = BufferedResponse::from_reqwest(response, 8)
        .await
        .unwrap_err();
    let too_large = error
        .downcast_ref::<tower_circuit_breaker::http::BodyTooLarge>()
        .expect("BodyTooLarge");
    assert_eq!(too_large.limit(), 8);
}

// ---------------------------------------------------------------------------------
// 3. A tool adapter: `Answer<reqwest::Response>` into `Answer<String>`.

#[tokio::test]
async fn a_tool_adapter_reads_a_reqwest_answer_into_text_and_keeps_its_provenance() {
    let server = TestServer::start([Reply::Ok, Reply::Unavailable], Reply::Ok).await;
    let breaker = Builder::new()
        .name("docs_fetch")
        .failure_threshold(1)
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new());
    let handle = breaker.handle();
    let mut tool = ServiceBuilder::new()
        .layer(breaker)
        .service(reqwest::Client::new())
        .and_then(|answer: Answer<reqwest::Response>| async move {
            answer
                .try_map_async(|response| response.text())
                .await
                .map_err(BoxError::from)
        });

    let request = || reqwest::Request::new(http::Method::GET, server.url().parse().unwrap());
    let answer: Answer<String> = tool.ready().await.unwrap().call(request()).await.unwrap();
    assert_eq!(answer.source(), Source::Service);
    assert_eq!(answer.verdict(), Some(Verdict::Success));
    assert_eq!(answer.get_ref(), CHAT_BODY);

    // The 503's text, and the breaker's verdict on it, carried across the body read.
    let answer = tool.ready().await.unwrap().call(request()).await.unwrap();
    assert!(answer.is_failure());
    assert_eq!(answer.get_ref(), r#"{"error":{"code":"server_error"}}"#);
    assert_eq!(handle.state(), State::Open);

    // Parts and back: a parse that is not a plain function keeps the origin too.
    let (text, origin) = answer.into_parts();
    let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
    let answer = Answer::from_parts(parsed, origin);
    assert_eq!(answer.verdict(), Some(Verdict::Failure));
    assert_eq!(answer.get_ref()["error"]["code"], "server_error");
    let sync = answer.try_map(|json| {
        json["error"]["code"]
            .as_str()
            .map(str::to_string)
            .ok_or("no code")
    });
    assert_eq!(sync.unwrap().into_inner(), "server_error");
    assert_eq!(server.requests(), 2);
}

// ---------------------------------------------------------------------------------
// 4. A Retry-After respected at once.

#[tokio::test]
async fn a_429_with_retry_after_opens_the_breaker_at_once_and_nothing_reaches_the_server_until_then(
) {
    let server = TestServer::start([Reply::RateLimited(7)], Reply::Ok).await;
    let builder = Builder::new()
        .failure_threshold(3)
        .cooldown(Cooldown::Time(secs(30)));
    let mut model = hyper_model(builder, false);
    let mut transitions = model.handle.subscribe();

    let limited = ask(&mut model, &server, "q").await;
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        source(&limited),
        Source::Service,
        "the 429 reaches the caller"
    );
    // One failure of three, and open: the server asked for the wait.
    assert_eq!(model.handle.state(), State::Open);
    let opened = transitions.try_recv().expect("the opening");
    assert_eq!((opened.to, opened.cause), (State::Open, Cause::RetryAfter));
    let wait = model.handle.snapshot().retry_after().unwrap();
    assert!(wait <= secs(7) && wait > secs(6), "{wait:?}");

    // Within the 7 s, no request reaches the server: the fallback says when.
    skip(secs(5)).await;
    let skipped = ask(&mut model, &server, "q").await;
    assert_eq!(source(&skipped), Source::Fallback(Reason::Open));
    assert!(
        message_of(&skipped).ends_with("retry after 2s"),
        "{}",
        message_of(&skipped)
    );
    assert_eq!(server.requests(), 1);

    // After it, one probe; the server has recovered.
    skip(secs(2)).await;
    let probe = ask(&mut model, &server, "q").await;
    assert_eq!(
        (source(&probe), probe.status()),
        (Source::Probe, StatusCode::OK)
    );
    assert_eq!(model.handle.state(), State::Closed);
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn openais_retry_after_ms_opens_it_for_that_long_and_counting_only_lets_calls_through() {
    let server = TestServer::start([Reply::RateLimitedMs("1500")], Reply::Ok).await;
    let mut model = hyper_model(Builder::new().failure_threshold(3), false);
    ask(&mut model, &server, "q").await;
    let wait = model.handle.snapshot().retry_after().unwrap();
    assert!(
        wait <= Duration::from_millis(1500) && wait > secs(1),
        "{wait:?}"
    );

    // Told to only count it: one failure of three, and the next call goes.
    let server = TestServer::start([Reply::RateLimited(7)], Reply::Ok).await;
    let builder = Builder::new()
        .failure_threshold(3)
        .open_on_retry_after(false);
    let mut model = hyper_model(builder, false);
    ask(&mut model, &server, "q").await;
    assert_eq!(model.handle.state(), State::Closed);
    assert_eq!(model.handle.snapshot().consecutive_failures, 1);
    let next = ask(&mut model, &server, "q").await;
    assert_eq!(
        (source(&next), next.status()),
        (Source::Service, StatusCode::OK)
    );
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn a_429_too_large_to_buffer_still_opens_the_breaker_for_its_retry_after() {
    let server = TestServer::start(
        [Reply::RateLimitedOversized {
            retry_after: 7,
            len: DEFAULT_BUFFER_LIMIT + 1,
        }],
        Reply::Ok,
    )
    .await;
    let builder = Builder::new()
        .failure_threshold(3)
        .cooldown(Cooldown::Time(secs(30)));
    let mut model = hyper_model(builder, false);
    let mut transitions = model.handle.subscribe();

    // The body is over the buffer's limit: the caller gets the error, which keeps the
    // status and the server's wait.
    let request = chat(&server, "q");
    let call = async { model.svc.ready().await?.call(request).await };
    let error = tokio::time::timeout(CALL_BOUND, call)
        .await
        .expect("a call ends within its bound")
        .expect_err("too large to buffer");
    let too_large = error.downcast_ref::<BodyTooLarge>().expect("BodyTooLarge");
    assert_eq!(too_large.limit(), DEFAULT_BUFFER_LIMIT);
    assert_eq!(too_large.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(too_large.retry_after(), Some(secs(7)));

    // The breaker honours the wait as it would for the 429 itself: open at once (one
    // failure of three), for 7 s, and named by the status.
    assert_eq!(model.handle.state(), State::Open);
    let opened = transitions.try_recv().expect("the opening");
    assert_eq!((opened.to, opened.cause), (State::Open, Cause::RetryAfter));
    let snapshot = model.handle.snapshot();
    let wait = snapshot.retry_after().unwrap();
    assert!(wait <= secs(7) && wait > secs(6), "{wait:?}");
    assert_eq!(
        &*snapshot.last_failure.unwrap().message,
        "429 Too Many Requests"
    );

    // Nothing reaches the server until then; after it, the probe.
    skip(secs(5)).await;
    let skipped = ask(&mut model, &server, "q").await;
    assert_eq!(source(&skipped), Source::Fallback(Reason::Open));
    skip(secs(2)).await;
    let probe = ask(&mut model, &server, "q").await;
    assert_eq!(
        (source(&probe), probe.status()),
        (Source::Probe, StatusCode::OK)
    );
    assert_eq!(server.requests(), 2);
}

// ---------------------------------------------------------------------------------
// 5. A failed call answered by the fallback.

#[tokio::test]
async fn a_call_that_fails_gets_the_saved_answer_counted_once_and_nothing_is_retried() {
    let script = [Reply::Ok, Reply::Unavailable, Reply::Unavailable];
    let mut server = TestServer::start(script, Reply::Ok).await;
    let mut model = hyper_model(Builder::new().failure_threshold(3), true);

    ask(&mut model, &server, "q").await;
    skip(secs(60)).await;

    // The 503 is counted by the breaker, and the caller gets the saved answer.
    let answer = ask(&mut model, &server, "q").await;
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(answer.body(), CHAT_BODY);
    assert_eq!(answer.headers()["age"], "60");
    assert_eq!(source(&answer), Source::FallbackAfterFailure);
    assert_eq!(label(&answer), "fallback; reason=failed");
    let snapshot = model.handle.snapshot();
    assert_eq!(
        (snapshot.consecutive_failures, snapshot.counts.failures),
        (1, 1)
    );
    assert_eq!(server.requests(), 2, "the service was not called again");

    // A question with nothing saved: told that the call failed, and why; the breaker
    // is still closed and sets no wait, so nothing is said of when (never "retry now").
    let answer = ask(&mut model, &server, "new").await;
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        message_of(&answer),
        "chat is unavailable: the call failed (503 Service Unavailable)"
    );
    assert_eq!(model.saved.stored(), 1, "neither failure was saved");

    // A connection refused is a failed call too.
    server.stop().await;
    let answer = ask(&mut model, &server, "q").await;
    assert_eq!(source(&answer), Source::FallbackAfterFailure);
    assert_eq!(answer.body(), CHAT_BODY);
    let last = model.handle.snapshot().last_failure.unwrap();
    assert!(
        last.message.contains("onnection refused"),
        "{}",
        last.message
    );
    // Three failures: open, and the next call is skipped to the same fallback.
    assert_eq!(model.handle.state(), State::Open);
    let skipped = ask(&mut model, &server, "q").await;
    assert_eq!(source(&skipped), Source::Fallback(Reason::Open));
    assert_eq!(model.handle.snapshot().counts.failures, 3);
}

// ---------------------------------------------------------------------------------
// 7. An exhausted quota named in the unavailable answer.

#[tokio::test]
async fn an_exhausted_quota_is_named_in_the_unavailable_answer_until_a_reset() {
    let server = TestServer::start([Reply::QuotaExhausted], Reply::Ok).await;
    let mut model = hyper_model(Builder::new(), true);

    // The call that meets it, answered by the fallback: nothing saved for it.
    let answer = ask(&mut model, &server, "q").await;
    assert_eq!(source(&answer), Source::FallbackAfterFailure);
    assert_eq!(
        message_of(&answer),
        format!(
            "chat is unavailable: the call failed ({QUOTA_FAILURE}); it does not pass by \
             itself, so no retry is scheduled until a person resets it"
        )
    );
    assert_eq!(model.handle.snapshot().next_probe, NextProbe::Manual);

    // The calls after it are skipped, and told the same, not only "until a reset".
    skip(secs(3600)).await;
    let skipped = ask(&mut model, &server, "q").await;
    assert_eq!(source(&skipped), Source::Fallback(Reason::Open));
    assert_eq!(
        message_of(&skipped),
        format!(
            "chat is unavailable: {QUOTA_FAILURE}; it does not pass by itself, so no retry is \
             scheduled until a person resets it"
        )
    );
    let from_snapshot = Unavailable::from_snapshot(&model.handle.snapshot());
    assert!(from_snapshot.is_permanent());
    assert_eq!(from_snapshot.failure(), Some(QUOTA_FAILURE));
    assert_eq!(server.requests(), 1);

    // A person tops the account up and resets the breaker: the model answers again.
    model.handle.reset();
    let answer = ask(&mut model, &server, "q").await;
    assert_eq!(
        (source(&answer), answer.status()),
        (Source::Service, StatusCode::OK)
    );
    assert_eq!(server.requests(), 2);
}

// ---------------------------------------------------------------------------------
// 8. Honest HTTP answers: the ready-made `http::stale` and `http::unavailable`.

/// The stack with the crate's own fallback answers.
fn ready_made_model(builder: Builder, recover: bool) -> Model {
    hyper_model_answering(builder, recover, tcb_http::stale, tcb_http::unavailable)
}

#[track_caller]
fn header<'a>(response: &'a BufferedResponse, name: &str) -> Option<&'a str> {
    let value = response.headers().get(name)?;
    Some(value.to_str().expect("ASCII"))
}

fn json_of(response: &BufferedResponse) -> serde_json::Value {
    serde_json::from_slice(response.body()).expect("the body is still JSON")
}

#[tokio::test]
async fn a_skipped_calls_503_carries_retry_after_equal_to_the_wait_rounded_up() {
    let server = TestServer::start([Reply::RateLimited(7)], Reply::Ok).await;
    let builder = Builder::new()
        .failure_threshold(3)
        .cooldown(Cooldown::Time(secs(30)));
    let mut model = ready_made_model(builder, false);

    // The server asks for 7 s: the breaker opens at once for that long.
    let limited = ask(&mut model, &server, "q").await;
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&limited, "retry-after"),
        Some("7"),
        "the server's own"
    );
    assert_eq!(model.handle.state(), State::Open);

    // 5 s later a skipped call is told the 2 s left (a little less, in real time,
    // rounded up), in the header and in the message, and reaches no server.
    skip(secs(5)).await;
    let skipped = ask(&mut model, &server, "another question").await;
    assert_eq!(skipped.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(source(&skipped), Source::Fallback(Reason::Open));
    let wait = model
        .handle
        .snapshot()
        .retry_after()
        .expect("a wait in time");
    assert!(wait <= secs(2) && wait > secs(1), "{wait:?}");
    assert_eq!(header(&skipped, "retry-after"), Some("2"));
    assert_eq!(header(&skipped, "content-type"), Some("application/json"));
    let json = json_of(&skipped);
    assert_eq!(json["error"]["code"], "circuit_open");
    assert_eq!(json["error"]["type"], "service_unavailable");
    assert_eq!(
        json["error"]["message"],
        "chat is unavailable (its circuit breaker is open); retry after 2s"
    );
    assert!(header(&skipped, X_CIRCUIT_BREAKER_STALE.as_str()).is_none());
    assert_eq!(server.requests(), 1);

    // Killed: nothing is scheduled, so no Retry-After at all.
    model.handle.kill_switch().kill();
    let killed = ask(&mut model, &server, "another question").await;
    assert_eq!(source(&killed), Source::Fallback(Reason::Killed));
    assert_eq!(killed.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&killed, "retry-after"), None);
    assert!(json_of(&killed)["error"]["message"]
        .as_str()
        .unwrap()
        .ends_with("no retry is scheduled until a person turns the kill switch off"));
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn a_saved_answer_carries_age_the_stale_marker_retry_after_and_a_labelled_content_that_still_parses(
) {
    let script = [
        Reply::Json(200, TRICKY_BODY),
        Reply::Unavailable,
        Reply::Unavailable,
        Reply::Unavailable,
    ];
    let server = TestServer::start(script, Reply::Ok).await;
    let builder = Builder::new()
        .failure_threshold(3)
        .cooldown(Cooldown::Time(secs(30)));
    let mut model = ready_made_model(builder, false);

    let fresh = ask(&mut model, &server, "q").await;
    assert_eq!(fresh.body(), TRICKY_BODY, "a fresh answer is not labelled");
    assert!(header(&fresh, "age").is_none());
    assert!(header(&fresh, X_CIRCUIT_BREAKER_STALE.as_str()).is_none());

    skip(secs(600)).await;
    for _ in 0..3 {
        ask(&mut model, &server, "q").await;
    }
    assert_eq!(model.handle.state(), State::Open);
    skip(secs(10)).await;

    // Open: the saved answer, marked for HTTP, for machines and in the content.
    let served = ask(&mut model, &server, "q").await;
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(source(&served), Source::Fallback(Reason::Open));
    assert_eq!(header(&served, "age"), Some("610"));
    let marker = &served.headers()[X_CIRCUIT_BREAKER_STALE];
    assert_eq!(marker, "age=610");
    assert_eq!(stale_from_header(marker), Some(secs(610)));
    // 20 s of the 30 s cooldown are left (a little less, rounded up).
    assert_eq!(header(&served, "retry-after"), Some("20"));
    // The JSON still parses, the label is in the content, the rest is as it was.
    let json = json_of(&served);
    let label = stale_label(secs(610));
    assert_eq!(
        label,
        "[STALE DATA — saved 10m 10s ago, may not reflect current state]"
    );
    assert_eq!(
        json["choices"][0]["message"]["content"],
        format!("{label}\n{TRICKY_CONTENT}")
    );
    assert_eq!(json["id"], "chatcmpl-7");
    assert_eq!(json["usage"]["total_tokens"], 12);
    let length: usize = header(&served, "content-length").unwrap().parse().unwrap();
    assert_eq!(
        length,
        served.body().len(),
        "Content-Length follows the label"
    );
    // As a `reqwest::Response`, as a client library reads it.
    let response = reqwest::Response::from(served);
    assert_eq!(response.headers()[X_CIRCUIT_BREAKER_STALE], "age=610");
    let parsed: serde_json::Value = response.json().await.unwrap();
    assert_eq!(parsed, json);

    // The store keeps the answer as it came: served again later, labelled afresh.
    skip(secs(5)).await;
    let again = ask(&mut model, &server, "q").await;
    let content = json_of(&again)["choices"][0]["message"]["content"].clone();
    assert_eq!(
        content,
        format!("{}\n{TRICKY_CONTENT}", stale_label(secs(615)))
    );
    assert_eq!(server.requests(), 4, "no call while open");
}

#[tokio::test]
async fn after_a_failed_call_with_the_breaker_closed_no_answer_says_retry_now_or_carries_retry_after(
) {
    let script = [Reply::Ok, Reply::Unavailable, Reply::Unavailable];
    let server = TestServer::start(script, Reply::Ok).await;
    let mut model = ready_made_model(Builder::new().failure_threshold(3), true);

    ask(&mut model, &server, "q").await;
    skip(secs(60)).await;

    // A failed call with something saved: the saved answer, marked, without a wait.
    let saved = ask(&mut model, &server, "q").await;
    assert_eq!(source(&saved), Source::FallbackAfterFailure);
    assert_eq!(model.handle.state(), State::Closed);
    assert_eq!(
        header(&saved, X_CIRCUIT_BREAKER_STALE.as_str()),
        Some("age=60")
    );
    assert_eq!(header(&saved, "retry-after"), None);
    assert!(json_of(&saved)["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .starts_with("[STALE DATA — saved 1m 0s ago"));

    // Nothing saved: the honest 503, which says the call failed and nothing of when.
    let failed = ask(&mut model, &server, "new").await;
    assert_eq!(source(&failed), Source::FallbackAfterFailure);
    assert_eq!(failed.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&failed, "retry-after"), None);
    let json = json_of(&failed);
    assert_eq!(json["error"]["code"], "call_failed");
    let message = json["error"]["message"].as_str().unwrap();
    assert_eq!(
        message,
        "chat is unavailable: the call failed (503 Service Unavailable)"
    );
    for body in [&failed, &saved] {
        let text = String::from_utf8_lossy(body.body()).to_lowercase();
        assert!(!text.contains("retry now"), "{text}");
    }
    assert_eq!(model.handle.state(), State::Closed);
    assert_eq!(server.requests(), 3);
}

#[tokio::test]
async fn a_rejection_over_tcp_says_how_long_until_the_probe_from_now() {
    let server = TestServer::start([Reply::RateLimited(7)], Reply::Ok).await;
    let breaker = Builder::new()
        .name("chat")
        .failure_threshold(3)
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new());
    let mut svc = ServiceBuilder::new()
        .layer(breaker)
        .timeout(ATTEMPT_TIMEOUT)
        .layer(BufferBodyLayer::new())
        .service(reqwest::Client::new());
    let request = || reqwest_chat(&server, "q");
    let limited = svc.ready().await.unwrap().call(request()).await.unwrap();
    assert_eq!(limited.get_ref().status(), StatusCode::TOO_MANY_REQUESTS);

    skip(secs(3)).await;
    let error = svc
        .ready()
        .await
        .unwrap()
        .call(request())
        .await
        .unwrap_err();
    let rejected = error.downcast_ref::<Rejected>().expect("a rejection");
    let wait = rejected.retry_after().expect("a wait in time");
    assert!(wait <= secs(4) && wait > secs(3), "{wait:?}");
    // Read later, it is shorter: measured from now, not from the rejection.
    skip(secs(1)).await;
    let later = rejected.retry_after().unwrap();
    assert!(later <= wait - secs(1), "{later:?} after {wait:?}");
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn the_unavailable_answer_to_a_refused_reqwest_call_names_no_secret_from_its_url() {
    let mut server = TestServer::start([], Reply::Ok).await;
    let saved = SavedAnswers::<String, BufferedResponse>::new(10, secs(3600)).unwrap();
    let save = SaveLayer::new(saved, body_of as fn(&reqwest::Request) -> Option<String>);
    let fallback = save.fallback(tcb_http::stale, tcb_http::unavailable);
    let breaker = Builder::new()
        .name("chat")
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new())
        .with_fallback_context(fallback.clone());
    let recover = RecoverLayer::new(breaker.handle(), fallback)
        .keep_requests_with(reqwest::Request::try_clone as fn(&_) -> _);
    let mut svc = ServiceBuilder::new()
        .layer(ProvenanceLayer::new())
        .layer(recover)
        .layer(save)
        .layer(breaker)
        .timeout(ATTEMPT_TIMEOUT)
        .layer(BufferBodyLayer::new())
        .service(reqwest::Client::new());

    server.stop().await;
    let url = format!(
        "http://user:pa55@{}/v1/chat/completions?api-key=s3cret",
        server.addr()
    );
    let mut request = reqwest::Request::new(http::Method::POST, url.parse().unwrap());
    *request.body_mut() = Some(r#"{"messages":[]}"#.into());
    let call = async { svc.ready().await?.call(request).await };
    let answer = tokio::time::timeout(CALL_BOUND, call)
        .await
        .expect("within its bound")
        .expect("the fallback's answer");
    assert_eq!(source(&answer), Source::FallbackAfterFailure);
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    let message = message_of(&answer);
    assert!(
        message.starts_with("chat is unavailable: the call failed ("),
        "{message}"
    );
    assert!(message.contains("[redacted]"), "{message}");
    for secret in ["s3cret", "pa55", "api-key=s"] {
        assert!(!message.contains(secret), "{message}");
        assert!(!String::from_utf8_lossy(answer.body()).contains(secret));
    }
}
