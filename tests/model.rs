//! Model-based tests: the breaker, driven through the real tower layer, compared step by step with a small reference model of the step
//! function the replay example prints (consecutive failures trip it, the cooldown counts calls, one probe).
//!
//! The reference model, with steps numbered from 1:
//!
//! ```text
//! state = closed, fails = 0, opened_at = 0
//! step(i, outcome, killed, dropped):
//!   if killed: return (state, skipped)           # nothing changes; steps still count
//!   if state == open and i - opened_at >= cooldown: state = half_open
//!   found = state
//!   if found == open: return (found, skipped)
//!   if dropped: nothing is recorded; a half-open probe slot is freed
//!       return (found, dropped)
//!   if outcome success: state = closed; fails = 0; return (found, model)
//!   fails += 1
//!   if found == half_open or fails >= threshold: state = open; opened_at = i
//!   return (found, failed)
//! ```
//!
//! One more fate than the replay's is generated: `abandoned`, a call whose readiness is
//! reserved and whose service is then dropped without being called. For the state it
//! is the same as `dropped` (nothing recorded, a probe slot freed); for the counts it is
//! `abandoned` instead of `made` + `cancelled`.
//!
//! Nothing here waits on the wall clock: the layer runs on a current-thread runtime with
//! paused time, and the machine gets one fixed `Instant`.

mod common;

use common::reply::Reply;
use std::convert::Infallible;
use std::fmt;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_circuit_breaker::error::BoxError;
use tower_circuit_breaker::error::Rejected;
use tower_circuit_breaker::snapshot::Counts;
use tower_circuit_breaker::{
    Answer, CircuitBreakerHandle, CircuitBreakerLayer, Cooldown, NextProbe, Outcome, Reason,
    Source, State,
};

// ---------------------------------------------------------------------------------------
// The reference model
// ---------------------------------------------------------------------------------------

/// What the script says happens to the call at one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// The wrapped service answers.
    Succeed,
    /// The wrapped service fails.
    Fail,
    /// The wrapped service is called, but the caller drops the response future before
    /// it completes.
    Drop,
    /// The caller reserves readiness, then drops the service without calling it.
    Abandon,
}

impl Fate {
    fn symbol(self) -> char {
        match self {
            Fate::Succeed => '1',
            Fate::Fail => '0',
            Fate::Drop => 'd',
            Fate::Abandon => 'a',
        }
    }
}

/// What the caller got at one step, according to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Said {
    /// The wrapped service answered.
    Model,
    /// The wrapped service was called and failed.
    Failed,
    /// The wrapped service was not called.
    Skipped {
        reason: Reason,
        next_probe: NextProbe,
    },
    /// The wrapped service was called; its response future was dropped.
    Dropped,
    /// A reservation was dropped without a call.
    Abandoned,
}

impl Said {
    /// Whether the wrapped service was called.
    fn made(self) -> bool {
        matches!(self, Said::Model | Said::Failed | Said::Dropped)
    }

    /// The word the replay's trace uses.
    fn word(self) -> &'static str {
        match self {
            Said::Model => "model",
            Said::Failed => "failed",
            Said::Skipped { .. } => "skipped",
            Said::Dropped => "dropped",
            Said::Abandoned => "abandoned",
        }
    }
}

/// The totals the model keeps, named as in [`Counts`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct ModelCounts {
    arrived: u64,
    made: u64,
    probes: u64,
    skipped_open: u64,
    skipped_killed: u64,
    abandoned: u64,
    cancelled: u64,
    successes: u64,
    failures: u64,
}

impl ModelCounts {
    fn of(c: &Counts) -> Self {
        ModelCounts {
            arrived: c.arrived,
            made: c.made,
            probes: c.probes,
            skipped_open: c.skipped_open,
            skipped_killed: c.skipped_killed,
            abandoned: c.abandoned,
            cancelled: c.cancelled,
            successes: c.successes,
            failures: c.failures,
        }
    }
}

/// The reference step function, plus the totals.
#[derive(Debug, Clone)]
struct Reference {
    threshold: u32,
    cooldown: u64,
    state: State,
    fails: u32,
    opened_at: u64,
    counts: ModelCounts,
}

