//! Provider failover over real TCP on loopback: `LlmClient` in front of two or three
//! scripted OpenAI-compatible servers (`tests/common/server.rs`) that answer, fail in
//! bursts, rate-limit with short and long `Retry-After` (or `retry-after-ms`), report an
//! exhausted quota, hang, and take a caller's mistake. Each test checks what the caller
//! got (status, headers, body, provenance, which provider) and what reached each server.
//!
//! Time: real sockets need the real clock; waits are kept short (milliseconds), and
//! cooldowns are crossed with `skip` (tokio's clock paused and advanced while no request
//! is in flight). Every call is bounded by `tokio::time::timeout`.
#![cfg(feature = "llm")]

#[path = "common/server.rs"]
mod server;

use std::time::Duration;

use proptest::prelude::*;
use server::{refused_addr, Reply, TestServer, CHAT_BODY};
use tower::{Service, ServiceExt};
use tower_circuit_breaker::failover::Route;
use tower_circuit_breaker::http::{
    provenance, route_of, BufferedResponse, HttpFailover, X_CIRCUIT_BREAKER,
    X_CIRCUIT_BREAKER_PASSED, X_CIRCUIT_BREAKER_PROVIDER, X_CIRCUIT_BREAKER_SAVED_FROM,
    X_CIRCUIT_BREAKER_STALE,
};
use tower_circuit_breaker::llm::{
    LlmClient, LlmClientBuilder, LlmConfigError, LlmService, NotUnderBaseUrl, Provider,
};
use tower_circuit_breaker::retry::RetryBuilder;
use tower_circuit_breaker::{Builder, Cooldown, Reason, Source, State};

const CALL_BOUND: Duration = Duration::from_secs(10);

/// Lets `wait` pass on tokio's clock, without waiting for it; only with no request in
/// flight.
async fn skip(wait: Duration) {
    tokio::time::pause();
    tokio::time::advance(wait).await;
    tokio::time::resume();
}

/// The test settings: 3 attempts with millisecond backoff, a `Retry-After` up to 200 ms
/// waited, attempts time out after 300 ms, breakers open after 3 failures for 30 s.
fn builder(servers: &[(&str, &TestServer)]) -> LlmClientBuilder {
    let mut builder = LlmClient::builder()
        .breaker(
            Builder::new()
                .failure_threshold(3)
                .cooldown(Cooldown::Time(Duration::from_secs(30))),
        )
        .retry(
            RetryBuilder::new()
                .max_attempts(3)
                .backoff(Duration::from_millis(1), Duration::from_millis(5))
                .max_retry_after_wait(Duration::from_millis(200)),
        )
        .timeout(Duration::from_millis(300));
    for (name, server) in servers {
        builder = builder
            .provider(Provider::new(*name, server.api_base()).model(format!("{name}-model")));
    }
    builder
}

fn client(servers: &[(&str, &TestServer)]) -> LlmClient {
    builder(servers)
        .build(reqwest::Client::new())
        .expect("valid settings")
}

/// Asks `question` of the client, bounded in time.
async fn ask(llm: &LlmClient, question: &str) -> BufferedResponse {
    ask_at(llm, &llm.url("/chat/completions"), question)
        .await
        .expect("the stack answers")
}

/// Sends `question` to `url` through the client, bounded in time: its answer or error.
async fn ask_at(
    llm: &LlmClient,
    url: &str,
    question: &str,
) -> Result<BufferedResponse, tower::BoxError> {
    let request = reqwest::Client::new()
        .post(url)
        .json(&serde_json::json!({
            "model": "any",
            "messages": [{"role": "user", "content": question}],
        }))
        .build()
        .expect("a request");
    let mut service: LlmService = llm.service();
    tokio::time::timeout(CALL_BOUND, async {
        service.ready().await?.call(request).await
    })
    .await
    .expect("the call ends in time")
}

fn header<'a>(answer: &'a BufferedResponse, name: &http::HeaderName) -> Option<&'a str> {
    answer
        .headers()
        .get(name)
        .map(|value| value.to_str().expect("ASCII"))
}

fn provider(answer: &BufferedResponse) -> Option<&str> {
    header(answer, &X_CIRCUIT_BREAKER_PROVIDER)
}

fn passed(answer: &BufferedResponse) -> Option<&str> {
    header(answer, &X_CIRCUIT_BREAKER_PASSED)
}

fn route(answer: &BufferedResponse) -> &Route {
    route_of(answer).expect("a failover answer has its route")
}

#[tokio::test]
async fn the_primary_answers_and_nothing_reaches_the_others() {
    let a = TestServer::start([], Reply::Ok).await;
    let b = TestServer::start([], Reply::Ok).await;
    let llm = client(&[("a", &a), ("b", &b)]);

    let answer = ask(&llm, "q").await;
    assert_eq!(answer.status(), 200);
    assert_eq!(provider(&answer), Some("a"));
    assert_eq!(passed(&answer), None);
    assert_eq!(header(&answer, &X_CIRCUIT_BREAKER), Some("service"));
    assert_eq!(answer.text().unwrap(), CHAT_BODY);
    assert_eq!((a.requests(), b.requests()), (1, 0));
}

