//! Per-replica sequence numbers: each replica numbers the hints it publishes, 1, 2, 3...
//! in each run of the process (a run has a random id), so a peer drops a replayed or
//! older hint and counts the ones it missed.
//!
//! Runs are ordered too, so that a hint replayed from a replica's earlier run stays
//! stale once a later run has been heard: a run heard before is remembered as earlier
//! (the last [`EARLIER_RUNS`] of each replica), and a run not heard before is later only
//! if its hint is no older than the latest hint of the replica's current run (times as
//! the hints give them, a time ahead of this replica's clock taken as now: a forged time
//! far ahead cannot make a replica's next run read as older).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

/// How many of a replica's earlier runs are remembered, besides its current one.
const EARLIER_RUNS: usize = 8;

/// Where a received hint stands in its replica's sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// Later than any seen from this run; `missed`: how many were skipped over.
    Next { missed: u64 },
    /// Seen already, older than one seen, or of an earlier run.
    Stale,
}

/// What is remembered of one replica.
#[derive(Debug, Clone)]
struct Peer {
    /// Its current run: the latest heard.
    run: Arc<str>,
    /// The last sequence number seen from the current run.
    seq: u64,
    /// The time of the latest hint of the current run (Unix milliseconds, at most the
    /// time it was received).
    at_ms: u64,
    /// Its earlier runs, the latest last.
    earlier: VecDeque<Arc<str>>,
    /// When it was last heard from.
    seen: Instant,
}

/// The last sequence number seen from each replica, for at most `limit` replicas (the
/// one heard from longest ago is forgotten first).
#[derive(Debug, Clone)]
pub(crate) struct Sequences {
    peers: HashMap<Arc<str>, Peer>,
    limit: usize,
}

impl Sequences {
    pub(crate) fn new(limit: usize) -> Sequences {
        Sequences {
            peers: HashMap::new(),
            limit: limit.max(1),
        }
    }

    /// Checks, and remembers, hint `seq` of `replica`'s run `run`, sent at `at_ms`
    /// (Unix milliseconds, as the hint says) and received at `now` (`wall_ms` on the wall
    /// clock). A later run (the replica restarted) starts a new sequence; an earlier one
    /// is stale.
    pub(crate) fn check(
        &mut self,
        replica: &str,
        run: &str,
        seq: u64,
        at_ms: u64,
        now: Instant,
        wall_ms: u64,
    ) -> Order {
        let at_ms = at_ms.min(wall_ms);
        if let Some(peer) = self.peers.get_mut(replica) {
            if &*peer.run == run {
                if seq <= peer.seq {
                    return Order::Stale;
                }
                let missed = seq - peer.seq - 1;
                peer.seq = seq;
                peer.at_ms = peer.at_ms.max(at_ms);
                peer.seen = now;
                return Order::Next { missed };
            }
            if at_ms < peer.at_ms || peer.earlier.iter().any(|r| &**r == run) {
                return Order::Stale;
            }
            if peer.earlier.len() >= EARLIER_RUNS {
                peer.earlier.pop_front();
            }
            let ended = std::mem::replace(&mut peer.run, run.into());
            peer.earlier.push_back(ended);
            peer.seq = seq;
            peer.at_ms = at_ms;
            peer.seen = now;
            return Order::Next { missed: 0 };
        }
        if self.peers.len() >= self.limit {
            let oldest = self
                .peers
                .iter()
                .min_by_key(|(_, peer)| peer.seen)
                .map(|(name, _)| name.clone());
            if let Some(name) = oldest {
                self.peers.remove(&name);
            }
        }
        self.peers.insert(
            replica.into(),
            Peer {
                run: run.into(),
                seq,
                at_ms,
                earlier: VecDeque::new(),
                seen: now,
            },
        );
        Order::Next { missed: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WALL: u64 = 1_764_580_000_000;

    #[test]
    fn replays_are_stale_gaps_are_counted_and_a_restart_starts_over() {
        let now = Instant::now();
        let mut seqs = Sequences::new(16);
        let mut check = |replica, run, seq| seqs.check(replica, run, seq, WALL, now, WALL);
        assert_eq!(check("a", "run1", 1), Order::Next { missed: 0 });
        assert_eq!(check("a", "run1", 1), Order::Stale);
        assert_eq!(check("a", "run1", 4), Order::Next { missed: 2 });
        assert_eq!(check("a", "run1", 3), Order::Stale);
        assert_eq!(check("a", "run2", 1), Order::Next { missed: 0 });
        assert_eq!(check("b", "run1", 1), Order::Next { missed: 0 });
    }

    #[test]
    fn an_earlier_run_stays_stale_once_a_later_one_is_heard() {
        let now = Instant::now();
        let mut seqs = Sequences::new(16);
        assert_eq!(
            seqs.check("a", "run1", 7, WALL, now, WALL),
            Order::Next { missed: 0 }
        );
        // The restart's first hint, in the same millisecond.
        assert_eq!(
            seqs.check("a", "run2", 1, WALL, now, WALL),
            Order::Next { missed: 0 }
        );
        // run1 replayed, as it was, or further on: remembered as earlier.
        assert_eq!(seqs.check("a", "run1", 7, WALL, now, WALL), Order::Stale);
        assert_eq!(seqs.check("a", "run1", 8, WALL, now, WALL), Order::Stale);
        // A run never heard, older than the current run's latest hint: earlier too, and
        // the current run goes on.
        assert_eq!(
            seqs.check("a", "run0", 3, WALL - 1, now, WALL),
            Order::Stale
        );
        assert_eq!(
            seqs.check("a", "run2", 2, WALL, now, WALL),
            Order::Next { missed: 0 }
        );
    }

    #[test]
    fn a_time_ahead_of_the_clock_counts_as_now() {
        let now = Instant::now();
        let mut seqs = Sequences::new(16);
        // Forged with the replica's run and the end of time.
        seqs.check("a", "run1", 1, u64::MAX, now, WALL);
        // Its next run, a moment later, is still later.
        assert_eq!(
            seqs.check("a", "run2", 1, WALL + 1, now, WALL + 1),
            Order::Next { missed: 0 }
        );
    }

    #[test]
    fn the_replicas_and_runs_remembered_are_bounded() {
        let now = Instant::now();
        let mut seqs = Sequences::new(4);
        for i in 0..50u64 {
            let at = now + std::time::Duration::from_millis(i);
            seqs.check(&format!("r{i}"), "run", 1, WALL, at, WALL);
        }
        assert_eq!(seqs.peers.len(), 4);
        for i in 0..50u64 {
            seqs.check("r49", &format!("run{i}"), 1, WALL + i, now, WALL + i);
        }
        assert_eq!(seqs.peers["r49"].earlier.len(), EARLIER_RUNS);
    }
}
