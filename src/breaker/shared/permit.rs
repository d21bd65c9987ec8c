//! [`Permit`]: the right to make one call, from `poll_ready` to the end of its future;
//! [`Admitted`]: a plain call held from `poll_ready` to `call`, before its permit is made.

// Each `#[inline(always)]` here pays in the awaited benchmark (the permit, the tally and
// the service: docs/performance.md, "Inlining").
use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use super::Shared;
use crate::breaker::answer::Source;
use crate::breaker::machine::door::{Door, Epoch};
use crate::breaker::machine::Kind;
use crate::breaker::outcome::Outcome;
use crate::breaker::state::{Reason, State};

/// What a permit is, in one word: `epoch << 8 | timed << 6 | settled << 5 | called << 4 |
/// reason << 2 | kind` (bit 7 is [`Admitted`]'s).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Ticket(u64);

impl Ticket {
    const PASS: u64 = 3;
    const CALLED: u64 = 1 << 4;
    const SETTLED: u64 = 1 << 5;
    const TIMED: u64 = 1 << 6;

    /// A call the machine records as `kind`; `shadowed` for an observe-only shadow call.
    #[inline(always)]
    pub(super) fn new(door: &Door, kind: Kind, shadowed: Option<Reason>) -> Ticket {
        let reason = shadowed.map_or(0, Reason::code);
        let timed = if door.timed() { Self::TIMED } else { 0 };
        Ticket(door.epoch().bits() << Door::EPOCH_SHIFT | timed | reason << 2 | kind as u64)
    }

    /// A disabled-mode call: nothing is recorded; the state it found is kept where a
    /// shadow call keeps its reason.
    #[inline(always)]
    pub(super) fn pass(door: &Door) -> Ticket {
        Ticket(door.epoch().bits() << Door::EPOCH_SHIFT | door.state().code() << 2 | Self::PASS)
    }

    #[inline(always)]
    pub(super) fn epoch(self) -> Epoch {
        Epoch::from_bits(self.0 >> Door::EPOCH_SHIFT)
    }

    /// What the machine records the call as; `None` for a disabled-mode call.
    #[inline(always)]
    pub(super) fn kind(self) -> Option<Kind> {
        match self.0 & 3 {
            0 => Some(Kind::Call),
            1 => Some(Kind::Probe),
            2 => Some(Kind::Shadow),
            _ => None,
        }
    }

    #[inline(always)]
    fn reason(self) -> Reason {
        Reason::from_code(self.0 >> 2)
    }

    #[inline(always)]
    pub(super) fn called(self) -> bool {
        self.0 & Self::CALLED != 0
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("epoch", &self.epoch())
            .field("kind", &self.kind())
            .field("called", &self.called())
            .finish()
    }
}

/// A plain call that a closed breaker admitted at once, before its permit is made: its
/// ticket, in one word. A service holds it from `poll_ready` to `call`, and makes the
/// permit there ([`Shared::permit_for`]): taking the permit's reference to the breaker in
/// `poll_ready` and handing it to `call` in memory costs a closed call some 4 ns in the
/// awaited benchmark (docs/performance.md).
#[derive(Clone, Copy, Debug)]
pub(in crate::breaker) struct Admitted(NonZeroU64);

impl Admitted {
    /// Set in every admitted call's word: a bit no ticket uses.
    const MARK: u64 = 1 << 7;

    #[inline]
    pub(super) fn new(ticket: Ticket) -> Self {
        Admitted(NonZeroU64::new(ticket.0 | Self::MARK).unwrap_or(NonZeroU64::MIN))
    }

    #[inline]
    pub(super) fn ticket(self) -> Ticket {
        Ticket(self.0.get() & !Self::MARK)
    }
}

/// The right to make one call, held by a reserved service and then by the call's
/// future. Dropped before its outcome is given, it hands the call back: abandoned if the
/// wrapped service was not called, cancelled if it was; a probe's slot is freed.
pub(in crate::breaker) struct Permit {
    shared: Arc<Shared>,
    ticket: Ticket,
}