#[tokio::test]
async fn a_burst_of_503_is_retried_then_the_second_provider_answers() {
    let a = TestServer::start([], Reply::Unavailable).await;
    let b = TestServer::start([], Reply::Ok).await;
    let llm = client(&[("a", &a), ("b", &b)]);

    let answer = ask(&llm, "q").await;
    assert_eq!(answer.status(), 200);
    assert_eq!(provider(&answer), Some("b"));
    assert_eq!(passed(&answer), Some("a; reason=failed"));
    let why = route(&answer).passed()[0].why().to_string();
    assert_eq!(why, "failed: 503 Service Unavailable");
    // Three attempts at the primary (the retry policy's), one outcome for its breaker.
    assert_eq!((a.requests(), b.requests()), (3, 1));
    let counts = llm.handle("a").unwrap().snapshot().counts;
    assert_eq!((counts.made, counts.failures), (1, 1));
}

#[tokio::test]
async fn a_primary_that_opened_is_passed_with_nothing_sent() {
    let a = TestServer::start([], Reply::Unavailable).await;
    let b = TestServer::start([], Reply::Ok).await;
    let llm = client(&[("a", &a), ("b", &b)]);
    for _ in 0..3 {
        assert_eq!(provider(&ask(&llm, "q").await), Some("b"));
    }
    assert_eq!(llm.handle("a").unwrap().state(), State::Open);
    let sent = a.requests();

    let answer = ask(&llm, "q").await;
    assert_eq!(provider(&answer), Some("b"));
    assert_eq!(passed(&answer), Some("a; reason=open"));
    assert_eq!(
        route(&answer).passed()[0].why().reason(),
        Some(Reason::Open)
    );
    assert_eq!(a.requests(), sent, "nothing reaches an open provider");
    assert_eq!(b.requests(), 4);
}

#[tokio::test]
async fn a_long_retry_after_opens_the_primary_at_once_and_the_second_answers() {
    let a = TestServer::start([Reply::RateLimited(3600)], Reply::Ok).await;
    let b = TestServer::start([], Reply::Ok).await;
    let llm = client(&[("a", &a), ("b", &b)]);

    let answer = ask(&llm, "q").await;
    assert_eq!(provider(&answer), Some("b"));
    let why = route(&answer).passed()[0].why().to_string();
    assert!(
        why.starts_with("failed: 429 Too Many Requests, retry after 3600s"),
        "{why}"
    );
    // Not retried: a long wait is handed back at once, and the breaker opened for it.
    assert_eq!(a.requests(), 1);
    assert_eq!(llm.handle("a").unwrap().state(), State::Open);

    let answer = ask(&llm, "q").await;
    assert_eq!(passed(&answer), Some("a; reason=open"));
    // The breaker waits at most its cap, and says it was asked for longer.
    let why = route(&answer).passed()[0].why().to_string();
    assert!(why.starts_with("open, tried again in "), "{why}");
    assert!(why.ends_with(" (it asked for longer)"), "{why}");
    assert_eq!(a.requests(), 1);
}

#[tokio::test]
async fn a_long_retry_after_ms_is_named_in_the_route_as_retry_after_is() {
    let a = TestServer::start([Reply::RateLimitedMs("90000")], Reply::Ok).await;
    let b = TestServer::start([], Reply::Ok).await;
    let llm = client(&[("a", &a), ("b", &b)]);
    let answer = ask(&llm, "q").await;
    assert_eq!(provider(&answer), Some("b"));
    assert_eq!(
        route(&answer).passed()[0].why().to_string(),
        "failed: 429 Too Many Requests, retry after 90s"
    );
}

#[tokio::test]
async fn a_retry_after_ms_too_large_for_a_float_is_named_as_the_longest_wait() {
    let a = TestServer::start([Reply::RateLimitedMs("1e999")], Reply::Ok).await;
    let b = TestServer::start([], Reply::Ok).await;
    let llm = client(&[("a", &a), ("b", &b)]);
    let answer = ask(&llm, "q").await;
    assert_eq!(provider(&answer), Some("b"));
    let why = route(&answer).passed()[0].why().to_string();
    assert_eq!(
        why,
        format!("failed: 429 Too Many Requests, retry after {}s", u64::MAX)
    );
}

#[tokio::test]
async fn a_short_retry_after_ms_is_waited_and_the_primary_answers() {
    let a = TestServer::start([Reply::RateLimitedMs("50")], Reply::Ok).await;
    let b = TestServer::start([], Reply::Ok).await;
    let llm = client(&[("a", &a), ("b", &b)]);

    let started = std::time::Instant::now();
    let answer = ask(&llm, "q").await;
    assert!(
        started.elapsed() >= Duration::from_millis(50),
        "the wait is respected"
    );
    assert_eq!(provider(&answer), Some("a"));
    assert_eq!((a.requests(), b.requests()), (2, 0));
    assert_eq!(llm.handle("a").unwrap().state(), State::Closed);
}

