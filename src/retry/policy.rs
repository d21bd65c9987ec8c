//! [`RetryPolicy`]: the `tower::retry::Policy` that decides, for each result, whether to
//! call again and after how long.

use std::any::Any;
use std::error::Error;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tower::retry::budget::Budget;
use tower::retry::Policy;

use crate::classify::{Classify, DefaultClassifier};
use crate::error::{BoxError, CallError, Rejected};
use crate::future::Changed;
use crate::recover::{CloneRequests, KeepRequest};
use crate::{Advice, CircuitBreakerHandle, Outcome, Reason};

/// What every clone of a policy shares: the checked settings, the budget and the
/// jitter's random numbers.
pub(crate) struct Common {
    settings: Settings,
    budget: Arc<dyn Budget + Send + Sync>,
    /// The breaker outside, if given: no retry once it would skip a call.
    breaker: Option<CircuitBreakerHandle>,
    /// A splitmix64 counter: each draw advances it once, so clones (one per call) never
    /// draw the same wait in step.
    rng: AtomicU64,
}

/// The checked settings, read by [`next_step`].
#[derive(Debug, Clone, Copy)]
struct Settings {
    max_attempts: u32,
    base: Duration,
    cap: Duration,
    max_retry_after_wait: Duration,
}

impl Common {
    pub(crate) fn new(
        max_attempts: u32,
        base: Duration,
        cap: Duration,
        max_retry_after_wait: Duration,
        budget: Arc<dyn Budget + Send + Sync>,
        breaker: Option<CircuitBreakerHandle>,
        seed: u64,
    ) -> Self {
        Common {
            settings: Settings {
                max_attempts,
                base,
                cap,
                max_retry_after_wait,
            },
            budget,
            breaker,
            rng: AtomicU64::new(seed),
        }
    }

    /// Whether the breaker outside would now skip a call because it is open (other
    /// calls failed), killed or forced open: a retry now would reach a service the
    /// breaker has stopped calling. Its probe slot taken is no reason for a call that
    /// `may_be_probe`: that probe may be this very call.
    fn breaker_skips(&self, may_be_probe: bool) -> bool {
        self.breaker.as_ref().is_some_and(|breaker| {
            matches!(breaker.peek(), Advice::Skip(skip)
                if skip.reason() != Reason::HalfOpenFull || !may_be_probe)
        })
    }

