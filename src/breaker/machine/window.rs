//! The outcome windows behind [`TripPolicy::FailureRate`].

use std::time::{Duration, Instant};

use crate::breaker::settings::{RateWindow, TripPolicy};
use crate::breaker::snapshot::WindowCounts;

/// Outcomes kept for the trip decision.
#[derive(Debug, Clone)]
pub(in crate::breaker) enum Window {
    /// Consecutive failures need no window: the machine's counter is enough.
    None,
    // Both boxed, so that a breaker with no window (the default policy) keeps two
    // words for it rather than the ring's five.
    Ring(Box<Ring>),
    // Ten buckets of three words each.
    Time(Box<Buckets>),
}

impl Window {
    pub(in crate::breaker) fn new(policy: &TripPolicy, epoch: Instant) -> Self {
        match *policy {
            TripPolicy::ConsecutiveFailures(_) => Window::None,
            TripPolicy::FailureRate { window, .. } => match window {
                RateWindow::Calls(n) => Window::Ring(Box::new(Ring::new(n as usize))),
                RateWindow::Time(d) => Window::Time(Box::new(Buckets::new(d, epoch))),
            },
        }
    }

    pub(in crate::breaker) fn push(&mut self, failed: bool, now: Instant) {
        match self {
            Window::None => {}
            Window::Ring(ring) => ring.push(failed),
            Window::Time(buckets) => buckets.push(failed, now),
        }
    }

    /// The failures and calls in the window as of `now`.
    pub(in crate::breaker) fn totals(&self, now: Instant) -> WindowCounts {
        match self {
            Window::None => WindowCounts::default(),
            Window::Ring(ring) => ring.counts,
            Window::Time(buckets) => buckets.totals(now),
        }
    }

    pub(in crate::breaker) fn clear(&mut self) {
        match self {
            Window::None => {}
            Window::Ring(ring) => ring.clear(),
            Window::Time(buckets) => buckets.clear(),
        }
    }
}

/// The last `capacity` outcomes, one bit each.
#[derive(Debug, Clone)]
pub(in crate::breaker) struct Ring {
    bits: Vec<u64>,
    capacity: u32,
    next: u32,
    /// The outcomes in the ring: at most `capacity` calls.
    counts: WindowCounts,
}

impl Ring {
    fn new(capacity: usize) -> Self {
        Ring {
            bits: vec![0; capacity.div_ceil(64)],
            capacity: capacity as u32,
            next: 0,
            counts: WindowCounts::default(),
        }
    }

    fn push(&mut self, failed: bool) {
        let (word, bit) = ((self.next / 64) as usize, self.next % 64);
        let (mask, capacity) = (1u64 << bit, u64::from(self.capacity));
        if self.counts.calls == capacity && self.bits[word] & mask != 0 {
            self.counts.failures -= 1;
        }
        if failed {
            self.bits[word] |= mask;
            self.counts.failures += 1;
        } else {
            self.bits[word] &= !mask;
        }
        self.counts.calls = (self.counts.calls + 1).min(capacity);
        self.next = (self.next + 1) % self.capacity;
    }

    fn clear(&mut self) {
        self.bits.fill(0);
        self.next = 0;
        self.counts = WindowCounts::default();
    }
}

const BUCKETS: usize = 10;

/// A time window in ten buckets; a bucket older than the window no longer counts.
#[derive(Debug, Clone)]
pub(in crate::breaker) struct Buckets {
    epoch: Instant,
    /// The window, in nanoseconds (at least 1): a bucket is a tenth of it, exactly, so
    /// an outcome is forgotten once it is one window old, for any window.
    window: u128,
    slots: [Bucket; BUCKETS],
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// Which bucket-width interval since the epoch this slot holds.
    index: u64,
    calls: u64,
    failures: u64,
}

impl Buckets {
    fn new(window: Duration, epoch: Instant) -> Self {
        Buckets {
            epoch,
            window: window.as_nanos().max(1),
            slots: [Bucket::default(); BUCKETS],
        }
    }

    fn index(&self, now: Instant) -> u64 {
        let since = now.saturating_duration_since(self.epoch).as_nanos();
        u64::try_from(since * BUCKETS as u128 / self.window).unwrap_or(u64::MAX)
    }

    fn push(&mut self, failed: bool, now: Instant) {
        let index = self.index(now);
        let slot = &mut self.slots[(index % BUCKETS as u64) as usize];
        if slot.index != index {
            *slot = Bucket {
                index,
                ..Bucket::default()
            };
        }
        // Counted in 64 bits, saturating: a window in time has no bound on its calls.
        slot.calls = slot.calls.saturating_add(1);
        slot.failures = slot.failures.saturating_add(u64::from(failed));
    }

