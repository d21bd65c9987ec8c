// Each `#[inline(always)]` here pays in the awaited benchmark (the permit, the tally and
// the service: docs/performance.md, "Inlining").
use std::fmt;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::Service;

use crate::accessors::inner_service_accessors;
use crate::breaker::answer::Answer;
use crate::breaker::changed::{Changed, WakeOnChange};
use crate::breaker::classify::{Classify, DefaultClassifier};
use crate::breaker::error::{BoxError, BreakerError};
use crate::breaker::fallback::{FallbackService, NoFallback};
use crate::breaker::future::ResponseFuture;
use crate::breaker::handle::CircuitBreakerHandle;
use crate::breaker::outcome::Outcome;
use crate::breaker::shared::{Admitted, Decision, HeldCall, Permit, Shared};
use crate::breaker::state::Skip;

/// A `tower::Service` guarded by a circuit breaker.
///
/// Made by [`CircuitBreakerLayer`](crate::CircuitBreakerLayer); see there for the whole
/// story. Each call is decided in `poll_ready` (a call, a probe, or a skip) and carried
/// out in `call`:
///
/// - a call or probe waits for the wrapped service to be ready and calls it; its
///   outcome is classified and recorded when the response future completes;
/// - a skip waits for the fallback to be ready and calls it (or, with no fallback,
///   fails with [`Rejected`](crate::error::Rejected): boxed into a
///   [`BoxError`], or, with [typed errors](crate::CircuitBreakerLayer::with_typed_errors),
///   as a [`CallError`](crate::error::CallError)). `poll_ready` never fails just because
///   the breaker is open.
///
/// So an open breaker is as ready as its fallback. Under `tower::balance`, which routes by
/// readiness, use [readiness mode](crate::readiness) instead: not ready while open.
///
/// An error from the wrapped service's `poll_ready` counts as a failure and is returned
/// (the service is then unusable, as tower's contract says). If the kill switch is
/// flipped or the breaker changes state between `poll_ready` and `call` (a half-open's
/// dwell limit passing included, whether or not anything looked at the breaker), the
/// call is decided again: the wrapped service is never called while open or killed.
///
/// # Panics
///
/// `call` panics if `poll_ready` has not returned `Ready(Ok(()))` since the last call (use
/// `ServiceExt::ready` or `oneshot`), as tower's contract allows.
///
/// # Clone
///
/// Clones share the breaker; a clone starts without the decision its original may
/// hold, so it must be polled ready itself.
pub struct CircuitBreaker<S, F = NoFallback, C = DefaultClassifier> {
    inner: S,
    fallback: F,
    classifier: C,
    /// The breaker, and the plain call it admitted at once, if that is what `poll_ready`
    /// decided for the next call.
    breaker: Held,
    /// What else `poll_ready` decided for the next call: a call (its permit) or a skip, in
    /// one of these two (each two words, which move in registers: a three-word decision
    /// written here and read back at once costs a stall on every call).
    permit: Option<Permit>,
    skip: Option<Skip>,
    /// The skip held was decided in `call`, after the wrapped service was polled ready:
    /// the fallback was not.
    skip_unready: bool,
    /// The breaker's next change or flip of its kill switch, watched while a call held
    /// waits for the wrapped service to be ready: a kill or an opening sends the waiting
    /// caller to the fallback.
    changes: WakeOnChange<Changed>,
}

impl<S, F, C> CircuitBreaker<S, F, C> {
    pub(in crate::breaker) fn new(
        inner: S,
        shared: Arc<Shared>,
        fallback: F,
        classifier: C,
    ) -> Self {
        CircuitBreaker {
            inner,
            fallback,
            classifier,
            breaker: Held {
                shared,
                admitted: None,
            },
            permit: None,
            skip: None,
            skip_unready: false,
            changes: WakeOnChange::new(),
        }
    }

    /// The breaker's handle.
    pub fn handle(&self) -> CircuitBreakerHandle {
        CircuitBreakerHandle::new(self.breaker.shared.clone())
    }

    inner_service_accessors!(S, into_inner: " A call this service had reserved is handed back.");

