//! A `metrics` recorder for one test and the series it holds, read once; shared by the
//! tests that check the breaker's metrics (`tests/metrics.rs`, `tests/adversarial_state.rs`),
//! each of which includes it with `#[path = "common/recorded.rs"] mod recorded;`.
#![allow(dead_code)] // each test file uses its own subset

use std::collections::BTreeMap;

use metrics::{LocalRecorderGuard, Unit};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// A fresh recorder, this thread's until the guard is dropped, and its snapshotter (the
/// recorder is leaked: a test's worth of series).
pub(crate) fn record_here() -> (Snapshotter, LocalRecorderGuard<'static>) {
    let recorder: &'static DebuggingRecorder = Box::leak(Box::new(DebuggingRecorder::new()));
    (
        recorder.snapshotter(),
        metrics::set_default_local_recorder(recorder),
    )
}

/// One series' value in a snapshot.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Counter(u64),
    Gauge(f64),
    Histogram(Vec<f64>),
}

/// One series in a snapshot: its value, unit and help text.
#[derive(Debug, Clone)]
pub(crate) struct Read {
    pub(crate) value: Value,
    pub(crate) unit: Option<Unit>,
    pub(crate) help: Option<String>,
}

pub(crate) type Reads = BTreeMap<(String, Vec<String>), Read>;

/// Every series in a snapshot, by name and sorted `label=value` pairs.
pub(crate) fn read(snapshotter: &Snapshotter) -> Reads {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, unit, help, value)| {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let value = match value {
                DebugValue::Counter(n) => Value::Counter(n),
                DebugValue::Gauge(g) => Value::Gauge(g.into_inner()),
                DebugValue::Histogram(h) => {
                    Value::Histogram(h.into_iter().map(|v| v.into_inner()).collect())
                }
            };
            let read = Read {
                value,
                unit,
                help: help.map(|h| h.to_string()),
            };
            ((key.name().to_string(), labels), read)
        })
        .collect()
}

impl Value {
    /// A counter's count, a gauge's value, or how many values a histogram holds.
    pub(crate) fn number(&self) -> f64 {
        match self {
            Value::Counter(n) => *n as f64,
            Value::Gauge(g) => *g,
            Value::Histogram(values) => values.len() as f64,
        }
    }
}
