//! Bounded stress tests: 64 tasks on a two-thread runtime share one breaker, then one
//! expediter with five tools, under everything a real stack throws at them, and every
//! invariant that can be checked without a race is checked, during the run and at the
//! end. Each test prints the totals it checked (`cargo test --test stress -- --nocapture`).
//!
//! Soak mode: `TCB_SOAK=<calls>` sets how many calls each scenario makes (the breaker's
//! chaos phase and the expediter's executes), for runs of millions outside CI:
//!
//! ```text
//! TCB_SOAK=2000000 cargo test --release --test stress -- --nocapture
//! ```
//!
//! Without it, the counts are sized for CI: well under 15 s on 2 cores in the debug
//! profile `cargo test` uses.
//!
//! What is checked, and where (each assertion says why it is race-free):
//!
//! - one breaker, four phases: chaos (random outcomes, latencies, hangs cut by the
//!   timeout layer or by the caller, dropped and aborted calls, abandoned reservations,
//!   panics in the service's `poll_ready`, `call` and future, in the classifier and in
//!   the fallback, the kill switch flipped by a task of its own); a quiet window (killed
//!   and drained: the service count must not move); a probe window (the service down
//!   for good: only probes reach it, never more than `half_open_probes` at once); and
//!   recovery (successes close it);
//!   - during the run: probes in flight never above the limit, arrivals = made +
//!     skipped + abandoned at every snapshot, the service never ahead of the calls made,
//!     counts never going back;
//!   - at the end: the counts add up exactly, the service's calls (plus the admitted
//!     calls whose `poll_ready` panicked) equal the calls made, every panic thrown
//!     reached its caller, no probe slot is left taken, and the breaker closes;
//! - one expediter, five tools: the budget equals the failures recorded (ordinary
//!   ones, plus one per systemic event of the cycle) at every report the controller
//!   reads; every failure a breaker recorded is a line of the budget; each tool's
//!   counts add up; each tool's service was called exactly as often as an `execute`
//!   that decided CALL or PROBE reached it.
//!
//! Nothing here depends on timing. Cooldowns count calls, there is no half-open dwell
//! limit, interleavings come from `yield_now` loops, random drop points, aborts and kill
//! flips, and `tokio::time::timeout` only cuts calls that hang on purpose (a few
//! milliseconds), or, with a long limit, turns a breaker that hangs into a failure
//! instead of a stuck CI job. Which interleavings happen varies from run to run; what is
//! asserted holds for all of them.

use std::any::Any;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::task::{yield_now, JoinError, JoinHandle, JoinSet};
use tower::timeout::error::Elapsed;
use tower::timeout::Timeout;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_circuit_breaker::classify::Classify;
use tower_circuit_breaker::error::BoxError;
use tower_circuit_breaker::expediter::{Action, Attempt, Expediter, StatusReport, ToolLayer};
use tower_circuit_breaker::fallback::Fallback;
use tower_circuit_breaker::snapshot::Counts;
use tower_circuit_breaker::{
    Answer, Backoff, Builder, CircuitBreaker, CircuitBreakerHandle, CircuitBreakerLayer, Cooldown,
    NextProbe, Outcome, Reason, Source, State,
};

mod common;
use common::counts::assert_counts_add_up;
use common::reply::Reply;

use common::{yields, Rng};

const TASKS: u64 = 64;
/// Calls in the breaker's chaos phase, and executes in the expediter scenario, in CI.
const DEFAULT_BREAKER_CALLS: u64 = 400_000;
const DEFAULT_EXPEDITER_CALLS: u64 = 100_000;

/// The settings the invariants talk about.
const PROBES: u32 = 2;
const THRESHOLD: u32 = 3;
const COOLDOWN: u64 = 4;
/// The backoff's cap: an open breaker probes within this many arrivals.
const COOLDOWN_CAP: u64 = 16;

/// The timeout layer inside the breaker: a hang it cuts is a failure.
const INNER_TIMEOUT: Duration = Duration::from_millis(5);
/// A caller's own timeout on a call that hangs: the dropped call is cancelled.
const CALLER_CUT_SHORT: Duration = Duration::from_millis(2);
/// Longer than the inner timeout: the inner one usually cuts first.
const CALLER_CUT_LONG: Duration = Duration::from_millis(20);
/// A call that is not meant to hang and takes this long means the breaker hung.
const HANG_GUARD: Duration = Duration::from_secs(10);

fn calls_wanted(default: u64) -> u64 {
    match std::env::var("TCB_SOAK") {
        Ok(value) => value
            .trim()
            .replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("TCB_SOAK=<calls>, got {value:?}")),
        Err(_) => default,
    }
}

// ---------------------------------------------------------------------------------
// Small tools: randomness, yields, panics.
// ---------------------------------------------------------------------------------

/// Waits (yielding) until `done` holds; a hang fails the test instead of the CI job.
async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(HANG_GUARD, async {
        while !done() {
            yield_now().await;
        }
    })
    .await;
    assert!(waited.is_ok(), "gave up waiting until {what}");
}

const READY_PANIC: &str = "stress: planned panic in the inner poll_ready";
const CALL_PANIC: &str = "stress: planned panic in the inner call";
const FUTURE_PANIC: &str = "stress: planned panic in the inner future";
const CLASSIFIER_PANIC: &str = "stress: planned panic in the classifier";
const FALLBACK_PANIC: &str = "stress: planned panic in the fallback";

fn payload_text(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// Thousands of planned panics would bury the output: the hook stays quiet about them
/// and reports every other panic (a failed assertion) as usual.
fn quiet_planned_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !payload_text(info.payload()).starts_with("stress: planned") {
                default(info);
            }
        }));
    });
}

// ---------------------------------------------------------------------------------
// Scenario a: the wrapped service, which counts what it receives.
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    Ok,
    Fail,
    /// The classifier ignores the answer.
    Ignore,
    /// The service's future never answers: a timeout cuts it.
    Hang,
    /// The service panics in `poll_ready` (set on the clone that makes the call).
    PanicInReady,
    PanicInCall,
    PanicInFuture,
    /// The service answers something that makes the classifier panic.
    PanicInClassifier,
    /// Succeeds if called; the fallback panics if the call is skipped.
    PanicInFallback,
}

impl Plan {
    fn may_panic(self) -> bool {
        matches!(
            self,
            Plan::PanicInReady
                | Plan::PanicInCall
                | Plan::PanicInFuture
                | Plan::PanicInClassifier
                | Plan::PanicInFallback
        )
    }
}

#[derive(Debug, Clone, Copy)]
struct Req {
    plan: Plan,
    /// How many times the service's future yields before it answers: its latency.
    yields: u32,
}