    /// A number in `[0, 1)`: splitmix64, lock-free.
    fn next_random(&self) -> f64 {
        let mut z = self
            .rng
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A `tower::retry::Policy` made for a breaker outside it; see the
/// [module docs](super) for its rules. Made by [`RetryLayer`](super::RetryLayer) (whose
/// services use it), or taken from one with [`RetryLayer::policy`](super::RetryLayer::policy)
/// to give to `tower::retry::Retry` or `ServiceBuilder::retry` yourself.
///
/// ```
/// use std::time::Duration;
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_circuit_breaker::retry::RetryLayer;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let policy = RetryLayer::builder().max_attempts(2).build()?.into_policy();
/// assert_eq!(policy.max_attempts(), 2);
/// assert_eq!(policy.backoff(), (Duration::from_millis(500), Duration::from_secs(8)));
/// let mut svc = ServiceBuilder::new()
///     .retry(policy)
///     .service(service_fn(|_: ()| async { Err::<(), _>(std::io::Error::other("down")) }));
/// // Two attempts, then the last error.
/// assert_eq!(svc.ready().await?.call(()).await.unwrap_err().to_string(), "down");
/// # Ok(()) }
/// ```
///
/// # Clone
///
/// Clones share the settings, the budget and the jitter's random numbers; the
/// classifier and the request keeper are cloned. `tower::retry::Retry` clones the
/// policy for each call, and each clone counts that call's attempts.
pub struct RetryPolicy<C = DefaultClassifier, K = CloneRequests> {
    common: Arc<Common>,
    classifier: C,
    keep: K,
    /// Retries made so far for this call.
    retries: u32,
}

impl RetryPolicy {
    pub(crate) fn from_common(common: Common) -> Self {
        RetryPolicy {
            common: Arc::new(common),
            classifier: DefaultClassifier,
            keep: CloneRequests,
            retries: 0,
        }
    }
}

impl<C, K> RetryPolicy<C, K> {
    /// Whether the breaker given to the policy would now skip a call (open by other
    /// calls' failures, killed, forced open; every probe slot taken, unless the call
    /// `may_be_probe`): a retry whose wait is over is then not sent, and the last result
    /// is returned instead.
    pub(crate) fn breaker_skips(&self, may_be_probe: bool) -> bool {
        self.common.breaker_skips(may_be_probe)
    }

    /// Whether a call starting now may be the probe of the breaker given to the policy:
    /// the breaker is not plainly letting calls through. A call that starts while it is
    /// closed is not its probe, so every probe slot taken later is another call's.
    pub(crate) fn may_be_probe(&self) -> bool {
        self.common
            .breaker
            .as_ref()
            .is_some_and(|breaker| !matches!(breaker.peek(), Advice::Call))
    }

    /// The next change of the breaker given to the policy (a transition, a person's
    /// act), if one was given: a wait ends at once when the breaker would then skip.
    pub(crate) fn breaker_changed(&self) -> Option<Changed> {
        self.common
            .breaker
            .as_ref()
            .map(CircuitBreakerHandle::changed)
    }

    /// The same policy, with `classifier` deciding which results are failures: give it
    /// the breaker's (an `http::HttpClassifier`, say).
    pub fn with_classifier<C2>(self, classifier: C2) -> RetryPolicy<C2, K> {
        RetryPolicy {
            common: self.common,
            classifier,
            keep: self.keep,
            retries: self.retries,
        }
    }

    /// The same policy, keeping each request for a retry with `keep` instead of cloning
    /// it: for a request type that is not `Clone` (`reqwest::Request::try_clone`). A
    /// request it cannot copy (`None`, a streamed body) is sent once and never retried.
    pub fn keep_requests_with<K2>(self, keep: K2) -> RetryPolicy<C, K2> {
        RetryPolicy {
            common: self.common,
            classifier: self.classifier,
            keep,
            retries: self.retries,
        }
    }

    /// How many times one user call may reach the service, the first call included.
    pub fn max_attempts(&self) -> u32 {
        self.common.settings.max_attempts
    }

    /// The backoff's base and cap: the n-th retry waits up to `min(cap, base * 2^n)`.
    pub fn backoff(&self) -> (Duration, Duration) {
        (self.common.settings.base, self.common.settings.cap)
    }

    /// The longest `Retry-After` wait that is waited for and retried.
    pub fn max_retry_after_wait(&self) -> Duration {
        self.common.settings.max_retry_after_wait
    }

    /// The classifier.
    pub fn classifier(&self) -> &C {
        &self.classifier
    }
}

impl<C, K, Req, Res, E> Policy<Req, Res, E> for RetryPolicy<C, K>
where
    C: Classify<Res, E>,
    K: KeepRequest<Req>,
    E: 'static,
{
    type Future = tokio::time::Sleep;

    fn retry(&mut self, _request: &mut Req, result: &mut Result<Res, E>) -> Option<Self::Future> {
        let common = &*self.common;
        if self.retries == 0 {
            // One deposit per user call, at its first result.
            common.budget.deposit();
        }
        let outcome = match result {
            Err(error) if is_rejection(error) => Outcome::Ignored,
            result => self.classifier.classify(result),
        };
        let wait = match next_step(&common.settings, &outcome, self.retries) {
            Step::Return(why) => {
                if !matches!(why, GiveUp::NotAFailure) {
                    tracing::debug!(
                        reason = why.as_str(),
                        attempts = self.retries + 1,
                        "not retried"
                    );
                }
                return None;
            }
            Step::RetryAfter(wait) => wait,
            // Full jitter: anywhere from no wait to the ceiling.
            Step::Backoff { ceiling } => ceiling.mul_f64(common.next_random()),
        };
        if common.breaker_skips(true) {
            tracing::debug!(
                reason = GiveUp::BreakerSkips.as_str(),
                attempts = self.retries + 1,
                "not retried"
            );
            return None;
        }
        if !common.budget.withdraw() {
            tracing::debug!(
                reason = GiveUp::BudgetExhausted.as_str(),
                attempts = self.retries + 1,
                "not retried"
            );
            return None;
        }
        self.retries += 1;
        tracing::debug!(retry = self.retries, ?wait, "retrying");
        Some(tokio::time::sleep(wait))
    }

    fn clone_request(&mut self, request: &Req) -> Option<Req> {
        self.keep.keep(request)
    }
}

/// What to do with the result of the attempt after `retries` retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Return the result to the caller.
    Return(GiveUp),
    /// Wait exactly this long (the service asked), then call again.
    RetryAfter(Duration),
    /// Wait a random time up to `ceiling`, then call again.
    Backoff { ceiling: Duration },
}

/// Why a result is returned rather than retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GiveUp {
    /// A success, an ignored result, a caller's 4xx, a breaker's rejection.
    NotAFailure,
    /// It will not pass by itself (an exhausted quota).
    Permanent,
    /// Every attempt allowed was made.
    AttemptsExhausted,
    /// The service asked for a longer wait than the policy waits for: the breaker
    /// outside opens for it.
    LongRetryAfter,
    /// The breaker outside would skip a call now (open, killed, forced open).
    BreakerSkips,
    /// The retry budget refused the retry.
    BudgetExhausted,
}

