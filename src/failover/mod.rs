//! Provider failover: an ordered list of model services, each under its own breaker, and
//! a call that goes to the first one that answers ([`Failover`]).
//!
//! LiteLLM's `fallbacks=[...]`, OpenRouter's `models: [...]`: when the primary model is
//! down, rate-limited or killed by an operator, the next one answers, and the answer says
//! which one did and why the others were passed.
//!
//! - A call goes to the providers in order. One whose breaker skips the call (open,
//!   killed, forced open, its probe slots taken) is passed at once: nothing reaches it.
//! - A call a provider makes and fails (an error, or an answer its breaker's classifier
//!   called a failure: 5xx, 429, a timeout with the HTTP classifier) moves on to the next
//!   provider, as the [`FailoverPolicy`] says (the default, [`OnFailure`]: every counted
//!   failure; a caller's 4xx is the answer). The provider's breaker counted the failure
//!   once.
//! - No provider is tried twice for one call; each breaker counts at most one outcome.
//! - When every provider is passed, the failover's fallback answers (a saved answer, an
//!   honest "unavailable, retry after T"), told the [`Route`] and the earliest time a
//!   provider will take a call again ([`Route::retry_after`]); without one, the call
//!   fails with [`NoProviderAnswered`].
//! - Every answer is [`Routed`]: the answering breaker's [`Answer`] (its provenance) and
//!   the [`Route`]: the provider that answered and each one passed, with why. With the
//!   `http` feature, `http::RouteHeadersLayer` (feature `http`) writes it onto the
//!   response as headers.
//!
//! Each provider is any service answering [`Answer<R>`]: a
//! [`CircuitBreaker`](crate::CircuitBreaker) around the provider's client, with or
//! without typed errors; a fallback of its own is read as a skip. Its request is made
//! from the caller's by the provider's adapter (model name, base URL, headers), or
//! cloned.
//!
//! ```
//! use tower::{service_fn, BoxError, Service, ServiceExt};
//! use tower_circuit_breaker::failover::{Failover, PassReason};
//! use tower_circuit_breaker::{CircuitBreakerLayer, Reason};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let primary = CircuitBreakerLayer::builder().name("primary").build()?;
//! let secondary = CircuitBreakerLayer::builder().name("secondary").build()?;
//! let (primary_handle, secondary_handle) = (primary.handle(), secondary.handle());
//! let model = |name: &'static str| {
//!     service_fn(move |prompt: String| async move { Ok::<_, BoxError>(format!("{name}: {prompt}")) })
//! };
//!
//! let mut chat = Failover::builder()
//!     .provider("primary", primary_handle.clone(), tower::Layer::layer(&primary, model("primary")))
//!     .provider("secondary", secondary_handle, tower::Layer::layer(&secondary, model("secondary")))
//!     .build()?;
//!
//! let answer = chat.ready().await?.call("hi".to_string()).await?;
//! assert_eq!((answer.provider(), answer.get_ref().as_str()), (Some("primary"), "primary: hi"));
//!
//! primary_handle.kill_switch().kill(); // an operator stops the primary
//! let answer = chat.ready().await?.call("hi".to_string()).await?;
//! assert_eq!(answer.provider(), Some("secondary"));
//! assert_eq!(answer.route().passed()[0].why().reason(), Some(Reason::Killed));
//! assert_eq!(answer.route().to_string(), "answered by secondary; passed primary (killed by its kill switch, until a person acts)");
//! # Ok(()) }
//! ```

mod policy;
mod route;

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::util::BoxCloneSyncService;
use tower::{BoxError, Service, ServiceExt};

pub use self::policy::{Attempted, FailoverPolicy, OnFailure};
pub use self::route::{PassReason, Passed, Route, Routed};

use crate::error::Rejected;
use crate::error_text::text_with_sources;
use crate::{redact, Answer, CircuitBreakerHandle, NextProbe, Origin, Source};

/// Makes a provider's request from the caller's; `None`: it cannot be made (a body that
/// cannot be cloned, say), and the provider is passed.
type Prepare<Request> = Arc<dyn Fn(&Request) -> Option<Request> + Send + Sync>;

/// One provider: its name, its breaker's handle, its service and its request adapter.
struct Provider<S, Request> {
    name: Arc<str>,
    handle: CircuitBreakerHandle,
    service: S,
    prepare: Prepare<Request>,
}

