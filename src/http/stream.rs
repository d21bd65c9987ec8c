//! Streamed answers settled when their stream ends: see [`StreamBodyLayer`].

use std::fmt;
use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Buf;
use http::{header, Method, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use super::classify::HttpClassifier;
use crate::classify::{Classify, Settlement};
use crate::{Failure, Outcome};

/// Streamed answers: a response whose body breaks, or ends early, counts as a failure
/// when the stream ends, not as the success its headers promised.
///
/// LLM answers arrive as a body stream. The headers say 200, then the connection drops
/// half-way, or the server sends fewer bytes than it announced, or an event stream stops
/// before its end marker. [`StreamBodyLayer`] (inside the breaker) wraps each response
/// body in a [`StreamBody`]; [`StreamClassifier`] (the breaker's classifier) classifies
/// the headers like [`HttpClassifier`] and, for a success, hands the call's
/// [`Settlement`] to the body, which settles it when the stream ends:
///
/// - the stream ends normally (and, if set, its end marker was seen): a success; with an
///   end marker, the success is recorded as soon as the marker arrives (and every byte
///   its `Content-Length` announced, if any), so a caller may stop reading there;
/// - the body yields an error, ends before its `Content-Length`, or ends without its
///   end marker: a failure;
/// - the caller drops the body before the end (or before the end marker): cancelled,
///   neither.
///
/// A body already at its end when the response arrives (a 204, a `Content-Length: 0`)
/// is settled then, by the same rules: a success, unless it owed an end marker or the
/// bytes of its `Content-Length`. A caller that drops it unread has had that outcome.
///
/// A response without a body (to a HEAD request, or a 1xx, 204 or 304) is not held to a
/// `Content-Length` or an end marker.
///
/// A fallback only ever answers a call that was skipped, before any byte: the breaker
/// never swaps an answer whose first byte reached the caller.
///
/// ```
/// use std::convert::Infallible;
/// use bytes::Bytes;
/// use http_body_util::{BodyExt, Full};
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_circuit_breaker::http::{StreamBodyLayer, StreamClassifier};
/// use tower_circuit_breaker::CircuitBreakerLayer;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let breaker = CircuitBreakerLayer::builder().name("model").build()?;
/// let handle = breaker.handle();
/// let mut model = ServiceBuilder::new()
///     .layer(breaker.with_classifier(StreamClassifier::default()))
///     .layer(StreamBodyLayer::new().end_marker(b"data: [DONE]"))
///     .service(service_fn(|_: http::Request<()>| async {
///         Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from("data: hi\n\ndata: [DONE]\n\n"))))
///     }));
/// let answer = model.ready().await?.call(http::Request::new(())).await?.into_inner();
/// assert_eq!(handle.snapshot().counts.successes, 0, "not until the stream ends");
/// let body = answer.into_body().collect().await?.to_bytes();
/// assert!(body.ends_with(b"[DONE]\n\n"));
/// assert_eq!(handle.snapshot().counts.successes, 1);
/// # Ok(()) }
/// ```
///
/// Wraps the bodies of a service's responses in [`StreamBody`], so that
/// [`StreamClassifier`] can settle each call when its stream ends. Place it inside the
/// breaker, over a service of `http::Request`s (it reads the method: the answer to a
/// HEAD request has no body).
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamBodyLayer {
    end_marker: Option<&'static [u8]>,
}

impl StreamBodyLayer {
    /// Streams end when they end; a short body (below its `Content-Length`) is a failure.
    pub fn new() -> Self {
        StreamBodyLayer::default()
    }

    /// A stream must contain `marker` at the start of a line (an event stream's
    /// `data: [DONE]`, say) before it ends, or it counts as cut short. Inside a line (a
    /// model's answer that quotes it) it is no marker.
    ///
    /// An empty `marker` is no marker: there is nothing to wait for, and a stream is
    /// whole at its end, as without one.
    pub fn end_marker(mut self, marker: &'static [u8]) -> Self {
        self.end_marker = Some(marker).filter(|marker| !marker.is_empty());
        self
    }
}

impl<S> Layer<S> for StreamBodyLayer {
    type Service = StreamBodies<S>;

    fn layer(&self, inner: S) -> Self::Service {
        StreamBodies {
            inner,
            end_marker: self.end_marker,
        }
    }
}

/// The service of [`StreamBodyLayer`].
#[derive(Debug, Clone)]
pub struct StreamBodies<S> {
    inner: S,
    end_marker: Option<&'static [u8]>,
}

impl<S, RequestBody, B> Service<Request<RequestBody>> for StreamBodies<S>
where
    S: Service<Request<RequestBody>, Response = Response<B>>,
{
    type Response = Response<StreamBody<B>>;
    type Error = S::Error;
    type Future = StreamBodiesFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<RequestBody>) -> Self::Future {
        StreamBodiesFuture {
            head_request: request.method() == Method::HEAD,
            future: self.inner.call(request),
            end_marker: self.end_marker,
        }
    }
}

