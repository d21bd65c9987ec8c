//! What a replica shares with its fleet: kill switches and breakers, by name.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::act::KillAct;
use super::hold::Hold;
use super::policy::{HintPolicy, Reports};
use crate::{CircuitBreakerHandle, KillSwitch};

/// A breaker shared with the fleet: its handle, how it reads hints, what its peers
/// report and the hold they put on it.
#[derive(Debug)]
pub(crate) struct SharedBreaker {
    pub(crate) handle: CircuitBreakerHandle,
    pub(crate) policy: HintPolicy,
    pub(crate) reports: Reports,
    pub(crate) hold: Hold,
}

/// Everything shared, by name. Held under the replica's lock; nothing is called on a
/// handle or a switch while it is held.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    pub(crate) switches: BTreeMap<Arc<str>, KillSwitch>,
    pub(crate) breakers: BTreeMap<Arc<str>, SharedBreaker>,
    /// Kills and revives made here and kept, not yet written, by switch: as the link's
    /// task last told.
    pub(crate) kept: BTreeMap<Arc<str>, KillAct>,
}