#[tokio::test]
async fn an_exhausted_quota_is_not_retried_and_holds_the_primary_open_until_reset() {
    let a = TestServer::start([Reply::QuotaExhausted], Reply::Ok).await;
    let b = TestServer::start([], Reply::Ok).await;
    let llm = client(&[("a", &a), ("b", &b)]);

    let answer = ask(&llm, "q").await;
    assert_eq!(provider(&answer), Some("b"));
    assert_eq!(
        route(&answer).passed()[0].why().to_string(),
        "failed: 429 Too Many Requests: insufficient_quota (the quota is exhausted)"
    );
    assert_eq!(a.requests(), 1, "a permanent failure is never retried");
    skip(Duration::from_secs(24 * 3600)).await;
    let answer = ask(&llm, "q").await;
    assert_eq!(provider(&answer), Some("b"));
    assert_eq!(
        route(&answer).passed()[0].why().to_string(),
        "open, until a person acts"
    );
    assert_eq!(a.requests(), 1);

    llm.handle("a").unwrap().reset();
    assert_eq!(provider(&ask(&llm, "q").await), Some("a"));
}

#[tokio::test]
async fn a_hang_times_out_and_moves_on() {
    let a = TestServer::start([], Reply::Hang).await;
    let b = TestServer::start([], Reply::Ok).await;
    let llm = builder(&[("a", &a), ("b", &b)])
        .no_retry()
        .build(reqwest::Client::new())
        .unwrap();

    let answer = ask(&llm, "q").await;
    assert_eq!(provider(&answer), Some("b"));
    assert_eq!(
        route(&answer).passed()[0].why().to_string(),
        "failed: request timed out"
    );
    assert_eq!((a.requests(), b.requests()), (1, 1));
}

#[tokio::test]
async fn a_callers_mistake_is_the_answer_and_is_not_failed_over() {
    let a = TestServer::start([], Reply::BadRequest).await;
    let b = TestServer::start([], Reply::Ok).await;
    let llm = client(&[("a", &a), ("b", &b)]);

    let answer = ask(&llm, "q").await;
    assert_eq!(answer.status(), 400);
    assert_eq!(provider(&answer), Some("a"));
    assert_eq!((a.requests(), b.requests()), (1, 0));
    assert_eq!(llm.handle("a").unwrap().snapshot().counts.failures, 0);
}

#[tokio::test]
async fn a_context_too_long_moves_on_only_when_asked() {
    let a = TestServer::start([], Reply::ContextTooLong).await;
    let b = TestServer::start([], Reply::Ok).await;
    let llm = client(&[("a", &a), ("b", &b)]);
    assert_eq!(ask(&llm, "q").await.status(), 400);
    assert_eq!(b.requests(), 0);

    let llm = builder(&[("a", &a), ("b", &b)])
        .failover(HttpFailover::new().context_too_long(true))
        .build(reqwest::Client::new())
        .unwrap();
    let answer = ask(&llm, "q").await;
    assert_eq!(provider(&answer), Some("b"));
    assert_eq!(
        route(&answer).passed()[0].why().to_string(),
        "failed: 400 Bad Request: context_length_exceeded"
    );
}

#[tokio::test]
async fn three_providers_the_third_answers_when_two_fail() {
    let a = TestServer::start([], Reply::Unavailable).await;
    let b = TestServer::start([], Reply::Hang).await;
    let c = TestServer::start([], Reply::Ok).await;
    let llm = builder(&[("a", &a), ("b", &b), ("c", &c)])
        .no_retry()
        .build(reqwest::Client::new())
        .unwrap();

    let answer = ask(&llm, "q").await;
    assert_eq!(provider(&answer), Some("c"));
    assert_eq!(passed(&answer), Some("a; reason=failed, b; reason=failed"));
    assert_eq!((a.requests(), b.requests(), c.requests()), (1, 1, 1));
}

#[tokio::test]
async fn a_killed_provider_is_passed_then_answers_again_once_revived() {
    let a = TestServer::start([], Reply::Ok).await;
    let b = TestServer::start([], Reply::Ok).await;
    let llm = client(&[("a", &a), ("b", &b)]);

    llm.handle("a").unwrap().kill_switch().kill();
    let answer = ask(&llm, "q").await;
    assert_eq!(provider(&answer), Some("b"));
    assert_eq!(passed(&answer), Some("a; reason=killed"));
    assert_eq!(a.requests(), 0);

    llm.handle("a").unwrap().kill_switch().revive();
    assert_eq!(provider(&ask(&llm, "q").await), Some("a"));
    assert_eq!(a.requests(), 1);
}

