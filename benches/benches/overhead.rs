//! What a circuit breaker adds to a call, measured as users make the call: inside an async
//! fn on a tokio runtime, `svc.ready().await?.call(request).await`, the result kept with
//! `std::hint::black_box`. Side by side in one run: this crate, failsafe 1.3, tower-resilience
//! 0.13, and a floor, the least a breaker can do (a hand-written lock-free breaker below: an
//! atomic failure count and opening deadline, a tower `Service`).
//!
//! ```text
//! cargo bench -p tower-circuit-breaker-benches --bench overhead
//! ```
//!
//! It prints one markdown table per runtime flavour (current-thread, and multi-thread with 2
//! workers), ready to paste into docs/performance.md. Each figure is the median of 9 runs (each run
//! measures every entrant once, in turn, so a slow moment of the machine spreads over all of
//! them), in nanoseconds per call; memory in heap bytes per key. `TCB_BENCH_RUNS=N` sets the
//! number of runs; `TCB_BENCH_QUICK=1`, or a run without `--bench` (as `cargo test --benches`
//! makes it), measures each entrant once, briefly: a check that every case still runs, not a
//! figure to quote. `TCB_BENCH_ONLY=TEXT` measures only the entrants whose name (flavour,
//! case, column, as printed when one does not finish) contains `TEXT`, or one of several
//! texts separated by `|`. A sample that does not
//! finish within a minute is reported, and its cell says so.
//!
//! Every call goes to a no-op service (it answers its request at once), in a task spawned on
//! the runtime. Failsafe is not a tower service: it is wrapped in one here, as a tower user
//! would, its breaker's `call` around the inner service's future. The cases:
//!
//! - closed;
//! - open after a failure, with the default cooldown in time (30 s), the rejection as each
//!   breaker's default error: this crate's boxed into tower's `BoxError` (an allocation), and
//!   the floor's too; failsafe's and tower-resilience's are typed (tower-resilience's breaker
//!   is forced open);
//! - open, with typed errors (this crate's `with_typed_errors`) and with a fallback: failsafe
//!   has one open path, its figure is repeated;
//! - killed by its kill switch, with a fallback and with a typed error, next to failsafe open;
//! - closed, in a larger caller: four differently made breakers called one after another in
//!   one async fn, the figure per call; it should stay near the plain closed call;
//! - contended: 64 tasks sharing one breaker (on 2 workers, or on the current-thread
//!   runtime's one thread), closed and open: wall time per call;
//! - keyed: 10,000 keys, each call on the next (this crate's keyed registry; the floor and
//!   failsafe one breaker per key in a `RwLock<HashMap>`), and the heap bytes per key, from a
//!   counting global allocator in this binary.
//!
//! The last column is the old figure for this crate: `poll_ready`, `call` and one poll of the
//! response future driven by hand with a no-op waker, in the same task: the breaker's own
//! work, without moving its future through an async caller.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tower::{BoxError, Layer, Service, ServiceExt};
use tower_circuit_breaker::keyed::KeyedCircuitBreakerLayer;
use tower_circuit_breaker::{Builder, CircuitBreaker, CircuitBreakerLayer, Outcome, State};

use common::{call_once, noop, Noop};

/// Tasks sharing one breaker in the contended cases.
const TASKS: u64 = 64;
/// Keys in the keyed cases.
const KEYS: u64 = 10_000;

// ---------------------------------------------------------------------------------------
// Heap bytes, counted only while a measurement of memory asks for it.

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicI64 = AtomicI64::new(0);

fn counted(bytes: usize, sign: i64) {
    if COUNTING.load(Ordering::Relaxed) {
        LIVE.fetch_add(sign * bytes as i64, Ordering::Relaxed);
    }
}

// SAFETY: every method passes its arguments unchanged to `System`, which upholds the
// `GlobalAlloc` contract; the counting around it touches two atomics and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        counted(layout.size(), 1);
        // SAFETY: the caller's guarantees for `alloc` are `System.alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        counted(layout.size(), 1);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        counted(layout.size(), -1);
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes
        // through this allocator to `System`).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        counted(layout.size(), -1);
        counted(new_size, 1);
        // SAFETY: as for `dealloc`, and `new_size` is the caller's, checked by its contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

// ---------------------------------------------------------------------------------------
// The floor: the least a breaker can do.

/// A hand-written lock-free consecutive-failure breaker: an atomic failure count, an atomic
/// deadline for an opening (the clock read on each call while open, as a cooldown in time
/// needs), a kill flag, and an `Arc` clone per admitted call. No half-open limit, counts,
/// fallback, events or provenance.
mod floor {
    use super::*;
    use std::sync::atomic::{AtomicU32, AtomicU64};