impl Reference {
    fn new(threshold: u32, cooldown: u64) -> Self {
        Reference {
            threshold,
            cooldown,
            state: State::Closed,
            fails: 0,
            opened_at: 0,
            counts: ModelCounts::default(),
        }
    }

    /// Step `i` (from 1): the state found and what the caller got.
    fn step(&mut self, i: u64, fate: Fate, killed: bool) -> (State, Said) {
        self.counts.arrived += 1;
        if killed {
            self.counts.skipped_killed += 1;
            let said = Said::Skipped {
                reason: Reason::Killed,
                next_probe: NextProbe::Manual,
            };
            return (self.state, said);
        }
        if self.state == State::Open && i - self.opened_at >= self.cooldown {
            self.state = State::HalfOpen;
        }
        let found = self.state;
        if found == State::Open {
            self.counts.skipped_open += 1;
            let said = Said::Skipped {
                reason: Reason::Open,
                next_probe: NextProbe::After {
                    calls: self.opened_at + self.cooldown - i,
                    at: None,
                },
            };
            return (found, said);
        }
        if fate == Fate::Abandon {
            // Never called: nothing recorded, the probe slot (if any) freed.
            self.counts.abandoned += 1;
            return (found, Said::Abandoned);
        }
        self.counts.made += 1;
        self.counts.probes += u64::from(found == State::HalfOpen);
        match fate {
            Fate::Drop => {
                self.counts.cancelled += 1;
                (found, Said::Dropped)
            }
            Fate::Succeed => {
                self.counts.successes += 1;
                self.state = State::Closed;
                self.fails = 0;
                (found, Said::Model)
            }
            Fate::Abandon => unreachable!("handled above"),
            Fate::Fail => {
                self.counts.failures += 1;
                self.fails += 1;
                if found == State::HalfOpen || self.fails >= self.threshold {
                    self.state = State::Open;
                    self.opened_at = i;
                }
                (found, Said::Failed)
            }
        }
    }
}

/// Checks the breaker's totals against the model's, the totals the model never moves
/// (they must stay 0), and the counting invariants. `in_flight` is the number of calls
/// admitted and not yet recorded or released.
fn check_counts(
    actual: &Counts,
    model: &ModelCounts,
    in_flight: u64,
    step: u64,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        ModelCounts::of(actual),
        *model,
        "counts after step {}",
        step
    );
    prop_assert_eq!(
        (
            actual.skipped_half_open_full,
            actual.skipped_forced_open,
            actual.ignored,
            actual.late,
            actual.would_have_skipped
        ),
        (0, 0, 0, 0, 0),
        "counts the model never moves, after step {}",
        step
    );
    prop_assert_eq!(
        actual.arrived,
        actual.made + actual.skipped() + actual.abandoned,
        "arrived == made + skipped + abandoned, after step {}: {:?}",
        step,
        actual
    );
    prop_assert_eq!(
        actual.made,
        actual.successes
            + actual.failures
            + actual.ignored
            + actual.cancelled
            + actual.late
            + in_flight,
        "made == successes + failures + ignored + cancelled + late + in flight ({}), after step {}: {:?}",
        in_flight,
        step,
        actual
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Generated cases
// ---------------------------------------------------------------------------------------

/// One generated run: settings, a fate per step, and the steps at which the kill switch
/// is on.
#[derive(Clone)]
struct Case {
    threshold: u32,
    cooldown: u64,
    fates: Vec<Fate>,
    killed: Vec<bool>,
}

impl Case {
    fn killed_at(&self, step: u64) -> bool {
        self.killed[step as usize - 1]
    }

    fn steps(&self) -> impl Iterator<Item = (u64, Fate, bool)> + '_ {
        self.fates
            .iter()
            .zip(&self.killed)
            .enumerate()
            .map(|(index, (&fate, &killed))| (index as u64 + 1, fate, killed))
    }
}

/// Compact, so a shrunk failure reads like the replay example's command line.
impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fates: String = self.fates.iter().map(|fate| fate.symbol()).collect();
        let kill: Vec<u64> = (1..=self.fates.len() as u64)
            .filter(|&step| self.killed_at(step))
            .collect();
        write!(
            f,
            "--threshold {} --cooldown {} --outcomes {fates} --kill {kill:?} \
             (1 succeed, 0 fail, d dropped, a abandoned)",
            self.threshold, self.cooldown
        )
    }
}