#[tokio::test]
async fn with_every_provider_down_the_saved_answer_is_served_with_its_age() {
    let a = TestServer::start([Reply::Ok], Reply::Unavailable).await;
    let b = TestServer::start([], Reply::Unavailable).await;
    let llm = builder(&[("a", &a), ("b", &b)])
        .no_retry()
        .build(reqwest::Client::new())
        .unwrap();
    assert_eq!(provider(&ask(&llm, "q").await), Some("a"));
    skip(Duration::from_secs(5)).await;

    let answer = ask(&llm, "q").await;
    assert_eq!(answer.status(), 200);
    assert_eq!(provider(&answer), None, "no provider answered");
    assert_eq!(passed(&answer), Some("a; reason=failed, b; reason=failed"));
    assert_eq!(
        header(&answer, &X_CIRCUIT_BREAKER),
        Some("fallback; reason=failed")
    );
    assert_eq!(header(&answer, &http::header::AGE), Some("5"));
    assert_eq!(header(&answer, &X_CIRCUIT_BREAKER_STALE), Some("age=5"));
    assert_eq!(
        header(&answer, &X_CIRCUIT_BREAKER_SAVED_FROM),
        Some("a"),
        "the provider that gave the saved answer"
    );
    let body: serde_json::Value = serde_json::from_slice(answer.body()).unwrap();
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "[STALE DATA — saved 5s ago, may not reflect current state]\n42"
    );
    assert_eq!(
        provenance(&answer).unwrap().source,
        Source::FallbackAfterFailure
    );
}

#[tokio::test]
async fn with_every_provider_open_the_caller_gets_503_with_the_earliest_retry_after() {
    let a = TestServer::start([Reply::RateLimited(30)], Reply::Ok).await;
    let b = TestServer::start([Reply::RateLimited(10)], Reply::Ok).await;
    let llm = builder(&[("a", &a), ("b", &b)])
        .retry(RetryBuilder::new().max_retry_after_wait(Duration::from_millis(1)))
        .no_saved_answers()
        .build(reqwest::Client::new())
        .unwrap();
    assert_eq!(ask(&llm, "first").await.status(), 503);

    let answer = ask(&llm, "second").await;
    assert_eq!(answer.status(), 503);
    assert_eq!(passed(&answer), Some("a; reason=open, b; reason=open"));
    let retry_after: u64 = header(&answer, &http::header::RETRY_AFTER)
        .unwrap()
        .parse()
        .unwrap();
    assert!((9..=10).contains(&retry_after), "{retry_after}");
    let body: serde_json::Value = serde_json::from_slice(answer.body()).unwrap();
    assert_eq!(body["error"]["code"], "circuit_open");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("no provider answered; passed a (open, tried again in"),
        "{message}"
    );
    assert_eq!(
        (a.requests(), b.requests()),
        (1, 1),
        "nothing reaches an open provider"
    );
}

#[tokio::test]
async fn a_503_after_a_provider_failed_with_its_breaker_still_closed_says_call_failed_and_no_wait()
{
    // The first provider fails and stays closed; the second asks for 100 s and opens.
    let a = TestServer::start([Reply::Unavailable], Reply::Ok).await;
    let b = TestServer::start([], Reply::RateLimited(100)).await;
    let llm = builder(&[("a", &a), ("b", &b)])
        .no_retry()
        .no_saved_answers()
        .build(reqwest::Client::new())
        .unwrap();
    let answer = ask(&llm, "first").await;
    assert_eq!(answer.status(), 503);
    assert_eq!(llm.handle("a").unwrap().state(), State::Closed);
    assert_eq!(llm.handle("b").unwrap().state(), State::Open);
    // The first provider takes calls now: no wait is told, least of all the second's.
    assert_eq!(header(&answer, &http::header::RETRY_AFTER), None);
    let body: serde_json::Value = serde_json::from_slice(answer.body()).unwrap();
    assert_eq!(
        body["error"]["code"], "call_failed",
        "calls were made and failed"
    );
    // And indeed the next call is answered, by the first.
    let answer = ask(&llm, "second").await;
    assert_eq!(
        (answer.status().as_u16(), provider(&answer)),
        (200, Some("a"))
    );
}

#[tokio::test]
async fn a_503_after_failures_tells_the_soonest_providers_time() {
    // The first provider is open for 10 s; the second fails and opens for 100 s.
    let a = TestServer::start([Reply::RateLimited(10)], Reply::Ok).await;
    let b = TestServer::start([Reply::Ok], Reply::RateLimited(100)).await;
    let llm = builder(&[("a", &a), ("b", &b)])
        .no_retry()
        .no_saved_answers()
        .build(reqwest::Client::new())
        .unwrap();
    assert_eq!(provider(&ask(&llm, "opens a").await), Some("b"));
    let answer = ask(&llm, "both out").await;
    assert_eq!(answer.status(), 503);
    assert_eq!(passed(&answer), Some("a; reason=open, b; reason=failed"));
    let retry_after: u64 = header(&answer, &http::header::RETRY_AFTER)
        .expect("every provider waits a known time")
        .parse()
        .unwrap();
    assert!(
        (9..=10).contains(&retry_after),
        "the first's 10 s, not 100: {retry_after}"
    );
    let body: serde_json::Value = serde_json::from_slice(answer.body()).unwrap();
    assert_eq!(body["error"]["code"], "call_failed");
}