    const THRESHOLD: u32 = 3;
    const COOLDOWN: Duration = Duration::from_secs(30);

    pub(crate) struct State {
        failures: AtomicU32,
        /// When the opening ends, in nanoseconds since `origin`; 0 when closed.
        open_until: AtomicU64,
        killed: AtomicBool,
        origin: Instant,
    }

    impl State {
        pub(crate) fn new() -> Arc<State> {
            Arc::new(State {
                failures: AtomicU32::new(0),
                open_until: AtomicU64::new(0),
                killed: AtomicBool::new(false),
                origin: Instant::now(),
            })
        }

        fn now(&self) -> u64 {
            self.origin.elapsed().as_nanos() as u64 + 1
        }

        /// Opens for the cooldown, as `THRESHOLD` failures in a row would.
        pub(crate) fn trip(&self) {
            self.open_until
                .store(self.now() + COOLDOWN.as_nanos() as u64, Ordering::Relaxed);
        }

        pub(crate) fn kill(&self) {
            self.killed.store(true, Ordering::Relaxed);
        }

        fn admits(&self) -> Result<(), Open> {
            if self.killed.load(Ordering::Relaxed) {
                return Err(Open { until: u64::MAX });
            }
            let until = self.open_until.load(Ordering::Relaxed);
            if until != 0 && self.now() < until {
                return Err(Open { until });
            }
            Ok(())
        }

        fn record(&self, success: bool) {
            if success {
                if self.failures.load(Ordering::Relaxed) != 0 {
                    self.failures.store(0, Ordering::Relaxed);
                }
                if self.open_until.load(Ordering::Relaxed) != 0 {
                    self.open_until.store(0, Ordering::Relaxed);
                }
            } else if self.failures.fetch_add(1, Ordering::Relaxed) + 1 >= THRESHOLD {
                self.trip();
            }
        }
    }

    /// The floor's rejection: when the opening ends (`u64::MAX`: killed).
    #[derive(Debug)]
    pub(crate) struct Open {
        #[allow(dead_code)] // shown by `Debug` only
        until: u64,
    }

    impl std::fmt::Display for Open {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("the breaker is open")
        }
    }

    impl std::error::Error for Open {}

    pub(crate) enum Answer<F> {
        Called { future: F, state: Arc<State> },
        Open(Option<Open>),
    }

    impl<F: Future<Output = Result<u64, Infallible>> + Unpin> Future for Answer<F> {
        type Output = Result<u64, Open>;

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            match self.get_mut() {
                Answer::Called { future, state } => {
                    let Poll::Ready(result) = Pin::new(future).poll(cx) else {
                        return Poll::Pending;
                    };
                    state.record(result.is_ok());
                    Poll::Ready(result.map_err(|never| match never {}))
                }
                Answer::Open(open) => Poll::Ready(Err(open.take().expect("polled once"))),
            }
        }
    }

    /// One call through the breaker of `state`.
    fn answer<F>(state: &Arc<State>, call: impl FnOnce() -> F) -> Answer<F> {
        match state.admits() {
            Ok(()) => Answer::Called {
                future: call(),
                state: state.clone(),
            },
            Err(open) => Answer::Open(Some(open)),
        }
    }

    #[derive(Clone)]
    pub(crate) struct Breaker<S> {
        pub(crate) inner: S,
        pub(crate) state: Arc<State>,
    }

    impl<S> Service<u64> for Breaker<S>
    where
        S: Service<u64, Response = u64, Error = Infallible>,
        S::Future: Unpin,
    {
        type Response = u64;
        type Error = Open;
        type Future = Answer<S::Future>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Open>> {
            self.inner.poll_ready(cx).map_err(|never| match never {})
        }

        fn call(&mut self, request: u64) -> Self::Future {
            answer(&self.state, || self.inner.call(request))
        }
    }

    /// One floor breaker per key, in a `RwLock<HashMap>`: the map a user would write.
    #[derive(Clone)]
    pub(crate) struct Keyed<S> {
        pub(crate) inner: S,
        pub(crate) breakers: Arc<RwLock<HashMap<u64, Arc<State>>>>,
    }

    impl<S> Service<u64> for Keyed<S>
    where
        S: Service<u64, Response = u64, Error = Infallible>,
        S::Future: Unpin,
    {
        type Response = u64;
        type Error = Open;
        type Future = Answer<S::Future>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Open>> {
            self.inner.poll_ready(cx).map_err(|never| match never {})
        }

        fn call(&mut self, key: u64) -> Self::Future {
            let inner = &mut self.inner;
            if let Some(state) = self.breakers.read().expect("not poisoned").get(&key) {
                return answer(state, || inner.call(key));
            }
            let mut breakers = self.breakers.write().expect("not poisoned");
            answer(breakers.entry(key).or_insert_with(State::new), || {
                inner.call(key)
            })
        }
    }
}

