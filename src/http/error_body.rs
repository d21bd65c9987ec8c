//! Error bodies read for the classifier: see [`ErrorBodyLayer`].

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use ::http::response::Parts;
use ::http::{HeaderMap, Response, StatusCode};
use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use super::body_broke_off::BodyBrokeOff;
#[cfg(doc)]
use super::bounded_read::MAX_EMPTY_FRAMES;
use super::bounded_read::{BoundedRead, Stop};
use super::error_body_bytes::ErrorBodyBytes;
use super::kept_head::KeptHead;
use crate::accessors::inner_service_accessors;
use crate::error::BoxError;

/// How much of an error body is read by default: 64 KiB.
pub const DEFAULT_ERROR_BODY_LIMIT: usize = 64 * 1024;

/// Reads the start of every error response's body, so that a
/// classifier can tell an exhausted quota from a rate limit.
///
/// A classifier sees the response when its head arrives; the body is still a stream.
/// Placed between the breaker and the client, this layer reads the body of a response
/// with status >= 400 (up to a limit, 64 KiB by default), stores the bytes read in an
/// [`ErrorBodyBytes`] extension, and hands the caller a body that replays those bytes
/// and then streams the rest. Responses below 400 pass through as they came,
/// streamed and unread.
///
/// What it holds of a body is bounded, whatever the peer sends: the bytes read, at most
/// the limit (plus the rest of the frame that crossed it), and its trailers, where the
/// read stops. A body that sends more than [`MAX_EMPTY_FRAMES`]
/// frames with no data in them is read no further, as at the limit: the caller gets what
/// was read, then the rest.
///
/// It serves any client whose response is a [`ReadAhead`]: `http::Response<B>` (hyper,
/// most tower stacks), whose body becomes a [`ResponseBody<B>`], and, with the feature
/// `reqwest`, `reqwest::Response`, which stays a `reqwest::Response` (see
/// [`BufferedResponse`](crate::http::BufferedResponse) for what rebuilding one keeps).
///
/// ```
/// use bytes::Bytes;
/// use http::{Request, Response};
/// use http_body_util::BodyExt;
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_circuit_breaker::http::ErrorBodyLayer;
/// use tower_circuit_breaker::http::ErrorBodyBytes;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let mut client = ServiceBuilder::new()
///     .layer(ErrorBodyLayer::new().limit(16 * 1024))
///     .service(service_fn(|_: Request<()>| async {
///         let body = r#"{"error":{"code":"insufficient_quota"}}"#.to_string();
///         Ok::<_, std::io::Error>(Response::builder().status(429).body(body).unwrap())
///     }));
/// let response = client.ready().await?.call(Request::new(())).await?;
/// let read = response.extensions().get::<ErrorBodyBytes>().unwrap().clone();
/// assert!(read.as_bytes().starts_with(br#"{"error""#));
/// // The caller still gets the whole body.
/// let body = response.into_body().collect().await?.to_bytes();
/// assert_eq!(body, read.0);
/// # Ok(()) }
/// ```
///
/// Wraps an HTTP client in [`ErrorBody`].
///
/// Place it inside the breaker (between the breaker and the client), and inside a
/// timeout if there is one, so that a body that hangs counts as a failure.
#[derive(Debug, Clone)]
pub struct ErrorBodyLayer {
    limit: usize,
}

impl ErrorBodyLayer {
    /// Reads up to [`DEFAULT_ERROR_BODY_LIMIT`] (64 KiB) of each error body.
    pub fn new() -> Self {
        ErrorBodyLayer {
            limit: DEFAULT_ERROR_BODY_LIMIT,
        }
    }

    /// Reads up to `bytes` of each error body. The caller still gets the whole body:
    /// what is past the limit streams on unread.
    pub fn limit(mut self, bytes: usize) -> Self {
        self.limit = bytes;
        self
    }
}

impl Default for ErrorBodyLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for ErrorBodyLayer {
    type Service = ErrorBody<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ErrorBody::new(inner, self.limit)
    }
}

/// An HTTP client whose error responses carry the start of their body in an
/// [`ErrorBodyBytes`] extension; made by [`ErrorBodyLayer`].
///
/// # Errors
///
/// The wrapped service's errors, and [`BodyBrokeOff`] for an error body that breaks off
/// while it is read (its source the body's error; it keeps the response's status and
/// `Retry-After` for the classifier), are returned boxed: for the breaker, both mean the
/// service failed.
#[derive(Debug, Clone)]
pub struct ErrorBody<S> {
    inner: S,
    limit: usize,
}

impl<S> ErrorBody<S> {
    /// Reads up to `limit` bytes of each error body of `inner`.
    pub fn new(inner: S, limit: usize) -> Self {
        ErrorBody { inner, limit }
    }

    inner_service_accessors!(S);
}

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// A response [`ErrorBody`] can read the start of an error body of, and hand on whole:
/// `http::Response<B>`, and `reqwest::Response` (feature `reqwest`). Sealed: its
/// methods are the layer's plumbing.
pub trait ReadAhead: Sized + sealed::Sealed {
    /// What the caller gets.
    type Output;
    /// The body, as it is read.
    #[doc(hidden)]
    type Body: Body + Unpin;
    /// The rest of the response, kept while its body is read.
    #[doc(hidden)]
    type Head;

