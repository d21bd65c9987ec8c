//! [`HttpClassifier`]: what an HTTP response means for the breaker.

use std::time::Duration;

use ::http::{HeaderMap, Response, StatusCode};

use super::body_broke_off::BodyBrokeOff;
use super::body_too_large::BodyTooLarge;
use super::error_body_bytes::ErrorBodyBytes;
use super::kept_head::KeptHead;
use super::retry_after::requested_wait;
use crate::classify::Classify;
use crate::error::BoxError;
use crate::error_text::text_with_sources;
use crate::{Failure, Outcome};

/// The default bound on a `Retry-After` wait: 5 minutes.
const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(5 * 60);

/// The default markers of a permanent failure.
pub(super) const DEFAULT_PERMANENT_MARKERS: &[&str] = &["insufficient_quota"];

/// Classifies `http::Response`s and transport errors for an HTTP model or tool client.
///
/// | Result | Outcome |
/// | --- | --- |
/// | `Err(_)`: the request never got an answer (connection refused or reset, a timeout, a body that broke off) | failure, with the error's text as its message |
/// | `Err(_)` that is a [`BodyTooLarge`] (a 429 or 5xx response too large for a [`BufferBodyLayer`](super::BufferBodyLayer)) | as the response would be: failure named by its status, opening for its `retry-after-ms` or `Retry-After` as below |
/// | `Err(_)` that is a [`BodyBrokeOff`] (a 429 or 5xx response whose body broke off while an [`ErrorBodyLayer`](super::ErrorBodyLayer) or a [`BufferBodyLayer`](super::BufferBodyLayer) read it) | as the response would be, opening for its wait as below; the message says the body broke off, and why |
/// | 5xx, 429, 408 | failure, with the status as its message (`503 Service Unavailable`) |
/// | 429 or 503 with `retry-after-ms` or `Retry-After` | failure that opens the breaker at once and holds it open for that long ([`Failure::retry_after`], [`Builder::open_on_retry_after`](crate::Builder::open_on_retry_after)), at most [`max_retry_after`](Self::max_retry_after); a longer wait is kept as asked ([`Failure::requested_wait`]) and reported |
/// | a 429, 402, 403 or 5xx whose error body names a quota error (`"insufficient_quota"`; not another 4xx, whose body may echo the caller's input) | permanent failure ([`Failure::permanent`]): open until [`reset`](crate::CircuitBreakerHandle::reset), with a message that says what the code means (`429 Too Many Requests: insufficient_quota (the quota is exhausted)`) |
/// | 401, 403, with [`auth_errors`](Self::auth_errors) | failure, named by its status |
/// | other 4xx | success |
/// | 1xx, 2xx, 3xx | success |
///
/// A 408 Request Timeout is the server giving up on a request it did not get in time:
/// transient, as a 5xx is (Polly's transient HTTP errors are 5xx and 408 too). Any other
/// 4xx but 429 is the caller's fault, not the service's: a bad request, a missing model,
/// a rejected key for one request. The service answered, and answered
/// correctly; opening the breaker would punish every other caller for one bad request.
/// Such a 4xx is a success for the breaker (it resets the count of failures in a
/// row). Handle it in the caller.
///
/// # Rate limits and exhausted quotas
///
/// OpenAI answers both "slow down" and "you have no credit left" with a 429; only the
/// body tells them apart (`"code": "insufficient_quota"`). A rate limit passes by
/// itself, so the breaker opens at once for the `Retry-After` wait and probes again; an
/// exhausted quota does not, so the breaker stays open until a person resets it, and
/// no probe is sent meanwhile.
///
/// The response body is a stream that a classifier cannot read. Put an
/// [`ErrorBodyLayer`](super::ErrorBodyLayer) between the breaker and the client: it
/// reads the first bytes of every error body into an [`ErrorBodyBytes`] extension,
/// which this classifier searches. Without it, a quota error counts as a rate limit.
/// The markers are searched as JSON strings (in double quotes), with no JSON parser;
/// set them with [`permanent_markers`](Self::permanent_markers).
///
/// # `Retry-After`
///
/// Read on a 429 or a 503, in delta-seconds (`Retry-After: 120`) or as an HTTP date
/// (`Retry-After: Wed, 21 Oct 2026 07:28:00 GMT`, measured from
/// [`SystemTime::now`](std::time::SystemTime::now)).
/// The breaker probes after at most [`max_retry_after`](Self::max_retry_after) (default
/// 5 minutes), so that a misconfigured server cannot park it for a day; the breaker bounds
/// the wait again with its own
/// [`Builder::max_retry_after`](crate::Builder::max_retry_after), and the smaller bound
/// wins. A longer wait is not lost: the failure carries it uncut
/// ([`Failure::requested_wait`]; [`Failure::retry_after_hint`] is the bounded one), and
/// the breaker reports it beside its next probe
/// ([`Snapshot::requested_until`](crate::snapshot::Snapshot::requested_until)), so that
/// a provider's monthly spend limit reads "retry after 3 days", not "5 minutes". A date in the past or a value that is neither form is ignored: the breaker's
/// own cooldown applies. `Retry-After: 0` is honoured: the opening waits no time (with
/// a cooldown in calls, it still waits for those calls).
///
/// OpenAI and Azure OpenAI also send `retry-after-ms`, the wait in milliseconds
/// (`retry-after-ms: 1500`, possibly with a fraction); it is more precise, so, as
/// OpenAI's own SDKs do, it is read first and `Retry-After` only without it (or when it
/// is not a non-negative number).
///
/// ```
/// use std::time::Duration;
/// use http::Response;
/// use tower_circuit_breaker::http::HttpClassifier;
/// use tower_circuit_breaker::Outcome;
/// use tower_circuit_breaker::classify::Classify;
///
/// let classifier = HttpClassifier::new().max_retry_after(Duration::from_secs(60));
/// let limited: Result<_, std::io::Error> = Ok(Response::builder()
///     .status(429)
///     .header("retry-after", "3600")
///     .body(())
///     .unwrap());
/// let Outcome::Failure(failure) = classifier.classify(&limited) else { unreachable!() };
/// assert_eq!(failure.message(), Some("429 Too Many Requests"));
/// assert_eq!(failure.retry_after_hint(), Some(Duration::from_secs(60)), "the breaker's wait");
/// assert_eq!(failure.requested_wait(), Some(Duration::from_secs(3600)), "the server's");
///
/// let not_found: Result<_, std::io::Error> = Ok(Response::builder().status(404).body(()).unwrap());
/// assert_eq!(classifier.classify(&not_found), Outcome::Success);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpClassifier {
    max_retry_after: Duration,
    permanent_markers: &'static [&'static str],
    auth_errors: bool,
}