/// Provider `a` refuses its key (401 `invalid_api_key`), `b` answers; the client moves on
/// after an auth error if `auth_errors`.
async fn a_revoked_key_then_a_good_one(auth_errors: bool) -> (TestServer, TestServer, LlmClient) {
    let a = TestServer::start(
        [],
        Reply::Json(401, r#"{"error":{"code":"invalid_api_key"}}"#),
    )
    .await;
    let b = TestServer::start([], Reply::Ok).await;
    let llm = builder(&[("a", &a), ("b", &b)])
        .failover(HttpFailover::new().auth_errors(auth_errors))
        .build(reqwest::Client::new())
        .unwrap();
    (a, b, llm)
}

#[tokio::test]
async fn a_revoked_key_moves_on_only_when_auth_errors_are_asked_to() {
    for moves_on in [false, true] {
        let (a, b, llm) = a_revoked_key_then_a_good_one(moves_on).await;
        let answer = ask(&llm, "q").await;
        if moves_on {
            assert_eq!(
                (answer.status().as_u16(), provider(&answer)),
                (200, Some("b"))
            );
            assert_eq!(passed(&answer), Some("a; reason=failed"));
            assert_eq!(
                route(&answer).passed()[0].why().to_string(),
                "failed: 401 Unauthorized"
            );
        } else {
            assert_eq!(
                (answer.status().as_u16(), provider(&answer)),
                (401, Some("a"))
            );
            assert_eq!(b.requests(), 0);
        }
        assert_eq!(a.requests(), 1, "a 401 is never retried");
    }
}

#[tokio::test]
async fn a_revoked_key_opens_its_providers_breaker_when_auth_errors_move_on() {
    let (a, _b, llm) = a_revoked_key_then_a_good_one(true).await;
    // The breakers open after 3 failures in a row: each 401 is one.
    for _ in 0..3 {
        let answer = ask(&llm, "q").await;
        assert_eq!(provider(&answer), Some("b"));
        assert_eq!(passed(&answer), Some("a; reason=failed"));
    }
    assert_eq!(a.requests(), 3, "a 401 is never retried");
    assert_eq!(llm.handle("a").unwrap().state(), State::Open);
    let answer = ask(&llm, "q").await;
    assert_eq!(provider(&answer), Some("b"));
    assert_eq!(passed(&answer), Some("a; reason=open"));
    assert_eq!(
        a.requests(),
        3,
        "nothing is sent to a revoked key while open"
    );
}

#[tokio::test]
async fn a_saved_answer_never_answers_the_same_body_sent_with_another_query() {
    let a = TestServer::start([Reply::Ok], Reply::Unavailable).await;
    let llm = builder(&[("a", &a)])
        .no_retry()
        .build(reqwest::Client::new())
        .unwrap();
    let chat = llm.url("/chat/completions");
    let alice = ask_at(&llm, &format!("{chat}?tenant=alice"), "q")
        .await
        .unwrap();
    assert_eq!(alice.status(), 200);
    // The provider fails now: alice's question has its saved answer, bob's has none.
    let bob = ask_at(&llm, &format!("{chat}?tenant=bob"), "q")
        .await
        .unwrap();
    assert_eq!(bob.status(), 503, "never another query's saved answer");
    let again = ask_at(&llm, &format!("{chat}?tenant=alice"), "q")
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(header(&again, &X_CIRCUIT_BREAKER_STALE), Some("age=0"));
}

#[tokio::test]
async fn a_saved_answer_never_answers_a_body_that_differs_only_in_bytes_that_are_not_utf8() {
    let a = TestServer::start([Reply::Ok], Reply::Unavailable).await;
    let llm = builder(&[("a", &a)])
        .no_retry()
        .build(reqwest::Client::new())
        .unwrap();
    // Latin-1 text, as some clients send it: "café" and "cafè".
    let body = |last: u8| {
        let mut body = br#"{"model":"any","messages":[{"role":"user","content":"caf"#.to_vec();
        body.extend_from_slice(&[last, b'"', b'}', b']', b'}']);
        body
    };
    let send = |body: Vec<u8>| {
        let request = reqwest::Client::new()
            .post(llm.url("/chat/completions"))
            .header("content-type", "application/json")
            .body(body)
            .build()
            .expect("a request");
        let mut service: LlmService = llm.service();
        async move {
            tokio::time::timeout(CALL_BOUND, async {
                service.ready().await?.call(request).await
            })
            .await
            .expect("the call ends in time")
            .unwrap()
        }
    };
    assert_eq!(send(body(0xE9)).await.status(), 200);
    // The provider fails now: the first body has its saved answer, the second none.
    let other = send(body(0xE8)).await;
    assert_eq!(other.status(), 503, "never another body's saved answer");
    let again = send(body(0xE9)).await;
    assert_eq!(again.status(), 200);
    assert_eq!(header(&again, &X_CIRCUIT_BREAKER_STALE), Some("age=0"));
}

#[tokio::test]
async fn a_saved_answer_answers_the_same_question_to_the_same_endpoint_only() {
    let a = TestServer::start([Reply::Ok], Reply::Unavailable).await;
    let b = TestServer::start([], Reply::Unavailable).await;
    let llm = builder(&[("a", &a), ("b", &b)])
        .no_retry()
        .build(reqwest::Client::new())
        .unwrap();
    assert_eq!(provider(&ask(&llm, "q").await), Some("a"));
    // Every provider fails now. The same body to another endpoint is another question.
    let embeddings = ask_at(&llm, &llm.url("/embeddings"), "q").await.unwrap();
    assert_eq!(
        embeddings.status(),
        503,
        "never a chat completion's saved answer"
    );
    let chat = ask(&llm, "q").await;
    assert_eq!(chat.status(), 200);
    assert_eq!(header(&chat, &X_CIRCUIT_BREAKER_STALE), Some("age=0"));
    // Counted as a saved answer's fallback counts them.
    let saved = llm.saved().expect("saved answers on");
    assert_eq!((saved.served(), saved.unavailable()), (1, 1));
}

#[tokio::test]
async fn a_request_not_under_the_first_providers_base_url_is_refused_and_reaches_nobody() {
    let a = TestServer::start([], Reply::Ok).await;
    let b = TestServer::start([], Reply::Ok).await;
    let llm = client(&[("a", &a), ("b", &b)]);
    assert_eq!(provider(&ask(&llm, "saved").await), Some("a"));
    let sibling = format!("http://{}/v1beta/chat/completions?key=SECRET", a.addr());
    let elsewhere = "http://example.invalid/v1/chat/completions".to_string();
    let backups = format!("{}/chat/completions", b.api_base());
    for url in [sibling, elsewhere, backups] {
        let error = ask_at(&llm, &url, "saved").await.unwrap_err();
        let refused = error
            .downcast_ref::<NotUnderBaseUrl>()
            .unwrap_or_else(|| panic!("{url}: {error}"));
        assert_eq!(refused.base(), a.api_base());
        assert!(!error.to_string().contains("SECRET"), "{error}");
    }
    assert_eq!(
        (a.requests(), b.requests()),
        (1, 0),
        "nothing more was sent"
    );
    for handle in llm.handles() {
        assert_eq!(
            handle.snapshot().counts.arrived,
            u64::from(handle.name() == "a")
        );
    }
}

#[tokio::test]
async fn a_failure_message_names_its_cause_and_never_the_url_query_or_credentials() {
    // Nothing listens here: the client's error names the URL, key and all.
    let dead = refused_addr();
    let b = TestServer::start([], Reply::Ok).await;
    let llm = LlmClient::builder()
        .provider(Provider::new("a", format!("http://{dead}/v1")))
        .provider(Provider::new("b", b.api_base()))
        .no_retry()
        .build(reqwest::Client::new())
        .unwrap();
    let request = reqwest::Client::new()
        .post(format!("{}?key=SECRET", llm.url("/chat/completions")))
        .body("{}")
        .build()
        .unwrap();
    let answer = llm.service().oneshot(request).await.unwrap();
    assert_eq!(provider(&answer), Some("b"));
    let why = route(&answer).passed()[0].why().to_string();
    assert!(why.starts_with("failed: "), "{why}");
    assert!(!why.contains("SECRET"), "{why}");
    // The cause is named, not only the request that failed.
    assert!(why.to_lowercase().contains("connection refused"), "{why}");
    let snapshot = llm.handle("a").unwrap().snapshot();
    let _ = snapshot; // the snapshot's own redaction is the admin service's (see tests/admin.rs)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Under random outcomes, each user call reaches each provider at most as often as
    /// the retry policy allows, nothing reaches a provider passed as open or killed,
    /// and the answer's provider is the one whose server was reached last.
    #[test]
    fn every_answers_route_matches_what_reached_each_server(
        script_a in proptest::collection::vec(0u8..4, 8),
        script_b in proptest::collection::vec(0u8..4, 8),
        kills in proptest::collection::vec(any::<bool>(), 4),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let reply = |code: u8| match code {
                0 => Reply::Ok,
                1 => Reply::Unavailable,
                2 => Reply::RateLimited(3600),
                _ => Reply::BadRequest,
            };
            let a = TestServer::start(script_a.iter().map(|&c| reply(c)), Reply::Ok).await;
            let b = TestServer::start(script_b.iter().map(|&c| reply(c)), Reply::Ok).await;
            let llm = builder(&[("a", &a), ("b", &b)]).build(reqwest::Client::new()).unwrap();
            for (i, kill) in kills.iter().enumerate() {
                let switch = llm.handle("a").unwrap().kill_switch();
                if *kill { switch.kill() } else { switch.revive() }
                let before = (a.requests(), b.requests());
                let answer = ask(&llm, &format!("q{i}")).await;
                let sent = (a.requests() - before.0, b.requests() - before.1);
                assert!(sent.0 <= 3 && sent.1 <= 3, "at most the policy's attempts: {sent:?}");
                let passed_a = route(&answer).passed().iter().find(|p| p.provider() == "a");
                if let Some(reason) = passed_a.and_then(|p| p.why().reason()) {
                    assert_eq!(sent.0, 0, "skipped ({reason:?}) but reached");
                }
                if *kill {
                    assert_eq!(sent.0, 0, "killed but reached");
                }
                match provider(&answer) {
                    Some("a") => assert_eq!(sent.1, 0, "b reached though a answered"),
                    Some("b") => assert!(sent.1 >= 1),
                    Some(other) => panic!("unknown provider {other}"),
                    None => assert!(answer.status() == 503 || header(&answer, &http::header::AGE).is_some()),
                }
            }
        });
    }
}

