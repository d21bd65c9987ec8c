//! A counting global allocator: the closed and open paths allocate nothing per call once
//! warmed up, through a single breaker and through a keyed registry, and a keyed
//! registry's memory stays flat however many keys pass through it.
//!
//! The counters are per thread (each test counts only what its own thread allocates), so
//! the tests may run in parallel. Every call is driven by hand with a no-op waker, as
//! the overhead bench's hand-polled column does: no runtime, whose own allocations would blur
//! the count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use tower::{service_fn, Layer, Service};
use tower_circuit_breaker::error::CallError;
use tower_circuit_breaker::keyed::KeyedCircuitBreakerLayer;
use tower_circuit_breaker::{Builder, CircuitBreakerLayer, Cooldown, Outcome, Reason, Source};

/// Hands every request to `System` unchanged and counts it on the calling thread.
struct Counting;

thread_local! {
    // `const` initialisers and no destructors: reading them never allocates and works
    // at any point of a thread's life, as an allocator needs.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    static ALLOCATED: Cell<u64> = const { Cell::new(0) };
    static FREED: Cell<u64> = const { Cell::new(0) };
    static PEAK: Cell<u64> = const { Cell::new(0) };
    static SIZES: Cell<[usize; 8]> = const { Cell::new([0; 8]) };
}

fn counted(size: usize) {
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
    let _ = SIZES.try_with(|sizes| {
        let mut recent = sizes.get();
        recent.rotate_right(1);
        recent[0] = size;
        sizes.set(recent);
    });
    let _ = ALLOCATED.try_with(|bytes| {
        bytes.set(bytes.get() + size as u64);
        let live = bytes
            .get()
            .saturating_sub(FREED.try_with(Cell::get).unwrap_or(0));
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(live)));
    });
}

fn freed(size: usize) {
    let _ = FREED.try_with(|bytes| bytes.set(bytes.get() + size as u64));
}

// SAFETY: every method passes its arguments unchanged to `System`, which upholds the
// `GlobalAlloc` contract; the counting around it touches only `const`, destructor-free
// thread-locals and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        counted(layout.size());
        // SAFETY: the caller's guarantees for `alloc` are `System.alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        counted(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        freed(layout.size());
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes
        // through this allocator to `System`).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        freed(layout.size());
        counted(new_size);
        // SAFETY: as for `dealloc`, and `new_size` is the caller's, checked by its
        // contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// What this thread allocated so far.
#[derive(Debug, Clone, Copy)]
struct Count {
    allocations: u64,
    allocated: u64,
    freed: u64,
}

impl Count {
    fn now() -> Count {
        Count {
            allocations: ALLOCATIONS.with(Cell::get),
            allocated: ALLOCATED.with(Cell::get),
            freed: FREED.with(Cell::get),
        }
    }

    fn allocations_since(self) -> u64 {
        Count::now().allocations - self.allocations
    }

    /// Bytes allocated and not freed since `self`.
    fn live_since(self) -> i64 {
        let now = Count::now();
        (now.allocated - self.allocated) as i64 - (now.freed - self.freed) as i64
    }
}

/// Restarts the peak at what is live now; returns the live bytes.
fn reset_peak() -> u64 {
    let live = ALLOCATED.with(Cell::get) - FREED.with(Cell::get);
    PEAK.with(|peak| peak.set(live));
    live
}

fn peak() -> u64 {
    PEAK.with(Cell::get)
}

