//! What a failover call says about its way: which provider answered ([`Route`]), each
//! provider passed and why ([`Passed`], [`PassReason`]), and the answer with it
//! ([`Routed`]).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Answer, NextProbe, Reason, Skip};

/// Now, on tokio's clock (paused in tests), as the breaker's times are given.
pub(super) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Why a provider did not answer a call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PassReason {
    /// Its breaker did not make the call: open, killed, forced open, or every probe slot
    /// taken. Nothing reached the provider.
    Skipped(Skip),
    /// The call was made and failed (an error, or an answer the breaker's classifier
    /// called a failure, or one the failover policy sends on); the breaker counted it.
    /// The message is [redacted](crate::redact).
    Failed(String),
    /// The request could not be prepared for this provider (its adapter returned `None`,
    /// say a body that cannot be cloned); nothing reached the provider.
    NotPrepared,
}

impl PassReason {
    /// `open`, `killed`, `forced_open`, `half_open_full`, `failed` or `not_prepared`: the
    /// word the `x-circuit-breaker-passed` header uses.
    pub fn as_str(&self) -> &'static str {
        match self {
            PassReason::Skipped(skip) => skip.reason().as_str(),
            PassReason::Failed(_) => "failed",
            PassReason::NotPrepared => "not_prepared",
        }
    }

    /// The breaker's reason, for a skipped provider.
    pub fn reason(&self) -> Option<Reason> {
        match self {
            PassReason::Skipped(skip) => Some(skip.reason()),
            PassReason::Failed(_) | PassReason::NotPrepared => None,
        }
    }
}

impl fmt::Display for PassReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PassReason::Skipped(skip) => {
                f.write_str(match skip.reason() {
                    Reason::Open => "open",
                    Reason::HalfOpenFull => "half-open, its probe under way",
                    Reason::Killed => "killed by its kill switch",
                    Reason::ForcedOpen => "forced open",
                })?;
                match skip.next_probe() {
                    NextProbe::After { at: Some(at), .. } => {
                        let wait = at.saturating_duration_since(now());
                        write!(f, ", tried again in {}", whole_seconds(wait))?;
                        if skip.asked_longer() {
                            f.write_str(" (it asked for longer)")?;
                        }
                        Ok(())
                    }
                    NextProbe::Manual => f.write_str(", until a person acts"),
                    _ => Ok(()),
                }
            }
            PassReason::Failed(message) => write!(f, "failed: {message}"),
            PassReason::NotPrepared => f.write_str("the request could not be prepared for it"),
        }
    }
}

/// `3s`, rounded up to whole seconds (`0s` for none).
fn whole_seconds(wait: Duration) -> String {
    format!("{}s", crate::saved::ceil_secs(wait))
}

/// One provider passed over on the way to an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passed {
    provider: Arc<str>,
    why: PassReason,
}

impl Passed {
    pub(crate) fn new(provider: Arc<str>, why: PassReason) -> Self {
        Passed { provider, why }
    }

    /// The provider's name.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// Why it did not answer.
    pub fn why(&self) -> &PassReason {
        &self.why
    }
}

impl fmt::Display for Passed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.provider, self.why)
    }
}

/// The way one call went: the providers passed, in order, and the one that answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Route {
    answered_by: Option<Arc<str>>,
    passed: Vec<Passed>,
}

impl Route {
    pub(crate) fn pass(&mut self, provider: Arc<str>, why: PassReason) {
        self.passed.push(Passed::new(provider, why));
    }

    pub(crate) fn answered_by(mut self, provider: Arc<str>) -> Self {
        self.answered_by = Some(provider);
        self
    }

    /// The provider that answered; `None` when none did (the failover's fallback
    /// answered, or the call failed with
    /// [`NoProviderAnswered`](super::NoProviderAnswered)).
    pub fn provider(&self) -> Option<&str> {
        self.answered_by.as_deref()
    }

    /// The providers passed over before it, in order, each with its reason.
    pub fn passed(&self) -> &[Passed] {
        &self.passed
    }

    /// The earliest wait until a passed provider's breaker lets a call through, as of
    /// now, when every provider passed was skipped with a known time; `None` when any of
    /// them failed (its breaker may still admit calls) or waits for a person.
    pub fn retry_after(&self) -> Option<Duration> {
        let now = now();
        let mut earliest: Option<Duration> = None;
        for passed in &self.passed {
            let PassReason::Skipped(skip) = passed.why() else {
                return None;
            };
            let wait = skip.retry_after(now)?;
            earliest = Some(earliest.map_or(wait, |earliest| earliest.min(wait)));
        }
        earliest
    }
}

impl fmt::Display for Route {
    /// `answered by local; passed openai (open, tried again in 20s), anthropic (failed:
    /// 503 Service Unavailable)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.answered_by {
            Some(provider) => write!(f, "answered by {provider}")?,
            None => f.write_str("no provider answered")?,
        }
        for (i, passed) in self.passed.iter().enumerate() {
            f.write_str(if i == 0 { "; passed " } else { ", " })?;
            write!(f, "{passed}")?;
        }
        Ok(())
    }
}

/// A failover's answer: the answering breaker's [`Answer`] (or the failover fallback's)
/// and the [`Route`] it took.
#[derive(Debug, Clone)]
pub struct Routed<R> {
    answer: Answer<R>,
    route: Route,
}

impl<R> Routed<R> {
    pub(crate) fn new(answer: Answer<R>, route: Route) -> Self {
        Routed { answer, route }
    }

    /// The answer, with its provenance from the breaker that made it.
    pub fn answer(&self) -> &Answer<R> {
        &self.answer
    }

    /// The way the call went.
    pub fn route(&self) -> &Route {
        &self.route
    }

    /// The provider that answered, if one did.
    pub fn provider(&self) -> Option<&str> {
        self.route.provider()
    }

    /// The response itself.
    pub fn get_ref(&self) -> &R {
        self.answer.get_ref()
    }

    /// The answer and the route.
    pub fn into_parts(self) -> (Answer<R>, Route) {
        (self.answer, self.route)
    }

    /// The answer, the route dropped.
    pub fn into_answer(self) -> Answer<R> {
        self.answer
    }
}