#[tokio::test]
async fn a_kill_during_a_providers_retry_wait_stops_the_retry_and_the_next_provider_answers() {
    // The primary asks for 100 ms (waited exactly, then retried); the operator kills it
    // 30 ms into the wait, after the retry was decided.
    let a = TestServer::start([], Reply::RateLimitedMs("100")).await;
    let b = TestServer::start([], Reply::Ok).await;
    let llm = client(&[("a", &a), ("b", &b)]);
    let handle = llm.handle("a").unwrap().clone();
    let (answer, ()) = tokio::join!(ask(&llm, "q"), async {
        while a.requests() == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        handle.kill_switch().kill();
    });
    assert_eq!(provider(&answer), Some("b"));
    assert_eq!(
        a.requests(),
        1,
        "no retry reaches a provider killed during the wait"
    );
    assert_eq!(b.requests(), 1);
}

#[tokio::test]
async fn a_request_whose_body_cannot_be_copied_reaches_no_provider_and_its_503_says_not_prepared() {
    let a = TestServer::start([], Reply::Ok).await;
    let b = TestServer::start([], Reply::Ok).await;
    let llm = client(&[("a", &a), ("b", &b)]);
    // A streamed body: read once, so it can be made for no provider.
    let url = llm.url("/chat/completions").parse().unwrap();
    let mut request = reqwest::Request::new(reqwest::Method::POST, url);
    let body = http_body_util::Full::new(bytes::Bytes::from_static(b"{}"));
    *request.body_mut() = Some(reqwest::Body::wrap(body));
    let answer = tokio::time::timeout(CALL_BOUND, llm.service().oneshot(request))
        .await
        .expect("the call ends in time")
        .expect("an answer");

    assert_eq!(answer.status(), 503);
    assert_eq!(
        header(&answer, &X_CIRCUIT_BREAKER),
        Some("fallback; reason=not_prepared"),
        "no breaker skipped it and no call failed"
    );
    assert_eq!(
        provenance(&answer).unwrap().source,
        Source::FallbackNotPrepared
    );
    assert_eq!(
        passed(&answer),
        Some("a; reason=not_prepared, b; reason=not_prepared")
    );
    assert_eq!(header(&answer, &http::header::RETRY_AFTER), None);
    let body: serde_json::Value = serde_json::from_slice(answer.body()).unwrap();
    assert_eq!(body["error"]["code"], "not_prepared");
    assert_eq!((a.requests(), b.requests()), (0, 0));
    for handle in llm.handles() {
        let snapshot = handle.snapshot();
        assert_eq!(
            (snapshot.state, snapshot.counts.arrived),
            (State::Closed, 0)
        );
    }
}