impl GiveUp {
    fn as_str(self) -> &'static str {
        match self {
            GiveUp::NotAFailure => "not a failure",
            GiveUp::Permanent => "permanent failure",
            GiveUp::AttemptsExhausted => "attempts exhausted",
            GiveUp::LongRetryAfter => "retry-after above the longest wait",
            GiveUp::BreakerSkips => "the breaker would skip the call",
            GiveUp::BudgetExhausted => "retry budget exhausted",
        }
    }
}

/// Every rule of the policy but the breaker's and the budget's (read from shared state,
/// asked last, in that order), in order: one pure function.
fn next_step(settings: &Settings, outcome: &Outcome, retries: u32) -> Step {
    let Outcome::Failure(failure) = outcome else {
        return Step::Return(GiveUp::NotAFailure);
    };
    if failure.is_permanent() {
        return Step::Return(GiveUp::Permanent);
    }
    if retries.saturating_add(1) >= settings.max_attempts {
        return Step::Return(GiveUp::AttemptsExhausted);
    }
    // The wait the service asked for, not the breaker's bound on it: a retry sent before
    // it would be refused again, and a wait past the longest is handed back at once
    // though a bound (an `HttpClassifier`'s 5 min) is within it.
    match failure.requested_wait() {
        Some(wait) if wait > settings.max_retry_after_wait => Step::Return(GiveUp::LongRetryAfter),
        Some(wait) => Step::RetryAfter(wait),
        None => {
            // base * 2^retries, saturating, then capped.
            let growth = 1u32.checked_shl(retries).unwrap_or(u32::MAX);
            Step::Backoff {
                ceiling: settings.base.saturating_mul(growth).min(settings.cap),
            }
        }
    }
}