/// Thresholds 1..=5, cooldowns 1..=6, up to 60 steps with a failure share drawn per
/// case, some dropped and abandoned calls, and up to three kill windows.
fn cases() -> impl Strategy<Value = Case> {
    (1u32..=5, 1u64..=6, 0u32..=10, 1usize..=60).prop_flat_map(
        |(threshold, cooldown, fail_weight, len)| {
            let fate = prop_oneof![
                2 * (11 - fail_weight) => Just(Fate::Succeed),
                2 * (fail_weight + 1) => Just(Fate::Fail),
                2 => Just(Fate::Drop),
                1 => Just(Fate::Abandon),
            ];
            let windows = prop::collection::vec((1usize..=len, 1usize..=6), 0..=3);
            (prop::collection::vec(fate, len), windows).prop_map(move |(fates, windows)| {
                let killed = (1..=len)
                    .map(|step| {
                        windows
                            .iter()
                            .any(|&(start, width)| start <= step && step < start + width)
                    })
                    .collect();
                Case {
                    threshold,
                    cooldown,
                    fates,
                    killed,
                }
            })
        },
    )
}

// ---------------------------------------------------------------------------------------
// Driving the layer
// ---------------------------------------------------------------------------------------

/// The wrapped service's own error.
#[derive(Debug)]
struct Refused;

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("connection refused")
    }
}

impl std::error::Error for Refused {}

fn classify_reply(result: &Result<Reply, Infallible>) -> Outcome {
    match result {
        Ok(Reply::Ok) => Outcome::Success,
        Ok(Reply::Failed | Reply::Fallback) => Outcome::failure_with("503 unavailable"),
        Ok(other) => unreachable!("never scripted here: {other:?}"),
        Err(never) => match *never {},
    }
}

/// The steps at which the wrapped service was called, in order.
type Calls = Arc<Mutex<Vec<u64>>>;

/// A scripted service that fails with `Err(Refused)`; the request is the step number.
/// A dropped step's future never completes.
fn err_service(
    script: Arc<Vec<Fate>>,
    calls: Calls,
) -> impl Service<u64, Response = &'static str, Error = Refused> + Clone {
    service_fn(move |step: u64| {
        calls.lock().unwrap().push(step);
        let fate = script[step as usize - 1];
        async move {
            match fate {
                Fate::Drop => std::future::pending().await,
                Fate::Fail => Err(Refused),
                Fate::Succeed | Fate::Abandon => Ok("answer"),
            }
        }
    })
}

/// A scripted service that fails with `Ok(Reply::Failed)`, for a classifier.
fn reply_service(
    script: Arc<Vec<Fate>>,
    calls: Calls,
) -> impl Service<u64, Response = Reply, Error = Infallible> + Clone {
    service_fn(move |step: u64| {
        calls.lock().unwrap().push(step);
        let fate = script[step as usize - 1];
        async move {
            match fate {
                Fate::Drop => std::future::pending().await,
                Fate::Fail => Ok(Reply::Failed),
                Fate::Succeed | Fate::Abandon => Ok(Reply::Ok),
            }
        }
    })
}

/// How the wrapped service reports a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    /// `Err(Refused)`, judged by the default classifier: a failed call returns the
    /// error, so there is no `Answer` to read its state from.
    ErrResults,
    /// `Ok(Reply::Failed)`, judged by a classifier: a failed call is an `Answer`.
    ClassifiedReplies,
}

/// What one step through the layer looked like from the caller's side.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Observed {
    /// An answer from the wrapped service.
    Called {
        state: State,
        probe: bool,
        success: bool,
    },
    /// The wrapped service's own error came back.
    ServiceError,
    /// The call was not made: a fallback answer, or a `Rejected` error.
    Skipped {
        state: State,
        reason: Reason,
        next_probe: NextProbe,
    },
    /// The response future was still pending after one poll, and was dropped.
    Pending,
    /// The reservation was dropped without a call: nothing to see.
    NoCall,
    /// Anything else.
    Unexpected(String),
}

