//! Replays an outcome sequence through the real breaker layer, one call a step, to see
//! what a threshold and a cooldown would have done (the `replay` example is a command
//! line over this module).
//!
//! The input: a consecutive-failure threshold, a cooldown counted in calls, one digit a
//! step (`1`: the service would succeed, `0`: it would fail) and, optionally, the steps
//! at which the kill switch is on. [`ReplayInput::new`] checks it and says what is wrong
//! with a typed [`ReplayError`]; [`run`] drives a real [`CircuitBreakerLayer`] (a
//! scripted inner service, a classifier, a fallback, the kill switch flipped per step)
//! and returns the [`Trace`]: for each step the state found when the call arrived and
//! what answered, then the calls made.
//!
//! ```
//! use tower_circuit_breaker::replay::{self, ReplayError, ReplayInput};
//! use tower_circuit_breaker::error::ConfigError;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ReplayError> {
//! let input = ReplayInput::new(3, 4, "11000111101100001111", [9, 10])?;
//! let trace = replay::run(&input).await?;
//! let lines = trace.lines();
//! assert_eq!(lines[4], "5 closed:failed");
//! assert_eq!(lines[5], "6 open:skipped");
//! // Killed at 9 and 10: the probe goes at 11.
//! assert_eq!(&lines[8..11], ["9 open:skipped", "10 open:skipped", "11 half_open:model"]);
//! assert_eq!(lines.last().unwrap(), "calls made: 12 / 20");
//!
//! // Bad input is a typed error, never a panic.
//! assert_eq!(ReplayInput::new(3, 4, "10x1", []), Err(ReplayError::BadOutcome { step: 3, found: 'x' }));
//! assert_eq!(ReplayInput::new(3, 4, "1011", [5]), Err(ReplayError::KillStepBeyond { step: 5, steps: 4 }));
//! assert_eq!(ReplayInput::new(0, 4, "1011", []), Err(ReplayError::Config(ConfigError::ZeroThreshold)));
//! # Ok(()) }
//! ```

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tower::{service_fn, Layer, Service, ServiceExt};

use crate::error::ConfigError;
use crate::snapshot::Counts;
use crate::Builder;
use crate::CircuitBreakerLayer;
use crate::Cooldown;
use crate::Outcome;
use crate::Source;
use crate::State;

/// The breaker's name in a replay.
const NAME: &str = "replay";

/// What is wrong with a replay's input (or, never in practice, its run).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The outcomes are empty: there is nothing to replay.
    #[error("outcomes: at least one step is needed")]
    EmptyOutcomes,
    /// A step's outcome is neither `0` nor `1`.
    #[error("outcomes: each step is 0 or 1, got {found:?} at step {step}")]
    BadOutcome {
        /// The step (from 1).
        step: usize,
        /// The character found there.
        found: char,
    },
    /// Steps count from 1.
    #[error("kill steps count from 1, got 0")]
    KillStepZero,
    /// A kill step after the last outcome.
    #[error("kill step {step} is after the last of the {steps} steps")]
    KillStepBeyond {
        /// The kill step.
        step: usize,
        /// How many steps the outcomes have.
        steps: usize,
    },
    /// The threshold or the cooldown is one the breaker's builder refuses.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The breaker failed a call. Its scripted service and fallback never fail, so this
    /// does not happen; it is reported rather than panicked on.
    #[error("step {step}: the call failed: {message}")]
    Call {
        /// The step.
        step: usize,
        /// The error's text.
        message: String,
    },
}

/// A checked replay input: a threshold and a cooldown the builder accepts, at least one
/// outcome, and kill steps among the outcomes' steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayInput {
    threshold: u32,
    cooldown: u64,
    outcomes: Vec<bool>,
    kill: BTreeSet<usize>,
}

impl ReplayInput {
    /// Checks an input. `outcomes` has one character a step, `1` or `0`; `kill` lists
    /// the steps (from 1) at which the kill switch is on, in any order, repeats allowed.
    ///
    /// # Errors
    ///
    /// In this order: [`ReplayError::EmptyOutcomes`], [`ReplayError::BadOutcome`] for the
    /// first character that is not `0` or `1`, [`ReplayError::KillStepZero`] or
    /// [`ReplayError::KillStepBeyond`] for the first bad kill step in the order given,
    /// then [`ReplayError::Config`] with the builder's error for the threshold or the
    /// cooldown (a zero threshold is reported before a zero cooldown).
    pub fn new(
        threshold: u32,
        cooldown: u64,
        outcomes: &str,
        kill: impl IntoIterator<Item = usize>,
    ) -> Result<Self, ReplayError> {
        if outcomes.is_empty() {
            return Err(ReplayError::EmptyOutcomes);
        }
        let outcomes = outcomes
            .chars()
            .enumerate()
            .map(|(i, c)| match c {
                '1' => Ok(true),
                '0' => Ok(false),
                found => Err(ReplayError::BadOutcome { step: i + 1, found }),
            })
            .collect::<Result<Vec<bool>, _>>()?;
        let steps = outcomes.len();
        let kill = kill
            .into_iter()
            .map(|step| match step {
                0 => Err(ReplayError::KillStepZero),
                step if step > steps => Err(ReplayError::KillStepBeyond { step, steps }),
                step => Ok(step),
            })
            .collect::<Result<BTreeSet<usize>, _>>()?;
        builder(threshold, cooldown).build_config()?;
        Ok(ReplayInput {
            threshold,
            cooldown,
            outcomes,
            kill,
        })
    }

