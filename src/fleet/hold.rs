//! A hold: a breaker kept open by its peers' hints, bounded in time, and never in the way
//! of the breaker's own decisions or a person's.
//!
//! A hold is applied with [`CircuitBreakerHandle::open_until`](crate::CircuitBreakerHandle::open_until),
//! so calls are skipped as forced open until the time, and the next call after it is the
//! probe. The rules, decided here and nowhere else:
//!
//! - a breaker a person holds (forced open by anyone but this fleet) is left alone;
//! - a half-open breaker is left alone: its probe decides;
//! - a breaker its own calls opened for longer than the hint (or until a reset) is left
//!   alone: a hint never shortens a wait;
//! - an episode of holds lasts at most the fleet's longest hold from its first hold,
//!   whatever peers publish meanwhile; it ends when the breaker's own calls decide (its
//!   probe succeeds or fails) or a person resets it, and only then can another start. So
//!   a peer can cost this replica at most one longest hold between two of its own probes;
//! - when the peers stop reporting open, the hold ends early: the next call probes.

use std::time::{Duration, Instant};

use crate::{Cause, NextProbe, Snapshot, State};

/// The breaker as a hold reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Local {
    state: State,
    generation: u64,
    next_probe: NextProbe,
}

impl Local {
    pub(crate) fn of(snapshot: &Snapshot) -> Local {
        Local {
            state: snapshot.state,
            generation: snapshot.generation,
            next_probe: snapshot.next_probe,
        }
    }

    fn probe_at(&self) -> Option<Instant> {
        match self.next_probe {
            NextProbe::After { at, .. } => at,
            _ => None,
        }
    }
}

/// What to do to the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Act {
    /// Hold it open until this time; `capped`: the peers asked for longer.
    Hold { until: Instant, capped: bool },
    /// End this fleet's hold now: the next call is the probe.
    Release,
    /// Leave it as it is.
    Keep(Kept),
}

/// Why a hold was not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kept {
    /// No hold is wanted and none is in force.
    Nothing,
    /// The hold in force is the one wanted.
    Same,
    /// A person holds the breaker open.
    PersonHolds,
    /// A probe is under way.
    ProbeDecides,
    /// The breaker's own opening lasts at least as long.
    LongerOwnOpen,
    /// This episode has used up the longest hold.
    Capped,
}

/// A hold this fleet applied: the breaker's generation after it, and its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Applied {
    until: Instant,
    generation: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Episode {
    /// No hold of this episode goes past it.
    cap: Instant,
    applied: Option<Applied>,
}

/// One breaker's holds. See the [module docs](self).
#[derive(Debug, Clone, Default)]
pub(crate) struct Hold {
    episode: Option<Episode>,
}

impl Hold {
    /// The hold in force, if this fleet holds the breaker open after `now`.
    pub(crate) fn until(&self, now: Instant) -> Option<Instant> {
        let applied = self.episode?.applied?;
        (applied.until > now).then_some(applied.until)
    }

    /// Whether the breaker is held by this fleet: forced open, by the hold applied last,
    /// and not moved since.
    fn ours(&self, local: Local) -> bool {
        let Some(applied) = self.episode.and_then(|e| e.applied) else {
            return false;
        };
        local.state == State::ForcedOpen
            && local.generation == applied.generation
            && local.probe_at() == Some(applied.until)
    }

    /// What to do, given the breaker now and the hold the policy wants (`None`: none).
    pub(crate) fn decide(
        &mut self,
        local: Local,
        wanted: Option<Instant>,
        now: Instant,
        max_hold: Duration,
    ) -> Act {
        let ours = self.ours(local);
        match local.state {
            State::ForcedOpen if !ours => return Act::Keep(Kept::PersonHolds),
            State::HalfOpen => return Act::Keep(Kept::ProbeDecides),
            _ => {}
        }
        let Some(wanted) = wanted else {
            let running = ours && local.probe_at().is_some_and(|at| at > now);
            return if running {
                Act::Release
            } else {
                Act::Keep(Kept::Nothing)
            };
        };
        let cap = self.episode.map_or(now + max_hold, |e| e.cap);
        let until = wanted.min(cap);
        if until <= now {
            return Act::Keep(Kept::Capped);
        }
        if local.state == State::Open {
            let longer = match local.next_probe {
                NextProbe::Manual => true,
                NextProbe::After { at: Some(at), .. } => at >= until,
                _ => false,
            };
            if longer {
                return Act::Keep(Kept::LongerOwnOpen);
            }
        }
        if ours && self.episode.and_then(|e| e.applied).map(|a| a.until) == Some(until) {
            return Act::Keep(Kept::Same);
        }
        self.episode.get_or_insert(Episode { cap, applied: None });
        Act::Hold {
            until,
            capped: wanted > cap,
        }
    }

