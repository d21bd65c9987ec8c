//! The breaker inside async-openai's tower middleware slot (`Client::with_http_service`)
//! over real TCP on loopback: a fallback answer reaches the caller through that stack
//! and is recognisable as a fallback, both as the slot's `reqwest::Response` (the
//! `x-circuit-breaker` header and the `AnswerInfo` extension) and, through
//! `client.chat().create(..)`, which drops headers and extensions, as a typed error
//! the top layer of the slot makes of it (as in `examples/async_openai.rs`).
#![cfg(feature = "reqwest")]

#[path = "common/server.rs"]
mod server;

use std::convert::Infallible;
use std::time::Duration;

use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::{HttpRequestFactory, ReqwestService};
use async_openai::types::chat::{
    ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequestArgs,
};
use async_openai::Client;
use server::{Reply, TestServer};
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_circuit_breaker::http::{
    fallback_as_error, provenance, FallbackAnswer, HttpClassifier, ProvenanceLayer,
    X_CIRCUIT_BREAKER,
};
use tower_circuit_breaker::{
    CircuitBreakerHandle, CircuitBreakerLayer, Cooldown, Reason, Source, State,
};

const CALL_BOUND: Duration = Duration::from_secs(5);

/// The failing model's only reply: 503, overloaded.
const OVERLOADED: Reply = Reply::Plain(
    503,
    r#"{"error":{"message":"overloaded","type":"server_error"}}"#,
);

/// A server on 127.0.0.1 that answers every request 503 and counts them.
async fn failing_server() -> TestServer {
    TestServer::start([], OVERLOADED).await
}

async fn unavailable(_: HttpRequestFactory) -> Result<reqwest::Response, Infallible> {
    let response = http::Response::builder()
        .status(503)
        .body(r#"{"error":{"message":"the model is unavailable","type":"circuit_breaker_open"}}"#)
        .expect("a valid response");
    Ok(reqwest::Response::from(response))
}

/// The slot's service: provenance, the breaker (opens after one failure), async-openai's
/// reqwest transport.
fn slot() -> (
    impl Service<
            HttpRequestFactory,
            Response = reqwest::Response,
            Error = BoxError,
            Future = impl Send,
        > + Clone
        + Send
        + Sync
        + 'static,
    CircuitBreakerHandle,
) {
    let breaker = CircuitBreakerLayer::builder()
        .name("chat")
        .failure_threshold(1)
        .cooldown(Cooldown::Time(Duration::from_secs(30)))
        .build()
        .expect("a valid configuration");
    let handle = breaker.handle();
    let breaker = breaker
        .with_classifier(HttpClassifier::new())
        .with_fallback(service_fn(unavailable));
    let service = ServiceBuilder::new()
        .layer(ProvenanceLayer::new())
        .layer(breaker)
        .service(ReqwestService::new(reqwest::Client::new()));
    (service, handle)
}

async fn ask(client: &Client<OpenAIConfig>) -> Result<String, OpenAIError> {
    let request = CreateChatCompletionRequestArgs::default()
        .model("local")
        .messages([ChatCompletionRequestUserMessageArgs::default()
            .content("six times seven?")
            .build()
            .expect("a valid message")
            .into()])
        .build()
        .expect("a valid request");
    let chat = client.chat();
    let completion = tokio::time::timeout(CALL_BOUND, chat.create(request))
        .await
        .expect("a call ends within its bound")?;
    Ok(completion.choices[0]
        .message
        .content
        .clone()
        .unwrap_or_default())
}

#[tokio::test]
async fn the_slot_labels_a_fallback_response() {
    let server = failing_server().await;
    let (service, handle) = slot();
    let url = server.url();
    let factory = HttpRequestFactory::new(move || {
        let url = url.clone();
        async move {
            Ok(reqwest::Request::new(
                http::Method::POST,
                url.parse().expect("a URL"),
            ))
        }
    });

    let response = service.clone().oneshot(factory.clone()).await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()[X_CIRCUIT_BREAKER], "service");
    assert_eq!(handle.state(), State::Open);

    let response = service.oneshot(factory).await.unwrap();
    assert_eq!(
        response.headers()[X_CIRCUIT_BREAKER],
        "fallback; reason=open"
    );
    let info = provenance(&response).expect("labelled");
    assert_eq!(info.source, Source::Fallback(Reason::Open));
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn a_fallback_reaches_the_async_openai_caller_as_a_fallback() {
    let server = failing_server().await;
    let (service, handle) = slot();
    let service = ServiceBuilder::new()
        .map_result(fallback_as_error)
        .service(service);
    let config = OpenAIConfig::new()
        .with_api_base(server.api_base())
        .with_api_key("not-a-real-key");
    let client = Client::with_config(config).with_http_service(service);

    // The model's own 503: async-openai's error, status and body.
    match ask(&client).await {
        Err(OpenAIError::ApiError(error)) => assert_eq!(error.status_code, 503),
        other => panic!("expected the model's 503, got {other:?}"),
    }
    assert_eq!(handle.state(), State::Open);

    // The fallback: a typed error with the breaker's provenance; the server is not
    // called.
    for _ in 0..3 {
        let error = ask(&client).await.expect_err("not a completion");
        let OpenAIError::Boxed(error) = error else {
            panic!("expected the fallback, got {error:?}");
        };
        let fallback = error
            .downcast_ref::<FallbackAnswer>()
            .expect("a fallback answer");
        assert_eq!(fallback.info.source, Source::Fallback(Reason::Open));
        assert_eq!(fallback.info.state, State::Open);
    }
    assert_eq!(server.requests(), 1);

    // The kill switch: named as such.
    handle.reset();
    handle.kill_switch().kill();
    let error = ask(&client).await.expect_err("not a completion");
    let OpenAIError::Boxed(error) = error else {
        panic!("expected the fallback, got {error:?}");
    };
    let fallback = error.downcast_ref::<FallbackAnswer>().expect("a fallback");
    assert_eq!(fallback.info.source, Source::Fallback(Reason::Killed));
    assert_eq!(server.requests(), 1);
}
