//! Fuzz-style property tests: whatever values the settings and the replay input take,
//! nothing panics, what is bad comes back as the typed error that names it, and what
//! builds also runs.
//!
//! - Breakers built from any sequence of `Builder` setters (NaN, infinities, 0,
//!   `u32::MAX`, `Duration::MAX`, panicking observers, a killed switch...): whatever
//!   `build()` accepts survives a random sequence of calls through the tower layer,
//!   with its counts exact at every step. (That `build()`
//!   itself never panics is `tests/config.rs`'s property; here it is the running.)
//! - Replay inputs: random outcome strings, kill lists, thresholds and cooldowns, and
//!   random command lines, give either a run that matches a small reference model of
//!   the replay example's step function or exactly the error variant the input deserves.

mod common;

use common::reply::Reply;
use std::convert::Infallible;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Once};
use std::task::{Context, Poll};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tower::{service_fn, BoxError, Layer, Service};
use tower_circuit_breaker::config::{RateWindow, TripPolicy};
use tower_circuit_breaker::error::ConfigError;
use tower_circuit_breaker::replay::{self, ReplayError, ReplayInput, StepAnswer};
use tower_circuit_breaker::snapshot::Counts;
use tower_circuit_breaker::{Answer, Backoff, Builder, Cooldown, KillSwitch, Mode, Outcome, State};

// ---------------------------------------------------------------------------------
// Values for every setter.
// ---------------------------------------------------------------------------------

fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        3 => prop_oneof![Just(0.5), Just(0.1), Just(1.0), Just(2.0), 0.0..1.0f64],
        1 => prop_oneof![
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(0.0),
            Just(-0.0),
            Just(f64::MIN_POSITIVE),
            Just(f64::MAX),
            any::<f64>(),
        ],
    ]
}

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        3 => (1u64..5_000).prop_map(Duration::from_millis),
        1 => prop_oneof![
            Just(Duration::ZERO),
            Just(Duration::MAX),
            Just(Duration::from_nanos(1)),
            (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        ],
    ]
}

fn count_u32() -> impl Strategy<Value = u32> {
    prop_oneof![3 => 1u32..6, 1 => prop_oneof![Just(0), Just(u32::MAX), any::<u32>()]]
}

fn count_u64() -> impl Strategy<Value = u64> {
    prop_oneof![3 => 1u64..8, 1 => prop_oneof![Just(0), Just(u64::MAX), any::<u64>()]]
}

fn cooldown() -> impl Strategy<Value = Cooldown> {
    prop_oneof![
        2 => count_u64().prop_map(Cooldown::Calls),
        1 => duration().prop_map(Cooldown::Time),
    ]
}

fn rate_window() -> impl Strategy<Value = RateWindow> {
    prop_oneof![
        count_u32().prop_map(RateWindow::Calls),
        duration().prop_map(RateWindow::Time),
    ]
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![
        3 => Just(Mode::Enabled),
        1 => Just(Mode::ObserveOnly),
        1 => Just(Mode::Disabled),
    ]
}

/// One call of one `Builder` setter.
#[derive(Debug, Clone)]
enum Setter {
    Name(String),
    FailureThreshold(u32),
    FailureRate(f64, RateWindow, u32),
    TripPolicy(TripPolicy),
    Cooldown(Cooldown),
    Backoff(f64, Cooldown),
    Jitter(f64),
    JitterSeed(u64),
    HalfOpenProbes(u32),
    MaxHalfOpenDwell(Option<Duration>),
    MaxRetryAfter(Duration),
    OpenOnRetryAfter(bool),
    SlowCallThreshold(Duration),
    Mode(Mode),
    /// A kill switch of its own, maybe already on.
    KillSwitch(bool),
    /// An observer of transitions, maybe one that panics.
    OnTransition(bool),
    /// An observer of every event, maybe one that panics.
    OnEvent(bool),
}

