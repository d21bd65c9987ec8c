//! What answers while the breaker is open: a fallback service, or an error.

// Each `#[inline(always)]` here pays in the awaited benchmark (the future, the fallbacks
// and the error constructors: docs/performance.md, "Inlining").
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tower::util::Oneshot;
use tower::Service;

use crate::breaker::error::{BoxError, BreakerError, CallError, Rejected};
use crate::breaker::shared::Shared;
use crate::breaker::state::{FailureRecord, Skip};

/// No fallback: a skipped call fails fast with [`Rejected`], boxed into tower's
/// [`BoxError`].
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFallback;

/// No fallback, and typed errors: a skipped call fails fast with
/// [`CallError::Rejected`], which allocates nothing, and the wrapped service's errors come
/// as [`CallError::Service`]. Set with
/// [`CircuitBreakerLayer::with_typed_errors`](crate::CircuitBreakerLayer::with_typed_errors).
#[derive(Debug, Clone, Copy, Default)]
pub struct TypedErrors;

mod sealed {
    pub trait Sealed<Request> {}
}

/// What a [`CircuitBreaker`](crate::CircuitBreaker) can call instead of the wrapped
/// service: [`NoFallback`] or [`TypedErrors`] (a typed error, boxed or not), or a
/// [`Fallback`] around any cloneable `tower::Service` with the same response type whose
/// error converts into [`BoxError`].
///
/// It is sealed; set a fallback with
/// [`CircuitBreakerLayer::with_fallback`](crate::CircuitBreakerLayer::with_fallback).
/// The clone is used only when a call reserved for the wrapped service is turned away at
/// the last moment (the kill switch flipped, or the breaker opened, between `poll_ready`
/// and `call`): that clone is driven to readiness inside the response future.
pub trait FallbackService<Request, Response>: sealed::Sealed<Request> {
    /// What the breaker's calls fail with: [`BoxError`], or [`CallError`] with
    /// [`TypedErrors`].
    type Error: BreakerError;

    /// The fallback's future.
    type Future: Future<Output = Result<Response, Self::Error>>;

    #[doc(hidden)]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>>;

    #[doc(hidden)]
    fn call(&mut self, request: Request, skip: Skip, breaker: &Shared) -> Self::Future;

    #[doc(hidden)]
    fn call_unready(&mut self, request: Request, skip: Skip, breaker: &Shared) -> Self::Future;
}

/// The rejection of a call skipped as `skip` by `breaker`.
#[inline(always)]
fn rejected(skip: Skip, breaker: &Shared) -> Rejected {
    let permanent = breaker.permanent_failure(&skip);
    let permanent = permanent.as_ref().map(|failure| &failure.message);
    Rejected::new(&breaker.name, skip, permanent)
}

/// [`rejected`], boxed: out of line, and back in registers, for the future to be made
/// where the call's other futures are.
#[inline(never)]
fn rejected_boxed(skip: Skip, breaker: &Shared) -> BoxError {
    Box::new(rejected(skip, breaker))
}

impl<Request> sealed::Sealed<Request> for NoFallback {}

impl<Request, Response> FallbackService<Request, Response> for NoFallback {
    type Error = BoxError;
    type Future = std::future::Ready<Result<Response, BoxError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    #[inline(always)]
    fn call(&mut self, _: Request, skip: Skip, breaker: &Shared) -> Self::Future {
        std::future::ready(Err(rejected_boxed(skip, breaker)))
    }

    #[inline(always)]
    fn call_unready(&mut self, request: Request, skip: Skip, breaker: &Shared) -> Self::Future {
        FallbackService::<Request, Response>::call(self, request, skip, breaker)
    }
}

impl<Request> sealed::Sealed<Request> for TypedErrors {}

impl<Request, Response> FallbackService<Request, Response> for TypedErrors {
    type Error = CallError;
    type Future = std::future::Ready<Result<Response, CallError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        Poll::Ready(Ok(()))
    }

    #[inline(always)]
    fn call(&mut self, _: Request, skip: Skip, breaker: &Shared) -> Self::Future {
        std::future::ready(Err(CallError::Rejected(rejected(skip, breaker))))
    }

    #[inline(always)]
    fn call_unready(&mut self, request: Request, skip: Skip, breaker: &Shared) -> Self::Future {
        FallbackService::<Request, Response>::call(self, request, skip, breaker)
    }
}

/// A fallback service, as set by
/// [`CircuitBreakerLayer::with_fallback`](crate::CircuitBreakerLayer::with_fallback)
/// (it gets the request as it is: `M` is [`Plain`]) or
/// [`CircuitBreakerLayer::with_fallback_context`](crate::CircuitBreakerLayer::with_fallback_context)
/// (it gets a [`Skipped`] request that says why: `M` is [`WithSkip`]).
#[derive(Debug, Clone)]
pub struct Fallback<F, M = Plain> {
    inner: F,
    _mode: PhantomData<fn() -> M>,
}

/// The fallback gets the request as it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct Plain;

/// The fallback gets a [`Skipped`] request: the request, why it was skipped and when the
/// breaker will next let a probe through.
#[derive(Debug, Clone, Copy, Default)]
pub struct WithSkip;

