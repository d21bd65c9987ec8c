//! HTTP model and tool clients: what counts as a failure, quota errors told apart from
//! rate limits, and provenance on the response itself (cargo feature `http`).
//!
//! The pieces, stacked around an HTTP client (any `tower::Service` from
//! `http::Request` to `http::Response<B>`, or a `reqwest::Client` with the `reqwest`
//! feature):
//!
//! - [`HttpClassifier`], the breaker's classifier: 5xx, 429, 408 and transport errors
//!   are failures, other 4xx are not (the caller's fault, not the service's), a
//!   `Retry-After` on a 429 or 503 opens the breaker at once for that long, and an
//!   `insufficient_quota` error keeps the breaker open until reset;
//! - [`ErrorBodyLayer`], inside the breaker: reads the start of error bodies into an
//!   [`ErrorBodyBytes`] extension so the classifier can see the error code, and hands
//!   the caller the whole body still;
//! - [`BufferBodyLayer`], inside the breaker, for saved answers: reads each response
//!   whole into a [`BufferedResponse`], which is `Clone` (a saved answer is served
//!   again) and whose error body the classifier reads itself;
//! - [`ProvenanceLayer`], outside the breaker: turns the breaker's
//!   [`Answer`](crate::Answer) back into a plain `http::Response` labelled with an
//!   [`X_CIRCUIT_BREAKER`] header and an [`AnswerInfo`] extension, for stacks whose
//!   response type is fixed; a fallback's answer also gets `Retry-After` when the
//!   breaker knows when it will next let a call through;
//! - honest answers for a [`SavedFallback`](crate::saved::SavedFallback), ready-made:
//!   [`stale`] serves a saved answer with `Age`, the [`X_CIRCUIT_BREAKER_STALE`] marker
//!   and, in an OpenAI chat completion, the stale label in each message's content
//!   ([`label_chat_completion`], the JSON kept valid); [`unavailable`] answers a call
//!   nothing was saved for with a 503, `Retry-After` when the wait is known
//!   ([`retry_after_value`]) and an OpenAI-style error body
//!   (`save.fallback(http::stale, http::unavailable)`).
//!
//! The order, outside in: provenance, (a [`SaveLayer`](crate::saved::SaveLayer) for saved
//! answers,) breaker, (timeout, so that a hang counts as a failure,) error body or
//! buffer, client.
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use bytes::Bytes;
//! use http::{Request, Response, StatusCode};
//! use http_body_util::{BodyExt, Full};
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_circuit_breaker::http::{
//!     provenance, ErrorBodyLayer, HttpClassifier, ProvenanceLayer, ResponseBody,
//!     X_CIRCUIT_BREAKER,
//! };
//! use tower_circuit_breaker::{CircuitBreakerLayer, NextProbe, Reason, Source, State};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tower::BoxError> {
//! // A chat-completions endpoint that is rate-limited for the next 20 seconds.
//! let endpoint = service_fn(|_: Request<String>| async {
//!     let body = r#"{"error":{"type":"requests","code":"rate_limit_exceeded"}}"#;
//!     Ok::<_, std::io::Error>(
//!         Response::builder()
//!             .status(StatusCode::TOO_MANY_REQUESTS)
//!             .header("retry-after", "20")
//!             .body(Full::new(Bytes::from_static(body.as_bytes())))
//!             .unwrap(),
//!     )
//! });
//!
//! let breaker = CircuitBreakerLayer::builder()
//!     .name("chat")
//!     .failure_threshold(1)
//!     .build()?;
//! let handle = breaker.handle();
//! let breaker = breaker
//!     .with_classifier(HttpClassifier::new().max_retry_after(Duration::from_secs(60)))
//!     .with_fallback(service_fn(|_: Request<String>| async {
//!         Ok::<_, Infallible>(
//!             Response::builder()
//!                 .status(StatusCode::SERVICE_UNAVAILABLE)
//!                 .body(ResponseBody::full("the model is unavailable; try again later"))
//!                 .unwrap(),
//!         )
//!     }));
//!
//! let mut chat = ServiceBuilder::new()
//!     .layer(ProvenanceLayer::new())
//!     .layer(breaker)
//!     .timeout(Duration::from_secs(30))
//!     .layer(ErrorBodyLayer::new())
//!     .service(endpoint);
//!
//! // The 429 reaches the caller, body and all, and opens the breaker for 20 s.
//! let response = chat.ready().await?.call(Request::new("hi".into())).await?;
//! assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(response.headers()[X_CIRCUIT_BREAKER], "service");
//! let body = response.into_body().collect().await?.to_bytes();
//! assert!(body.starts_with(br#"{"error""#));
//! assert_eq!(handle.state(), State::Open);
//! assert!(handle.snapshot().retry_after() > Some(Duration::from_secs(19)));
//!
//! // Meanwhile the fallback answers, and says so.
//! let response = chat.ready().await?.call(Request::new("hi".into())).await?;
//! assert_eq!(response.headers()[X_CIRCUIT_BREAKER], "fallback; reason=open");
//! let info = provenance(&response).expect("labelled by ProvenanceLayer");
//! assert_eq!(info.source, Source::Fallback(Reason::Open));
//! assert!(matches!(info.next_probe, NextProbe::After { at: Some(_), .. }));
//! # Ok(()) }
//! ```

mod body_broke_off;
mod body_too_large;
pub(crate) mod bounded_read;
pub(crate) mod buffer;
mod chat_label;
mod classify;
pub(crate) mod error_body;
mod error_body_bytes;
mod failover;
pub(crate) mod json_text;
mod kept_head;
mod provenance;
#[cfg(feature = "reqwest")]
mod reqwest;
mod retry_after;
mod stale;
mod stream;
pub(crate) mod unavailable;

pub use self::body_broke_off::BodyBrokeOff;
pub use self::body_too_large::BodyTooLarge;
pub use self::bounded_read::MAX_EMPTY_FRAMES;
pub use self::buffer::{
    BufferBody, BufferBodyFuture, BufferBodyLayer, Bufferable, BufferedResponse,
    DEFAULT_BUFFER_LIMIT,
};
pub use self::chat_label::{label_chat_completion, NotLabelled};
pub use self::classify::HttpClassifier;
pub use self::error_body::{
    ErrorBody, ErrorBodyFuture, ErrorBodyLayer, ReadAhead, ResponseBody, DEFAULT_ERROR_BODY_LIMIT,
};
pub use self::error_body_bytes::ErrorBodyBytes;
pub use self::failover::{
    route_headers, route_of, HttpFailover, RouteHeaders, RouteHeadersLayer,
    X_CIRCUIT_BREAKER_PASSED, X_CIRCUIT_BREAKER_PROVIDER,
};
pub use self::provenance::{
    fallback_as_error, header_value, provenance, source_from_header, AnswerInfo, FallbackAnswer,
    Provenance, ProvenanceFuture, ProvenanceLayer, ProvenanceTarget, X_CIRCUIT_BREAKER,
};
pub use self::retry_after::{parse_retry_after, retry_after_value};
pub use self::stale::{
    stale, stale_from_header, X_CIRCUIT_BREAKER_SAVED_FROM, X_CIRCUIT_BREAKER_STALE,
};
pub use self::stream::{
    StreamBodies, StreamBodiesFuture, StreamBody, StreamBodyLayer, StreamClassifier,
};
pub use self::unavailable::{unavailable, CALL_FAILED, CIRCUIT_OPEN, NOT_PREPARED};
