//! Buffered responses, read whole so they can be saved: see [`BufferBodyLayer`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use ::http::header::{HeaderValue, AGE};
use ::http::response::Parts;
use ::http::{Extensions, HeaderMap, Response, StatusCode, Version};
use bytes::Bytes;
use http_body::Body;
use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower::timeout::error::Elapsed;
use tower::{Layer, Service};

use super::body_broke_off::BodyBrokeOff;
use super::body_too_large::BodyTooLarge;
#[cfg(doc)]
use super::bounded_read::MAX_EMPTY_FRAMES;
use super::bounded_read::{BoundedRead, Unread};
use super::classify::HttpClassifier;
use super::error_body_bytes::ErrorBodyBytes;
use super::kept_head::KeptHead;
use super::provenance::ProvenanceTarget;
use crate::accessors::inner_service_accessors;
use crate::classify::Classify;
use crate::error::BoxError;
use crate::Outcome;

/// How much of a body [`BufferBodyLayer`] reads by default: 8 MiB.
pub const DEFAULT_BUFFER_LIMIT: usize = 8 * 1024 * 1024;

/// An HTTP response read whole: status, version, headers, extensions and body bytes.
/// `Clone`, so it can be saved and served again; see the [`BufferBodyLayer`].
///
/// Trailers are not kept.
#[derive(Debug, Clone)]
pub struct BufferedResponse {
    head: Parts,
    body: Bytes,
}

impl BufferedResponse {
    /// A response from its head and its body.
    pub fn from_parts(head: Parts, body: Bytes) -> Self {
        BufferedResponse { head, body }
    }

    /// The head and the body.
    pub fn into_parts(self) -> (Parts, Bytes) {
        (self.head, self.body)
    }

    /// Reads `response`'s body whole, up to `limit` bytes.
    ///
    /// # Errors
    ///
    /// [`BodyBrokeOff`] (with the body's error as its source) if the body breaks off, or
    /// [`BodyTooLarge`] past the limit: both keep the response's status and wait.
    pub async fn read<B>(response: Response<B>, limit: usize) -> Result<Self, BoxError>
    where
        B: Body,
        B::Error: Into<BoxError>,
    {
        let (head, body) = response.into_parts();
        Reading::new(head, Box::pin(body), limit).await
    }

    /// Its status.
    pub fn status(&self) -> StatusCode {
        self.head.status
    }

    /// Its HTTP version.
    pub fn version(&self) -> Version {
        self.head.version
    }

    /// Its headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.head.headers
    }

    /// Its headers, mutably (to label a saved answer with its age, say).
    pub fn headers_mut(&mut self) -> &mut HeaderMap {
        &mut self.head.headers
    }

    /// Its extensions.
    pub fn extensions(&self) -> &Extensions {
        &self.head.extensions
    }

    /// Its extensions, mutably.
    pub fn extensions_mut(&mut self) -> &mut Extensions {
        &mut self.head.extensions
    }

    /// Its body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Its body, to replace it. Headers that describe the body (`Content-Length`,
    /// `ETag`) are left as they are; [`label_chat_completion`](Self::label_chat_completion)
    /// keeps them right.
    pub fn body_mut(&mut self) -> &mut Bytes {
        &mut self.body
    }

    /// Its body, without the head.
    pub fn into_body(self) -> Bytes {
        self.body
    }

    /// The same response with an `Age` header of `age` in whole seconds (rounded down,
    /// as HTTP caches write it), added to the `Age` it arrived with, if any: how a saved
    /// answer served by a fallback says how old it is, in a way HTTP clients and caches
    /// understand. Put a label in the content too
    /// where a person or a model reads it ([`stale_label`](crate::saved::stale_label)):
    /// [`stale`](super::stale()) does both, and marks the answer
    /// ([`with_stale_marker`](Self::with_stale_marker)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use bytes::Bytes;
    /// use tower_circuit_breaker::http::BufferedResponse;
    ///
    /// let saved = BufferedResponse::from(http::Response::new(Bytes::from_static(b"42")));
    /// let served = saved.with_age(Duration::from_millis(600_900));
    /// assert_eq!(served.headers()["age"], "600");
    ///
    /// // An answer that came through a cache with `Age: 3600` is older by as much.
    /// let cached = http::Response::builder().header("age", "3600").body(Bytes::new()).unwrap();
    /// let served = BufferedResponse::from(cached).with_age(Duration::from_secs(10));
    /// assert_eq!(served.headers()["age"], "3610");
    /// ```
    pub fn with_age(mut self, age: Duration) -> Self {
        // An answer that was already this old when it arrived (from a cache on the way)
        // is older still now.
        let arrived_aged = self
            .head
            .headers
            .get(AGE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        let age = arrived_aged.saturating_add(age.as_secs());
        self.head.headers.insert(AGE, HeaderValue::from(age));
        self
    }

    /// Its body as UTF-8 text.
    ///
    /// # Errors
    ///
    /// A body that is not UTF-8.
    pub fn text(&self) -> Result<&str, std::str::Utf8Error> {
        std::str::from_utf8(&self.body)
    }
}