fn floor() -> floor::Breaker<Noop> {
    floor::Breaker {
        inner: noop(),
        state: floor::State::new(),
    }
}

/// The floor with its rejection boxed into tower's `BoxError`, as this crate's default.
fn floor_boxed(
    floor: floor::Breaker<Noop>,
) -> tower::util::MapErr<floor::Breaker<Noop>, fn(floor::Open) -> BoxError> {
    fn boxed(open: floor::Open) -> BoxError {
        Box::new(open)
    }
    floor.map_err(boxed)
}

fn floor_keyed() -> floor::Keyed<Noop> {
    floor::Keyed {
        inner: noop(),
        breakers: Arc::default(),
    }
}

// ---------------------------------------------------------------------------------------
// failsafe 1.3 in a tower service, and one per key in a `RwLock<HashMap>`.

type Failsafe = failsafe::StateMachine<
    failsafe::failure_policy::ConsecutiveFailures<failsafe::backoff::Constant>,
    (),
>;
type FailsafeFuture<F> = failsafe::futures::ResponseFuture<
    F,
    <Failsafe as failsafe::futures::CircuitBreaker>::FailurePolicy,
    (),
    failsafe::Any,
>;

fn failsafe_breaker() -> Failsafe {
    let policy = failsafe::failure_policy::consecutive_failures(
        3,
        failsafe::backoff::constant(Duration::from_secs(30)),
    );
    failsafe::Config::new().failure_policy(policy).build()
}

/// A failsafe breaker around a tower service, as a tower user would write it.
#[derive(Clone)]
struct FailsafeService<S> {
    inner: S,
    breaker: Failsafe,
}

impl<S: Service<u64>> Service<u64> for FailsafeService<S> {
    type Response = S::Response;
    type Error = failsafe::Error<S::Error>;
    type Future = FailsafeFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(failsafe::Error::Inner)
    }

    fn call(&mut self, request: u64) -> Self::Future {
        use failsafe::futures::CircuitBreaker as _;
        self.breaker.call(self.inner.call(request))
    }
}

fn failsafe_service() -> FailsafeService<Noop> {
    FailsafeService {
        inner: noop(),
        breaker: failsafe_breaker(),
    }
}

/// Opened as three failures in a row open it.
fn failsafe_tripped() -> FailsafeService<Noop> {
    use failsafe::futures::CircuitBreaker as _;
    let svc = failsafe_service();
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..3 {
        let mut failing = std::pin::pin!(svc.breaker.call(std::future::ready(Err::<u64, ()>(()))));
        assert!(failing.as_mut().poll(&mut cx).is_ready());
    }
    assert!(!svc.breaker.is_call_permitted(), "failsafe opened");
    svc
}

/// One failsafe breaker per key in a `RwLock<HashMap>`.
#[derive(Clone)]
struct FailsafeKeyed<S> {
    inner: S,
    breakers: Arc<RwLock<HashMap<u64, Failsafe>>>,
}

impl<S: Service<u64>> Service<u64> for FailsafeKeyed<S> {
    type Response = S::Response;
    type Error = failsafe::Error<S::Error>;
    type Future = FailsafeFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(failsafe::Error::Inner)
    }

    fn call(&mut self, key: u64) -> Self::Future {
        use failsafe::futures::CircuitBreaker as _;
        let inner = &mut self.inner;
        if let Some(breaker) = self.breakers.read().expect("not poisoned").get(&key) {
            return breaker.call(inner.call(key));
        }
        let mut breakers = self.breakers.write().expect("not poisoned");
        breakers
            .entry(key)
            .or_insert_with(failsafe_breaker)
            .call(inner.call(key))
    }
}

fn failsafe_keyed() -> FailsafeKeyed<Noop> {
    FailsafeKeyed {
        inner: noop(),
        breakers: Arc::default(),
    }
}

// ---------------------------------------------------------------------------------------
// tower-resilience 0.13.

fn resilience() -> tower_resilience::circuitbreaker::CircuitBreakerLayer {
    tower_resilience::circuitbreaker::CircuitBreakerLayer::builder()
        .consecutive_failures(3)
        .build()
        .expect("valid settings")
}

