//! Prometheus-style metrics for a breaker, through the
//! [`metrics`](https://docs.rs/metrics/0.24) crate's facade (feature `metrics`): calls by
//! outcome, calls not made, changes of state, a state gauge covering every state and
//! mode, the failure rate, and optionally a histogram of call durations. Names are this
//! crate's own by default, or resilience4j's, so that its Grafana dashboards work as
//! they are.
//!
//! ```
//! use std::time::Duration;
//! use metrics_util::debugging::{DebugValue, DebuggingRecorder};
//! use tower::{service_fn, Service, ServiceExt};
//! use tower_circuit_breaker::metrics::{Metrics, Naming, Series};
//! use tower_circuit_breaker::Builder;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), tower::BoxError> {
//! // Any `metrics` recorder: metrics-exporter-prometheus in a service; here the one from
//! // metrics-util's tests, to read the values back.
//! let recorder = DebuggingRecorder::new();
//! let snapshotter = recorder.snapshotter();
//! let _installed = metrics::set_default_local_recorder(&recorder);
//!
//! let layer = Builder::new()
//!     .name("search-tool")
//!     .failure_threshold(2)
//!     .metrics_with(Metrics::new().naming(Naming::Resilience4j).call_durations(true))
//!     .build()?;
//! let mut search = tower::Layer::layer(&layer, service_fn(|_q: &str| async {
//!     tokio::time::sleep(Duration::from_millis(40)).await;
//!     Err::<String, _>(std::io::Error::other("connection refused"))
//! }));
//! for _ in 0..3 {
//!     let _ = search.ready().await?.call("rust").await;
//! }
//!
//! // Two failures open the breaker; the third call is not made.
//! let snapshot = snapshotter.snapshot().into_vec();
//! let value = |name: &str, labels: &[(&str, &str)]| {
//!     snapshot.iter().find_map(|(key, _unit, _help, value)| {
//!         let key = key.key();
//!         let same = key.name() == name
//!             && key.labels().count() == labels.len()
//!             && labels.iter().all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v));
//!         same.then_some(value)
//!     })
//! };
//! assert_eq!(Series::State.name(Naming::Resilience4j), "resilience4j_circuitbreaker_state");
//! assert_eq!(
//!     value("resilience4j_circuitbreaker_state", &[("name", "search-tool"), ("state", "open")]),
//!     Some(&DebugValue::Gauge(1.0.into())),
//! );
//! assert_eq!(
//!     value("resilience4j_circuitbreaker_not_permitted_calls_total",
//!           &[("name", "search-tool"), ("kind", "not_permitted"), ("reason", "open")]),
//!     Some(&DebugValue::Counter(1)),
//! );
//! assert_eq!(
//!     value("resilience4j_circuitbreaker_calls_seconds", &[("name", "search-tool"), ("kind", "failed")]),
//!     Some(&DebugValue::Histogram(vec![0.04.into(), 0.04.into()])),
//! );
//! # Ok(()) }
//! ```
//!
//! # Series
//!
//! Every series carries the breaker's name (label `breaker`, or `name` in resilience4j's
//! naming): for a [`keyed`](crate::keyed) registry, each key's breaker's name
//! (`model[gpt-4o]`). [`Series::name`] gives each name in code.
//!
//! | [`Series`] | [`Naming::CircuitBreaker`] (default) | [`Naming::Resilience4j`] | Type, unit | Labels besides the name |
//! |---|---|---|---|---|
//! | `Calls` | `circuit_breaker_calls_total` | `resilience4j_circuitbreaker_calls_total` | counter, count | `outcome` (`kind`): see below |
//! | `Rejections` | `circuit_breaker_rejections_total` | `resilience4j_circuitbreaker_not_permitted_calls_total` | counter, count | `reason`: `open`, `half_open_full`, `killed`, `forced_open` ([`Reason::as_str`]); resilience4j's also `kind="not_permitted"` |
//! | `Transitions` | `circuit_breaker_transitions_total` | `resilience4j_circuitbreaker_transitions_total` | counter, count | `from`, `to`: `closed`, `open`, `half_open`, `forced_open` ([`State::as_str`]) |
//! | `State` | `circuit_breaker_state` | `resilience4j_circuitbreaker_state` | gauge, count | `state`: see below |
//! | `FailureRate` | `circuit_breaker_failure_rate` | `resilience4j_circuitbreaker_failure_rate` | gauge, percent | none |
//! | `CallDuration` | `circuit_breaker_call_duration_seconds` | `resilience4j_circuitbreaker_calls_seconds` | histogram, seconds | `outcome` (`kind`), only with [`Metrics::call_durations`] |
//! | `BufferedCalls` | `circuit_breaker_buffered_calls` | `resilience4j_circuitbreaker_buffered_calls` | gauge, count | `outcome` (`kind`): `success`, `failure` (`successful`, `failed`) |
//! | `SlowCalls` | `circuit_breaker_slow_calls` | `resilience4j_circuitbreaker_slow_calls` | gauge, count | `outcome` (`kind`): `success`, `failure` (`successful`, `failed`) |
//! | `SlowCallRate` | `circuit_breaker_slow_call_rate` | `resilience4j_circuitbreaker_slow_call_rate` | gauge, percent | none |
//!
//! | Label values | [`Naming::CircuitBreaker`] | [`Naming::Resilience4j`] |
//! |---|---|---|
//! | a call's outcome | `outcome`: `success`, `failure`, `ignored` | `kind`: `successful`, `failed`, `ignored` |
//! | the state gauge | `state`: `closed`, `open`, `half_open`, `forced_open`, `disabled`, `observe_only` | `state`: `closed`, `open`, `half_open`, `forced_open`, `disabled`, `metrics_only` |
//!
//! Every series is described ([`metrics::describe_counter!`] and the like: a unit and a
//! help text) when the first breaker is built with metrics, so an exporter prints
//! `# HELP` and `# TYPE`; install the recorder before building the breaker.
//!
//! - **Calls** counts the outcomes the breaker counts ([`Event::Recorded`]), probes and
//!   observe-only shadow calls included (as resilience4j's metrics-only state counts
//!   them); late results and disabled-mode calls are not. A slow success counts as a
//!   failure ([`Builder::slow_call_threshold`]).
//! - **Rejections** counts the calls not made ([`Event::Skipped`]), whatever answered
//!   them (a fallback or a `Rejected` error).
//! - **State** has one series per state and mode, and exactly one of them is 1 for each
//!   breaker at any time: the breaker's state while it is enabled, and its mode
//!   (`disabled`, `observe_only`) while it is not, since then its state decides no call.
//!   Every transition and every change of mode ([`Event::ModeChanged`]) sets all six, in
//!   the order the breaker made them. It is set when the breaker is built (closed, or its
//!   starting mode), and for a keyed registry when each key's breaker is made; a key's
//!   breaker evicted from its registry ([`Event::Evicted`]) sets all six to 0 and its
//!   failure rate to -1, so only live breakers show a state. The kill switch is not a
//!   state: it leaves the gauge as it is, and its skips are counted as rejections with
//!   reason `killed`.
//! - **FailureRate** is the trip policy's reading ([`Event::Recorded`]'s
//!   `failure_rate`), set after every outcome the policy counts:
//!   - with [`Builder::failure_rate`], the failures among the outcomes in the window, in
//!     percent (ignored outcomes are not in the window), or -1 while the window holds
//!     fewer than `minimum_calls` outcomes: resilience4j's own definition;
//!   - with [`Builder::failure_threshold`] (consecutive failures), the run of failures
//!     as a percent of the threshold: it trips at 100. That policy keeps no window, so
//!     this is how near the breaker is to tripping, not a share of calls (two failures
//!     after a thousand successes, threshold 4: 50).
//!
//!   It reads -1 from the breaker's building and from each closing until an outcome is
//!   counted; while the breaker is open or half-open it keeps the reading that opened
//!   it (probes are not part of the count). With a time window the reading is as of the
//!   last outcome: old outcomes leave the window without a new value being set.
//! - **BufferedCalls**, **SlowCalls** and **SlowCallRate** are resilience4j's view of
//!   the trip policy's count: the successful and failed outcomes in it now, those of
//!   them slower than the slow-call threshold ([`Builder::slow_call_threshold`]; with
//!   none, no call is slow), and the slow ones' share in percent (-1 while the count
//!   holds fewer than `minimum_calls`, or no outcome). With [`Builder::failure_rate`]
//!   the count is its window (the last calls, or the outcomes of the last span of time,
//!   as of the last outcome); with [`Builder::failure_threshold`] it is the run of
//!   consecutive failures, which a success ends, so successful ones are 0. They start
//!   at 0 (the rate at -1) and go back there at each closing, as the count does. This
//!   breaker counts a slow success as a failure, so a slow call is in `failure`
//!   (`failed`): `SlowCalls` with `success` (`successful`) stays 0, where resilience4j,
//!   which keeps slow calls apart from failures, counts slow successes. The count is
//!   read from the events, in their order; a success that changes nothing is told at
//!   once by its caller, and so may be counted just before a failure another task is
//!   still delivering.
//! - **CallDuration** ([`Metrics::call_durations`], off by default) records how long each
//!   call counted in Calls took, from the wrapped service's `call` to its response, in
//!   seconds. Turning it on makes the breaker read the clock twice per call.
//!
//! resilience4j's dashboards count calls with its timer, `..._calls_seconds_count`:
//! turn call durations on for those panels (the resilience4j naming's Calls counter is
//! the name older resilience4j versions used, which the same dashboards also read, so
//! with both a panel may show each kind twice, with the same values). To draw its
//! percentiles (`..._calls_seconds_bucket`), give the histogram buckets in the exporter
//! (metrics-exporter-prometheus: `set_buckets_for_metric`), and leave the exporter's
//! suffixing of names by unit off (the default), which would rename the failure rate.
//!
//! Queries of resilience4j's Grafana dashboard that work unchanged with
//! [`Naming::Resilience4j`]:
//!
//! ```text
//! sum(resilience4j_circuitbreaker_state{state=~"open|forced_open"})
//! resilience4j_circuitbreaker_failure_rate{name=~"$circuitbreaker_name"}
//! resilience4j_circuitbreaker_slow_call_rate{name=~"$circuitbreaker_name"}
//! resilience4j_circuitbreaker_buffered_calls{name=~"$circuitbreaker_name", kind="failed"}
//! rate(resilience4j_circuitbreaker_calls_seconds_count{name=~"$circuitbreaker_name"}[1m])
//! ```
//!
//! and the same with this crate's names:
//!
//! ```text
//! sum(circuit_breaker_state{state=~"open|forced_open"})
//! sum by (breaker) (rate(circuit_breaker_rejections_total[5m]))
//! histogram_quantile(0.9, sum by (le) (rate(circuit_breaker_call_duration_seconds_bucket{breaker="search-tool"}[5m])))
//! ```
//!
//! Give each breaker its own name: breakers that share one share every series, so
//! their counters add up and their gauges show whichever changed last.
//!
//! # Cost
//!
//! Metrics are an observer, and with an observer the breaker reports every recorded
//! outcome: a success in the closed state, otherwise counted with one atomic add, also
//! calls the observer (a counter increment through a handle registered once). Failures,
//! rejections and transitions already take the slower path. With no recorder installed
//! the increment is a no-op but the report still happens. A success then updates the
//! calls counter, the failure rate, and the buffered- and slow-call series: four gauges and
//! the slow-call rate, set from running totals the observer keeps under a lock of its own
//! (uncontended unless calls end at the same instant on several threads).
//!
//! `benches/benches/metrics.rs` on a 2-core machine (criterion medians, a closed breaker on a
//! no-op service; measured before the buffered- and slow-call series, which add five gauge
//! updates and that lock to each outcome): 10 ns a call without observers, 14 ns with one that does nothing,
//! 20 ns with metrics and no recorder, 22 ns into metrics-util's `DebuggingRecorder`,
//! 83 ns with call durations: the two reads of tokio's clock are
//! most of a call's cost then (the bench builds tokio with `test-util`, whose clock also
//! looks for a paused test clock).
//!
//! Each breaker keeps its handles (about half a kilobyte), registered with the recorder
//! on first use; a keyed registry's breakers each keep their own.
//!
//! [`Event::Recorded`]: crate::Event::Recorded
//! [`Event::Skipped`]: crate::Event::Skipped
//! [`Event::ModeChanged`]: crate::Event::ModeChanged
//! [`Event::Evicted`]: crate::Event::Evicted
//! [`Builder::slow_call_threshold`]: crate::Builder::slow_call_threshold
//! [`Builder::failure_rate`]: crate::Builder::failure_rate
//! [`Builder::failure_threshold`]: crate::Builder::failure_threshold

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::time::{Duration, Instant};

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter,
    Gauge, Histogram, Label, SharedString, Unit,
};

