//! [`RetryBuilder`]: the retry policy's settings, checked when it is built, and
//! [`RetryConfigError`], what a bad one gets.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use tower::retry::budget::{Budget, TpsBudget};

use super::layer::RetryLayer;
use super::policy::Common;
use crate::CircuitBreakerHandle;

/// A setting of a [`RetryBuilder`] that cannot work, found when the policy is built.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RetryConfigError {
    /// At least one attempt (the call itself) must be allowed.
    #[error("retry attempts must be at least 1 (the call itself), got 0")]
    ZeroAttempts,
    /// A zero backoff base makes every wait zero: retries at once, into the same failure.
    #[error("retry backoff base must not be zero")]
    ZeroBackoffBase,
    /// A zero cap makes every wait zero.
    #[error("retry backoff cap must not be zero")]
    ZeroBackoffCap,
    /// The first wait would be above the cap.
    #[error("retry backoff base ({base:?}) is above its cap ({cap:?})")]
    BackoffBaseAboveCap {
        /// The first wait's bound.
        base: Duration,
        /// The longest wait.
        cap: Duration,
    },
    /// A [`TpsBudget`]'s window must be from 1 to 60 seconds.
    #[error("retry budget window must be from 1s to 60s, got {0:?}")]
    BudgetWindow(Duration),
    /// A [`TpsBudget`]'s retry ratio must be a number from 0.0 to 1000.0.
    #[error("retry budget ratio must be a number from 0.0 to 1000.0, got {0}")]
    BudgetRatio(f32),
    /// A [`TpsBudget`]'s reserve must be below `i32::MAX` retries a second.
    #[error("retry budget reserve must be below 2147483647 (i32::MAX) retries a second, got {0}")]
    BudgetReserve(u32),
}

/// The settings of a [`RetryLayer`]; made by [`RetryLayer::builder`], checked by
/// [`build`](Self::build).
///
/// | Setting | Default | Meaning |
/// | --- | --- | --- |
/// | [`max_attempts`](Self::max_attempts) | 3 | calls to the service for one user call, the first included |
/// | [`backoff`](Self::backoff) | 500 ms, 8 s | the n-th retry (from 0) waits a random time in `[0, min(cap, base * 2^n)]` (full jitter) |
/// | [`max_retry_after_wait`](Self::max_retry_after_wait) | 5 s | the longest `Retry-After` waited for; a longer one is returned at once |
/// | [`budget`](Self::budget) / [`tps_budget`](Self::tps_budget) | `TpsBudget::default()`: retries up to 20% of calls over 10 s, plus 10 a second | retries across every call the policy serves |
/// | [`breaker`](Self::breaker) | none | the breaker outside: no retry once it would skip a call (open, killed, forced open) |
/// | [`jitter_seed`](Self::jitter_seed) | random | the jitter's seed, for reproducible runs |
///
/// ```
/// use std::time::Duration;
/// use tower_circuit_breaker::retry::{RetryConfigError, RetryLayer};
///
/// let retry = RetryLayer::builder()
///     .max_attempts(4)
///     .backoff(Duration::from_millis(200), Duration::from_secs(5))
///     .max_retry_after_wait(Duration::from_secs(2))
///     .tps_budget(Duration::from_secs(10), 5, 0.1)
///     .build()?;
/// assert_eq!(retry.policy().max_attempts(), 4);
///
/// let err = RetryLayer::builder().max_attempts(0).build().unwrap_err();
/// assert_eq!(err, RetryConfigError::ZeroAttempts);
/// # Ok::<(), RetryConfigError>(())
/// ```
#[derive(Clone)]
pub struct RetryBuilder {
    max_attempts: u32,
    base: Duration,
    cap: Duration,
    max_retry_after_wait: Duration,
    budget: BudgetSetting,
    breaker: Option<CircuitBreakerHandle>,
    jitter_seed: Option<u64>,
}

/// The budget as set: built when the policy is, so that its settings are checked then.
#[derive(Clone)]
enum BudgetSetting {
    Tps {
        window: Duration,
        min_per_sec: u32,
        retry_ratio: f32,
    },
    Given(Arc<dyn Budget + Send + Sync>),
}

/// The defaults of the OpenAI SDKs (two retries, from half a second up to 8 s).
const DEFAULT_MAX_ATTEMPTS: u32 = 3;
const DEFAULT_BASE: Duration = Duration::from_millis(500);
const DEFAULT_CAP: Duration = Duration::from_secs(8);
/// A few seconds: longer than a burst of rate limiting usually asks for, short enough
/// that a user's call is not held for long before the breaker and its fallback answer.
const DEFAULT_MAX_RETRY_AFTER_WAIT: Duration = Duration::from_secs(5);

impl Default for RetryBuilder {
    fn default() -> Self {
        RetryBuilder {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            base: DEFAULT_BASE,
            cap: DEFAULT_CAP,
            max_retry_after_wait: DEFAULT_MAX_RETRY_AFTER_WAIT,
            // tower's `TpsBudget::default()`.
            budget: BudgetSetting::Tps {
                window: Duration::from_secs(10),
                min_per_sec: 10,
                retry_ratio: 0.2,
            },
            breaker: None,
            jitter_seed: None,
        }
    }
}

impl RetryLayer {
    /// A builder with the defaults: 3 attempts, backoff from 500 ms up to 8 s,
    /// `Retry-After` waited up to 5 s, tower's default retry budget.
    pub fn builder() -> RetryBuilder {
        RetryBuilder::new()
    }
}

impl RetryBuilder {
    /// The builder with its defaults (see the table above).
    pub fn new() -> Self {
        Self::default()
    }

