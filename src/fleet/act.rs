//! A person's act on a kill switch (a kill or a revive), stamped with when it was made,
//! and the one rule that orders two acts: the fleet's switches follow the latest act, and
//! no act is undone by anything but a later one.
//!
//! # The order
//!
//! Every act carries a stamp: Unix milliseconds on the clock of the replica that made it,
//! or one more than the latest stamp that replica had seen, when that is later (a hybrid
//! logical clock: an act made after another was seen is later than it, whatever the
//! clocks say). Two acts are ordered by their stamps, then by the name of the replica that
//! made them, then by its run, so any two replicas order any two acts alike.
//!
//! - A kill or revive made while Redis cannot be reached is applied here at once, kept,
//!   and written when the link is back, unless the key then holds a later act, which wins
//!   (and [`FleetEvent::Overridden`](super::FleetEvent::Overridden) says so).
//! - A key holding an earlier act, or none (Redis restarted without its data, flushed,
//!   failed over to a replica that had not caught up), never undoes a later act: the
//!   replica that knows the later act writes it back.
//! - The key is only ever replaced by a later act: a replica writes with a compare and
//!   set (one Lua script: the value it last saw, the new act, its message), so the key
//!   and the channel carry acts in their order.
//! - A value written by hand (`SET tcb:kill:NAME 1`, or `0`) carries no stamp: it counts as
//!   made when a replica first reads it, which then writes it back stamped. A message
//!   published by hand without a stamp counts as made when it is heard.
//!
//! Clocks: replicas' clocks should agree (NTP), as for hints. A skew only matters between
//! acts made without seeing each other (during a partition): the act stamped later by its
//! own clock wins. A stamp more than a day ahead of this replica's clock is refused as
//! malformed, so that a broken clock cannot pin a switch for ever.

use std::sync::Arc;

/// How far ahead of this replica's clock a stamp may be before it is refused.
pub(crate) const MAX_AHEAD_MS: u64 = 24 * 3600 * 1000;

/// A kill or a revive of a kill switch, and when it was made: what a kill key holds and
/// a kill message carries.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KillAct {
    /// A kill (`true`) or a revive.
    pub killed: bool,
    /// Its stamp: when it was made, in Unix milliseconds on the clock of the replica that
    /// made it (later than any stamp that replica had seen).
    pub at_ms: u64,
    /// The replica that made it, or that first read it when it was written by hand.
    pub replica: Arc<str>,
    /// That replica's run: ties between two runs under one name.
    pub(crate) run: Arc<str>,
}

impl KillAct {
    pub(crate) fn new(killed: bool, at_ms: u64, replica: &Arc<str>, run: &Arc<str>) -> KillAct {
        KillAct {
            killed,
            at_ms,
            replica: replica.clone(),
            run: run.clone(),
        }
    }

    /// Whether this act is later than `other`, in the one order every replica uses: by
    /// stamp, then replica name, then run (see the [module docs](self)).
    pub fn is_later_than(&self, other: &KillAct) -> bool {
        self.order() > other.order()
    }

    fn order(&self) -> (u64, &str, &str) {
        (self.at_ms, &self.replica, &self.run)
    }
}

/// Stamps this replica's acts: later than the wall clock's now and than every stamp seen.
#[derive(Debug, Default)]
pub(crate) struct Stamper {
    last_ms: u64,
}

impl Stamper {
    /// The stamp of an act made now, `wall_ms` on this replica's clock.
    pub(crate) fn next(&mut self, wall_ms: u64) -> u64 {
        let at = wall_ms.max(self.last_ms.saturating_add(1));
        self.last_ms = at;
        at
    }

    /// An act stamped `at_ms` was seen.
    pub(crate) fn seen(&mut self, at_ms: u64) {
        self.last_ms = self.last_ms.max(at_ms);
    }
}

