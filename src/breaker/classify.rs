//! What counts as a failure: the [`Classify`] policy and the [`Outcome`] it returns;
//! [`DefaultClassifier`] (every `Err` a failure), and the [`Settlement`] of an answer
//! whose outcome is known only later (a streamed body).
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
//! # Ok::<(), tower_circuit_breaker::error::ConfigError>(())
//! ```

use crate::breaker::outcome::Outcome;

pub use crate::breaker::settle::Settlement;

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
    /// `http::StreamClassifier` (feature `http`) does this for HTTP bodies. A panic here
    /// drops the settlement: the call counts as cancelled.
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
