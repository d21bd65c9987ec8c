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

use std::cell::Cell;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::runtime::RuntimeFlavor;
use tokio::sync::{broadcast, Notify};

use crate::event::Event;
use crate::machine::{Mode, Skip, State, Transition};
use crate::outcome::Outcome;
use crate::sync::{lock, AtomicBool, AtomicU64, Mutex};

/// An observer run on every event.
pub(crate) type Observer = Arc<dyn Fn(&Event<'_>) + Send + Sync>;

/// An event made under the machine's lock, waiting to be delivered.
#[derive(Debug)]
pub(super) enum Queued {
    Transition(Transition),
    Recorded {
        outcome: Outcome,
        probe: bool,
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

/// See the [module docs](self).
pub(super) struct Events {
    name: Arc<str>,
    observers: Box<[Observer]>,
    /// Made on the first `subscribe`: a channel costs a few kilobytes, too much for
    /// every breaker of a keyed registry.
    channel: OnceLock<broadcast::Sender<Transition>>,
    queue: Mutex<VecDeque<Queued>>,
    /// Set while a task delivers the queue.
    delivering: AtomicBool,
    /// Set when an observer acted on its breaker and left events queued, for the report
    /// that ran it to deliver once it returns.
    left: AtomicBool,
    /// Events queued so far, and delivered so far (each once its observers returned):
    /// what [`Events::delivered`] waits on.
    queued: AtomicU64,
    delivered: AtomicU64,
    /// Tasks in [`Events::delivered`], woken as events are delivered.
    waiting: AtomicU64,
    woken: Notify,
    /// The group of breakers it is counted in too, if any.
    group: Option<Arc<DeliveryGroup>>,
}

/// The events of a group of breakers (an agent's tools), counted as they are queued
/// and delivered: whether they are all delivered is one look at two counters, however
/// many breakers the group has.
#[derive(Debug, Default)]
pub(crate) struct DeliveryGroup {
    queued: AtomicU64,
    delivered: AtomicU64,
}

impl DeliveryGroup {
    /// Whether every event the group's breakers queued before this call has been
    /// delivered. (Delivered is read first: a later event queued and delivered between
    /// the two reads cannot make up for an earlier one still undelivered.)
    pub(crate) fn settled(&self) -> bool {
        let delivered = self.delivered.load(Ordering::SeqCst);
        delivered >= self.queued.load(Ordering::SeqCst)
    }
}

impl Events {
    pub(super) fn new(
        name: Arc<str>,
        observers: Vec<Observer>,
        group: Option<Arc<DeliveryGroup>>,
    ) -> Self {
        Events {
            name,
            observers: observers.into_boxed_slice(),
            channel: OnceLock::new(),
            queue: Mutex::new(VecDeque::new()),
            delivering: AtomicBool::new(false),
            left: AtomicBool::new(false),
            queued: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            woken: Notify::new(),
            group,
        }
    }

    /// Whether anyone is told of outcomes and skips.
    #[inline]
    pub(super) fn observed(&self) -> bool {
        !self.observers.is_empty()
    }

    pub(super) fn subscribe(&self) -> broadcast::Receiver<Transition> {
        self.channel
            .get_or_init(|| broadcast::channel(64).0)
            .subscribe()
    }

    /// Queues an event; under the machine's lock, so the queue is in the machine's
    /// order.
    pub(super) fn queue(&self, event: Queued) {
        // Counted under the queue's lock, so that the count is in the queue's order.
        let mut queue = lock(&self.queue);
        queue.push_back(event);
        self.queued.fetch_add(1, Ordering::SeqCst);
        if let Some(group) = &self.group {
            group.queued.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Waits until every event queued before this call has reached the observers:
    /// for what learns of the breaker's outcomes through an observer (the expediter's
    /// budget) and must not decide on it before it has. Another task delivering (an
    /// observer of its may be slow) is waited for; with nobody delivering, the caller
    /// delivers. From inside an observer of any breaker it does not wait: that
    /// observer's own delivery may be what it would wait for (a deadlock, on one thread
    /// or across two).
    pub(super) async fn delivered(self: &Arc<Self>) {
        let target = self.queued.load(Ordering::SeqCst);
        if self.delivered.load(Ordering::SeqCst) >= target || Reporting::active() {
            return;
        }
        // Sequentially consistent, as the count of delivered events and its load of
        // this: either this task sees the event delivered, or the delivery sees it
        // waiting and wakes it.
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(self);
        loop {
            let woken = self.woken.notified();
            let mut woken = std::pin::pin!(woken);
            woken.as_mut().enable();
            if self.delivered.load(Ordering::SeqCst) >= target || Reporting::active() {
                return;
            }
            if !self.delivering.load(Ordering::Acquire) {
                self.deliver();
                continue;
            }
            woken.await;
        }
    }

    /// Delivers what is queued, unless another task is delivering: that task delivers
    /// it too. Called after the machine's lock is released.
    ///
    /// A caller delivers at most [`Events::BATCH`] events at a time: when others keep
    /// queueing faster than the observers take them, the rest goes on in a task of the
    /// multi-thread runtime it runs on, so no caller's call waits on other callers'
    /// events for ever. Outside one (no runtime, or a current-thread runtime) the caller
    /// goes on until the queue is empty.
    ///
    /// Called from one of this breaker's observers (which acted on the breaker), it
    /// leaves the events queued: they are delivered after the observer returns, by the
    /// delivery or the report that runs it.
    pub(super) fn deliver(self: &Arc<Self>) {
        if Reporting::on_this_thread(self) {
            self.left.store(true, Ordering::Relaxed);
            return;
        }
        let Some(mut turn) = Turn::take(self) else {
            return;
        };
        loop {
            if !self.deliver_batch() {
                match tokio::runtime::Handle::try_current() {
                    // Its workers run the task whatever this caller does: the turn goes
                    // with the task.
                    Ok(runtime) if runtime.runtime_flavor() == RuntimeFlavor::MultiThread => {
                        drop(runtime.spawn(turn.deliver_later()));
                    }
                    // A current-thread runtime runs a task only when this caller's task
                    // lets it, and may never run it again: the caller goes on (the
                    // turn, dropped unfinished, delivers the rest).
                    _ => drop(turn),
                }
                return;
            }
            if turn.end() {
                return;
            }
        }
    }

    /// The most events a caller delivers at a time.
    const BATCH: usize = 64;

    /// Delivers up to [`Events::BATCH`] events, in the turn; whether the queue is empty.
    fn deliver_batch(&self) -> bool {
        for _ in 0..Self::BATCH {
            match self.pop() {
                Some(event) => {
                    let _delivered = Delivered(self);
                    self.report(event);
                }
                None => return true,
            }
        }
        self.is_empty()
    }

    /// Takes the turn to deliver, unless another task has it.
    fn take_turn(&self) -> bool {
        self.delivering
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Ends the turn; whether it is over for this task. An event queued after the last
    /// pop and before the turn ended found it taken and left it to this task: then the
    /// task takes the turn again (and it is not over), unless another has.
    fn end_turn(&self) -> bool {
        self.delivering.store(false, Ordering::Release);
        self.is_empty() || !self.take_turn()
    }

    /// Gives the turn back with events maybe still queued (a panic under the delivery
    /// stopped it): a task waiting for them, which found the turn taken, is woken to
    /// deliver them itself. Unconditionally: this is rare, and a waiter that came after
    /// the store finds the turn free.
    #[cold]
    fn give_back(&self) {
        self.delivering.store(false, Ordering::SeqCst);
        self.woken.notify_waiters();
    }

    fn pop(&self) -> Option<Queued> {
        lock(&self.queue).pop_front()
    }

    fn is_empty(&self) -> bool {
        lock(&self.queue).is_empty()
    }

    fn report(&self, event: Queued) {
        match event {
            Queued::Recorded {
                outcome,
                probe,
                elapsed,
                failure_rate,
            } => self.notify(&Event::Recorded {
                name: &self.name,
                outcome: &outcome,
                probe,
                elapsed,
                failure_rate,
            }),
            Queued::ModeChanged { from, to, state } => {
                tracing::info!(
                    target: "tower_circuit_breaker",
                    breaker = %self.name, from = from.as_str(), mode = to.as_str(), state = state.as_str(),
                    "mode changed",
                );
                self.notify(&Event::ModeChanged {
                    name: &self.name,
                    from,
                    to,
                    state,
                });
            }
            Queued::Skipped(skip) => self.notify(&Event::Skipped {
                name: &self.name,
                skip: &skip,
            }),
            Queued::Evicted => self.notify(&Event::Evicted { name: &self.name }),
            Queued::Transition(transition) => {
                log(&transition);
                self.notify(&Event::Transition(&transition));
                if let Some(channel) = self.channel.get() {
                    // Never waits: a slow receiver loses the oldest and is told so.
                    let _ = channel.send(transition);
                }
            }
        }
    }

    /// Reports that the breaker was evicted from its keyed registry, after whatever is
    /// queued.
    pub(super) fn evicted(self: &Arc<Self>) {
        self.queue(Queued::Evicted);
        self.deliver();
    }

    /// Reports a skip decided now.
    pub(super) fn skipped(self: &Arc<Self>, skip: &Skip) {
        self.report_now(Queued::Skipped(*skip));
    }

    /// Reports a quiet success counted now; `elapsed` if the call was timed.
    #[cold]
    pub(super) fn succeeded(self: &Arc<Self>, elapsed: Option<Duration>) {
        self.report_now(Queued::Recorded {
            outcome: Outcome::Success,
            probe: false,
            elapsed,
            failure_rate: Some(crate::machine::Machine::QUIET_FAILURE_RATE),
        });
    }

    /// Reports an event decided without the lock, at once; from one of this breaker's
    /// observers (its call was skipped, or succeeded), after that observer returns.
    fn report_now(self: &Arc<Self>, event: Queued) {
        if Reporting::on_this_thread(self) {
            self.queue(event);
            self.left.store(true, Ordering::Relaxed);
            return;
        }
        self.report(event);
        // What the observers caused by acting on the breaker.
        if self.left.load(Ordering::Relaxed) && self.left.swap(false, Ordering::Relaxed) {
            self.deliver();
        }
    }

    /// Runs every observer; a panicking one is logged and does not reach the caller.
    fn notify(&self, event: &Event<'_>) {
        let _reporting = Reporting::enter(self);
        for observer in self.observers.iter() {
            if catch_unwind(AssertUnwindSafe(|| observer(event))).is_err() {
                tracing::error!(target: "tower_circuit_breaker", breaker = %self.name, "an event observer panicked");
            }
        }
    }
}

#[cfg(not(tcb_loom))]
std::thread_local! {
    static REPORTING: Cell<usize> = const { Cell::new(0) };
}

#[cfg(tcb_loom)]
loom::thread_local! {
    static REPORTING: Cell<usize> = Cell::new(0);
}

/// One event delivered, counted when dropped: after its observers returned, or by a
/// panic under its delivery (the event is then lost, and must not be waited for).
struct Delivered<'a>(&'a Events);

impl Drop for Delivered<'_> {
    fn drop(&mut self) {
        let events = self.0;
        if let Some(group) = &events.group {
            group.delivered.fetch_add(1, Ordering::SeqCst);
        }
        events.delivered.fetch_add(1, Ordering::SeqCst);
        if events.waiting.load(Ordering::SeqCst) > 0 {
            events.woken.notify_waiters();
        }
    }
}

/// A task in [`Events::delivered`], counted while it waits (until its future ends or is
/// dropped).
struct Waiting<'a>(&'a Events);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Marks, while a thread runs a breaker's observers, which breaker's they are (by the
/// address of its [`Events`]): an observer that acts on its own breaker (its handle, a
/// call) must not be run again inside itself, where a lock it holds would deadlock.
struct Reporting {
    outer: usize,
}

impl Reporting {
    fn key(events: &Events) -> usize {
        events as *const Events as usize
    }

    fn enter(events: &Events) -> Reporting {
        let outer = REPORTING.with(|reporting| reporting.replace(Self::key(events)));
        Reporting { outer }
    }

    fn on_this_thread(events: &Events) -> bool {
        REPORTING.with(|reporting| reporting.get() == Self::key(events))
    }

    /// Whether this thread is running some breaker's observers.
    fn active() -> bool {
        REPORTING.with(|reporting| reporting.get() != 0)
    }
}

impl Drop for Reporting {
    fn drop(&mut self) {
        REPORTING.with(|reporting| reporting.set(self.outer));
    }
}

/// The turn to deliver, held by the caller that took it or by the task of the runtime
/// it hands the rest of a flood to.
///
/// Dropped still holding the turn, it delivers the rest where it is dropped and ends
/// the turn: a runtime that shuts down drops its tasks unfinished, and otherwise no
/// later event of the breaker would ever be delivered (every caller would find the turn
/// taken). Dropped by a panic under the delivery, it gives the turn back.
struct Turn {
    events: Arc<Events>,
    ended: bool,
}

impl Turn {
    /// The turn, unless another task has it.
    fn take(events: &Arc<Events>) -> Option<Turn> {
        events.take_turn().then(|| Turn {
            events: Arc::clone(events),
            ended: false,
        })
    }

    /// Ends the turn; whether it is over (see [`Events::end_turn`]).
    fn end(&mut self) -> bool {
        self.ended = self.events.end_turn();
        self.ended
    }

    /// The rest of the turn, here: until the queue is empty. A panic under it gives the
    /// turn back (this turn, dropped by the panic).
    fn deliver_all(mut self) {
        loop {
            while !self.events.deliver_batch() {}
            if self.end() {
                return;
            }
        }
    }

    /// The rest of the turn: a batch at a time, yielding to the runtime between
    /// batches.
    async fn deliver_later(mut self) {
        loop {
            while !self.events.deliver_batch() {
                tokio::task::yield_now().await;
            }
            if self.end() {
                return;
            }
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        if std::thread::panicking() {
            // Dropped by a panic under the delivery (not an observer's: those are
            // caught; a `tracing` subscriber's, say): the turn is given back, and the
            // next event, or a task waiting for these, delivers the rest.
            self.events.give_back();
        } else {
            // Delivered in a turn of its own, which a panic under the delivery gives
            // back: this one is already being dropped.
            Turn {
                events: Arc::clone(&self.events),
                ended: false,
            }
            .deliver_all();
        }
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
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::AtomicUsize;
    use std::sync::{Mutex as StdMutex, Weak};
    use std::task::{Context, Wake, Waker};
    use std::thread;

    use super::*;

    /// A recorded success, numbered through its failure rate.
    fn recorded(n: usize) -> Queued {
        Queued::Recorded {
            outcome: Outcome::Success,
            probe: false,
            elapsed: None,
            failure_rate: Some(n as f64),
        }
    }

    /// Each event's number, and the thread that delivered it.
    type Seen = Vec<(f64, thread::ThreadId)>;

    /// An observer that queues another event each time it runs, as other callers would
    /// while a caller delivers, up to `flood` events in all; records each event's number
    /// and the thread that delivered it.
    fn flooding(flood: usize) -> (Arc<Events>, Arc<StdMutex<Seen>>) {
        let queued = Arc::new(AtomicUsize::new(1));
        let seen = Arc::new(StdMutex::new(Vec::new()));
        let this: Arc<OnceLock<Weak<Events>>> = Arc::new(OnceLock::new());
        let observer: Observer = {
            let (seen, this) = (seen.clone(), this.clone());
            Arc::new(move |event: &Event<'_>| {
                if let Event::Recorded { failure_rate, .. } = event {
                    let by = thread::current().id();
                    seen.lock().unwrap().push((failure_rate.unwrap(), by));
                }
                let n = queued.fetch_add(1, Ordering::SeqCst);
                if n < flood {
                    let events = this.get().unwrap().upgrade().unwrap();
                    events.queue(recorded(n));
                }
            })
        };
        let events = Arc::new(Events::new("flood".into(), vec![observer], None));
        this.set(Arc::downgrade(&events)).unwrap();
        events.queue(recorded(0));
        (events, seen)
    }

    fn numbers(seen: &[(f64, thread::ThreadId)]) -> Vec<f64> {
        seen.iter().map(|(n, _)| *n).collect()
    }

    /// The observer saw the recorded events numbered `0..count`, each once, in order.
    #[track_caller]
    fn assert_delivered_in_order(seen: &StdMutex<Seen>, count: usize) {
        let expected: Vec<f64> = (0..count).map(|n| n as f64).collect();
        assert_eq!(
            numbers(&seen.lock().unwrap()),
            expected,
            "every event once, in order"
        );
    }

    /// On a multi-thread runtime, the caller stops after a batch and a task of the
    /// runtime delivers the rest, every event once and in order.
    #[test]
    fn a_caller_delivers_a_batch_and_a_task_the_rest_of_a_flood() {
        const FLOOD: usize = 1_000;
        let (events, seen) = flooding(FLOOD);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let caller = thread::current().id();
        runtime.block_on(async {
            events.deliver();
            let by_the_caller = seen
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, by)| *by == caller)
                .count();
            assert_eq!(
                by_the_caller,
                Events::BATCH,
                "the caller stops after a batch"
            );
            // The task delivers the rest.
            while !events.is_empty() || events.delivering.load(Ordering::SeqCst) {
                tokio::task::yield_now().await;
            }
        });
        assert_delivered_in_order(&seen, FLOOD);
    }

    /// A current-thread runtime runs a task only when the caller's task lets it: the
    /// caller delivers the whole flood, and nothing is left for a task that might never
    /// run (the runtime dropped, or never driven again).
    #[test]
    fn on_a_current_thread_runtime_the_caller_delivers_the_whole_flood() {
        const FLOOD: usize = 300;
        let (events, seen) = flooding(FLOOD);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            events.deliver();
            assert!(events.is_empty(), "all delivered when the caller returns");
            assert!(
                !events.delivering.load(Ordering::SeqCst),
                "the turn is free"
            );
        });
        assert_delivered_in_order(&seen, FLOOD);
    }

    /// The task handed the rest of a flood is dropped unfinished (its runtime shut down
    /// before it ran): it delivers the rest where it is dropped, each event once and in
    /// order, and gives the turn back, so later events are delivered as usual.
    #[test]
    fn a_handed_turn_dropped_unfinished_delivers_the_rest_and_gives_the_turn_back() {
        let (events, seen) = flooding(0);
        for n in 1..3 * Events::BATCH {
            events.queue(recorded(n));
        }
        let turn = Turn::take(&events).expect("the turn is free");
        assert!(!events.deliver_batch(), "more than a batch queued");
        // Handed to a task, then dropped before the task is polled.
        drop(turn.deliver_later());
        assert!(
            !events.delivering.load(Ordering::SeqCst),
            "the turn is free"
        );
        events.queue(recorded(3 * Events::BATCH));
        events.deliver();
        assert_delivered_in_order(&seen, 3 * Events::BATCH + 1);
    }

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

    /// A mode change: logged, so a [`PanickingSubscriber`] panics under its delivery.
    fn mode_changed() -> Queued {
        Queued::ModeChanged {
            from: Mode::Enabled,
            to: Mode::ObserveOnly,
            state: State::Closed,
        }
    }

    /// A caller delivers `events` under a [`PanickingSubscriber`]: the panic reaches
    /// it, and the turn is free after.
    fn deliver_through_a_panic(events: &Arc<Events>) {
        let outcome = tracing::subscriber::with_default(PanickingSubscriber, || {
            catch_unwind(AssertUnwindSafe(|| events.deliver()))
        });
        assert!(
            outcome.is_err(),
            "the subscriber's panic reaches the caller"
        );
        assert!(
            !events.delivering.load(Ordering::SeqCst),
            "the turn is free"
        );
    }

    /// A caller delivering meets a panic outside the observers (a `tracing` subscriber
    /// logging a mode change): the panic goes on to the caller, and the turn is given
    /// back, so the breaker's later events are still delivered.
    #[test]
    fn a_panic_under_a_callers_delivery_gives_the_turn_back() {
        let (events, seen) = flooding(0);
        events.queue(mode_changed());
        deliver_through_a_panic(&events);
        events.queue(recorded(1));
        events.deliver();
        assert_eq!(numbers(&seen.lock().unwrap()), vec![0.0, 1.0]);
    }

    /// The same panic past the caller's first batch, with no task to hand the rest to
    /// (no runtime: the caller goes on with the rest of the flood): the turn is given
    /// back there too, so the breaker's later events are still delivered.
    #[test]
    fn a_panic_past_the_callers_first_batch_gives_the_turn_back() {
        let (events, seen) = flooding(0);
        for n in 1..Events::BATCH {
            events.queue(recorded(n));
        }
        events.queue(mode_changed());
        deliver_through_a_panic(&events);
        events.queue(recorded(Events::BATCH));
        events.deliver();
        assert_delivered_in_order(&seen, Events::BATCH + 1);
    }

    /// A waker that polls its future again at once when woken, on the waking thread
    /// (as a waiter parked on another thread would, while the waking thread goes on);
    /// a wake while it polls is left to that poll, which looks again before it waits.
    struct Repoll {
        future: StdMutex<Option<Pin<Box<dyn Future<Output = ()> + Send>>>>,
        done: AtomicBool,
    }

    impl Wake for Repoll {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            let waker = Waker::from(Arc::clone(self));
            let Ok(mut future) = self.future.try_lock() else {
                return;
            };
            if let Some(polled) = future.as_mut() {
                if polled
                    .as_mut()
                    .poll(&mut Context::from_waker(&waker))
                    .is_ready()
                {
                    *future = None;
                    self.done.store(true, Ordering::SeqCst);
                }
            }
        }
    }

    /// A task waits for the events while a handed turn delivers them; the delivery
    /// panics outside the observers, after the waiter was woken for the lost event and
    /// found the turn still taken: when the turn is given back the waiter is woken
    /// again (and delivers the rest itself), instead of waiting for an event that may
    /// never come.
    #[test]
    fn a_waiter_is_woken_when_a_panicking_delivery_gives_the_turn_back() {
        let events = Arc::new(Events::new("waited".into(), Vec::new(), None));
        events.queue(mode_changed());
        events.queue(recorded(1));
        let turn = Turn::take(&events).expect("the turn is free");
        let waiter = Arc::new(Repoll {
            future: StdMutex::new(Some(Box::pin({
                let events = Arc::clone(&events);
                async move { events.delivered().await }
            }))),
            done: AtomicBool::new(false),
        });
        waiter.wake_by_ref();
        assert!(
            !waiter.done.load(Ordering::SeqCst),
            "the waiter waits for the turn's delivery"
        );
        let outcome = tracing::subscriber::with_default(PanickingSubscriber, || {
            catch_unwind(AssertUnwindSafe(|| {
                let mut delivery = std::pin::pin!(turn.deliver_later());
                let _ = delivery
                    .as_mut()
                    .poll(&mut Context::from_waker(Waker::noop()));
            }))
        });
        assert!(outcome.is_err(), "the subscriber panicked");
        assert!(
            waiter.done.load(Ordering::SeqCst),
            "the waiter was woken when the turn was given back, and is done"
        );
        assert!(events.is_empty());
    }

    /// Outside a runtime there is no task to hand the rest to: the caller delivers all.
    #[test]
    fn outside_a_runtime_the_caller_delivers_everything() {
        let delivered = Arc::new(AtomicUsize::new(0));
        let observer: Observer = {
            let delivered = delivered.clone();
            Arc::new(move |_: &Event<'_>| {
                delivered.fetch_add(1, Ordering::SeqCst);
            })
        };
        let events = Arc::new(Events::new("plain".into(), vec![observer], None));
        for n in 0..(3 * Events::BATCH) {
            events.queue(recorded(n));
        }
        events.deliver();
        assert_eq!(delivered.load(Ordering::SeqCst), 3 * Events::BATCH);
        assert!(events.is_empty());
    }
}