    /// The consecutive-failure threshold.
    pub fn threshold(&self) -> u32 {
        self.threshold
    }

    /// The cooldown, in calls.
    pub fn cooldown(&self) -> u64 {
        self.cooldown
    }

    /// One outcome a step: `true` if the service would succeed.
    pub fn outcomes(&self) -> &[bool] {
        &self.outcomes
    }

    /// The steps (from 1) at which the kill switch is on, in order.
    pub fn kill_steps(&self) -> impl Iterator<Item = usize> + '_ {
        self.kill.iter().copied()
    }
}

fn builder(threshold: u32, cooldown: u64) -> Builder {
    Builder::new()
        .name(NAME)
        .failure_threshold(threshold)
        .cooldown(Cooldown::Calls(cooldown))
}

/// What answered one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepAnswer {
    /// The service was called and answered.
    Model,
    /// The service was called and failed.
    Failed,
    /// The service was not called: the fallback answered.
    Skipped,
}

impl StepAnswer {
    /// `model`, `failed` or `skipped`.
    pub fn as_str(&self) -> &'static str {
        match self {
            StepAnswer::Model => "model",
            StepAnswer::Failed => "failed",
            StepAnswer::Skipped => "skipped",
        }
    }
}

impl fmt::Display for StepAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One step of a replay: `STEP STATE:ANSWER` when displayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepLine {
    /// The step, from 1.
    pub step: usize,
    /// The state found when the call arrived (after an open breaker turned half-open
    /// for its probe).
    pub state: State,
    /// What answered.
    pub answer: StepAnswer,
}

impl fmt::Display for StepLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}:{}", self.step, self.state, self.answer)
    }
}

/// What a replay did: one line a step, the calls made, and the breaker's counts.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    steps: Vec<StepLine>,
    calls_made: usize,
    counts: Counts,
}

impl Trace {
    /// One line a step.
    pub fn steps(&self) -> &[StepLine] {
        &self.steps
    }

    /// How many times the scripted service was called.
    pub fn calls_made(&self) -> usize {
        self.calls_made
    }

    /// The breaker's counts at the end.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// What the command line prints: `STEP STATE:ANSWER` a step, then
    /// `calls made: M / N`.
    pub fn lines(&self) -> Vec<String> {
        self.steps
            .iter()
            .map(ToString::to_string)
            .chain([format!(
                "calls made: {} / {}",
                self.calls_made,
                self.steps.len()
            )])
            .collect()
    }
}

impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in self.lines() {
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}

/// What the scripted model returns: its answer, or an error status, as a model client
/// would (an HTTP 503 is a response, and the classifier calls it a failure).
#[derive(Debug, Clone, Copy)]
enum Reply {
    Answer,
    Unavailable,
}

/// Replays `input` through a real [`CircuitBreakerLayer`], one call a step: a scripted
/// service answers or fails as the outcomes say, a classifier counts a 503 as a
/// failure, a fallback answers skipped calls, and the kill switch is on exactly at the
/// kill steps. Needs a Tokio context for the breaker's clock, nothing else.
///
/// # Errors
///
/// [`ReplayError::Config`] if the breaker does not build (a checked input always
/// does); [`ReplayError::Call`] if the breaker failed a call (it does not).
pub async fn run(input: &ReplayInput) -> Result<Trace, ReplayError> {
    let layer: CircuitBreakerLayer = builder(input.threshold, input.cooldown).build()?;
    let handle = layer.handle();
    let layer = layer
        .with_classifier(|result: &Result<Reply, Infallible>| match result {
            Ok(Reply::Answer) => Outcome::Success,
            Ok(Reply::Unavailable) | Err(_) => Outcome::failure_with("503 service unavailable"),
        })
        .with_fallback(service_fn(|_step: usize| async {
            Ok::<_, Infallible>(Reply::Unavailable)
        }));

    let script: Arc<[bool]> = input.outcomes.clone().into();
    let calls = Arc::new(AtomicUsize::new(0));
    let model = {
        let (script, calls) = (script.clone(), calls.clone());
        service_fn(move |step: usize| {
            calls.fetch_add(1, Ordering::SeqCst);
            let reply = if script[step - 1] {
                Reply::Answer
            } else {
                Reply::Unavailable
            };
            async move { Ok::<_, Infallible>(reply) }
        })
    };
    let mut svc = layer.layer(model);

    let mut steps = Vec::with_capacity(script.len());
    for step in 1..=script.len() {
        if input.kill.contains(&step) {
            handle.kill_switch().kill();
        } else {
            handle.kill_switch().revive();
        }
        let failed = |error: crate::error::BoxError| ReplayError::Call {
            step,
            message: error.to_string(),
        };
        let answer = svc
            .ready()
            .await
            .map_err(failed)?
            .call(step)
            .await
            .map_err(failed)?;
        let said = match (answer.source(), answer.get_ref()) {
            (Source::Fallback(_), _) => StepAnswer::Skipped,
            (_, Reply::Answer) => StepAnswer::Model,
            (_, Reply::Unavailable) => StepAnswer::Failed,
        };
        steps.push(StepLine {
            step,
            state: answer.state(),
            answer: said,
        });
    }
    Ok(Trace {
        steps,
        calls_made: calls.load(Ordering::SeqCst),
        counts: handle.snapshot().counts,
    })
}
