//! When a call moves on to the next provider: [`FailoverPolicy`].

use tower::BoxError;

use crate::{Answer, Verdict};

/// What one provider's breaker gave for a call it made: an answer (the wrapped
/// service's), or an error (the service's, a timeout's, a transport's).
///
/// Calls the breaker skipped never reach the policy: a skip always moves on.
#[derive(Debug)]
pub enum Attempted<'a, R> {
    /// The provider answered; the breaker's classifier said
    /// [`verdict`](Answer::verdict).
    Answered(&'a Answer<R>),
    /// The call failed with this error.
    Failed(&'a BoxError),
}

/// Decides whether a call the provider answered or failed moves on to the next provider,
/// and how that provider's failure is described in the [`Route`](super::Route).
///
/// The default, [`OnFailure`], moves on after every failure the breaker counted (5xx,
/// 429, timeouts, transport errors with the HTTP classifier) and after every error, and
/// keeps every answer the classifier called a success (a caller's 4xx included). A
/// closure `Fn(&Attempted<'_, R>) -> bool` is a policy too: it decides, and the
/// description is the default one.
pub trait FailoverPolicy<R> {
    /// `true`: pass this provider and try the next one.
    fn fail_over(&self, attempted: &Attempted<'_, R>) -> bool;

    /// What the [`Route`](super::Route) says of a provider passed this way, before
    /// [redaction](crate::redact); `None` (the default): an error's text, or for an
    /// answer the failure its breaker recorded for it.
    fn describe(&self, attempted: &Attempted<'_, R>) -> Option<String> {
        let _ = attempted;
        None
    }
}

/// Moves on after every counted failure and every error; keeps every other answer.
#[derive(Debug, Clone, Copy, Default)]
pub struct OnFailure;

impl<R> FailoverPolicy<R> for OnFailure {
    fn fail_over(&self, attempted: &Attempted<'_, R>) -> bool {
        match attempted {
            Attempted::Answered(answer) => answer.verdict() == Some(Verdict::Failure),
            Attempted::Failed(_) => true,
        }
    }
}

impl<R, F> FailoverPolicy<R> for F
where
    F: Fn(&Attempted<'_, R>) -> bool,
{
    fn fail_over(&self, attempted: &Attempted<'_, R>) -> bool {
        self(attempted)
    }
}