impl Permit {
    #[inline(always)]
    pub(super) fn new(shared: Arc<Shared>, ticket: Ticket) -> Self {
        Permit { shared, ticket }
    }

    /// The breaker that granted it.
    pub(in crate::breaker) fn breaker(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Whether the call may still be made as admitted: the kill switch is off and the
    /// breaker has not moved on (no change of state or mode).
    #[inline(always)]
    pub(in crate::breaker) fn stands(&self) -> bool {
        self.shared.stands(self.ticket, true)
    }

    /// [`stands`](Self::stands), without the clock: a call at a door whose deadline may
    /// have passed (a half-open's) is said not to stand, and no call is made out of line.
    #[inline(always)]
    pub(in crate::breaker) fn stands_at_once(&self) -> bool {
        self.shared.stands(self.ticket, false)
    }

    /// The wrapped service is about to be called.
    #[inline(always)]
    pub(in crate::breaker) fn mark_called(&mut self) {
        self.ticket.0 |= Ticket::CALLED;
    }

    /// Whether the call must be timed, for the slow-call rule.
    #[inline(always)]
    pub(in crate::breaker) fn times_calls(&self) -> bool {
        self.ticket.0 & Ticket::TIMED != 0
    }

    /// Where the call's answer comes from.
    #[inline(always)]
    pub(in crate::breaker) fn source(&self) -> Source {
        match self.ticket.kind() {
            Some(Kind::Probe) => Source::Probe,
            Some(Kind::Shadow) => Source::Shadowed(self.ticket.reason()),
            Some(Kind::Call) | None => Source::Service,
        }
    }

    /// The state the call found.
    #[inline(always)]
    pub(in crate::breaker) fn state(&self) -> State {
        match self.ticket.kind() {
            Some(Kind::Call) => State::Closed,
            Some(Kind::Probe) => State::HalfOpen,
            Some(Kind::Shadow) => match self.ticket.reason() {
                Reason::Open | Reason::Killed => State::Open,
                Reason::HalfOpenFull => State::HalfOpen,
                Reason::ForcedOpen => State::ForcedOpen,
            },
            // Disabled: the state found, as `pass` keeps it.
            None => State::from_code(self.ticket.0 >> 2),
        }
    }

    /// Gives the call's outcome; `elapsed` is how long it took, if it was timed.
    #[inline(always)]
    pub(in crate::breaker) fn settle(mut self, outcome: Outcome, elapsed: Option<Duration>) {
        self.ticket.0 |= Ticket::SETTLED;
        self.shared.settle(self.ticket, outcome, elapsed);
    }

    /// Hands the call back without counting it: it is being decided again.
    pub(in crate::breaker) fn withdraw(mut self) {
        self.ticket.0 |= Ticket::SETTLED;
        self.shared.release(self.ticket, false);
    }
}

impl Drop for Permit {
    #[inline(always)]
    fn drop(&mut self) {
        if self.ticket.0 & Ticket::SETTLED == 0 {
            self.shared.release(self.ticket, true);
        }
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_permit(f, &self.shared, self.ticket)
    }
}

/// A call a service holds for its next `call`, shown as a permit whether its permit is
/// made ([`Permit`]) or not yet ([`Admitted`], with its breaker).
pub(in crate::breaker) enum HeldCall<'a> {
    Admitted(&'a Shared, Admitted),
    Permit(&'a Permit),
}

impl fmt::Debug for HeldCall<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeldCall::Admitted(shared, admitted) => fmt_permit(f, shared, admitted.ticket()),
            HeldCall::Permit(permit) => fmt_permit(f, &permit.shared, permit.ticket),
        }
    }
}

fn fmt_permit(f: &mut fmt::Formatter<'_>, shared: &Shared, ticket: Ticket) -> fmt::Result {
    f.debug_struct("Permit")
        .field("breaker", &shared.name)
        .field("ticket", &ticket)
        .finish()
}
