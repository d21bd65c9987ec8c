//! `reqwest::Response` for the breaker: [`HttpClassifier`] classifies it, and
//! [`ReqwestProvenanceLayer`] labels it with where it came from (cargo feature
//! `reqwest`).
//!
//! `reqwest::Client` is a `tower::Service<reqwest::Request>`, and client libraries
//! built on reqwest (async-openai's `middleware` feature, `Client::with_http_service`)
//! take a tower service whose response type is fixed to `reqwest::Response`. Inside such
//! a slot the breaker's [`Answer`] must be unwrapped, and its provenance would be lost;
//! [`ReqwestProvenance`] unwraps it and writes the provenance onto the response the same
//! way [`Provenance`](super::Provenance) does for `http::Response`: an
//! [`X_CIRCUIT_BREAKER`] header (`fallback; reason=open`), which survives any later
//! conversion, and an [`AnswerInfo`] extension, read with [`provenance`].
//!
//! A fallback builds its `reqwest::Response` from an `http::Response`
//! (`reqwest::Response::from(http_response)`); the breaker labels it, not the
//! fallback.
//!
//! The classifier reads the status and the `Retry-After` header, and an
//! [`ErrorBodyBytes`] extension if some layer put one there (there is no reqwest error
//! body layer yet, so an `insufficient_quota` 429 counts as a rate limit). Any error
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
//! use tower_circuit_breaker::http::reqwest::{provenance, ReqwestProvenanceLayer};
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
//!     .layer(ReqwestProvenanceLayer::new())
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

use std::any::Any;
use std::error::Error;
use std::fmt::{self, Write as _};
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use ::reqwest::Response;
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use super::error_body::ErrorBodyBytes;
use super::provenance::{header_value, AnswerInfo, X_CIRCUIT_BREAKER};
use super::HttpClassifier;
use crate::answer::Answer;
use crate::classify::{Classify, Outcome};
use crate::error::BoxError;

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
            Err(error) => match transport_message(error) {
                Some(message) => Outcome::failure_with(message),
                // The breaker fills in the error's text as the message.
                None => Outcome::failure(),
            },
        }
    }
}

/// The text of a `reqwest::Error` or a [`BoxError`] with its sources, skipping a
/// source whose text is already there; `None` for other error types.
fn transport_message<E: 'static>(error: &E) -> Option<String> {
    let error = error as &dyn Any;
    let error: &(dyn Error + 'static) =
        if let Some(error) = error.downcast_ref::<::reqwest::Error>() {
            error
        } else if let Some(error) = error.downcast_ref::<BoxError>() {
            &**error
        } else {
            return None;
        };
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            let _ = write!(message, ": {text}");
        }
        source = cause.source();
    }
    Some(message)
}

/// The provenance [`ReqwestProvenance`] wrote on `response`, if it went through one:
/// the [`AnswerInfo`] extension. Where extensions may have been dropped, read the
/// [`X_CIRCUIT_BREAKER`] header with [`source_from_header`](super::source_from_header).
pub fn provenance(response: &Response) -> Option<AnswerInfo> {
    response.extensions().get::<AnswerInfo>().copied()
}

/// Unwraps a breaker's [`Answer<reqwest::Response>`](crate::Answer) into a plain
/// `reqwest::Response` labelled with its provenance; see the [module](self) docs.
///
/// Place it directly outside the breaker.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReqwestProvenanceLayer {
    _priv: (),
}

impl ReqwestProvenanceLayer {
    /// The layer.
    pub fn new() -> Self {
        ReqwestProvenanceLayer { _priv: () }
    }
}

impl<S> Layer<S> for ReqwestProvenanceLayer {
    type Service = ReqwestProvenance<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ReqwestProvenance::new(inner)
    }
}

/// A breaker whose answers are plain `reqwest::Response`s labelled with an
/// [`X_CIRCUIT_BREAKER`] header and an [`AnswerInfo`] extension; made by
/// [`ReqwestProvenanceLayer`].
///
/// # Errors
///
/// The breaker's errors, unchanged.
#[derive(Debug, Clone)]
pub struct ReqwestProvenance<S> {
    inner: S,
}

impl<S> ReqwestProvenance<S> {
    /// Labels the answers of `inner`.
    pub fn new(inner: S) -> Self {
        ReqwestProvenance { inner }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, Request> Service<Request> for ReqwestProvenance<S>
where
    S: Service<Request, Response = Answer<Response>>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        ResponseFuture::new(self.inner.call(request))
    }
}

pin_project! {
    /// The future of a [`ReqwestProvenance`] call: the breaker's answer, unwrapped and
    /// labelled.
    pub struct ResponseFuture<F> {
        #[pin]
        future: F,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(future: F) -> Self {
        ResponseFuture { future }
    }
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Answer<Response>, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let answer = ready!(self.project().future.poll(cx))?;
        let info = AnswerInfo::of(&answer);
        let mut response = answer.into_inner();
        response
            .headers_mut()
            .append(X_CIRCUIT_BREAKER, header_value(info.source));
        response.extensions_mut().insert(info);
        Poll::Ready(Ok(response))
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
