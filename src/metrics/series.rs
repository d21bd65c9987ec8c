//! The series a breaker's metrics are recorded in: their names, units and help, by naming.

use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};

use super::settings::Metrics;
use super::settings::Naming;

/// One series of the [table](crate::metrics#series): its names and labels differ by [`Naming`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Series {
    /// Outcomes counted towards the breaker's state, by outcome.
    Calls,
    /// Calls not made, by reason.
    Rejections,
    /// Changes of state, by the state left and the state entered.
    Transitions,
    /// 1 for the breaker's state (or its mode when not enabled), 0 for the others.
    State,
    /// The trip policy's failure rate, in percent; -1 until enough calls are counted.
    FailureRate,
    /// How long calls took, by outcome, in seconds (with [`Metrics::call_durations`]).
    CallDuration,
    /// The outcomes in the trip policy's count now, successful and failed.
    BufferedCalls,
    /// The calls slower than the slow-call threshold in the trip policy's count now, by
    /// outcome.
    SlowCalls,
    /// The share of slow calls in the trip policy's count, in percent; -1 until enough
    /// calls are counted.
    SlowCallRate,
}

impl Series {
    /// Every series.
    pub const ALL: [Series; 9] = [
        Series::Calls,
        Series::Rejections,
        Series::Transitions,
        Series::State,
        Series::FailureRate,
        Series::CallDuration,
        Series::BufferedCalls,
        Series::SlowCalls,
        Series::SlowCallRate,
    ];

    /// The series' name in `naming`.
    pub fn name(self, naming: Naming) -> &'static str {
        self.row().names[naming.column()]
    }

    pub(super) fn row(self) -> &'static Row {
        &TABLE[self as usize]
    }
}

/// What kind of metric a series is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Instrument {
    Counter,
    Gauge,
    Histogram,
}

/// A series' entry in the table.
pub(super) struct Row {
    /// By [`Naming::column`].
    names: [&'static str; 2],
    pub(super) instrument: Instrument,
    unit: Unit,
    help: &'static str,
    /// Labels with one value that every point of the series carries, by naming.
    pub(super) fixed: [&'static [(&'static str, &'static str)]; 2],
}

/// The series, in [`Series`] order: the one place their names, types, units and help
/// texts are written.
pub(super) const TABLE: [Row; 9] = [
    Row {
        names: [
            "circuit_breaker_calls_total",
            "resilience4j_circuitbreaker_calls_total",
        ],
        instrument: Instrument::Counter,
        unit: Unit::Count,
        help: "Calls whose outcome the circuit breaker counted towards its state, by outcome.",
        fixed: [&[], &[]],
    },
    Row {
        names: [
            "circuit_breaker_rejections_total",
            "resilience4j_circuitbreaker_not_permitted_calls_total",
        ],
        instrument: Instrument::Counter,
        unit: Unit::Count,
        help: "Calls the circuit breaker did not make, by reason.",
        fixed: [&[], &[("kind", "not_permitted")]],
    },
    Row {
        names: [
            "circuit_breaker_transitions_total",
            "resilience4j_circuitbreaker_transitions_total",
        ],
        instrument: Instrument::Counter,
        unit: Unit::Count,
        help: "Changes of the circuit breaker's state, by the state left and the state entered.",
        fixed: [&[], &[]],
    },
    Row {
        names: ["circuit_breaker_state", "resilience4j_circuitbreaker_state"],
        instrument: Instrument::Gauge,
        unit: Unit::Count,
        help: "1 for the circuit breaker's current state (its mode while not enabled), 0 for the others.",
        fixed: [&[], &[]],
    },
    Row {
        names: [
            "circuit_breaker_failure_rate",
            "resilience4j_circuitbreaker_failure_rate",
        ],
        instrument: Instrument::Gauge,
        unit: Unit::Percent,
        help: "The circuit breaker's failure rate as its trip policy reads it, in percent; -1 until enough calls are counted.",
        fixed: [&[], &[]],
    },
    Row {
        names: [
            "circuit_breaker_call_duration_seconds",
            "resilience4j_circuitbreaker_calls_seconds",
        ],
        instrument: Instrument::Histogram,
        unit: Unit::Seconds,
        help: "How long calls through the circuit breaker took, by outcome.",
        fixed: [&[], &[]],
    },
    Row {
        names: [
            "circuit_breaker_buffered_calls",
            "resilience4j_circuitbreaker_buffered_calls",
        ],
        instrument: Instrument::Gauge,
        unit: Unit::Count,
        help: "The outcomes in the circuit breaker's trip policy count now, by outcome.",
        fixed: [&[], &[]],
    },
    Row {
        names: [
            "circuit_breaker_slow_calls",
            "resilience4j_circuitbreaker_slow_calls",
        ],
        instrument: Instrument::Gauge,
        unit: Unit::Count,
        help: "The calls slower than the slow-call threshold in the circuit breaker's trip policy count now, by outcome.",
        fixed: [&[], &[]],
    },
    Row {
        names: [
            "circuit_breaker_slow_call_rate",
            "resilience4j_circuitbreaker_slow_call_rate",
        ],
        instrument: Instrument::Gauge,
        unit: Unit::Percent,
        help: "The share of slow calls in the circuit breaker's trip policy count, in percent; -1 until enough calls are counted.",
        fixed: [&[], &[]],
    },
];

/// The label naming the breaker, by naming.
pub(super) const BREAKER: [&str; 2] = ["breaker", "name"];

/// Describes every series `metrics` records to the recorder in use.
pub(super) fn describe(metrics: Metrics) {
    for series in Series::ALL {
        if series == Series::CallDuration && !metrics.call_durations {
            continue;
        }
        let (row, name) = (series.row(), series.name(metrics.naming));
        match row.instrument {
            Instrument::Counter => describe_counter!(name, row.unit, row.help),
            Instrument::Gauge => describe_gauge!(name, row.unit, row.help),
            Instrument::Histogram => describe_histogram!(name, row.unit, row.help),
        }
    }
}
