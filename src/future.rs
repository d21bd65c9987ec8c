//! [`ResponseFuture`]: the future of a call through a breaker.

use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use pin_project_lite::pin_project;

use crate::answer::{Answer, Source};
use crate::classify::{Classify, Outcome};
use crate::error::BoxError;
use crate::machine::{NextProbe, Permit, Skip, State};
use crate::settle::{Held, Settlement};
use crate::shared::{now, Brief, Lease, Shared, Ticket};

pin_project! {
    /// The future of a call through a [`CircuitBreaker`](crate::CircuitBreaker): the
    /// wrapped service's answer, classified and recorded when it completes, or the
    /// fallback's answer.
    ///
    /// Dropped before it completes, it records nothing: a probe slot it held is freed.
    /// If the wrapped service's future or the classifier panics, the call is recorded as
    /// a failure and the panic goes on to the caller.
    pub struct ResponseFuture<SF, FF, C> {
        #[pin]
        kind: Kind<SF, FF, C>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<SF, FF, C> {
        // Admitted on the closed state's lock-free path: the common case, kept small.
        Fast {
            #[pin]
            future: SF,
            lease: Lease<true>,
            classifier: C,
        },
        Called {
            #[pin]
            future: SF,
            ticket: Option<Ticket>,
            classifier: C,
            started: Option<Instant>,
        },
        // Skipped on a lock-free path: the fallback answers.
        Skipped {
            #[pin]
            future: FF,
            brief: Brief,
        },
        Fallback {
            #[pin]
            future: FF,
            skip: Skip,
        },
    }
}

impl<SF, FF, C> ResponseFuture<SF, FF, C> {
    /// Calls the wrapped service for a call admitted with `permit` on `shared`.
    pub(crate) fn admitted<S, Request>(
        inner: &mut S,
        request: Request,
        shared: Arc<Shared>,
        permit: Permit,
        classifier: C,
    ) -> Self
    where
        S: tower::Service<Request, Future = SF>,
    {
        if permit.is_fast() && permit.is_recorded() {
            let lease = Lease::new(shared, permit.epoch());
            return Self::call_fast(inner, request, lease, classifier);
        }
        Self::call_service(inner, request, Ticket::new(shared, permit), classifier)
    }

    /// Calls the wrapped service under a lease from the lock-free path. A panic in its
    /// `call` is recorded as a failure and passed on to the caller.
    #[inline]
    pub(crate) fn call_fast<S, Request>(
        inner: &mut S,
        request: Request,
        lease: Lease<true>,
        classifier: C,
    ) -> Self
    where
        S: tower::Service<Request, Future = SF>,
    {
        match catch_unwind(AssertUnwindSafe(|| inner.call(request))) {
            Ok(future) => ResponseFuture {
                kind: Kind::Fast {
                    future,
                    lease,
                    classifier,
                },
            },
            Err(panic) => {
                lease.settle(Outcome::failure_with("the service panicked"), None);
                resume_unwind(panic)
            }
        }
    }

    /// Calls the wrapped service under `ticket`'s permit. A panic in its `call` is
    /// recorded as a failure and passed on to the caller.
    pub(crate) fn call_service<S, Request>(
        inner: &mut S,
        request: Request,
        mut ticket: Ticket,
        classifier: C,
    ) -> Self
    where
        S: tower::Service<Request, Future = SF>,
    {
        ticket.mark_called();
        let started = ticket.times_calls().then(now);
        match catch_unwind(AssertUnwindSafe(|| inner.call(request))) {
            Ok(future) => ResponseFuture {
                kind: Kind::Called {
                    future,
                    ticket: Some(ticket),
                    classifier,
                    started,
                },
            },
            Err(panic) => {
                ticket.settle(Outcome::failure_with("the service panicked"), None);
                resume_unwind(panic)
            }
        }
    }

    #[inline]
    pub(crate) fn skipped(future: FF, brief: Brief) -> Self {
        ResponseFuture {
            kind: Kind::Skipped { future, brief },
        }
    }

    pub(crate) fn fallback(future: FF, skip: Skip) -> Self {
        ResponseFuture {
            kind: Kind::Fallback { future, skip },
        }
    }
}

/// Polls the wrapped service's future; a panic in it is recorded as a failure and
/// passed on.
#[inline]
fn poll_called<F: Future>(
    future: Pin<&mut F>,
    cx: &mut Context<'_>,
    held: impl FnOnce() -> Option<Held>,
) -> Poll<F::Output> {
    match catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
        Ok(poll) => poll,
        Err(panic) => {
            if let Some(held) = held() {
                held.settle(Outcome::failure_with("the service panicked"), None);
            }
            resume_unwind(panic)
        }
    }
}