#[derive(Debug, Default)]
struct Stats {
    /// `call` invocations: counted first thing, before a planned panic.
    calls: AtomicU64,
    /// Panics thrown by the service, where.
    ready_panics: AtomicU64,
    call_panics: AtomicU64,
    future_panics: AtomicU64,
    /// Thrown by the classifier and the fallback.
    classifier_panics: AtomicU64,
    fallback_panics: AtomicU64,
    /// Futures that started hanging.
    hangs: AtomicU64,
    in_flight: AtomicI64,
    max_in_flight: AtomicI64,
    /// The service is down: what would succeed fails.
    down: AtomicBool,
    /// The probe window: the breaker cannot close, so every call is a probe.
    only_probes: AtomicBool,
    /// The quiet window: the kill switch is on and every call begun before it has ended.
    quiet_killed: AtomicBool,
    /// What the service found wrong at the moment it was called.
    violations: Mutex<Vec<String>>,
}

impl Stats {
    fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Calls the breaker let through to the service: `call` invocations, plus the
    /// admitted calls whose `poll_ready` panicked before `call` could be reached.
    fn let_through(&self) -> u64 {
        self.calls() + self.ready_panics.load(Ordering::SeqCst)
    }

    fn in_flight(&self) -> i64 {
        self.in_flight.load(Ordering::SeqCst)
    }

    fn violation(&self, what: String) {
        self.violations.lock().unwrap().push(what);
    }

    fn assert_no_violations(&self) {
        let violations = self.violations.lock().unwrap();
        assert!(
            violations.is_empty(),
            "{} violations, the first: {:?}",
            violations.len(),
            violations.first()
        );
    }
}

/// Decrements the in-flight count when the service's future ends, is dropped, or
/// unwinds.
struct InFlight(Arc<Stats>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Debug, Clone)]
struct Counting {
    stats: Arc<Stats>,
    /// This clone's next `poll_ready` panics.
    panic_in_ready: bool,
}

impl Service<Req> for Counting {
    type Response = Reply;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Reply, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        if std::mem::take(&mut self.panic_in_ready) {
            self.stats.ready_panics.fetch_add(1, Ordering::SeqCst);
            panic!("{READY_PANIC}");
        }
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let stats = self.stats.clone();
        stats.calls.fetch_add(1, Ordering::SeqCst);
        let now = stats.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        stats.max_in_flight.fetch_max(now, Ordering::SeqCst);
        // Made before a planned panic, so unwinding drops it.
        let guard = InFlight(stats.clone());
        // Race-free checks, at the moment of the call (see where the flags are set).
        if stats.only_probes.load(Ordering::SeqCst) && now > i64::from(PROBES) {
            stats.violation(format!(
                "{now} calls in the service at once while only probes can reach it"
            ));
        }
        if stats.quiet_killed.load(Ordering::SeqCst) {
            stats.violation(format!("called while killed: {req:?}"));
        }
        if req.plan == Plan::PanicInCall {
            stats.call_panics.fetch_add(1, Ordering::SeqCst);
            panic!("{CALL_PANIC}");
        }
        Box::pin(async move {
            yields(u64::from(req.yields)).await;
            let down = stats.down.load(Ordering::SeqCst);
            let reply = match req.plan {
                Plan::Hang => {
                    stats.hangs.fetch_add(1, Ordering::SeqCst);
                    std::future::pending::<()>().await;
                    unreachable!("a hang never ends")
                }
                Plan::PanicInFuture => {
                    stats.future_panics.fetch_add(1, Ordering::SeqCst);
                    panic!("{FUTURE_PANIC}");
                }
                Plan::PanicInCall => unreachable!("it panicked in call"),
                Plan::Fail => Reply::Failed,
                Plan::Ignore => Reply::Ignored,
                Plan::PanicInClassifier => Reply::ClassifierBomb,
                Plan::Ok | Plan::PanicInReady | Plan::PanicInFallback if down => Reply::Failed,
                Plan::Ok | Plan::PanicInReady | Plan::PanicInFallback => Reply::Ok,
            };
            drop(guard);
            Ok(reply)
        })
    }
}

#[derive(Debug, Clone)]
struct Classifier(Arc<Stats>);

impl Classify<Reply, BoxError> for Classifier {
    fn classify(&self, result: &Result<Reply, BoxError>) -> Outcome {
        match result {
            Ok(Reply::Ok) => Outcome::Success,
            Ok(Reply::Ignored) => Outcome::Ignored,
            Ok(Reply::ClassifierBomb) => {
                self.0.classifier_panics.fetch_add(1, Ordering::SeqCst);
                panic!("{CLASSIFIER_PANIC}");
            }
            Ok(Reply::Failed | Reply::Fallback) => Outcome::failure_with("unhealthy"),
            Ok(other) => unreachable!("never scripted here: {other:?}"),
            // The inner timeout cut a hang.
            Err(_) => Outcome::failure(),
        }
    }
}

#[derive(Debug, Clone)]
struct FallbackSvc(Arc<Stats>);

impl Service<Req> for FallbackSvc {
    type Response = Reply;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Reply, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        if req.plan == Plan::PanicInFallback {
            self.0.fallback_panics.fetch_add(1, Ordering::SeqCst);
            panic!("{FALLBACK_PANIC}");
        }
        std::future::ready(Ok(Reply::Fallback))
    }
}

type Svc = CircuitBreaker<Timeout<Counting>, Fallback<FallbackSvc>, Classifier>;
type StressLayer = CircuitBreakerLayer<Fallback<FallbackSvc>, Classifier>;

fn stress_layer(stats: &Arc<Stats>) -> StressLayer {
    Builder::new()
        .name("stress")
        .failure_threshold(THRESHOLD)
        .cooldown(Cooldown::Calls(COOLDOWN))
        .backoff(Backoff::exponential(2.0, Cooldown::Calls(COOLDOWN_CAP)))
        .jitter(0.25)
        .jitter_seed(7)
        .half_open_probes(PROBES)
        // Nothing may depend on time, and written-off probes would let more than
        // `PROBES` calls into the service: hangs are cut by timeouts instead.
        .max_half_open_dwell(None)
        .build()
        .expect("valid settings")
        .with_fallback(FallbackSvc(stats.clone()))
        .with_classifier(Classifier(stats.clone()))
}

/// A service over the shared breaker, with a timeout layer of `inner_timeout` between
/// the breaker and the counting service.
fn service(layer: &StressLayer, stats: &Arc<Stats>, inner_timeout: Duration) -> Svc {
    let counting = Counting {
        stats: stats.clone(),
        panic_in_ready: false,
    };
    layer.layer(Timeout::new(counting, inner_timeout))
}

// ---------------------------------------------------------------------------------
// Scenario a: what the callers saw.
// ---------------------------------------------------------------------------------

/// How one call ended, as its caller saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Answered {
        probe: bool,
        reply: Reply,
    },
    Fallback(Reason),
    /// The inner timeout layer cut a hang: an error.
    TimedOut,
    /// Reserved, then the service was dropped without a call.
    Abandoned,
    /// The caller dropped the call's future (select, one poll, its own timeout, abort).
    Dropped,
}