fn setter() -> impl Strategy<Value = Setter> {
    prop_oneof![
        prop_oneof![Just(String::new()), "[a-z-]{1,8}", any::<String>()].prop_map(Setter::Name),
        count_u32().prop_map(Setter::FailureThreshold),
        (float(), rate_window(), count_u32())
            .prop_map(|(rate, window, min)| Setter::FailureRate(rate, window, min)),
        prop_oneof![
            count_u32().prop_map(TripPolicy::ConsecutiveFailures),
            (float(), rate_window(), count_u32()).prop_map(|(rate, window, minimum_calls)| {
                TripPolicy::FailureRate {
                    rate,
                    window,
                    minimum_calls,
                }
            }),
        ]
        .prop_map(Setter::TripPolicy),
        cooldown().prop_map(Setter::Cooldown),
        (float(), cooldown()).prop_map(|(m, cap)| Setter::Backoff(m, cap)),
        float().prop_map(Setter::Jitter),
        any::<u64>().prop_map(Setter::JitterSeed),
        count_u32().prop_map(Setter::HalfOpenProbes),
        proptest::option::of(duration()).prop_map(Setter::MaxHalfOpenDwell),
        duration().prop_map(Setter::MaxRetryAfter),
        any::<bool>().prop_map(Setter::OpenOnRetryAfter),
        duration().prop_map(Setter::SlowCallThreshold),
        mode().prop_map(Setter::Mode),
        any::<bool>().prop_map(Setter::KillSwitch),
        any::<bool>().prop_map(Setter::OnTransition),
        any::<bool>().prop_map(Setter::OnEvent),
    ]
}

/// Settings that work and trip fast, with the extras that change how a breaker runs:
/// probes, jitter, backoff, a dwell limit, a retry-after cap, a slow-call threshold,
/// observers (some panicking), observe-only mode.
fn tame_setters() -> impl Strategy<Value = Vec<Setter>> {
    let extra = prop_oneof![
        (1u32..4).prop_map(Setter::HalfOpenProbes),
        (0.0..0.9f64).prop_map(Setter::Jitter),
        any::<u64>().prop_map(Setter::JitterSeed),
        proptest::option::of((1u64..10_000).prop_map(Duration::from_millis))
            .prop_map(Setter::MaxHalfOpenDwell),
        (1u64..3_600_000)
            .prop_map(Duration::from_millis)
            .prop_map(Setter::MaxRetryAfter),
        any::<bool>().prop_map(Setter::OpenOnRetryAfter),
        (1u64..10_000)
            .prop_map(Duration::from_millis)
            .prop_map(Setter::SlowCallThreshold),
        prop_oneof![Just(Mode::Enabled), Just(Mode::ObserveOnly)].prop_map(Setter::Mode),
        any::<bool>().prop_map(Setter::OnTransition),
        any::<bool>().prop_map(Setter::OnEvent),
    ];
    (
        1u32..4,
        prop_oneof![
            3 => (1u64..5).prop_map(Cooldown::Calls),
            1 => (1u64..100_000).prop_map(|ms| Cooldown::Time(Duration::from_millis(ms))),
        ],
        proptest::option::of(1.0..4.0f64),
        proptest::collection::vec(extra, 0..4),
    )
        .prop_map(|(threshold, cooldown, backoff, extras)| {
            let cap = match cooldown {
                Cooldown::Calls(n) => Cooldown::Calls(n * 8),
                Cooldown::Time(d) => Cooldown::Time(d * 8),
            };
            [
                Setter::FailureThreshold(threshold),
                Setter::Cooldown(cooldown),
            ]
            .into_iter()
            .chain(backoff.map(|m| Setter::Backoff(m, cap)))
            .chain(extras)
            .collect()
        })
}

/// Half the time any setters with any values in any order (most do not build), half
/// the time tame ones (which run deep: trips, probes, re-opens).
fn setters() -> impl Strategy<Value = Vec<Setter>> {
    prop_oneof![proptest::collection::vec(setter(), 0..10), tame_setters(),]
}

const OBSERVER_PANIC: &str = "fuzz: planned panic in an observer";
const FUTURE_PANIC: &str = "fuzz: planned panic in the inner future";

