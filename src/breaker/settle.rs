//! [`Settlement`]: a call's outcome still to be given, for answers whose outcome is
//! known only after the response (a streamed body that may still fail).

use std::fmt;
use std::time::Duration;

use crate::breaker::outcome::{Failure, Outcome};
use crate::breaker::shared::Permit;

/// The right, and the duty, to give one call's outcome later.
///
/// A classifier hands it on with [`Classify::defer`](crate::classify::Classify::defer), usually into
/// the response's body, which settles it when the stream ends: a success, a failure
/// (the stream broke, or ended early), or nothing. Until then the call holds its permit
/// (a half-open probe keeps its slot). Dropped without an outcome (the caller dropped
/// the body), the call counts as cancelled: neither a success nor a failure.
pub struct Settlement {
    permit: Permit,
    elapsed: Option<Duration>,
}

impl Settlement {
    #[inline]
    pub(in crate::breaker) fn new(permit: Permit, elapsed: Option<Duration>) -> Self {
        Settlement { permit, elapsed }
    }

    /// Records `outcome` for the call. The slow-call rule, if set, applies to the time
    /// until the response arrived.
    #[inline]
    pub fn settle(self, outcome: Outcome) {
        self.permit.settle(outcome, self.elapsed);
    }

    /// Records a success.
    #[inline]
    pub fn success(self) {
        self.settle(Outcome::Success);
    }

    /// Records a failure.
    pub fn failure(self, failure: Failure) {
        self.settle(Outcome::Failure(failure));
    }

    /// Records that the outcome says nothing about the service.
    pub fn ignored(self) {
        self.settle(Outcome::Ignored);
    }
}

impl fmt::Debug for Settlement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settlement")
            .field("permit", &self.permit)
            .finish_non_exhaustive()
    }
}
