//! The points of the series: what an event updates, named and placed.

use super::series::Series;
use super::settings::Naming;
use crate::{Mode, Outcome, Reason, State};

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

    pub(super) fn of(outcome: &Outcome) -> Kind {
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
    pub(super) const ALL: [Shown; 6] = [
        Shown::State(State::Closed),
        Shown::State(State::Open),
        Shown::State(State::HalfOpen),
        Shown::State(State::ForcedOpen),
        Shown::Mode(Mode::Disabled),
        Shown::Mode(Mode::ObserveOnly),
    ];

    pub(super) fn of(state: State, mode: Mode) -> Shown {
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