/// Applies the setters in order (later ones win, as on a real builder).
fn builder(setters: &[Setter]) -> Builder {
    setters.iter().fold(Builder::new(), |b, s| match s.clone() {
        Setter::Name(name) => b.name(name),
        Setter::FailureThreshold(n) => b.failure_threshold(n),
        Setter::FailureRate(rate, window, min) => b.failure_rate(rate, window, min),
        Setter::TripPolicy(policy) => b.trip_policy(policy),
        Setter::Cooldown(c) => b.cooldown(c),
        Setter::Backoff(multiplier, cap) => b.backoff(Backoff::exponential(multiplier, cap)),
        Setter::Jitter(j) => b.jitter(j),
        Setter::JitterSeed(seed) => b.jitter_seed(seed),
        Setter::HalfOpenProbes(n) => b.half_open_probes(n),
        Setter::MaxHalfOpenDwell(d) => b.max_half_open_dwell(d),
        Setter::MaxRetryAfter(d) => b.max_retry_after(d),
        Setter::OpenOnRetryAfter(open) => b.open_on_retry_after(open),
        Setter::SlowCallThreshold(d) => b.slow_call_threshold(d),
        Setter::Mode(m) => b.mode(m),
        Setter::KillSwitch(on) => {
            let kill = KillSwitch::new();
            if on {
                kill.kill();
            }
            b.kill_switch(kill)
        }
        Setter::OnTransition(panics) => b.on_transition(move |_| {
            if panics {
                panic!("{OBSERVER_PANIC}");
            }
        }),
        Setter::OnEvent(panics) => b.on_event(move |_| {
            if panics {
                panic!("{OBSERVER_PANIC}");
            }
        }),
    })
}

/// The mode the breaker starts in: the last `Mode` setter, or enabled.
fn start_mode(setters: &[Setter]) -> Mode {
    setters
        .iter()
        .rev()
        .find_map(|s| match s {
            Setter::Mode(m) => Some(*m),
            _ => None,
        })
        .unwrap_or(Mode::Enabled)
}

/// Planned panics are caught by the tests; the hook keeps quiet about them only.
fn quiet_planned_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            if !message.starts_with("fuzz: planned") {
                default(info);
            }
        }));
    });
}

fn ended(c: &Counts) -> u64 {
    c.successes + c.failures + c.ignored + c.cancelled + c.late
}

fn check_arrivals(c: &Counts) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        c.arrived,
        c.made + c.skipped() + c.abandoned,
        "arrived != made + skipped + abandoned: {:?}",
        c
    );
    Ok(())
}

/// Steps the clock takes; the sum of a run stays far inside what `Instant` holds.
fn advance() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_millis(1)),
        Just(Duration::from_secs(1)),
        Just(Duration::from_secs(61)),
        Just(Duration::from_secs(3600)),
        Just(Duration::from_secs(86_400 * 365)),
    ]
}

// ---------------------------------------------------------------------------------
// What builds runs: through the tower layer.
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    Ok,
    Err,
    Ignored,
    /// Never answers: only dropping the call ends it.
    Hang,
    PanicInFuture,
}

#[derive(Debug, Clone, Copy)]
struct Req {
    plan: Plan,
    /// Polls that return `Pending` before the answer.
    pending: u8,
}

/// Returns `Pending` `n` times (waking itself), then the answer.
struct Slow {
    left: u8,
    plan: Plan,
}

impl Future for Slow {
    type Output = Result<Reply, std::io::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.left > 0 || self.plan == Plan::Hang {
            self.left = self.left.saturating_sub(1);
            if self.plan != Plan::Hang {
                cx.waker().wake_by_ref();
            }
            return Poll::Pending;
        }
        match self.plan {
            Plan::Ok => Poll::Ready(Ok(Reply::Ok)),
            Plan::Ignored => Poll::Ready(Ok(Reply::Ignored)),
            Plan::Err => Poll::Ready(Err(std::io::Error::other("connection refused"))),
            Plan::PanicInFuture => panic!("{FUTURE_PANIC}"),
            Plan::Hang => unreachable!(),
        }
    }
}

fn plan() -> impl Strategy<Value = Plan> {
    prop_oneof![
        4 => Just(Plan::Ok),
        5 => Just(Plan::Err),
        1 => Just(Plan::Ignored),
        1 => Just(Plan::Hang),
        1 => Just(Plan::PanicInFuture),
    ]
}

#[derive(Debug, Clone)]
enum LayerOp {
    /// Reserve and call at once; the call's future is kept, unpolled.
    Call(Plan, u8),
    /// Poll the i-th call once.
    Poll(usize),
    /// Poll the i-th call until it ends (a hang is dropped after a few polls).
    Finish(usize),
    /// Drop the i-th call: cancelled.
    DropCall(usize),
    /// Reserve on a clone, and keep the clone.
    Reserve,
    /// Call through the i-th reserved clone.
    CallReserved(usize, Plan),
    /// Drop the i-th reserved clone: abandoned.
    DropReserved(usize),
    Kill,
    Revive,
    ForceOpen,
    Reset,
    AllowProbe,
    SetMode(Mode),
    Relief(u32),
    Advise,
    Snapshot,
    Advance(Duration),
}