impl End {
    fn of(result: Result<Answer<Reply>, BoxError>) -> End {
        match result {
            Ok(answer) => match answer.source() {
                Source::Fallback(reason) => End::Fallback(reason),
                Source::Service => End::Answered {
                    probe: false,
                    reply: *answer.get_ref(),
                },
                Source::Probe => End::Answered {
                    probe: true,
                    reply: *answer.get_ref(),
                },
                other => panic!("no observe-only mode here, got {other:?}"),
            },
            Err(error) if error.is::<Elapsed>() => End::TimedOut,
            Err(error) => panic!("the service and the fallback never fail: {error}"),
        }
    }

    fn reached_service(self) -> bool {
        matches!(self, End::Answered { .. } | End::TimedOut)
    }
}

#[derive(Debug, Default, Clone)]
struct Tally {
    calls: u64,
    answered: u64,
    probe_answers: u64,
    normal_answers: u64,
    timed_out: u64,
    fallback_open: u64,
    fallback_half_open_full: u64,
    fallback_killed: u64,
    abandoned: u64,
    dropped: u64,
    caller_cut: u64,
    /// Panics that reached the caller, by where they were thrown.
    ready_panics: u64,
    call_panics: u64,
    future_panics: u64,
    classifier_panics: u64,
    fallback_panics: u64,
}

impl Tally {
    fn end(&mut self, end: End) {
        match end {
            End::Answered { probe, .. } => {
                self.answered += 1;
                if probe {
                    self.probe_answers += 1;
                } else {
                    self.normal_answers += 1;
                }
            }
            End::TimedOut => self.timed_out += 1,
            End::Fallback(Reason::Open) => self.fallback_open += 1,
            End::Fallback(Reason::HalfOpenFull) => self.fallback_half_open_full += 1,
            End::Fallback(Reason::Killed) => self.fallback_killed += 1,
            End::Fallback(other) => panic!("a breaker never skips for {other:?} here"),
            End::Abandoned => self.abandoned += 1,
            End::Dropped => self.dropped += 1,
        }
    }

    fn panic(&mut self, error: JoinError) {
        assert!(error.is_panic(), "a call task was cancelled: {error:?}");
        let message = payload_text(&*error.into_panic());
        let counter = match message.as_str() {
            READY_PANIC => &mut self.ready_panics,
            CALL_PANIC => &mut self.call_panics,
            FUTURE_PANIC => &mut self.future_panics,
            CLASSIFIER_PANIC => &mut self.classifier_panics,
            FALLBACK_PANIC => &mut self.fallback_panics,
            other => panic!("an unplanned panic reached the caller: {other}"),
        };
        *counter += 1;
    }

    fn panics(&self) -> u64 {
        self.ready_panics
            + self.call_panics
            + self.future_panics
            + self.classifier_panics
            + self.fallback_panics
    }

    fn fallbacks(&self) -> u64 {
        self.fallback_open + self.fallback_half_open_full + self.fallback_killed
    }

    fn add(&mut self, other: &Tally) {
        let Tally {
            calls,
            answered,
            probe_answers,
            normal_answers,
            timed_out,
            fallback_open,
            fallback_half_open_full,
            fallback_killed,
            abandoned,
            dropped,
            caller_cut,
            ready_panics,
            call_panics,
            future_panics,
            classifier_panics,
            fallback_panics,
        } = other;
        self.calls += calls;
        self.answered += answered;
        self.probe_answers += probe_answers;
        self.normal_answers += normal_answers;
        self.timed_out += timed_out;
        self.fallback_open += fallback_open;
        self.fallback_half_open_full += fallback_half_open_full;
        self.fallback_killed += fallback_killed;
        self.abandoned += abandoned;
        self.dropped += dropped;
        self.caller_cut += caller_cut;
        self.ready_panics += ready_panics;
        self.call_panics += call_panics;
        self.future_panics += future_panics;
        self.classifier_panics += classifier_panics;
        self.fallback_panics += fallback_panics;
    }
}

/// Reserves a call (or a skip); the breaker never makes a caller wait long for that.
async fn reserve(svc: &mut Svc) -> &mut Svc {
    tokio::time::timeout(HANG_GUARD, svc.ready())
        .await
        .expect("poll_ready hung")
        .expect("the breaker is always ready")
}

/// The caller's timeout on a call's future: short for a planned hang (the call is cut,
/// that is dropped), long for anything else (the breaker must never hang a call). It
/// wraps the call future itself, so cutting it never leaves anything running.
async fn cut<F>(limit: Duration, plan: Plan, future: F) -> (End, bool)
where
    F: Future<Output = Result<Answer<Reply>, BoxError>>,
{
    match tokio::time::timeout(limit, future).await {
        Ok(result) => (End::of(result), false),
        Err(_) => {
            assert_eq!(
                plan,
                Plan::Hang,
                "a call that does not hang took over {HANG_GUARD:?}"
            );
            (End::Dropped, true)
        }
    }
}

/// One call, ended in one of the ways a caller ends calls. Also says whether the
/// caller's own timeout cut it.
async fn attempt(svc: &mut Svc, rng: &mut Rng, req: Req, inner_timeout: bool) -> (End, bool) {
    let limit = match req.plan {
        Plan::Hang if inner_timeout && rng.chance(50) => CALLER_CUT_LONG,
        Plan::Hang => CALLER_CUT_SHORT,
        _ => HANG_GUARD,
    };
    match rng.below(100) {
        // Reserve (maybe a probe slot), then drop the service without calling.
        0..=3 => {
            let mut reserved = svc.clone();
            reserve(&mut reserved).await;
            if rng.chance(50) {
                yield_now().await;
            }
            drop(reserved);
            (End::Abandoned, false)
        }
        // Race the call against a few yields; the loser is dropped.
        4..=11 => {
            let future = reserve(svc).await.call(req);
            tokio::select! {
                out = cut(limit, req.plan, future) => out,
                _ = yields(rng.below(6)) => (End::Dropped, false),
            }
        }
        // One poll, then dropped unless it was already done.
        12..=14 => {
            let future = std::pin::pin!(cut(limit, req.plan, reserve(svc).await.call(req)));
            match futures::future::select(future, std::future::ready(())).await {
                futures::future::Either::Left((out, _)) => out,
                futures::future::Either::Right(((), _dropped)) => (End::Dropped, false),
            }
        }
        // On a task of its own, aborted at a random point.
        15..=18 => {
            let future = reserve(svc).await.call(req);
            let task = tokio::spawn(cut(limit, req.plan, future));
            yields(rng.below(4)).await;
            task.abort();
            match task.await {
                Ok(out) => out,
                Err(error) if error.is_cancelled() => (End::Dropped, false),
                // Pass a planned panic on to this task's caller.
                Err(error) => std::panic::resume_unwind(error.into_panic()),
            }
        }
        // Reserve, maybe let others move the state or flip the kill switch, call.
        _ => {
            let ready = reserve(svc).await;
            if rng.chance(20) {
                yield_now().await;
            }
            cut(limit, req.plan, ready.call(req)).await
        }
    }
}

