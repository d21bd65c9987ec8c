//! Which breakers hold a name's series: an evicted breaker's series are set to show
//! nothing only when no other breaker holds them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The breakers alive under each name, among those built from one builder (each key's
/// of a keyed registry).
///
/// A keyed registry tells an eviction once its locks are released (an observer may call
/// back in), so the evicted key can come back, and its new breaker start its series,
/// before the old breaker's [`Evicted`](crate::Event::Evicted) reaches the metrics: then
/// the series are the new breaker's, and the eviction must leave them be. What is counted
/// is the breakers alive, not the newest one made: a breaker made for a key by a call
/// that lost the race to make it is dropped untold, and must not keep the winner's
/// eviction from clearing the series. The count is changed, and the series written, under
/// one lock, so that a start and an eviction under one name are written in the order
/// they were counted.
#[derive(Default)]
pub(super) struct Holders(Mutex<HashMap<Arc<str>, usize>>);

impl Holders {
    fn lock(&self) -> MutexGuard<'_, HashMap<Arc<str>, usize>> {
        // Nothing that leaves the map unsound runs under it: a poisoned one is used as it is.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts a breaker alive under `name`, running `start` (its series set to their
    /// starting values) under the lock; until the returned hold is dropped.
    pub(super) fn hold(self: &Arc<Self>, name: Arc<str>, start: impl FnOnce()) -> Held {
        let mut names = self.lock();
        *names.entry(name.clone()).or_default() += 1;
        start();
        drop(names);
        Held {
            holders: self.clone(),
            name,
        }
    }
}

/// One breaker counted alive under its name.
pub(super) struct Held {
    holders: Arc<Holders>,
    name: Arc<str>,
}

impl Held {
    /// Runs `gone` (the series set to show nothing) under the lock, unless another
    /// breaker is alive under the name.
    pub(super) fn evicted(&self, gone: impl FnOnce()) {
        let names = self.holders.lock();
        if names.get(&self.name).copied() == Some(1) {
            gone();
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut names = self.holders.lock();
        if let Some(alive) = names.get_mut(&self.name) {
            *alive -= 1;
            if *alive == 0 {
                names.remove(&self.name);
            }
        }
    }
}