fn layer_op() -> impl Strategy<Value = LayerOp> {
    prop_oneof![
        8 => (plan(), 0u8..3).prop_map(|(p, n)| LayerOp::Call(p, n)),
        3 => any::<usize>().prop_map(LayerOp::Poll),
        7 => any::<usize>().prop_map(LayerOp::Finish),
        1 => any::<usize>().prop_map(LayerOp::DropCall),
        1 => Just(LayerOp::Reserve),
        1 => (any::<usize>(), plan()).prop_map(|(i, p)| LayerOp::CallReserved(i, p)),
        1 => any::<usize>().prop_map(LayerOp::DropReserved),
        1 => prop_oneof![
            Just(LayerOp::Kill),
            Just(LayerOp::Revive),
            Just(LayerOp::ForceOpen),
            Just(LayerOp::Reset),
            Just(LayerOp::AllowProbe),
            mode().prop_map(LayerOp::SetMode),
            count_u32().prop_map(LayerOp::Relief),
            Just(LayerOp::Advise),
            Just(LayerOp::Snapshot),
        ],
        2 => advance().prop_map(LayerOp::Advance),
    ]
}

type Call = Pin<Box<dyn Future<Output = Result<Answer<Reply>, BoxError>>>>;

/// Polls a call once, catching a planned panic: `Some` when it ended.
fn poll_once(call: &mut Call) -> Result<Option<()>, TestCaseError> {
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    match catch_unwind(AssertUnwindSafe(|| call.as_mut().poll(&mut cx))) {
        Ok(Poll::Pending) => Ok(None),
        Ok(Poll::Ready(Ok(_))) => Ok(Some(())),
        Ok(Poll::Ready(Err(error))) => {
            // The service's own error, or no fallback... there always is one here.
            prop_assert!(
                error.to_string().contains("connection refused"),
                "unexpected error: {}",
                error
            );
            Ok(Some(()))
        }
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            prop_assert_eq!(
                message,
                FUTURE_PANIC,
                "an unplanned panic reached the caller"
            );
            Ok(Some(()))
        }
    }
}

