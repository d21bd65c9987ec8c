//! What a breaker reports to observers registered with
//! [`Builder::on_event`](crate::Builder::on_event).

use std::time::Duration;

use crate::breaker::outcome::Outcome;
use crate::breaker::settings::Mode;
use crate::breaker::state::{Skip, State, Transition};

/// One thing that happened in a breaker.
///
/// Observers never run under the breaker's lock, so they may use its handle, and one is
/// never run inside itself: what it causes by acting on its breaker (a transition, a
/// skipped or successful call of its own) reaches the observers after it returns.
/// Transitions, changes of mode and the outcomes the breaker records under its lock
/// reach them in the order the breaker made them (delivered by the task that caused
/// them, or by one delivering an earlier event at the time; a task delivers a bounded
/// batch, and when more are waiting on a multi-thread runtime a task of the runtime
/// delivers the rest, so an observer may hear of a change shortly after the call that
/// made it returned). Skips, and successes that change nothing, are reported at once
/// by the task whose call they were: they are not ordered against events another task
/// is delivering (a skip for `open` may arrive just before the transition to open). A
/// panic in an observer is logged and not passed on.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event<'a> {
    /// The state changed.
    Transition(&'a Transition),
    /// An outcome the breaker counted: towards its state, or, for an observe-only shadow
    /// call (`shadow`), only in its counts. Late results and disabled-mode calls are not
    /// reported.
    ///
    /// It carries no time of day: most successes are counted without reading the clock,
    /// and reading it for every report would double their cost. An observer that wants
    /// one reads `tokio::time::Instant::now()`.
    #[non_exhaustive]
    Recorded {
        /// The breaker's name.
        name: &'a str,
        /// The outcome, after the slow-call rule.
        outcome: &'a Outcome,
        /// Whether the call was a probe.
        probe: bool,
        /// Whether the call was an observe-only shadow call: one an enabled breaker would
        /// have skipped ([`Source::Shadowed`](crate::Source::Shadowed)). Its outcome is
        /// in the breaker's counts but could not move it.
        shadow: bool,
        /// How long the call took, from the wrapped service's `call` to its response
        /// (for an outcome settled later, such as a streamed body's, to the response's
        /// start), when the breaker times calls: with a slow-call rule
        /// ([`Builder::slow_call_threshold`](crate::Builder::slow_call_threshold)) or
        /// call-duration metrics. `None` otherwise.
        elapsed: Option<Duration>,
        /// The trip policy's reading after this outcome, in percent, when the outcome
        /// entered its count (an outcome of the closed state, not ignored); `None` for a
        /// probe or an ignored outcome, which leave it as it was.
        ///
        /// - With a failure rate ([`Builder::failure_rate`](crate::Builder::failure_rate)):
        ///   the failures among the outcomes in the window, or -1 while the window holds
        ///   fewer than the minimum number of calls.
        /// - With consecutive failures
        ///   ([`Builder::failure_threshold`](crate::Builder::failure_threshold)): the run
        ///   of failures as a percent of the threshold, so 100 is where the breaker trips.
        ///   This policy keeps no window: it is not a share of calls (two failures after a
        ///   thousand successes, with a threshold of 4, read 50).
        failure_rate: Option<f64>,
    },
    /// A call was not made. Not reported in disabled mode, which counts and reports
    /// nothing (a call the kill switch skips included).
    Skipped {
        /// The breaker's name.
        name: &'a str,
        /// Why, and when the next probe may go.
        skip: &'a Skip,
    },
    /// The mode changed ([`CircuitBreakerHandle::set_mode`](crate::CircuitBreakerHandle::set_mode)).
    /// Not a change of state: subscribers of transitions are not told.
    #[non_exhaustive]
    ModeChanged {
        /// The breaker's name.
        name: &'a str,
        /// The mode before.
        from: Mode,
        /// The mode now.
        to: Mode,
        /// The breaker's state, which the change of mode leaves as it was.
        state: State,
    },
    /// The breaker was evicted from its keyed registry
    /// ([`KeyedCircuitBreakerLayer`](crate::keyed::KeyedCircuitBreakerLayer)) to make
    /// room: it decides no call again, and its key, if it comes back, gets a fresh
    /// breaker. The last event of this breaker.
    ///
    /// It is told with none of the registry's locks held: an observer may call the keyed
    /// service back, with any key. So it may also be told after the key came back and
    /// its fresh breaker was made.
    #[non_exhaustive]
    Evicted {
        /// The breaker's name.
        name: &'a str,
    },
}