impl Default for HttpClassifier {
    fn default() -> Self {
        HttpClassifier {
            max_retry_after: DEFAULT_MAX_RETRY_AFTER,
            permanent_markers: DEFAULT_PERMANENT_MARKERS,
            auth_errors: false,
        }
    }
}

impl HttpClassifier {
    /// The classifier with its defaults: `Retry-After` bounded by 5 minutes,
    /// `"insufficient_quota"` permanent.
    pub fn new() -> Self {
        Self::default()
    }

    /// The longest a `Retry-After` header's wait holds the breaker open; the probe goes
    /// after at most this long ([`Failure::cap_retry_after`]), while the wait asked for
    /// is kept and reported ([`Failure::requested_wait`]). Default 5 minutes.
    /// `Duration::ZERO` turns every wait into "probe on the next call".
    pub fn max_retry_after(mut self, cap: Duration) -> Self {
        self.max_retry_after = cap;
        self
    }

    /// The error codes that make a failure permanent when an error body contains one
    /// of them as a JSON string (`"insufficient_quota"`, in double quotes). Replaces
    /// the default, `["insufficient_quota"]`; an empty list makes no failure
    /// permanent.
    pub fn permanent_markers(mut self, markers: &'static [&'static str]) -> Self {
        self.permanent_markers = markers;
        self
    }

    /// Whether a 401 or a 403 is a failure of the service (default `false`: the caller's,
    /// as another 4xx is). Turn it on where the client sends the service a key of its own,
    /// not the caller's: a 401 or 403 then says that key is revoked or out of its scope,
    /// and every call will get the same answer until a person changes the key. Counted as
    /// failures, they open the breaker: the calls go to a fallback or the next provider
    /// with nothing sent, and a probe tries the key again after the cooldown. This is what
    /// `llm::LlmClient` (feature `llm`) does for each provider when its failover moves
    /// on after a 401 or 403 ([`HttpFailover::auth_errors`](super::HttpFailover::auth_errors)).
    ///
    /// ```
    /// use http::Response;
    /// use tower_circuit_breaker::classify::Classify;
    /// use tower_circuit_breaker::http::HttpClassifier;
    /// use tower_circuit_breaker::Outcome;
    ///
    /// let revoked: Result<_, std::io::Error> = Ok(Response::builder().status(401).body(()).unwrap());
    /// assert_eq!(HttpClassifier::new().classify(&revoked), Outcome::Success);
    /// let Outcome::Failure(failure) = HttpClassifier::new().auth_errors(true).classify(&revoked) else {
    ///     unreachable!()
    /// };
    /// assert_eq!(failure.message(), Some("401 Unauthorized"));
    /// ```
    pub fn auth_errors(mut self, yes: bool) -> Self {
        self.auth_errors = yes;
        self
    }

    /// The outcome of a response. Reads the status, the `Retry-After` header and an
    /// [`ErrorBodyBytes`] extension if there is one.
    pub fn classify_response<B>(&self, response: &Response<B>) -> Outcome {
        let error_body = response
            .extensions()
            .get::<ErrorBodyBytes>()
            .map(|body| body.as_bytes());
        self.classify_parts(response.status(), response.headers(), error_body)
    }

    /// The outcome of a response given by its parts: for clients whose response type
    /// is not an `http::Response`. `error_body` is the start of the body of an error
    /// response, if it was read.
    pub fn classify_parts(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        error_body: Option<&[u8]>,
    ) -> Outcome {
        if let Some(named) = permanent_failure_named(status, error_body, self.permanent_markers) {
            let message = format!("{}: {named}", status_text(status));
            return Outcome::Failure(Failure::new(message).permanent());
        }
        self.status_outcome(status, requested_wait(status, headers), || {
            status_text(status)
        })
    }

    /// What `status` says of the service, with the wait its response asked for
    /// ([`requested_wait`]), bounded by the cap and kept uncut; a failure's message is
    /// `message()`.
    fn status_outcome(
        &self,
        status: StatusCode,
        wait: Option<Duration>,
        message: impl FnOnce() -> String,
    ) -> Outcome {
        let fails = fails_the_service(status) || (self.auth_errors && refuses_the_key(status));
        if !fails {
            return Outcome::Success;
        }
        let failure = Failure::new(message());
        match wait {
            Some(wait) => Outcome::Failure(
                failure
                    .retry_after(wait)
                    .cap_retry_after(self.max_retry_after),
            ),
            None => Outcome::Failure(failure),
        }
    }

    /// The outcome of a call that ended in `error`: a response whose head arrived and
    /// whose body was not read whole ([`BodyTooLarge`], [`BodyBrokeOff`]) as its status
    /// and its wait say when they make it a failure of the service (a 429 still opens the
    /// breaker for the server's wait); any other error, or a status that is no failure,
    /// is a failure whose message the breaker fills in (the error's text with its
    /// sources).
    pub(super) fn classify_error<E: 'static>(&self, error: &E) -> Outcome {
        if let Some(unread) = unread_body_in(error) {
            let head = unread.head();
            let outcome = self.status_outcome(head.status, head.retry_after, || unread.message());
            if outcome.is_failure() {
                return outcome;
            }
        }
        Outcome::failure()
    }
}