// ---------------------------------------------------------------------------------------
// This crate.

fn ours() -> CircuitBreakerLayer {
    CircuitBreakerLayer::builder()
        .build()
        .expect("valid settings")
}

type Classifier = fn(&Result<u64, Infallible>) -> Outcome;

/// A layer that one failure opens for the default cooldown (30 s): request 0 fails.
fn tripping() -> CircuitBreakerLayer<tower_circuit_breaker::fallback::NoFallback, Classifier> {
    fn zero_fails(result: &Result<u64, Infallible>) -> Outcome {
        match result {
            Ok(0) => Outcome::failure(),
            _ => Outcome::Success,
        }
    }
    let classify: Classifier = zero_fails;
    Builder::new()
        .failure_threshold(1)
        .build()
        .expect("valid settings")
        .with_classifier(classify)
}

/// A breaker of `layer` after the failure that opens it.
fn tripped<F, S>(
    layer: CircuitBreakerLayer<F, Classifier>,
    inner: S,
) -> CircuitBreaker<S, F, Classifier>
where
    CircuitBreakerLayer<F, Classifier>: Layer<S, Service = CircuitBreaker<S, F, Classifier>>,
    CircuitBreaker<S, F, Classifier>: Service<u64>,
{
    let mut svc = layer.layer(inner);
    call_once(&mut svc, &mut Context::from_waker(Waker::noop()), 0);
    assert_eq!(svc.handle().state(), State::Open, "one failure opens it");
    svc
}

// ---------------------------------------------------------------------------------------
// The call as users make it, and the measurement.

/// A service a sample can move into a spawned task: every entrant here.
trait Callee: Service<u64, Future: Send, Response: Send, Error: Send> + Clone + Send + 'static {}

impl<S> Callee for S where
    S: Service<u64, Future: Send, Response: Send, Error: Send> + Clone + Send + 'static
{
}

/// One call, as a tower user writes it.
async fn call<S: Service<u64>>(svc: &mut S, request: u64) -> Result<S::Response, S::Error> {
    svc.ready().await?.call(request).await
}

/// `iters` awaited calls; the requests go round `ROUND` keys (1, 2, ... `ROUND`, 1, ...).
async fn awaited<S: Service<u64>, const ROUND: u64>(svc: &mut S, iters: u64) -> Duration {
    let mut request = 0;
    let start = Instant::now();
    for _ in 0..iters {
        request = if request == ROUND { 1 } else { request + 1 };
        let _ = black_box(call(svc, black_box(request)).await);
    }
    start.elapsed()
}

/// Four differently made breakers, closed, called one after another in one async fn: the
/// time per call.
async fn in_larger_caller<A, B, C, D>(mut svcs: (A, B, C, D), iters: u64) -> Duration
where
    A: Service<u64>,
    B: Service<u64>,
    C: Service<u64>,
    D: Service<u64>,
{
    let start = Instant::now();
    for _ in 0..iters {
        let _ = black_box(call(&mut svcs.0, black_box(1)).await);
        let _ = black_box(call(&mut svcs.1, black_box(1)).await);
        let _ = black_box(call(&mut svcs.2, black_box(1)).await);
        let _ = black_box(call(&mut svcs.3, black_box(1)).await);
    }
    start.elapsed() / 4
}

/// The old figure: `iters` calls driven by hand with a no-op waker.
fn hand_polled<S: Service<u64>>(svc: &mut S, iters: u64) -> Duration {
    let mut cx = Context::from_waker(Waker::noop());
    let start = Instant::now();
    for _ in 0..iters {
        black_box(call_once(svc, &mut cx, black_box(1)));
    }
    start.elapsed()
}

/// One sample of an entrant: `iters` calls on the runtime, nanoseconds per call; `None`
/// when it did not finish within `BOUND`.
type Sample = Box<dyn FnMut(&Runtime, u64) -> Option<f64>>;

/// How long one sample may take: past it the bench stops, naming the entrant.
const BOUND: Duration = Duration::from_secs(60);

/// `measure` (which returns the time its calls took) in a task spawned on `runtime`,
/// nanoseconds per call.
fn per_call(
    runtime: &Runtime,
    calls: u64,
    measure: impl Future<Output = Duration> + Send + 'static,
) -> Option<f64> {
    let took = runtime.block_on(async {
        let task = tokio::spawn(measure);
        tokio::time::timeout(BOUND, task).await.ok()
    })?;
    Some(took.expect("the task").as_nanos() as f64 / calls as f64)
}

