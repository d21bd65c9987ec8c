//! [`ResponseFuture`]: the future of a call through a breaker.

use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use pin_project_lite::pin_project;

use crate::answer::{Answer, Source};
use crate::classify::{Classify, Outcome};
use crate::error::BoxError;
use crate::machine::{NextProbe, Skip};
use crate::settle::Settlement;
use crate::shared::{now, Ticket};

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
        Called {
            #[pin]
            future: SF,
            ticket: Option<Ticket>,
            classifier: C,
            started: Option<Instant>,
        },
        Fallback {
            #[pin]
            future: FF,
            skip: Skip,
        },
    }
}

impl<SF, FF, C> ResponseFuture<SF, FF, C> {
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
            Ok(future) => ResponseFuture::called(future, ticket, classifier, started),
            Err(panic) => {
                ticket.settle(Outcome::failure_with("the service panicked"), None);
                resume_unwind(panic)
            }
        }
    }

    pub(crate) fn called(
        future: SF,
        ticket: Ticket,
        classifier: C,
        started: Option<Instant>,
    ) -> Self {
        ResponseFuture {
            kind: Kind::Called {
                future,
                ticket: Some(ticket),
                classifier,
                started,
            },
        }
    }

    pub(crate) fn fallback(future: FF, skip: Skip) -> Self {
        ResponseFuture {
            kind: Kind::Fallback { future, skip },
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

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Fallback { future, skip } => {
                let value = ready!(future.poll(cx))?;
                let source = Source::Fallback(skip.reason);
                Poll::Ready(Ok(Answer::new(value, source, skip.state, skip.next_probe)))
            }
            KindProj::Called {
                future,
                ticket,
                classifier,
                started,
            } => {
                let result = match catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
                    Ok(Poll::Pending) => return Poll::Pending,
                    Ok(Poll::Ready(result)) => result,
                    Err(panic) => {
                        if let Some(ticket) = ticket.take() {
                            ticket.settle(Outcome::failure_with("the service panicked"), None);
                        }
                        resume_unwind(panic)
                    }
                };
                let ticket = ticket.take().expect("polled after completion");
                let outcome = match catch_unwind(AssertUnwindSafe(|| classifier.classify(&result)))
                {
                    Ok(outcome) => outcome,
                    Err(panic) => {
                        ticket.settle(Outcome::failure_with("the classifier panicked"), None);
                        resume_unwind(panic)
                    }
                };
                let elapsed = started.map(|at| now().saturating_duration_since(at));
                let result = result.map_err(Into::into);
                let outcome = match (outcome, &result) {
                    (Outcome::Failure(failure), Err(error)) => {
                        Outcome::Failure(failure.with_default_message(|| error.to_string()))
                    }
                    (outcome, _) => outcome,
                };
                let permit = *ticket.permit();
                let result = match (outcome, result) {
                    // A success may be handed on, to be settled when its body ends.
                    (Outcome::Success, Ok(mut value)) => {
                        let settlement = Settlement::new(ticket, elapsed);
                        if let Err(settlement) = classifier.defer(&mut value, settlement) {
                            settlement.success();
                        }
                        Ok(value)
                    }
                    (outcome, result) => {
                        ticket.settle(outcome, elapsed);
                        result
                    }
                };
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
        }
    }
}

impl<SF, FF, C> fmt::Debug for ResponseFuture<SF, FF, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Called { .. } => "called",
            Kind::Fallback { .. } => "fallback",
        };
        f.debug_struct("ResponseFuture")
            .field("kind", &kind)
            .finish()
    }
}
