//! `reqwest::Response` for the breaker: [`HttpClassifier`] classifies it,
//! [`ErrorBodyLayer`](super::ErrorBodyLayer) reads error bodies for it, and
//! [`ProvenanceLayer`](super::ProvenanceLayer) labels it with where it came from (cargo
//! feature `reqwest`).
//!
//! `reqwest::Client` is a `tower::Service<reqwest::Request>`, and client libraries
//! built on reqwest (async-openai's `middleware` feature, `Client::with_http_service`)
//! take a tower service whose response type is fixed to `reqwest::Response`. Inside such
//! a slot the breaker's [`Answer`](crate::Answer) must be unwrapped, and its provenance
//! would be lost; [`Provenance`](super::Provenance) unwraps it and writes the provenance
//! onto the `reqwest::Response` as it does for `http::Response`: an
//! [`X_CIRCUIT_BREAKER`](super::X_CIRCUIT_BREAKER) header (`fallback; reason=open`),
//! which survives any later conversion, and an [`AnswerInfo`](super::AnswerInfo)
//! extension, read with [`provenance`](super::provenance()).
//!
//! A fallback builds its `reqwest::Response` from an `http::Response`
//! (`reqwest::Response::from(http_response)`); the breaker labels it, not the
//! fallback.
//!
//! The classifier reads the status and the `Retry-After` header, and an
//! [`ErrorBodyBytes`] extension if some layer put one there: put a
//! [`ErrorBodyLayer`](super::ErrorBodyLayer) between the breaker and the client, or an
//! `insufficient_quota` 429 counts as a rate limit (the body is a stream the classifier
//! cannot read). The order, outside in: provenance, breaker, (timeout,) error body,
//! client. Any error
//! is a failure (connection refused or reset, a timeout, a request that could not be
//! built): for a `reqwest::Error`, or a [`BoxError`] (as a `timeout`
//! layer returns), its message is the error's text followed by its sources
//! (`error sending request for url (...): ...: Connection refused (os error 111)`),
//! since reqwest's own text names only the URL; for any other error type, the error's
//! text.
//!
//! ```
//! use std::convert::Infallible;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_circuit_breaker::http::{provenance, ProvenanceLayer};
//! use tower_circuit_breaker::http::{HttpClassifier, X_CIRCUIT_BREAKER};
//! use tower_circuit_breaker::{CircuitBreakerLayer, Reason, Source, State};
//!
//! fn response(status: u16, body: &'static str) -> reqwest::Response {
//!     let response = http::Response::builder().status(status).body(body).unwrap();
//!     reqwest::Response::from(response)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tower::BoxError> {
//! // Stands in for a `reqwest::Client` whose server answers 503.
//! let client = service_fn(|_: reqwest::Request| async {
//!     Ok::<_, reqwest::Error>(response(503, "overloaded"))
//! });
//! let breaker = CircuitBreakerLayer::builder().failure_threshold(1).build()?;
//! let handle = breaker.handle();
//! let breaker = breaker
//!     .with_classifier(HttpClassifier::new())
//!     .with_fallback(service_fn(|_: reqwest::Request| async {
//!         Ok::<_, Infallible>(response(503, "the model is unavailable; try again later"))
//!     }));
//! let mut svc = ServiceBuilder::new()
//!     .layer(ProvenanceLayer::new())
//!     .layer(breaker)
//!     .service(client);
//!
//! let request = || reqwest::Request::new(http::Method::POST, "http://127.0.0.1/".parse().unwrap());
//! let first: reqwest::Response = svc.ready().await?.call(request()).await?;
//! assert_eq!(first.headers()[X_CIRCUIT_BREAKER], "service");
//! assert_eq!(handle.state(), State::Open);
//!
//! let second = svc.ready().await?.call(request()).await?;
//! assert_eq!(second.headers()[X_CIRCUIT_BREAKER], "fallback; reason=open");
//! assert_eq!(provenance(&second).unwrap().source, Source::Fallback(Reason::Open));
//! assert_eq!(second.text().await?, "the model is unavailable; try again later");
//! # Ok(()) }
//! ```

use std::collections::VecDeque;