/// Classifies a call's result and records its outcome, or hands the right to record
/// it to the classifier ([`Classify::defer`]) with a successful answer. A panicking
/// classifier counts as a failure and the panic goes on.
#[inline]
fn conclude<T, E, C>(
    result: Result<T, E>,
    classifier: &C,
    held: Held,
    elapsed: Option<Duration>,
) -> Result<T, BoxError>
where
    E: Into<BoxError>,
    C: Classify<T, E>,
{
    let outcome = match catch_unwind(AssertUnwindSafe(|| classifier.classify(&result))) {
        Ok(outcome) => outcome,
        Err(panic) => {
            held.settle(Outcome::failure_with("the classifier panicked"), None);
            resume_unwind(panic)
        }
    };
    match (outcome, result) {
        // A success may be handed on, to be settled when its body ends.
        (Outcome::Success, Ok(mut value)) => {
            if let Err(settlement) = classifier.defer(&mut value, Settlement::new(held, elapsed)) {
                settlement.success();
            }
            Ok(value)
        }
        (Outcome::Failure(failure), Err(error)) => {
            let error: BoxError = error.into();
            let failure = failure.with_default_message(|| error.to_string());
            held.settle(Outcome::Failure(failure), elapsed);
            Err(error)
        }
        (outcome, result) => {
            held.settle(outcome, elapsed);
            result.map_err(Into::into)
        }
    }
}

impl<SF, FF, C, T, E> Future for ResponseFuture<SF, FF, C>
where
    SF: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
    FF: Future<Output = Result<T, BoxError>>,
    C: Classify<T, E>,
{
    type Output = Result<Answer<T>, BoxError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Fast {
                future,
                lease,
                classifier,
            } => {
                let result = ready!(poll_called(future, cx, || Some(Held::Fast(lease.take()))));
                assert!(lease.is_held(), "polled after completion");
                let result = conclude(result, classifier, Held::Fast(lease.take()), None);
                let next_probe = NextProbe::NotNeeded;
                Poll::Ready(
                    result.map(|value| {
                        Answer::new(value, Source::Service, State::Closed, next_probe)
                    }),
                )
            }
            KindProj::Called {
                future,
                ticket,
                classifier,
                started,
            } => {
                let result = ready!(poll_called(future, cx, || ticket.take().map(Held::Ticket)));
                let ticket = ticket.take().expect("polled after completion");
                let elapsed = started.map(|at| now().saturating_duration_since(at));
                let permit = *ticket.permit();
                let result = conclude(result, classifier, Held::Ticket(ticket), elapsed);
                let source = match permit.shadowed() {
                    Some(reason) => Source::Shadowed(reason),
                    None if permit.is_probe() => Source::Probe,
                    None => Source::Service,
                };
                let next_probe = NextProbe::NotNeeded;
                Poll::Ready(
                    result.map(|value| Answer::new(value, source, permit.state(), next_probe)),
                )
            }
            KindProj::Skipped { future, brief } => {
                let value = ready!(future.poll(cx))?;
                Poll::Ready(Ok(Answer::skipped(value, brief.skip())))
            }
            KindProj::Fallback { future, skip } => {
                let value = ready!(future.poll(cx))?;
                Poll::Ready(Ok(Answer::skipped(value, *skip)))
            }
        }
    }
}

impl<SF, FF, C> fmt::Debug for ResponseFuture<SF, FF, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Fast { .. } | Kind::Called { .. } => "called",
            Kind::Skipped { .. } | Kind::Fallback { .. } => "fallback",
        };
        f.debug_struct("ResponseFuture")
            .field("kind", &kind)
            .finish()
    }
}
