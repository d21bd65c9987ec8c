//! The breaker's clock: `tokio::time`, so that paused-time tests run instantly; and a cheap
//! proof that a deadline is still ahead, which spares most calls at an open door the
//! clock read.
//!
//! Which clock. Tokio's clock can be paused only when tokio is built with its `test-util`
//! feature, as tests build it; built without it, as in production, tokio's clock is the
//! system's monotonic clock everywhere, and every read here is the system's. With
//! `test-util`, tokio's clock is the clock of the runtime whose handle is entered; only a
//! current-thread runtime's can be paused (a test's), and a multi-thread runtime's, like
//! the clock outside any runtime, is the system's monotonic clock. A call made outside
//! any task (in `block_on`) reads tokio's clock: asking the entered handle which runtime
//! it is clones the handle, two atomic writes on a line the runtime's threads share,
//! which costs more than the read it could spare. A call made by a task asks the handle
//! the first time, and keeps the answer for the rest of the task: a task of a multi-thread runtime
//! runs on the system's clock, also if it later enters a paused runtime's handle or drives
//! a paused runtime inside `block_in_place` (asking the handle on every call would touch
//! the runtime's reference count twice a call, a cache line passed between the runtime's
//! threads); a task of a current-thread runtime always reads tokio's clock. Every read the
//! breaker makes follows this one rule ([`now`]), so a deadline is set and decided on the
//! same clock.
//!
//! The proof. Reading the clock costs 20 to 30 ns on a virtual machine, and a call at a
//! door with a deadline (open with a cooldown in time, a hold, half-open with a dwell
//! limit) must know whether the deadline has passed. It rarely needs the exact time for
//! that: on the system's clock, [`surely_before`] proves the deadline still ahead from the
//! kernel's coarse monotonic clock (a read of a few nanoseconds) when the deadline is far
//! enough ahead that the coarse clock's lag cannot matter. When it proves nothing, the
//! call reads the clock exactly, so every decision is the one an exact read gives.

use std::cell::Cell;
use std::time::Instant;

use tokio::runtime::{Handle, RuntimeFlavor, TryCurrentError};

use crate::breaker::nanos::Nanos;

/// The clock every breaker reads: tokio's (so that paused-time tests run instantly), but
/// the system's where tokio's cannot be paused: in a task of a multi-thread runtime, and
/// everywhere when tokio is built without its `test-util` feature (as in production). An
/// observer that keeps time of its own (a window of outcomes in time, as the breaker's)
/// reads this clock, so that its instants and the breaker's agree.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
///
/// let before = tower_circuit_breaker::clock::now();
/// tokio::time::sleep(Duration::from_secs(60)).await; // paused: at once
/// assert_eq!(tower_circuit_breaker::clock::now() - before, Duration::from_secs(60));
/// # }
/// ```
#[inline]
pub fn now() -> Instant {
    if on_the_system_clock() {
        Instant::now()
    } else {
        tokio::time::Instant::now().into_std()
    }
}

/// Whether the breaker's clock, read now on this thread, would be before `deadline`, when
/// that is proven without reading it; `false` when it is not (the clock must be read).
#[inline]
pub(in crate::breaker) fn surely_before(deadline: Nanos) -> bool {
    on_the_system_clock() && coarse::surely_before(deadline)
}

/// Whether a call made here runs on the system's monotonic clock (see the
/// [module docs](self)): always, where tokio's clock cannot be paused; else in a task, as
/// its first call found, and outside any task, not known without asking the entered
/// handle, which costs more than reading the clock.
#[inline]
fn on_the_system_clock() -> bool {
    !TOKIO_CAN_PAUSE || task_on_the_system_clock() == Some(true)
}

/// Whether the breaker's clock can be paused: whether tokio is built with its `test-util`
/// feature (`tokio::time::pause`), as tests build it. Where it cannot, as in a production
/// build, every clock read is the system's, on every runtime (see [`now`]).
///
/// ```
/// // The crate's doc tests build tokio with `test-util`.
/// assert!(tower_circuit_breaker::clock::can_be_paused());
/// ```
pub const fn can_be_paused() -> bool {
    TOKIO_CAN_PAUSE
}

/// Whether tokio was built with its `test-util` feature, which alone lets its clock be
/// paused: whether it has `tokio::time::pause`. Found by name: inside the block, the glob
/// import's `pause`, when tokio has one, hides the stand-in [`pause`] declared below.
const TOKIO_CAN_PAUSE: bool = {
    #[allow(unused_imports)]
    use tokio::time::*;
    pause_is_a_function(&pause)
};

/// Stands in for `tokio::time::pause` where tokio has none (see [`TOKIO_CAN_PAUSE`]).
#[allow(non_upper_case_globals, dead_code)]
const pause: NoPause = NoPause;

/// The stand-in's type: not a function.
struct NoPause;

