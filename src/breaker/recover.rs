//! Answers for failed calls too: [`RecoverLayer`] gives a call that was made and failed
//! the fallback's answer instead of the error, labelled
//! [`Source::FallbackAfterFailure`].
//!
//! The breaker answers a call it skips from its fallback; a call it makes reaches the
//! caller as the service gave it, a failure included (a connection refused, a timeout,
//! a 503 that the classifier called a failure). Polly's fallback covers those too: with
//! this layer outside the breaker, the call that fails gets the fallback's answer (a
//! saved answer to the same question, or an honest "unavailable" one) instead.
//!
//! - The breaker counts the failure once, as it would without this layer; the wrapped
//!   service is not called again. Only the fallback is.
//! - A failed call is an error of the breaker's call (the wrapped service's, a
//!   timeout's, the breaker's own fallback's), or an answer the breaker's classifier
//!   called a failure ([`Answer::is_failure`]): the layer reads the breaker's verdict,
//!   it does not classify again. A skip without a fallback
//!   ([`Rejected`]) is not a failed call, and passes through,
//!   as does an error of `poll_ready` (tower's contract: the service is then
//!   unusable).
//! - The fallback gets a [`Failed`]: the request (kept before the call, so the
//!   request type is `Clone`, or see [`RecoverLayer::keep_requests_with`]), the error,
//!   what the breaker recorded about the failure, and the breaker's snapshot right after
//!   it (so "retry after T" is the real time to the next probe).
//! - Its answer is an [`Answer`] whose source is [`Source::FallbackAfterFailure`] and
//!   whose [`next_probe`](Answer::next_probe) is the breaker's as of the failure; it is
//!   never saved by a [`SaveLayer`](crate::saved::SaveLayer) (only the service's successes are).
//!
//! [`SavedFallback`](crate::saved::SavedFallback) answers both kinds of call: give it to the
//! breaker for skips and to this layer for failures.
//!
//! ```
//! use std::time::Duration;
//! use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
//! use tower_circuit_breaker::recover::{Failed, RecoverLayer};
//! use tower_circuit_breaker::{CircuitBreakerLayer, Source, State};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), BoxError> {
//! let breaker = CircuitBreakerLayer::builder().name("search").failure_threshold(3).build()?;
//! let handle = breaker.handle();
//! let recover = RecoverLayer::new(
//!     handle.clone(),
//!     service_fn(|failed: Failed<String>| async move {
//!         let why = failed.failure.as_deref().unwrap_or("unknown");
//!         Ok::<_, BoxError>(format!("search for {:?} failed ({why}); try later", failed.request))
//!     }),
//! );
//! let mut search = ServiceBuilder::new()
//!     .layer(recover)
//!     .layer(breaker)
//!     .service(service_fn(|_query: String| async {
//!         Err::<String, _>(std::io::Error::other("connection refused"))
//!     }));
//!
//! let answer = search.ready().await?.call("rust".to_string()).await?;
//! assert_eq!(answer.source(), Source::FallbackAfterFailure);
//! assert_eq!(answer.get_ref(), r#"search for "rust" failed (connection refused); try later"#);
//! // Counted once, as without the layer.
//! assert_eq!(handle.snapshot().consecutive_failures, 1);
//! assert_eq!(handle.state(), State::Closed);
//! # Ok(()) }
//! ```

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use pin_project_lite::pin_project;
use tower::util::Oneshot;
use tower::{Layer, Service};

use crate::accessors::inner_service_accessors;
use crate::breaker::answer::{Answer, Origin};
use crate::breaker::clock::now;
use crate::breaker::error::{BoxError, Rejected};
use crate::breaker::handle::CircuitBreakerHandle;
use crate::breaker::snapshot::Snapshot;
use crate::error_text::text_with_sources;

#[cfg(doc)]
use crate::breaker::answer::Source;

/// A call that was made and failed, as the fallback of a [`RecoverLayer`] receives it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Failed<Request> {
    /// The request, as it was kept before the call.
    pub request: Request,
    /// The breaker's name.
    pub breaker: Arc<str>,
    /// The error the call ended with; `None` when the service answered and the
    /// breaker's classifier called the answer a failure (an HTTP 503).
    pub error: Option<Arc<dyn Error + Send + Sync>>,
    /// What the breaker recorded about the failure (the classifier's message, such as
    /// `503 Service Unavailable` or `429 Too Many Requests: insufficient_quota (the
    /// quota is exhausted)`); the error's text (with its sources) if the breaker
    /// recorded nothing since the call began (a result that came after the breaker had
    /// moved on is not recorded). With many calls failing at once, the breaker's record
    /// is of the most recent of them.
    pub failure: Option<Arc<str>>,
    /// The breaker right after the failure: its state (the failure may have opened
    /// it), its next probe, its counts.
    pub snapshot: Snapshot,
}