use ::http::response::Parts;
use ::reqwest::{Body, Response, ResponseBuilderExt as _, StatusCode, Url};
use bytes::Bytes;
use http_body::Frame;

use super::buffer::{Bufferable, BufferedResponse};
use super::classify::HttpClassifier;
use super::error_body::{ReadAhead, ResponseBody};
use super::error_body_bytes::ErrorBodyBytes;
use crate::classify::Classify;
use crate::error::BoxError;
use crate::Outcome;

impl HttpClassifier {
    /// The outcome of a `reqwest::Response`: its status, its `Retry-After` header and
    /// an [`ErrorBodyBytes`] extension if it has one, as
    /// [`classify_parts`](Self::classify_parts) reads them.
    pub fn classify_reqwest(&self, response: &Response) -> Outcome {
        let error_body = response
            .extensions()
            .get::<ErrorBodyBytes>()
            .map(|body| body.as_bytes());
        self.classify_parts(response.status(), response.headers(), error_body)
    }
}

/// Any error type: a `reqwest::Error` directly, an `OpenAIError` from async-openai's
/// `ReqwestService`, a [`BoxError`] from a `timeout` layer.
impl<E: 'static> Classify<Response, E> for HttpClassifier {
    fn classify(&self, result: &Result<Response, E>) -> Outcome {
        match result {
            Ok(response) => self.classify_reqwest(response),
            Err(error) => self.classify_error(error),
        }
    }
}

impl super::error_body::sealed::Sealed for Response {}

