//! The service guarded by one circuit breaker per key.

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::mem;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::Service;

use super::handle::KeyedCircuitBreakerHandle;
use super::registry::Registry;
use crate::accessors::inner_service_accessors;
use crate::breaker::answer::Answer;
use crate::breaker::changed::WakeOnChange;
use crate::breaker::classify::{Classify, DefaultClassifier};
use crate::breaker::error::{BoxError, BreakerError};
use crate::breaker::fallback::{FallbackService, NoFallback};
use crate::breaker::future::ResponseFuture;
use crate::breaker::shared::{Permit, Shared};
use crate::breaker::state::Skip;

/// A `tower::Service` guarded by one circuit breaker per key.
///
/// Made by [`KeyedCircuitBreakerLayer`](crate::keyed::KeyedCircuitBreakerLayer); the [module docs](crate::keyed) tell the whole story.
///
/// # Clone
///
/// Clones share the registry; a clone starts not ready, so it must be polled ready
/// itself.
pub struct KeyedCircuitBreaker<S, K, KF, F = NoFallback, C = DefaultClassifier> {
    inner: S,
    key: KF,
    fallback: F,
    classifier: C,
    registry: Arc<Registry<K>>,
    ready: Ready,
    /// The kill switch's next flip, watched while the wrapped service is not ready: a
    /// kill wakes the waiting caller, whose call the kill then skips.
    kill_flip: WakeOnChange<Pin<Box<dyn Future<Output = ()> + Send + Sync>>>,
}

/// What `poll_ready` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ready {
    /// Not polled ready since the last call.
    No,
    /// The wrapped service is ready.
    Inner,
    /// The kill switch was on: the wrapped service was not polled.
    Killed,
}

impl<S, K, KF, F, C> KeyedCircuitBreaker<S, K, KF, F, C> {
    /// A service that is not ready yet.
    pub(super) fn new(
        inner: S,
        key: KF,
        fallback: F,
        classifier: C,
        registry: Arc<Registry<K>>,
    ) -> Self {
        KeyedCircuitBreaker {
            inner,
            key,
            fallback,
            classifier,
            registry,
            ready: Ready::No,
            kill_flip: WakeOnChange::new(),
        }
    }

    /// The handle on the registry.
    pub fn handle(&self) -> KeyedCircuitBreakerHandle<K> {
        KeyedCircuitBreakerHandle {
            registry: self.registry.clone(),
        }
    }

    inner_service_accessors!(S);

    /// The wrapped service is not ready: `cx` is woken by the kill switch's next flip too,
    /// or at once if it was flipped on since `poll_ready` looked. Out of line: only a
    /// service that is not ready comes here.
    #[cold]
    #[inline(never)]
    fn wait_for_a_kill(&mut self, cx: &mut Context<'_>) {
        let kill = self.registry.kill_switch();
        let watch = || {
            let mut flips = kill.watch();
            Box::pin(async move {
                // A switch dropped ends the wait too.
                let _ = flips.changed().await;
            }) as Pin<Box<dyn Future<Output = ()> + Send + Sync>>
        };
        self.kill_flip
            .wake_on_change(cx, watch, || !kill.is_killed());
    }
}

impl<S, K, KF, F, C, Request> Service<Request> for KeyedCircuitBreaker<S, K, KF, F, C>
where
    S: Service<Request>,
    S::Error: Into<BoxError>,
    KF: Fn(&Request) -> K,
    K: Hash + Eq + Clone,
    F: FallbackService<Request, S::Response>,
    C: Classify<S::Response, S::Error> + Clone,
{
    type Response = Answer<S::Response>;
    type Error = F::Error;
    type Future = ResponseFuture<S::Future, F::Future, C>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.registry.kill_switch().is_killed() {
            // Every key's call is skipped: no need to wait for the wrapped service.
            self.ready = Ready::Killed;
            return Poll::Ready(Ok(()));
        }
        match self.inner.poll_ready(cx) {
            Poll::Ready(Ok(())) => {
                self.ready = Ready::Inner;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => {
                self.ready = Ready::No;
                Poll::Ready(Err(F::Error::service(error.into())))
            }
            Poll::Pending => {
                self.ready = Ready::No;
                self.wait_for_a_kill(cx);
                Poll::Pending
            }
        }
    }

    #[inline]
    fn call(&mut self, request: Request) -> Self::Future {
        let ready = mem::replace(&mut self.ready, Ready::No);
        assert!(ready != Ready::No, "poll_ready must be called first");
        // The registry's reference, taken for this call, goes on to the call's permit.
        // Each kind of future is made once, here, from values in registers (see
        // `CircuitBreaker::call`).
        let (skip, shared) = match self.registry.breaker(&(self.key)(&request)).decide_owned() {
            Ok(permit) if ready == Ready::Inner => {
                let classifier = self.classifier.clone();
                return ResponseFuture::call(&mut self.inner, request, permit, classifier);
            }
            Ok(permit) => kept_killed(permit),
            Err(skipped) => skipped,
        };
        let future = self.fallback.call_unready(request, skip, &shared);
        ResponseFuture::answered(future, skip)
    }
}

/// The kill switch was turned off between `poll_ready` and `call`, and the wrapped service
/// was not polled ready: the call stays decided as killed. Out of line, as it is rare.
#[cold]
#[inline(never)]
fn kept_killed(permit: Permit) -> (Skip, Arc<Shared>) {
    let shared = permit.breaker().clone();
    let skip = shared.keep_killed(permit);
    (skip, shared)
}

impl<S: Clone, K, KF: Clone, F: Clone, C: Clone> Clone for KeyedCircuitBreaker<S, K, KF, F, C> {
    /// A clone shares the registry but is not ready.
    fn clone(&self) -> Self {
        KeyedCircuitBreaker::new(
            self.inner.clone(),
            self.key.clone(),
            self.fallback.clone(),
            self.classifier.clone(),
            self.registry.clone(),
        )
    }
}

impl<S: fmt::Debug, K, KF, F, C> fmt::Debug for KeyedCircuitBreaker<S, K, KF, F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCircuitBreaker")
            .field("registry", &self.registry)
            .field("inner", &self.inner)
            .field("fallback", &std::any::type_name::<F>())
            .field("ready", &self.ready)
            .finish()
    }
}