/// How a [`RecoverLayer`] keeps each request before the call, for the fallback: a copy,
/// or `None` when it cannot be copied (then a failure of that call reaches the caller
/// as it is).
///
/// Implemented by [`CloneRequests`] (the default: `Request: Clone`) and by every
/// `Fn(&Request) -> Option<Request>` (`reqwest::Request::try_clone`, whose streamed
/// bodies cannot be copied).
pub trait KeepRequest<Request> {
    /// A copy of `request` for the fallback, if one can be made.
    fn keep(&self, request: &Request) -> Option<Request>;
}

/// Keeps each request by cloning it: the default [`KeepRequest`].
#[derive(Debug, Clone, Copy, Default)]
pub struct CloneRequests;

impl<Request: Clone> KeepRequest<Request> for CloneRequests {
    fn keep(&self, request: &Request) -> Option<Request> {
        Some(request.clone())
    }
}

impl<Request, F> KeepRequest<Request> for F
where
    F: Fn(&Request) -> Option<Request>,
{
    fn keep(&self, request: &Request) -> Option<Request> {
        self(request)
    }
}

/// Answers the failed calls of a breaker from `fallback`; see the [module docs](self).
///
/// Place it outside the breaker whose `handle` it is given (and outside a
/// [`SaveLayer`](crate::saved::SaveLayer), or inside it: neither saves the fallback's answer).
///
/// # Clone
///
/// Clones share the handle and the fallback (cloned for each failed call, which it
/// answers with `oneshot`).
pub struct RecoverLayer<F, K = CloneRequests> {
    shared: Arc<Recovery<F, K>>,
}

struct Recovery<F, K> {
    handle: CircuitBreakerHandle,
    fallback: F,
    keep: K,
}

impl<F> RecoverLayer<F> {
    /// Answers the failed calls of the breaker `handle` is on with `fallback`, a
    /// `Service<Failed<Request>>` with the wrapped service's response type. Requests are
    /// kept by cloning them.
    pub fn new(handle: CircuitBreakerHandle, fallback: F) -> Self {
        RecoverLayer {
            shared: Arc::new(Recovery {
                handle,
                fallback,
                keep: CloneRequests,
            }),
        }
    }
}

impl<F, K> RecoverLayer<F, K> {
    /// Keeps each request with `keep` instead of cloning it: for a request type that is
    /// not `Clone` (`reqwest::Request::try_clone`).
    pub fn keep_requests_with<K2>(self, keep: K2) -> RecoverLayer<F, K2>
    where
        F: Clone,
    {
        RecoverLayer {
            shared: Arc::new(Recovery {
                handle: self.shared.handle.clone(),
                fallback: self.shared.fallback.clone(),
                keep,
            }),
        }
    }

    /// The handle on the breaker whose failed calls it answers.
    pub fn handle(&self) -> &CircuitBreakerHandle {
        &self.shared.handle
    }
}

impl<S, F, K> Layer<S> for RecoverLayer<F, K> {
    type Service = Recover<S, F, K>;

    fn layer(&self, inner: S) -> Self::Service {
        Recover {
            inner,
            shared: self.shared.clone(),
        }
    }
}

impl<F, K> Clone for RecoverLayer<F, K> {
    fn clone(&self) -> Self {
        RecoverLayer {
            shared: self.shared.clone(),
        }
    }
}

impl<F, K> fmt::Debug for RecoverLayer<F, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecoverLayer")
            .field("breaker", &self.shared.handle.name())
            .field("fallback", &std::any::type_name::<F>())
            .finish()
    }
}

/// The service [`RecoverLayer`] makes: the breaker's, with failed calls answered by the
/// fallback.
///
/// # Errors
///
/// The breaker's errors that are not failed calls (a [`Rejected`] skip, a `poll_ready`
/// error), a failed call's error when its request could not be kept, and the
/// fallback's errors.
pub struct Recover<S, F, K = CloneRequests> {
    inner: S,
    shared: Arc<Recovery<F, K>>,
}

impl<S, F, K> Recover<S, F, K> {
    inner_service_accessors!(S);
}