#[test]
fn a_base_url_with_a_fragment_is_refused_when_the_client_is_built_without_showing_it() {
    for base in [
        "http://127.0.0.1:9/v1#x",
        "http://127.0.0.1:9/v1#token=SECRET",
        "http://127.0.0.1:9/v1/#",
    ] {
        let error = LlmClient::builder()
            .provider(Provider::new("a", base))
            .build(reqwest::Client::new())
            .unwrap_err();
        assert!(
            matches!(error, LlmConfigError::InvalidProvider { ref provider, .. } if provider == "a"),
            "{base}: {error:?}"
        );
        let text = error.to_string();
        assert!(text.contains("fragment"), "{text}");
        assert!(!text.contains("SECRET"), "{text}");
    }
}

#[tokio::test]
async fn a_429_whose_body_stalls_past_the_timeout_opens_the_primary_for_its_retry_after_and_is_not_retried(
) {
    // The head asks for a minute; the body stops halfway, and the attempt's 300 ms run out
    // while it is read.
    let a = TestServer::start([Reply::RateLimitedStalling(60)], Reply::Ok).await;
    let b = TestServer::start([], Reply::Ok).await;
    let llm = client(&[("a", &a), ("b", &b)]);

    let answer = ask(&llm, "q").await;
    assert_eq!(provider(&answer), Some("b"));
    let why = route(&answer).passed()[0].why().to_string();
    assert_eq!(
        why,
        "failed: 429 Too Many Requests response body broke off: request timed out"
    );
    assert_eq!(
        a.requests(),
        1,
        "asked to wait a minute, it was not asked again"
    );
    let handle = llm.handle("a").unwrap();
    assert_eq!(handle.state(), State::Open);
    assert!(
        handle.snapshot().retry_after() > Some(Duration::from_secs(55)),
        "open for the minute it asked"
    );
}