/// Whether a value is a function, told by its type.
trait Function {
    const IS: bool;
}

impl Function for NoPause {
    const IS: bool = false;
}

impl<F: Fn()> Function for F {
    const IS: bool = true;
}

const fn pause_is_a_function<T: Function>(_: &T) -> bool {
    T::IS
}

/// In a task, whether it runs on the system's clock, as its first call found; `None`
/// outside any task.
#[inline]
fn task_on_the_system_clock() -> Option<bool> {
    thread_local! {
        /// The task that last called here, and what its first call found.
        static TASK: Cell<Option<(tokio::task::Id, bool)>> = const { Cell::new(None) };
    }
    let task = tokio::task::try_id()?;
    let system = TASK.try_with(|known| match known.get() {
        Some((id, system)) if id == task => system,
        _ => {
            let system = handle_on_the_system_clock();
            known.set(Some((task, system)));
            system
        }
    });
    Some(system.unwrap_or(false))
}

/// Whether the handle entered now, if any, keeps the system's clock: none (outside any
/// runtime), or a multi-thread runtime's. A thread whose runtime context is gone (it is
/// exiting) is not known to.
fn handle_on_the_system_clock() -> bool {
    keeps_the_system_clock(Handle::try_current())
}

/// Whether `handle`, as `Handle::try_current` gave it, keeps the system's clock.
#[inline]
fn keeps_the_system_clock(handle: Result<Handle, TryCurrentError>) -> bool {
    match handle {
        Ok(handle) => handle.runtime_flavor() == RuntimeFlavor::MultiThread,
        Err(error) => error.is_missing_context(),
    }
}

#[cfg(all(any(target_os = "linux", target_os = "android"), not(tcb_loom)))]
mod coarse {
    use std::sync::OnceLock;
    use std::time::Instant;

    use rustix::time::{clock_getres, clock_gettime, ClockId, Timespec};

    use crate::breaker::nanos::Nanos;

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

    /// Whether the system's clock is before `deadline`, as the coarse clock proves.
    #[inline]
    pub(super) fn surely_before(deadline: Nanos) -> bool {
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
}

/// Elsewhere, and under loom, nothing is proven: every such call reads the clock.
#[cfg(not(all(any(target_os = "linux", target_os = "android"), not(tcb_loom))))]
mod coarse {
    use crate::breaker::nanos::Nanos;

    #[inline]
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
    fn outside_any_task_nothing_is_proven_and_the_clock_is_read() {
        let far = at(Instant::now() + Duration::from_secs(3600));
        assert!(!surely_before(far));
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
                        // Twice: the second time the task is known.
                        surely_before(far) && surely_before(far)
                    })
                })
                .collect();
            let mut proven = Vec::new();
            for task in tasks {
                proven.push(task.await.expect("task"));
            }
            // The thread blocked on the runtime is in no task: it reads the clock.
            assert!(!surely_before(far));
            proven
        });
        let expected = cfg!(any(target_os = "linux", target_os = "android"));
        assert!(proven.iter().all(|&p| p == expected), "{proven:?}");
    }

    /// A task keeps what its first call found: one of a multi-thread runtime stays on the
    /// system's clock under a paused runtime's handle it enters; one whose first call was
    /// made under a paused handle reads tokio's clock for the rest. Outside any task,
    /// tokio's clock is read.
    #[test]
    fn a_task_keeps_the_clock_its_first_call_found_and_a_call_outside_tasks_reads_tokios() {
        let paused = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime");
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .expect("runtime");
        let handle = paused.handle().clone();
        let (first_outside, then_entered, entered_first) = multi.block_on(async move {
            let first = on_the_system_clock();
            let h = handle.clone();
            let kept = tokio::spawn(async move {
                assert!(on_the_system_clock());
                let _entered = h.enter();
                on_the_system_clock()
            });
            let kept = kept.await.expect("task");
            let fresh = tokio::spawn(async move {
                let _entered = handle.enter();
                on_the_system_clock()
            });
            (first, kept, fresh.await.expect("task"))
        });
        assert!(!first_outside && then_entered && !entered_first);
        paused.block_on(async {
            assert!(!on_the_system_clock());
            let before = now();
            tokio::time::advance(Duration::from_secs(3600)).await;
            assert_eq!(
                now() - before,
                Duration::from_secs(3600),
                "tokio's paused clock"
            );
        });
        assert!(!on_the_system_clock(), "outside any task");
    }

    /// The tests build tokio with `test-util`, and that is found: its clock can be paused.
    #[test]
    fn tokio_built_with_test_util_is_found_able_to_pause() {
        const { assert!(can_be_paused()) };
    }

    /// With tokio's `test-util`, a current-thread runtime's clock may be paused and moved
    /// on by a test at will, so nothing is proven there: not in `block_on`, not in a task,
    /// paused or not.
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
