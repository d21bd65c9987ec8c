use std::fmt;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::Service;

use crate::answer::Answer;
use crate::classify::{Classify, DefaultClassifier, Outcome};
use crate::error::BoxError;
use crate::fallback::{FallbackService, NoFallback};
use crate::future::ResponseFuture;
use crate::handle::CircuitBreakerHandle;
use crate::machine::{Admission, Skip};
use crate::shared::{Shared, Ticket};

/// A `tower::Service` guarded by a circuit breaker.
///
/// Made by [`CircuitBreakerLayer`](crate::CircuitBreakerLayer); see there for the whole
/// story. Each call is admitted in `poll_ready` (a call, a probe, or a skip) and
/// carried out in `call`:
///
/// - a call or probe waits for the wrapped service to be ready and calls it; its
///   outcome is classified and recorded when the response future completes;
/// - a skip waits for the fallback to be ready and calls it (or, with no fallback,
///   fails with [`Rejected`](crate::error::Rejected)). `poll_ready` never fails just
///   because the breaker is open.
///
/// An error from the wrapped service's `poll_ready` counts as a failure and is returned
/// (the service is then unusable, as tower's contract says). If the kill switch is
/// flipped or the breaker opens between `poll_ready` and `call`, the call is decided
/// again and goes to the fallback: the wrapped service is never called while open or
/// killed.
///
/// # Clone
///
/// Clones share the breaker; a clone starts without the reservation its original may
/// hold, so it must be polled ready itself.
pub struct CircuitBreaker<S, F = NoFallback, C = DefaultClassifier> {
    inner: S,
    fallback: F,
    classifier: C,
    shared: Arc<Shared>,
    reserved: Option<Reserved>,
}

/// What `poll_ready` decided for the next call.
enum Reserved {
    Call(Ticket),
    Skip(Skip),
}

impl<S, F, C> CircuitBreaker<S, F, C> {
    fn reserve(&self, admission: Admission) -> Reserved {
        match admission {
            Admission::Call(permit) => Reserved::Call(Ticket::new(self.shared.clone(), permit)),
            Admission::Skip(skip) => Reserved::Skip(skip),
        }
    }

    pub(crate) fn new(inner: S, shared: Arc<Shared>, fallback: F, classifier: C) -> Self {
        CircuitBreaker {
            inner,
            fallback,
            classifier,
            shared,
            reserved: None,
        }
    }

    /// The breaker's handle.
    pub fn handle(&self) -> CircuitBreakerHandle {
        CircuitBreakerHandle::new(self.shared.clone())
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service, unwrapped. A reservation this service held is handed back.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, F, C, Request> Service<Request> for CircuitBreaker<S, F, C>
where
    S: Service<Request>,
    S::Error: Into<BoxError>,
    F: FallbackService<Request, S::Response>,
    C: Classify<S::Response, S::Error> + Clone,
{
    type Response = Answer<S::Response>;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, F::Future, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        let reserved = match self.reserved.take() {
            None => self.reserve(self.shared.admit()),
            // Waiting for the wrapped service while the kill switch was flipped or the
            // breaker opened: decide again rather than keep waiting on it.
            Some(Reserved::Call(ticket)) if !self.shared.still_valid(ticket.permit()) => {
                self.reserve(ticket.revalidate())
            }
            Some(reserved) => reserved,
        };
        let reserved = self.reserved.insert(reserved);
        if let Reserved::Skip(_) = reserved {
            return self.fallback.poll_ready(cx);
        }
        let inner = &mut self.inner;
        match catch_unwind(AssertUnwindSafe(|| inner.poll_ready(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(Ok(()))) => Poll::Ready(Ok(())),
            Ok(Poll::Ready(Err(error))) => {
                let error: BoxError = error.into();
                if let Some(Reserved::Call(mut ticket)) = self.reserved.take() {
                    ticket.mark_called();
                    let message = format!("poll_ready failed: {error}");
                    ticket.settle(Outcome::failure_with(message), None);
                }
                Poll::Ready(Err(error))
            }
            Err(panic) => {
                if let Some(Reserved::Call(mut ticket)) = self.reserved.take() {
                    ticket.mark_called();
                    ticket.settle(
                        Outcome::failure_with("the service panicked in poll_ready"),
                        None,
                    );
                }
                resume_unwind(panic)
            }
        }
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let mut ticket = match self
            .reserved
            .take()
            .expect("poll_ready must be called first")
        {
            Reserved::Skip(skip) => {
                let future = self.fallback.call(request, skip, &self.shared.name);
                return ResponseFuture::fallback(future, skip);
            }
            Reserved::Call(ticket) => ticket,
        };
        if !self.shared.still_valid(ticket.permit()) {
            match self.reserve(ticket.revalidate()) {
                Reserved::Call(fresh) => ticket = fresh,
                Reserved::Skip(skip) => {
                    let future = self.fallback.call_unready(request, skip, &self.shared.name);
                    return ResponseFuture::fallback(future, skip);
                }
            }
        }
        ResponseFuture::call_service(&mut self.inner, request, ticket, self.classifier.clone())
    }
}

impl<S: Clone, F: Clone, C: Clone> Clone for CircuitBreaker<S, F, C> {
    /// A clone shares the breaker but not this service's reservation.
    fn clone(&self) -> Self {
        CircuitBreaker::new(
            self.inner.clone(),
            self.shared.clone(),
            self.fallback.clone(),
            self.classifier.clone(),
        )
    }
}

impl<S: fmt::Debug, F, C> fmt::Debug for CircuitBreaker<S, F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("name", &self.shared.name)
            .field("inner", &self.inner)
            .field("fallback", &std::any::type_name::<F>())
            .field("reserved", &self.reserved.is_some())
            .finish()
    }
}