    /// Decides the next call, unless a decision is held that still stands: a skip
    /// stands as decided; a call is decided again if the kill switch was flipped or the
    /// breaker moved on while it waited for the wrapped service.
    #[inline(always)]
    fn decide(&mut self) {
        match &self.permit {
            Some(permit) if permit.stands() => return,
            Some(_) => return self.decide_again(),
            None if self.skip.is_some() => return,
            None => {}
        }
        let breaker = &mut self.breaker;
        if let Some(admitted) = breaker.admitted {
            if breaker.shared.still_admits(admitted) {
                return;
            }
            // Handed back, as a permit that no longer stands is: not counted.
            breaker.admitted = None;
        }
        if let Some(admitted) = breaker.shared.admit_at_once() {
            breaker.admitted = Some(admitted);
            return;
        }
        let (permit, skip) = (&mut self.permit, &mut self.skip);
        breaker
            .shared
            .decide_by_door_with(|held| hold(permit, skip, held));
    }

    /// The call held no longer stands: decided again, out of line (see
    /// [`decided_again`](Self::decided_again)).
    #[cold]
    #[inline(never)]
    fn decide_again(&mut self) {
        if let Some(permit) = self.permit.take() {
            permit.withdraw();
        }
        hold(
            &mut self.permit,
            &mut self.skip,
            self.breaker.shared.decide(),
        );
    }

    /// The wrapped service's `poll_ready` failed with `error`: a failure for the call
    /// decided, and the error to return. Out of line, as the next one is.
    #[cold]
    #[inline(never)]
    fn not_ready<E: Into<BoxError>, X: BreakerError>(&mut self, error: E) -> X {
        let error: BoxError = error.into();
        self.fail_decided(format!("poll_ready failed: {error}"));
        X::service(error)
    }

    /// The wrapped service's `poll_ready` panicked: a failure for the call decided, and
    /// the panic goes on.
    #[cold]
    #[inline(never)]
    fn panicked_in_poll_ready(&mut self, panic: Box<dyn std::any::Any + Send>) -> ! {
        self.fail_decided("the service panicked in poll_ready".to_owned());
        resume_unwind(panic)
    }

    /// The call held waits for the wrapped service to be ready: `cx` is woken by the
    /// breaker's next change or flip of its kill switch too, or at once if the call no
    /// longer stands. Out of line: only a service that is not ready comes here.
    #[cold]
    #[inline(never)]
    fn wait_for_changes(&mut self, cx: &mut Context<'_>) {
        let (breaker, permit) = (&self.breaker, &self.permit);
        self.changes.wake_on_change(
            cx,
            || breaker.shared.changed(),
            || breaker.call_stands(permit.as_ref()),
        );
    }

    /// Records a failure for the call decided: the wrapped service failed or panicked
    /// in `poll_ready`.
    fn fail_decided(&mut self, message: String) {
        if let Some(mut permit) = self.take_call() {
            permit.mark_called();
            permit.settle(Outcome::failure_with(message), None);
        }
    }
}

/// A service's breaker, and the plain call it admitted at once for the service's next
/// call, if any: `call` makes its permit. Dropped with the call still held (the service
/// dropped after `poll_ready`), the call counts as abandoned, as a held permit's does.
struct Held {
    shared: Arc<Shared>,
    admitted: Option<Admitted>,
}

impl Held {
    /// Whether the call held (the one admitted at once, else `permit`) still stands, as
    /// [`decide`](CircuitBreaker::decide) asks.
    fn call_stands(&self, permit: Option<&Permit>) -> bool {
        match (self.admitted, permit) {
            (Some(admitted), _) => self.shared.still_admits(admitted),
            (None, Some(permit)) => permit.stands(),
            (None, None) => true,
        }
    }

    /// The permit of the call admitted at once, if one is held.
    #[inline]
    fn take_admitted(&mut self) -> Option<Permit> {
        let admitted = self.admitted.take()?;
        Some(self.shared.permit_for(admitted))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        drop(self.take_admitted());
    }
}