/// One call through `svc`, driven by hand: the services here are always ready and their
/// futures complete at once.
fn call_once<S, R>(svc: &mut S, cx: &mut Context<'_>, request: R) -> S::Response
where
    S: Service<R>,
    S::Error: std::fmt::Debug,
{
    match svc.poll_ready(cx) {
        Poll::Ready(Ok(())) => {}
        _ => unreachable!("the test's services are always ready"),
    }
    match pin!(svc.call(request)).poll(cx) {
        Poll::Ready(result) => result.expect("the test's calls succeed"),
        Poll::Pending => unreachable!("the test's futures complete at once"),
    }
}

fn echo() -> impl Service<u64, Response = u64, Error = Infallible, Future: Send> + Clone {
    service_fn(|x: u64| std::future::ready(Ok::<_, Infallible>(x)))
}

fn fallback() -> impl Service<u64, Response = u64, Error = Infallible, Future: Send> + Clone {
    service_fn(|_: u64| std::future::ready(Ok::<_, Infallible>(0)))
}

const WARM_UP: u64 = 100;
const CALLS: u64 = 10_000;

/// Asserts that `CALLS` calls through `svc`, after `WARM_UP` of them, allocate nothing,
/// and that they were answered from `expected`.
fn assert_no_allocation<S>(what: &str, svc: &mut S, expected: fn(&Source) -> bool)
where
    S: Service<u64, Response = tower_circuit_breaker::Answer<u64>>,
    S::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    for i in 0..WARM_UP {
        let answer = call_once(svc, &mut cx, i);
        assert!(expected(&answer.source()), "{what}: {:?}", answer.source());
    }
    let start = Count::now();
    for i in 0..CALLS {
        std::hint::black_box(call_once(svc, &mut cx, std::hint::black_box(i)));
    }
    let allocations = start.allocations_since();
    assert_eq!(
        allocations, 0,
        "{what}: {allocations} allocations in {CALLS} calls"
    );
}

#[test]
fn a_single_breaker_allocates_nothing_per_call() {
    let layer = CircuitBreakerLayer::builder().build().expect("valid");
    let mut closed = layer.layer(echo());
    assert_no_allocation("closed", &mut closed, |s| *s == Source::Service);

    let layer = CircuitBreakerLayer::builder().build().expect("valid");
    layer.handle().force_open();
    let mut open = layer.with_fallback(fallback()).layer(echo());
    assert_no_allocation("forced open, fallback", &mut open, Source::is_fallback);

    let layer = CircuitBreakerLayer::builder().build().expect("valid");
    layer.handle().kill_switch().kill();
    let mut killed = layer.with_fallback(fallback()).layer(echo());
    assert_no_allocation("killed, fallback", &mut killed, Source::is_fallback);

    // Opened by a failure, with the default cooldown in time: each skip reads the clock.
    let mut cx = Context::from_waker(Waker::noop());
    let mut open = tripping(Builder::new());
    call_once(&mut open, &mut cx, TRIP);
    assert_no_allocation("open in time, fallback", &mut open, |s| {
        *s == Source::Fallback(Reason::Open)
    });

    // Half-open, its one probe slot taken by a reservation that is never used.
    let mut half_open = tripping(Builder::new().cooldown(Cooldown::Calls(1)));
    call_once(&mut half_open, &mut cx, TRIP);
    let mut holder = half_open.clone();
    assert!(
        holder.poll_ready(&mut cx).is_ready(),
        "the probe slot is taken"
    );
    assert_no_allocation(
        "half-open full, fallback",
        &mut half_open,
        Source::is_fallback,
    );
}

/// With typed errors a skipped call's error is a `CallError` carrying its `Rejected` by
/// value: no box, so no allocation, whatever the reason.
#[test]
fn a_rejection_with_typed_errors_allocates_nothing() {
    let typed = || {
        CircuitBreakerLayer::builder()
            .build()
            .expect("valid")
            .with_typed_errors()
    };
    let layer = typed();
    layer.handle().force_open();
    assert_rejections_allocate_nothing("forced open", &mut layer.layer(echo()), Reason::ForcedOpen);

    let layer = typed();
    layer.handle().kill_switch().kill();
    assert_rejections_allocate_nothing("killed", &mut layer.layer(echo()), Reason::Killed);

    // Opened by failures, with the default cooldown in time.
    let layer = typed();
    let handle = layer.handle();
    let mut open = layer
        .with_classifier(|result: &Result<u64, Infallible>| match result {
            Ok(TRIP) => Outcome::failure(),
            _ => Outcome::Success,
        })
        .layer(echo());
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..3 {
        assert!(reply(&mut open, &mut cx, TRIP).is_ok());
    }
    assert_eq!(handle.state(), tower_circuit_breaker::State::Open);
    assert_rejections_allocate_nothing("open in time", &mut open, Reason::Open);
}

fn reply<S: Service<u64>>(
    svc: &mut S,
    cx: &mut Context<'_>,
    request: u64,
) -> Result<S::Response, S::Error> {
    assert!(matches!(svc.poll_ready(cx), Poll::Ready(Ok(()))));
    match pin!(svc.call(request)).poll(cx) {
        Poll::Ready(result) => result,
        Poll::Pending => unreachable!("the test's futures complete at once"),
    }
}