impl<S: Clone, Request> Clone for Provider<S, Request> {
    fn clone(&self) -> Self {
        Provider {
            name: self.name.clone(),
            handle: self.handle.clone(),
            service: self.service.clone(),
            prepare: self.prepare.clone(),
        }
    }
}

/// What the failover's fallback is given when no provider answered: the caller's
/// request and the [`Route`] (every provider passed, and why).
#[derive(Debug)]
pub struct Unanswered<Request> {
    /// The caller's request, as it came.
    pub request: Request,
    /// Every provider, passed, in order.
    pub route: Route,
}

/// No provider answered the call and the failover has no fallback: every provider's
/// breaker skipped it or its call failed. The route says why for each;
/// [`retry_after`](Self::retry_after) when a provider takes calls again.
#[derive(Debug, Clone, thiserror::Error)]
#[error("no provider answered: {route}")]
pub struct NoProviderAnswered {
    route: Route,
}

impl NoProviderAnswered {
    /// Every provider, passed, in order, with why.
    pub fn route(&self) -> &Route {
        &self.route
    }

    /// The earliest wait until a provider's breaker takes a call again, when every
    /// provider was skipped with a known time ([`Route::retry_after`]).
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        self.route.retry_after()
    }
}

/// A failover that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FailoverConfigError {
    /// No provider was given.
    #[error("a failover needs at least one provider")]
    NoProviders,
    /// Two providers have the same name: routes and headers could not tell them apart.
    #[error("two providers are named `{0}`: give each its own name")]
    DuplicateProvider(String),
    /// A provider's name is empty, or has a character other than visible ASCII, or a
    /// `,` or `;` (it is written in the `x-circuit-breaker-passed` header).
    #[error("provider name {0:?}: use visible ASCII without `,` or `;`")]
    InvalidName(String),
}

/// The fallback's service, boxed: it answers [`Unanswered`] requests.
type BoxedFallback<Request, R> = BoxCloneSyncService<Unanswered<Request>, R, BoxError>;

/// Sets up a [`Failover`]: providers in order, the policy, the fallback.
pub struct FailoverBuilder<S, Request, P = OnFailure, R = ()> {
    providers: Vec<Provider<S, Request>>,
    policy: P,
    fallback: Option<BoxedFallback<Request, R>>,
}

impl<S, Request, P: fmt::Debug, R> fmt::Debug for FailoverBuilder<S, Request, P, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailoverBuilder")
            .field(
                "providers",
                &self.providers.iter().map(|p| &p.name).collect::<Vec<_>>(),
            )
            .field("policy", &self.policy)
            .field("fallback", &self.fallback.is_some())
            .finish()
    }
}

impl<S, Request, R> Default for FailoverBuilder<S, Request, OnFailure, R> {
    fn default() -> Self {
        FailoverBuilder {
            providers: Vec::new(),
            policy: OnFailure,
            fallback: None,
        }
    }
}

impl<S, Request, P, R> FailoverBuilder<S, Request, P, R> {
    /// The next provider, tried after those added before it: its name (in routes and
    /// headers), its breaker's handle (for the admin service and the earliest retry), and
    /// its service (its breaker around its client). The caller's request is cloned for
    /// it.
    pub fn provider(
        self,
        name: impl Into<Arc<str>>,
        handle: CircuitBreakerHandle,
        service: S,
    ) -> Self
    where
        Request: Clone + 'static,
    {
        self.provider_with(name, handle, service, |request: &Request| {
            Some(request.clone())
        })
    }

    /// The next provider, with its request made from the caller's by `prepare`: its
    /// model name, base URL and key, say. `None` from `prepare` passes the provider
    /// ([`PassReason::NotPrepared`]).
    pub fn provider_with(
        mut self,
        name: impl Into<Arc<str>>,
        handle: CircuitBreakerHandle,
        service: S,
        prepare: impl Fn(&Request) -> Option<Request> + Send + Sync + 'static,
    ) -> Self {
        self.providers.push(Provider {
            name: name.into(),
            handle,
            service,
            prepare: Arc::new(prepare),
        });
        self
    }

    /// When a call a provider made moves on to the next one ([`FailoverPolicy`]; a
    /// closure over [`Attempted`] will do).
    pub fn policy<P2>(self, policy: P2) -> FailoverBuilder<S, Request, P2, R> {
        FailoverBuilder {
            providers: self.providers,
            policy,
            fallback: self.fallback,
        }
    }