/// The permanent failure a response of `status` names in its error body, one of
/// `markers`, with what it means (`insufficient_quota (the quota is exhausted)`); `None`
/// when it names none, or when its status is a caller's mistake ([`names_an_account`]).
pub(super) fn permanent_failure_named(
    status: StatusCode,
    body: Option<&[u8]>,
    markers: &[&str],
) -> Option<String> {
    if !names_an_account(status) {
        return None;
    }
    let body = body?;
    let marker = markers
        .iter()
        .find(|marker| contains_json_string(body, marker.as_bytes()))?;
    Some(match meaning_of(marker) {
        Some(meaning) => format!("{marker} ({meaning})"),
        None => (*marker).to_owned(),
    })
}

impl<B, E: 'static> Classify<Response<B>, E> for HttpClassifier {
    fn classify(&self, result: &Result<Response<B>, E>) -> Outcome {
        match result {
            Ok(response) => self.classify_response(response),
            Err(error) => self.classify_error(error),
        }
    }
}

/// Whether a response of `status` may say the account's quota is exhausted: a 429, a
/// 402 (payment required), a 403 or a 5xx. Not another 4xx: a caller's mistake, whose
/// body may echo the caller's input (a validation error quoting `"insufficient_quota"`
/// would otherwise hold the breaker open for everyone until a reset).
fn names_an_account(status: StatusCode) -> bool {
    matches!(status.as_u16(), 402 | 403 | 429) || status.is_server_error()
}