use crate::clock::now;
use crate::config::{Config, RateWindow, TripPolicy};
use crate::{Builder, Event, Mode, Outcome, Reason, State};

/// The count, even if an update panicked while holding it (a recorder's panic): it is
/// whole between updates.
fn lock(count: &Mutex<Count>) -> std::sync::MutexGuard<'_, Count> {
    count
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Which names and labels the series carry: see the [tables](self#series).
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
    fn column(self) -> usize {
        match self {
            Naming::CircuitBreaker => 0,
            Naming::Resilience4j => 1,
        }
    }
}

/// What [`Builder::metrics_with`] records: the naming, and whether call durations are.
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
    naming: Naming,
    call_durations: bool,
}

impl Metrics {
    /// This crate's names, no call durations: what [`Builder::metrics`] records.
    pub fn new() -> Self {
        Metrics::default()
    }

    /// The names and labels to use.
    pub fn naming(mut self, naming: Naming) -> Self {
        self.naming = naming;
        self
    }

    /// Records how long each call took, in the [`Series::CallDuration`] histogram. Off by
    /// default: it reads the clock twice per call, which a call otherwise does not.
    pub fn call_durations(mut self, on: bool) -> Self {
        self.call_durations = on;
        self
    }

    /// The observer of one breaker, its series set to their starting values.
    fn observer(self, config: &Config) -> impl Fn(&Event<'_>) + Send + Sync + 'static {
        let handles = Handles::new(self.naming, Arc::from(config.name()));
        let count = Count::new(config);
        starting(config.mode(), &count, &mut |point, value| {
            handles.update(point, value)
        });
        let count = Mutex::new(count);
        move |event: &Event<'_>| {
            updates(event, self, &count, &mut |point, value| {
                handles.update(point, value)
            })
        }
    }
}

