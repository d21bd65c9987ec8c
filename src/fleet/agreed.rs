//! What each shared kill switch was last agreed to be with the fleet, so the link's task
//! can tell a flip made on the switch itself (`switch.kill()` in the application's code),
//! which it must share, from one it made itself on the fleet's word, which it must not
//! share again (a replica re-publishing what it heard would echo it around the fleet).
//!
//! Agreed: the state last read from the switch's key, heard on the channel, or written
//! by this replica. A switch whose flag differs from it was flipped on this replica and
//! not shared yet.
//!
//! Messages are believed in the order Redis published them. This replica applies its own
//! change when it makes it, before Redis has published it; until that change's message
//! comes back on the channel, any other message heard for the switch was published
//! before it, so is older, and is not applied (applied, it would leave this replica at
//! odds with the key, which holds the later change, until the next resync). The message
//! coming back is not applied either: the change is applied already, and a later one
//! read from the key since may be in force.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// How a change from the fleet treats a flip made on the switch itself and not shared
/// yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unshared {
    /// The change wins: the key read when the link comes up (what a replica did alone
    /// is undone), or this replica's own [`Fleet::kill`](super::Fleet::kill).
    Loses,
    /// The flip wins: it was made after what the fleet says, and is shared next.
    Wins,
}

/// Every shared switch's agreed state, by name. Only the link's task reads and writes it.
#[derive(Debug, Default)]
pub(crate) struct Agreed {
    by_name: BTreeMap<Arc<str>, bool>,
    /// Per switch, this replica's changes written whose message has not come back yet.
    unheard: BTreeMap<Arc<str>, u32>,
    /// Switches flipped in code while the link was up whose write failed: the flip is
    /// still to be shared, and wins over the key read on reconnection.
    owed: BTreeSet<Arc<str>>,
}

impl Agreed {
    /// The fleet says switch `name` is `killed`; the switch is now `current`. Whether to
    /// set the switch to it. A switch seen for the first time is taken as agreed.
    pub(crate) fn told(
        &mut self,
        name: &Arc<str>,
        killed: bool,
        current: bool,
        unshared: Unshared,
    ) -> bool {
        let agreed = self.by_name.entry(name.clone()).or_insert(current);
        if unshared == Unshared::Wins && *agreed != current {
            return false;
        }
        *agreed = killed;
        current != killed
    }

    /// This replica wrote a change of switch `name` to its key and published it.
    pub(crate) fn written(&mut self, name: &str) {
        match self.unheard.get_mut(name) {
            Some(count) => *count = count.saturating_add(1),
            None => {
                self.unheard.insert(name.into(), 1);
            }
        }
    }

    /// A message for switch `name` came in on the channel, this replica's own (`own`) or
    /// not: whether to apply it. Only another's, published after every change this
    /// replica wrote (see the [module docs](self)).
    pub(crate) fn heard(&mut self, name: &str, own: bool) -> bool {
        let Some(count) = self.unheard.get_mut(name) else {
            return !own;
        };
        if own {
            *count -= 1;
            if *count == 0 {
                self.unheard.remove(name);
            }
        }
        false
    }

    /// A new subscription: the messages of changes written before it never come back.
    pub(crate) fn resubscribed(&mut self) {
        self.unheard.clear();
    }

    /// Switch `name` flipped, and is now `current`. Whether that is a flip to share: it
    /// was made on the switch itself (not by this task on the fleet's word); it is
    /// agreed from now on.
    pub(crate) fn flipped(&mut self, name: &Arc<str>, current: bool) -> bool {
        let agreed = self.by_name.entry(name.clone()).or_insert(current);
        std::mem::replace(agreed, current) != current
    }

    /// The write of switch `name`'s flip to `current` failed with the link up: the flip
    /// is not agreed, and is owed to the fleet.
    pub(crate) fn owe(&mut self, name: &Arc<str>, current: bool) {
        self.by_name.insert(name.clone(), !current);
        self.owed.insert(name.clone());
    }

    /// Whether a flip of switch `name` is owed to the fleet (see [`owe`](Self::owe)).
    pub(crate) fn owes(&self, name: &str) -> bool {
        self.owed.contains(name)
    }

    /// Switch `name` owes the fleet nothing: its owed flip was shared, or a later change
    /// made without the link (a flip while alone, a person's command) replaced it.
    pub(crate) fn settled(&mut self, name: &str) {
        self.owed.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flip_made_on_the_fleets_word_is_not_shared_again() {
        let name: Arc<str> = "model".into();
        let mut agreed = Agreed::default();
        // A kill heard on the channel: set the switch...
        assert!(agreed.told(&name, true, false, Unshared::Wins));
        // ...whose flip the task then sees: nothing to share.
        assert!(!agreed.flipped(&name, true));
        // Flipped in code: shared once.
        assert!(agreed.flipped(&name, false));
        assert!(!agreed.flipped(&name, false));
    }

    #[test]
    fn an_unshared_flip_wins_over_what_was_heard_but_not_over_the_key_on_reconnection() {
        let name: Arc<str> = "model".into();
        let mut agreed = Agreed::default();
        assert!(!agreed.told(&name, false, false, Unshared::Wins));
        // Killed in code (current true), not shared yet: a revive heard meanwhile, older
        // than the kill, loses.
        assert!(!agreed.told(&name, false, true, Unshared::Wins));
        // The key read when the link comes back wins, and is agreed.
        assert!(agreed.told(&name, false, true, Unshared::Loses));
        assert!(!agreed.flipped(&name, false));
    }

    #[test]
    fn what_is_heard_before_this_replicas_own_change_comes_back_is_older() {
        let mut agreed = Agreed::default();
        assert!(agreed.heard("model", false));
        assert!(
            !agreed.heard("model", true),
            "nothing of ours is on its way"
        );
        agreed.written("model");
        agreed.written("model");
        // Published before our two changes; then the first of ours.
        assert!(!agreed.heard("model", false));
        assert!(!agreed.heard("model", true));
        assert!(!agreed.heard("model", false), "still before our second");
        assert!(!agreed.heard("other", true) && agreed.heard("other", false));
        assert!(!agreed.heard("model", true));
        assert!(agreed.heard("model", false), "after both");
        agreed.written("model");
        agreed.resubscribed();
        assert!(agreed.heard("model", false));
    }

    #[test]
    fn a_flip_whose_write_failed_wins_over_the_key_until_it_is_shared() {
        let name: Arc<str> = "model".into();
        let mut agreed = Agreed::default();
        assert!(!agreed.told(&name, false, false, Unshared::Wins));
        // Killed in code with the link up: shared, but the write fails.
        assert!(agreed.flipped(&name, true));
        agreed.owe(&name, true);
        assert!(agreed.owes("model"));
        // On reconnection the owed flip is read as one not shared yet: the key's
        // revive loses, and the flip is shared next.
        assert!(!agreed.told(&name, false, true, Unshared::Wins));
        assert!(agreed.flipped(&name, true));
        agreed.settled("model");
        assert!(!agreed.owes("model"));
    }

    #[test]
    fn the_same_word_twice_changes_nothing() {
        let name: Arc<str> = "model".into();
        let mut agreed = Agreed::default();
        assert!(agreed.told(&name, true, false, Unshared::Wins));
        assert!(!agreed.told(&name, true, true, Unshared::Wins));
        assert!(!agreed.flipped(&name, true));
    }
}
