//! What one event changes: the points of the series it updates, and by how much.

use std::sync::Mutex;

use crate::clock::now;
use crate::{Event, Mode, Outcome, Reason, State};

use super::*;

/// A call's outcome, as the series label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Success,
    Failure,
    Ignored,
}

impl Kind {
    /// The label, by naming.
    const LABEL: [&'static str; 2] = ["outcome", "kind"];

    fn of(outcome: &Outcome) -> Kind {
        match outcome {
            Outcome::Success => Kind::Success,
            Outcome::Failure(_) => Kind::Failure,
            Outcome::Ignored => Kind::Ignored,
        }
    }

    fn value(self, naming: Naming) -> &'static str {
        let values = match self {
            Kind::Success => ["success", "successful"],
            Kind::Failure => ["failure", "failed"],
            Kind::Ignored => ["ignored", "ignored"],
        };
        values[naming.column()]
    }
}

/// What the state gauge shows: the state while the breaker is enabled, the mode while
/// it is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shown {
    State(State),
    Mode(Mode),
}

impl Shown {
    const ALL: [Shown; 6] = [
        Shown::State(State::Closed),
        Shown::State(State::Open),
        Shown::State(State::HalfOpen),
        Shown::State(State::ForcedOpen),
        Shown::Mode(Mode::Disabled),
        Shown::Mode(Mode::ObserveOnly),
    ];

    fn of(state: State, mode: Mode) -> Shown {
        match mode {
            Mode::Enabled => Shown::State(state),
            mode => Shown::Mode(mode),
        }
    }

    fn index(self) -> usize {
        Self::ALL
            .iter()
            .position(|shown| *shown == self)
            .expect("every state and every mode but enabled is shown")
    }

    fn value(self, naming: Naming) -> &'static str {
        match (self, naming) {
            (Shown::Mode(Mode::ObserveOnly), Naming::Resilience4j) => "metrics_only",
            (Shown::State(state), _) => state.as_str(),
            (Shown::Mode(mode), _) => mode.as_str(),
        }
    }
}

/// One series of one breaker, with its label values: what an update is made to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Point {
    Call(Kind),
    Rejection(Reason),
    Transition {
        from: State,
        to: State,
    },
    State(Shown),
    FailureRate,
    Duration(Kind),
    /// Successes (`Kind::Success`) or failures in the count.
    Buffered(Kind),
    Slow(Kind),
    SlowCallRate,
}

impl Point {
    pub(super) fn series(self) -> Series {
        match self {
            Point::Call(_) => Series::Calls,
            Point::Rejection(_) => Series::Rejections,
            Point::Transition { .. } => Series::Transitions,
            Point::State(_) => Series::State,
            Point::FailureRate => Series::FailureRate,
            Point::Duration(_) => Series::CallDuration,
            Point::Buffered(_) => Series::BufferedCalls,
            Point::Slow(_) => Series::SlowCalls,
            Point::SlowCallRate => Series::SlowCallRate,
        }
    }

    /// The labels besides the breaker's name and the series' fixed ones.
    pub(super) fn labels(self, naming: Naming) -> Vec<(&'static str, &'static str)> {
        let column = naming.column();
        match self {
            Point::Call(kind)
            | Point::Duration(kind)
            | Point::Buffered(kind)
            | Point::Slow(kind) => {
                vec![(Kind::LABEL[column], kind.value(naming))]
            }
            Point::Rejection(reason) => vec![("reason", reason.as_str())],
            Point::Transition { from, to } => vec![("from", from.as_str()), ("to", to.as_str())],
            Point::State(shown) => vec![("state", shown.value(naming))],
            Point::FailureRate | Point::SlowCallRate => Vec::new(),
        }
    }

    /// Where a breaker keeps the point's handle; transitions are rare and have sixteen
    /// points, so theirs are looked up each time.
    pub(super) fn slot(self) -> Option<usize> {
        let kind = |kind: Kind| kind as usize;
        match self {
            Point::Call(k) => Some(kind(k)),
            Point::Duration(k) => Some(3 + kind(k)),
            Point::Rejection(reason) => Some(
                6 + match reason {
                    Reason::Open => 0,
                    Reason::HalfOpenFull => 1,
                    Reason::Killed => 2,
                    Reason::ForcedOpen => 3,
                },
            ),
            Point::State(shown) => Some(10 + shown.index()),
            Point::FailureRate => Some(16),
            // Successes and failures only: ignored outcomes are not counted.
            Point::Buffered(k) => Some(17 + kind(k).min(1)),
            Point::Slow(k) => Some(19 + kind(k).min(1)),
            Point::SlowCallRate => Some(21),
            Point::Transition { .. } => None,
        }
    }
}

/// Points with a kept handle (see [`Point::slot`]).
pub(super) const SLOTS: usize = 22;

/// The series updates `event` makes, in order: the one place an event is read. A
/// counter's value is the amount to add.
pub(super) fn updates(
    event: &Event<'_>,
    metrics: Metrics,
    count: &Mutex<Count>,
    update: &mut impl FnMut(Point, f64),
) {
    match *event {
        Event::Recorded {
            outcome,
            elapsed,
            failure_rate,
            ..
        } => {
            let kind = Kind::of(outcome);
            update(Point::Call(kind), 1.0);
            if let (true, Some(elapsed)) = (metrics.call_durations, elapsed) {
                update(Point::Duration(kind), elapsed.as_secs_f64());
            }
            if let Some(rate) = failure_rate {
                update(Point::FailureRate, rate);
                // In the trip policy's count, unless ignored.
                if kind != Kind::Ignored {
                    let mut count = lock(count);
                    count.record(kind == Kind::Failure, elapsed, now());
                    count.show(update);
                }
            }
        }
        Event::Skipped { skip, .. } => update(Point::Rejection(skip.reason()), 1.0),
        Event::Transition(transition) => {
            let (from, to) = (transition.from, transition.to);
            update(Point::Transition { from, to }, 1.0);
            show(Some(Shown::of(to, transition.mode)), update);
            if to == State::Closed {
                // The count starts afresh.
                update(Point::FailureRate, NO_RATE);
                let mut count = lock(count);
                count.clear();
                count.show(update);
            }
        }
        Event::ModeChanged { to, state, .. } => show(Some(Shown::of(state, to)), update),
        // Gone: it shows no state, and no failure rate.
        Event::Evicted { .. } => {
            show(None, update);
            update(Point::FailureRate, NO_RATE);
            let mut count = lock(count);
            count.clear();
            count.show(update);
        }
    }
}

/// The values a breaker's series start with: closed (or its starting mode), no failure
/// rate yet, nothing counted.
pub(super) fn starting(mode: Mode, count: &Count, update: &mut impl FnMut(Point, f64)) {
    show(Some(Shown::of(State::Closed, mode)), update);
    update(Point::FailureRate, NO_RATE);
    count.show(update);
}

/// Every series of the state gauge: 1 for `current`, 0 for the rest (all of them for
/// `None`, a breaker that is gone), so that what was shown before goes back to 0.
pub(super) fn show(current: Option<Shown>, update: &mut impl FnMut(Point, f64)) {
    for shown in Shown::ALL {
        update(
            Point::State(shown),
            if Some(shown) == current { 1.0 } else { 0.0 },
        );
    }
}