/// Keeps a decision until `call`, in the one of the two places its kind goes to. Both
/// are empty: a decision is made only when none is held.
#[inline(always)]
fn hold(permit: &mut Option<Permit>, skip: &mut Option<Skip>, decision: Decision) {
    debug_assert!(permit.is_none(), "a decision is already held");
    match decision {
        Decision::Call(decided) => *permit = Some(decided),
        Decision::Skip(decided) => *skip = Some(decided),
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
    type Error = F::Error;
    type Future = ResponseFuture<S::Future, F::Future, C>;

    #[inline(always)]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.decide();
        if self.skip.is_some() {
            return self.fallback.poll_ready(cx);
        }
        let inner = &mut self.inner;
        match catch_unwind(AssertUnwindSafe(|| inner.poll_ready(cx))) {
            Ok(Poll::Pending) => {
                self.wait_for_changes(cx);
                Poll::Pending
            }
            Ok(Poll::Ready(Ok(()))) => Poll::Ready(Ok(())),
            Ok(Poll::Ready(Err(error))) => Poll::Ready(Err(self.not_ready(error))),
            Err(panic) => self.panicked_in_poll_ready(panic),
        }
    }

    #[inline(always)]
    fn call(&mut self, request: Request) -> Self::Future {
        // Each kind of future is made here, from values in registers: a future made out of
        // line would meet this one in memory, and every call would copy it from there.
        let permit = match self.take_call() {
            // Without the clock: a call out of line would keep the permit in memory, to
            // be dropped if it unwound, on every call.
            Some(permit) if permit.stands_at_once() => Some(permit),
            Some(permit) => self.decided_again(permit),
            None => None,
        };
        if let Some(permit) = permit {
            let classifier = self.classifier.clone();
            return ResponseFuture::call(&mut self.inner, request, permit, classifier);
        }
        let skip = self.skip.take().expect("poll_ready must be called first");
        let future = if std::mem::take(&mut self.skip_unready) {
            self.fallback
                .call_unready(request, skip, &self.breaker.shared)
        } else {
            self.fallback.call(request, skip, &self.breaker.shared)
        };
        ResponseFuture::answered(future, skip)
    }
}

impl<S, F, C> CircuitBreaker<S, F, C> {
    /// The kill switch was flipped or the breaker moved on since `poll_ready`, or a
    /// half-open's deadline may have passed: unless the call still stands (the clock
    /// says the deadline has not passed), it is decided again. A skip decided now is
    /// kept for the fallback, which was not polled ready. Out of line, as it is rare:
    /// inlined, it would cost every call the registers it needs.
    #[cold]
    #[inline(never)]
    fn decided_again(&mut self, permit: Permit) -> Option<Permit> {
        if permit.stands() {
            return Some(permit);
        }
        // Decided again as `poll_ready` decides a call that no longer stands; a skip
        // decided now finds the fallback not polled ready.
        self.permit = Some(permit);
        self.decide_again();
        self.skip_unready = self.skip.is_some();
        self.permit.take()
    }
}

impl<S, F, C> CircuitBreaker<S, F, C> {
    /// The permit of the call held for the next `call`, taken: made now for the call
    /// admitted at once, else the one `poll_ready` decided.
    #[inline]
    fn take_call(&mut self) -> Option<Permit> {
        self.breaker.take_admitted().or_else(|| self.permit.take())
    }

    /// The call held for the next `call`, if one is.
    fn held_call(&self) -> Option<HeldCall<'_>> {
        let breaker = &self.breaker;
        match (breaker.admitted, &self.permit) {
            (Some(admitted), _) => Some(HeldCall::Admitted(&breaker.shared, admitted)),
            (None, permit) => permit.as_ref().map(HeldCall::Permit),
        }
    }
}

impl<S: Clone, F: Clone, C: Clone> Clone for CircuitBreaker<S, F, C> {
    /// A clone shares the breaker but not this service's decision.
    fn clone(&self) -> Self {
        CircuitBreaker::new(
            self.inner.clone(),
            self.breaker.shared.clone(),
            self.fallback.clone(),
            self.classifier.clone(),
        )
    }
}

impl<S: fmt::Debug, F, C> fmt::Debug for CircuitBreaker<S, F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("name", &self.breaker.shared.name)
            .field("inner", &self.inner)
            .field("fallback", &std::any::type_name::<F>())
            .field("permit", &self.held_call())
            .field("skip", &self.skip)
            .finish()
    }
}