/// Awaited calls in one task; each sample on a clone of `svc` (the same breaker).
fn awaited_sample<S: Callee, const ROUND: u64>(svc: S) -> Sample {
    Box::new(move |runtime, iters| {
        let mut svc = svc.clone();
        per_call(runtime, iters, async move {
            awaited::<S, ROUND>(&mut svc, iters).await
        })
    })
}

fn larger_caller_sample<A: Callee, B: Callee, C: Callee, D: Callee>(svcs: (A, B, C, D)) -> Sample {
    Box::new(move |runtime, iters| per_call(runtime, iters, in_larger_caller(svcs.clone(), iters)))
}

fn hand_polled_sample<S: Callee>(svc: S) -> Sample {
    Box::new(move |runtime, iters| {
        let mut svc = svc.clone();
        per_call(runtime, iters, async move { hand_polled(&mut svc, iters) })
    })
}

/// 64 tasks share the breaker, each making its share of the calls: wall time per call.
fn contended_sample<S: Callee>(svc: S) -> Sample {
    Box::new(move |runtime, iters| {
        let per_task = iters.div_ceil(TASKS);
        let svc = svc.clone();
        per_call(runtime, per_task * TASKS, async move {
            let start = Instant::now();
            let tasks: Vec<_> = (0..TASKS)
                .map(|_| {
                    let mut svc = svc.clone();
                    tokio::spawn(async move { awaited::<S, 1>(&mut svc, per_task).await })
                })
                .collect();
            for task in tasks {
                task.await.expect("the task");
            }
            start.elapsed()
        })
    })
}

/// Heap bytes per key once `KEYS` keys have each been called once.
fn heap_per_key<S: Callee>(runtime: &Runtime, make: impl FnOnce() -> S) -> f64 {
    // A first task, so that the runtime's own first allocations are not counted.
    runtime.block_on(runtime.spawn(async {})).expect("the task");
    COUNTING.store(true, Ordering::SeqCst);
    let before = LIVE.load(Ordering::SeqCst);
    let mut svc = make();
    let svc = runtime
        .block_on(runtime.spawn(async move {
            for key in 1..=KEYS {
                assert!(
                    call(&mut svc, key).await.is_ok(),
                    "a closed breaker answers"
                );
            }
            svc
        }))
        .expect("the task");
    let after = LIVE.load(Ordering::SeqCst);
    COUNTING.store(false, Ordering::SeqCst);
    drop(svc);
    (after - before) as f64 / KEYS as f64
}

// ---------------------------------------------------------------------------------------
// The table.

#[derive(Clone, Copy, PartialEq, Eq)]
enum Column {
    Floor,
    Failsafe,
    Resilience,
    Ours,
    HandPolled,
}