#[tokio::test]
async fn the_callers_key_for_the_primary_never_reaches_a_provider_elsewhere() {
    let a = TestServer::start([], Reply::Unavailable).await;
    let b = TestServer::start([], Reply::Ok).await;
    // b has no key of its own: it must not get the one the caller wrote for a.
    let llm = builder(&[("a", &a), ("b", &b)])
        .no_retry()
        .build(reqwest::Client::new())
        .expect("valid settings");
    let request = reqwest::Client::new()
        .post(llm.url("/chat/completions"))
        .bearer_auth("sk-CALLER-KEY-FOR-A")
        .header("x-api-key", "CALLER-X-API-KEY")
        .header("x-request-id", "42")
        .json(&serde_json::json!({"model": "any", "messages": []}))
        .build()
        .expect("a request");
    let mut service: LlmService = llm.service();
    let answer = tokio::time::timeout(CALL_BOUND, async {
        service.ready().await?.call(request).await
    })
    .await
    .expect("the call ends in time")
    .expect("b answers");
    assert_eq!(provider(&answer), Some("b"));

    let to_a = &a.headers_seen()[0];
    assert_eq!(to_a["authorization"], "Bearer sk-CALLER-KEY-FOR-A");
    let to_b = &b.headers_seen()[0];
    assert_eq!(to_b.get("authorization"), None, "{to_b:?}");
    assert_eq!(to_b.get("x-api-key"), None, "{to_b:?}");
    assert_eq!(to_b["x-request-id"], "42");
}

#[test]
fn settings_that_would_fail_every_answer_are_refused_when_the_client_is_built() {
    let one = || LlmClient::builder().provider(Provider::new("a", "http://127.0.0.1:9/v1"));
    let error = one()
        .max_answer_bytes(0)
        .build(reqwest::Client::new())
        .unwrap_err();
    assert!(
        matches!(error, LlmConfigError::ZeroMaxAnswerBytes),
        "{error:?}"
    );
    let error = LlmClient::builder()
        .provider(Provider::new("", "http://127.0.0.1:9/v1"))
        .build(reqwest::Client::new())
        .unwrap_err();
    assert!(
        matches!(error, LlmConfigError::InvalidProvider { ref what, .. } if what.contains("name is empty")),
        "{error:?}"
    );
    assert!(one()
        .max_answer_bytes(1)
        .build(reqwest::Client::new())
        .is_ok());
}

#[tokio::test]
async fn a_saved_answer_never_says_retry_now_while_its_provider_is_open() {
    // Saved from a 200 that said `Retry-After: 0`; then the provider rate-limits for 30 s.
    let a = TestServer::start([Reply::OkWith("retry-after", "0")], Reply::RateLimited(30)).await;
    let llm = client(&[("a", &a)]);
    assert_eq!(ask(&llm, "q").await.status(), 200);
    let _ = ask(&llm, "q").await; // the 429 opens a's breaker for 30 s
    let answer = ask(&llm, "q").await;
    assert_eq!(header(&answer, &X_CIRCUIT_BREAKER_STALE), Some("age=0"));
    let wait: u64 = header(&answer, &http::header::RETRY_AFTER)
        .expect("the breaker's wait")
        .parse()
        .unwrap();
    assert!((29..=30).contains(&wait), "retry-after {wait}");
    assert_eq!(a.requests(), 2);
}

/// A client that follows no redirect, as `LlmClientBuilder::build` asks for.
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client")
}

#[tokio::test]
async fn a_providers_redirect_to_another_server_reaches_it_only_with_a_client_that_follows() {
    let b = TestServer::start([], Reply::Ok).await;
    let to_b: &'static str = Box::leak(b.url().into_boxed_str());
    let a = TestServer::start([], Reply::Redirect(to_b)).await;

    // As asked: the redirect is a's answer, and nothing reaches b, killed.
    let llm = builder(&[("a", &a), ("b", &b)])
        .no_retry()
        .build(no_redirects())
        .expect("valid settings");
    llm.handle("b").unwrap().kill_switch().kill();
    let answer = ask(&llm, "q").await;
    assert_eq!(
        (answer.status().as_u16(), provider(&answer)),
        (307, Some("a"))
    );
    assert_eq!(b.requests(), 0);

    // A client that follows it: the answer from b's origin is not a's. a failed, and the
    // route says so; b, alive, is tried as itself.
    let llm = builder(&[("a", &a), ("b", &b)])
        .no_retry()
        .build(reqwest::Client::new())
        .expect("valid settings");
    let answer = ask(&llm, "q").await;
    assert_eq!(
        (answer.status().as_u16(), provider(&answer)),
        (200, Some("b"))
    );
    let why = route(&answer).to_string();
    assert!(why.contains("answered from another origin"), "{why}");
    let snapshot = llm.handle("a").unwrap().snapshot();
    assert_eq!(snapshot.counts.failures, 1, "{snapshot:?}");
}
