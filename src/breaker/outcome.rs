//! What one result means for a breaker: [`Outcome`], and the [`Failure`] details a
//! failed result carries (its message, how long the service asked to wait, whether it is
//! permanent).

use std::borrow::Cow;
use std::time::Duration;

/// What one result means for the breaker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The service worked: closes a half-open breaker and resets the failure count.
    Success,
    /// The service failed: counts towards tripping, re-opens a half-open breaker.
    Failure(Failure),
    /// Says nothing about the service's health: not counted, and a probe slot it held
    /// is given back.
    Ignored,
}

impl Outcome {
    /// A failure with no message of its own; when the result is an error, the error's
    /// text becomes the message.
    pub fn failure() -> Self {
        Outcome::Failure(Failure::default())
    }

    /// A failure with this message, [redacted](crate::redact) (see [`Failure::new`]).
    pub fn failure_with(message: impl Into<Cow<'static, str>>) -> Self {
        Outcome::Failure(Failure::new(message))
    }

    /// `true` for [`Outcome::Failure`].
    pub fn is_failure(&self) -> bool {
        matches!(self, Outcome::Failure(_))
    }
}

/// Details of a failure: a message for the health table, and what the failed response
/// said about when to come back.
///
/// # Redaction
///
/// Its message is the one place every failure's text enters the breaker: from here it
/// goes to the last failure of snapshots (and their JSON, the admin service's answers),
/// to observers and the expediter's report, and to `tracing` and error texts. So what
/// looks like a credential is taken out as the message is made, by
/// [`redact`](crate::redact) (URL user information and query strings, bearer tokens,
/// `key=` values): nothing downstream can show what was never kept.
///
/// ```
/// use tower_circuit_breaker::Failure;
///
/// let failure = Failure::new("error sending request for url (https://bob:hunter2@api.example/v1?key=SECRET)");
/// assert_eq!(
///     failure.message(),
///     Some("error sending request for url (https://[redacted]@api.example/v1?[redacted])"),
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Failure {
    message: Option<Cow<'static, str>>,
    retry_after: Option<Duration>,
    retry_after_cap: Option<Duration>,
    permanent: bool,
}

impl Failure {
    /// A failure with this message, [redacted](crate::redact): see
    /// [Redaction](Self#redaction).
    pub fn new(message: impl Into<Cow<'static, str>>) -> Self {
        Failure {
            message: Some(redacted(message.into())),
            ..Failure::default()
        }
    }

    /// The service said how long to wait (an HTTP `Retry-After`, say): give the wait as
    /// it asked, uncut. By default this failure opens the breaker at once, whatever the
    /// trip policy's count, and that opening waits this long (bounded by
    /// [`cap_retry_after`](Self::cap_retry_after) and by the breaker's
    /// [`max_retry_after`](crate::Builder::max_retry_after)) instead of the configured
    /// time cooldown; with a cooldown in calls, the probe waits for both. A wait longer
    /// than the bound is still reported as asked
    /// ([`Snapshot::requested_until`](crate::snapshot::Snapshot::requested_until)). With
    /// [`Builder::open_on_retry_after(false)`](crate::Builder::open_on_retry_after) it
    /// counts as one failure, and only an opening it causes waits this long.
    ///
    /// A failure that arrives after the breaker opened (its call was admitted before)
    /// counts for nothing, but its wait still lengthens the opening when it ends later
    /// (see [`Builder::max_retry_after`](crate::Builder::max_retry_after)).
    pub fn retry_after(mut self, wait: Duration) -> Self {
        self.retry_after = Some(wait);
        self
    }

    /// Bounds how long this failure's [`retry_after`](Self::retry_after) holds the
    /// breaker open: the breaker probes after at most `cap` (or its own
    /// [`max_retry_after`](crate::Builder::max_retry_after), the smaller), while the wait
    /// asked for stays in [`requested_wait`](Self::requested_wait) and is reported. What
    /// a classifier with a bound of its own sets (`http::HttpClassifier::max_retry_after`,
    /// feature `http`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_circuit_breaker::Failure;
    ///
    /// let three_days = Duration::from_secs(3 * 24 * 3600);
    /// let failure = Failure::new("429 Too Many Requests")
    ///     .retry_after(three_days)
    ///     .cap_retry_after(Duration::from_secs(300));
    /// assert_eq!(failure.retry_after_hint(), Some(Duration::from_secs(300)));
    /// assert_eq!(failure.requested_wait(), Some(three_days));
    /// ```
    pub fn cap_retry_after(mut self, cap: Duration) -> Self {
        self.retry_after_cap = Some(self.retry_after_cap.map_or(cap, |old| old.min(cap)));
        self
    }

    /// The failure will not pass by itself (an exhausted quota, a revoked key): it opens
    /// the breaker at once, and only [`reset`](crate::CircuitBreakerHandle::reset)
    /// closes it; no probe is sent.
    pub fn permanent(mut self) -> Self {
        self.permanent = true;
        self
    }

    /// The message, if one was given, [redacted](crate::redact).
    pub fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }

    /// The wait this failure holds the breaker open for, before the breaker's own
    /// [`max_retry_after`](crate::Builder::max_retry_after): the wait the response asked
    /// for, bounded by [`cap_retry_after`](Self::cap_retry_after) if one was set.
    pub fn retry_after_hint(&self) -> Option<Duration> {
        let cap = self.retry_after_cap.unwrap_or(Duration::MAX);
        self.retry_after.map(|wait| wait.min(cap))
    }

    /// The wait the response asked for, uncut by any bound: what a report says the
    /// service asked for ("retry after 3 days"), while the breaker probes at the bound.
    pub fn requested_wait(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Whether this failure keeps the breaker open until reset.
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }

    pub(in crate::breaker) fn with_default_message(
        mut self,
        message: impl FnOnce() -> String,
    ) -> Self {
        if self.message.is_none() {
            self.message = Some(redacted(message().into()));
        }
        self
    }
}

/// `message` with what looks like a credential taken out: the one way a message gets
/// into a [`Failure`]. A message with nothing to take out is kept as it is, a static
/// text without an allocation.
fn redacted(message: Cow<'static, str>) -> Cow<'static, str> {
    match message {
        Cow::Borrowed(text) => crate::redact(text),
        Cow::Owned(text) => match crate::redact(&text) {
            Cow::Borrowed(_) => Cow::Owned(text),
            Cow::Owned(clean) => Cow::Owned(clean),
        },
    }
}
