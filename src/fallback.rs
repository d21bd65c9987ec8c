//! What answers while the breaker is open: a fallback service, or a typed error.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tower::util::Oneshot;
use tower::Service;

use crate::error::{BoxError, Rejected};
use crate::machine::Skip;

/// No fallback: a skipped call fails fast with [`Rejected`].
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFallback;

mod sealed {
    pub trait Sealed<Request> {}
}

/// What a [`CircuitBreaker`](crate::CircuitBreaker) can call instead of the wrapped
/// service: [`NoFallback`], or a [`Fallback`] around any cloneable `tower::Service`
/// with the same response type whose error converts into [`BoxError`].
///
/// It is sealed; set a fallback with
/// [`CircuitBreakerLayer::with_fallback`](crate::CircuitBreakerLayer::with_fallback).
/// The clone is used only when a call reserved for the wrapped service is turned away at
/// the last moment (the kill switch flipped, or the breaker opened, between `poll_ready`
/// and `call`): that clone is driven to readiness inside the response future.
pub trait FallbackService<Request, Response>: sealed::Sealed<Request> {
    /// The fallback's future.
    type Future: Future<Output = Result<Response, BoxError>>;

    #[doc(hidden)]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>>;

    #[doc(hidden)]
    fn call(&mut self, request: Request, skip: Skip, name: &Arc<str>) -> Self::Future;

    #[doc(hidden)]
    fn call_unready(&mut self, request: Request, skip: Skip, name: &Arc<str>) -> Self::Future;
}

impl<Request> sealed::Sealed<Request> for NoFallback {}

impl<Request, Response> FallbackService<Request, Response> for NoFallback {
    type Future = std::future::Ready<Result<Response, BoxError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request, skip: Skip, name: &Arc<str>) -> Self::Future {
        std::future::ready(Err(Rejected::new(name.clone(), skip).into()))
    }

    fn call_unready(&mut self, request: Request, skip: Skip, name: &Arc<str>) -> Self::Future {
        FallbackService::<Request, Response>::call(self, request, skip, name)
    }
}

/// A fallback service, as set by
/// [`CircuitBreakerLayer::with_fallback`](crate::CircuitBreakerLayer::with_fallback).
#[derive(Debug, Clone)]
pub struct Fallback<F> {
    inner: F,
}

impl<F> Fallback<F> {
    pub(crate) fn new(inner: F) -> Self {
        Fallback { inner }
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

impl<Request, F> sealed::Sealed<Request> for Fallback<F> {}

impl<Request, Response, F> FallbackService<Request, Response> for Fallback<F>
where
    F: Service<Request, Response = Response> + Clone,
    F::Error: Into<BoxError>,
{
    type Future = FallbackFuture<F, Request>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request, _: Skip, _: &Arc<str>) -> Self::Future {
        FallbackFuture {
            kind: Kind::Called {
                future: self.inner.call(request),
            },
        }
    }

    fn call_unready(&mut self, request: Request, _: Skip, _: &Arc<str>) -> Self::Future {
        FallbackFuture {
            kind: Kind::Oneshot {
                future: Oneshot::new(self.inner.clone(), request),
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
