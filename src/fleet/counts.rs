//! What a replica's fleet link has received, applied, refused and published.

use std::sync::atomic::{AtomicU64, Ordering};

use super::wire::Rejection;

/// Running totals of a replica's fleet link, since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetCounts {
    /// Kill messages received and believed (this replica's own included).
    pub kill_messages: u64,
    /// Hint messages received from peers and believed.
    pub hints: u64,
    /// Holds applied to a breaker (a hold extended counts again).
    pub holds: u64,
    /// Holds ended early because the peers stopped reporting open.
    pub releases: u64,
    /// Holds cut to the longest hold, or refused because the episode had used it up.
    pub capped: u64,
    /// Messages refused as malformed (not the format, a bad field or name, a stamp more
    /// than a day ahead), kill keys holding something other than an act, `1` or `0`
    /// included.
    pub malformed: u64,
    /// Messages refused as longer than the limit.
    pub oversized: u64,
    /// Messages refused for a version this crate does not read.
    pub unknown_version: u64,
    /// Hints dropped as replayed or older than one already seen from the same replica.
    pub stale: u64,
    /// Hints never received: gaps in peers' sequence numbers.
    pub missed: u64,
    /// Hints published by this replica.
    pub published: u64,
    /// Acts written to a kill key and published by this replica: its
    /// [`Fleet::kill`](super::Fleet::kill) and [`Fleet::revive`](super::Fleet::revive),
    /// flips made on its shared switches themselves (at once, or kept and written when
    /// the link is back), a later act written back over an earlier key or none, and a
    /// value written by hand stamped. A flip applied on the fleet's word is never
    /// published again.
    pub kills_published: u64,
    /// Transitions of a shared breaker this replica could not read in time (its
    /// channel overflowed), so never published.
    pub lagged: u64,
    /// Times the link came back after being lost.
    pub reconnects: u64,
}

impl FleetCounts {
    /// All messages refused, whatever the reason.
    pub fn rejected(&self) -> u64 {
        self.malformed + self.oversized + self.unknown_version
    }
}

/// The totals as the link keeps them.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) kill_messages: AtomicU64,
    pub(crate) hints: AtomicU64,
    pub(crate) holds: AtomicU64,
    pub(crate) releases: AtomicU64,
    pub(crate) capped: AtomicU64,
    pub(crate) malformed: AtomicU64,
    pub(crate) oversized: AtomicU64,
    pub(crate) unknown_version: AtomicU64,
    pub(crate) stale: AtomicU64,
    pub(crate) missed: AtomicU64,
    pub(crate) published: AtomicU64,
    pub(crate) kills_published: AtomicU64,
    pub(crate) lagged: AtomicU64,
    pub(crate) reconnects: AtomicU64,
}

/// Adds `n` to a total.
pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn rejected(&self, why: Rejection) {
        add(
            match why {
                Rejection::Malformed => &self.malformed,
                Rejection::Oversized => &self.oversized,
                Rejection::UnknownVersion => &self.unknown_version,
            },
            1,
        );
    }

    pub(crate) fn read(&self) -> FleetCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        FleetCounts {
            kill_messages: get(&self.kill_messages),
            hints: get(&self.hints),
            holds: get(&self.holds),
            releases: get(&self.releases),
            capped: get(&self.capped),
            malformed: get(&self.malformed),
            oversized: get(&self.oversized),
            unknown_version: get(&self.unknown_version),
            stale: get(&self.stale),
            missed: get(&self.missed),
            published: get(&self.published),
            kills_published: get(&self.kills_published),
            lagged: get(&self.lagged),
            reconnects: get(&self.reconnects),
        }
    }
}