/// What the model says the caller sees.
fn expected(found: State, said: Said, style: Style) -> Observed {
    let probe = found == State::HalfOpen;
    match said {
        Said::Model => Observed::Called {
            state: found,
            probe,
            success: true,
        },
        Said::Failed => match style {
            Style::ErrResults => Observed::ServiceError,
            Style::ClassifiedReplies => Observed::Called {
                state: found,
                probe,
                success: false,
            },
        },
        Said::Skipped { reason, next_probe } => Observed::Skipped {
            state: found,
            reason,
            next_probe,
        },
        Said::Dropped => Observed::Pending,
        Said::Abandoned => Observed::NoCall,
    }
}

fn rejected(error: BoxError) -> Observed {
    match error.downcast_ref::<Rejected>() {
        Some(rejected) => Observed::Skipped {
            state: rejected.state(),
            reason: rejected.reason(),
            next_probe: rejected.next_probe(),
        },
        None if error.is::<Refused>() => Observed::ServiceError,
        None => Observed::Unexpected(format!("error: {error}")),
    }
}

fn observe_err_style(result: Result<Answer<&'static str>, BoxError>) -> Observed {
    let answer = match result {
        Ok(answer) => answer,
        Err(error) => return rejected(error),
    };
    let state = answer.state();
    match (answer.source(), *answer.get_ref()) {
        (Source::Fallback(reason), "fallback") => Observed::Skipped {
            state,
            reason,
            next_probe: answer.next_probe(),
        },
        (source @ (Source::Service | Source::Probe), "answer") => Observed::Called {
            state,
            probe: source == Source::Probe,
            success: true,
        },
        (source, value) => Observed::Unexpected(format!("{source} answered {value:?}")),
    }
}

fn observe_classified_style(result: Result<Answer<Reply>, BoxError>) -> Observed {
    let answer = match result {
        Ok(answer) => answer,
        Err(error) => return rejected(error),
    };
    let state = answer.state();
    match (answer.source(), *answer.get_ref()) {
        (Source::Fallback(reason), Reply::Fallback) => Observed::Skipped {
            state,
            reason,
            next_probe: answer.next_probe(),
        },
        (source @ (Source::Service | Source::Probe), reply @ (Reply::Ok | Reply::Failed)) => {
            Observed::Called {
                state,
                probe: source == Source::Probe,
                success: reply == Reply::Ok,
            }
        }
        (source, value) => Observed::Unexpected(format!("{source} answered {value:?}")),
    }
}

fn fail(error: impl fmt::Display) -> TestCaseError {
    TestCaseError::fail(error.to_string())
}

/// Runs `case` through `svc`, one call a step, comparing each step and the breaker's
/// snapshot after it with the model.
async fn drive<S, R>(
    case: &Case,
    style: Style,
    handle: &CircuitBreakerHandle,
    mut svc: S,
    calls: &Calls,
    observe: fn(Result<Answer<R>, BoxError>) -> Observed,
) -> Result<(), TestCaseError>
where
    S: Service<u64, Response = Answer<R>, Error = BoxError> + Clone,
{
    let mut model = Reference::new(case.threshold, case.cooldown);
    for (step, fate, killed) in case.steps() {
        if killed {
            handle.kill_switch().kill();
        } else {
            handle.kill_switch().revive();
        }
        let (found, said) = model.step(step, fate, killed);
        let before = calls.lock().unwrap().len();
        let observed = match fate {
            Fate::Abandon => {
                let mut spare = svc.clone();
                spare.ready().await.map_err(fail)?;
                drop(spare);
                Observed::NoCall
            }
            Fate::Drop => {
                let mut future = pin!(svc.ready().await.map_err(fail)?.call(step));
                match futures::poll!(future.as_mut()) {
                    Poll::Pending => Observed::Pending,
                    Poll::Ready(result) => observe(result),
                }
            }
            Fate::Succeed | Fate::Fail => {
                observe(svc.ready().await.map_err(fail)?.call(step).await)
            }
        };
        // An abandoned reservation shows the caller nothing, whatever was decided.
        let want = match fate {
            Fate::Abandon => Observed::NoCall,
            _ => expected(found, said, style),
        };
        prop_assert_eq!(
            observed,
            want,
            "step {} ({:?}, killed: {})",
            step,
            fate,
            killed
        );
        let called = calls.lock().unwrap()[before..].to_vec();
        let want = if said.made() { vec![step] } else { vec![] };
        prop_assert_eq!(called, want, "wrapped service calls at step {}", step);

        let snapshot = handle.snapshot();
        prop_assert_eq!(snapshot.state, model.state, "state after step {}", step);
        prop_assert_eq!(
            snapshot.consecutive_failures,
            model.fails,
            "consecutive failures after step {}",
            step
        );
        prop_assert_eq!(snapshot.killed, killed);
        prop_assert_eq!(snapshot.counts.arrived, step);
        prop_assert_eq!(snapshot.probes_in_flight, 0, "after step {}", step);
        check_counts(&snapshot.counts, &model.counts, 0, step)?;
    }
    let snapshot = handle.snapshot();
    prop_assert_eq!(snapshot.counts.made, calls.lock().unwrap().len() as u64);
    prop_assert_eq!(snapshot.counts.arrived, case.fates.len() as u64);
    Ok(())
}