async fn run_layer(setters: Vec<Setter>, ops: Vec<LayerOp>) -> Result<(), TestCaseError> {
    let Ok(layer) = builder(&setters).build() else {
        return Ok(());
    };
    let handle = layer.handle();
    let calls = Arc::new(AtomicU64::new(0));
    let uncounted = Arc::new(AtomicU64::new(0));
    let disabled = Arc::new(AtomicBool::new(start_mode(&setters) == Mode::Disabled));
    let inner = {
        let (calls, uncounted, disabled) = (calls.clone(), uncounted.clone(), disabled.clone());
        service_fn(move |req: Req| {
            calls.fetch_add(1, Ordering::SeqCst);
            // Disabled mode counts nothing: a call made then is not in `made`.
            if disabled.load(Ordering::SeqCst) {
                uncounted.fetch_add(1, Ordering::SeqCst);
            }
            Slow {
                left: req.pending,
                plan: req.plan,
            }
        })
    };
    let mut svc = layer
        .with_classifier(|result: &Result<Reply, std::io::Error>| match result {
            Ok(Reply::Ignored) => Outcome::Ignored,
            Ok(_) => Outcome::Success,
            Err(_) => Outcome::failure(),
        })
        .with_fallback(service_fn(|_: Req| async {
            Ok::<_, Infallible>(Reply::Fallback)
        }))
        .layer(inner);
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    let mut in_flight: Vec<Call> = Vec::new();
    let mut reserved = Vec::new();
    for op in ops {
        match op {
            LayerOp::Call(plan, pending) => {
                let ready = svc.poll_ready(&mut cx);
                prop_assert!(
                    matches!(ready, Poll::Ready(Ok(()))),
                    "not ready: {:?}",
                    ready
                );
                in_flight.push(Box::pin(svc.call(Req { plan, pending })));
            }
            LayerOp::Poll(i) if !in_flight.is_empty() => {
                let i = i % in_flight.len();
                if poll_once(&mut in_flight[i])?.is_some() {
                    drop(in_flight.swap_remove(i));
                }
            }
            LayerOp::Finish(i) if !in_flight.is_empty() => {
                let mut call = in_flight.swap_remove(i % in_flight.len());
                for _ in 0..8 {
                    if poll_once(&mut call)?.is_some() {
                        break;
                    }
                }
            }
            LayerOp::DropCall(i) if !in_flight.is_empty() => {
                drop(in_flight.swap_remove(i % in_flight.len()));
            }
            LayerOp::Poll(_) | LayerOp::Finish(_) | LayerOp::DropCall(_) => {}
            LayerOp::Reserve => {
                let mut clone = svc.clone();
                let ready = clone.poll_ready(&mut cx);
                prop_assert!(
                    matches!(ready, Poll::Ready(Ok(()))),
                    "not ready: {:?}",
                    ready
                );
                reserved.push(clone);
            }
            LayerOp::CallReserved(i, plan) if !reserved.is_empty() => {
                let mut clone = reserved.swap_remove(i % reserved.len());
                in_flight.push(Box::pin(clone.call(Req { plan, pending: 1 })));
            }
            LayerOp::DropReserved(i) if !reserved.is_empty() => {
                drop(reserved.swap_remove(i % reserved.len()));
            }
            LayerOp::CallReserved(..) | LayerOp::DropReserved(_) => {}
            LayerOp::Kill => handle.kill_switch().kill(),
            LayerOp::Revive => handle.kill_switch().revive(),
            LayerOp::ForceOpen => handle.force_open(),
            LayerOp::Reset => handle.reset(),
            LayerOp::AllowProbe => {
                let _ = handle.allow_probe();
            }
            LayerOp::SetMode(mode) => {
                handle.set_mode(mode);
                disabled.store(mode == Mode::Disabled, Ordering::SeqCst);
            }
            LayerOp::Relief(relief) => handle.set_threshold_relief(relief),
            LayerOp::Advise => {
                let _ = handle.advise();
            }
            LayerOp::Snapshot => {
                let snapshot = handle.snapshot();
                check_arrivals(&snapshot.counts)?;
            }
            LayerOp::Advance(by) => tokio::time::advance(by).await,
        }
    }
    drop(in_flight);
    drop(reserved);
    let snapshot = handle.snapshot();
    let counts = snapshot.counts;
    check_arrivals(&counts)?;
    prop_assert_eq!(counts.made, ended(&counts), "{:?}", counts);
    prop_assert_eq!(snapshot.probes_in_flight, 0, "{:?}", snapshot);
    prop_assert_eq!(
        calls.load(Ordering::SeqCst),
        counts.made + uncounted.load(Ordering::SeqCst),
        "the service's calls are the calls made (plus disabled mode's): {:?}",
        counts
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_settings_that_build_run_any_call_sequence_through_the_layer_with_exact_counts(
        setters in setters(),
        ops in proptest::collection::vec(layer_op(), 0..80),
    ) {
        quiet_planned_panics();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        match catch_unwind(AssertUnwindSafe(|| runtime.block_on(run_layer(setters, ops)))) {
            Ok(result) => result?,
            Err(_) => return Err(TestCaseError::fail("the layer panicked (not a planned panic)")),
        }
    }
}

// ---------------------------------------------------------------------------------
// Replay inputs.
// ---------------------------------------------------------------------------------

/// The replay example's step function, one probe, steps from 1: what the replay must print.
fn reference(threshold: u32, cooldown: u64, outcomes: &[bool], kill: &[usize]) -> Vec<String> {
    let (mut state, mut fails, mut probe_at) = (State::Closed, 0u32, 0u64);
    let mut lines = Vec::new();
    let mut made = 0;
    for (i, &ok) in outcomes.iter().enumerate() {
        let step = i + 1;
        if kill.contains(&step) {
            lines.push(format!("{step} {state}:skipped"));
            continue;
        }
        if state == State::Open && step as u64 >= probe_at {
            state = State::HalfOpen;
        }
        let found = state;
        if found == State::Open {
            lines.push(format!("{step} {found}:skipped"));
            continue;
        }
        made += 1;
        if ok {
            state = State::Closed;
            fails = 0;
            lines.push(format!("{step} {found}:model"));
        } else {
            fails = fails.saturating_add(1);
            if found == State::HalfOpen || fails >= threshold {
                state = State::Open;
                probe_at = (step as u64).saturating_add(cooldown);
            }
            lines.push(format!("{step} {found}:failed"));
        }
    }
    lines.push(format!("calls made: {made} / {}", outcomes.len()));
    lines
}

/// What `ReplayInput::new` must say, in its documented order.
fn expected(
    threshold: u32,
    cooldown: u64,
    outcomes: &str,
    kill: &[usize],
) -> Result<(), ReplayError> {
    if outcomes.is_empty() {
        return Err(ReplayError::EmptyOutcomes);
    }
    if let Some((i, found)) = outcomes
        .chars()
        .enumerate()
        .find(|(_, c)| *c != '0' && *c != '1')
    {
        return Err(ReplayError::BadOutcome { step: i + 1, found });
    }
    let steps = outcomes.chars().count();
    if let Some(&step) = kill.iter().find(|&&s| s == 0 || s > steps) {
        return Err(if step == 0 {
            ReplayError::KillStepZero
        } else {
            ReplayError::KillStepBeyond { step, steps }
        });
    }
    if threshold == 0 {
        return Err(ReplayError::Config(ConfigError::ZeroThreshold));
    }
    if cooldown == 0 {
        return Err(ReplayError::Config(ConfigError::ZeroCooldown));
    }
    if cooldown > Cooldown::MAX_CALLS {
        return Err(ReplayError::Config(ConfigError::CooldownTooLong));
    }
    Ok(())
}

fn outcomes_text() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[01]{1,120}",
        1 => "[01]{0,20}[^01][01]{0,20}",
        1 => Just(String::new()),
        1 => any::<String>(),
    ]
}

