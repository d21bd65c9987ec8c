//! `reqwest::Response` for the breaker: [`HttpClassifier`] classifies it,
//! [`ReqwestErrorBodyLayer`] reads error bodies for it, and
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
//! [`ReqwestErrorBodyLayer`] between the breaker and the client, or an
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

use std::any::Any;
use std::collections::VecDeque;
use std::error::Error;
use std::fmt::{self, Write as _};
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use ::http::response::Parts;
use ::reqwest::{Body, Response, ResponseBuilderExt as _, Url};
use bytes::{Bytes, BytesMut};
use http_body::{Body as _, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use super::error_body::{ErrorBodyBytes, DEFAULT_LIMIT};
use super::HttpClassifier;
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

/// Wraps a reqwest client in [`ReqwestErrorBody`]: the start of every error body in an
/// [`ErrorBodyBytes`] extension, so that [`HttpClassifier`] can tell an exhausted quota
/// from a rate limit; see [`ReqwestErrorBody`].
///
/// Place it inside the breaker (between the breaker and the client), and inside a
/// timeout if there is one, so that a body that hangs counts as a failure.
///
/// ```
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_circuit_breaker::http::reqwest::ReqwestErrorBodyLayer;
/// use tower_circuit_breaker::http::ErrorBodyBytes;
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
///     .layer(ReqwestErrorBodyLayer::new().limit(16 * 1024))
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
#[derive(Debug, Clone)]
pub struct ReqwestErrorBodyLayer {
    limit: usize,
}

impl ReqwestErrorBodyLayer {
    /// Reads up to [`DEFAULT_LIMIT`] (64 KiB) of each error body.
    pub fn new() -> Self {
        ReqwestErrorBodyLayer {
            limit: DEFAULT_LIMIT,
        }
    }

    /// Reads up to `bytes` of each error body. The caller still gets the whole body:
    /// what is past the limit streams on unread.
    pub fn limit(mut self, bytes: usize) -> Self {
        self.limit = bytes;
        self
    }
}

impl Default for ReqwestErrorBodyLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for ReqwestErrorBodyLayer {
    type Service = ReqwestErrorBody<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ReqwestErrorBody::new(inner, self.limit)
    }
}

/// A reqwest client whose error responses carry the start of their body in an
/// [`ErrorBodyBytes`] extension; made by [`ReqwestErrorBodyLayer`]. What
/// [`ErrorBody`](super::ErrorBody) does for `http::Response`, for `reqwest::Response`.
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
/// # Errors
///
/// The wrapped service's errors, and an error while reading an error body (a
/// `reqwest::Error`, such as the client's timeout), are returned boxed: for the
/// breaker, both mean the service failed.
#[derive(Debug, Clone)]
pub struct ReqwestErrorBody<S> {
    inner: S,
    limit: usize,
}

