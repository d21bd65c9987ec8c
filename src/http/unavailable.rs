//! The honest "unavailable" HTTP answer: see [`unavailable`].

use std::time::Duration;

use ::http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use ::http::{Response, StatusCode};
use bytes::Bytes;

use super::buffer::BufferedResponse;
use super::json_text::escape_json_into;
use super::retry_after::retry_after_value;
use crate::saved::Unavailable;

/// The `code` of [`unavailable`]'s error body for a call the breaker skipped (open, a
/// probe under way, killed, forced open): `circuit_open`.
pub const CIRCUIT_OPEN: &str = "circuit_open";

/// The `code` of [`unavailable`]'s error body for a call that was made and failed
/// (answered through a [`RecoverLayer`](crate::recover::RecoverLayer)): `call_failed`.
pub const CALL_FAILED: &str = "call_failed";

/// The `code` of the unavailable answer an `llm::LlmClient` (feature `llm`) gives a
/// request it could make for no provider (a body it cannot copy, such as a stream):
/// `not_prepared`. Nothing was sent and no breaker opened: the request itself must
/// change (a body of bytes), and asking again as it is gets the same answer.
pub const NOT_PREPARED: &str = "not_prepared";

/// The ready-made `unavailable` function of a
/// [`SavedFallback`](crate::saved::SavedFallback) for [`BufferedResponse`]s (convert it
/// into an `http::Response<Bytes>` or a `reqwest::Response` for other stacks): the
/// honest answer to a call that got none, never made-up content.
///
/// - `503 Service Unavailable`, `content-type: application/json`;
/// - `Retry-After` in whole seconds, rounded up, when the breaker knows the wait
///   ([`Unavailable::retry_after`]); none when it does not (a cooldown counted in calls,
///   a probe under way, the kill switch, a failure only a person ends) or when the call
///   failed with the breaker still closed (it sets no wait then, and never says "retry
///   now" after a failure);
/// - an error body in OpenAI's shape, so OpenAI clients read it as an API error:
///   `{"error":{"message":"...","type":"service_unavailable","param":null,"code":"circuit_open"}}`,
///   the message [`Unavailable`]'s sentence (`chat is unavailable (its circuit breaker
///   is open); retry after 18s`) with what looks like a credential taken out
///   ([`redact`](crate::redact)), the
///   code [`CIRCUIT_OPEN`] for a skipped call or [`CALL_FAILED`] for a failed one.
///
/// [`ProvenanceLayer`](super::ProvenanceLayer) adds where it came from
/// (`x-circuit-breaker: fallback; reason=open`).
///
/// ```
/// use std::time::Duration;
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_circuit_breaker::http::{self, BufferedResponse, HttpClassifier, ProvenanceLayer};
/// use tower_circuit_breaker::saved::{SaveLayer, SavedAnswers};
/// use tower_circuit_breaker::CircuitBreakerLayer;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let store = SavedAnswers::<String, BufferedResponse>::new(100, Duration::from_secs(3600))?;
/// let save = SaveLayer::new(store, |prompt: &String| Some(prompt.clone()));
/// let breaker = CircuitBreakerLayer::builder().name("chat").build()?;
/// breaker.handle().open_for(Duration::from_millis(17_500));
/// let breaker = breaker
///     .with_classifier(HttpClassifier::new())
///     .with_fallback_context(save.fallback(http::stale, http::unavailable));
/// let mut chat = ServiceBuilder::new()
///     .layer(ProvenanceLayer::new())
///     .layer(save)
///     .layer(breaker)
///     .service(service_fn(|_: String| async {
///         Ok::<_, tower::BoxError>(BufferedResponse::from(::http::Response::new(bytes::Bytes::new())))
///     }));
///
/// let response = chat.ready().await?.call("hi".to_string()).await?;
/// assert_eq!(response.status(), 503);
/// assert_eq!(response.headers()["retry-after"], "18");
/// let json: serde_json::Value = serde_json::from_slice(response.body())?;
/// assert_eq!(json["error"]["code"], "circuit_open");
/// assert_eq!(json["error"]["message"], "chat is unavailable (it was forced open); retry after 18s");
/// # Ok(()) }
/// ```
pub fn unavailable(unavailable: Unavailable) -> BufferedResponse {
    let code = if unavailable.is_failed_call() {
        CALL_FAILED
    } else {
        CIRCUIT_OPEN
    };
    service_unavailable(&unavailable.to_string(), code, unavailable.retry_after())
}

/// A 503 in OpenAI's error shape: `message` redacted, `code`, and `Retry-After` (rounded
/// up) when `retry_after` is known. Every honest "unavailable" answer the crate makes is
/// this one.
pub(crate) fn service_unavailable(
    message: &str,
    code: &str,
    retry_after: Option<Duration>,
) -> BufferedResponse {
    let mut builder = Response::builder()
        .status(StatusCode::SERVICE_UNAVAILABLE)
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(wait) = retry_after {
        builder = builder.header(RETRY_AFTER, retry_after_value(wait));
    }
    let body = builder
        .body(Bytes::from(error_body(message, code)))
        .expect("a valid response");
    BufferedResponse::from(body)
}

/// The error body, in OpenAI's shape, built with every string escaped.
fn error_body(message: &str, code: &str) -> String {
    let mut body = String::with_capacity(message.len() + 96);
    body.push_str(r#"{"error":{"message":""#);
    escape_json_into(&crate::redact(message), &mut body);
    body.push_str(r#"","type":"service_unavailable","param":null,"code":""#);
    body.push_str(code);
    body.push_str(r#""}}"#);
    body
}