    fn totals(&self, now: Instant) -> WindowCounts {
        let index = self.index(now);
        self.slots
            .iter()
            .filter(|b| {
                b.calls > 0 && b.index.saturating_add(BUCKETS as u64) > index && b.index <= index
            })
            .fold(WindowCounts::default(), |sum, b| WindowCounts {
                failures: sum.failures.saturating_add(b.failures),
                calls: sum.calls.saturating_add(b.calls),
            })
    }

    fn clear(&mut self) {
        self.slots = [Bucket::default(); BUCKETS];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window in time has no bound on its calls: past 2^32 in one window (50 days at
    /// 1,000 calls a second), the counts go on, and the share stays a share.
    #[test]
    fn a_time_window_counts_past_four_billion_calls() {
        let epoch = Instant::now();
        let mut buckets = Buckets::new(Duration::from_secs(3600), epoch);
        buckets.push(true, epoch);
        let slot = &mut buckets.slots[0];
        (slot.calls, slot.failures) = (u64::from(u32::MAX), u64::from(u32::MAX / 2));
        buckets.push(false, epoch);
        buckets.push(true, epoch);
        let totals = buckets.totals(epoch);
        assert_eq!(totals.calls, u64::from(u32::MAX) + 2);
        assert_eq!(totals.failures, u64::from(u32::MAX / 2) + 1);
        assert!(totals.failures <= totals.calls);
    }

    #[test]
    fn ring_forgets_the_oldest_outcome() {
        let mut ring = Ring::new(3);
        for failed in [true, true, false] {
            ring.push(failed);
        }
        assert_eq!((ring.counts.failures, ring.counts.calls), (2, 3));
        ring.push(false); // pushes out the first failure
        assert_eq!((ring.counts.failures, ring.counts.calls), (1, 3));
        ring.push(false);
        ring.push(false);
        assert_eq!((ring.counts.failures, ring.counts.calls), (0, 3));
    }

    #[test]
    fn ring_spans_several_words() {
        let mut ring = Ring::new(130);
        for i in 0..300 {
            ring.push(i % 2 == 0);
        }
        assert_eq!((ring.counts.failures, ring.counts.calls), (65, 130));
    }

    /// Buckets are a tenth of the window exactly, whatever its length: a window of
    /// 1 ns, or of 15 ns, keeps its outcomes for that long and no longer.
    #[test]
    fn a_window_not_a_multiple_of_ten_nanoseconds_keeps_its_length() {
        let epoch = Instant::now();
        let ns = Duration::from_nanos;
        let mut one = Buckets::new(ns(1), epoch);
        one.push(true, epoch);
        assert_eq!(one.totals(epoch).calls, 1);
        assert_eq!(one.totals(epoch + ns(1)).calls, 0, "forgotten 1 ns on");

        let mut fifteen = Buckets::new(ns(15), epoch);
        fifteen.push(true, epoch);
        assert_eq!(fifteen.totals(epoch + ns(12)).calls, 1, "12 ns old: kept");
        assert_eq!(fifteen.totals(epoch + ns(14)).calls, 1, "14 ns old: kept");
        assert_eq!(
            fifteen.totals(epoch + ns(15)).calls,
            0,
            "15 ns old: forgotten"
        );
    }

    #[test]
    fn time_buckets_drop_outcomes_older_than_the_window() {
        let epoch = Instant::now();
        let mut buckets = Buckets::new(Duration::from_secs(10), epoch);
        buckets.push(true, epoch);
        buckets.push(false, epoch + Duration::from_secs(5));
        assert_eq!(
            buckets.totals(epoch + Duration::from_secs(9)),
            WindowCounts {
                failures: 1,
                calls: 2
            }
        );
        // The first bucket [0s, 1s) leaves the window at 10s.
        assert_eq!(
            buckets.totals(epoch + Duration::from_secs(10)),
            WindowCounts {
                failures: 0,
                calls: 1
            }
        );
        assert_eq!(
            buckets.totals(epoch + Duration::from_secs(16)),
            WindowCounts {
                failures: 0,
                calls: 0
            }
        );
        // A slot reused for a later interval starts empty.
        buckets.push(true, epoch + Duration::from_secs(20));
        assert_eq!(
            buckets.totals(epoch + Duration::from_secs(20)),
            WindowCounts {
                failures: 1,
                calls: 1
            }
        );
    }
}
