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
use crate::shared::{Brief, Lease, Quick, Shared, Ticket};

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
    /// A call reserved on the closed state's lock-free path (most calls), kept apart
    /// from `reserved` so the common path reads and writes two words.
    fast: Lease<false>,
    /// A skip decided on a lock-free path (open, forced open, half-open full, killed):
    /// a word and a time.
    brief: Option<Brief>,
    /// Any other reservation.
    reserved: Option<Reserved>,
}

/// What `poll_ready` decided for the next call, unless it was a lock-free call.
enum Reserved {
    Call(Ticket),
    Skip(Skip),
}

impl<S, F, C> CircuitBreaker<S, F, C> {
    /// Holds `admission` for the next call.
    #[inline]
    fn reserve(&mut self, admission: Admission) {
        match admission {
            Admission::Call(permit) if permit.is_fast() && permit.is_recorded() => {
                self.fast = Lease::new(self.shared.clone(), permit.epoch());
            }
            Admission::Call(permit) => {
                self.reserved = Some(Reserved::Call(Ticket::new(self.shared.clone(), permit)));
            }
            Admission::Skip(skip) => self.reserved = Some(Reserved::Skip(skip)),
        }
    }

    /// Decides the next call when it cannot be leased on the closed state's path: kept
    /// out of line so that path stays small.
    #[inline(never)]
    fn decide(&mut self) {
        match self.shared.admit_quick() {
            Quick::Lease(epoch) => self.fast = Lease::new(self.shared.clone(), epoch),
            Quick::Skip(brief) => self.brief = Some(brief),
            quick => {
                let admission = self.shared.admission(quick);
                self.reserve(admission);
            }
        }
    }

    /// Records a failure for the reserved call: the wrapped service failed or panicked
    /// in `poll_ready`.
    fn fail_reserved(&mut self, message: String) {
        let failure = Outcome::failure_with(message);
        if self.fast.is_held() {
            self.fast.take().called().settle(failure, None);
        } else if let Some(Reserved::Call(mut ticket)) = self.reserved.take() {
            ticket.mark_called();
            ticket.settle(failure, None);
        }
    }

    pub(crate) fn new(inner: S, shared: Arc<Shared>, fallback: F, classifier: C) -> Self {
        CircuitBreaker {
            inner,
            fallback,
            classifier,
            shared,
            fast: Lease::EMPTY,
            brief: None,
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

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.fast.is_held() {
            // Waiting for the wrapped service while the kill switch was flipped or the
            // breaker opened: decide again rather than keep waiting on it.
            if !self.fast.still_valid() {
                let admission = self.fast.take().revalidate(&self.shared);
                self.reserve(admission);
            }
        } else if self.brief.is_some() {
            // A skip stands as decided: the fallback answers.
        } else if self.reserved.is_none() {
            match self.shared.admit_fast() {
                Some(epoch) => self.fast = Lease::new(self.shared.clone(), epoch),
                None => self.decide(),
            }
        } else if let Some(Reserved::Call(ticket)) = &self.reserved {
            if !self.shared.still_valid(ticket.permit()) {
                if let Some(Reserved::Call(ticket)) = self.reserved.take() {
                    self.reserve(ticket.revalidate());
                }
            }
        }
        if self.brief.is_some() || matches!(self.reserved, Some(Reserved::Skip(_))) {
            return self.fallback.poll_ready(cx);
        }
        let inner = &mut self.inner;
        match catch_unwind(AssertUnwindSafe(|| inner.poll_ready(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(Ok(()))) => Poll::Ready(Ok(())),
            Ok(Poll::Ready(Err(error))) => {
                let error: BoxError = error.into();
                self.fail_reserved(format!("poll_ready failed: {error}"));
                Poll::Ready(Err(error))
            }
            Err(panic) => {
                self.fail_reserved("the service panicked in poll_ready".to_owned());
                resume_unwind(panic)
            }
        }
    }

    #[inline]
    fn call(&mut self, request: Request) -> Self::Future {
        if self.fast.is_held() {
            let lease = self.fast.take();
            if lease.still_valid() {
                let classifier = self.classifier.clone();
                return ResponseFuture::call_fast(
                    &mut self.inner,
                    request,
                    lease.called(),
                    classifier,
                );
            }
            let admission = lease.revalidate(&self.shared);
            return self.call_decided_again(request, admission);
        }
        if let Some(brief) = self.brief.take() {
            let future = self.fallback.call(request, brief.skip(), &self.shared.name);
            return ResponseFuture::skipped(future, brief);
        }
        match self
            .reserved
            .take()
            .expect("poll_ready must be called first")
        {
            Reserved::Skip(skip) => {
                let future = self.fallback.call(request, skip, &self.shared.name);
                ResponseFuture::fallback(future, skip)
            }
            Reserved::Call(ticket) if self.shared.still_valid(ticket.permit()) => {
                let classifier = self.classifier.clone();
                ResponseFuture::call_service(&mut self.inner, request, ticket, classifier)
            }
            Reserved::Call(ticket) => self.call_decided_again(request, ticket.revalidate()),
        }
    }
}

impl<S, F, C> CircuitBreaker<S, F, C> {
    /// Carries out a call decided again in `call` (the kill switch was flipped or the
    /// state changed since `poll_ready`): the wrapped service was polled ready, the
    /// fallback was not.
    fn call_decided_again<Request>(
        &mut self,
        request: Request,
        admission: Admission,
    ) -> ResponseFuture<S::Future, F::Future, C>
    where
        S: Service<Request>,
        F: FallbackService<Request, S::Response>,
        C: Clone,
    {
        match admission {
            Admission::Call(permit) => {
                let shared = self.shared.clone();
                let classifier = self.classifier.clone();
                ResponseFuture::admitted(&mut self.inner, request, shared, permit, classifier)
            }
            Admission::Skip(skip) => {
                let future = self.fallback.call_unready(request, skip, &self.shared.name);
                ResponseFuture::fallback(future, skip)
            }
        }
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
            .field(
                "reserved",
                &(self.fast.is_held() || self.reserved.is_some()),
            )
            .finish()
    }
}
