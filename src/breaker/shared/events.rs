//! Reporting a breaker's events: to `tracing`, to the observers, and to the transition
//! channel, in the order the machine made them, and never under the machine's lock.
//!
//! What the machine does under its lock (a transition, an outcome it recorded) is
//! queued there, in the machine's order, and delivered once the lock is released by
//! whichever task is delivering: one at a time, so a listener sees transitions in the
//! order they happened even when two tasks caused them. An observer that acts on the
//! breaker (calls its handle, causes a transition) does not wait for itself: its own
//! event is queued and delivered after it returns. What is decided without the lock (a
//! skip, a quiet success) changes no state and is reported at once by the task that
//! decided it, unless that task is running one of the breaker's observers (the call was
//! the observer's own): then it is queued too, and reported after the observer returns.
//! An observer is never run inside itself.
//!
//! Observers told at once ([`Builder::on_event_at_once`](crate::Builder::on_event_at_once))
//! are not in that order: each event is told to them by the task that made it, as soon
//! as the machine's lock is released, so that they run in the context of the call (its
//! `tracing` span) that caused it.
//!
//! The queue, its order and the turn to deliver it are a [`Delivery`]; this module says
//! what a breaker's events are and how each is reported (the [`Reporter`], its sink).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::broadcast;

use crate::breaker::event::Event;
use crate::breaker::outcome::Outcome;
use crate::breaker::settings::Mode;
use crate::breaker::state::{Skip, State, Transition};
use crate::breaker::sync::delivery::{Delivery, Sink};

