//! An ordered delivery: items queued by many tasks, delivered to a [`Sink`] one at a
//! time, in the order they were queued, and never while the queue's lock is held.
//!
//! Whichever task finds nobody delivering takes the turn and delivers, one item at a
//! time, so the sink sees the items in the queue's order even when two tasks queued
//! them; a task that finds the turn taken leaves its items to the task that has it. A
//! task delivers a batch at a time: the rest of a flood goes on in a task of the
//! multi-thread runtime it runs on, or, outside one, the caller goes on. A turn dropped
//! unfinished delivers the rest; a panic under the delivery gives the turn back.
//!
//! How far delivery has got is counted (what [`Delivery::delivered`] waits on), in a
//! [`DeliveryGroup`] of several queues too, if the queue is in one.
//!
//! A sink that acts back on its queue's owner does not wait for itself: while it runs
//! (inside [`Delivery::running`]) on a thread, what it causes on that thread is left
//! queued and delivered after it returns, and a sink is never run inside itself. An item
//! that needs no place in the queue's order (it changes nothing the owner orders) is
//! delivered at once by the task that made it ([`Delivery::deliver_now`]), under the
//! same rule.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::runtime::RuntimeFlavor;
use tokio::sync::Notify;

use crate::breaker::sync::{lock, AtomicBool, AtomicU64, Mutex};

/// What a [`Delivery`] delivers its items to.
pub(in crate::breaker) trait Sink: Sized + Send + Sync + 'static {
    /// What is delivered.
    type Item: Send + 'static;

    /// Delivers one item. `delivery` is the queue delivering it: what may act back on
    /// the queue's owner (a callback) runs inside [`Delivery::running`].
    fn deliver(&self, item: Self::Item, delivery: &Delivery<Self>);
}

/// See the [module docs](self).
pub(in crate::breaker) struct Delivery<S: Sink> {
    sink: S,
    queue: Mutex<VecDeque<S::Item>>,
    /// Set while a task delivers the queue.
    delivering: AtomicBool,
    /// Set when the sink acted on its owner and left items queued, for the delivery
    /// that ran it to deliver once it returns.
    left: AtomicBool,
    /// Items queued so far, and delivered so far (each once its sink returned): what
    /// [`Delivery::delivered`] waits on.
    queued: AtomicU64,
    delivered: AtomicU64,
    /// Tasks in [`Delivery::delivered`], woken as items are delivered.
    waiting: AtomicU64,
    woken: Notify,
    /// The group of queues it is counted in too, if any.
    group: Option<Arc<DeliveryGroup>>,
}

/// The events of several breakers ([`Builder::delivery_group`](crate::Builder::delivery_group)),
/// counted as they are made and as they reach their observers: whether they have all
/// been delivered is one look at two counters, however many breakers the group has.
/// When they have not, wait for each breaker's with
/// [`CircuitBreakerHandle::events_delivered`](crate::CircuitBreakerHandle::events_delivered).
#[derive(Debug, Default)]
pub struct DeliveryGroup {
    queued: AtomicU64,
    delivered: AtomicU64,
}

impl DeliveryGroup {
    /// Whether every event the group's breakers made before this call has reached its
    /// observers.
    pub fn all_delivered(&self) -> bool {
        // Delivered is read first: a later event made and delivered between the two
        // reads cannot make up for an earlier one still undelivered.
        let delivered = self.delivered.load(Ordering::SeqCst);
        delivered >= self.queued.load(Ordering::SeqCst)
    }
}