impl Builder {
    /// Records this breaker's metrics with this crate's names and no call durations:
    /// [`metrics_with(Metrics::new())`](Self::metrics_with).
    ///
    /// With it, every success in the closed state is reported to the observers, which
    /// the breaker otherwise skips: see [Cost](crate::metrics#cost).
    pub fn metrics(self) -> Self {
        self.metrics_with(Metrics::new())
    }

    /// Records this breaker's calls, rejections, transitions, state and failure rate
    /// (and, if asked, call durations) through the
    /// [`metrics`](https://docs.rs/metrics/0.24) facade (feature `metrics`), named as
    /// `metrics` says; see [the module](crate::metrics) for the series. Every breaker
    /// built from this builder (each key's, for a keyed registry) gets series of its own
    /// name, set to their starting values when it is built.
    ///
    /// With it, every success in the closed state is reported to the observers, which
    /// the breaker otherwise skips: see [Cost](crate::metrics#cost).
    pub fn metrics_with(self, metrics: Metrics) -> Self {
        let builder = if metrics.call_durations {
            self.time_calls()
        } else {
            self
        };
        // Once for the recorder the first breaker is built under.
        let described = Once::new();
        builder.on_event_of_each(move |config| {
            described.call_once(|| describe(metrics));
            metrics.observer(config)
        })
    }
}

