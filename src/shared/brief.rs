//! What the lock-free paths decide: [`Quick`], and a skip in a compact form, [`Brief`].

use crate::machine::{NextProbe, Permit, Reason, Skip, State};

/// What the lock-free paths decided for a call.
#[derive(Clone, Copy)]
pub(crate) enum Quick {
    /// A call in the closed state, in this epoch: lease it (see [`Lease`](super::Lease)).
    Lease(u64),
    /// A disabled-mode pass-through call.
    Pass(Permit),
    /// A skip, counted.
    Skip(Brief),
    /// The machine must decide; the kill switch as read.
    Locked(bool),
}

/// A skip decided on a lock-free path, in a word and a time: the reason, the state, and
/// the calls until the probe, or that a probe is under way or only a person ends it,
/// and when the probe may go. [`Skip`] is a third bigger and made of narrower fields,
/// and moving it from where it was decided to where it is answered cost more than the
/// decision.
///
/// Bits: 0 is always set; 1-2 the reason (open, killed, forced open, half-open full);
/// 3-4 the state; 5 manual; 6 in flight; from 8, the calls until the probe.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Brief {
    bits: std::num::NonZeroU64,
    /// When the probe may go, as a stamp (see `stamp`); [`Brief::NO_TIME`]: no time.
    at: i64,
}

impl Brief {
    const MANUAL: u64 = 1 << 5;
    const IN_FLIGHT: u64 = 1 << 6;

    /// No time in `at`.
    const NO_TIME: i64 = i64::MIN;

    #[inline]
    pub(super) fn new(bits: u64, at: i64) -> Brief {
        Brief {
            bits: std::num::NonZeroU64::MIN.saturating_add(bits & !1),
            at,
        }
    }

    #[inline]
    pub(super) fn manual(reason: Reason, state: State) -> Brief {
        let reason = match reason {
            Reason::Open => 0,
            Reason::Killed => 1,
            _ => 2,
        };
        Brief::new(
            reason << 1 | state.code() << 3 | Self::MANUAL,
            Self::NO_TIME,
        )
    }

    /// Open, `calls` to the probe, and the probe not before the stamp `at`.
    #[inline]
    pub(super) fn open(calls: u64, at: Option<i64>) -> Brief {
        Brief::new(
            State::Open.code() << 3 | calls << 8,
            at.unwrap_or(Self::NO_TIME),
        )
    }

    /// Open, and the probe waits for probes of an earlier half-open.
    #[inline]
    pub(super) fn open_in_flight() -> Brief {
        Brief::new(State::Open.code() << 3 | Self::IN_FLIGHT, Self::NO_TIME)
    }

    #[inline]
    pub(super) fn in_flight() -> Brief {
        Brief::new(
            3 << 1 | State::HalfOpen.code() << 3 | Self::IN_FLIGHT,
            Self::NO_TIME,
        )
    }

    /// The skip in full.
    #[inline]
    pub(crate) fn skip(self) -> Skip {
        let bits = self.bits.get();
        Skip {
            reason: self.reason(),
            state: self.state(),
            next_probe: if bits & Self::MANUAL != 0 {
                NextProbe::Manual
            } else if bits & Self::IN_FLIGHT != 0 {
                NextProbe::InFlight
            } else {
                NextProbe::After {
                    calls: bits >> 8,
                    at: (self.at != Self::NO_TIME).then(|| super::stamp::instant(self.at)),
                }
            },
        }
    }

    #[inline]
    pub(crate) fn reason(self) -> Reason {
        match self.bits.get() >> 1 & 3 {
            0 => Reason::Open,
            1 => Reason::Killed,
            2 => Reason::ForcedOpen,
            _ => Reason::HalfOpenFull,
        }
    }

    #[inline]
    pub(crate) fn state(self) -> State {
        State::from_code(self.bits.get() >> 3)
    }
}

impl std::fmt::Debug for Brief {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.skip().fmt(f)
    }
}