/// Whether `error` is a breaker's own rejection (the call was not made): a
/// [`Rejected`], a [`CallError::Rejected`], or a [`BoxError`] holding either, here or
/// among its sources. Retrying it would only be rejected again until the next probe.
fn is_rejection<E: 'static>(error: &E) -> bool {
    let error = error as &dyn Any;
    let error: Option<&(dyn Error + 'static)> = match error.downcast_ref::<BoxError>() {
        Some(boxed) => Some(&**boxed),
        None => error
            .downcast_ref::<Rejected>()
            .map(|rejected| rejected as &(dyn Error + 'static))
            .or_else(|| {
                error
                    .downcast_ref::<CallError>()
                    .map(|e| e as &(dyn Error + 'static))
            }),
    };
    error.and_then(Rejected::find).is_some()
}

impl<C: Clone, K: Clone> Clone for RetryPolicy<C, K> {
    fn clone(&self) -> Self {
        RetryPolicy {
            common: self.common.clone(),
            classifier: self.classifier.clone(),
            keep: self.keep.clone(),
            retries: self.retries,
        }
    }
}

impl<C, K> fmt::Debug for RetryPolicy<C, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let settings = &self.common.settings;
        f.debug_struct("RetryPolicy")
            .field("max_attempts", &settings.max_attempts)
            .field("base", &settings.base)
            .field("cap", &settings.cap)
            .field("max_retry_after_wait", &settings.max_retry_after_wait)
            .field("classifier", &std::any::type_name::<C>())
            .field("retries", &self.retries)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Failure;

    const SETTINGS: Settings = Settings {
        max_attempts: 4,
        base: Duration::from_millis(100),
        cap: Duration::from_millis(350),
        max_retry_after_wait: Duration::from_secs(2),
    };

    #[test]
    fn backoff_ceiling_doubles_up_to_the_cap() {
        let ceilings: Vec<_> = (0..3)
            .map(|retries| next_step(&SETTINGS, &Outcome::failure(), retries))
            .collect();
        assert_eq!(
            ceilings,
            [100, 200, 350].map(|ms| Step::Backoff {
                ceiling: Duration::from_millis(ms)
            })
        );
        let long = Settings {
            max_attempts: u32::MAX,
            ..SETTINGS
        };
        assert_eq!(
            next_step(&long, &Outcome::failure(), 200),
            Step::Backoff {
                ceiling: SETTINGS.cap
            }
        );
    }

    #[test]
    fn the_last_attempt_is_returned() {
        assert_eq!(
            next_step(&SETTINGS, &Outcome::failure(), 3),
            Step::Return(GiveUp::AttemptsExhausted)
        );
    }

    #[test]
    fn retry_after_is_waited_up_to_the_setting_and_returned_above_it() {
        let asks =
            |secs| Outcome::Failure(Failure::new("429").retry_after(Duration::from_secs(secs)));
        assert_eq!(
            next_step(&SETTINGS, &asks(2), 0),
            Step::RetryAfter(Duration::from_secs(2))
        );
        assert_eq!(
            next_step(&SETTINGS, &asks(3), 0),
            Step::Return(GiveUp::LongRetryAfter)
        );
    }

    #[test]
    fn successes_ignored_and_permanent_failures_are_returned() {
        let permanent = Outcome::Failure(Failure::new("quota").permanent());
        assert_eq!(
            next_step(&SETTINGS, &permanent, 0),
            Step::Return(GiveUp::Permanent)
        );
        for outcome in [Outcome::Success, Outcome::Ignored] {
            assert_eq!(
                next_step(&SETTINGS, &outcome, 0),
                Step::Return(GiveUp::NotAFailure)
            );
        }
    }

    #[test]
    fn jitter_draws_spread_over_zero_to_one() {
        let common = Common::new(
            3,
            SETTINGS.base,
            SETTINGS.cap,
            SETTINGS.max_retry_after_wait,
            Arc::new(tower::retry::budget::TpsBudget::default()),
            None,
            7,
        );
        let draws: Vec<f64> = (0..1000).map(|_| common.next_random()).collect();
        assert!(draws.iter().all(|r| (0.0..1.0).contains(r)));
        assert!(draws.iter().any(|&r| r < 0.1) && draws.iter().any(|&r| r > 0.9));
    }
}