/// A current-thread runtime whose clock is paused: nothing waits on the wall clock, and
/// the half-open dwell limit never passes by itself.
fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime builds")
}

fn breaker(threshold: u32, cooldown: u64) -> Result<CircuitBreakerLayer, TestCaseError> {
    CircuitBreakerLayer::builder()
        .name("model")
        .failure_threshold(threshold)
        .cooldown(Cooldown::Calls(cooldown))
        .build()
        .map_err(fail)
}

/// Builds the real layer for `style`, with or without a fallback, around a scripted
/// service, and drives `case` through it.
fn run_layer(case: &Case, style: Style, with_fallback: bool) -> Result<(), TestCaseError> {
    paused_runtime().block_on(async {
        let layer = breaker(case.threshold, case.cooldown)?;
        let handle = layer.handle();
        let script = Arc::new(case.fates.clone());
        let calls = Calls::default();
        match (style, with_fallback) {
            (Style::ErrResults, true) => {
                let svc = layer
                    .with_fallback(service_fn(|_: u64| async {
                        Ok::<_, Infallible>("fallback")
                    }))
                    .layer(err_service(script, calls.clone()));
                drive(case, style, &handle, svc, &calls, observe_err_style).await
            }
            (Style::ErrResults, false) => {
                let svc = layer.layer(err_service(script, calls.clone()));
                drive(case, style, &handle, svc, &calls, observe_err_style).await
            }
            (Style::ClassifiedReplies, true) => {
                let svc = layer
                    .with_classifier(classify_reply)
                    .with_fallback(service_fn(|_: u64| async {
                        Ok::<_, Infallible>(Reply::Fallback)
                    }))
                    .layer(reply_service(script, calls.clone()));
                drive(case, style, &handle, svc, &calls, observe_classified_style).await
            }
            (Style::ClassifiedReplies, false) => {
                let svc = layer
                    .with_classifier(classify_reply)
                    .layer(reply_service(script, calls.clone()));
                drive(case, style, &handle, svc, &calls, observe_classified_style).await
            }
        }
    })
}

proptest! {
    // No regression files: this suite writes nothing outside tests/model.rs.
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn layer_matches_reference_model_with_err_results_and_fallback(case in cases()) {
        run_layer(&case, Style::ErrResults, true)?;
    }

    #[test]
    fn layer_matches_reference_model_with_err_results_rejecting_skips(case in cases()) {
        run_layer(&case, Style::ErrResults, false)?;
    }

    #[test]
    fn layer_matches_reference_model_with_classified_replies_and_fallback(case in cases()) {
        run_layer(&case, Style::ClassifiedReplies, true)?;
    }

    #[test]
    fn layer_matches_reference_model_with_classified_replies_rejecting_skips(case in cases()) {
        run_layer(&case, Style::ClassifiedReplies, false)?;
    }
}

// ---------------------------------------------------------------------------------------
// The README's replay example: threshold 3, cooldown 4, the kill switch at steps 9 and 10
// ---------------------------------------------------------------------------------------

const README_OUTCOMES: &str = "11000111101100001111";

fn readme_case(kill: &[u64]) -> Case {
    let fates: Vec<Fate> = README_OUTCOMES
        .chars()
        .map(|c| if c == '1' { Fate::Succeed } else { Fate::Fail })
        .collect();
    let killed = (1..=fates.len() as u64)
        .map(|step| kill.contains(&step))
        .collect();
    Case {
        threshold: 3,
        cooldown: 4,
        fates,
        killed,
    }
}

