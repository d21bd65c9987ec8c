//! Per-replica sequence numbers: each replica numbers the hints it publishes, 1, 2, 3...
//! in each run of the process (a run has a random id), so a peer drops a replayed or
//! older hint and counts the ones it missed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Where a received hint stands in its replica's sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// Later than any seen from this run; `missed`: how many were skipped over.
    Next { missed: u64 },
    /// Seen already, or older than one seen.
    Stale,
}

#[derive(Debug, Clone)]
struct Last {
    run: Arc<str>,
    seq: u64,
    seen: Instant,
}

/// The last sequence number seen from each replica, for at most `limit` replicas (the
/// one heard from longest ago is forgotten first).
#[derive(Debug, Clone)]
pub(crate) struct Sequences {
    last: HashMap<Arc<str>, Last>,
    limit: usize,
}

impl Sequences {
    pub(crate) fn new(limit: usize) -> Sequences {
        Sequences {
            last: HashMap::new(),
            limit: limit.max(1),
        }
    }

    /// Checks, and remembers, hint `seq` of `replica`'s run `run`. A new run (the
    /// replica restarted) starts a new sequence.
    pub(crate) fn check(&mut self, replica: &str, run: &str, seq: u64, now: Instant) -> Order {
        if let Some(last) = self.last.get_mut(replica) {
            if &*last.run == run {
                if seq <= last.seq {
                    return Order::Stale;
                }
                let missed = seq - last.seq - 1;
                last.seq = seq;
                last.seen = now;
                return Order::Next { missed };
            }
            *last = Last {
                run: run.into(),
                seq,
                seen: now,
            };
            return Order::Next { missed: 0 };
        }
        if self.last.len() >= self.limit {
            let oldest = self
                .last
                .iter()
                .min_by_key(|(_, last)| last.seen)
                .map(|(name, _)| name.clone());
            if let Some(name) = oldest {
                self.last.remove(&name);
            }
        }
        self.last.insert(
            replica.into(),
            Last {
                run: run.into(),
                seq,
                seen: now,
            },
        );
        Order::Next { missed: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replays_are_stale_gaps_are_counted_and_a_restart_starts_over() {
        let now = Instant::now();
        let mut seqs = Sequences::new(16);
        assert_eq!(seqs.check("a", "run1", 1, now), Order::Next { missed: 0 });
        assert_eq!(seqs.check("a", "run1", 1, now), Order::Stale);
        assert_eq!(seqs.check("a", "run1", 4, now), Order::Next { missed: 2 });
        assert_eq!(seqs.check("a", "run1", 3, now), Order::Stale);
        assert_eq!(seqs.check("a", "run2", 1, now), Order::Next { missed: 0 });
        assert_eq!(seqs.check("b", "run1", 1, now), Order::Next { missed: 0 });
    }

    #[test]
    fn the_replicas_remembered_are_bounded() {
        let now = Instant::now();
        let mut seqs = Sequences::new(4);
        for i in 0..50u64 {
            let at = now + std::time::Duration::from_millis(i);
            seqs.check(&format!("r{i}"), "run", 1, at);
        }
        assert_eq!(seqs.last.len(), 4);
    }
}