/// [`ErrorBodyLayer`](super::ErrorBodyLayer) reads error bodies of a reqwest client:
/// the start of every error body in an [`ErrorBodyBytes`] extension, so that
/// [`HttpClassifier`] can tell an exhausted quota from a rate limit.
///
/// A response with status >= 400 has its body read, up to the limit (64 KiB by
/// default), before the response is handed on; the bytes read are stored in the
/// extension, and the caller gets a `reqwest::Response` with the same status, version,
/// headers, extensions and URL, whose body replays the bytes read and then streams
/// the rest. Responses below 400 pass through untouched, streamed and unread.
///
/// # What the rebuilt response loses
///
/// A `reqwest::Response` cannot be taken apart and put back together as it was: it is
/// converted into an `http::Response<reqwest::Body>` and rebuilt with
/// `http::Response::builder()` and `reqwest::Response::from`. Kept: the status, the
/// version, the headers, the extensions (so [`remote_addr`](::reqwest::Response::remote_addr),
/// which reqwest reads from an extension, is kept), and the URL (carried over with
/// [`ResponseBuilderExt::url`](::reqwest::ResponseBuilderExt::url); without it
/// reqwest would say `http://no.url.provided.local`). Changed: the body is a new
/// `reqwest::Body`, so an error in the part of the body past the limit reaches the
/// caller wrapped once more (a `reqwest::Error` whose source is reqwest's body
/// error), and the body read ahead is held in memory (at most the limit, plus the
/// rest of the chunk that crossed it). Only error responses are rebuilt.
///
/// ```
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_circuit_breaker::http::{ErrorBodyBytes, ErrorBodyLayer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// // Stands in for a `reqwest::Client` whose account has no credit left.
/// let client = service_fn(|_: reqwest::Request| async {
///     let body = r#"{"error":{"code":"insufficient_quota"}}"#;
///     let response = http::Response::builder().status(429).body(body).unwrap();
///     Ok::<_, reqwest::Error>(reqwest::Response::from(response))
/// });
/// let mut client = ServiceBuilder::new()
///     .layer(ErrorBodyLayer::new().limit(16 * 1024))
///     .service(client);
///
/// let request = reqwest::Request::new(http::Method::POST, "http://127.0.0.1/".parse()?);
/// let response = client.ready().await?.call(request).await?;
/// let read = response.extensions().get::<ErrorBodyBytes>().unwrap().clone();
/// assert!(read.as_bytes().starts_with(br#"{"error""#));
/// // The caller still gets the whole body.
/// assert_eq!(response.bytes().await?, read.0);
/// # Ok(()) }
/// ```
impl ReadAhead for Response {
    type Output = Response;
    type Body = Body;
    type Head = (Parts, Url);

    fn status(&self) -> StatusCode {
        Response::status(self)
    }

    fn headers(&self) -> &::http::HeaderMap {
        Response::headers(self)
    }

    fn pass(self) -> Response {
        self
    }

    fn split(self) -> ((Parts, Url), Body) {
        let url = self.url().clone();
        let (parts, body) = ::http::Response::<Body>::from(self).into_parts();
        ((parts, url), body)
    }

    fn join(
        (parts, url): (Parts, Url),
        read: ErrorBodyBytes,
        frames: VecDeque<Frame<Bytes>>,
        rest: Option<Body>,
    ) -> Response {
        let body = ResponseBody::replayed(frames, rest.map(Box::pin));
        rebuild(parts, url, read, body)
    }
}

/// A `reqwest::Response` with the head of the original, its URL, the bytes read as
/// an extension, and `body`.
fn rebuild(parts: Parts, url: Url, read: ErrorBodyBytes, body: ResponseBody<Body>) -> Response {
    let mut builder = ::http::Response::builder()
        .status(parts.status)
        .version(parts.version);
    if let Some(headers) = builder.headers_mut() {
        *headers = parts.headers;
    }
    if let Some(extensions) = builder.extensions_mut() {
        *extensions = parts.extensions;
        extensions.insert(read);
    }
    // After the extensions: the URL travels as one of them.
    let response = builder
        .url(url)
        .body(Body::wrap(body))
        .expect("the parts of a valid response");
    Response::from(response)
}

impl super::buffer::sealed::Sealed for Response {}

/// [`BufferBodyLayer`](super::BufferBodyLayer) reads a reqwest client's responses whole:
/// the [`BufferedResponse`] keeps the status, version, headers, extensions (so
/// [`remote_addr`](::reqwest::Response::remote_addr) is kept) and the URL, which
/// `reqwest::Response::from(buffered)` restores.
impl Bufferable for Response {
    type Body = Body;

    fn split(self) -> (Parts, Body) {
        let url = self.url().clone();
        let (mut parts, body) = ::http::Response::<Body>::from(self).into_parts();
        parts.extensions.insert(AnsweredFrom(url.clone()));
        parts.extensions.extend(url_extension(url));
        (parts, body)
    }
}

/// The URL a reqwest response came from, kept where [`BufferedResponse::url`] reads it.
#[derive(Clone)]
struct AnsweredFrom(Url);

/// The extension reqwest keeps a response's URL in (its type is reqwest's own): made by
/// the builder that `reqwest::Response::from` reads it back from.
fn url_extension(url: Url) -> ::http::Extensions {
    let (parts, ()) = ::http::Response::builder()
        .url(url)
        .body(())
        .expect("a response with only a URL")
        .into_parts();
    parts.extensions
}

impl BufferedResponse {
    /// Reads a `reqwest::Response` whole, up to `limit` bytes; its URL is kept for
    /// `reqwest::Response::from(buffered)`.
    ///
    /// # Errors
    ///
    /// [`BodyBrokeOff`](super::BodyBrokeOff) (with the body's error as its source) if the
    /// body breaks off, or [`BodyTooLarge`](super::BodyTooLarge) past the limit.
    pub async fn from_reqwest(response: Response, limit: usize) -> Result<Self, BoxError> {
        let (head, body) = Bufferable::split(response);
        let response = ::http::Response::from_parts(head, body);
        BufferedResponse::read(response, limit).await
    }
}

impl BufferedResponse {
    /// The URL a reqwest client's response came from, after any redirect the client
    /// followed (`reqwest::Response::url`); `None` for a response that came from
    /// elsewhere (hyper, a test's `http::Response`).
    pub fn url(&self) -> Option<&Url> {
        self.extensions().get::<AnsweredFrom>().map(|from| &from.0)
    }
}

/// A `reqwest::Response` with the buffered status, version, headers, extensions, URL
/// (when the response came from reqwest) and body.
impl From<BufferedResponse> for Response {
    fn from(response: BufferedResponse) -> Response {
        Response::from(::http::Response::<Bytes>::from(response))
    }
}