impl From<Response<Bytes>> for BufferedResponse {
    fn from(response: Response<Bytes>) -> Self {
        let (head, body) = response.into_parts();
        BufferedResponse { head, body }
    }
}

impl From<BufferedResponse> for Response<Bytes> {
    fn from(response: BufferedResponse) -> Self {
        Response::from_parts(response.head, response.body)
    }
}

impl ProvenanceTarget for BufferedResponse {
    fn headers_mut(&mut self) -> &mut HeaderMap {
        &mut self.head.headers
    }

    fn extensions(&self) -> &Extensions {
        &self.head.extensions
    }

    fn extensions_mut(&mut self) -> &mut Extensions {
        &mut self.head.extensions
    }
}

/// As an `http::Response`, its error body read from the response itself (or from an
/// [`ErrorBodyBytes`] extension an [`ErrorBodyLayer`](super::ErrorBodyLayer) left);
/// an error's message is its text with its sources, and a [`BodyTooLarge`] counts as
/// its status and its `Retry-After` say.
impl<E: 'static> Classify<BufferedResponse, E> for HttpClassifier {
    fn classify(&self, result: &Result<BufferedResponse, E>) -> Outcome {
        match result {
            Ok(response) => {
                let read = response.extensions().get::<ErrorBodyBytes>();
                let error_body = read.map_or(&response.body[..], |read| read.as_bytes());
                self.classify_parts(response.status(), response.headers(), Some(error_body))
            }
            Err(error) => self.classify_error(error),
        }
    }
}

/// Reads each response whole into a [`BufferedResponse`], which is
/// `Clone`, so that it can be saved and served again
/// ([`saved`](crate::saved)).
///
/// A `reqwest::Response` or an `http::Response<Incoming>` is not `Clone`: its body is a
/// stream, read once. Inside the breaker (under a time limit, so that a body that
/// hangs counts as a failure: see below), this layer reads the body (up to a limit, 8 MiB by
/// default) and answers a [`BufferedResponse`]: the status, version, headers,
/// extensions and body bytes. The breaker classifies it with
/// [`HttpClassifier`] (which reads an error body in it directly:
/// no [`ErrorBodyLayer`](crate::http::ErrorBodyLayer) is needed, though one inside this layer
/// keeps working), [`ProvenanceLayer`](crate::http::ProvenanceLayer) labels it, and it
/// converts to and from `http::Response<Bytes>` and, with the `reqwest` feature, to and
/// from `reqwest::Response` (URL included).
///
/// What it holds of a body is bounded by the limit: a longer body, or one that sends more
/// than [`MAX_EMPTY_FRAMES`] frames with no data in them, is not read further and the
/// call ends in [`BodyTooLarge`]. Trailers are skipped.
///
/// A hanging body counts as a failure under a time limit: this layer's own
/// ([`timeout`](Self::timeout)), or a `timeout` layer outside it. Its own keeps the
/// response's head when the limit cuts the body's read: the call ends in
/// [`BodyBrokeOff`], and a 429 that asked for a minute still opens the breaker for it. A
/// `timeout` layer outside drops the head with the read, and the breaker only learns
/// that the request timed out.
///
/// The order, outside in: provenance, save, breaker, (retry,) buffer, client.
///
/// ```
/// use std::convert::Infallible;
/// use bytes::Bytes;
/// use http::{Request, Response};
/// use http_body_util::Full;
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_circuit_breaker::http::{BufferBodyLayer, BufferedResponse, HttpClassifier};
/// use tower_circuit_breaker::CircuitBreakerLayer;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let client = service_fn(|_: Request<()>| async {
///     Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"{\"answer\":42}"))))
/// });
/// let breaker = CircuitBreakerLayer::builder().build()?.with_classifier(HttpClassifier::new());
/// let mut svc = ServiceBuilder::new()
///     .layer(breaker)
///     .layer(BufferBodyLayer::new())
///     .service(client);
/// let answer = svc.ready().await?.call(Request::new(())).await?;
/// let response: BufferedResponse = answer.into_inner();
/// let copy = response.clone(); // what a saved answer needs
/// assert_eq!(copy.body(), "{\"answer\":42}");
/// assert_eq!(response.text()?, "{\"answer\":42}");
/// # Ok(()) }
/// ```
///
/// Wraps an HTTP client in [`BufferBody`].
#[derive(Debug, Clone, Copy)]
pub struct BufferBodyLayer {
    limit: usize,
    timeout: Option<Duration>,
}