    /// Its status: the body of an error response (status >= 400) is read.
    #[doc(hidden)]
    fn status(&self) -> StatusCode;

    /// Its headers (for the wait it asks for, kept if its body breaks off).
    #[doc(hidden)]
    fn headers(&self) -> &HeaderMap;

    /// A response that is not read, handed on.
    #[doc(hidden)]
    fn pass(self) -> Self::Output;

    /// The head and the body, to read.
    #[doc(hidden)]
    fn split(self) -> (Self::Head, Self::Body);

    /// The response again: the head with `read` as an extension, and a body of
    /// `frames` then `rest`.
    #[doc(hidden)]
    fn join(
        head: Self::Head,
        read: ErrorBodyBytes,
        frames: VecDeque<Frame<Bytes>>,
        rest: Option<Self::Body>,
    ) -> Self::Output;
}

impl<B> sealed::Sealed for Response<B> {}

impl<B: Body> ReadAhead for Response<B> {
    type Output = Response<ResponseBody<B>>;
    type Body = Pin<Box<B>>;
    type Head = Parts;

    fn status(&self) -> StatusCode {
        Response::status(self)
    }

    fn headers(&self) -> &HeaderMap {
        Response::headers(self)
    }

    fn pass(self) -> Self::Output {
        self.map(ResponseBody::new)
    }

    fn split(self) -> (Parts, Pin<Box<B>>) {
        let (parts, body) = self.into_parts();
        (parts, Box::pin(body))
    }

    fn join(
        mut parts: Parts,
        read: ErrorBodyBytes,
        frames: VecDeque<Frame<Bytes>>,
        rest: Option<Pin<Box<B>>>,
    ) -> Self::Output {
        parts.extensions.insert(read);
        Response::from_parts(parts, ResponseBody::replayed(frames, rest))
    }
}

impl<S, Request> Service<Request> for ErrorBody<S>
where
    S: Service<Request>,
    S::Error: Into<BoxError>,
    S::Response: ReadAhead,
    <<S::Response as ReadAhead>::Body as Body>::Error: Into<BoxError>,
{
    type Response = <S::Response as ReadAhead>::Output;
    type Error = BoxError;
    type Future = ErrorBodyFuture<S::Future, S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        ErrorBodyFuture::new(self.inner.call(request), self.limit)
    }
}

pin_project! {
    /// The future of an [`ErrorBody`] call: the response `R`, with an error body read.
    pub struct ErrorBodyFuture<F, R: ReadAhead> {
        #[pin]
        state: FutureState<F, R>,
        limit: usize,
    }
}

pin_project! {
    #[project = FutureStateProj]
    enum FutureState<F, R: ReadAhead> {
        Waiting {
            #[pin]
            future: F,
        },
        Reading {
            head: Option<R::Head>,
            // What the classifier needs of the head, should the body break off.
            kept: KeptHead,
            body: Option<R::Body>,
            read: BoundedRead,
        },
        Done,
    }
}

impl<F, R: ReadAhead> ErrorBodyFuture<F, R> {
    pub(crate) fn new(future: F, limit: usize) -> Self {
        ErrorBodyFuture {
            state: FutureState::Waiting { future },
            limit,
        }
    }
}

impl<F, E, R> Future for ErrorBodyFuture<F, R>
where
    F: Future<Output = Result<R, E>>,
    E: Into<BoxError>,
    R: ReadAhead,
    <R::Body as Body>::Error: Into<BoxError>,
{
    type Output = Result<R::Output, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let limit = *this.limit;
        loop {
            match this.state.as_mut().project() {
                FutureStateProj::Waiting { future } => {
                    let response = match ready!(future.poll(cx)) {
                        Ok(response) => response,
                        Err(error) => {
                            this.state.set(FutureState::Done);
                            return Poll::Ready(Err(error.into()));
                        }
                    };
                    if response.status().as_u16() < 400 {
                        this.state.set(FutureState::Done);
                        return Poll::Ready(Ok(response.pass()));
                    }
                    let kept = KeptHead::of(response.status(), response.headers());
                    let (head, body) = response.split();
                    this.state.set(FutureState::Reading {
                        head: Some(head),
                        kept,
                        body: Some(body),
                        read: BoundedRead::start(limit),
                    });
                }
                FutureStateProj::Reading {
                    head,
                    kept,
                    body,
                    read,
                } => {
                    let stream = body.as_mut().expect("polled after completion");
                    let stop = match ready!(read.poll_read(stream, cx)) {
                        Ok(stop) => stop,
                        Err(error) => {
                            let broke_off = BodyBrokeOff::new(*kept, error.into());
                            this.state.set(FutureState::Done);
                            return Poll::Ready(Err(Box::new(broke_off)));
                        }
                    };
                    // What was read is held as one frame (and what the frame that
                    // crossed the limit brought past it as another), then the trailers:
                    // at most three frames, however many the body sent.
                    let bytes = read.take();
                    let mut frames = VecDeque::new();
                    if !bytes.is_empty() {
                        frames.push_back(Frame::data(bytes.clone()));
                    }
                    let rest = match stop {
                        Stop::End => None,
                        Stop::Limit { past } => {
                            if !past.is_empty() {
                                frames.push_back(Frame::data(past));
                            }
                            body.take()
                        }
                        Stop::Trailers(trailers) => {
                            frames.push_back(Frame::trailers(trailers));
                            body.take()
                        }
                    };
                    let rest = rest.filter(|body| !body.is_end_stream());
                    let head = head.take().expect("polled after completion");
                    this.state.set(FutureState::Done);
                    return Poll::Ready(Ok(R::join(head, ErrorBodyBytes(bytes), frames, rest)));
                }
                FutureStateProj::Done => panic!("polled after completion"),
            }
        }
    }
}

