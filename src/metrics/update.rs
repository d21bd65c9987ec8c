//! What one event does to a breaker's series: the points it updates, and by how much.

use std::sync::Mutex;

use super::count::lock;
use super::count::Count;
use super::count::NO_RATE;
use super::point::{Kind, Point, Shown};
use super::settings::Metrics;
use crate::clock::now;
use crate::{Event, Mode, State};

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
