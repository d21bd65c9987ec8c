//! [`Settlement`]: a call's outcome still to be given, for answers whose outcome is
//! known only after the response (a streamed body that may still fail).

use std::fmt;
use std::time::Duration;

use crate::classify::{Failure, Outcome};
use crate::shared::{Lease, Ticket};

/// The right, and the duty, to give one call's outcome later.
///
/// A classifier hands it on with [`Classify::defer`](crate::Classify::defer), usually into
/// the response's body, which settles it when the stream ends: a success, a failure
/// (the stream broke, or ended early), or nothing. Until then the call holds its permit
/// (a half-open probe keeps its slot). Dropped without an outcome (the caller dropped
/// the body), the call counts as cancelled: neither a success nor a failure.
pub struct Settlement {
    held: Held,
    elapsed: Option<Duration>,
}

/// What a call in flight holds: the right to give its outcome.
pub(crate) enum Held {
    /// Admitted on the closed state's lock-free path.
    Fast(Lease<true>),
    /// Admitted by the machine.
    Ticket(Ticket),
}

impl Held {
    /// Records the call's outcome.
    #[inline(always)]
    pub(crate) fn settle(self, outcome: Outcome, elapsed: Option<Duration>) {
        match self {
            Held::Fast(lease) => lease.settle(outcome, elapsed),
            Held::Ticket(ticket) => ticket.settle(outcome, elapsed),
        }
    }
}

impl Settlement {
    #[inline]
    pub(crate) fn new(held: Held, elapsed: Option<Duration>) -> Self {
        Settlement { held, elapsed }
    }

    /// Records `outcome` for the call. The slow-call rule, if set, applies to the time
    /// until the response arrived.
    #[inline]
    pub fn settle(self, outcome: Outcome) {
        self.held.settle(outcome, self.elapsed);
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
        let mut f = f.debug_struct("Settlement");
        match &self.held {
            Held::Fast(lease) => f.field("lease", lease),
            Held::Ticket(ticket) => f.field("ticket", ticket),
        };
        f.finish_non_exhaustive()
    }
}
