//! [`Retrying`]: the service a [`RetryLayer`](super::RetryLayer) makes.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tower::retry::Policy;
use tower::Service;

use super::policy::RetryPolicy;
use crate::accessors::inner_service_accessors;
use crate::future::Changed;

/// Calls the wrapped service again as its [`RetryPolicy`] says, as `tower::retry::Retry`
/// does, with one difference: when the policy was given the breaker's handle
/// ([`RetryBuilder::breaker`](super::RetryBuilder::breaker)), the breaker is asked again
/// when it changes during a retry's wait and when the wait is over, and a retry the
/// breaker would now skip (a person killed it or forced it open during the wait, or
/// other calls opened it) is not sent: the last result is returned instead, at once.
///
/// The wrapped service must be `Clone` (each call keeps its own clone for its retries).
pub struct Retrying<S, C, K> {
    inner: S,
    policy: RetryPolicy<C, K>,
}

impl<S, C, K> Retrying<S, C, K> {
    /// `inner`, retried by `policy`.
    pub fn new(inner: S, policy: RetryPolicy<C, K>) -> Self {
        Retrying { inner, policy }
    }

    /// The policy.
    pub fn policy(&self) -> &RetryPolicy<C, K> {
        &self.policy
    }

    inner_service_accessors!(S, into_inner: " This one dropped.");
}

impl<S: Clone, C: Clone, K: Clone> Clone for Retrying<S, C, K> {
    fn clone(&self) -> Self {
        Retrying {
            inner: self.inner.clone(),
            policy: self.policy.clone(),
        }
    }
}

impl<S: fmt::Debug, C, K> fmt::Debug for Retrying<S, C, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retrying")
            .field("inner", &self.inner)
            .field("policy", &self.policy)
            .finish()
    }
}

impl<S, C, K, Request> Service<Request> for Retrying<S, C, K>
where
    S: Service<Request> + Clone,
    RetryPolicy<C, K>: Policy<Request, S::Response, S::Error> + Clone,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = RetryingFuture<S, C, K, Request>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let mut policy = self.policy.clone();
        let kept = policy.clone_request(&request);
        let may_be_probe = policy.may_be_probe();
        // The service polled ready makes this call; a clone takes its place here.
        let clone = self.inner.clone();
        let mut service = std::mem::replace(&mut self.inner, clone);
        let future = service.call(request);
        RetryingFuture {
            request: kept,
            service,
            policy,
            may_be_probe,
            last: None,
            state: State::Called { future },
        }
    }
}

/// How many changes of the breaker one poll of a waiting retry looks at.
const CHANGES_PER_POLL: usize = 4;

pin_project! {
    /// The future of a [`Retrying`] call.
    pub struct RetryingFuture<S, C, K, Request>
    where
        S: Service<Request>,
        RetryPolicy<C, K>: Policy<Request, S::Response, S::Error>,
    {
        request: Option<Request>,
        service: S,
        policy: RetryPolicy<C, K>,
        // Whether the call may be the breaker's probe (it started while the breaker was
        // not plainly closed): then every probe slot taken does not stop its retry.
        may_be_probe: bool,
        // The result the wait is for, returned if the retry is not sent.
        last: Option<Result<S::Response, S::Error>>,
        #[pin]
        state: State<S::Future, <RetryPolicy<C, K> as Policy<Request, S::Response, S::Error>>::Future>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, W> {
        Called { #[pin] future: F },
        // `changed`: the breaker's next change, watched during the wait, and while the
        // service gets ready for the retry.
        Waiting { #[pin] wait: W, changed: Option<Changed> },
        Retrying { changed: Option<Changed> },
    }
}

impl<S, C, K, Request> Future for RetryingFuture<S, C, K, Request>
where
    S: Service<Request>,
    RetryPolicy<C, K>: Policy<Request, S::Response, S::Error>,
{
    type Output = Result<S::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Called { future } => {
                    let mut result = ready!(future.poll(cx));
                    let Some(request) = this.request.as_mut() else {
                        return Poll::Ready(result);
                    };
                    match this.policy.retry(request, &mut result) {
                        Some(wait) => {
                            // Subscribed, then looked at: an act between the policy's look
                            // and the subscription is seen here.
                            let changed = this.policy.breaker_changed();
                            if changed.is_some() && this.policy.breaker_skips(*this.may_be_probe) {
                                return Poll::Ready(result);
                            }
                            *this.last = Some(result);
                            this.state.set(State::Waiting { wait, changed });
                        }
                        None => return Poll::Ready(result),
                    }
                }
                StateProj::Waiting { wait, changed } => {
                    // A person's kill or forced opening ends the wait at once.
                    let acted = ready!(skips_now(changed, this.policy, *this.may_be_probe, cx));
                    // Once the wait is over, or cut short by an act: the breaker asked
                    // then (an act it skips for is not undone by a later look).
                    if !acted {
                        ready!(wait.poll(cx));
                    }
                    if acted || this.policy.breaker_skips(*this.may_be_probe) {
                        return Poll::Ready(not_retried(this.last));
                    }
                    let changed = changed.take();
                    this.state.set(State::Retrying { changed });
                }
                StateProj::Retrying { changed } => {
                    // The service may take long to be ready (a concurrency limit, a full
                    // buffer): an act meanwhile ends the retry too, and the breaker is
                    // asked again once it is ready, before the retry is sent.
                    if ready!(skips_now(changed, this.policy, *this.may_be_probe, cx)) {
                        return Poll::Ready(not_retried(this.last));
                    }
                    if let Err(error) = ready!(this.service.poll_ready(cx)) {
                        return Poll::Ready(Err(error));
                    }
                    if this.policy.breaker_skips(*this.may_be_probe) {
                        return Poll::Ready(not_retried(this.last));
                    }
                    let request = this.request.take().expect("a kept request to retry");
                    *this.request = this.policy.clone_request(&request);
                    *this.last = None;
                    this.state.set(State::Called {
                        future: this.service.call(request),
                    });
                }
            }
        }
    }
}

/// Whether a change of the breaker since the last look makes it skip calls (a person's
/// kill or forced opening, an opening): `Ready(false)` when none has, the next change
/// then waking the task. Each change is subscribed past before the breaker is looked at,
/// so none after the look is missed. `Pending` when the breaker changed on every look:
/// looked at again after the other tasks' turn.
fn skips_now<C, K>(
    changed: &mut Option<Changed>,
    policy: &RetryPolicy<C, K>,
    may_be_probe: bool,
    cx: &mut Context<'_>,
) -> Poll<bool> {
    let mut looked = 0;
    while let Some(watch) = changed.as_mut() {
        if Pin::new(watch).poll(cx).is_pending() {
            break;
        }
        *changed = policy.breaker_changed();
        if policy.breaker_skips(may_be_probe) {
            return Poll::Ready(true);
        }
        looked += 1;
        if looked == CHANGES_PER_POLL {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
    }
    Poll::Ready(false)
}

/// The result kept for the retry that is not sent: the breaker would skip it.
fn not_retried<T>(last: &mut Option<T>) -> T {
    tracing::debug!(reason = "the breaker would skip the call", "not retried");
    last.take()
        .expect("a result is kept until the retry is sent")
}

impl<S, C, K, Request> fmt::Debug for RetryingFuture<S, C, K, Request>
where
    S: Service<Request>,
    RetryPolicy<C, K>: Policy<Request, S::Response, S::Error>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryingFuture")
            .field("retrying", &self.request.is_some())
            .finish()
    }
}