/// Asserts that `CALLS` calls through `svc`, after `WARM_UP` of them, are rejected for
/// `reason` and allocate nothing.
fn assert_rejections_allocate_nothing<S>(what: &str, svc: &mut S, reason: Reason)
where
    S: Service<u64, Error = CallError>,
{
    let mut cx = Context::from_waker(Waker::noop());
    let mut reject = |svc: &mut S| match reply(svc, &mut cx, 1) {
        Err(CallError::Rejected(rejected)) => rejected.reason(),
        _ => unreachable!("{what}: rejected"),
    };
    for _ in 0..WARM_UP {
        assert_eq!(reject(svc), reason, "{what}");
    }
    let start = Count::now();
    for _ in 0..CALLS {
        std::hint::black_box(reject(svc));
    }
    let allocations = start.allocations_since();
    assert_eq!(
        allocations, 0,
        "{what}: {allocations} allocations in {CALLS} calls"
    );
}

/// The request that fails.
const TRIP: u64 = u64::MAX;

/// A breaker of `settings` that one failure (request [`TRIP`]) opens, with a fallback.
fn tripping(
    settings: Builder,
) -> impl Service<u64, Response = tower_circuit_breaker::Answer<u64>, Error: std::fmt::Debug> + Clone
{
    settings
        .failure_threshold(1)
        .build()
        .expect("valid")
        .with_classifier(|result: &Result<u64, Infallible>| match result {
            Ok(TRIP) => Outcome::failure(),
            _ => Outcome::Success,
        })
        .with_fallback(fallback())
        .layer(echo())
}

#[test]
fn a_keyed_breaker_allocates_nothing_per_call_on_a_known_key() {
    let mut cx = Context::from_waker(Waker::noop());
    // Keys by remainder: 16 keys, every one known after the warm-up.
    let layer = KeyedCircuitBreakerLayer::builder(Builder::new().name("k"), |x: &u64| x % 16)
        .build()
        .expect("valid");
    let registry = layer.handle();
    let mut keyed = layer.with_fallback(fallback()).layer(echo());
    assert_no_allocation("keyed, closed", &mut keyed, |s| *s == Source::Service);
    assert_eq!(registry.len(), 16);

    for key in 0..16 {
        registry.get(&key).expect("known").force_open();
    }
    assert_no_allocation(
        "keyed, forced open, fallback",
        &mut keyed,
        Source::is_fallback,
    );

    // One key open among closed ones: each call finds its own key's breaker.
    registry.get(&3).expect("known").force_open();
    for key in (0..16).filter(|&k| k != 3) {
        registry.get(&key).expect("known").reset();
    }
    let start = Count::now();
    for i in 0..CALLS {
        let answer = call_once(&mut keyed, &mut cx, i);
        assert_eq!(answer.is_fallback(), i % 16 == 3);
    }
    assert_eq!(start.allocations_since(), 0, "keyed, mixed keys");

    registry.kill_switch().kill();
    assert_no_allocation("keyed, killed, fallback", &mut keyed, Source::is_fallback);
    registry.kill_switch().revive();

    // Without a fallback, a skipped call fails with `Rejected`, boxed: that box is the
    // one allocation of a rejected call, through a single breaker as through a keyed one.
    let layer = KeyedCircuitBreakerLayer::builder(Builder::new(), |x: &u64| x % 16)
        .build()
        .expect("valid");
    let mut rejecting = layer.layer(echo());
    for i in 0..WARM_UP {
        call_once(&mut rejecting, &mut cx, i);
    }
    layer.handle().get(&1).expect("known").force_open();
    let mut reject = || {
        let start = Count::now();
        let Poll::Ready(Ok(())) = rejecting.poll_ready(&mut cx) else {
            unreachable!()
        };
        let Poll::Ready(Err(error)) = pin!(rejecting.call(1)).poll(&mut cx) else {
            unreachable!()
        };
        assert!(error.is::<tower_circuit_breaker::error::Rejected>());
        start.allocations_since()
    };
    // A key's name longer than 15 bytes (`circuit-breaker[1]`) is copied for its
    // rejections at its first: most keys never reject a call.
    assert_eq!(reject(), 3, "the copy of the name, and the boxed error");
    assert_eq!(reject(), 1, "the boxed error");
}

