//! How a replica reads its peers' hints about one breaker: [`HintPolicy`], and the
//! reports it keeps to apply it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::FleetError;

/// What a replica does with the transitions its peers publish for a breaker of the same
/// name. Whatever the policy, the replica's own breaker publishes its own transitions,
/// and its own calls decide its own state: a hint only holds it open, never past the
/// fleet's longest hold, and never closes it. Fresher reports lengthen a hold and never
/// shorten it; the hold ends early only once the policy no longer holds the breaker open
/// at all (the next call is then the probe).
///
/// ```
/// use std::time::Duration;
/// use tower_circuit_breaker::fleet::HintPolicy;
///
/// // An exhausted quota is the account's, not the replica's: follow at once.
/// let quota = HintPolicy::Follow;
/// // A flaky upstream: open only when three replicas saw it fail within 30 s, so one
/// // replica with a bad network cannot open the others.
/// let flaky = HintPolicy::quorum(3, Duration::from_secs(30));
/// assert_ne!(quota, flaky);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HintPolicy {
    /// Peers' hints change nothing here (they are still counted).
    Ignore,
    /// A peer's open breaker holds this one open until the time the peer published
    /// (its next probe), capped by the fleet's longest hold; a peer that published no
    /// time holds it for the fleet's default hold. The peer closing ends the hold.
    Follow,
    /// Held open once at least `replicas` peers report open, each report received within
    /// `window` of the latest; held until the time that many would still report open
    /// (the `replicas`-th latest of their published times), capped as for
    /// [`Follow`](HintPolicy::Follow). Reports are weighed when a hint arrives: reports
    /// older than the window no longer count towards a new or longer hold, but never
    /// end one; a peer closing ends the hold early once fewer than `replicas` peers
    /// still report open, however long ago they did.
    Quorum {
        /// Peers that must report open (at least 1, at most
        /// [`FleetBuilder::max_peers`](super::FleetBuilder::max_peers)).
        replicas: u32,
        /// How recent a report must be to count.
        window: Duration,
    },
}

impl HintPolicy {
    /// [`HintPolicy::Quorum`]; checked when the breaker is shared
    /// ([`Fleet::share_breaker`](super::Fleet::share_breaker)).
    pub fn quorum(replicas: u32, window: Duration) -> HintPolicy {
        HintPolicy::Quorum { replicas, window }
    }

    /// `ignore`, `follow` or `quorum`.
    pub fn as_str(&self) -> &'static str {
        match self {
            HintPolicy::Ignore => "ignore",
            HintPolicy::Follow => "follow",
            HintPolicy::Quorum { .. } => "quorum",
        }
    }

    /// Whether the policy can work in a fleet that remembers at most `max_peers` peers
    /// ([`FleetBuilder::max_peers`](super::FleetBuilder::max_peers)).
    pub(crate) fn check(&self, max_peers: usize) -> Result<(), FleetError> {
        match *self {
            HintPolicy::Quorum { replicas: 0, .. } => Err(FleetError::BadSetting {
                setting: "HintPolicy::quorum",
                reason: "a quorum needs at least one replica",
            }),
            HintPolicy::Quorum { replicas, .. }
                if usize::try_from(replicas).map_or(true, |needed| needed > max_peers) =>
            {
                Err(FleetError::BadSetting {
                    setting: "HintPolicy::quorum",
                    reason: "a quorum of more replicas than the fleet remembers (max_peers) is never met",
                })
            }
            HintPolicy::Quorum { window, .. } if window.is_zero() => Err(FleetError::BadSetting {
                setting: "HintPolicy::quorum",
                reason: "the window must be longer than zero",
            }),
            _ => Ok(()),
        }
    }
}

/// One peer's latest report that its breaker is open.
#[derive(Debug, Clone)]
struct Report {
    replica: Arc<str>,
    received: Instant,
    /// Until when it holds, already capped.
    until: Instant,
}

/// The peers that report a breaker open, at most one report each, at most `limit`
/// peers (the oldest report goes first).
#[derive(Debug, Clone, Default)]
pub(crate) struct Reports {
    open: Vec<Report>,
}

impl Reports {
    /// `replica` reports open until `until`.
    pub(crate) fn open(&mut self, replica: &Arc<str>, until: Instant, now: Instant, limit: usize) {
        self.closed(replica);
        if self.open.len() >= limit.max(1) {
            let oldest = (0..self.open.len()).min_by_key(|&i| self.open[i].received);
            if let Some(i) = oldest {
                self.open.swap_remove(i);
            }
        }
        self.open.push(Report {
            replica: replica.clone(),
            received: now,
            until,
        });
    }

    /// `replica` reports closed (or its report no longer holds).
    pub(crate) fn closed(&mut self, replica: &str) {
        self.open.retain(|r| &*r.replica != replica);
    }

    /// How many peers report open now.
    pub(crate) fn open_count(&self, now: Instant) -> usize {
        self.open.iter().filter(|r| r.until > now).count()
    }

