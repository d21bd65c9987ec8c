//! The breaker's clock: `tokio::time`, so that paused-time tests run instantly; and a cheap
//! proof that a deadline is still ahead, which spares most calls at an open door the
//! clock read.
//!
//! Reading tokio's clock costs what reading the system's monotonic clock costs (20 to
//! 30 ns on a virtual machine), and a call at a door with a deadline (open with a
//! cooldown in time, half-open with a dwell limit) must know whether the deadline has
//! passed. It rarely needs the exact time for that: [`surely_before`] proves that the
//! deadline is still ahead from the kernel's coarse monotonic clock (a read of a few
//! nanoseconds), when that clock is the one tokio would read, and the deadline is far
//! enough ahead that the coarse clock's lag cannot matter. When it proves nothing, the
//! call reads tokio's clock exactly, so every decision is the one an exact read gives.
//!
//! Tokio's clock is the system's own unless the caller runs under a current-thread
//! runtime's handle, whose clock a test may pause and move on at will; such a caller
//! always reads it.

use std::time::Instant;

use crate::machine::time::Nanos;

/// The breaker's clock: `tokio::time`, so paused-time tests run instantly.
#[inline(always)]
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Whether the breaker's clock, read now on this thread, would be before `deadline`, when
/// that is proven without reading it; `false` when it is not (the clock must be read).
#[inline]
pub(crate) fn surely_before(deadline: Nanos) -> bool {
    coarse::surely_before(deadline)
}

#[cfg(all(any(target_os = "linux", target_os = "android"), not(tcb_loom)))]
mod coarse {
    use std::sync::OnceLock;
    use std::time::Instant;

    use rustix::time::{clock_getres, clock_gettime, ClockId, Timespec};
    use tokio::runtime::{Handle, RuntimeFlavor};

    use crate::machine::time::Nanos;

    /// How to read the coarse clock against the breaker's instants, found once.
    struct Calibration {
        /// Added to a coarse reading, gives the time it was read as [`Nanos`], or a little
        /// later (never earlier).
        offset: i64,
        /// How far ahead a deadline must be for the coarse clock to prove it ahead: eight
        /// times the coarse clock's resolution (about its lag behind the exact clock),
        /// and never under 50 ms.
        margin: i64,
    }

    fn nanos(at: Timespec) -> i64 {
        at.tv_sec
            .saturating_mul(1_000_000_000)
            .saturating_add(at.tv_nsec)
    }

    fn calibration() -> &'static Calibration {
        static CALIBRATION: OnceLock<Calibration> = OnceLock::new();
        CALIBRATION.get_or_init(|| {
            // The standard library's `Instant` is the monotonic clock: an instant read
            // after the raw reading is at least that reading, so the offset found here is
            // at least the true one, and the time it gives never earlier than the truth:
            // a deadline it proves ahead is ahead.
            let raw = nanos(clock_gettime(ClockId::Monotonic));
            let at = Nanos::of(Instant::now()).0;
            let resolution = nanos(clock_getres(ClockId::MonotonicCoarse));
            Calibration {
                offset: at.saturating_sub(raw),
                margin: resolution.saturating_mul(8).max(50_000_000),
            }
        })
    }

    #[inline]
    pub(super) fn surely_before(deadline: Nanos) -> bool {
        if clock_may_be_paused() {
            return false;
        }
        let calibration = calibration();
        // The coarse clock is never ahead of the exact one, and lags it by about its
        // resolution, a tick (under 5 ms measured on a 4 ms tick, idle or busy), far less
        // than the margin: the time now is before `coarse + margin`.
        let coarse = nanos(clock_gettime(ClockId::MonotonicCoarse));
        coarse
            .saturating_add(calibration.offset)
            .saturating_add(calibration.margin)
            < deadline.0
    }

    /// Whether tokio's clock, read on this thread now, may be other than the system's
    /// monotonic clock. Tokio reads the clock of the runtime whose handle is entered (the
    /// one whose task, worker or `block_on` this is, or any entered by hand): only a
    /// current-thread runtime's can be paused. Outside any runtime tokio reads the
    /// system's clock. Asked of the handle at every call, never remembered: a thread may
    /// enter another runtime's handle at any time.
    #[inline]
    fn clock_may_be_paused() -> bool {
        match Handle::try_current() {
            Ok(handle) => handle.runtime_flavor() != RuntimeFlavor::MultiThread,
            // Outside any runtime: the system's clock. A thread whose runtime context is
            // gone (it is exiting) proves nothing.
            Err(error) => !error.is_missing_context(),
        }
    }
}