impl<F, R: ReadAhead> fmt::Debug for ErrorBodyFuture<F, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            FutureState::Waiting { .. } => "waiting",
            FutureState::Reading { .. } => "reading",
            FutureState::Done => "done",
        };
        f.debug_struct("ErrorBodyFuture")
            .field("state", &state)
            .field("limit", &self.limit)
            .finish()
    }
}

fn to_bytes<D: Buf>(mut data: D) -> Bytes {
    data.copy_to_bytes(data.remaining())
}

pin_project! {
    /// The body of an [`ErrorBody`] response: a success body streamed as it came, or
    /// an error body whose start was read, replayed and followed by the rest.
    ///
    /// Its data is [`Bytes`] (other buffers are converted chunk by chunk; `Bytes`
    /// chunks are moved, not copied) and its error is the wrapped body's. A fallback
    /// that answers for the client builds one with [`full`](Self::full).
    pub struct ResponseBody<B> {
        #[pin]
        kind: BodyKind<B>,
    }
}

pin_project! {
    #[project = BodyKindProj]
    enum BodyKind<B> {
        Streamed {
            #[pin]
            body: B,
        },
        Replayed {
            frames: VecDeque<Frame<Bytes>>,
            rest: Option<Pin<Box<B>>>,
        },
    }
}

impl<B> ResponseBody<B> {
    /// `body`, streamed as it comes.
    pub fn new(body: B) -> Self {
        ResponseBody {
            kind: BodyKind::Streamed { body },
        }
    }

    /// A body of these bytes and nothing else: for fallback answers.
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        let bytes = bytes.into();
        let mut frames = VecDeque::new();
        if !bytes.is_empty() {
            frames.push_back(Frame::data(bytes));
        }
        Self::replayed(frames, None)
    }

    /// A body with no bytes.
    pub fn empty() -> Self {
        Self::replayed(VecDeque::new(), None)
    }

    pub(crate) fn replayed(frames: VecDeque<Frame<Bytes>>, rest: Option<Pin<Box<B>>>) -> Self {
        ResponseBody {
            kind: BodyKind::Replayed { frames, rest },
        }
    }

    /// Whether the body was read in part before it reached the caller (an error
    /// body, or one made with [`full`](Self::full)), rather than streamed as it came.
    pub fn is_buffered(&self) -> bool {
        matches!(self.kind, BodyKind::Replayed { .. })
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            BodyKindProj::Streamed { body } => body
                .poll_frame(cx)
                .map(|frame| frame.map(|frame| frame.map(|frame| frame.map_data(to_bytes)))),
            BodyKindProj::Replayed { frames, rest } => {
                if let Some(frame) = frames.pop_front() {
                    return Poll::Ready(Some(Ok(frame)));
                }
                let Some(body) = rest.as_mut() else {
                    return Poll::Ready(None);
                };
                let frame = ready!(body.as_mut().poll_frame(cx));
                if frame.is_none() {
                    *rest = None;
                }
                Poll::Ready(frame.map(|frame| frame.map(|frame| frame.map_data(to_bytes))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            BodyKind::Streamed { body } => body.is_end_stream(),
            BodyKind::Replayed { frames, rest } => {
                frames.is_empty() && rest.as_ref().is_none_or(|body| body.is_end_stream())
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            BodyKind::Streamed { body } => body.size_hint(),
            BodyKind::Replayed { frames, rest } => {
                let buffered: u64 = frames
                    .iter()
                    .filter_map(Frame::data_ref)
                    .map(|data| data.len() as u64)
                    .sum();
                match rest {
                    Some(body) => SizeHint::with_exact(buffered) + body.size_hint(),
                    None => SizeHint::with_exact(buffered),
                }
            }
        }
    }
}

impl<B> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            BodyKind::Streamed { .. } => f.debug_struct("ResponseBody::Streamed").finish(),
            BodyKind::Replayed { frames, rest } => f
                .debug_struct("ResponseBody::Replayed")
                .field("frames", &frames.len())
                .field("rest", &rest.is_some())
                .finish(),
        }
    }
}
