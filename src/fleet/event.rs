//! What a replica's fleet link did, as [`Fleet::events`](super::Fleet::events) tells it.

use std::sync::Arc;
use std::time::Instant;

use super::act::KillAct;
use super::link::LinkStatus;
use super::wire::Rejection;

/// Where a kill switch's new state came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KillOrigin {
    /// A kill message on the channel (from an operator or a replica).
    Message,
    /// The kill key, read when the link came up, when the switch was shared, or at a
    /// periodic re-read.
    Key,
    /// This replica's own [`Fleet::kill`](super::Fleet::kill) or
    /// [`Fleet::revive`](super::Fleet::revive).
    Command,
    /// The switch itself, flipped on this replica
    /// ([`KillSwitch::kill`](crate::KillSwitch::kill) or
    /// [`revive`](crate::KillSwitch::revive)): the fleet wrote it to the key and
    /// published it.
    Switch,
}

/// One thing a replica's fleet link did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FleetEvent {
    /// A shared kill switch changed: the fleet flipped it, or shared a flip made on it
    /// here ([`KillOrigin::Switch`]).
    KillSwitch {
        /// Its name.
        name: Arc<str>,
        /// Whether it is now on.
        killed: bool,
        /// Where the change came from.
        origin: KillOrigin,
    },
    /// A kill or revive made on this replica ([`Fleet::kill`](super::Fleet::kill),
    /// [`Fleet::revive`](super::Fleet::revive) or a flip of the switch itself) while the
    /// link was down, or whose write failed, was written to Redis and published when the
    /// link came back: the fleet has it now.
    Written {
        /// The kill switch.
        name: Arc<str>,
        /// The act.
        act: KillAct,
    },
    /// A kill or revive made on this replica and not yet written lost to a later act made
    /// elsewhere (see the [order](super::act)): the switch follows the later act now (a
    /// [`FleetEvent::KillSwitch`] says so when that flipped it).
    Overridden {
        /// The kill switch.
        name: Arc<str>,
        /// The act made here.
        act: KillAct,
        /// The later act that won.
        by: KillAct,
    },
    /// A breaker is held open by its peers' hints (a new hold, or one lengthened): as
    /// its own kind of opening, so its calls are skipped as open.
    Held {
        /// The breaker.
        breaker: Arc<str>,
        /// Until when (on the breaker's clock); after it the next call is the probe.
        until: Instant,
        /// The peer whose hint caused it.
        replica: Arc<str>,
        /// Whether it was cut to the fleet's longest hold.
        capped: bool,
    },
    /// A hold ended early: the peers stopped reporting open. The next call probes.
    Released {
        /// The breaker.
        breaker: Arc<str>,
    },
    /// A message was refused.
    Rejected {
        /// The channel (or key) it came from.
        channel: Arc<str>,
        /// Why.
        why: Rejection,
    },
    /// The link went up or down.
    Link(LinkStatus),
}