    /// The breaker after this fleet applied a hold (or a release, which is a hold until
    /// now).
    pub(crate) fn applied(&mut self, until: Instant, after: Local) {
        if let Some(episode) = &mut self.episode {
            episode.applied = (after.state == State::ForcedOpen).then_some(Applied {
                until,
                generation: after.generation,
            });
        }
    }

    /// The breaker made a transition. Its own calls deciding (or a person resetting it)
    /// end the episode; holds (forced open) and the probe starting do not.
    pub(crate) fn on_transition(&mut self, cause: Cause) {
        if !matches!(cause, Cause::ForcedOpen | Cause::CooldownElapsed) {
            self.episode = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_secs(300);

    fn local(state: State, generation: u64, next_probe: NextProbe) -> Local {
        Local {
            state,
            generation,
            next_probe,
        }
    }

    fn held(until: Instant, generation: u64) -> Local {
        local(
            State::ForcedOpen,
            generation,
            NextProbe::After {
                calls: 1,
                at: Some(until),
            },
        )
    }

    fn closed() -> Local {
        local(State::Closed, 0, NextProbe::NotNeeded)
    }

    #[test]
    fn a_hold_is_applied_extended_and_released() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut hold = Hold::default();
        let act = hold.decide(closed(), Some(t0 + s(30)), t0, MAX);
        assert_eq!(
            act,
            Act::Hold {
                until: t0 + s(30),
                capped: false
            }
        );
        hold.applied(t0 + s(30), held(t0 + s(30), 1));
        assert_eq!(hold.until(t0), Some(t0 + s(30)));
        let same = hold.decide(held(t0 + s(30), 1), Some(t0 + s(30)), t0, MAX);
        assert_eq!(same, Act::Keep(Kept::Same));
        let act = hold.decide(held(t0 + s(30), 1), Some(t0 + s(60)), t0 + s(1), MAX);
        assert_eq!(
            act,
            Act::Hold {
                until: t0 + s(60),
                capped: false
            }
        );
        hold.applied(t0 + s(60), held(t0 + s(60), 1));
        let act = hold.decide(held(t0 + s(60), 1), None, t0 + s(2), MAX);
        assert_eq!(act, Act::Release);
    }

    #[test]
    fn an_episode_never_holds_past_the_longest_hold() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut hold = Hold::default();
        let act = hold.decide(closed(), Some(t0 + s(100_000)), t0, MAX);
        assert_eq!(
            act,
            Act::Hold {
                until: t0 + MAX,
                capped: true
            }
        );
        hold.applied(t0 + MAX, held(t0 + MAX, 1));
        // Fresh hints later in the episode cannot push the end out.
        let later = t0 + s(200);
        let act = hold.decide(held(t0 + MAX, 1), Some(later + s(250)), later, MAX);
        assert_eq!(act, Act::Keep(Kept::Same));
        let after = t0 + MAX + s(1);
        let act = hold.decide(held(t0 + MAX, 1), Some(after + s(60)), after, MAX);
        assert_eq!(act, Act::Keep(Kept::Capped));
        // The breaker's own probe decides: a new episode may start.
        hold.on_transition(Cause::CooldownElapsed);
        hold.on_transition(Cause::ProbeSucceeded);
        let act = hold.decide(closed(), Some(after + s(60)), after, MAX);
        assert_eq!(
            act,
            Act::Hold {
                until: after + s(60),
                capped: false
            }
        );
    }

    #[test]
    fn a_persons_hold_a_probe_and_a_longer_own_opening_are_left_alone() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut hold = Hold::default();
        let person = local(State::ForcedOpen, 4, NextProbe::Manual);
        assert_eq!(
            hold.decide(person, Some(t0 + s(9)), t0, MAX),
            Act::Keep(Kept::PersonHolds)
        );
        let probing = local(State::HalfOpen, 5, NextProbe::InFlight);
        assert_eq!(
            hold.decide(probing, Some(t0 + s(9)), t0, MAX),
            Act::Keep(Kept::ProbeDecides)
        );
        let until_reset = local(State::Open, 6, NextProbe::Manual);
        assert_eq!(
            hold.decide(until_reset, Some(t0 + s(9)), t0, MAX),
            Act::Keep(Kept::LongerOwnOpen)
        );
        let own = local(
            State::Open,
            6,
            NextProbe::After {
                calls: 1,
                at: Some(t0 + s(20)),
            },
        );
        assert_eq!(
            hold.decide(own, Some(t0 + s(9)), t0, MAX),
            Act::Keep(Kept::LongerOwnOpen)
        );
        assert_eq!(
            hold.decide(own, Some(t0 + s(40)), t0, MAX),
            Act::Hold {
                until: t0 + s(40),
                capped: false
            }
        );
        // Our hold, then a person forced it open on top: the person's now.
        hold.applied(t0 + s(40), held(t0 + s(40), 7));
        let person_on_top = local(State::ForcedOpen, 7, NextProbe::Manual);
        assert_eq!(
            hold.decide(person_on_top, None, t0, MAX),
            Act::Keep(Kept::PersonHolds)
        );
    }
}