    /// What answers when no provider did: a service from [`Unanswered`] to the
    /// providers' response type (a saved answer, an honest "unavailable").
    pub fn fallback<F, R2>(self, fallback: F) -> FailoverBuilder<S, Request, P, R2>
    where
        F: Service<Unanswered<Request>, Response = R2> + Clone + Send + Sync + 'static,
        F::Error: Into<BoxError>,
        F::Future: Send + 'static,
        Request: 'static,
    {
        FailoverBuilder {
            providers: self.providers,
            policy: self.policy,
            fallback: Some(BoxCloneSyncService::new(fallback.map_err(Into::into))),
        }
    }

    /// The failover; an error if there is no provider or two share a name.
    pub fn build(self) -> Result<Failover<S, Request, P, R>, FailoverConfigError> {
        if self.providers.is_empty() {
            return Err(FailoverConfigError::NoProviders);
        }
        let mut names = HashSet::new();
        for provider in &self.providers {
            let name = &provider.name;
            let valid = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b',' && b != b';');
            if !valid {
                return Err(FailoverConfigError::InvalidName(name.to_string()));
            }
            if !names.insert(provider.name.clone()) {
                return Err(FailoverConfigError::DuplicateProvider(
                    provider.name.to_string(),
                ));
            }
        }
        Ok(Failover {
            providers: self.providers.into(),
            policy: Arc::new(self.policy),
            fallback: self.fallback,
        })
    }
}

/// Provider failover as a tower [`Service`]: see the [module docs](self).
///
/// Cloneable; clones share the providers (each clone calls a clone of each provider's
/// service, so every breaker is shared). Always ready: each provider is made ready in the
/// call itself, as its turn comes.
pub struct Failover<S, Request, P = OnFailure, R = ()> {
    providers: Arc<[Provider<S, Request>]>,
    policy: Arc<P>,
    fallback: Option<BoxedFallback<Request, R>>,
}

impl Failover<(), (), OnFailure, ()> {
    /// A builder with no provider yet.
    pub fn builder<S, Request, R>() -> FailoverBuilder<S, Request, OnFailure, R> {
        FailoverBuilder::default()
    }
}

impl<S, Request, P, R> Failover<S, Request, P, R> {
    /// Every provider's breaker, in order: for an
    /// `admin::Admin` service that lists them all, or a health check.
    pub fn handles(&self) -> impl Iterator<Item = &CircuitBreakerHandle> {
        self.providers.iter().map(|provider| &provider.handle)
    }

    /// Every provider's name, in order.
    pub fn providers(&self) -> impl Iterator<Item = &str> {
        self.providers.iter().map(|provider| &*provider.name)
    }
}

impl<S, Request, P, R> Clone for Failover<S, Request, P, R> {
    fn clone(&self) -> Self {
        Failover {
            providers: self.providers.clone(),
            policy: self.policy.clone(),
            fallback: self.fallback.clone(),
        }
    }
}

impl<S, Request, P, R> fmt::Debug for Failover<S, Request, P, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Failover")
            .field("providers", &self.providers().collect::<Vec<_>>())
            .field("policy", &std::any::type_name::<P>())
            .field("fallback", &self.fallback.is_some())
            .finish()
    }
}

impl<S, Request, P, R> Service<Request> for Failover<S, Request, P, R>
where
    S: Service<Request, Response = Answer<R>> + Clone + Send + Sync + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    P: FailoverPolicy<R> + Send + Sync + 'static,
    Request: Send + 'static,
    R: Send + 'static,
{
    type Response = Routed<R>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Routed<R>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.route(request).await })
    }
}

