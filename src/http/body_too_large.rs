//! [`BodyTooLarge`]: a response whose body was larger than a buffer's limit.

use std::time::Duration;

use ::http::response::Parts;
use ::http::StatusCode;

#[cfg(doc)]
use super::bounded_read::MAX_EMPTY_FRAMES;
use super::kept_head::KeptHead;

/// A body larger than a [`BufferBodyLayer`]'s limit (or sending more than
/// [`MAX_EMPTY_FRAMES`] frames with no data in them): the response is not read further,
/// and the call ends in this error.
///
/// It keeps what the breaker needs of the response it stands for: the status, and the
/// wait a 429 or a 503 asked for (OpenAI's `retry-after-ms`, else `Retry-After`, read as
/// [`HttpClassifier`] reads them, when the response arrived). So [`HttpClassifier`]
/// classifies the error as it would the response: a 429 with `Retry-After: 20` still
/// opens the breaker at once for 20 seconds (under the classifier's cap), a 503 is a
/// failure named by its status. A status that is no failure of the service (a 200 too
/// large to buffer, say) still fails the call, with this error's text as the message.
/// The body is not kept, so a quota error in it is not seen: such a 429 counts as a rate
/// limit.
///
/// ```
/// use std::time::Duration;
/// use bytes::Bytes;
/// use http::{Request, Response};
/// use http_body_util::Full;
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_circuit_breaker::http::{BodyTooLarge, BufferBodyLayer, HttpClassifier};
/// use tower_circuit_breaker::{CircuitBreakerLayer, State};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let client = service_fn(|_: Request<()>| async {
///     let body = Full::new(Bytes::from(vec![b' '; 4096]));
///     let response = Response::builder().status(429).header("retry-after", "20").body(body);
///     Ok::<_, http::Error>(response?)
/// });
/// let breaker = CircuitBreakerLayer::builder().failure_threshold(5).build()?;
/// let handle = breaker.handle();
/// let mut svc = ServiceBuilder::new()
///     .layer(breaker.with_classifier(HttpClassifier::new()))
///     .layer(BufferBodyLayer::new().limit(1024))
///     .service(client);
///
/// let error = svc.ready().await?.call(Request::new(())).await.unwrap_err();
/// let too_large = error.downcast_ref::<BodyTooLarge>().unwrap();
/// assert_eq!(too_large.status(), http::StatusCode::TOO_MANY_REQUESTS);
/// assert_eq!(too_large.retry_after(), Some(Duration::from_secs(20)));
/// // The server's wait opens the breaker at once, as the 429 itself would.
/// assert_eq!(handle.state(), State::Open);
/// assert!(handle.snapshot().retry_after() > Some(Duration::from_secs(19)));
/// # Ok(()) }
/// ```
///
/// [`BufferBodyLayer`]: super::BufferBodyLayer
/// [`HttpClassifier`]: super::HttpClassifier
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "{status} response body larger than the buffer limit of {limit} bytes",
    status = .head.status
)]
pub struct BodyTooLarge {
    limit: usize,
    head: KeptHead,
}

impl BodyTooLarge {
    /// The error for the response whose head is `head`, past `limit` bytes.
    pub(super) fn of(head: &Parts, limit: usize) -> Self {
        BodyTooLarge {
            limit,
            head: KeptHead::of(head.status, &head.headers),
        }
    }

    /// What it keeps of the response's head.
    pub(super) fn head(&self) -> &KeptHead {
        &self.head
    }

    /// The limit, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
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
}
