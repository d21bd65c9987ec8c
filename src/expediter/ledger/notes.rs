//! The ledger's lock and its log lines: kept while the lock is held (a tracing subscriber is
//! someone else's code) and emitted when the lock is let go.

use std::sync::{Arc, Mutex, MutexGuard};

use super::Ledger;

/// Something worth a log line, kept until the lock is let go (a tracing subscriber is
/// someone else's code).
#[derive(Debug)]
pub(crate) enum Note {
    Stale { tool: Arc<str>, generation: u64 },
    Systemic { tools: Vec<Arc<str>>, cause: String },
    Recovered,
    Deferred { task: Arc<str> },
    ProbesStopped { tool: Arc<str>, failed_probes: u32 },
}

impl Note {
    pub(crate) fn emit(self) {
        const TARGET: &str = "tower_circuit_breaker::expediter";
        match self {
            Note::Stale { tool, generation } => {
                tracing::debug!(target: TARGET, tool = %tool, generation, "stale transition ignored")
            }
            Note::Systemic { tools, cause } => {
                tracing::warn!(target: TARGET, ?tools, "systemic failure: {cause}; pausing all calls")
            }
            Note::Recovered => {
                tracing::info!(target: TARGET, "recovery confirmed: probes resume with backoff")
            }
            Note::Deferred { task } => tracing::info!(target: TARGET, task = %task, "DEFERRED"),
            Note::ProbesStopped {
                tool,
                failed_probes,
            } => tracing::warn!(
                target: TARGET,
                tool = %tool,
                failed_probes,
                "held open: its failed probes used up their allowance; no more probes until a new cycle or a person frees it"
            ),
        }
    }
}

/// The ledger's lock. Letting it go emits the log lines the ledger kept meanwhile, so
/// that no tracing subscriber runs under the lock.
pub(crate) struct LedgerGuard<'a>(Option<MutexGuard<'a, Ledger>>);

impl<'a> LedgerGuard<'a> {
    /// Takes the lock, poisoned or not.
    pub(crate) fn lock(ledger: &'a Mutex<Ledger>) -> Self {
        LedgerGuard(Some(ledger.lock().unwrap_or_else(|p| p.into_inner())))
    }
}

impl std::ops::Deref for LedgerGuard<'_> {
    type Target = Ledger;

    fn deref(&self) -> &Ledger {
        self.0.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for LedgerGuard<'_> {
    fn deref_mut(&mut self) -> &mut Ledger {
        self.0.as_mut().expect("held until dropped")
    }
}

impl Drop for LedgerGuard<'_> {
    fn drop(&mut self) {
        let notes = self.0.as_mut().map(|ledger| ledger.take_notes());
        drop(self.0.take());
        for note in notes.into_iter().flatten() {
            note.emit();
        }
    }
}
