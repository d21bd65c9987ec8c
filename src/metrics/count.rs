//! The outcomes a breaker's trip policy counts, mirrored in bounded memory, for the buffered and slow calls.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::point::Kind;
use super::point::Point;
use crate::config::{Config, RateWindow, TripPolicy};

/// The count, even if an update panicked while holding it (a recorder's panic): it is
/// whole between updates.
pub(super) fn lock(count: &Mutex<Count>) -> std::sync::MutexGuard<'_, Count> {
    count
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The outcomes in a breaker's trip-policy count, as its events tell them (the breaker
/// keeps no list of them): what the buffered- and slow-call series show.
///
/// - With a failure rate over the last `n` calls, the last `n` outcomes; over a time, the
///   outcomes of that time, in ten buckets as the breaker keeps them (a bucket leaves
///   whole).
/// - With consecutive failures, the run of failures (a success ends it).
///
/// A call is slow when it took longer than the slow-call threshold; with none, no call
/// is. Kept in bounded memory, as the breaker keeps its own count (two bits an outcome for
/// a window in calls, ten buckets for one in time, totals alone for consecutive
/// failures), with running totals, so that showing the series reads four numbers.
#[derive(Debug)]
pub(super) struct Count {
    slow_call: Option<Duration>,
    /// Outcomes needed before a slow-call rate is shown (the trip policy's minimum).
    minimum: u32,
    /// Outcomes in the count, by `[failed][slow]`.
    totals: [[u32; 2]; 2],
    kept: Kept,
}

/// What a [`Count`] keeps to know which outcomes leave it.
#[derive(Debug)]
pub(super) enum Kept {
    /// Consecutive failures, up to `threshold`: every outcome counted is a failure, and a
    /// success clears them all, so the totals are enough.
    Run { threshold: u32 },
    /// The last `capacity` outcomes, two bits each (failed, slow), oldest first from
    /// `start`.
    Ring {
        bits: Vec<u64>,
        capacity: usize,
        start: usize,
        len: usize,
    },
    /// Ten buckets of `span / 10` each, the newest last, each with its totals.
    Buckets {
        width: Duration,
        buckets: VecDeque<(Instant, [[u32; 2]; 2])>,
    },
}

/// Outcomes a word of a [`Kept::Ring`] holds.
pub(super) const PER_WORD: usize = 32;

impl Count {
    pub(super) fn new(config: &Config) -> Self {
        let (kept, minimum) = match config.trip_policy() {
            TripPolicy::ConsecutiveFailures(threshold) => (Kept::Run { threshold }, 1),
            TripPolicy::FailureRate {
                window,
                minimum_calls,
                ..
            } => (
                match window {
                    RateWindow::Calls(n) => Kept::Ring {
                        bits: Vec::new(),
                        capacity: (n as usize).max(1),
                        start: 0,
                        len: 0,
                    },
                    RateWindow::Time(span) => Kept::Buckets {
                        width: (span / 10).max(Duration::from_nanos(1)),
                        buckets: VecDeque::new(),
                    },
                },
                minimum_calls.max(1),
            ),
        };
        Count {
            minimum,
            slow_call: config.slow_call_threshold(),
            totals: [[0; 2]; 2],
            kept,
        }
    }

    pub(super) fn record(&mut self, failed: bool, elapsed: Option<Duration>, now: Instant) {
        let slow = matches!((self.slow_call, elapsed), (Some(limit), Some(took)) if took > limit);
        let (f, s) = (usize::from(failed), usize::from(slow));
        match &mut self.kept {
            Kept::Run { threshold } => {
                if !failed {
                    self.totals = [[0; 2]; 2];
                } else if self.totals[1][0] + self.totals[1][1] < *threshold {
                    self.totals[1][s] += 1;
                }
                return;
            }
            Kept::Ring {
                bits,
                capacity,
                start,
                len,
            } => {
                let code = (f << 1 | s) as u64;
                if *len == *capacity {
                    let old = ring_get(bits, *start);
                    self.totals[(old >> 1) as usize][(old & 1) as usize] -= 1;
                    ring_set(bits, *start, code);
                    *start = (*start + 1) % *capacity;
                } else {
                    let at = (*start + *len) % *capacity;
                    if bits.len() * PER_WORD <= at {
                        bits.resize(at / PER_WORD + 1, 0);
                    }
                    ring_set(bits, at, code);
                    *len += 1;
                }
            }
            Kept::Buckets { width, buckets } => {
                let span = *width * 10;
                while buckets
                    .front()
                    .is_some_and(|(began, _)| now.saturating_duration_since(*began) >= span)
                {
                    if let Some((_, gone)) = buckets.pop_front() {
                        for (total, gone) in
                            self.totals.iter_mut().flatten().zip(gone.iter().flatten())
                        {
                            *total -= gone;
                        }
                    }
                }
                let current = buckets
                    .back()
                    .is_some_and(|(began, _)| now.saturating_duration_since(*began) < *width);
                if !current {
                    buckets.push_back((now, [[0; 2]; 2]));
                }
                if let Some((_, counts)) = buckets.back_mut() {
                    counts[f][s] += 1;
                }
            }
        }
        self.totals[f][s] += 1;
    }