/// What a kill key holds, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stored {
    /// No key.
    Absent,
    /// `1` or `0`, written by hand: no stamp.
    Bare(bool),
    /// An act, stamped.
    Act(KillAct),
    /// Something else: refused.
    Unreadable,
}

/// Where a kill or revive made on this replica stands until it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pending {
    /// Made through [`Fleet::kill`](super::Fleet::kill) or on the switch itself.
    pub(crate) by_command: bool,
    /// Kept: made, or its write failed, while the link was down.
    pub(crate) kept: bool,
}

/// One kill switch's acts, as this replica knows them. Only the link's task holds it.
#[derive(Debug, Default)]
pub(crate) struct Register {
    /// The latest act known: the switch follows it.
    pub(crate) act: Option<KillAct>,
    /// `act` was made here and is not written yet.
    pub(crate) pending: Option<Pending>,
    /// The shared switch's state as the fleet last left it, once the link's task has
    /// taken the switch in ([`adopt`](Self::adopt)): a switch found otherwise was
    /// flipped in code since. `None` while no switch is taken in: acts made or heard
    /// then are the fleet's, and no switch's state is one.
    pub(crate) flag: Option<bool>,
    /// What the key is believed to hold (see [`Believed`]), for the compare and set.
    pub(crate) key: Believed,
}

/// What this replica believes a key holds, as the write script describes a value: `n`
/// (none), `s` and the string, `t` and another type; unknown matches nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Believed(pub(crate) Option<Vec<u8>>);

impl Believed {
    pub(crate) fn absent() -> Believed {
        Believed(Some(b"n".to_vec()))
    }

    pub(crate) fn string(value: &[u8]) -> Believed {
        let mut held = b"s".to_vec();
        held.extend_from_slice(value);
        Believed(Some(held))
    }

    /// As the script passes it: unknown is `?`, which no value is described as.
    pub(crate) fn as_arg(&self) -> &[u8] {
        self.0.as_deref().unwrap_or(b"?")
    }
}

/// What an act heard of (read in the key, or on the channel) does to a register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Heard {
    /// It is later: the switch follows it now. `overridden`: the act made here, not yet
    /// written, that it replaces.
    Later { overridden: Option<KillAct> },
    /// It is the act known: `written` if that act was made here and not known written.
    Same { written: Option<Pending> },
    /// The act known is later.
    Earlier,
}

impl Register {
    /// An act was heard of: the latest of it and the act known wins.
    pub(crate) fn hear(&mut self, theirs: KillAct) -> Heard {
        match &self.act {
            Some(ours) if ours == &theirs => Heard::Same {
                written: self.pending.take(),
            },
            Some(ours) if ours.is_later_than(&theirs) => Heard::Earlier,
            _ => {
                let overridden = match self.pending.take() {
                    Some(_) => self.act.clone(),
                    None => None,
                };
                self.left(theirs.killed);
                self.act = Some(theirs);
                Heard::Later { overridden }
            }
        }
    }

    /// An act made on this replica: it is the latest.
    pub(crate) fn made(&mut self, act: KillAct, pending: Pending) {
        self.left(act.killed);
        self.act = Some(act);
        self.pending = Some(pending);
    }

    /// The switch taken in is left `killed` by the fleet (none taken in: nothing to
    /// leave).
    pub(crate) fn left(&mut self, killed: bool) {
        if let Some(flag) = &mut self.flag {
            *flag = killed;
        }
    }

    /// A switch shared under this name is taken in, found `found` when it was shared:
    /// that state is no act of anyone's. The act the switch must follow now, if one is
    /// known and the switch was not flipped since it was shared (`current`); a flip
    /// since is an act made after every act known, and noticed as such.
    pub(crate) fn adopt(&mut self, found: bool, current: bool) -> Option<bool> {
        self.flag = Some(found);
        match &self.act {
            Some(act) if found == current => Some(act.killed),
            _ => None,
        }
    }