/// Whether a response of `status` refuses the key it was sent with: a 401 or a 403. A
/// failure of the service only where the key is the client's own
/// ([`HttpClassifier::auth_errors`]), and then a reason to move on
/// ([`HttpFailover::auth_errors`](super::HttpFailover::auth_errors)).
pub(super) fn refuses_the_key(status: StatusCode) -> bool {
    matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN)
}

/// Whether a response of `status` is a failure of the service: a 5xx, a 429 (too many
/// requests) or a 408 (the server timed out waiting for the request).
fn fails_the_service(status: StatusCode) -> bool {
    status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
}

/// An error that ended a call whose response's head arrived and whose body was not read
/// whole.
enum UnreadBody<'a> {
    TooLarge(&'a BodyTooLarge),
    BrokeOff(&'a BodyBrokeOff),
}

impl UnreadBody<'_> {
    fn head(&self) -> &KeptHead {
        match self {
            UnreadBody::TooLarge(too_large) => too_large.head(),
            UnreadBody::BrokeOff(broke_off) => broke_off.head(),
        }
    }

    /// The message of the failure it is: the status for a body too large (it says all
    /// the service did wrong), the break and its cause for a body that broke off.
    fn message(&self) -> String {
        match self {
            UnreadBody::TooLarge(too_large) => status_text(too_large.status()),
            UnreadBody::BrokeOff(broke_off) => text_with_sources(*broke_off),
        }
    }
}

/// The [`BodyTooLarge`] or [`BodyBrokeOff`] a [`BoxError`] is, or has among its sources.
fn unread_body_in<E: 'static>(error: &E) -> Option<UnreadBody<'_>> {
    let error = (error as &dyn std::any::Any).downcast_ref::<BoxError>()?;
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(&**error);
    while let Some(error) = next {
        if let Some(too_large) = error.downcast_ref::<BodyTooLarge>() {
            return Some(UnreadBody::TooLarge(too_large));
        }
        if let Some(broke_off) = error.downcast_ref::<BodyBrokeOff>() {
            return Some(UnreadBody::BrokeOff(broke_off));
        }
        next = error.source();
    }
    None
}

/// What a permanent error code of OpenAI's (and the APIs that copy it) means, for a
/// person reading the failure: an exhausted quota must say so.
fn meaning_of(marker: &str) -> Option<&'static str> {
    match marker {
        "insufficient_quota" => Some("the quota is exhausted"),
        "billing_hard_limit_reached" => Some("the billing limit is reached"),
        "invalid_api_key" => Some("the API key is invalid"),
        "account_deactivated" => Some("the account is deactivated"),
        _ => None,
    }
}

/// `503 Service Unavailable`, or `599` for a status with no canonical reason.
fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

/// Whether `needle` appears in `haystack` between double quotes.
pub(crate) fn contains_json_string(haystack: &[u8], needle: &[u8]) -> bool {
    if needle.is_empty() || haystack.len() < needle.len() + 2 {
        return false;
    }
    haystack
        .windows(needle.len() + 2)
        .any(|w| w[0] == b'"' && w[w.len() - 1] == b'"' && &w[1..w.len() - 1] == needle)
}

#[cfg(test)]
mod tests {
    use super::contains_json_string;

    #[test]
    fn markers_match_only_as_json_strings() {
        let body = br#"{"error":{"code":"insufficient_quota"}}"#;
        assert!(contains_json_string(body, b"insufficient_quota"));
        assert!(!contains_json_string(
            b"insufficient_quota",
            b"insufficient_quota"
        ));
        assert!(!contains_json_string(
            br#""not_insufficient_quota""#,
            b"insufficient_quota"
        ));
        assert!(!contains_json_string(br#""""#, b""));
    }
}
