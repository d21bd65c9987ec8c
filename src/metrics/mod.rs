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
//! | `Rejections` | `circuit_breaker_rejections_total` | `resilience4j_circuitbreaker_not_permitted_calls_total` | counter, count | `reason`: `open`, `half_open_full`, `killed`, `forced_open` ([`Reason::as_str`](crate::Reason::as_str)); resilience4j's also `kind="not_permitted"` |
//! | `Transitions` | `circuit_breaker_transitions_total` | `resilience4j_circuitbreaker_transitions_total` | counter, count | `from`, `to`: `closed`, `open`, `half_open`, `forced_open` ([`State::as_str`](crate::State::as_str)) |
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
//!   failure rate to -1, so only live breakers show a state. An eviction is told after
//!   the registry lets go of the key, so the key may come back first: its new breaker,
//!   alive under the same name, keeps the series, and the eviction leaves them as the
//!   new breaker set them. The kill switch is not a
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

mod count;
mod handles;
mod holders;
mod point;
mod series;
mod settings;
mod update;

use std::sync::{Arc, Mutex, Once};

use crate::config::Config;
use crate::{Builder, Event};

use self::count::Count;
use self::handles::Handles;
use self::holders::Holders;
use self::series::describe;
pub use self::series::Series;
pub use self::settings::{Metrics, Naming};
use self::update::starting;
use self::update::updates;

/// The observer of one breaker.
impl Metrics {
    /// The observer of one breaker, its series set to their starting values; `holders`
    /// counts the breakers built from the same builder alive under each name.
    fn observer(
        self,
        config: &Config,
        holders: &Arc<Holders>,
    ) -> impl Fn(&Event<'_>) + Send + Sync + 'static {
        let name: Arc<str> = Arc::from(config.name());
        let handles = Handles::new(self.naming, name.clone());
        let count = Count::new(config);
        let held = holders.hold(name, || {
            starting(config.mode(), &count, &mut |point, value| {
                handles.update(point, value)
            })
        });
        let count = Mutex::new(count);
        move |event: &Event<'_>| {
            let update = || {
                updates(event, self, &count, &mut |point, value| {
                    handles.update(point, value)
                })
            };
            match event {
                // A key that came back before its old breaker's eviction was told: the
                // series are the new breaker's (see `Holders`).
                Event::Evicted { .. } => held.evicted(update),
                _ => update(),
            }
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
        let holders = Arc::new(Holders::default());
        builder.on_event_of_each(move |config| {
            described.call_once(|| describe(metrics));
            metrics.observer(config, &holders)
        })
    }
}