    /// Whether a switch is taken in.
    pub(crate) fn has_switch(&self) -> bool {
        self.flag.is_some()
    }

    /// The switch taken in is `current` now: whether it was flipped in code since the
    /// fleet last left it (none taken in: no flip).
    pub(crate) fn flipped_in_code(&self, current: bool) -> bool {
        self.flag.is_some_and(|flag| flag != current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn act(killed: bool, at_ms: u64, replica: &str) -> KillAct {
        KillAct::new(killed, at_ms, &replica.into(), &"run".into())
    }

    #[test]
    fn acts_are_ordered_by_stamp_then_replica_then_run() {
        assert!(act(false, 2, "a").is_later_than(&act(true, 1, "z")));
        assert!(act(true, 2, "b").is_later_than(&act(false, 2, "a")));
        let run2 = KillAct::new(true, 2, &"a".into(), &"run2".into());
        assert!(run2.is_later_than(&act(false, 2, "a")));
        assert!(!act(true, 2, "a").is_later_than(&act(true, 2, "a")));
    }

    #[test]
    fn stamps_pass_every_stamp_seen_whatever_the_clock() {
        let mut stamper = Stamper::default();
        assert_eq!(stamper.next(100), 100);
        assert_eq!(stamper.next(100), 101, "two acts in one millisecond");
        stamper.seen(500);
        assert_eq!(stamper.next(200), 501, "a peer's clock ahead");
        assert_eq!(stamper.next(900), 900);
    }

    #[test]
    fn a_kept_act_survives_earlier_acts_and_yields_to_a_later_one() {
        let mut register = Register::default();
        let kept = Pending {
            by_command: true,
            kept: true,
        };
        register.made(act(true, 10, "here"), kept);
        // The key comes back with an earlier revive: ours is later, and still to write.
        assert_eq!(register.hear(act(false, 5, "there")), Heard::Earlier);
        assert_eq!(register.act, Some(act(true, 10, "here")));
        assert_eq!(register.pending, Some(kept));
        // Written: heard back as the same act.
        assert_eq!(
            register.hear(act(true, 10, "here")),
            Heard::Same {
                written: Some(kept)
            }
        );
        // A later act made here is replaced by a later one made there, and said to be.
        register.made(act(false, 20, "here"), kept);
        assert_eq!(
            register.hear(act(true, 30, "there")),
            Heard::Later {
                overridden: Some(act(false, 20, "here"))
            }
        );
        assert_eq!(
            (register.act.as_ref().map(|a| a.killed), register.pending),
            (Some(true), None)
        );
        // A later act that replaces none made here overrides nothing.
        assert_eq!(
            register.hear(act(false, 40, "there")),
            Heard::Later { overridden: None }
        );
    }

    #[test]
    fn a_flip_in_code_is_told_from_the_fleets_own() {
        let mut register = Register::default();
        assert!(!register.flipped_in_code(true), "no switch taken in");
        assert_eq!(register.adopt(false, false), None, "no act known");
        assert!(!register.flipped_in_code(false), "its state when shared");
        register.hear(act(true, 1, "there"));
        assert!(!register.flipped_in_code(true), "the fleet's own flip");
        assert!(register.flipped_in_code(false));
    }

    #[test]
    fn a_switch_shared_after_an_act_follows_the_act_unless_flipped_since() {
        let kept = Pending {
            by_command: true,
            kept: true,
        };
        // A kill made before any switch was shared leaves no switch's state behind.
        let mut register = Register::default();
        register.made(act(true, 10, "here"), kept);
        assert_eq!(register.flag, None);
        // A live switch shared afterwards follows the kill: its state is no act.
        assert_eq!(register.adopt(false, false), Some(true));
        // One flipped in code after it was shared keeps its flip, noticed as an act.
        let mut register = Register::default();
        register.hear(act(false, 10, "there"));
        assert_eq!(register.adopt(false, true), None);
        assert!(register.flipped_in_code(true));
    }
}