fn kill_steps() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(
        prop_oneof![6 => 1usize..130, 1 => Just(0usize), 1 => any::<usize>()],
        0..6,
    )
}

fn threshold() -> impl Strategy<Value = u32> {
    prop_oneof![8 => 1u32..6, 1 => Just(0), 1 => Just(u32::MAX), 1 => any::<u32>()]
}

fn cooldown_calls() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 1u64..8, 1 => Just(0), 1 => Just(u64::MAX), 1 => any::<u64>()]
}

fn run_replay(input: &ReplayInput) -> Result<replay::Trace, ReplayError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(replay::run(input))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_replay_input_either_runs_as_the_reference_model_says_or_returns_the_error_it_deserves(
        threshold in threshold(),
        cooldown in cooldown_calls(),
        outcomes in outcomes_text(),
        kill in kill_steps(),
    ) {
        let built = catch_unwind(AssertUnwindSafe(|| {
            ReplayInput::new(threshold, cooldown, &outcomes, kill.iter().copied())
        }));
        let Ok(built) = built else {
            return Err(TestCaseError::fail("ReplayInput::new panicked"));
        };
        let want = expected(threshold, cooldown, &outcomes, &kill);
        match (built, want) {
            (Err(got), Err(want)) => {
                prop_assert_eq!(&got, &want);
                prop_assert!(!got.to_string().is_empty());
            }
            (Ok(input), Ok(())) => {
                let bits: Vec<bool> = outcomes.chars().map(|c| c == '1').collect();
                prop_assert_eq!(input.outcomes(), &bits[..]);
                let trace = match catch_unwind(AssertUnwindSafe(|| run_replay(&input))) {
                    Ok(trace) => trace,
                    Err(_) => return Err(TestCaseError::fail("replay::run panicked")),
                };
                let trace = match trace {
                    Ok(trace) => trace,
                    Err(error) => return Err(TestCaseError::fail(format!("a valid input failed: {error}"))),
                };
                prop_assert_eq!(trace.lines(), reference(threshold, cooldown, &bits, &kill));
                let counts = trace.counts();
                check_arrivals(&counts)?;
                prop_assert_eq!(counts.made, ended(&counts));
                prop_assert_eq!(trace.calls_made() as u64, counts.made);
                let called = trace
                    .steps()
                    .iter()
                    .filter(|s| s.answer != StepAnswer::Skipped)
                    .count();
                prop_assert_eq!(trace.calls_made(), called);
                prop_assert_eq!(counts.arrived, bits.len() as u64);
            }
            (got, want) => {
                return Err(TestCaseError::fail(format!("got {got:?}, expected {want:?}")));
            }
        }
    }
}