/// One series of the [table](self#series): its names and labels differ by [`Naming`].
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

    fn row(self) -> &'static Row {
        &TABLE[self as usize]
    }
}

/// What kind of metric a series is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Instrument {
    Counter,
    Gauge,
    Histogram,
}

/// A series' entry in the table.
struct Row {
    /// By [`Naming::column`].
    names: [&'static str; 2],
    instrument: Instrument,
    unit: Unit,
    help: &'static str,
    /// Labels with one value that every point of the series carries, by naming.
    fixed: [&'static [(&'static str, &'static str)]; 2],
}

/// The series, in [`Series`] order: the one place their names, types, units and help
/// texts are written.
const TABLE: [Row; 9] = [
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
const BREAKER: [&str; 2] = ["breaker", "name"];

/// A call's outcome, as the series label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
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
enum Shown {
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
enum Point {
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
    fn series(self) -> Series {
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
    fn labels(self, naming: Naming) -> Vec<(&'static str, &'static str)> {
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
    fn slot(self) -> Option<usize> {
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
const SLOTS: usize = 22;

/// The series updates `event` makes, in order: the one place an event is read. A
/// counter's value is the amount to add.
fn updates(
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
fn starting(mode: Mode, count: &Count, update: &mut impl FnMut(Point, f64)) {
    show(Some(Shown::of(State::Closed, mode)), update);
    update(Point::FailureRate, NO_RATE);
    count.show(update);
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
struct Count {
    slow_call: Option<Duration>,
    /// Outcomes needed before a slow-call rate is shown (the trip policy's minimum).
    minimum: u32,
    /// Outcomes in the count, by `[failed][slow]`.
    totals: [[u32; 2]; 2],
    kept: Kept,
}

/// What a [`Count`] keeps to know which outcomes leave it.
#[derive(Debug)]
enum Kept {
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
const PER_WORD: usize = 32;

impl Count {
    fn new(config: &Config) -> Self {
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

    fn record(&mut self, failed: bool, elapsed: Option<Duration>, now: Instant) {
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

    fn clear(&mut self) {
        self.totals = [[0; 2]; 2];
        match &mut self.kept {
            Kept::Run { .. } => {}
            Kept::Ring { start, len, .. } => (*start, *len) = (0, 0),
            Kept::Buckets { buckets, .. } => buckets.clear(),
        }
    }

    /// Sets the buffered- and slow-call series and the slow-call rate.
    fn show(&self, update: &mut impl FnMut(Point, f64)) {
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
fn ring_get(bits: &[u64], i: usize) -> u64 {
    bits[i / PER_WORD] >> (i % PER_WORD * 2) & 0b11
}

/// Sets the two bits of outcome `i` of a ring.
fn ring_set(bits: &mut [u64], i: usize, code: u64) {
    let shift = i % PER_WORD * 2;
    let word = &mut bits[i / PER_WORD];
    *word = *word & !(0b11 << shift) | code << shift;
}

/// The failure rate before any outcome is counted, as resilience4j reports it.
const NO_RATE: f64 = -1.0;

/// Every series of the state gauge: 1 for `current`, 0 for the rest (all of them for
/// `None`, a breaker that is gone), so that what was shown before goes back to 0.
fn show(current: Option<Shown>, update: &mut impl FnMut(Point, f64)) {
    for shown in Shown::ALL {
        update(
            Point::State(shown),
            if Some(shown) == current { 1.0 } else { 0.0 },
        );
    }
}

/// Describes every series `metrics` records to the recorder in use.
fn describe(metrics: Metrics) {
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

/// A registered counter, gauge or histogram.
enum Handle {
    Counter(Counter),
    Gauge(Gauge),
    Histogram(Histogram),
}

impl Handle {
    fn update(&self, value: f64) {
        match self {
            Handle::Counter(counter) => counter.increment(value as u64),
            Handle::Gauge(gauge) => gauge.set(value),
            Handle::Histogram(histogram) => histogram.record(value),
        }
    }
}

/// One breaker's handles, each registered with the recorder on first use.
struct Handles {
    naming: Naming,
    breaker: SharedString,
    kept: [OnceLock<Handle>; SLOTS],
}

impl Handles {
    fn new(naming: Naming, breaker: Arc<str>) -> Self {
        Handles {
            naming,
            breaker: SharedString::from(breaker),
            kept: Default::default(),
        }
    }

    fn update(&self, point: Point, value: f64) {
        match point.slot() {
            Some(slot) => self.kept[slot]
                .get_or_init(|| self.register(point))
                .update(value),
            None => self.register(point).update(value),
        }
    }

    fn register(&self, point: Point) -> Handle {
        let series = point.series();
        let column = self.naming.column();
        let mut labels = vec![Label::new(BREAKER[column], self.breaker.clone())];
        let fixed = series.row().fixed[column].iter();
        labels.extend(
            fixed
                .chain(&point.labels(self.naming))
                .map(|&(key, value)| Label::new(key, value)),
        );
        let name = series.name(self.naming);
        match series.row().instrument {
            Instrument::Counter => Handle::Counter(counter!(name, labels)),
            Instrument::Gauge => Handle::Gauge(gauge!(name, labels)),
            Instrument::Histogram => Handle::Histogram(histogram!(name, labels)),
        }
    }
}

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