impl BufferBodyLayer {
    /// Reads bodies of up to [`DEFAULT_BUFFER_LIMIT`] (8 MiB), with no time limit.
    pub fn new() -> Self {
        BufferBodyLayer {
            limit: DEFAULT_BUFFER_LIMIT,
            timeout: None,
        }
    }

    /// Each call, its answer read whole included, may take `timeout`. Past it, a call
    /// still waiting for the response's head fails with tower's
    /// [`Elapsed`](tower::timeout::error::Elapsed), as under a `timeout` layer; one whose
    /// body is still being read fails with [`BodyBrokeOff`] (its source the `Elapsed`),
    /// which keeps the response's status and wait for the breaker.
    ///
    /// ```
    /// use std::time::Duration;
    /// use bytes::Bytes;
    /// use futures::stream;
    /// use http::{Request, Response};
    /// use http_body::Frame;
    /// use http_body_util::StreamBody;
    /// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
    /// use tower_circuit_breaker::http::{BodyBrokeOff, BufferBodyLayer, HttpClassifier};
    /// use tower_circuit_breaker::{CircuitBreakerLayer, State};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower::BoxError> {
    /// // A 429 asking for a minute, whose body stops halfway.
    /// let client = service_fn(|_: Request<()>| async {
    ///     let start = stream::iter([Ok::<_, std::io::Error>(Frame::data(Bytes::from_static(b"{\"error\":")))]);
    ///     let body = StreamBody::new(futures::StreamExt::chain(start, stream::pending()));
    ///     Ok::<_, http::Error>(Response::builder().status(429).header("retry-after", "60").body(body)?)
    /// });
    /// let breaker = CircuitBreakerLayer::builder().build()?;
    /// let handle = breaker.handle();
    /// let mut svc = ServiceBuilder::new()
    ///     .layer(breaker.with_classifier(HttpClassifier::new()))
    ///     .layer(BufferBodyLayer::new().timeout(Duration::from_secs(30)))
    ///     .service(client);
    ///
    /// let error = svc.ready().await?.call(Request::new(())).await.unwrap_err();
    /// assert_eq!(error.downcast_ref::<BodyBrokeOff>().unwrap().retry_after(), Some(Duration::from_secs(60)));
    /// assert_eq!(handle.state(), State::Open); // for the minute the server asked
    /// # Ok(()) }
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Reads bodies of up to `bytes`; a longer one (or one of more than
    /// [`MAX_EMPTY_FRAMES`] frames with no data) is an error ([`BodyTooLarge`], which keeps
    /// the response's status and `Retry-After` for the breaker).
    pub fn limit(mut self, bytes: usize) -> Self {
        self.limit = bytes;
        self
    }
}

impl Default for BufferBodyLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for BufferBodyLayer {
    type Service = BufferBody<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BufferBody {
            inner,
            limit: self.limit,
            timeout: self.timeout,
        }
    }
}

/// An HTTP client whose responses are read whole into [`BufferedResponse`]s; made by
/// [`BufferBodyLayer`].
///
/// # Errors
///
/// The wrapped service's errors, [`BodyBrokeOff`] for a body that breaks off (or is
/// still being read at the time limit) while it is read, [`BodyTooLarge`], and, with a
/// time limit, tower's `Elapsed` for a response that has not arrived by then, boxed:
/// for the breaker, each means the call failed (`BodyBrokeOff` and `BodyTooLarge` keep
/// the response's status and `Retry-After` for the classifier).
#[derive(Debug, Clone)]
pub struct BufferBody<S> {
    inner: S,
    limit: usize,
    timeout: Option<Duration>,
}

impl<S> BufferBody<S> {
    /// Reads the bodies of `inner`'s responses, up to `limit` bytes each, with no time
    /// limit ([`BufferBodyLayer::timeout`] sets one).
    pub fn new(inner: S, limit: usize) -> Self {
        BufferBody {
            inner,
            limit,
            timeout: None,
        }
    }

    inner_service_accessors!(S);
}

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// A response [`BufferBody`] can read whole: `http::Response<B>`, and
/// `reqwest::Response` (feature `reqwest`). Sealed.
pub trait Bufferable: sealed::Sealed {
    /// Its body, as it is read.
    #[doc(hidden)]
    type Body: Body + Unpin;

    /// The head (for `reqwest::Response`, with its URL as an extension) and the body.
    #[doc(hidden)]
    fn split(self) -> (Parts, Self::Body);
}