impl Column {
    fn name(self) -> &'static str {
        match self {
            Column::Floor => "floor",
            Column::Failsafe => "failsafe",
            Column::Resilience => "tower-resilience",
            Column::Ours => "this crate",
            Column::HandPolled => "this crate, hand-polled",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Case {
    Closed,
    OpenBoxed,
    OpenTyped,
    OpenFallback,
    Killed,
    LargerCaller,
    Contended,
    OpenContended,
    Keyed,
    KeyedMemory,
}

impl Case {
    const ALL: [Case; 10] = [
        Case::Closed,
        Case::OpenBoxed,
        Case::OpenTyped,
        Case::OpenFallback,
        Case::Killed,
        Case::LargerCaller,
        Case::Contended,
        Case::OpenContended,
        Case::Keyed,
        Case::KeyedMemory,
    ];

    fn label(self, flavour: Flavour) -> String {
        let tasks = match flavour {
            Flavour::CurrentThread => "64 tasks, 1 thread",
            Flavour::MultiThread => "64 tasks, 2 workers",
        };
        match self {
            Case::Closed => "closed".into(),
            Case::OpenBoxed => "open, default boxed error, cooldown in time".into(),
            Case::OpenTyped => "open, typed errors".into(),
            Case::OpenFallback => "open, with a fallback".into(),
            Case::Killed => "killed (fallback / typed error); failsafe: open".into(),
            Case::LargerCaller => {
                "closed, in a larger caller (4 breakers' calls in one async fn)".into()
            }
            Case::Contended => format!("contended ({tasks})"),
            Case::OpenContended => format!("open contended ({tasks}, default error)"),
            Case::Keyed => {
                "keyed, 10,000 keys round robin (floor, failsafe: `RwLock<HashMap>`)".into()
            }
            Case::KeyedMemory => "keyed memory per key (heap bytes)".into(),
        }
    }

    /// The case whose failsafe figure stands for this one: failsafe has one open path.
    fn failsafe_case(self) -> Case {
        match self {
            Case::OpenTyped | Case::OpenFallback | Case::Killed => Case::OpenBoxed,
            Case::LargerCaller => Case::Closed,
            other => other,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavour {
    CurrentThread,
    MultiThread,
}

impl Flavour {
    fn runtime(self) -> Runtime {
        match self {
            Flavour::CurrentThread => tokio::runtime::Builder::new_current_thread(),
            Flavour::MultiThread => {
                let mut builder = tokio::runtime::Builder::new_multi_thread();
                builder.worker_threads(2);
                builder
            }
        }
        .enable_all()
        .build()
        .expect("a runtime")
    }

    fn title(self) -> &'static str {
        match self {
            Flavour::CurrentThread => "current-thread runtime",
            Flavour::MultiThread => "multi-thread runtime, 2 workers",
        }
    }
}

/// One figure of the table: an entrant's samples, or a figure measured once.
struct Entrant {
    flavour: Flavour,
    case: Case,
    column: Column,
    sample: Option<Sample>,
    iters: u64,
    figures: Vec<f64>,
    /// A sample did not finish within `BOUND`.
    hung: bool,
}

impl Entrant {
    fn name(&self, flavour: Flavour) -> String {
        format!(
            "{}: {}, {}",
            flavour.title(),
            self.case.label(flavour),
            self.column.name()
        )
    }

    /// One sample, or `None` when it did not finish within `BOUND` (said on stderr): the
    /// entrant is not sampled again, and its cell says so.
    fn sample(&mut self, runtime: &Runtime, iters: u64) -> Option<f64> {
        let sample = self.sample.as_mut()?;
        let figure = sample(runtime, iters);
        if figure.is_none() {
            eprintln!(
                "{}: {iters} calls did not finish within {BOUND:?}",
                self.name(self.flavour)
            );
            self.sample = None;
            self.hung = true;
        }
        figure
    }
}

struct Settings {
    /// Each entrant measured once, briefly: a check that every case runs.
    quick: bool,
    /// Only the entrants whose name contains this, or one of its `|`-separated parts
    /// (`TCB_BENCH_ONLY`).
    only: Option<String>,
    runs: usize,
    /// How long one sample of one entrant should take.
    sample_time: Duration,
}

impl Settings {
    fn from_env() -> Settings {
        let quick = std::env::var("TCB_BENCH_QUICK").is_ok_and(|v| v == "1")
            || !std::env::args().any(|arg| arg == "--bench");
        let runs = std::env::var("TCB_BENCH_RUNS")
            .ok()
            .map(|v| v.parse().expect("TCB_BENCH_RUNS: a number of runs"))
            .unwrap_or(if quick { 1 } else { 9 });
        let sample_time = if quick {
            Duration::from_millis(1)
        } else {
            Duration::from_millis(120)
        };
        let only = std::env::var("TCB_BENCH_ONLY").ok();
        Settings {
            quick,
            only,
            runs,
            sample_time,
        }
    }
}

fn entrants(runtime: &Runtime, flavour: Flavour) -> Vec<Entrant> {
    let _entered = runtime.enter();
    let mut list = Vec::new();
    let mut add = |case, column, sample: Sample| {
        list.push(Entrant {
            flavour,
            case,
            column,
            sample: Some(sample),
            iters: 0,
            figures: Vec::new(),
            hung: false,
        })
    };
    use Case::*;
    use Column::*;

    // Closed.
    add(Closed, Floor, awaited_sample::<_, 1>(floor()));
    add(Closed, Failsafe, awaited_sample::<_, 1>(failsafe_service()));
    add(
        Closed,
        Resilience,
        awaited_sample::<_, 1>(resilience().layer(noop())),
    );
    add(Closed, Ours, awaited_sample::<_, 1>(ours().layer(noop())));
    add(Closed, HandPolled, hand_polled_sample(ours().layer(noop())));

    // Open after a failure, cooldown in time, each one's default error.
    let floor_open = floor();
    floor_open.state.trip();
    add(
        OpenBoxed,
        Floor,
        awaited_sample::<_, 1>(floor_boxed(floor_open.clone())),
    );
    add(
        OpenBoxed,
        Failsafe,
        awaited_sample::<_, 1>(failsafe_tripped()),
    );
    let resilience_open = resilience().layer(noop());
    runtime.block_on(resilience_open.force_open());
    add(
        OpenBoxed,
        Resilience,
        awaited_sample::<_, 1>(resilience_open.clone()),
    );
    let open_boxed = tripped(tripping(), noop());
    add(OpenBoxed, Ours, awaited_sample::<_, 1>(open_boxed.clone()));
    add(
        OpenBoxed,
        HandPolled,
        hand_polled_sample(open_boxed.clone()),
    );

    // Open, typed errors.
    add(OpenTyped, Floor, awaited_sample::<_, 1>(floor_open.clone()));
    let open_typed = tripped(tripping().with_typed_errors(), noop());
    add(OpenTyped, Ours, awaited_sample::<_, 1>(open_typed.clone()));
    add(OpenTyped, HandPolled, hand_polled_sample(open_typed));

    // Open, with a fallback.
    let open_fallback = tripped(tripping().with_fallback(noop()), noop());
    add(
        OpenFallback,
        Ours,
        awaited_sample::<_, 1>(open_fallback.clone()),
    );
    add(OpenFallback, HandPolled, hand_polled_sample(open_fallback));

    // Killed: with a fallback, then with a typed error (two figures in one cell).
    let floor_killed = floor();
    floor_killed.state.kill();
    add(Killed, Floor, awaited_sample::<_, 1>(floor_killed));
    let killing = ours();
    killing.handle().kill_switch().kill();
    let killed_fallback = killing.clone().with_fallback(noop()).layer(noop());
    let killed_typed = killing.with_typed_errors().layer(noop());
    add(
        Killed,
        Ours,
        awaited_sample::<_, 1>(killed_fallback.clone()),
    );
    add(Killed, Ours, awaited_sample::<_, 1>(killed_typed.clone()));
    add(Killed, HandPolled, hand_polled_sample(killed_fallback));
    add(Killed, HandPolled, hand_polled_sample(killed_typed));

    // Closed, in a larger caller.
    let classify: Classifier = |result| match result {
        Ok(_) => Outcome::Success,
        Err(never) => match *never {},
    };
    let four = (
        ours().layer(noop()),
        ours().with_fallback(noop()).layer(noop()),
        ours().with_typed_errors().layer(noop()),
        ours().with_classifier(classify).layer(noop()),
    );
    add(LargerCaller, Ours, larger_caller_sample(four));

    // Contended, closed and open.
    add(Contended, Floor, contended_sample(floor()));
    add(Contended, Failsafe, contended_sample(failsafe_service()));
    add(
        Contended,
        Resilience,
        contended_sample(resilience().layer(noop())),
    );
    add(Contended, Ours, contended_sample(ours().layer(noop())));
    add(
        OpenContended,
        Floor,
        contended_sample(floor_boxed(floor_open)),
    );
    add(
        OpenContended,
        Failsafe,
        contended_sample(failsafe_tripped()),
    );
    add(OpenContended, Resilience, contended_sample(resilience_open));
    add(OpenContended, Ours, contended_sample(open_boxed));

    // Keyed: every key called once before the samples, so each call finds its breaker.
    fn warm<S: Callee>(runtime: &Runtime, svc: S) -> S {
        awaited_sample::<_, KEYS>(svc.clone())(runtime, KEYS).expect("every key called");
        svc
    }
    let keyed_ours = || {
        KeyedCircuitBreakerLayer::builder(Builder::new(), |key: &u64| *key)
            .capacity(KEYS as usize)
            .build()
            .expect("valid settings")
            .layer(noop())
    };
    add(
        Keyed,
        Floor,
        awaited_sample::<_, KEYS>(warm(runtime, floor_keyed())),
    );
    add(
        Keyed,
        Failsafe,
        awaited_sample::<_, KEYS>(warm(runtime, failsafe_keyed())),
    );
    add(
        Keyed,
        Ours,
        awaited_sample::<_, KEYS>(warm(runtime, keyed_ours())),
    );

    // Memory: measured once.
    let mut once = |column, bytes| {
        list.push(Entrant {
            flavour,
            case: KeyedMemory,
            column,
            sample: None,
            iters: 0,
            figures: vec![bytes],
            hung: false,
        })
    };
    once(Floor, heap_per_key(runtime, floor_keyed));
    once(Failsafe, heap_per_key(runtime, failsafe_keyed));
    once(Ours, heap_per_key(runtime, keyed_ours));
    list
}

/// How many calls make a sample of about `settings.sample_time`.
fn calibrate(runtime: &Runtime, entrant: &mut Entrant, settings: &Settings) -> Option<u64> {
    let mut iters = 1_000;
    loop {
        let ns = entrant.sample(runtime, iters)?;
        let took = Duration::from_nanos((ns * iters as f64) as u64);
        if took >= settings.sample_time / 4 || iters >= 1 << 32 {
            let wanted = settings.sample_time.as_nanos() as f64 / ns.max(0.1);
            return Some((wanted as u64).max(TASKS));
        }
        iters *= 10;
    }
}

fn median(figures: &[f64]) -> f64 {
    let mut sorted = figures.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if !n.is_multiple_of(2) {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

fn figure(case: Case, value: f64) -> String {
    if value.is_nan() {
        format!("did not finish in {} s", BOUND.as_secs())
    } else if case == Case::KeyedMemory || value >= 1_000.0 {
        thousands(value.round() as u64)
    } else {
        format!("{value:.1}")
    }
}

/// `12870` as `12,870`.
fn thousands(whole: u64) -> String {
    let digits = whole.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn table(flavour: Flavour, list: &[Entrant]) -> String {
    let medians = |case: Case, column: Column| -> Vec<f64> {
        list.iter()
            .filter(|e| e.case == case && e.column == column)
            .map(|e| if e.hung { f64::NAN } else { median(&e.figures) })
            .collect()
    };
    let cell = |case: Case, values: &[f64]| -> String {
        values
            .iter()
            .map(|&v| figure(case, v))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let ratio = |ours: &[f64], other: &[f64]| -> String {
        match other {
            [other] if !other.is_nan() => ours
                .iter()
                .map(|o| format!("{:.2}", o / other))
                .collect::<Vec<_>>()
                .join(" / "),
            _ => String::new(),
        }
    };
    let mut out = String::new();
    let _ = writeln!(out, "### {}\n", flavour.title());
    out.push_str(
        "| case | floor | failsafe 1.3 | tower-resilience 0.13 | this crate | this crate / failsafe | this crate / floor | this crate, hand-polled |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|\n");
    for case in Case::ALL {
        let floor = medians(case, Column::Floor);
        let failsafe = medians(case.failsafe_case(), Column::Failsafe);
        let resilience = medians(case, Column::Resilience);
        let ours = medians(case, Column::Ours);
        let hand = medians(case, Column::HandPolled);
        let (ours_cell, hand_cell) = if case == Case::Closed && !ours.is_empty() {
            (format!("**{}**", cell(case, &ours)), cell(case, &hand))
        } else {
            (cell(case, &ours), cell(case, &hand))
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            case.label(flavour),
            cell(case, &floor),
            cell(case, &failsafe),
            cell(case, &resilience),
            ours_cell,
            ratio(&ours, &failsafe),
            ratio(&ours, &floor),
            hand_cell,
        );
    }
    let closed = medians(Case::Closed, Column::Ours);
    let larger = medians(Case::LargerCaller, Column::Ours);
    if let ([closed], [larger]) = (closed.as_slice(), larger.as_slice()) {
        let _ = writeln!(
            out,
            "\nClosed in a larger caller / closed: {:.2}.",
            larger / closed
        );
    }
    out
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "an unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{model}, {cores} cores")
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

fn main() {
    let settings = Settings::from_env();
    let started = Instant::now();
    println!(
        "Awaited calls on a no-op service, ns per call (memory: heap bytes per key), median of \
         {} run(s); {}; load average {} at the start.\n",
        settings.runs,
        machine(),
        load()
    );
    if settings.quick {
        println!("Quick mode: a check that every case runs, not figures to quote.\n");
    }
    for flavour in [Flavour::CurrentThread, Flavour::MultiThread] {
        let runtime = flavour.runtime();
        let mut list = entrants(&runtime, flavour);
        list.retain(|entrant| {
            settings
                .only
                .as_ref()
                .is_none_or(|only| only.split('|').any(|o| entrant.name(flavour).contains(o)))
        });
        for entrant in list.iter_mut().filter(|e| e.sample.is_some()) {
            entrant.iters = calibrate(&runtime, entrant, &settings).unwrap_or(0);
        }
        for _ in 0..settings.runs {
            for entrant in list.iter_mut().filter(|e| e.sample.is_some()) {
                if let Some(figure) = entrant.sample(&runtime, entrant.iters) {
                    entrant.figures.push(figure);
                }
            }
        }
        println!("{}", table(flavour, &list));
    }
    println!(
        "Load average {} at the end; {:.0} s in all.",
        load(),
        started.elapsed().as_secs_f64()
    );
}
