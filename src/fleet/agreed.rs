//! What each shared kill switch was last agreed to be with the fleet, so the link's task
//! can tell a flip made on the switch itself (`switch.kill()` in the application's code),
//! which it must share, from one it made itself on the fleet's word, which it must not
//! share again (a replica re-publishing what it heard would echo it around the fleet).
//!
//! Agreed: the state last read from the switch's key, heard on the channel, or written
//! by this replica. A switch whose flag differs from it was flipped on this replica and
//! not shared yet.

use std::collections::BTreeMap;
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

    /// Switch `name` flipped, and is now `current`. Whether that is a flip to share: it
    /// was made on the switch itself (not by this task on the fleet's word); it is
    /// agreed from now on.
    pub(crate) fn flipped(&mut self, name: &Arc<str>, current: bool) -> bool {
        let agreed = self.by_name.entry(name.clone()).or_insert(current);
        std::mem::replace(agreed, current) != current
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
    fn the_same_word_twice_changes_nothing() {
        let name: Arc<str> = "model".into();
        let mut agreed = Agreed::default();
        assert!(agreed.told(&name, true, false, Unshared::Wins));
        assert!(!agreed.told(&name, true, true, Unshared::Wins));
        assert!(!agreed.flipped(&name, true));
    }
}