/// One call: on its own task when it may panic, so the panic is caught as a
/// `JoinError` and checked to be the one planned.
async fn one_call(
    svc: &mut Svc,
    rng: &mut Rng,
    req: Req,
    inner_timeout: bool,
    tally: &mut Tally,
) -> Option<End> {
    tally.calls += 1;
    if !req.plan.may_panic() {
        let (end, cut) = attempt(svc, rng, req, inner_timeout).await;
        tally.caller_cut += u64::from(cut);
        tally.end(end);
        return Some(end);
    }
    let mut task_svc = svc.clone();
    if req.plan == Plan::PanicInReady {
        task_svc.get_mut().get_mut().panic_in_ready = true;
    }
    let mut task_rng = Rng::new(rng.next());
    let task =
        tokio::spawn(
            async move { attempt(&mut task_svc, &mut task_rng, req, inner_timeout).await },
        );
    match task.await {
        Ok((end, cut)) => {
            tally.caller_cut += u64::from(cut);
            tally.end(end);
            Some(end)
        }
        Err(error) => {
            tally.panic(error);
            None
        }
    }
}

fn chaos_plan(rng: &mut Rng, storm: bool) -> Plan {
    match rng.below(1000) {
        0..=4 => Plan::Hang,
        5..=14 => Plan::PanicInReady,
        15..=19 => Plan::PanicInCall,
        20..=24 => Plan::PanicInFuture,
        25..=29 => Plan::PanicInClassifier,
        30..=44 => Plan::PanicInFallback,
        45..=124 => Plan::Ignore,
        _ if rng.chance(if storm { 70 } else { 12 }) => Plan::Fail,
        _ => Plan::Ok,
    }
}

/// The probe window: nothing can succeed.
fn down_plan(rng: &mut Rng) -> Plan {
    match rng.below(100) {
        0..=4 => Plan::Hang,
        5..=7 => Plan::PanicInReady,
        8..=10 => Plan::PanicInCall,
        11..=13 => Plan::PanicInFuture,
        14..=16 => Plan::PanicInClassifier,
        17..=21 => Plan::PanicInFallback,
        22..=36 => Plan::Ignore,
        _ => Plan::Fail,
    }
}

fn request(rng: &mut Rng, plan: Plan) -> Req {
    Req {
        plan,
        yields: rng.below(4) as u32,
    }
}

/// Snapshots the breaker while the tasks run and checks what holds at every instant.
#[derive(Debug, Default)]
struct Watch {
    snapshots: u64,
    max_probes_in_flight: u32,
    states_seen: [u64; 4],
}

fn spawn_monitor(
    handle: CircuitBreakerHandle,
    done: Arc<AtomicBool>,
    never_closed: bool,
) -> JoinHandle<Watch> {
    tokio::spawn(async move {
        let mut rng = Rng::new(99);
        let mut watch = Watch::default();
        let (mut arrived, mut ended, mut skipped) = (0, 0, 0);
        while !done.load(Ordering::SeqCst) {
            // The service's count is not compared here: a call admitted on the closed
            // state's lock-free path is counted when it ends, so while calls run the
            // service may have had more than the breaker counts as made. Once every call
            // has ended, `assert_settled` checks the two are equal.
            let s = handle.snapshot();
            let c = s.counts;
            watch.snapshots += 1;
            watch.max_probes_in_flight = watch.max_probes_in_flight.max(s.probes_in_flight);
            watch.states_seen[match s.state {
                State::Closed => 0,
                State::Open => 1,
                State::HalfOpen => 2,
                State::ForcedOpen => 3,
            }] += 1;
            // The machine's own count, read under its lock: race-free.
            assert!(
                s.probes_in_flight <= PROBES,
                "{} probes in flight with half_open_probes({PROBES}): {s:?}",
                s.probes_in_flight
            );
            // Every arrival counted is made, skipped or abandoned at every instant.
            assert_eq!(c.arrived, c.made + c.skipped() + c.abandoned, "{c:?}");
            if never_closed {
                assert_ne!(s.state, State::Closed, "closed with every outcome failing");
            }
            // Monotonic: arrivals, skips and ended calls never go back.
            let now_ended = c.successes + c.failures + c.ignored + c.cancelled + c.late;
            assert!(c.arrived >= arrived && now_ended >= ended && c.skipped() >= skipped);
            (arrived, ended, skipped) = (c.arrived, now_ended, c.skipped());
            yields(rng.below(8)).await;
        }
        watch
    })
}

/// Flips the kill switch on and off at random (and the weather: storms of failures),
/// leaving it off.
fn spawn_flipper(
    handle: CircuitBreakerHandle,
    storm: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
) -> JoinHandle<u64> {
    tokio::spawn(async move {
        let mut rng = Rng::new(4242);
        let kill = handle.kill_switch().clone();
        let mut kills = 0;
        while !done.load(Ordering::SeqCst) {
            yields(rng.below(400)).await;
            if rng.chance(40) {
                kill.kill();
                kills += 1;
                yields(rng.below(6)).await;
                kill.revive();
            }
            if rng.chance(25) {
                storm.store(!storm.load(Ordering::SeqCst), Ordering::SeqCst);
            }
        }
        kill.revive();
        kills
    })
}

async fn join_tallies(mut set: JoinSet<Tally>) -> Tally {
    let mut total = Tally::default();
    while let Some(result) = set.join_next().await {
        total.add(&result.expect("a worker task failed"));
    }
    total
}

/// The panics thrown equal the panics that reached a caller, place by place.
fn assert_panics_propagated(stats: &Stats, tally: &Tally) {
    let thrown = |counter: &AtomicU64| counter.load(Ordering::SeqCst);
    assert_eq!(thrown(&stats.ready_panics), tally.ready_panics);
    assert_eq!(thrown(&stats.call_panics), tally.call_panics);
    assert_eq!(thrown(&stats.future_panics), tally.future_panics);
    assert_eq!(thrown(&stats.classifier_panics), tally.classifier_panics);
    assert_eq!(thrown(&stats.fallback_panics), tally.fallback_panics);
}