    pub(super) fn clear(&mut self) {
        self.totals = [[0; 2]; 2];
        match &mut self.kept {
            Kept::Run { .. } => {}
            Kept::Ring { start, len, .. } => (*start, *len) = (0, 0),
            Kept::Buckets { buckets, .. } => buckets.clear(),
        }
    }

    /// Sets the buffered- and slow-call series and the slow-call rate.
    pub(super) fn show(&self, update: &mut impl FnMut(Point, f64)) {
        let [success, failure] = self.totals;
        update(
            Point::Buffered(Kind::Success),
            f64::from(success[0] + success[1]),
        );
        update(
            Point::Buffered(Kind::Failure),
            f64::from(failure[0] + failure[1]),
        );
        update(Point::Slow(Kind::Success), f64::from(success[1]));
        update(Point::Slow(Kind::Failure), f64::from(failure[1]));
        let total = success[0] + success[1] + failure[0] + failure[1];
        let rate = if total < self.minimum {
            NO_RATE
        } else {
            f64::from(success[1] + failure[1]) * 100.0 / f64::from(total)
        };
        update(Point::SlowCallRate, rate);
    }
}

/// The two bits of outcome `i` of a ring.
pub(super) fn ring_get(bits: &[u64], i: usize) -> u64 {
    bits[i / PER_WORD] >> (i % PER_WORD * 2) & 0b11
}

/// Sets the two bits of outcome `i` of a ring.
pub(super) fn ring_set(bits: &mut [u64], i: usize, code: u64) {
    let shift = i % PER_WORD * 2;
    let word = &mut bits[i / PER_WORD];
    *word = *word & !(0b11 << shift) | code << shift;
}

/// The failure rate before any outcome is counted, as resilience4j reports it.
pub(super) const NO_RATE: f64 = -1.0;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Builder;

    /// The series a count shows, by point.
    fn shown(count: &Count) -> ([f64; 4], f64) {
        let mut series = [0.0; 4];
        let mut rate = f64::NAN;
        count.show(&mut |point, value| match point {
            Point::Buffered(Kind::Success) => series[0] = value,
            Point::Buffered(Kind::Failure) => series[1] = value,
            Point::Slow(Kind::Success) => series[2] = value,
            Point::Slow(Kind::Failure) => series[3] = value,
            Point::SlowCallRate => rate = value,
            _ => {}
        });
        (series, rate)
    }

    const SLOW: Option<Duration> = Some(Duration::from_secs(2));
    const FAST: Option<Duration> = Some(Duration::from_millis(1));

    #[test]
    fn a_window_in_calls_keeps_the_last_outcomes_only_across_its_ring_many_times_over() {
        let config = Builder::new()
            .failure_rate(0.5, RateWindow::Calls(3), 1)
            .slow_call_threshold(Duration::from_secs(1))
            .build_config()
            .expect("valid settings");
        let mut count = Count::new(&config);
        let now = Instant::now();
        // Far more outcomes than the ring holds: only the last three are shown.
        for i in 0..1_000 {
            count.record(i % 2 == 0, if i % 3 == 0 { SLOW } else { FAST }, now);
        }
        count.record(true, SLOW, now); // failed, slow
        count.record(false, SLOW, now); // succeeded, slow
        count.record(false, FAST, now); // succeeded
        let (series, rate) = shown(&count);
        assert_eq!(series, [2.0, 1.0, 1.0, 1.0]);
        assert!((rate - 200.0 / 3.0).abs() < 1e-9, "{rate}");
        count.clear();
        assert_eq!(shown(&count).0, [0.0; 4]);
        count.record(false, FAST, now);
        assert_eq!(shown(&count).0, [1.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn a_window_in_time_lets_whole_buckets_go_as_time_passes() {
        let config = Builder::new()
            .failure_rate(0.5, RateWindow::Time(Duration::from_secs(10)), 1)
            .slow_call_threshold(Duration::from_secs(1))
            .build_config()
            .expect("valid settings");
        let mut count = Count::new(&config);
        let start = Instant::now();
        for second in 0..10 {
            count.record(true, SLOW, start + Duration::from_secs(second));
        }
        assert_eq!(shown(&count).0, [0.0, 10.0, 0.0, 10.0]);
        // Ten seconds after the first, its bucket has gone; the others stay.
        count.record(false, FAST, start + Duration::from_secs(10));
        assert_eq!(shown(&count).0, [1.0, 9.0, 0.0, 9.0]);
        // Long after, only the newest outcome is left.
        count.record(false, FAST, start + Duration::from_secs(100));
        assert_eq!(shown(&count).0, [1.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn consecutive_failures_count_the_run_up_to_the_threshold_and_a_success_ends_it() {
        let config = Builder::new()
            .failure_threshold(3)
            .build_config()
            .expect("valid settings");
        let mut count = Count::new(&config);
        let now = Instant::now();
        for _ in 0..5 {
            count.record(true, None, now);
        }
        assert_eq!(shown(&count).0, [0.0, 3.0, 0.0, 0.0]);
        count.record(false, None, now);
        assert_eq!(shown(&count), ([0.0; 4], NO_RATE));
    }
}