impl<S, F, K, Request, T> Service<Request> for Recover<S, F, K>
where
    S: Service<Request, Response = Answer<T>, Error = BoxError>,
    K: KeepRequest<Request>,
    F: Service<Failed<Request>, Response = T> + Clone,
    F::Error: Into<BoxError>,
{
    type Response = Answer<T>;
    type Error = BoxError;
    type Future = RecoverFuture<S::Future, F, K, Request>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let kept = self.shared.keep.keep(&request);
        RecoverFuture {
            state: RecoverState::Calling {
                future: self.inner.call(request),
                kept: kept.map(|request| Kept {
                    request,
                    started: now(),
                    shared: self.shared.clone(),
                }),
            },
            _keep: PhantomData,
        }
    }
}

impl<S: Clone, F, K> Clone for Recover<S, F, K> {
    fn clone(&self) -> Self {
        Recover {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S: fmt::Debug, F, K> fmt::Debug for Recover<S, F, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recover")
            .field("inner", &self.inner)
            .field("breaker", &self.shared.handle.name())
            .finish()
    }
}

/// What a call keeps for its fallback while it is under way.
struct Kept<Request, F, K> {
    request: Request,
    /// When the call began, on the breaker's clock: a failure recorded since is this
    /// call's (or one at the same moment).
    started: Instant,
    shared: Arc<Recovery<F, K>>,
}

impl<Request, F, K> Kept<Request, F, K>
where
    F: Service<Failed<Request>> + Clone,
{
    /// The fallback's call for this failed call, and the origin of its answer.
    fn fail(self, error: Option<BoxError>) -> (Oneshot<F, Failed<Request>>, Origin) {
        let snapshot = self.shared.handle.snapshot();
        let origin = Origin::fallback_after_failure(snapshot.state, snapshot.next_probe);
        let recorded = snapshot
            .last_failure
            .as_ref()
            .filter(|failure| failure.at >= self.started)
            .map(|failure| failure.message.clone());
        let error: Option<Arc<dyn Error + Send + Sync>> = error.map(Arc::from);
        let failure = recorded.or_else(|| {
            error
                .as_deref()
                .map(|error| Arc::from(crate::redact(&text_with_sources(error))))
        });
        let failed = Failed {
            request: self.request,
            breaker: snapshot.name.clone(),
            error,
            failure,
            snapshot,
        };
        (Oneshot::new(self.shared.fallback.clone(), failed), origin)
    }
}

pin_project! {
    /// The future of a [`Recover`] call: the breaker's answer, or the fallback's answer
    /// to a call that failed.
    pub struct RecoverFuture<SF, F, K, Request>
    where
        F: Service<Failed<Request>>,
    {
        #[pin]
        state: RecoverState<SF, F, K, Request>,
        _keep: PhantomData<fn() -> K>,
    }
}

pin_project! {
    #[project = RecoverStateProj]
    enum RecoverState<SF, F, K, Request>
    where
        F: Service<Failed<Request>>,
    {
        Calling {
            #[pin]
            future: SF,
            kept: Option<Kept<Request, F, K>>,
        },
        Answering {
            #[pin]
            future: Oneshot<F, Failed<Request>>,
            origin: Origin,
        },
    }
}

impl<SF, F, K, Request, T> Future for RecoverFuture<SF, F, K, Request>
where
    SF: Future<Output = Result<Answer<T>, BoxError>>,
    F: Service<Failed<Request>, Response = T> + Clone,
    F::Error: Into<BoxError>,
{
    type Output = Result<Answer<T>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                RecoverStateProj::Calling { future, kept } => {
                    let result = ready!(future.poll(cx));
                    let error = match &result {
                        Ok(answer) if answer.is_failure() => None,
                        Err(error) if !error.is::<Rejected>() => Some(()),
                        _ => return Poll::Ready(result),
                    };
                    let Some(kept) = kept.take() else {
                        return Poll::Ready(result);
                    };
                    let (future, origin) = kept.fail(error.and(result.err()));
                    this.state.set(RecoverState::Answering { future, origin });
                }
                RecoverStateProj::Answering { future, origin } => {
                    let value = ready!(future.poll(cx)).map_err(Into::into)?;
                    return Poll::Ready(Ok(Answer::from_parts(value, *origin)));
                }
            }
        }
    }
}

impl<SF, F, K, Request> fmt::Debug for RecoverFuture<SF, F, K, Request>
where
    F: Service<Failed<Request>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            RecoverState::Calling { .. } => "calling",
            RecoverState::Answering { .. } => "answering",
        };
        f.debug_struct("RecoverFuture")
            .field("state", &state)
            .finish()
    }
}