impl<S, Request, P, R> Failover<S, Request, P, R>
where
    S: Service<Request, Response = Answer<R>> + Clone,
    S::Error: Into<BoxError>,
    P: FailoverPolicy<R>,
{
    /// Tries the providers in order; the first answer kept is the call's.
    async fn route(self, request: Request) -> Result<Routed<R>, BoxError> {
        let mut route = Route::default();
        // The providers whose calls failed, for the fallback answer's provenance.
        let mut failed: Vec<&CircuitBreakerHandle> = Vec::new();
        for provider in self.providers.iter() {
            let name = &provider.name;
            let Some(prepared) = (provider.prepare)(&request) else {
                route.pass(name.clone(), PassReason::NotPrepared);
                continue;
            };
            let result = provider
                .service
                .clone()
                .oneshot(prepared)
                .await
                .map_err(Into::into);
            let attempted = match &result {
                Ok(answer) => match answer.source() {
                    Source::Fallback(_) => {
                        let skip = answer.skip().expect("a skipped call's answer has its skip");
                        route.pass(name.clone(), PassReason::Skipped(skip));
                        continue;
                    }
                    Source::FallbackAfterFailure => {
                        let message = recorded_failure(&provider.handle);
                        route.pass(name.clone(), PassReason::Failed(message));
                        failed.push(&provider.handle);
                        continue;
                    }
                    // A provider that is itself a failover could prepare nothing either.
                    Source::FallbackNotPrepared => {
                        route.pass(name.clone(), PassReason::NotPrepared);
                        continue;
                    }
                    _ => Attempted::Answered(answer),
                },
                Err(error) => match rejection(error) {
                    Some(rejected) => {
                        route.pass(name.clone(), PassReason::Skipped(rejected.skip()));
                        continue;
                    }
                    None => Attempted::Failed(error),
                },
            };
            if !self.policy.fail_over(&attempted) {
                return result.map(|answer| Routed::new(answer, route.answered_by(name.clone())));
            }
            let message = match self.policy.describe(&attempted) {
                Some(message) => message,
                None => match &attempted {
                    Attempted::Failed(error) => text_with_sources(error.as_ref()),
                    Attempted::Answered(_) => recorded_failure(&provider.handle),
                },
            };
            route.pass(
                name.clone(),
                PassReason::Failed(redact(&message).into_owned()),
            );
            failed.push(&provider.handle);
        }
        let Some(fallback) = self.fallback.clone() else {
            return Err(NoProviderAnswered { route }.into());
        };
        let origin = unanswered_origin(&route, &failed);
        let unanswered = Unanswered {
            request,
            route: route.clone(),
        };
        let response = fallback.oneshot(unanswered).await?;
        Ok(Routed::new(Answer::from_parts(response, origin), route))
    }
}

/// The rejection in a breaker's error, boxed or typed.
fn rejection(error: &BoxError) -> Option<&Rejected> {
    Rejected::find(&**error)
}

/// The failure the provider's breaker recorded last, redacted.
fn recorded_failure(handle: &CircuitBreakerHandle) -> String {
    match handle.snapshot().last_failure {
        Some(failure) => redact(&failure.message).into_owned(),
        None => "its answer was called a failure".to_owned(),
    }
}

/// The provenance of the fallback's answer, told the breaker that takes a call soonest:
/// when every provider was skipped, the earliest of their skips; when no request could
/// be prepared for any, [`Origin::not_prepared`]; when a call failed, a
/// fallback after a failure, with the state and next probe of the soonest among the
/// skipped providers and the failed ones' breakers as they are now. A failed provider's
/// breaker still closed takes a call now: no wait is told then, and so no `Retry-After`.
fn unanswered_origin(route: &Route, failed: &[&CircuitBreakerHandle]) -> Origin {
    let now = route::now();
    let skips = route
        .passed()
        .iter()
        .filter_map(|passed| match passed.why() {
            PassReason::Skipped(skip) => Some(*skip),
            _ => None,
        });
    if failed.is_empty() {
        return match skips.min_by_key(|skip| takes_a_call_in(skip.next_probe(), now)) {
            Some(skip) => Origin::skipped(skip),
            // Only providers whose requests could not be made: none was asked.
            None => Origin::not_prepared(),
        };
    }
    let after_failures = failed.iter().map(|handle| {
        let snapshot = handle.snapshot();
        (snapshot.state, snapshot.next_probe)
    });
    let soonest = after_failures
        .chain(skips.map(|skip| (skip.state(), skip.next_probe())))
        .min_by_key(|&(_, next_probe)| takes_a_call_in(next_probe, now));
    let (state, next_probe) = soonest.expect("a provider failed");
    Origin::fallback_after_failure(state, next_probe)
}

/// How long until a breaker whose next probe is `next_probe` takes a call: none when it
/// is closed; the longest when only calls, a probe under way or a person decide.
fn takes_a_call_in(next_probe: NextProbe, now: std::time::Instant) -> std::time::Duration {
    match next_probe {
        NextProbe::NotNeeded => std::time::Duration::ZERO,
        next_probe => next_probe
            .retry_after(now)
            .unwrap_or(std::time::Duration::MAX),
    }
}