/// Nothing in flight: no probe slot may stay taken, and the next call may probe.
fn assert_settled(handle: &CircuitBreakerHandle, stats: &Stats) -> Counts {
    assert_eq!(stats.in_flight(), 0, "service calls still in flight");
    let s = handle.snapshot();
    assert_eq!(
        s.probes_in_flight, 0,
        "nothing is in flight, yet a probe slot is taken: {s:?}"
    );
    assert_ne!(
        s.next_probe,
        NextProbe::InFlight,
        "stuck waiting on a probe that is not running: {s:?}"
    );
    assert_counts_add_up(&s.counts);
    assert_eq!(
        stats.let_through(),
        s.counts.made,
        "the service's calls (plus poll_ready panics after admission) are the calls made"
    );
    stats.assert_no_violations();
    s.counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_tasks_sharing_one_breaker_keep_every_invariant_through_chaos() {
    quiet_planned_panics();
    let started = Instant::now();
    let calls = calls_wanted(DEFAULT_BREAKER_CALLS);
    let stats = Arc::new(Stats::default());
    let layer = stress_layer(&stats);
    let handle = layer.handle();
    let kill = handle.kill_switch().clone();
    let svc = service(&layer, &stats, INNER_TIMEOUT);

    // ---- Phase 1, chaos: random outcomes, latencies, hangs, drops, aborts, panics,
    // reservations abandoned, kill flips and storms, all at once.
    let done = Arc::new(AtomicBool::new(false));
    let storm = Arc::new(AtomicBool::new(false));
    let monitor = spawn_monitor(handle.clone(), done.clone(), false);
    let flipper = spawn_flipper(handle.clone(), storm.clone(), done.clone());
    let mut set = JoinSet::new();
    for task in 0..TASKS {
        let (mut svc, storm) = (svc.clone(), storm.clone());
        let share = calls / TASKS + u64::from(task < calls % TASKS);
        set.spawn(async move {
            let mut rng = Rng::new(task + 1);
            let mut tally = Tally::default();
            for _ in 0..share {
                let plan = chaos_plan(&mut rng, storm.load(Ordering::Relaxed));
                let req = request(&mut rng, plan);
                let end = one_call(&mut svc, &mut rng, req, true, &mut tally).await;
                // A caller answered by the fallback does something else for a while.
                if matches!(end, Some(End::Fallback(_))) {
                    yields(rng.below(12)).await;
                } else if rng.chance(10) {
                    yield_now().await;
                }
            }
            tally
        });
    }
    let chaos = join_tallies(set).await;
    done.store(true, Ordering::SeqCst);
    let kills = flipper.await.expect("the flipper");
    let chaos_watch = monitor.await.expect("the monitor found a broken invariant");
    assert!(!kill.is_killed());

    let after_chaos = assert_settled(&handle, &stats);
    assert_panics_propagated(&stats, &chaos);
    assert_eq!(chaos.calls, calls);
    // Each kind of ending happened, so every term of the sums was exercised (given
    // enough calls: a tiny TCB_SOAK may miss some).
    let c = after_chaos;
    if calls >= 50_000 {
        assert!(c.successes > 0 && c.failures > 0 && c.ignored > 0, "{c:?}");
        assert!(c.cancelled > 0 && c.abandoned > 0 && c.late > 0, "{c:?}");
        assert!(c.skipped_open > 0 && c.skipped_killed > 0, "{c:?}");
        assert!(c.skipped_half_open_full > 0 && c.probes > 0, "{c:?}");
        assert!(chaos.timed_out > 0 && chaos.caller_cut > 0, "{chaos:?}");
        let thrown = [
            chaos.ready_panics,
            chaos.call_panics,
            chaos.future_panics,
            chaos.classifier_panics,
            chaos.fallback_panics,
        ];
        assert!(thrown.iter().all(|&n| n > 0), "{chaos:?}");
    }
    // What callers saw is bounded by what the breaker counted.
    assert!(chaos.probe_answers <= c.probes, "{chaos:?} {c:?}");
    assert!(chaos.fallbacks() <= c.skipped(), "{chaos:?} {c:?}");

    // ---- Phase 2, the quiet window: no call reaches the service while killed.
    //
    // Race-free because of the order: calls flow; services reserve a call; the switch
    // is flipped; every looper finishes two laps begun after the flip, so whatever was
    // in flight then has ended; only then is `quiet_killed` set. From there on a call
    // reaching the service is a violation, caught by the service as it is called.
    let quiet = {
        let done = Arc::new(AtomicBool::new(false));
        let laps: Arc<Vec<AtomicU64>> = Arc::new((0..TASKS).map(|_| AtomicU64::new(0)).collect());
        let wrong_in_quiet = Arc::new(AtomicU64::new(0));
        let mut loopers = JoinSet::new();
        for task in 0..TASKS {
            let (mut svc, done, laps, stats, wrong) = (
                svc.clone(),
                done.clone(),
                laps.clone(),
                stats.clone(),
                wrong_in_quiet.clone(),
            );
            loopers.spawn(async move {
                let mut rng = Rng::new(10_000 + task);
                let mut tally = Tally::default();
                while !done.load(Ordering::SeqCst) {
                    let quiet = stats.quiet_killed.load(Ordering::SeqCst);
                    let plan = if rng.chance(80) {
                        Plan::Ok
                    } else {
                        chaos_plan(&mut rng, false)
                    };
                    let req = request(&mut rng, plan);
                    let end = one_call(&mut svc, &mut rng, req, true, &mut tally).await;
                    if quiet && end.is_some_and(End::reached_service) {
                        wrong.fetch_add(1, Ordering::SeqCst);
                    }
                    laps[task as usize].fetch_add(1, Ordering::SeqCst);
                }
                tally
            });
        }
        let flowing = stats.calls() + 200;
        wait_until("calls flow again after the chaos", || {
            stats.calls() >= flowing
        })
        .await;
        let mut reserved = Vec::new();
        for _ in 0..TASKS {
            let mut svc = svc.clone();
            svc.ready().await.expect("ready");
            reserved.push(svc);
        }
        kill.kill();
        let at_kill: Vec<u64> = laps.iter().map(|l| l.load(Ordering::SeqCst)).collect();
        wait_until(
            "every looper finished two laps begun after the kill",
            || {
                laps.iter()
                    .zip(&at_kill)
                    .all(|(l, at)| l.load(Ordering::SeqCst) >= at + 2)
            },
        )
        .await;
        assert_eq!(stats.in_flight(), 0, "a call outlived the kill switch");
        stats.quiet_killed.store(true, Ordering::SeqCst);
        let baseline = stats.let_through();
        let skipped_before = handle.snapshot().counts.skipped_killed;

        // Calls reserved before the kill, called after it.
        let mut calls_after = JoinSet::new();
        for mut svc in reserved {
            calls_after.spawn(async move {
                let answer = svc
                    .call(Req {
                        plan: Plan::Ok,
                        yields: 0,
                    })
                    .await
                    .expect("the fallback answers");
                answer.source()
            });
        }
        let mut reserved_sources = Vec::new();
        while let Some(source) = calls_after.join_next().await {
            reserved_sources.push(source.expect("a reserved call"));
        }
        let quiet_start: Vec<u64> = laps.iter().map(|l| l.load(Ordering::SeqCst)).collect();
        const QUIET_LAPS: u64 = 25;
        wait_until("every looper made its calls while killed", || {
            laps.iter()
                .zip(&quiet_start)
                .all(|(l, at)| l.load(Ordering::SeqCst) >= at + QUIET_LAPS)
        })
        .await;
        let quiet_laps: u64 = laps
            .iter()
            .zip(&quiet_start)
            .map(|(l, at)| l.load(Ordering::SeqCst) - at)
            .sum();
        assert_eq!(
            stats.let_through(),
            baseline,
            "the service was called while killed"
        );
        assert_eq!(wrong_in_quiet.load(Ordering::SeqCst), 0);
        // A reservation made before the kill was a call (decided again when called:
        // killed) or a skip (kept as it was decided, with its reason then): either way
        // the fallback answers.
        for source in &reserved_sources {
            assert!(
                source.is_fallback(),
                "a reserved call went through: {source:?}"
            );
        }
        let reserved_killed = reserved_sources
            .iter()
            .filter(|s| **s == Source::Fallback(Reason::Killed))
            .count();
        let skipped_killed = handle.snapshot().counts.skipped_killed - skipped_before;
        assert!(skipped_killed >= reserved_killed as u64, "{skipped_killed}");
        done.store(true, Ordering::SeqCst);
        let tally = join_tallies(loopers).await;
        stats.quiet_killed.store(false, Ordering::SeqCst);
        kill.revive();
        assert_settled(&handle, &stats);
        (tally, quiet_laps + TASKS, skipped_killed)
    };
    let (quiet_tally, quiet_calls, quiet_skipped) = quiet;

    // ---- Phase 3, the probe window: the service is down for good, so the breaker can
    // never close and every call that reaches the service is a probe. Race-free: a
    // probe holds its slot from admission until its service future has ended, been
    // dropped or unwound (the breaker settles after that), there is no dwell limit to
    // write a slot off, and the timeout layer is out of the way (hangs are cut by the
    // caller, which drops the whole call), so the service never holds more than
    // `PROBES` calls. (In the chaos phase no such bound holds for the service: calls
    // admitted while closed are still running when the breaker opens.)
    let probe_calls = (calls / 8).max(TASKS * 40);
    let probe_window = {
        stats.down.store(true, Ordering::SeqCst);
        let mut svc = service(&layer, &stats, Duration::from_secs(3600));
        // Open it, one call at a time so that nothing is left in flight.
        let mut opening = 0;
        while handle.state() != State::Open {
            opening += 1;
            assert!(opening < 100, "never opened: {:?}", handle.snapshot());
            let answer = svc
                .ready()
                .await
                .expect("ready")
                .call(Req {
                    plan: Plan::Fail,
                    yields: 0,
                })
                .await
                .expect("answers");
            assert!(answer.source() != Source::Service || answer.state() == State::Closed);
        }
        assert_eq!(stats.in_flight(), 0);
        stats.max_in_flight.store(0, Ordering::SeqCst);
        stats.only_probes.store(true, Ordering::SeqCst);
        let calls_before = stats.let_through();
        let probes_before = handle.snapshot().counts.probes;

        let done = Arc::new(AtomicBool::new(false));
        let monitor = spawn_monitor(handle.clone(), done.clone(), true);
        let mut set = JoinSet::new();
        for task in 0..TASKS {
            let mut svc = svc.clone();
            let share = probe_calls / TASKS;
            set.spawn(async move {
                let mut rng = Rng::new(20_000 + task);
                let mut tally = Tally::default();
                for _ in 0..share {
                    let plan = down_plan(&mut rng);
                    let req = request(&mut rng, plan);
                    one_call(&mut svc, &mut rng, req, false, &mut tally).await;
                }
                tally
            });
        }
        let tally = join_tallies(set).await;
        done.store(true, Ordering::SeqCst);
        let watch = monitor.await.expect("the monitor found a broken invariant");
        stats.only_probes.store(false, Ordering::SeqCst);
        stats.down.store(false, Ordering::SeqCst);

        let max = stats.max_in_flight.load(Ordering::SeqCst);
        assert!(
            max <= i64::from(PROBES),
            "{max} calls in the service at once"
        );
        assert_eq!(
            tally.normal_answers, 0,
            "a normal call was answered while only probes may go: {tally:?}"
        );
        let counts = assert_settled(&handle, &stats);
        let reached = stats.let_through() - calls_before;
        assert!(reached > 0, "no probe went out");
        assert_eq!(
            counts.probes - probes_before,
            reached,
            "every call the service got was a probe"
        );
        (tally, watch, max, reached)
    };
    let (probe_tally, probe_watch, probe_max, probe_reached) = probe_window;

    // ---- Phase 4: the service is back. Nothing is in flight, so sequential successes
    // close the breaker within the longest cooldown and `PROBES` probes.
    let mut recovering = svc.clone();
    let mut recovery_calls = 0;
    while handle.state() != State::Closed {
        recovery_calls += 1;
        assert!(
            recovery_calls <= COOLDOWN_CAP + u64::from(PROBES) + 1,
            "not closed after {recovery_calls} successes: {:?}",
            handle.snapshot()
        );
        let req = Req {
            plan: Plan::Ok,
            yields: 0,
        };
        recovering
            .ready()
            .await
            .expect("ready")
            .call(req)
            .await
            .expect("answers");
    }
    let answer = recovering
        .ready()
        .await
        .expect("ready")
        .call(Req {
            plan: Plan::Ok,
            yields: 0,
        })
        .await
        .expect("answers");
    assert_eq!(answer.source(), Source::Service);

    // ---- At the end: everything adds up exactly.
    let counts = assert_settled(&handle, &stats);
    let mut all = chaos.clone();
    all.add(&quiet_tally);
    all.add(&probe_tally);
    assert_panics_propagated(&stats, &all);
    let hangs = stats.hangs.load(Ordering::SeqCst);
    let elapsed = started.elapsed();
    println!(
        "stress: {TASKS} tasks, {calls} chaos calls ({} planned panics caught; {} planned hangs; {} calls failed by the inner timeout layer (hung or slow), {} hung calls cut by the caller; {} dropped or aborted, {} abandoned by callers; kill switch flipped {kills} times)",
        chaos.panics(),
        hangs,
        all.timed_out,
        all.caller_cut,
        chaos.dropped,
        chaos.abandoned,
    );
    println!(
        "stress: breaker totals: arrived {} = made {} + skipped {} (open {}, half-open full {}, killed {}) + abandoned {}",
        counts.arrived,
        counts.made,
        counts.skipped(),
        counts.skipped_open,
        counts.skipped_half_open_full,
        counts.skipped_killed,
        counts.abandoned,
    );
    println!(
        "stress: made {} = successes {} + failures {} + ignored {} + cancelled {} + late {}; probes {}; service calls {} + poll_ready panics {} = made",
        counts.made,
        counts.successes,
        counts.failures,
        counts.ignored,
        counts.cancelled,
        counts.late,
        counts.probes,
        stats.calls(),
        stats.ready_panics.load(Ordering::SeqCst),
    );
    println!(
        "stress: panics thrown = propagated: poll_ready {}, call {}, future {}, classifier {}, fallback {}",
        all.ready_panics, all.call_panics, all.future_panics, all.classifier_panics, all.fallback_panics,
    );
    println!(
        "stress: monitor: {} snapshots in chaos (states closed/open/half-open {:?}), max probes in flight {} <= {PROBES}",
        chaos_watch.snapshots,
        &chaos_watch.states_seen[..3],
        chaos_watch.max_probes_in_flight.max(probe_watch.max_probes_in_flight),
    );
    println!(
        "stress: quiet window: {quiet_calls} calls while killed ({quiet_skipped} skipped as killed), service calls +0",
    );
    println!(
        "stress: probe window: {} calls, {probe_reached} probes reached the service, at most {probe_max} at once <= {PROBES}, never closed ({} snapshots); closed again after {recovery_calls} successes",
        probe_tally.calls, probe_watch.snapshots,
    );
    println!("stress: breaker scenario took {elapsed:.2?}");
}

// ---------------------------------------------------------------------------------
// Scenario b: one expediter, five tools.
// ---------------------------------------------------------------------------------

/// Messages shared by the tools, so that cascades happen, and one of each tool's own
/// (no known signature).
const SHARED_ERRORS: [&str; 3] = [
    "tcp connect error: connection refused (os error 111)",
    "open /workspace: permission denied",
    "request timed out after 30s",
];

#[derive(Debug, Clone, Copy)]
enum ToolOutcome {
    Ok,
    Fail(&'static str),
    Ignore,
}

#[derive(Debug, Clone, Copy)]
struct ToolReq {
    outcome: ToolOutcome,
    yields: u32,
}

#[derive(Debug, Default)]
struct ToolStats {
    calls: AtomicU64,
}

trait ToolService:
    Service<ToolReq, Response = Answer<Reply>, Error = BoxError, Future: Send> + Clone + Send + 'static
{
}

impl<S> ToolService for S where
    S: Service<ToolReq, Response = Answer<Reply>, Error = BoxError, Future: Send>
        + Clone
        + Send
        + 'static
{
}

/// A tool's service behind its breaker (the expediter's layer for it), with a fallback
/// for calls the breaker turns away after the expediter said CALL or PROBE.
fn tool_service(layer: ToolLayer, stats: Arc<ToolStats>) -> impl ToolService {
    let tool = service_fn(move |req: ToolReq| {
        stats.calls.fetch_add(1, Ordering::SeqCst);
        async move {
            yields(u64::from(req.yields)).await;
            match req.outcome {
                ToolOutcome::Ok => Ok(Reply::Ok),
                ToolOutcome::Ignore => Ok(Reply::Ignored),
                ToolOutcome::Fail(message) => Err(io::Error::other(message)),
            }
        }
    });
    layer
        .with_classifier(|result: &Result<Reply, io::Error>| match result {
            Ok(Reply::Ignored) => Outcome::Ignored,
            Ok(_) => Outcome::Success,
            Err(_) => Outcome::failure(),
        })
        .with_fallback(service_fn(|_: ToolReq| async {
            Ok::<_, Infallible>(Reply::Fallback)
        }))
        .layer(tool)
}

/// What one worker saw of one tool.
#[derive(Debug, Default, Clone, Copy)]
struct ToolTally {
    decided_call: u64,
    decided_probe: u64,
    /// Made, and the service answered or failed.
    reached: u64,
    /// Made, but the breaker turned the call away (its state moved after the decision).
    turned_away: u64,
    skipped: u64,
    paused: u64,
}

impl ToolTally {
    fn add(&mut self, o: &ToolTally) {
        self.decided_call += o.decided_call;
        self.decided_probe += o.decided_probe;
        self.reached += o.reached;
        self.turned_away += o.turned_away;
        self.skipped += o.skipped;
        self.paused += o.paused;
    }
}

/// The controller's count of systemic events, kept in step with the reports it reads.
///
/// Race-free because the controller is the only one that resolves an event (it calls
/// `confirm_recovery`, and only after a report showed it the active event), and at most
/// one event is active at a time (while one is, new openings join it): so every event
/// is seen by a report before it is resolved, or is still active at the next report.
/// `new_cycle` is only called when no call is running, right after a report, so no
/// event can slip from one cycle into the next unseen.
#[derive(Debug, Default)]
struct Ledger {
    cycle: u32,
    cycle_events: usize,
    events: usize,
    /// The step of the active event, seen but not yet resolved.
    active: Option<u64>,
    confirmed: u64,
    reports: u64,
}

impl Ledger {
    /// The failure budget equals the failures recorded this cycle: each ordinary one
    /// (not part of a systemic event), plus one for each systemic event of the cycle.
    fn check(&mut self, report: &StatusReport) {
        self.reports += 1;
        match &report.systemic {
            Some(event) if !event.resolved => match self.active {
                None => {
                    self.active = Some(event.step);
                    self.cycle_events += 1;
                    self.events += 1;
                }
                Some(step) => assert_eq!(step, event.step, "a second active systemic event"),
            },
            other => assert!(
                self.active.is_none(),
                "the active systemic event was resolved behind the controller's back: {other:?}"
            ),
        }
        let budget = &report.budget;
        assert_eq!(budget.cycle, self.cycle);
        let ordinary = budget.failures.iter().filter(|line| !line.systemic).count();
        assert_eq!(
            budget.systemic_events as usize, self.cycle_events,
            "{budget:?}"
        );
        assert_eq!(
            budget.used as usize,
            ordinary + self.cycle_events,
            "budget used {} != {ordinary} ordinary failures + {} systemic events this cycle: {budget:?}",
            budget.used,
            self.cycle_events,
        );
        if report.budget.failures.iter().any(|line| line.systemic) {
            assert!(report.systemic.is_some());
        }
    }

    fn new_cycle(&mut self) {
        self.cycle += 1;
        self.cycle_events = 0;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_tasks_sharing_one_expediter_keep_its_budget_and_call_tools_only_on_call_or_probe(
) {
    let started = Instant::now();
    let wanted = calls_wanted(DEFAULT_EXPEDITER_CALLS);
    let expediter = Expediter::builder()
        .tool(common::grep_spec())
        .tool(common::bash_spec())
        .tool(common::read_spec())
        .tool(common::write_spec())
        .tool(common::edit_spec())
        .failure_budget(100)
        // Steps only: three openings within 4 steps are a cascade; nothing by time.
        .cascade_window(4, Duration::from_nanos(1))
        .default_breaker(
            Builder::new()
                .failure_threshold(THRESHOLD)
                .cooldown(Cooldown::Calls(3))
                .max_half_open_dwell(None),
        )
        .build()
        .expect("the map is valid");
    let names: Vec<Arc<str>> = expediter.tools();
    assert_eq!(names.len(), 5);
    let stats: Vec<Arc<ToolStats>> = names.iter().map(|_| Arc::default()).collect();
    let services: Vec<_> = names
        .iter()
        .zip(&stats)
        .map(|(name, stats)| tool_service(expediter.layer(name).unwrap(), stats.clone()))
        .collect();

    let mut rng = Rng::new(777);
    let mut ledger = Ledger {
        cycle: 1,
        ..Ledger::default()
    };
    let mut tallies = vec![ToolTally::default(); names.len()];
    let (mut executes, mut rounds, mut cycles, mut lines_recorded) = (0u64, 0u64, 1u64, 0usize);
    let (mut systemic_lines, mut exhausted_rounds) = (0usize, 0u64);
    while executes < wanted {
        rounds += 1;
        // The weather of this round: how often each tool fails, and with what message.
        // Some rounds (the first always) have an outage: several tools failing with one
        // shared message, which is what a cascade looks like.
        let outage = (rounds == 1 || rng.chance(50))
            .then(|| (SHARED_ERRORS[rng.below(3) as usize], 2 + rng.below(3)));
        let weather: Arc<Vec<(u64, &'static str)>> = Arc::new(
            names
                .iter()
                .enumerate()
                .map(|(i, name)| match outage {
                    Some((message, tools)) if (i as u64) < tools => (95, message),
                    _ => {
                        let percent = [0, 5, 20, 60][rng.below(4) as usize];
                        let message = match rng.below(4) {
                            3 => match name.as_ref() {
                                "Grep" => "Grep: index corrupted",
                                "Bash" => "Bash: shell exited with status 2",
                                "Read" => "Read: file is binary",
                                "Write" => "Write: quota exceeded",
                                _ => "Edit: patch does not apply",
                            },
                            i => SHARED_ERRORS[i as usize],
                        };
                        (percent, message)
                    }
                })
                .collect(),
        );
        let per_task = (4 + rng.below(37)).min((wanted - executes).div_ceil(TASKS));
        let done = Arc::new(AtomicBool::new(false));
        let controller = {
            let (expediter, done) = (expediter.clone(), done.clone());
            let mut ledger = std::mem::take(&mut ledger);
            let seed = rng.next();
            tokio::spawn(async move {
                let mut rng = Rng::new(seed);
                while !done.load(Ordering::SeqCst) {
                    yields(rng.below(40)).await;
                    ledger.check(&expediter.report());
                    // A person confirms recovery after seeing the pause, sooner or later.
                    if ledger.active.is_some() && rng.chance(30) {
                        expediter.confirm_recovery();
                        ledger.active = None;
                        ledger.confirmed += 1;
                    }
                }
                ledger
            })
        };
        let mut set = JoinSet::new();
        for task in 0..TASKS {
            let (expediter, weather, names) = (expediter.clone(), weather.clone(), names.clone());
            let mut services = services.clone();
            let seed = rng.next() ^ task;
            set.spawn(async move {
                let mut rng = Rng::new(seed);
                let mut tallies = vec![ToolTally::default(); names.len()];
                for _ in 0..per_task {
                    let i = rng.below(names.len() as u64) as usize;
                    let (percent, message) = weather[i];
                    let outcome = if rng.chance(percent) {
                        ToolOutcome::Fail(message)
                    } else if rng.chance(5) {
                        ToolOutcome::Ignore
                    } else {
                        ToolOutcome::Ok
                    };
                    let req = ToolReq {
                        outcome,
                        yields: rng.below(4) as u32,
                    };
                    let attempt = expediter
                        .default_run()
                        .execute(&names[i], &mut services[i], req)
                        .await
                        .expect("a known tool");
                    let tally = &mut tallies[i];
                    match attempt {
                        Attempt::Made { decision, result } => {
                            match decision.action {
                                Action::Call => tally.decided_call += 1,
                                Action::Probe => tally.decided_probe += 1,
                                other => panic!("a call made on {other:?}"),
                            }
                            match result {
                                Ok(answer) if answer.source().is_fallback() => {
                                    tally.turned_away += 1
                                }
                                Ok(_) | Err(_) => tally.reached += 1,
                            }
                        }
                        Attempt::Skipped { .. } => tally.skipped += 1,
                        Attempt::Paused { .. } => tally.paused += 1,
                    }
                    if rng.chance(10) {
                        yield_now().await;
                    }
                }
                tallies
            });
        }
        while let Some(result) = set.join_next().await {
            for (total, t) in tallies.iter_mut().zip(result.expect("a worker failed")) {
                total.add(&t);
            }
        }
        executes += per_task * TASKS;
        done.store(true, Ordering::SeqCst);
        ledger = controller
            .await
            .expect("the controller found a broken invariant");

        // Quiet: every call has ended and reported. Check, then maybe start a cycle.
        let report = expediter.report();
        ledger.check(&report);
        assert_eq!(report.step, executes, "one step per decision");
        if report.budget.exhausted() {
            exhausted_rounds += 1;
        }
        // A new cycle at random, and always once the budget is used up (or nothing
        // would happen any more).
        if report.budget.exhausted() || rng.chance(40) {
            lines_recorded += report.budget.failures.len();
            systemic_lines += report.budget.failures.iter().filter(|l| l.systemic).count();
            expediter.new_cycle();
            ledger.new_cycle();
            cycles += 1;
        }
    }
    let report = expediter.report();
    ledger.check(&report);
    lines_recorded += report.budget.failures.len();
    systemic_lines += report.budget.failures.iter().filter(|l| l.systemic).count();

    let mut failures = 0;
    let mut per_tool = Vec::new();
    for ((name, stats), tally) in names.iter().zip(&stats).zip(&tallies) {
        let service_calls = stats.calls.load(Ordering::SeqCst);
        let snapshot = expediter.handle(name).unwrap().snapshot();
        let counts = snapshot.counts;
        assert_counts_add_up(&counts);
        assert_eq!(snapshot.probes_in_flight, 0, "{name}: {snapshot:?}");
        assert_eq!(
            service_calls, tally.reached,
            "{name}: every call of its service came from an execute that decided CALL or PROBE"
        );
        assert!(tally.reached <= tally.decided_call + tally.decided_probe);
        assert_eq!(service_calls, counts.made, "{name}: {counts:?}");
        failures += counts.failures;
        per_tool.push(format!(
            "{name} {service_calls} ({} probes, {} failed)",
            counts.probes, counts.failures
        ));
    }
    assert_eq!(
        failures as usize, lines_recorded,
        "every failure a breaker recorded is one line of the budget, in its cycle"
    );
    let total = tallies.iter().fold(ToolTally::default(), |mut acc, t| {
        acc.add(t);
        acc
    });
    if wanted >= 10_000 {
        assert!(
            total.decided_probe > 0 && total.skipped > 0 && total.paused > 0,
            "{total:?}"
        );
        assert!(ledger.events > 0, "no cascade happened: {ledger:?}");
        assert!(
            ledger.confirmed > 0,
            "no recovery was confirmed: {ledger:?}"
        );
    }
    println!(
        "stress expediter: {TASKS} tasks, {executes} executes in {rounds} rounds, {cycles} cycles: CALL {} / PROBE {} (reached the tool {}, turned away by its breaker {}), SKIP {}, PAUSE {}",
        total.decided_call, total.decided_probe, total.reached, total.turned_away, total.skipped, total.paused,
    );
    println!(
        "stress expediter: budget checked at {} reports: failures recorded {lines_recorded} = breaker failures {failures} ({systemic_lines} in systemic events); {} systemic events, {} recoveries confirmed; budget exhausted at the end of {exhausted_rounds} rounds",
        ledger.reports, ledger.events, ledger.confirmed,
    );
    println!(
        "stress expediter: tool calls = breaker calls made: {}",
        per_tool.join(", ")
    );
    println!("stress expediter: took {:.2?}", started.elapsed());
}