/// An observer run on every event.
pub(in crate::breaker) type Observer = Arc<dyn Fn(&Event<'_>) + Send + Sync>;

/// An event made under the machine's lock, waiting to be delivered.
#[derive(Debug, Clone)]
pub(super) enum Queued {
    Transition(Transition),
    Recorded {
        outcome: Outcome,
        probe: bool,
        shadow: bool,
        elapsed: Option<Duration>,
        failure_rate: Option<f64>,
    },
    ModeChanged {
        from: Mode,
        to: Mode,
        state: State,
    },
    /// A skip decided without the lock while an observer of the breaker ran on the
    /// deciding thread: reported once that observer returns (as is a quiet success
    /// then, queued as `Recorded`).
    Skipped(Skip),
    Evicted,
}

/// A breaker's events, delivered in order to its [`Reporter`]. See the
/// [module docs](self).
pub(super) type Events = Delivery<Reporter>;

/// Where a breaker's events go: the log, the observers, and the transition channel.
pub(super) struct Reporter {
    name: Arc<str>,
    observers: Box<[Observer]>,
    /// Told of each event at once, by the task that made it.
    at_once: Box<[Observer]>,
    /// Made on the first `subscribe`: a channel costs a few kilobytes, too much for
    /// every breaker of a keyed registry.
    channel: OnceLock<broadcast::Sender<Transition>>,
}

impl Reporter {
    pub(super) fn new(name: Arc<str>, observers: Vec<Observer>, at_once: Vec<Observer>) -> Self {
        Reporter {
            name,
            observers: observers.into_boxed_slice(),
            at_once: at_once.into_boxed_slice(),
            channel: OnceLock::new(),
        }
    }

    /// Runs every observer, as the sink of `events` (see [`Delivery::running`]); a
    /// panicking one is logged and does not reach the caller.
    fn notify(&self, events: &Events, event: &Event<'_>) {
        let _running = events.running();
        run(&self.name, &self.observers, event);
    }

    /// `queued` as the observers see it.
    fn with_event<R>(&self, queued: &Queued, f: impl FnOnce(&Event<'_>) -> R) -> R {
        let name = &*self.name;
        match queued {
            Queued::Recorded {
                outcome,
                probe,
                shadow,
                elapsed,
                failure_rate,
            } => f(&Event::Recorded {
                name,
                outcome,
                probe: *probe,
                shadow: *shadow,
                elapsed: *elapsed,
                failure_rate: *failure_rate,
            }),
            Queued::ModeChanged { from, to, state } => f(&Event::ModeChanged {
                name,
                from: *from,
                to: *to,
                state: *state,
            }),
            Queued::Skipped(skip) => f(&Event::Skipped { name, skip }),
            Queued::Evicted => f(&Event::Evicted { name }),
            Queued::Transition(transition) => f(&Event::Transition(transition)),
        }
    }
}

/// Runs each of `observers` on `event`; a panicking one is logged and does not reach the
/// caller.
fn run(name: &str, observers: &[Observer], event: &Event<'_>) {
    for observer in observers {
        if catch_unwind(AssertUnwindSafe(|| observer(event))).is_err() {
            tracing::error!(target: "tower_circuit_breaker", breaker = %name, "an event observer panicked");
        }
    }
}

impl Sink for Reporter {
    type Item = Queued;

    fn deliver(&self, event: Queued, events: &Events) {
        match &event {
            Queued::ModeChanged { from, to, state } => tracing::info!(
                target: "tower_circuit_breaker",
                breaker = %self.name, from = from.as_str(), mode = to.as_str(), state = state.as_str(),
                "mode changed",
            ),
            Queued::Transition(transition) => log(transition),
            _ => {}
        }
        self.with_event(&event, |event| self.notify(events, event));
        if let (Queued::Transition(transition), Some(channel)) = (event, self.channel.get()) {
            // Never waits: a slow receiver loses the oldest and is told so.
            let _ = channel.send(transition);
        }
    }
}

impl Events {
    /// Whether anyone is told of events at once, by the task that made them.
    #[inline]
    pub(super) fn told_at_once(&self) -> bool {
        !self.sink().at_once.is_empty()
    }

    /// Tells the observers told at once of `event`, made by this task.
    pub(super) fn tell_at_once(&self, event: &Queued) {
        let reporter = self.sink();
        reporter.with_event(event, |event| run(&reporter.name, &reporter.at_once, event));
    }

    pub(super) fn subscribe(&self) -> broadcast::Receiver<Transition> {
        self.sink()
            .channel
            .get_or_init(|| broadcast::channel(64).0)
            .subscribe()
    }

    /// Reports a skip decided now.
    pub(super) fn skipped(self: &Arc<Self>, skip: Skip) {
        if self.told_at_once() {
            self.tell_at_once(&Queued::Skipped(skip));
        }
        self.deliver_now(Queued::Skipped(skip));
    }

    /// Reports a quiet success counted now; `elapsed` if the call was timed.
    #[cold]
    pub(super) fn succeeded(self: &Arc<Self>, elapsed: Option<Duration>) {
        let success = Queued::Recorded {
            outcome: Outcome::Success,
            probe: false,
            shadow: false,
            elapsed,
            failure_rate: Some(crate::breaker::machine::Machine::QUIET_FAILURE_RATE),
        };
        if self.told_at_once() {
            self.tell_at_once(&success);
        }
        self.deliver_now(success);
    }
}

fn log(t: &Transition) {
    if t.cause.opens() {
        tracing::warn!(
            target: "tower_circuit_breaker",
            breaker = %t.name, from = t.from.as_str(), to = t.to.as_str(), cause = t.cause.as_str(),
            consecutive_failures = t.consecutive_failures, mode = t.mode.as_str(),
            "circuit {} for {}", t.to, t.name,
        );
    } else {
        tracing::info!(
            target: "tower_circuit_breaker",
            breaker = %t.name, from = t.from.as_str(), to = t.to.as_str(), cause = t.cause.as_str(),
            mode = t.mode.as_str(),
            "circuit {} for {}", t.to, t.name,
        );
    }
}

#[cfg(all(test, not(tcb_loom)))]
mod tests {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A `tracing` subscriber that panics at every event it is given.
    struct PanickingSubscriber;

    impl tracing::Subscriber for PanickingSubscriber {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, _: &tracing::Event<'_>) {
            panic!("the subscriber panicked");
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    /// The breaker's own reporting logs a mode change to a subscriber that panics: the
    /// panic reaches the caller (it is not an observer's, which would be caught), and
    /// the breaker's later events still reach its observers.
    #[test]
    fn a_tracing_subscriber_panicking_at_a_logged_event_leaves_later_events_delivered() {
        let recorded = Arc::new(AtomicUsize::new(0));
        let observer: Observer = {
            let recorded = recorded.clone();
            Arc::new(move |event: &Event<'_>| {
                if matches!(event, Event::Recorded { .. }) {
                    recorded.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        let events = Arc::new(Events::new(
            Reporter::new("logged".into(), vec![observer], Vec::new()),
            None,
        ));
        events.queue(Queued::ModeChanged {
            from: Mode::Enabled,
            to: Mode::ObserveOnly,
            state: State::Closed,
        });
        let outcome = tracing::subscriber::with_default(PanickingSubscriber, || {
            catch_unwind(AssertUnwindSafe(|| events.deliver()))
        });
        assert!(
            outcome.is_err(),
            "the subscriber's panic reaches the caller"
        );
        events.queue(Queued::Recorded {
            outcome: Outcome::Success,
            probe: false,
            shadow: false,
            elapsed: None,
            failure_rate: None,
        });
        events.deliver();
        assert_eq!(
            recorded.load(Ordering::SeqCst),
            1,
            "the later event reached the observer"
        );
    }
}