/// Elsewhere, and under loom, nothing is proven: every such call reads the clock.
#[cfg(not(all(any(target_os = "linux", target_os = "android"), not(tcb_loom))))]
mod coarse {
    use crate::machine::time::Nanos;

    #[inline(always)]
    pub(super) fn surely_before(_: Nanos) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn at(instant: Instant) -> Nanos {
        Nanos::of(instant)
    }

    /// Whatever the deadline's distance, a proof that it is ahead never contradicts the
    /// exact clock read before it: a deadline at or behind that reading, or less than the
    /// margin ahead of it, is never proven.
    fn never_proves_a_deadline_near_or_past() {
        for _ in 0..1_000 {
            let read = Instant::now();
            for offset_ms in [0, 1, 10, 40] {
                let ahead = read + Duration::from_millis(offset_ms);
                assert!(!surely_before(at(ahead)), "{offset_ms} ms ahead proven");
            }
            for behind in [Duration::from_nanos(1), Duration::from_secs(1)] {
                if let Some(behind) = read.checked_sub(behind) {
                    assert!(!surely_before(at(behind)));
                }
            }
        }
    }

    #[test]
    fn outside_a_runtime_a_near_or_past_deadline_is_never_proven_ahead() {
        never_proves_a_deadline_near_or_past();
    }

    #[test]
    fn outside_a_runtime_a_deadline_far_ahead_is_proven_without_reading_the_clock() {
        let far = at(Instant::now() + Duration::from_secs(3600));
        assert_eq!(
            surely_before(far),
            cfg!(any(target_os = "linux", target_os = "android"))
        );
    }

    #[test]
    fn on_a_multi_thread_runtime_a_deadline_far_ahead_is_proven_and_a_near_one_is_not() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .expect("runtime");
        let proven = runtime.block_on(async {
            let far = at(Instant::now() + Duration::from_secs(3600));
            let tasks: Vec<_> = (0..8)
                .map(|_| {
                    tokio::spawn(async move {
                        never_proves_a_deadline_near_or_past();
                        // Twice: the second time the worker is known.
                        surely_before(far) && surely_before(far)
                    })
                })
                .collect();
            let mut proven = Vec::new();
            for task in tasks {
                proven.push(task.await.expect("task"));
            }
            // The thread blocked on the runtime is not a worker: it asks the runtime.
            proven.push(surely_before(far));
            proven
        });
        let expected = cfg!(any(target_os = "linux", target_os = "android"));
        assert!(proven.iter().all(|&p| p == expected), "{proven:?}");
    }

    /// A current-thread runtime's clock may be paused and moved on by a test at will, so
    /// nothing is proven there: not in `block_on`, not in a task, paused or not.
    #[test]
    fn on_a_current_thread_runtime_nothing_is_proven() {
        for paused in [false, true] {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(paused)
                .build()
                .expect("runtime");
            runtime.block_on(async {
                let far = at(now() + Duration::from_secs(3600));
                assert!(!surely_before(far));
                let in_task = tokio::spawn(async move { surely_before(far) && surely_before(far) });
                assert!(!in_task.await.expect("task"));
                let blocking = tokio::task::spawn_blocking(move || surely_before(far));
                assert!(!blocking.await.expect("blocking"));
            });
        }
    }
}