impl<S> ReqwestErrorBody<S> {
    /// Reads up to `limit` bytes of each error body of `inner`.
    pub fn new(inner: S, limit: usize) -> Self {
        ReqwestErrorBody { inner, limit }
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

impl<S, Request> Service<Request> for ReqwestErrorBody<S>
where
    S: Service<Request, Response = Response>,
    S::Error: Into<BoxError>,
{
    type Response = Response;
    type Error = BoxError;
    type Future = ErrorBodyFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        ErrorBodyFuture::new(self.inner.call(request), self.limit)
    }
}

pin_project! {
    /// The future of a [`ReqwestErrorBody`] call: the response, with an error body
    /// read.
    pub struct ErrorBodyFuture<F> {
        #[pin]
        state: ErrorBodyState<F>,
        limit: usize,
    }
}

pin_project! {
    #[project = ErrorBodyStateProj]
    enum ErrorBodyState<F> {
        Waiting {
            #[pin]
            future: F,
        },
        Reading {
            head: Option<(Parts, Url)>,
            body: Option<Body>,
            frames: VecDeque<Frame<Bytes>>,
            read: BytesMut,
        },
        Done,
    }
}

impl<F> ErrorBodyFuture<F> {
    pub(crate) fn new(future: F, limit: usize) -> Self {
        ErrorBodyFuture {
            state: ErrorBodyState::Waiting { future },
            limit,
        }
    }
}

impl<F, E> Future for ErrorBodyFuture<F>
where
    F: Future<Output = Result<Response, E>>,
    E: Into<BoxError>,
{
    type Output = Result<Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let limit = *this.limit;
        loop {
            match this.state.as_mut().project() {
                ErrorBodyStateProj::Waiting { future } => {
                    let response = match ready!(future.poll(cx)) {
                        Ok(response) => response,
                        Err(error) => {
                            this.state.set(ErrorBodyState::Done);
                            return Poll::Ready(Err(error.into()));
                        }
                    };
                    if response.status().as_u16() < 400 {
                        this.state.set(ErrorBodyState::Done);
                        return Poll::Ready(Ok(response));
                    }
                    let url = response.url().clone();
                    let (parts, body) = ::http::Response::<Body>::from(response).into_parts();
                    this.state.set(ErrorBodyState::Reading {
                        head: Some((parts, url)),
                        body: Some(body),
                        frames: VecDeque::new(),
                        read: BytesMut::new(),
                    });
                }
                ErrorBodyStateProj::Reading {
                    head,
                    body,
                    frames,
                    read,
                } => {
                    while read.len() < limit {
                        let Some(stream) = body.as_mut() else { break };
                        match ready!(Pin::new(stream).poll_frame(cx)) {
                            None => *body = None,
                            Some(Err(error)) => {
                                this.state.set(ErrorBodyState::Done);
                                return Poll::Ready(Err(error.into()));
                            }
                            Some(Ok(frame)) => {
                                if let Some(data) = frame.data_ref() {
                                    let room = limit - read.len();
                                    read.extend_from_slice(&data[..data.len().min(room)]);
                                }
                                frames.push_back(frame);
                            }
                        }
                    }
                    let rest = body.take().filter(|body| !body.is_end_stream());
                    let (parts, url) = head.take().expect("polled after completion");
                    let read = ErrorBodyBytes(read.split().freeze());
                    let body = Replayed {
                        frames: std::mem::take(frames),
                        rest,
                    };
                    this.state.set(ErrorBodyState::Done);
                    return Poll::Ready(Ok(rebuild(parts, url, read, body)));
                }
                ErrorBodyStateProj::Done => panic!("polled after completion"),
            }
        }
    }
}

impl<F> fmt::Debug for ErrorBodyFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            ErrorBodyState::Waiting { .. } => "waiting",
            ErrorBodyState::Reading { .. } => "reading",
            ErrorBodyState::Done => "done",
        };
        f.debug_struct("ErrorBodyFuture")
            .field("state", &state)
            .field("limit", &self.limit)
            .finish()
    }
}

/// A `reqwest::Response` with the head of the original, its URL, the bytes read as
/// an extension, and `body`.
fn rebuild(parts: Parts, url: Url, read: ErrorBodyBytes, body: Replayed) -> Response {
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

/// The body of a rebuilt error response: the frames read ahead, then the rest.
struct Replayed {
    frames: VecDeque<Frame<Bytes>>,
    rest: Option<Body>,
}

impl http_body::Body for Replayed {
    type Data = Bytes;
    type Error = ::reqwest::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(frame) = self.frames.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        let Some(rest) = self.rest.as_mut() else {
            return Poll::Ready(None);
        };
        let frame = ready!(Pin::new(rest).poll_frame(cx));
        if frame.is_none() {
            self.rest = None;
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty() && self.rest.as_ref().is_none_or(|rest| rest.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let buffered: u64 = self
            .frames
            .iter()
            .filter_map(Frame::data_ref)
            .map(|data| data.len() as u64)
            .sum();
        match &self.rest {
            Some(rest) => SizeHint::with_exact(buffered) + rest.size_hint(),
            None => SizeHint::with_exact(buffered),
        }
    }
}