pin_project! {
    /// The future of [`StreamBodies`].
    pub struct StreamBodiesFuture<F> {
        #[pin]
        future: F,
        end_marker: Option<&'static [u8]>,
        head_request: bool,
    }
}

impl<F, B, E> Future for StreamBodiesFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<StreamBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.future.poll(cx))?;
        let bodiless = has_no_body(*this.head_request, response.status());
        let expected = response
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .filter(|_| !bodiless);
        let marker = this.end_marker.filter(|_| !bodiless);
        Poll::Ready(Ok(
            response.map(|body| StreamBody::new(body, expected, marker))
        ))
    }
}

/// Whether a response has no body, whatever its headers say (RFC 9110): the answer to a
/// HEAD request, and a 1xx, 204 or 304.
fn has_no_body(head_request: bool, status: StatusCode) -> bool {
    head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
}

impl<F> fmt::Debug for StreamBodiesFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamBodiesFuture").finish_non_exhaustive()
    }
}

pin_project! {
    /// A response body that settles its call when the stream ends (see the
    /// [`StreamBodyLayer`]). Without a settlement (the classifier recorded the outcome
    /// already, or it is not behind a breaker) it is a plain pass-through.
    pub struct StreamBody<B> {
        #[pin]
        inner: B,
        settlement: Option<Settlement>,
        expected: Option<u64>,
        seen: u64,
        marker: Option<&'static [u8]>,
        marker_seen: bool,
        // The last bytes of the previous frame, to find a marker split across frames.
        tail: Vec<u8>,
    }
}

impl<B> StreamBody<B> {
    fn new(inner: B, expected: Option<u64>, marker: Option<&'static [u8]>) -> Self {
        StreamBody {
            inner,
            settlement: None,
            expected,
            seen: 0,
            marker,
            marker_seen: marker.is_none(),
            // The stream's start is a line's start.
            tail: vec![b'\n'],
        }
    }

    /// The wrapped body.
    pub fn get_ref(&self) -> &B {
        &self.inner
    }

    /// What the answer is if its stream has already ended (a body with nothing in it):
    /// whole, or the failure it is. `None` while it may still send something.
    fn ended_already(&self) -> Option<Result<(), Failure>>
    where
        B: Body,
    {
        self.inner
            .is_end_stream()
            .then(|| ended(self.seen, self.expected, self.marker_seen))
    }
}