impl<S: Sink> Delivery<S> {
    /// A queue delivering to `sink`; its items are counted in `group` too, if it is in
    /// one.
    pub(in crate::breaker) fn new(sink: S, group: Option<Arc<DeliveryGroup>>) -> Self {
        Delivery {
            sink,
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

    #[inline]
    pub(in crate::breaker) fn sink(&self) -> &S {
        &self.sink
    }

    /// Queues an item; under the owner's lock, so the queue is in the owner's order.
    pub(in crate::breaker) fn queue(&self, item: S::Item) {
        // Counted under the queue's lock, so that the count is in the queue's order.
        let mut queue = lock(&self.queue);
        queue.push_back(item);
        self.queued.fetch_add(1, Ordering::SeqCst);
        if let Some(group) = &self.group {
            group.queued.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Waits until every item queued before this call has been delivered: for what
    /// learns of the owner's items through its sink and must not decide on them before
    /// it has. Another task delivering (its sink may be slow) is waited for; with nobody
    /// delivering, the caller delivers. From inside any queue's sink it does not wait:
    /// that sink's own delivery may be what it would wait for (a deadlock, on one thread
    /// or across two).
    pub(in crate::breaker) async fn delivered(self: &Arc<Self>) {
        let target = self.queued.load(Ordering::SeqCst);
        if self.delivered.load(Ordering::SeqCst) >= target || Running::active() {
            return;
        }
        // Sequentially consistent, as the count of delivered items and its load of
        // this: either this task sees the item delivered, or the delivery sees it
        // waiting and wakes it.
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(self);
        loop {
            let woken = self.woken.notified();
            let mut woken = std::pin::pin!(woken);
            woken.as_mut().enable();
            if self.delivered.load(Ordering::SeqCst) >= target || Running::active() {
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
    /// it too. Called after the owner's lock is released.
    ///
    /// A caller delivers at most [`Delivery::BATCH`] items at a time: when others keep
    /// queueing faster than the sink takes them, the rest goes on in a task of the
    /// multi-thread runtime it runs on, so no caller's call waits on other callers'
    /// items for ever. Outside one (no runtime, or a current-thread runtime) the caller
    /// goes on until the queue is empty.
    ///
    /// Called from this queue's sink (which acted on the owner), it leaves the items
    /// queued: they are delivered after the sink returns, by the delivery that runs it
    /// or by [`Delivery::deliver_now`].
    pub(in crate::breaker) fn deliver(self: &Arc<Self>) {
        if Running::on_this_thread(self.key()) {
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

    /// Delivers an item decided without the owner's lock (it changes nothing the queue
    /// orders), at once, outside the queue; from this queue's sink running on this
    /// thread (its own act), it is queued instead, and delivered after the sink
    /// returns. Then delivers what the sink left queued.
    pub(in crate::breaker) fn deliver_now(self: &Arc<Self>, item: S::Item) {
        if Running::on_this_thread(self.key()) {
            self.queue(item);
            self.left.store(true, Ordering::Relaxed);
            return;
        }
        self.sink.deliver(item, self);
        // What the sink caused by acting on the owner.
        if self.left.load(Ordering::Relaxed) && self.left.swap(false, Ordering::Relaxed) {
            self.deliver();
        }
    }

    /// Marks this thread as running this queue's sink until the mark is dropped: what
    /// the sink causes meanwhile on this thread is left queued (see [`Running`]).
    pub(in crate::breaker) fn running(&self) -> Running {
        Running::enter(self.key())
    }

    /// The most items a caller delivers at a time.
    const BATCH: usize = 64;

    /// Delivers up to [`Delivery::BATCH`] items, in the turn; whether the queue is
    /// empty.
    fn deliver_batch(&self) -> bool {
        for _ in 0..Self::BATCH {
            match self.pop() {
                Some(item) => {
                    let _delivered = Delivered(self);
                    self.sink.deliver(item, self);
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

    /// Ends the turn; whether it is over for this task. An item queued after the last
    /// pop and before the turn ended found it taken and left it to this task: then the
    /// task takes the turn again (and it is not over), unless another has.
    fn end_turn(&self) -> bool {
        self.delivering.store(false, Ordering::Release);
        self.is_empty() || !self.take_turn()
    }

    /// Gives the turn back with items maybe still queued (a panic under the delivery
    /// stopped it): a task waiting for them, which found the turn taken, is woken to
    /// deliver them itself. Unconditionally: this is rare, and a waiter that came after
    /// the store finds the turn free.
    #[cold]
    fn give_back(&self) {
        self.delivering.store(false, Ordering::SeqCst);
        self.woken.notify_waiters();
    }

    fn pop(&self) -> Option<S::Item> {
        lock(&self.queue).pop_front()
    }

    fn is_empty(&self) -> bool {
        lock(&self.queue).is_empty()
    }

    /// The queue's mark for [`Running`]: its address.
    fn key(&self) -> usize {
        self as *const Self as usize
    }
}

#[cfg(not(tcb_loom))]
std::thread_local! {
    static RUNNING: RefCell<Marks> = const { RefCell::new(Marks::NONE) };
}

#[cfg(tcb_loom)]
loom::thread_local! {
    static RUNNING: RefCell<Marks> = RefCell::new(Marks::NONE);
}

/// One item delivered, counted when dropped: after its sink returned, or by a panic
/// under its delivery (the item is then lost, and must not be waited for).
struct Delivered<'a, S: Sink>(&'a Delivery<S>);

impl<S: Sink> Drop for Delivered<'_, S> {
    fn drop(&mut self) {
        let delivery = self.0;
        if let Some(group) = &delivery.group {
            group.delivered.fetch_add(1, Ordering::SeqCst);
        }
        delivery.delivered.fetch_add(1, Ordering::SeqCst);
        if delivery.waiting.load(Ordering::SeqCst) > 0 {
            delivery.woken.notify_waiters();
        }
    }
}

/// A task in [`Delivery::delivered`], counted while it waits (until its future ends or
/// is dropped).
struct Waiting<'a, S: Sink>(&'a Delivery<S>);

impl<S: Sink> Drop for Waiting<'_, S> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Marks, while a thread runs a queue's sink, which queue's it is (by the address of
/// its [`Delivery`]): a sink that acts on its own queue's owner (a callback calling
/// back in) must not be run again inside itself, where a lock it holds would deadlock.
/// Every queue whose sink is running on the thread is marked, not only the innermost:
/// a sink of one queue may act on another's owner, whose sink acts on the first's.
#[must_use = "the mark lasts until it is dropped"]
pub(in crate::breaker) struct Running {
    _marked: (),
}

impl Running {
    fn enter(key: usize) -> Running {
        RUNNING.with(|running| running.borrow_mut().push(key));
        Running { _marked: () }
    }

    fn on_this_thread(key: usize) -> bool {
        RUNNING.with(|running| running.borrow().contains(key))
    }

    /// Whether this thread is running some queue's sink.
    fn active() -> bool {
        RUNNING.with(|running| running.borrow().depth != 0)
    }
}

impl Drop for Running {
    /// Marks are dropped in the order opposite to their making (each lives in a scope
    /// of the sink's caller): the last one made is this one.
    fn drop(&mut self) {
        // At a thread's exit its marks may be gone already: nothing is left to unmark.
        let _ = RUNNING.try_with(|running| running.borrow_mut().pop());
    }
}

/// The queues whose sinks a thread is running, innermost last: the first few in place,
/// any deeper (sinks of many breakers calling into one another) in memory that is given
/// back once they return, so that a thread keeps nothing allocated between deliveries.
struct Marks {
    depth: usize,
    near: [usize; Marks::NEAR],
    deeper: Vec<usize>,
}

impl Marks {
    const NEAR: usize = 8;
    const NONE: Marks = Marks {
        depth: 0,
        near: [0; Marks::NEAR],
        deeper: Vec::new(),
    };

    fn push(&mut self, key: usize) {
        match self.near.get_mut(self.depth) {
            Some(slot) => *slot = key,
            None => self.deeper.push(key),
        }
        self.depth += 1;
    }

    fn pop(&mut self) {
        self.depth = self.depth.saturating_sub(1);
        if self.depth >= Self::NEAR {
            self.deeper.pop();
            if self.deeper.is_empty() {
                self.deeper = Vec::new();
            }
        }
    }

    fn contains(&self, key: usize) -> bool {
        self.near[..self.depth.min(Self::NEAR)].contains(&key) || self.deeper.contains(&key)
    }
}

/// The turn to deliver, held by the caller that took it or by the task of the runtime
/// it hands the rest of a flood to.
///
/// Dropped still holding the turn, it delivers the rest where it is dropped and ends
/// the turn: a runtime that shuts down drops its tasks unfinished, and otherwise no
/// later item of the queue would ever be delivered (every caller would find the turn
/// taken). Dropped by a panic under the delivery, it gives the turn back.
struct Turn<S: Sink> {
    delivery: Arc<Delivery<S>>,
    ended: bool,
}

impl<S: Sink> Turn<S> {
    /// The turn, unless another task has it.
    fn take(delivery: &Arc<Delivery<S>>) -> Option<Turn<S>> {
        delivery.take_turn().then(|| Turn {
            delivery: Arc::clone(delivery),
            ended: false,
        })
    }

    /// Ends the turn; whether it is over (see [`Delivery::end_turn`]).
    fn end(&mut self) -> bool {
        self.ended = self.delivery.end_turn();
        self.ended
    }

    /// The rest of the turn, here: until the queue is empty. A panic under it gives the
    /// turn back (this turn, dropped by the panic).
    fn deliver_all(mut self) {
        loop {
            while !self.delivery.deliver_batch() {}
            if self.end() {
                return;
            }
        }
    }

    /// The rest of the turn: a batch at a time, yielding to the runtime between
    /// batches.
    async fn deliver_later(mut self) {
        loop {
            while !self.delivery.deliver_batch() {
                tokio::task::yield_now().await;
            }
            if self.end() {
                return;
            }
        }
    }
}

impl<S: Sink> Drop for Turn<S> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        if std::thread::panicking() {
            // Dropped by a panic under the delivery (one the sink did not catch): the
            // turn is given back, and the next item, or a task waiting for these,
            // delivers the rest.
            self.delivery.give_back();
        } else {
            // Delivered in a turn of its own, which a panic under the delivery gives
            // back: this one is already being dropped.
            Turn {
                delivery: Arc::clone(&self.delivery),
                ended: false,
            }
            .deliver_all();
        }
    }
}

#[cfg(all(test, not(tcb_loom)))]
mod tests {
    use std::future::Future;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::pin::Pin;
    use std::sync::atomic::AtomicUsize;
    use std::sync::{Mutex as StdMutex, OnceLock, Weak};
    use std::task::{Context, Wake, Waker};
    use std::thread;

    use super::*;

    /// Every queue whose sink runs on the thread is known, however deep sinks of
    /// different queues nest, and nothing stays allocated once they have returned.
    #[test]
    fn marks_know_every_running_queue_at_any_depth_and_keep_nothing_after() {
        let mut marks = Marks::NONE;
        for key in 1..=20 {
            marks.push(key);
            assert!((1..=key).all(|k| marks.contains(k)), "all of 1..={key}");
            assert!(!marks.contains(key + 1));
        }
        for key in (1..=20).rev() {
            marks.pop();
            assert!(!marks.contains(key), "{key} returned");
            assert!(
                (1..key).all(|k| marks.contains(k)),
                "1..{key} still running"
            );
        }
        assert_eq!((marks.depth, marks.deeper.capacity()), (0, 0));
    }

    /// An item of the tests: numbered, or one whose delivery panics (as a sink's
    /// logging may, where the sink does not catch it).
    #[derive(Debug)]
    enum Item {
        Numbered(usize),
        Panics,
    }

    /// Each item's number, and the thread that delivered it.
    type Seen = Vec<(usize, thread::ThreadId)>;

    /// A sink that records each numbered item and the thread that delivered it, and
    /// queues another item each time it delivers one, as other callers would while a
    /// caller delivers, up to `flood` items in all.
    struct Recording {
        seen: StdMutex<Seen>,
        flood: usize,
        queued: AtomicUsize,
    }

    impl Sink for Recording {
        type Item = Item;

        fn deliver(&self, item: Item, delivery: &Delivery<Self>) {
            match item {
                Item::Numbered(n) => {
                    let by = thread::current().id();
                    self.seen.lock().unwrap().push((n, by));
                }
                Item::Panics => panic!("the sink panicked"),
            }
            let n = self.queued.fetch_add(1, Ordering::SeqCst);
            if n < self.flood {
                delivery.queue(Item::Numbered(n));
            }
        }
    }

    impl Recording {
        fn new(flood: usize) -> Self {
            Recording {
                seen: StdMutex::new(Vec::new()),
                flood,
                queued: AtomicUsize::new(1),
            }
        }
    }

    /// A queue to a [`Recording`] sink flooding it with `flood` items, nothing queued.
    fn recording(flood: usize) -> Arc<Delivery<Recording>> {
        Arc::new(Delivery::new(Recording::new(flood), None))
    }

    /// A queue to a [`Recording`] sink flooding it with `flood` items, the first queued.
    fn flooding(flood: usize) -> Arc<Delivery<Recording>> {
        let delivery = recording(flood);
        delivery.queue(Item::Numbered(0));
        delivery
    }

    fn numbers(delivery: &Delivery<Recording>) -> Vec<usize> {
        let seen = delivery.sink().seen.lock().unwrap();
        seen.iter().map(|(n, _)| *n).collect()
    }

    /// The sink saw the items numbered `0..count`, each once, in order.
    #[track_caller]
    fn assert_delivered_in_order(delivery: &Delivery<Recording>, count: usize) {
        let expected: Vec<usize> = (0..count).collect();
        assert_eq!(numbers(delivery), expected, "every item once, in order");
    }

    /// On a multi-thread runtime, the caller stops after a batch and a task of the
    /// runtime delivers the rest, every item once and in order.
    #[test]
    fn a_caller_delivers_a_batch_and_a_task_the_rest_of_a_flood() {
        const FLOOD: usize = 1_000;
        let delivery = flooding(FLOOD);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let caller = thread::current().id();
        runtime.block_on(async {
            delivery.deliver();
            let by_the_caller = delivery
                .sink()
                .seen
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, by)| *by == caller)
                .count();
            assert_eq!(
                by_the_caller,
                Delivery::<Recording>::BATCH,
                "the caller stops after a batch"
            );
            // The task delivers the rest.
            while !delivery.is_empty() || delivery.delivering.load(Ordering::SeqCst) {
                tokio::task::yield_now().await;
            }
        });
        assert_delivered_in_order(&delivery, FLOOD);
    }

    /// A current-thread runtime runs a task only when the caller's task lets it: the
    /// caller delivers the whole flood, and nothing is left for a task that might never
    /// run (the runtime dropped, or never driven again).
    #[test]
    fn on_a_current_thread_runtime_the_caller_delivers_the_whole_flood() {
        const FLOOD: usize = 300;
        let delivery = flooding(FLOOD);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            delivery.deliver();
            assert!(delivery.is_empty(), "all delivered when the caller returns");
            assert!(
                !delivery.delivering.load(Ordering::SeqCst),
                "the turn is free"
            );
        });
        assert_delivered_in_order(&delivery, FLOOD);
    }

    /// The task handed the rest of a flood is dropped unfinished (its runtime shut down
    /// before it ran): it delivers the rest where it is dropped, each item once and in
    /// order, and gives the turn back, so later items are delivered as usual.
    #[test]
    fn a_handed_turn_dropped_unfinished_delivers_the_rest_and_gives_the_turn_back() {
        const BATCH: usize = Delivery::<Recording>::BATCH;
        let delivery = flooding(0);
        for n in 1..3 * BATCH {
            delivery.queue(Item::Numbered(n));
        }
        let turn = Turn::take(&delivery).expect("the turn is free");
        assert!(!delivery.deliver_batch(), "more than a batch queued");
        // Handed to a task, then dropped before the task is polled.
        drop(turn.deliver_later());
        assert!(
            !delivery.delivering.load(Ordering::SeqCst),
            "the turn is free"
        );
        delivery.queue(Item::Numbered(3 * BATCH));
        delivery.deliver();
        assert_delivered_in_order(&delivery, 3 * BATCH + 1);
    }

    /// A caller delivers `delivery`'s items, one of which panics: the panic reaches it,
    /// and the turn is free after.
    fn deliver_through_a_panic(delivery: &Arc<Delivery<Recording>>) {
        let outcome = catch_unwind(AssertUnwindSafe(|| delivery.deliver()));
        assert!(outcome.is_err(), "the sink's panic reaches the caller");
        assert!(
            !delivery.delivering.load(Ordering::SeqCst),
            "the turn is free"
        );
    }

    /// A caller delivering meets a panic the sink did not catch: the panic goes on to
    /// the caller, and the turn is given back, so the queue's later items are still
    /// delivered.
    #[test]
    fn a_panic_under_a_callers_delivery_gives_the_turn_back() {
        let delivery = flooding(0);
        delivery.queue(Item::Panics);
        deliver_through_a_panic(&delivery);
        delivery.queue(Item::Numbered(1));
        delivery.deliver();
        assert_eq!(numbers(&delivery), vec![0, 1]);
    }

    /// The same panic past the caller's first batch, with no task to hand the rest to
    /// (no runtime: the caller goes on with the rest of the flood): the turn is given
    /// back there too, so the queue's later items are still delivered.
    #[test]
    fn a_panic_past_the_callers_first_batch_gives_the_turn_back() {
        const BATCH: usize = Delivery::<Recording>::BATCH;
        let delivery = flooding(0);
        for n in 1..BATCH {
            delivery.queue(Item::Numbered(n));
        }
        delivery.queue(Item::Panics);
        deliver_through_a_panic(&delivery);
        delivery.queue(Item::Numbered(BATCH));
        delivery.deliver();
        assert_delivered_in_order(&delivery, BATCH + 1);
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

    /// A task waits for the items while a handed turn delivers them; the delivery
    /// panics, after the waiter was woken for the lost item and found the turn still
    /// taken: when the turn is given back the waiter is woken again (and delivers the
    /// rest itself), instead of waiting for an item that may never come.
    #[test]
    fn a_waiter_is_woken_when_a_panicking_delivery_gives_the_turn_back() {
        let delivery = recording(0);
        delivery.queue(Item::Panics);
        delivery.queue(Item::Numbered(1));
        let turn = Turn::take(&delivery).expect("the turn is free");
        let waiter = Arc::new(Repoll {
            future: StdMutex::new(Some(Box::pin({
                let delivery = Arc::clone(&delivery);
                async move { delivery.delivered().await }
            }))),
            done: AtomicBool::new(false),
        });
        waiter.wake_by_ref();
        assert!(
            !waiter.done.load(Ordering::SeqCst),
            "the waiter waits for the turn's delivery"
        );
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let mut later = std::pin::pin!(turn.deliver_later());
            let _ = later.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        }));
        assert!(outcome.is_err(), "the sink panicked");
        assert!(
            waiter.done.load(Ordering::SeqCst),
            "the waiter was woken when the turn was given back, and is done"
        );
        assert!(delivery.is_empty());
    }

    /// Outside a runtime there is no task to hand the rest to: the caller delivers all.
    #[test]
    fn outside_a_runtime_the_caller_delivers_everything() {
        const BATCH: usize = Delivery::<Recording>::BATCH;
        let delivery = recording(0);
        for n in 0..(3 * BATCH) {
            delivery.queue(Item::Numbered(n));
        }
        delivery.deliver();
        assert_eq!(delivery.sink().seen.lock().unwrap().len(), 3 * BATCH);
        assert!(delivery.is_empty());
    }

    /// A sink that acts back on its own queue from inside its mark, as a callback that
    /// calls back in would: delivering item 0 it queues item 1 and asks for delivery,
    /// delivers item 2 at once, and waits for the queue. Records each item, and how
    /// deep the sink ran inside itself.
    #[derive(Default)]
    struct Reentrant {
        this: OnceLock<Weak<Delivery<Reentrant>>>,
        seen: StdMutex<Vec<usize>>,
        depth: AtomicUsize,
        deepest: AtomicUsize,
        waited: AtomicBool,
    }

    impl Sink for Reentrant {
        type Item = usize;

        fn deliver(&self, item: usize, delivery: &Delivery<Self>) {
            let _running = delivery.running();
            let depth = self.depth.fetch_add(1, Ordering::SeqCst) + 1;
            self.deepest.fetch_max(depth, Ordering::SeqCst);
            self.seen.lock().unwrap().push(item);
            if item == 0 {
                let this = self.this.get().unwrap().upgrade().unwrap();
                this.queue(1);
                this.deliver();
                this.deliver_now(2);
                let waited = std::pin::pin!(this.delivered())
                    .poll(&mut Context::from_waker(Waker::noop()))
                    .is_ready();
                self.waited.store(waited, Ordering::SeqCst);
            }
            self.depth.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn reentrant() -> Arc<Delivery<Reentrant>> {
        let delivery = Arc::new(Delivery::new(Reentrant::default(), None));
        delivery.sink().this.set(Arc::downgrade(&delivery)).unwrap();
        delivery
    }

    /// What a sink causes on its own queue from inside itself is left queued and
    /// delivered after it returns, in order; the sink never runs inside itself, and
    /// waiting for its queue from inside it does not wait. Whether its item was queued
    /// or delivered at once.
    #[test]
    fn a_sink_acting_on_its_own_queue_is_not_run_inside_itself() {
        let queued = reentrant();
        queued.queue(0);
        queued.deliver();
        let at_once = reentrant();
        at_once.deliver_now(0);
        for delivery in [queued, at_once] {
            let sink = delivery.sink();
            assert_eq!(*sink.seen.lock().unwrap(), vec![0, 1, 2], "in order, after");
            assert_eq!(
                sink.deepest.load(Ordering::SeqCst),
                1,
                "never inside itself"
            );
            assert!(sink.waited.load(Ordering::SeqCst), "no wait from inside");
            assert!(delivery.is_empty());
            assert!(
                !delivery.delivering.load(Ordering::SeqCst),
                "the turn is free"
            );
        }
    }

    /// A group is settled once every item its queues queued is delivered, an item lost
    /// to a panic under its delivery included (it is not waited for).
    #[test]
    fn a_group_is_settled_once_its_queues_items_are_delivered_or_lost() {
        let group = Arc::new(DeliveryGroup::default());
        let one = Arc::new(Delivery::new(Recording::new(0), Some(group.clone())));
        let other = Arc::new(Delivery::new(Recording::new(0), Some(group.clone())));
        assert!(group.all_delivered(), "nothing queued");
        one.queue(Item::Numbered(0));
        other.queue(Item::Panics);
        assert!(!group.all_delivered(), "two items queued");
        one.deliver();
        assert!(!group.all_delivered(), "one item still queued");
        assert!(catch_unwind(AssertUnwindSafe(|| other.deliver())).is_err());
        assert!(group.all_delivered(), "one delivered, one lost");
    }
}
