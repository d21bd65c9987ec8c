//! What a call holds while it runs: a [`Lease`] (the closed state's lock-free path) or
//! a [`Ticket`] (a permit from the machine). Dropped without an outcome, either hands the
//! call back to the machine.

use std::sync::Arc;
use std::time::Duration;

use super::Shared;
use crate::classify::Outcome;
use crate::machine::{epoch_generation, Admission, Permit};

/// A permit held by a reserved service or a call in flight. Dropped without an outcome,
/// it hands the permit back: a probe slot is freed, nothing counts as a success.
pub(crate) struct Ticket {
    shared: Arc<Shared>,
    permit: Permit,
    called: bool,
    settled: bool,
}

impl Ticket {
    #[inline]
    pub(crate) fn new(shared: Arc<Shared>, permit: Permit) -> Self {
        Ticket {
            shared,
            permit,
            called: false,
            settled: false,
        }
    }

    pub(crate) fn permit(&self) -> &Permit {
        &self.permit
    }

    /// Whether the call must be timed (a slow-call rule is set).
    pub(crate) fn times_calls(&self) -> bool {
        self.shared.times_calls
    }

    /// The wrapped service is about to be called with this permit.
    pub(crate) fn mark_called(&mut self) {
        self.called = true;
    }

    #[inline]
    pub(crate) fn settle(mut self, outcome: Outcome, elapsed: Option<Duration>) {
        self.settled = true;
        self.shared.record(self.permit, outcome, elapsed);
    }

    /// The permit went stale before its call: decide again.
    pub(crate) fn revalidate(mut self) -> Admission {
        self.settled = true;
        self.shared.revalidate(self.permit)
    }
}

impl Drop for Ticket {
    #[inline]
    fn drop(&mut self) {
        if !self.settled {
            self.shared.release(self.permit, self.called);
        }
    }
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("breaker", &self.shared.name)
            .field("permit", &self.permit)
            .field("called", &self.called)
            .finish()
    }
}

/// A call admitted on the closed state's lock-free path, held by a reserved service
/// (`CALLED == false`) or by the call's future (`CALLED == true`). Two words, the
/// breaker and the epoch, so that the path most calls take moves nothing bigger (a
/// [`Ticket`] carries a whole [`Permit`]). Dropped while held, it hands the call back
/// to the machine: abandoned before the call, or cancelled after it.
pub(crate) struct Lease<const CALLED: bool> {
    /// `None` once settled or handed on, or for an empty slot.
    shared: Option<Arc<Shared>>,
    epoch: u64,
}

impl<const CALLED: bool> Lease<CALLED> {
    /// An empty slot.
    pub(crate) const EMPTY: Self = Lease {
        shared: None,
        epoch: 0,
    };

    /// A lease on `shared` for a call admitted on the lock-free path in `epoch`.
    #[inline]
    pub(crate) fn new(shared: Arc<Shared>, epoch: u64) -> Self {
        Lease {
            shared: Some(shared),
            epoch,
        }
    }

    #[inline]
    pub(crate) fn is_held(&self) -> bool {
        self.shared.is_some()
    }

    /// Takes the lease out, leaving an empty slot.
    #[inline]
    pub(crate) fn take(&mut self) -> Self {
        self.moved()
    }

    /// The lease, moved into a lease of the other kind or the same one.
    #[inline]
    fn moved<const TO: bool>(&mut self) -> Lease<TO> {
        Lease {
            shared: self.shared.take(),
            epoch: self.epoch,
        }
    }

    fn permit(&self) -> Permit {
        Permit::fast(epoch_generation(self.epoch))
    }
}

impl Lease<false> {
    /// Whether the call may go ahead as admitted: no kill, no change since.
    #[inline]
    pub(crate) fn still_valid(&self) -> bool {
        self.shared
            .as_ref()
            .is_some_and(|shared| shared.still_valid_epoch(self.epoch))
    }

    /// The wrapped service is about to be called.
    #[inline]
    pub(crate) fn called(mut self) -> Lease<true> {
        self.moved()
    }

    /// The lease, on `shared`, went stale before its call: decide again.
    pub(crate) fn revalidate(mut self, shared: &Shared) -> Admission {
        self.shared = None;
        shared.revalidate(self.permit())
    }
}

impl Lease<true> {
    /// Records the call's outcome.
    #[inline(always)]
    pub(crate) fn settle(mut self, outcome: Outcome, elapsed: Option<Duration>) {
        if let Some(shared) = self.shared.take() {
            shared.record(self.permit(), outcome, elapsed);
        }
    }
}

impl<const CALLED: bool> Drop for Lease<CALLED> {
    #[inline]
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            release_lease(shared, self.permit(), CALLED);
        }
    }
}

/// A lease dropped while held: kept out of line, so that dropping an empty one (which
/// every call does) stays a test and a jump.
#[cold]
#[inline(never)]
fn release_lease(shared: Arc<Shared>, permit: Permit, called: bool) {
    shared.release(permit, called);
}

impl<const CALLED: bool> std::fmt::Debug for Lease<CALLED> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("breaker", &self.shared.as_ref().map(|shared| &shared.name))
            .field("epoch", &self.epoch)
            .field("called", &CALLED)
            .finish()
    }
}
