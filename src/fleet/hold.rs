//! A hold: a breaker kept open by its peers' hints, for a bounded time.
//!
//! A hold is applied with
//! [`CircuitBreakerHandle::hold_open_until`](crate::CircuitBreakerHandle::hold_open_until):
//! the breaker's own kind of opening (calls skipped as open and told when the hold ends,
//! the transition's cause [`Cause::Hint`]), and the next call after it is the probe. The
//! breaker decides under its own lock whether a hold applies, so nothing slips in between:
//! never over a breaker a person forced open, a probe under way, an opening until a reset,
//! or a wait at least as long (a hold only lengthens one). What the breaker does not know,
//! the fleet's own rules, are decided here and nowhere else:
//!
//! - an episode of holds lasts at most the fleet's longest hold from its first hold,
//!   whatever peers publish meanwhile; it ends when the breaker's own calls decide (its
//!   probe succeeds or fails) or a person acts (forces it open, resets it), and only then
//!   can another start. So a peer can cost this replica at most one longest hold between
//!   two of its own decisions;
//! - fresher reports lengthen a hold, never shorten it;
//! - when the peers stop reporting open, a hold still in force ends early
//!   ([`release_hold`](crate::CircuitBreakerHandle::release_hold)): the breaker's own
//!   wait underneath is back (none, if the hold opened it: the next call probes). The
//!   breaker ends only the hint's hold: not a person's, not an opening of its own that
//!   came since (a failed probe).

use std::time::{Duration, Instant};

use crate::Cause;

/// What to do to the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Act {
    /// Hold it open until this time, if the breaker agrees; `capped`: the peers asked for
    /// longer.
    Hold { until: Instant, capped: bool },
    /// End this fleet's hold now: the breaker's own wait underneath is back.
    Release,
    /// Leave it as it is.
    Keep(Kept),
}

/// Why nothing is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kept {
    /// No hold is wanted and none is in force.
    Nothing,
    /// The hold in force lasts at least as long as the one wanted.
    Held,
    /// This episode has used up the longest hold.
    Capped,
    /// A peer reported closed: that never starts or lengthens a hold, whatever other
    /// peers reported before.
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Episode {
    /// No hold of this episode goes past it.
    cap: Instant,
    /// The end of the latest hold the breaker took; `None` once released.
    until: Option<Instant>,
}

/// One breaker's holds. See the [module docs](self).
#[derive(Debug, Clone, Default)]
pub(crate) struct Hold {
    episode: Option<Episode>,
}

impl Hold {
    /// The hold in force, if this fleet holds the breaker open after `now`.
    pub(crate) fn until(&self, now: Instant) -> Option<Instant> {
        self.episode?.until.filter(|&until| until > now)
    }

    /// No hold of the episode under way (or of one starting `now`) goes past it.
    fn cap(&self, now: Instant, max_hold: Duration) -> Instant {
        self.episode.map_or(now + max_hold, |e| e.cap)
    }

    /// What to do when a peer reports open, given the hold the reports ask for (`None`:
    /// none). A report of open never ends a hold: asking for none (a quorum whose
    /// other reports are older than its window), or a shorter one, leaves the hold in
    /// force as it is.
    pub(crate) fn decide(&self, wanted: Option<Instant>, now: Instant, max_hold: Duration) -> Act {
        let held = self.until(now);
        let Some(wanted) = wanted else {
            return match held {
                Some(_) => Act::Keep(Kept::Held),
                None => Act::Keep(Kept::Nothing),
            };
        };
        let cap = self.cap(now, max_hold);
        let until = wanted.min(cap);
        if until <= now {
            return Act::Keep(Kept::Capped);
        }
        if held.is_some_and(|held| held >= until) {
            return Act::Keep(Kept::Held);
        }
        Act::Hold {
            until,
            capped: wanted > cap,
        }
    }

    /// What to do when a peer reports closed (or its report ran out), given whether the
    /// reports still keep a hold in force (`holding`): end the hold in force if they do
    /// not; never start or lengthen one, so a breaker whose episode a person or its own
    /// probe ended is not held again on reports older than that.
    pub(crate) fn decide_closed(&self, holding: bool, now: Instant) -> Act {
        match (holding, self.until(now)) {
            (false, Some(_)) => Act::Release,
            (false, None) => Act::Keep(Kept::Nothing),
            (true, _) => Act::Keep(Kept::Closed),
        }
    }

    /// The breaker took a hold until `until`, decided at `now`: the episode starts if
    /// none is under way.
    pub(crate) fn held(&mut self, until: Instant, now: Instant, max_hold: Duration) {
        let cap = self.cap(now, max_hold);
        self.episode = Some(Episode {
            cap,
            until: Some(until),
        });
    }

    /// The hold was ended early. The episode goes on: its cap still bounds any later
    /// hold until the breaker's own calls decide.
    pub(crate) fn released(&mut self) {
        if let Some(episode) = &mut self.episode {
            episode.until = None;
        }
    }

