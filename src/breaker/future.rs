//! [`ResponseFuture`]: the future of a call through a breaker; [`Changed`]: the future of
//! a breaker's next change.

// Each `#[inline(always)]` here pays in the awaited benchmark (the future, the fallbacks
// and the error constructors: docs/performance.md, "Inlining").
use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;

pub use crate::breaker::changed::Changed;

use crate::breaker::answer::{Answer, Origin, Verdict};
use crate::breaker::classify::Classify;
use crate::breaker::clock::now;
use crate::breaker::error::{BoxError, BreakerError};
use crate::breaker::nanos::Nanos;
use crate::breaker::outcome::Outcome;
use crate::breaker::settle::Settlement;
use crate::breaker::shared::Permit;
use crate::breaker::state::Skip;
use crate::error_text::text_with_sources;

pin_project! {
    /// The future of a call through a [`CircuitBreaker`](crate::CircuitBreaker): the
    /// wrapped service's answer, classified and recorded when it completes, or the
    /// fallback's answer to a call that was not made.
    ///
    /// Dropped before it completes, it records nothing: the call counts as cancelled,
    /// and a probe slot it held is freed. If the wrapped service's future or the
    /// classifier panics, the call is recorded as a failure and the panic goes on to
    /// the caller.
    pub struct ResponseFuture<SF, FF, C> {
        #[pin]
        kind: Kind<SF, FF, C>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<SF, FF, C> {
        // The wrapped service was called.
        Called {
            #[pin]
            future: SF,
            // `None` once the outcome is given. Dropped with the permit still in it (the
            // future dropped before it completed), the permit counts the call as
            // cancelled.
            permit: Option<Permit>,
            classifier: C,
            // When the call started, if it is timed for the slow-call rule (one word: the
            // future of most calls is not timed, and a smaller future is a faster one).
            started: Started,
        },
        // The call was not made: the fallback answers.
        Answered {
            #[pin]
            future: FF,
            skip: Skip,
        },
    }
}

impl<SF, FF, C> ResponseFuture<SF, FF, C> {
    /// Calls the wrapped service under `permit`. A panic in its `call` is recorded as a
    /// failure and passed on to the caller.
    #[inline(always)]
    pub(in crate::breaker) fn call<S, Request>(
        inner: &mut S,
        request: Request,
        mut permit: Permit,
        classifier: C,
    ) -> Self
    where
        S: tower::Service<Request, Future = SF>,
    {
        permit.mark_called();
        let (permit, started) = Started::at(permit);
        match catch_unwind(AssertUnwindSafe(|| inner.call(request))) {
            Ok(future) => ResponseFuture {
                kind: Kind::Called {
                    future,
                    permit: Some(permit),
                    classifier,
                    started,
                },
            },
            Err(panic) => panicked(Some(permit), "the service panicked", panic),
        }
    }

    /// The fallback's answer to a call decided as `skip`.
    #[inline]
    pub(in crate::breaker) fn answered(future: FF, skip: Skip) -> Self {
        ResponseFuture {
            kind: Kind::Answered { future, skip },
        }
    }
}

/// When a timed call started, in one word; 0, never read, for a call not timed (its
/// permit says whether it is, from a register).
#[derive(Debug, Clone, Copy)]
struct Started(i64);

impl Started {
    /// Now, if `permit`'s call is timed. The clock is read out of line (inlined, reading
    /// it would cost every call the registers it needs), and the permit goes with it:
    /// kept here across a call that may unwind, it would be kept in memory, to be dropped
    /// then, on every call.
    #[inline(always)]
    fn at(permit: Permit) -> (Permit, Started) {
        if permit.times_calls() {
            Started::now(permit)
        } else {
            (permit, Started(0))
        }
    }

    #[cold]
    #[inline(never)]
    fn now(permit: Permit) -> (Permit, Started) {
        (permit, Started(Nanos::of(now()).0))
    }

    /// How long since the call started, if it was `timed`.
    #[inline(always)]
    fn elapsed(self, timed: bool) -> Option<Duration> {
        timed.then(|| self.since())
    }

    #[cold]
    #[inline(never)]
    fn since(self) -> Duration {
        // Measured in `Nanos`, as the start was kept: on a clock beyond their range (a
        // paused one moved on by centuries) both ends are cut to its end alike.
        let nanos = Nanos::of(now()).0.saturating_sub(self.0).max(0);
        Duration::from_nanos(nanos.unsigned_abs())
    }
}

/// Records a failure for a call that panicked (`message` says where), if its permit is
/// still held, and lets the panic go on. Out of line: only a panic comes here.
#[cold]
#[inline(never)]
fn panicked(permit: Option<Permit>, message: &'static str, panic: Box<dyn Any + Send>) -> ! {
    if let Some(permit) = permit {
        permit.settle(Outcome::failure_with(message), None);
    }
    resume_unwind(panic)
}

/// Classifies a call's result, records its outcome (or hands the right to record it to
/// the classifier, [`Classify::defer`], with a successful answer) and makes the answer,
/// which says what the classifier made of it. A panicking classifier counts as a
/// failure and the panic goes on.
#[inline(always)]
fn conclude<T, E, C, X>(
    result: Result<T, E>,
    classifier: &C,
    permit: Permit,
    elapsed: Option<Duration>,
) -> Result<Answer<T>, X>
where
    E: Into<BoxError>,
    C: Classify<T, E>,
    X: BreakerError,
{
    let outcome = match catch_unwind(AssertUnwindSafe(|| classifier.classify(&result))) {
        Ok(outcome) => outcome,
        Err(panic) => panicked(Some(permit), "the classifier panicked", panic),
    };
    let (source, state) = (permit.source(), permit.state());
    let origin = move |verdict| Origin::called(source, state, verdict);
    match (outcome, result) {
        // A success may be handed on, to be settled when its body ends.
        (Outcome::Success, Ok(mut value)) => {
            let settlement = Settlement::new(permit, elapsed);
            let verdict = match classifier.defer(&mut value, settlement) {
                Err(settlement) => {
                    settlement.success();
                    Verdict::Success
                }
                Ok(()) => Verdict::Deferred,
            };
            Ok(Answer::from_parts(value, origin(verdict)))
        }
        (Outcome::Failure(failure), Err(error)) => {
            let error: BoxError = error.into();
            let failure = failure.with_default_message(|| text_with_sources(&*error));
            permit.settle(Outcome::Failure(failure), elapsed);
            Err(X::service(error))
        }
        // An HTTP 503 is an `Ok`: counted as a failure, and the answer says so.
        (outcome @ (Outcome::Failure(_) | Outcome::Ignored), Ok(value)) => {
            let verdict = if outcome.is_failure() {
                Verdict::Failure
            } else {
                Verdict::Ignored
            };
            permit.settle(outcome, elapsed);
            Ok(Answer::from_parts(value, origin(verdict)))
        }
        (outcome, Err(error)) => {
            permit.settle(outcome, elapsed);
            Err(X::service(error.into()))
        }
    }
}

impl<SF, FF, C, T, E, X> Future for ResponseFuture<SF, FF, C>
where
    SF: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
    FF: Future<Output = Result<T, X>>,
    X: BreakerError,
    C: Classify<T, E>,
{
    type Output = Result<Answer<T>, X>;

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Called {
                future,
                permit,
                classifier,
                started,
            } => {
                let result = match catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
                    Ok(poll) => ready!(poll),
                    Err(panic) => panicked(permit.take(), "the service panicked", panic),
                };
                // Timed before the permit is taken: taken, it would be kept in memory across
                // the clock's call, to be dropped if that unwinds, on every call.
                let elapsed = started.elapsed(permit.as_ref().is_some_and(Permit::times_calls));
                let permit = permit.take().expect("polled after completion");
                Poll::Ready(conclude(result, classifier, permit, elapsed))
            }
            KindProj::Answered { future, skip } => {
                let value = ready!(future.poll(cx))?;
                Poll::Ready(Ok(Answer::from_parts(value, Origin::skipped(*skip))))
            }
        }
    }
}

impl<SF, FF, C> fmt::Debug for ResponseFuture<SF, FF, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Called { .. } => "called",
            Kind::Answered { .. } => "fallback",
        };
        f.debug_struct("ResponseFuture")
            .field("kind", &kind)
            .finish()
    }
}
