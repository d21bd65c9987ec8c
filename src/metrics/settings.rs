//! What a breaker's metrics are named and record: the naming and the settings.

/// Which names and labels the series carry: see the [tables](crate::metrics#series).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Naming {
    /// `circuit_breaker_*`, labelled `breaker`, outcomes `success`, `failure`, `ignored`.
    #[default]
    CircuitBreaker,
    /// resilience4j's names (as its Micrometer binder exports them to Prometheus),
    /// labelled `name`, outcomes as `kind` `successful`, `failed`, `ignored`, the
    /// observe-only mode as the state `metrics_only`.
    Resilience4j,
}

impl Naming {
    /// The column of this naming in the tables below.
    pub(super) fn column(self) -> usize {
        match self {
            Naming::CircuitBreaker => 0,
            Naming::Resilience4j => 1,
        }
    }
}

/// What [`Builder::metrics_with`](crate::Builder::metrics_with) records: the naming, and whether call durations are.
///
/// ```
/// use tower_circuit_breaker::metrics::{Metrics, Naming};
/// use tower_circuit_breaker::Builder;
///
/// let layer = Builder::new()
///     .name("model")
///     .metrics_with(Metrics::new().naming(Naming::Resilience4j).call_durations(true))
///     .build()?;
/// # Ok::<(), tower_circuit_breaker::error::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Metrics {
    pub(super) naming: Naming,
    pub(super) call_durations: bool,
}

impl Metrics {
    /// This crate's names, no call durations: what [`Builder::metrics`](crate::Builder::metrics) records.
    pub fn new() -> Self {
        Metrics::default()
    }

    /// The names and labels to use.
    pub fn naming(mut self, naming: Naming) -> Self {
        self.naming = naming;
        self
    }

    /// Records how long each call took, in the [`Series::CallDuration`](crate::metrics::Series::CallDuration) histogram. Off by
    /// default: it reads the clock twice per call, which a call otherwise does not.
    pub fn call_durations(mut self, on: bool) -> Self {
        self.call_durations = on;
        self
    }
}
