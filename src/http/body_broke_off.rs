//! [`BodyBrokeOff`]: a response whose body broke off while it was read.

use std::time::Duration;

use ::http::StatusCode;

use super::kept_head::KeptHead;
use crate::error::BoxError;

/// A response whose body broke off (the connection was reset, closed before the
/// `Content-Length`, the stream yielded an error) while an [`ErrorBodyLayer`] or a
/// [`BufferBodyLayer`] read it: the call ends in this error, whose source is the body's.
///
/// The head arrived whole, so, like [`BodyTooLarge`], it keeps what the breaker needs of
/// it: the status, and the wait a 429 or a 503 asked for (OpenAI's `retry-after-ms`, else
/// `Retry-After`, read as [`HttpClassifier`] reads them, when the response arrived).
/// [`HttpClassifier`] classifies it as it would the response: a 429 with `Retry-After: 20`
/// still opens the breaker at once for 20 seconds (under the classifier's cap), a 503 is a
/// failure; the failure's message says that the body broke off, and why. Any other status
/// (a 200 cut short, a 400) still fails the call, with the same message.
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
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// // A 429 asking for 20 s, whose body the connection cuts off.
/// let client = service_fn(|_: Request<()>| async {
///     let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = vec![
///         Ok(Frame::data(Bytes::from_static(b"{\"error\":"))),
///         Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset")),
///     ];
///     let body = StreamBody::new(stream::iter(frames));
///     let response = Response::builder().status(429).header("retry-after", "20").body(body);
///     Ok::<_, http::Error>(response?)
/// });
/// let breaker = CircuitBreakerLayer::builder().failure_threshold(5).build()?;
/// let handle = breaker.handle();
/// let mut svc = ServiceBuilder::new()
///     .layer(breaker.with_classifier(HttpClassifier::new()))
///     .layer(BufferBodyLayer::new())
///     .service(client);
///
/// let error = svc.ready().await?.call(Request::new(())).await.unwrap_err();
/// let broke_off = error.downcast_ref::<BodyBrokeOff>().unwrap();
/// assert_eq!(broke_off.status(), http::StatusCode::TOO_MANY_REQUESTS);
/// assert_eq!(broke_off.retry_after(), Some(Duration::from_secs(20)));
/// // The server's wait opens the breaker at once, as the 429 itself would.
/// assert_eq!(handle.state(), State::Open);
/// assert!(handle.snapshot().retry_after() > Some(Duration::from_secs(19)));
/// let failure = handle.snapshot().last_failure.unwrap();
/// assert!(failure.message.contains("body broke off"), "{}", failure.message);
/// assert!(failure.message.contains("connection reset"), "{}", failure.message);
/// # Ok(()) }
/// ```
///
/// [`BodyTooLarge`]: super::BodyTooLarge
/// [`BufferBodyLayer`]: super::BufferBodyLayer
/// [`ErrorBodyLayer`]: super::ErrorBodyLayer
/// [`HttpClassifier`]: super::HttpClassifier
#[derive(Debug, thiserror::Error)]
#[error("{status} response body broke off", status = .head.status)]
pub struct BodyBrokeOff {
    head: KeptHead,
    #[source]
    source: BoxError,
}

impl BodyBrokeOff {
    /// The error for a response of which `head` was kept, whose body broke off in
    /// `source`.
    pub(super) fn new(head: KeptHead, source: BoxError) -> Self {
        BodyBrokeOff { head, source }
    }

    /// What it keeps of the response's head.
    pub(super) fn head(&self) -> &KeptHead {
        &self.head
    }

    /// The status of the response.
    pub fn status(&self) -> StatusCode {
        self.head.status
    }

    /// The wait the response asked for: on a 429 or a 503, its `retry-after-ms` or
    /// `Retry-After` as [`HttpClassifier`] reads them (a date measured from when the
    /// response arrived), not yet cut to the classifier's cap; `None` otherwise.
    ///
    /// [`HttpClassifier`]: super::HttpClassifier
    pub fn retry_after(&self) -> Option<Duration> {
        self.head.retry_after
    }

    /// The body's error, unwrapped.
    pub fn into_source(self) -> BoxError {
        self.source
    }
}