impl<B> Body for StreamBody<B>
where
    B: Body,
    B::Error: fmt::Display,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        match ready!(this.inner.poll_frame(cx)) {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    *this.seen += data.remaining() as u64;
                    if let (Some(marker), false) = (*this.marker, *this.marker_seen) {
                        *this.marker_seen = find_marker(data, marker, this.tail);
                        // The answer is whole at its end marker: a caller that stops
                        // reading there (as event-stream clients do) has had a success.
                        if *this.marker_seen && ended(*this.seen, *this.expected, true).is_ok() {
                            if let Some(settlement) = this.settlement.take() {
                                settlement.success();
                            }
                        }
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(error)) => {
                if let Some(settlement) = this.settlement.take() {
                    settlement.failure(Failure::new(format!("the answer's stream broke: {error}")));
                }
                Poll::Ready(Some(Err(error)))
            }
            None => {
                if let Some(settlement) = this.settlement.take() {
                    match ended(*this.seen, *this.expected, *this.marker_seen) {
                        Ok(()) => settlement.success(),
                        Err(failure) => settlement.failure(failure),
                    }
                }
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        // Reported false while a settlement waits, so the caller polls to the end and
        // the outcome is given.
        self.settlement.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Whether `marker` is in `data` at the start of a line, read after `tail` (the previous
/// bytes' last `marker.len()`, kept for a marker split across frames and updated here;
/// a line break at first, for the stream's start). Every slice of a buffer made of several
/// (a `Chain`, say) is searched, through [`Buf::chunks_vectored`]; a marker may straddle
/// slices and frames.
fn find_marker<D: Buf>(data: &D, marker: &[u8], tail: &mut Vec<u8>) -> bool {
    const ON_STACK: usize = 16;
    let mut on_stack = [IoSlice::new(&[]); ON_STACK];
    let mut on_heap: Vec<IoSlice<'_>>;
    let mut slices: &mut [IoSlice<'_>] = &mut on_stack;
    let filled = loop {
        let filled = data.chunks_vectored(slices);
        let total: usize = slices[..filled].iter().map(|slice| slice.len()).sum();
        // All of it, or all the buffer shows (one that does not override
        // `chunks_vectored` shows its first slice only).
        if total >= data.remaining() || filled < slices.len() {
            break filled;
        }
        on_heap = vec![IoSlice::new(&[]); slices.len() * 2];
        slices = &mut on_heap;
    };
    // The marker after a line break: the break and all of the marker but its last byte
    // are kept for the next slice.
    let keep = marker.len();
    for slice in &slices[..filled] {
        tail.extend_from_slice(slice);
        let at_a_line_start = |window: &[u8]| window[0] == b'\n' && &window[1..] == marker;
        if tail.windows(marker.len() + 1).any(at_a_line_start) {
            return true;
        }
        let drop = tail.len().saturating_sub(keep);
        tail.drain(..drop);
    }
    false
}

/// Whether a stream that has given `seen` bytes (of `expected`, if announced), its end
/// marker seen or not, is a whole answer; if not, the failure it is.
fn ended(seen: u64, expected: Option<u64>, marker_seen: bool) -> Result<(), Failure> {
    match (expected.filter(|&n| seen < n), marker_seen) {
        (Some(n), _) => Err(Failure::new(format!(
            "the answer's stream ended early: {seen} of {n} bytes"
        ))),
        (None, false) => Err(Failure::new(
            "the answer's stream ended before its end marker",
        )),
        (None, true) => Ok(()),
    }
}

impl<B> fmt::Debug for StreamBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamBody")
            .field("settling", &self.settlement.is_some())
            .field("expected", &self.expected)
            .field("seen", &self.seen)
            .finish_non_exhaustive()
    }
}

/// [`HttpClassifier`] for responses with a [`StreamBody`]: statuses and headers are
/// classified the same way, and a success is settled when its stream ends.
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamClassifier {
    headers: HttpClassifier,
}

impl StreamClassifier {
    /// Classifies headers with `headers` (its Retry-After cap, its quota markers).
    pub fn new(headers: HttpClassifier) -> Self {
        StreamClassifier { headers }
    }
}

/// A body already at its end when the response arrives (a 204, a `Content-Length: 0`) is
/// whole then, or cut short (an end marker to wait for, a length announced and not sent):
/// its outcome is recorded at once, so a caller that drops it unread has had one.
impl<B: Body, E: 'static> Classify<Response<StreamBody<B>>, E> for StreamClassifier {
    fn classify(&self, result: &Result<Response<StreamBody<B>>, E>) -> Outcome {
        let outcome = self.headers.classify(result);
        match (outcome, result) {
            // Only an answer's stream is held to its end marker: a caller's 4xx error body
            // (a success to the breaker) has none, and is no broken stream.
            (Outcome::Success, Ok(response)) if !response.status().is_success() => Outcome::Success,
            (Outcome::Success, Ok(response)) => match response.body().ended_already() {
                Some(Err(failure)) => Outcome::Failure(failure),
                Some(Ok(())) | None => Outcome::Success,
            },
            (outcome, _) => outcome,
        }
    }

    fn defer(
        &self,
        response: &mut Response<StreamBody<B>>,
        settlement: Settlement,
    ) -> Result<(), Settlement> {
        // Nothing is left to wait for (the stream ended, or the answer is no stream but a
        // caller's error): the success is recorded now.
        if !response.status().is_success() || response.body().ended_already().is_some() {
            return Err(settlement);
        }
        response.body_mut().settlement = Some(settlement);
        Ok(())
    }
}
