//! What counts as a failure: the [`Classify`] policy and the [`Outcome`] it returns.
//!
//! A breaker asks its classifier about every result of the wrapped service. An HTTP 503
//! is usually a failure, a 404 usually is not (the caller asked for something that does
//! not exist; the service is fine), and a cancelled request may be neither.
//!
//! ```
//! use std::time::Duration;
//! use tower_circuit_breaker::{CircuitBreakerLayer, Failure, Outcome};
//!
//! #[derive(Debug)]
//! struct Reply { status: u16, retry_after: Option<u64> }
//!
//! let layer = CircuitBreakerLayer::builder()
//!     .name("model")
//!     .build()?
//!     .with_classifier(|result: &Result<Reply, std::io::Error>| match result {
//!         Ok(reply) if reply.status == 429 || reply.status >= 500 => {
//!             let failure = Failure::new(format!("status {}", reply.status));
//!             match reply.retry_after {
//!                 Some(secs) => Outcome::Failure(failure.retry_after(Duration::from_secs(secs))),
//!                 None => Outcome::Failure(failure),
//!             }
//!         }
//!         Ok(_) => Outcome::Success,
//!         // The caller gave up on purpose: say nothing about the service.
//!         Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Outcome::Ignored,
//!         Err(_) => Outcome::failure(),
//!     });
//! # Ok::<(), tower_circuit_breaker::ConfigError>(())
//! ```

use std::borrow::Cow;

use crate::settle::Settlement;
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

    /// A failure with this message.
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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Failure {
    message: Option<Cow<'static, str>>,
    retry_after: Option<Duration>,
    permanent: bool,
}

impl Failure {
    /// A failure with this message.
    pub fn new(message: impl Into<Cow<'static, str>>) -> Self {
        Failure {
            message: Some(message.into()),
            ..Failure::default()
        }
    }

    /// The service said how long to wait (an HTTP `Retry-After`, say). If this failure
    /// opens the breaker, that opening waits this long (bounded by the breaker's
    /// `max_retry_after`) instead of the configured time cooldown; with a cooldown in
    /// calls, the probe waits for both.
    pub fn retry_after(mut self, wait: Duration) -> Self {
        self.retry_after = Some(wait);
        self
    }

    /// The failure will not pass by itself (an exhausted quota, a revoked key): it opens
    /// the breaker at once, and only [`reset`](crate::CircuitBreakerHandle::reset)
    /// closes it; no probe is sent.
    pub fn permanent(mut self) -> Self {
        self.permanent = true;
        self
    }

    /// The message, if one was given.
    pub fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }

    /// The wait the response asked for.
    pub fn retry_after_hint(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Whether this failure keeps the breaker open until reset.
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }

    pub(crate) fn with_default_message(mut self, message: impl FnOnce() -> String) -> Self {
        if self.message.is_none() {
            self.message = Some(message().into());
        }
        self
    }
}

/// Decides what a result of the wrapped service means for the breaker.
///
/// Implemented for every `Fn(&Result<Response, Error>) -> Outcome`, so a closure is a
/// classifier. The classifier sees the wrapped service's own typed error, before it is
/// boxed.
pub trait Classify<Response, Error> {
    /// The outcome of one result.
    fn classify(&self, result: &Result<Response, Error>) -> Outcome;

    /// For a response [`classify`](Self::classify) called a success but whose real
    /// outcome is known only later (a streamed body that may still break): move the
    /// [`Settlement`] into the response, where whatever consumes it settles it, and
    /// return `Ok(())`. The breaker then records nothing now. The default gives the
    /// settlement back, and the success is recorded at once.
    ///
    /// [`http::StreamClassifier`](crate::http) does this for HTTP bodies (feature
    /// `http`). A panic here drops the settlement: the call counts as cancelled.
    fn defer(&self, response: &mut Response, settlement: Settlement) -> Result<(), Settlement> {
        let _ = response;
        Err(settlement)
    }
}

impl<F, Response, Error> Classify<Response, Error> for F
where
    F: Fn(&Result<Response, Error>) -> Outcome,
{
    fn classify(&self, result: &Result<Response, Error>) -> Outcome {
        self(result)
    }
}

/// The default classifier: `Ok` is a success, `Err` is a failure whose message is the
/// error's text.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultClassifier;

impl<Response, Error> Classify<Response, Error> for DefaultClassifier {
    fn classify(&self, result: &Result<Response, Error>) -> Outcome {
        match result {
            Ok(_) => Outcome::Success,
            Err(_) => Outcome::failure(),
        }
    }
}