    /// How many times one user call may reach the service, the first call included:
    /// 1 never retries. Default 3.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Exponential backoff with full jitter: the n-th retry (counted from 0) waits a
    /// random time in `[0, min(cap, base * 2^n)]`. Default 500 ms and 8 s. A
    /// `Retry-After` replaces the backoff for the retry it asks for.
    pub fn backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.base = base;
        self.cap = cap;
        self
    }

    /// The longest wait a failure's `Retry-After` ([`Failure::requested_wait`], as the
    /// service asked, before any bound a classifier sets on the breaker's wait) may ask
    /// for and still be retried: a wait up to this long is waited, exactly, and the call
    /// retried; a longer one ends the call at once with that failure, so that the breaker
    /// outside opens for it and its fallback answers. Default 5 s. `Duration::ZERO` waits
    /// for nothing: only `Retry-After: 0` is retried.
    ///
    /// [`Failure::requested_wait`]: crate::Failure::requested_wait
    pub fn max_retry_after_wait(mut self, wait: Duration) -> Self {
        self.max_retry_after_wait = wait;
        self
    }

    /// A [`TpsBudget`] built from these settings when the policy is (checked then,
    /// where `TpsBudget::new` would panic): over a `window` of 1 to 60 s, retries may
    /// be `retry_ratio` of the calls (0.2: one retry for five calls), plus
    /// `min_per_sec` a second whatever the calls. Default 10 s, 10, 0.2 (tower's
    /// `TpsBudget::default()`).
    pub fn tps_budget(mut self, window: Duration, min_per_sec: u32, retry_ratio: f32) -> Self {
        self.budget = BudgetSetting::Tps {
            window,
            min_per_sec,
            retry_ratio,
        };
        self
    }

    /// A budget of your own, or one shared with other policies (keep a clone of the
    /// `Arc`). The policy deposits once per user call (one whose request could be kept for
    /// a retry) and withdraws once per retry;
    /// a retry the budget refuses is not made.
    pub fn budget<B>(mut self, budget: Arc<B>) -> Self
    where
        B: Budget + Send + Sync + 'static,
    {
        self.budget = BudgetSetting::Given(budget);
        self
    }

    /// The breaker this policy sits inside: a retry is not sent once that breaker would
    /// skip a call (opened by other calls' failures meanwhile, killed, forced open), and
    /// the last result is returned. It is asked when a retry is decided and, in a
    /// [`RetryLayer`](super::RetryLayer)'s service, whenever the breaker changes during
    /// the retry's wait and when the wait is over: a person's kill or forced opening
    /// during the wait ends it at once (a failover moves on to the next provider then,
    /// not after a `Retry-After` of seconds). Without it, an attempt admitted before the
    /// breaker opened keeps its retries. Not set by default.
    pub fn breaker(mut self, handle: CircuitBreakerHandle) -> Self {
        self.breaker = Some(handle);
        self
    }

    /// Seeds the jitter, for reproducible runs. By default each policy draws a
    /// random seed.
    pub fn jitter_seed(mut self, seed: u64) -> Self {
        self.jitter_seed = Some(seed);
        self
    }

    /// The layer, with the default classifier (every `Err` is a transient failure) and
    /// requests kept by cloning them; give it the breaker's classifier with
    /// [`RetryLayer::with_classifier`].
    ///
    /// # Errors
    ///
    /// The first setting that cannot work, as a [`RetryConfigError`].
    pub fn build(self) -> Result<RetryLayer, RetryConfigError> {
        if self.max_attempts == 0 {
            return Err(RetryConfigError::ZeroAttempts);
        }
        if self.base.is_zero() {
            return Err(RetryConfigError::ZeroBackoffBase);
        }
        if self.cap.is_zero() {
            return Err(RetryConfigError::ZeroBackoffCap);
        }
        if self.base > self.cap {
            return Err(RetryConfigError::BackoffBaseAboveCap {
                base: self.base,
                cap: self.cap,
            });
        }
        let budget: Arc<dyn Budget + Send + Sync> = match self.budget {
            BudgetSetting::Given(budget) => budget,
            BudgetSetting::Tps {
                window,
                min_per_sec,
                retry_ratio,
            } => {
                // `TpsBudget::new`'s own assertions, as errors.
                if window < Duration::from_secs(1) || window > Duration::from_secs(60) {
                    return Err(RetryConfigError::BudgetWindow(window));
                }
                if !(0.0..=1000.0).contains(&retry_ratio) {
                    return Err(RetryConfigError::BudgetRatio(retry_ratio));
                }
                if min_per_sec >= i32::MAX as u32 {
                    return Err(RetryConfigError::BudgetReserve(min_per_sec));
                }
                Arc::new(TpsBudget::new(window, min_per_sec, retry_ratio))
            }
        };
        let seed = self
            .jitter_seed
            .unwrap_or_else(|| RandomState::new().hash_one("tower-circuit-breaker retry"));
        Ok(RetryLayer::from_common(Common::new(
            self.max_attempts,
            self.base,
            self.cap,
            self.max_retry_after_wait,
            budget,
            self.breaker,
            seed,
        )))
    }
}

impl fmt::Debug for RetryBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("RetryBuilder");
        debug
            .field("max_attempts", &self.max_attempts)
            .field("base", &self.base)
            .field("cap", &self.cap)
            .field("max_retry_after_wait", &self.max_retry_after_wait);
        match &self.budget {
            BudgetSetting::Tps {
                window,
                min_per_sec,
                retry_ratio,
            } => debug
                .field("budget_window", window)
                .field("budget_min_per_sec", min_per_sec)
                .field("budget_retry_ratio", retry_ratio),
            BudgetSetting::Given(_) => debug.field("budget", &"given"),
        };
        debug
            .field("breaker", &self.breaker.as_ref().map(|b| b.name()))
            .field("jitter_seed", &self.jitter_seed)
            .finish()
    }
}