    /// The hold the reports ask for as of `now`, to start one or lengthen the one in
    /// force; `None`: they ask for none. A quorum counts only the reports received
    /// within its window. Reports that ended are dropped.
    pub(crate) fn wanted(&mut self, policy: HintPolicy, now: Instant) -> Option<Instant> {
        self.open.retain(|r| r.until > now);
        match policy {
            HintPolicy::Ignore => None,
            HintPolicy::Follow => self.open.iter().map(|r| r.until).max(),
            HintPolicy::Quorum { replicas, window } => self.quorum(replicas, |r| {
                now.saturating_duration_since(r.received) <= window
            }),
        }
    }

    /// Whether the reports still keep a hold in force as of `now`, that is, whether
    /// enough peers still report open: a quorum counts every report that has not ended,
    /// however old, since the window limits only which reports count towards a new hold
    /// ([`wanted`](Reports::wanted)). Reports that ended are dropped.
    pub(crate) fn holding(&mut self, policy: HintPolicy, now: Instant) -> bool {
        self.open.retain(|r| r.until > now);
        match policy {
            HintPolicy::Ignore => false,
            HintPolicy::Follow => !self.open.is_empty(),
            HintPolicy::Quorum { replicas, .. } => self.quorum(replicas, |_| true).is_some(),
        }
    }

    /// Until when at least `replicas` of the `counted` reports say open (the
    /// `replicas`-th latest of their times); `None`: fewer of them report open.
    fn quorum(&self, replicas: u32, counted: impl Fn(&Report) -> bool) -> Option<Instant> {
        let mut untils: Vec<Instant> = self
            .open
            .iter()
            .filter(|r| counted(r))
            .map(|r| r.until)
            .collect();
        let needed = usize::try_from(replicas).unwrap_or(usize::MAX);
        if untils.len() < needed {
            return None;
        }
        // Until the time fewer than `replicas` would still report open.
        untils.sort_unstable_by(|a, b| b.cmp(a));
        Some(untils[needed - 1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(name: &str) -> Arc<str> {
        name.into()
    }

    #[test]
    fn follow_holds_until_the_latest_report_and_ends_when_its_peers_close() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut reports = Reports::default();
        reports.open(&peer("a"), t0 + s(10), t0, 16);
        reports.open(&peer("b"), t0 + s(20), t0, 16);
        assert_eq!(reports.wanted(HintPolicy::Follow, t0), Some(t0 + s(20)));
        reports.closed("b");
        assert_eq!(reports.wanted(HintPolicy::Follow, t0), Some(t0 + s(10)));
        assert_eq!(reports.wanted(HintPolicy::Follow, t0 + s(10)), None);
        assert_eq!(reports.open_count(t0), 0, "a report that ended is dropped");
    }

    #[test]
    fn a_quorum_needs_that_many_distinct_peers_within_the_window() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let policy = HintPolicy::quorum(2, s(30));
        let mut reports = Reports::default();
        reports.open(&peer("a"), t0 + s(60), t0, 16);
        reports.open(&peer("a"), t0 + s(90), t0 + s(1), 16);
        assert_eq!(
            reports.wanted(policy, t0 + s(1)),
            None,
            "one peer twice is one peer"
        );
        reports.open(&peer("b"), t0 + s(40), t0 + s(2), 16);
        assert_eq!(reports.wanted(policy, t0 + s(2)), Some(t0 + s(40)));
        // a's report is older than the window: it no longer counts towards a new hold,
        // but the two peers still report open, so the hold in force stands.
        assert_eq!(reports.wanted(policy, t0 + s(32)), None);
        assert!(reports.holding(policy, t0 + s(32)));
        reports.closed("b");
        assert!(!reports.holding(policy, t0 + s(32)), "one peer is not two");
        assert_eq!(reports.wanted(HintPolicy::Ignore, t0), None);
        assert!(!reports.holding(HintPolicy::Ignore, t0));
    }

    #[test]
    fn reports_are_bounded() {
        let t0 = Instant::now();
        let mut reports = Reports::default();
        for i in 0..100u64 {
            let name = peer(&format!("r{i}"));
            let at = t0 + Duration::from_millis(i);
            reports.open(&name, at + Duration::from_secs(60), at, 8);
        }
        assert_eq!(reports.open_count(t0), 8);
    }

    #[test]
    fn a_quorum_of_zero_or_no_window_is_refused() {
        assert!(HintPolicy::quorum(0, Duration::from_secs(1))
            .check(16)
            .is_err());
        assert!(HintPolicy::quorum(2, Duration::ZERO).check(16).is_err());
        HintPolicy::quorum(2, Duration::from_secs(1))
            .check(16)
            .unwrap();
    }

    #[test]
    fn a_quorum_is_at_most_the_peers_remembered() {
        let s = Duration::from_secs(1);
        HintPolicy::quorum(4, s).check(4).unwrap();
        assert!(HintPolicy::quorum(5, s).check(4).is_err());
        HintPolicy::Follow.check(1).unwrap();
    }
}
