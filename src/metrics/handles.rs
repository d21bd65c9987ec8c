//! The registered counters, gauges and histograms of one breaker.

use std::sync::{Arc, OnceLock};

use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram, Label, SharedString};

use super::point::Point;
use super::point::SLOTS;
use super::series::Instrument;
use super::series::BREAKER;
use super::settings::Naming;

/// A registered counter, gauge or histogram.
pub(super) enum Handle {
    Counter(Counter),
    Gauge(Gauge),
    Histogram(Histogram),
}

impl Handle {
    pub(super) fn update(&self, value: f64) {
        match self {
            Handle::Counter(counter) => counter.increment(value as u64),
            Handle::Gauge(gauge) => gauge.set(value),
            Handle::Histogram(histogram) => histogram.record(value),
        }
    }
}

/// One breaker's handles, each registered with the recorder on first use.
pub(super) struct Handles {
    naming: Naming,
    breaker: SharedString,
    kept: [OnceLock<Handle>; SLOTS],
}

impl Handles {
    pub(super) fn new(naming: Naming, breaker: Arc<str>) -> Self {
        Handles {
            naming,
            breaker: SharedString::from(breaker),
            kept: Default::default(),
        }
    }

    pub(super) fn update(&self, point: Point, value: f64) {
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