    /// The breaker made a transition. Its own calls deciding, or a person acting, end the
    /// episode; a hold opening it and the probe starting do not.
    pub(crate) fn on_transition(&mut self, cause: Cause) {
        if !matches!(cause, Cause::Hint | Cause::CooldownElapsed) {
            self.episode = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_secs(300);

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn a_hold_is_applied_lengthened_and_released() {
        let t0 = Instant::now();
        let mut hold = Hold::default();
        let act = hold.decide(Some(t0 + s(30)), t0, MAX);
        assert_eq!(
            act,
            Act::Hold {
                until: t0 + s(30),
                capped: false
            }
        );
        hold.held(t0 + s(30), t0, MAX);
        assert_eq!(hold.until(t0), Some(t0 + s(30)));
        assert_eq!(
            hold.decide(Some(t0 + s(30)), t0, MAX),
            Act::Keep(Kept::Held)
        );
        assert_eq!(
            hold.decide(Some(t0 + s(10)), t0, MAX),
            Act::Keep(Kept::Held),
            "a fresher, shorter report never shortens it"
        );
        let act = hold.decide(Some(t0 + s(60)), t0 + s(1), MAX);
        assert_eq!(
            act,
            Act::Hold {
                until: t0 + s(60),
                capped: false
            }
        );
        hold.held(t0 + s(60), t0 + s(1), MAX);
        assert_eq!(
            hold.decide(None, t0 + s(2), MAX),
            Act::Keep(Kept::Held),
            "a report of open never ends it"
        );
        assert_eq!(hold.decide_closed(false, t0 + s(2)), Act::Release);
        hold.released();
        assert_eq!(hold.until(t0 + s(2)), None);
        assert_eq!(hold.decide(None, t0 + s(3), MAX), Act::Keep(Kept::Nothing));
    }

    #[test]
    fn a_hold_that_ran_out_is_not_released() {
        let t0 = Instant::now();
        let mut hold = Hold::default();
        hold.held(t0 + s(30), t0, MAX);
        assert_eq!(
            hold.decide_closed(false, t0 + s(30)),
            Act::Keep(Kept::Nothing)
        );
    }

    #[test]
    fn an_episode_never_holds_past_the_longest_hold() {
        let t0 = Instant::now();
        let mut hold = Hold::default();
        let act = hold.decide(Some(t0 + s(100_000)), t0, MAX);
        assert_eq!(
            act,
            Act::Hold {
                until: t0 + MAX,
                capped: true
            }
        );
        hold.held(t0 + MAX, t0, MAX);
        // Fresh hints later in the episode cannot push the end out.
        let later = t0 + s(200);
        assert_eq!(
            hold.decide(Some(later + s(250)), later, MAX),
            Act::Keep(Kept::Held)
        );
        let after = t0 + MAX + s(1);
        assert_eq!(
            hold.decide(Some(after + s(60)), after, MAX),
            Act::Keep(Kept::Capped)
        );
        // A release does not end the episode: its cap still holds.
        hold.released();
        assert_eq!(
            hold.decide(Some(after + s(60)), after, MAX),
            Act::Keep(Kept::Capped)
        );
        // The hold's own opening and the probe starting do not end it either.
        hold.on_transition(Cause::Hint);
        hold.on_transition(Cause::CooldownElapsed);
        assert_eq!(
            hold.decide(Some(after + s(60)), after, MAX),
            Act::Keep(Kept::Capped)
        );
        // The breaker's own probe decides: a new episode may start.
        hold.on_transition(Cause::ProbeSucceeded);
        assert_eq!(
            hold.decide(Some(after + s(60)), after, MAX),
            Act::Hold {
                until: after + s(60),
                capped: false
            }
        );
    }

    #[test]
    fn a_peer_closing_ends_a_hold_and_never_starts_one() {
        let t0 = Instant::now();
        let mut hold = Hold::default();
        assert_eq!(hold.decide_closed(false, t0), Act::Keep(Kept::Nothing));
        // Another peer still reports open, but the episode was ended (a reset): a close
        // does not start a new one.
        assert_eq!(hold.decide_closed(true, t0), Act::Keep(Kept::Closed));
        hold.held(t0 + s(30), t0, MAX);
        assert_eq!(
            hold.decide_closed(true, t0),
            Act::Keep(Kept::Closed),
            "nor lengthens one"
        );
        assert_eq!(hold.decide_closed(false, t0), Act::Release);
    }

    #[test]
    fn a_persons_act_ends_the_episode_and_forgets_the_hold() {
        let t0 = Instant::now();
        for cause in [Cause::ForcedOpen, Cause::Reset] {
            let mut hold = Hold::default();
            hold.held(t0 + s(30), t0, MAX);
            hold.on_transition(cause);
            assert_eq!(hold.until(t0), None, "{cause}");
            // Nothing of the fleet's to release: a person's hold is left to the person.
            assert_eq!(hold.decide_closed(false, t0), Act::Keep(Kept::Nothing));
        }
    }
}