#[test]
fn keyed_registry_memory_stays_flat_through_100_000_keys() {
    const CAPACITY: usize = 10_000;
    const KEYS: u64 = 100_000;
    let mut cx = Context::from_waker(Waker::noop());

    let start = Count::now();
    let layer = KeyedCircuitBreakerLayer::builder(Builder::new().name("host"), |x: &u64| *x)
        .capacity(CAPACITY)
        .build()
        .expect("valid");
    let registry = layer.handle();
    let mut keyed = layer.layer(echo());
    let empty = start.live_since();

    // What one new key costs besides its slot in a table: the fewest bytes a new key
    // left allocated, over keys whose table had room (a table that grows is more).
    for key in 0..64 {
        call_once(&mut keyed, &mut cx, key);
    }
    let mut per_breaker = i64::MAX;
    let mut sizes = [0; 8];
    for key in 64..128 {
        SIZES.with(|sizes| sizes.set([0; 8]));
        let before = Count::now();
        call_once(&mut keyed, &mut cx, key);
        if before.live_since() < per_breaker {
            per_breaker = before.live_since();
            sizes = SIZES.with(Cell::get);
            sizes.reverse();
        }
    }
    let per_breaker = per_breaker as u64;

    // Full: every key a breaker of its own, nothing evicted yet.
    for key in 128..CAPACITY as u64 {
        call_once(&mut keyed, &mut cx, key);
    }
    assert_eq!((registry.len(), registry.evictions()), (CAPACITY, 0));
    let full = start.live_since() as u64;
    let per_key = full / CAPACITY as u64;

    // The rest of the 100,000 keys, each new, each needing an eviction.
    reset_peak();
    let base = ALLOCATED.with(Cell::get) - FREED.with(Cell::get) - full;
    let mut halfway = 0;
    for key in CAPACITY as u64..KEYS {
        call_once(&mut keyed, &mut cx, key);
        assert!(registry.len() <= CAPACITY, "{} breakers", registry.len());
        if key == KEYS / 2 {
            halfway = start.live_since() as u64;
        }
    }
    let after = start.live_since() as u64;
    let peak = peak() - base;
    assert_eq!(registry.evictions(), KEYS - CAPACITY as u64);
    assert_eq!(registry.over_capacity(), 0);

    // The budget, per breaker: its own allocations (measured above), and its slot in a
    // shard's table. A slot is the key's hash, the key, the breaker's `Arc` and its
    // last-used mark, plus a control byte: 25 bytes and the key. A table that evicts and
    // inserts can grow while it is barely half full (its deleted slots are only
    // reclaimed then), so it may hold as few as 7/32 of its slots in use: 32/7 slots per
    // key. Plus a margin of 10 % for the eviction batch, the shards, and the rest.
    let slot = 25 + std::mem::size_of::<u64>() as u64;
    let per_breaker_budget = per_breaker + slot * 32 / 7;
    let budget = CAPACITY as u64 * per_breaker_budget * 11 / 10;
    // Everything goes with the registry. (Checked before anything is printed: a
    // captured test's output is kept in a buffer this thread allocates.)
    drop(keyed);
    drop(registry);
    drop(layer);
    let left = start.live_since();

    eprintln!(
        "empty registry: {empty} B; per breaker: {per_breaker} B in allocations of {:?} B \
         (budget {per_breaker_budget} B with its slot); full ({CAPACITY} keys): {full} B = \
         {per_key} B per key; halfway ({} keys): {halfway} B; after {KEYS} keys: {after} B \
         = {} B per key, peak {peak} B; budget {budget} B",
        sizes.iter().filter(|&&s| s > 0).collect::<Vec<_>>(),
        KEYS / 2,
        after / CAPACITY as u64,
    );
    assert!(left <= 0, "{left} B left after the registry is dropped");
    assert!(
        full <= budget,
        "full: {full} B over the budget of {budget} B"
    );
    assert!(
        peak <= budget,
        "peak: {peak} B over the budget of {budget} B"
    );
    // Flat: once the tables have settled, the keys that pass through leave nothing
    // behind.
    assert!(
        after <= halfway + halfway / 100,
        "after {KEYS} keys: {after} B, halfway at {halfway} B"
    );
    // The module docs' figure: about 1.1 KiB per key, after churn too (under 1.25 KiB).
    assert!(
        after / (CAPACITY as u64) < 1280,
        "{after} B for {CAPACITY} keys"
    );
}