/// A request the breaker did not send to the wrapped service, as a context-aware fallback
/// receives it: with why, and when to come back. Nothing here is looked up later, so a
/// fallback that says "unavailable, retry after T" tells the truth of the moment the call
/// was decided.
///
/// ```
/// use std::convert::Infallible;
/// use tower::{service_fn, Layer, Service, ServiceExt};
/// use tower_circuit_breaker::CircuitBreakerLayer;
/// use tower_circuit_breaker::fallback::Skipped;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let layer = CircuitBreakerLayer::builder().name("model").build()?;
/// layer.handle().force_open();
/// let layer = layer.with_fallback_context(service_fn(|skipped: Skipped<String>| async move {
///     let Skipped { request, skip, breaker, .. } = skipped;
///     Ok::<_, Infallible>(format!("{breaker} is unavailable ({}); not asked: {request}", skip.reason()))
/// }));
/// let mut svc = layer.layer(service_fn(|q: String| async move { Ok::<_, Infallible>(q) }));
/// let answer = svc.ready().await?.call("2+2".to_string()).await?;
/// assert_eq!(answer.into_inner(), "model is unavailable (forced_open); not asked: 2+2");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Skipped<Request> {
    /// The request.
    pub request: Request,
    /// Why it was skipped, the state found, and when the next probe may go.
    pub skip: Skip,
    /// The breaker's name.
    pub breaker: Arc<str>,
    /// When a failure that does not pass by itself holds the breaker open until a person
    /// resets it (an exhausted quota, a revoked key: [`Failure::permanent`]), that
    /// failure, as the classifier described it; `None` otherwise. The skip alone says
    /// only that a person must act ([`NextProbe::Manual`]); this says why.
    ///
    /// [`Failure::permanent`]: crate::Failure::permanent
    /// [`NextProbe::Manual`]: crate::NextProbe::Manual
    pub permanent_failure: Option<FailureRecord>,
    /// When the service asked to be left alone until, if that is later than the skip's
    /// next probe (a `Retry-After` above the breaker's
    /// [`max_retry_after`](crate::Builder::max_retry_after): the breaker probes at its
    /// cap, and this is what the service asked for, so that an answer can say "retry
    /// after 3 days"); `None` otherwise. Set when [`Skip::asked_longer`] says so.
    pub requested_until: Option<std::time::Instant>,
}

/// How a fallback of mode `M` receives a request.
pub trait FallbackMode<Request>: sealed::Sealed<Request> {
    /// What the fallback service is called with.
    type Call;

    #[doc(hidden)]
    fn wrap(request: Request, skip: Skip, breaker: &Shared) -> Self::Call;
}

impl<Request> sealed::Sealed<Request> for Plain {}
impl<Request> sealed::Sealed<Request> for WithSkip {}

impl<Request> FallbackMode<Request> for Plain {
    type Call = Request;

    fn wrap(request: Request, _: Skip, _: &Shared) -> Request {
        request
    }
}

impl<Request> FallbackMode<Request> for WithSkip {
    type Call = Skipped<Request>;

    fn wrap(request: Request, skip: Skip, breaker: &Shared) -> Skipped<Request> {
        Skipped {
            request,
            skip,
            breaker: breaker.name.full().clone(),
            permanent_failure: breaker.permanent_failure(&skip),
            requested_until: breaker.requested_until(&skip),
        }
    }
}

impl<F, M> Fallback<F, M> {
    pub(in crate::breaker) fn new(inner: F) -> Self {
        Fallback {
            inner,
            _mode: PhantomData,
        }
    }

    /// The fallback service.
    pub fn get_ref(&self) -> &F {
        &self.inner
    }

    /// The fallback service, mutably.
    pub fn get_mut(&mut self) -> &mut F {
        &mut self.inner
    }
}

impl<Request, F, M> sealed::Sealed<Request> for Fallback<F, M> {}

impl<Request, Response, F, M> FallbackService<Request, Response> for Fallback<F, M>
where
    M: FallbackMode<Request>,
    F: Service<M::Call, Response = Response> + Clone,
    F::Error: Into<BoxError>,
{
    type Error = BoxError;
    type Future = FallbackFuture<F, M::Call>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    #[inline(always)]
    fn call(&mut self, request: Request, skip: Skip, breaker: &Shared) -> Self::Future {
        FallbackFuture {
            kind: Kind::Called {
                future: self.inner.call(M::wrap(request, skip, breaker)),
            },
        }
    }

    fn call_unready(&mut self, request: Request, skip: Skip, breaker: &Shared) -> Self::Future {
        FallbackFuture {
            kind: Kind::Oneshot {
                future: Oneshot::new(self.inner.clone(), M::wrap(request, skip, breaker)),
            },
        }
    }
}

pin_project! {
    /// The future of a fallback service's answer.
    pub struct FallbackFuture<F, Request>
    where
        F: Service<Request>,
    {
        #[pin]
        kind: Kind<F, Request>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, Request>
    where
        F: Service<Request>,
    {
        Called { #[pin] future: F::Future },
        Oneshot { #[pin] future: Oneshot<F, Request> },
    }
}

impl<F, Request> Future for FallbackFuture<F, Request>
where
    F: Service<Request>,
    F::Error: Into<BoxError>,
{
    type Output = Result<F::Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let result = match self.project().kind.project() {
            KindProj::Called { future } => ready!(future.poll(cx)),
            KindProj::Oneshot { future } => ready!(future.poll(cx)),
        };
        Poll::Ready(result.map_err(Into::into))
    }
}

impl<F, Request> fmt::Debug for FallbackFuture<F, Request>
where
    F: Service<Request>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FallbackFuture").finish_non_exhaustive()
    }
}