impl<B> sealed::Sealed for Response<B> {}

impl<B: Body> Bufferable for Response<B> {
    type Body = Pin<Box<B>>;

    fn split(self) -> (Parts, Pin<Box<B>>) {
        let (head, body) = self.into_parts();
        (head, Box::pin(body))
    }
}

impl<S, Request> Service<Request> for BufferBody<S>
where
    S: Service<Request>,
    S::Error: Into<BoxError>,
    S::Response: Bufferable,
    <<S::Response as Bufferable>::Body as Body>::Error: Into<BoxError>,
{
    type Response = BufferedResponse;
    type Error = BoxError;
    type Future = BufferBodyFuture<S::Future, <S::Response as Bufferable>::Body>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        BufferBodyFuture {
            state: State::Waiting {
                future: self.inner.call(request),
            },
            deadline: self.timeout.map(tokio::time::sleep),
            limit: self.limit,
        }
    }
}

pin_project! {
    /// The future of a [`BufferBody`] call: the response, read whole.
    pub struct BufferBodyFuture<F, B> {
        #[pin]
        state: State<F, B>,
        // The time limit's end, if one is set.
        #[pin]
        deadline: Option<Sleep>,
        limit: usize,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, B> {
        Waiting {
            #[pin]
            future: F,
        },
        Reading {
            reading: Reading<B>,
        },
    }
}

impl<F, E, R> Future for BufferBodyFuture<F, R::Body>
where
    F: Future<Output = Result<R, E>>,
    E: Into<BoxError>,
    R: Bufferable,
    <R::Body as Body>::Error: Into<BoxError>,
{
    type Output = Result<BufferedResponse, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            // The call first, as tower's `Timeout` does: what is ready by the deadline is
            // the answer.
            let polled = match this.state.as_mut().project() {
                StateProj::Waiting { future } => match future.poll(cx) {
                    Poll::Ready(response) => {
                        let (head, body) = response.map_err(Into::into)?.split();
                        let reading = Reading::new(head, body, *this.limit);
                        this.state.set(State::Reading { reading });
                        continue;
                    }
                    Poll::Pending => Poll::Pending,
                },
                StateProj::Reading { reading } => Pin::new(reading).poll(cx),
            };
            if polled.is_ready() {
                return polled;
            }
            let Some(deadline) = this.deadline.as_mut().as_pin_mut() else {
                return Poll::Pending;
            };
            ready!(deadline.poll(cx));
            let error: BoxError = match this.state.as_mut().project() {
                StateProj::Waiting { .. } => Box::new(Elapsed::new()),
                // The head arrived: the error keeps it, for the classifier.
                StateProj::Reading { reading } => reading.broke_off(Box::new(Elapsed::new())),
            };
            return Poll::Ready(Err(error));
        }
    }
}

impl<F, B> fmt::Debug for BufferBodyFuture<F, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Waiting { .. } => "waiting",
            State::Reading { .. } => "reading",
        };
        f.debug_struct("BufferBodyFuture")
            .field("state", &state)
            .field("limit", &self.limit)
            .field("deadline", &self.deadline.as_ref().map(Sleep::deadline))
            .finish()
    }
}

/// A body being read whole, with the head it belongs to.
struct Reading<B> {
    head: Option<Parts>,
    body: B,
    read: BoundedRead,
}

impl<B> Reading<B> {
    fn new(head: Parts, body: B, limit: usize) -> Self {
        Reading {
            head: Some(head),
            body,
            read: BoundedRead::whole(limit),
        }
    }

    /// The error of a read that ended in `error` before the body did: a
    /// [`BodyBrokeOff`], which keeps the head.
    fn broke_off(&self, error: BoxError) -> BoxError {
        let head = self.head.as_ref().expect("polled after completion");
        let head = KeptHead::of(head.status, &head.headers);
        Box::new(BodyBrokeOff::new(head, error))
    }
}

impl<B> Future for Reading<B>
where
    B: Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Output = Result<BufferedResponse, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        match ready!(this.read.poll_read_whole(&mut this.body, cx)) {
            Ok(()) => {}
            Err(Unread::Body(error)) => return Poll::Ready(Err(this.broke_off(error.into()))),
            Err(Unread::TooLarge) => {
                let head = this.head.as_ref().expect("polled after completion");
                let limit = this.read.limit();
                return Poll::Ready(Err(Box::new(BodyTooLarge::of(head, limit))));
            }
        }
        let head = this.head.take().expect("polled after completion");
        let body = this.read.take();
        Poll::Ready(Ok(BufferedResponse { head, body }))
    }
}
