//! A view of a replica's fleet link taken at once: [`FleetSnapshot`].

use std::sync::Arc;
use std::time::Instant;

use super::act::KillAct;
use super::counts::FleetCounts;
use super::link::LinkStatus;
use super::policy::HintPolicy;

/// A kill switch shared with the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SharedKillSwitch {
    /// Its name (its key is `PREFIX:kill:NAME`).
    pub name: Arc<str>,
    /// Whether it is on here now.
    pub killed: bool,
    /// A kill or revive made here and kept, not yet written to Redis (made while the link
    /// was down, or its write failed): written when the link is back.
    pub kept: Option<KillAct>,
}

/// A breaker shared with the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SharedBreakerView {
    /// Its name.
    pub name: Arc<str>,
    /// How it reads its peers' hints.
    pub policy: HintPolicy,
    /// Until when its peers' hints hold it open (on the breaker's clock), if they do.
    pub held_until: Option<Instant>,
    /// How many peers report it open now.
    pub peers_open: usize,
}

/// A replica's fleet link at one moment: whether it is up and since when, what is
/// shared, and the running totals.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetSnapshot {
    /// This replica's name.
    pub replica: Arc<str>,
    /// The link to Redis.
    pub link: LinkStatus,
    /// The kill switches shared, by name.
    pub kill_switches: Vec<SharedKillSwitch>,
    /// The breakers shared, by name.
    pub breakers: Vec<SharedBreakerView>,
    /// Running totals.
    pub counts: FleetCounts,
    /// When it was taken.
    pub taken_at: Instant,
}
