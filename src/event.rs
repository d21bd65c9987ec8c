//! What a breaker reports to observers registered with
//! [`Builder::on_event`](crate::Builder::on_event).

use crate::machine::{Skip, Transition};
use crate::outcome::Outcome;

/// One thing that happened in a breaker.
///
/// Observers never run under the breaker's lock, so they may use its handle. Transitions
/// and the outcomes the breaker records under its lock reach them in the order the
/// breaker made them (delivered by the task that caused them, or by one delivering an
/// earlier event at the time); skips, and successes that change nothing, are reported at
/// once by the task whose call they were. A panic in an observer is logged and not
/// passed on.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event<'a> {
    /// The state changed.
    Transition(&'a Transition),
    /// An outcome counted towards the breaker's state. Late results, observe-only shadow
    /// calls and disabled-mode calls are not reported.
    ///
    /// It carries no time: most successes are counted without reading the clock, and
    /// reading it for every report would double their cost. An observer that wants one
    /// reads `tokio::time::Instant::now()`.
    Recorded {
        /// The breaker's name.
        name: &'a str,
        /// The outcome, after the slow-call rule.
        outcome: &'a Outcome,
        /// Whether the call was a probe.
        probe: bool,
    },
    /// A call was not made.
    Skipped {
        /// The breaker's name.
        name: &'a str,
        /// Why, and when the next probe may go.
        skip: &'a Skip,
    },
}