fn trace_line(step: u64, found: State, said: Said) -> String {
    format!("{step} {found}:{}", said.word())
}

fn calls_made_line(made: u64, steps: usize) -> String {
    format!("calls made: {made} / {steps}")
}

/// The trace the reference model gives.
fn model_trace(case: &Case) -> Vec<String> {
    let mut model = Reference::new(case.threshold, case.cooldown);
    let mut lines: Vec<String> = case
        .steps()
        .map(|(step, fate, killed)| {
            let (found, said) = model.step(step, fate, killed);
            trace_line(step, found, said)
        })
        .collect();
    lines.push(calls_made_line(model.counts.made, case.fates.len()));
    lines
}

/// The trace the real layer gives, as `examples/replay.rs` prints it: classified
/// replies, a fallback, one call a step.
async fn layer_trace(case: &Case) -> (Vec<String>, Counts) {
    let layer = breaker(case.threshold, case.cooldown).unwrap();
    let handle = layer.handle();
    let calls = Calls::default();
    let mut svc = layer
        .with_classifier(classify_reply)
        .with_fallback(service_fn(|_: u64| async {
            Ok::<_, Infallible>(Reply::Fallback)
        }))
        .layer(reply_service(Arc::new(case.fates.clone()), calls.clone()));
    let mut lines = Vec::new();
    for (step, _, killed) in case.steps() {
        if killed {
            handle.kill_switch().kill();
        } else {
            handle.kill_switch().revive();
        }
        let answer = svc.ready().await.unwrap().call(step).await.unwrap();
        let word = match (answer.source(), answer.get_ref()) {
            (Source::Fallback(_), _) => "skipped",
            (_, Reply::Ok) => "model",
            (_, _) => "failed",
        };
        lines.push(format!("{step} {}:{word}", answer.state()));
    }
    let made = calls.lock().unwrap().len() as u64;
    lines.push(calls_made_line(made, case.fates.len()));
    (lines, handle.snapshot().counts)
}

fn lines(text: &str) -> Vec<String> {
    text.lines().map(|line| line.trim().to_string()).collect()
}

#[tokio::test(start_paused = true)]
async fn known_twenty_call_trace_without_a_kill() {
    let want = lines(
        "1 closed:model
         2 closed:model
         3 closed:failed
         4 closed:failed
         5 closed:failed
         6 open:skipped
         7 open:skipped
         8 open:skipped
         9 half_open:model
         10 closed:failed
         11 closed:model
         12 closed:model
         13 closed:failed
         14 closed:failed
         15 closed:failed
         16 open:skipped
         17 open:skipped
         18 open:skipped
         19 half_open:model
         20 closed:model
         calls made: 14 / 20",
    );
    let case = readme_case(&[]);
    assert_eq!(model_trace(&case), want, "the reference model");
    let (trace, counts) = layer_trace(&case).await;
    assert_eq!(trace, want, "the layer");
    assert_eq!(
        (
            counts.arrived,
            counts.made,
            counts.probes,
            counts.skipped_open
        ),
        (20, 14, 2, 6)
    );
    assert_eq!(
        (counts.successes, counts.failures, counts.skipped_killed),
        (7, 7, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn known_twenty_call_trace_with_a_kill_at_steps_9_and_10() {
    let want = lines(
        "1 closed:model
         2 closed:model
         3 closed:failed
         4 closed:failed
         5 closed:failed
         6 open:skipped
         7 open:skipped
         8 open:skipped
         9 open:skipped
         10 open:skipped
         11 half_open:model
         12 closed:model
         13 closed:failed
         14 closed:failed
         15 closed:failed
         16 open:skipped
         17 open:skipped
         18 open:skipped
         19 half_open:model
         20 closed:model
         calls made: 12 / 20",
    );
    let case = readme_case(&[9, 10]);
    assert_eq!(model_trace(&case), want, "the reference model");
    let (trace, counts) = layer_trace(&case).await;
    assert_eq!(trace, want, "the layer");
    assert_eq!(
        (
            counts.arrived,
            counts.made,
            counts.probes,
            counts.skipped_open
        ),
        (20, 12, 2, 6)
    );
    assert_eq!(
        (counts.successes, counts.failures, counts.skipped_killed),
        (6, 6, 2)
    );
}
