//! [`SaveLayer`]: saves the answers the breaker's classifier called a success.

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tower::{Layer, Service};

use super::{Replayable, SavedAnswers, SavedFallback};
use crate::accessors::inner_service_accessors;
use crate::Answer;
use crate::Verdict;

/// What else an answer must be to be worth saving, beyond a success of the breaker's
/// classifier: a predicate over the wrapped service's response, implemented for
/// closures `Fn(&R) -> bool`. The default, [`EverySuccess`], asks nothing more.
///
/// ```
/// use std::time::Duration;
/// use tower_circuit_breaker::saved::{SaveLayer, SavedAnswers};
///
/// #[derive(Clone)]
/// struct Completion {
///     finish_reason: &'static str,
///     text: String,
/// }
///
/// let saved = SavedAnswers::<String, Completion>::new(100, Duration::from_secs(3600))?;
/// // A completion cut off by the length limit or a content filter is not worth replaying.
/// let save = SaveLayer::new(saved, |prompt: &String| Some(prompt.clone()))
///     .only_if(|completion: &Completion| completion.finish_reason == "stop");
/// # let _ = save;
/// # Ok::<(), tower_circuit_breaker::saved::SavedConfigError>(())
/// ```
pub trait GoodAnswer<R> {
    /// Whether `response` may be saved and served later.
    fn is_good(&self, response: &R) -> bool;
}

impl<R, F> GoodAnswer<R> for F
where
    F: Fn(&R) -> bool,
{
    fn is_good(&self, response: &R) -> bool {
        self(response)
    }
}

/// Every answer the classifier called a success is a good answer: the default
/// [`GoodAnswer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct EverySuccess;

impl<R> GoodAnswer<R> for EverySuccess {
    fn is_good(&self, _: &R) -> bool {
        true
    }
}

/// Saves the answers the breaker's classifier called a success in a [`SavedAnswers`],
/// under the key the key function gives each request (`None`: not saved).
///
/// Place it **outside** the breaker (listed before it in a `ServiceBuilder`): it reads
/// each [`Answer`]'s [`Verdict`], the breaker's own classification, so it saves exactly
/// what the classifier calls a success, probes included, and never a failure (an HTTP
/// 503 is an `Ok` to tower, and a failure to an HTTP classifier), an ignored or deferred
/// answer, or a fallback's answer. There is no second classifier to keep in step with
/// the breaker's. An HTTP classifier calls a 4xx other than 429 a success (the caller's
/// mistake, not the service's): to keep such an answer from replacing a good one, save
/// only 2xx with [`only_if`](SaveLayer::only_if), as in
/// `.only_if(|answer: &BufferedResponse| answer.status().is_success())`.
///
/// It changes no readiness, response or error, and never delays one: a call costs the
/// key function (and, with a key, a reference-count increment for the store and a
/// clone of the predicate), and a good answer with a key, a clone of the response and
/// one short lock when the response is ready.
///
/// The response must be [`Replayable`] (`Clone`): `reqwest::Response` and
/// `http::Response<Incoming>` are not, since their bodies are streams; buffer them with
/// `http::BufferBodyLayer` (a `Clone` `http::BufferedResponse`)
/// or save the parsed answer.
///
/// See the [module docs](super) for a complete example.
///
/// # Clone
///
/// Clones share the store (see [`SavedAnswers`]); the key function and the predicate
/// are cloned.
pub struct SaveLayer<K, R, KF, G = EverySuccess> {
    saved: SavedAnswers<K, R>,
    key: KF,
    good: G,
}

impl<K, R, KF> SaveLayer<K, R, KF> {
    /// Saves into `saved`, under `key(&request)`, every answer of the wrapped service
    /// the breaker's classifier calls a success.
    pub fn new(saved: SavedAnswers<K, R>, key: KF) -> Self
    where
        R: Replayable,
    {
        SaveLayer {
            saved,
            key,
            good: EverySuccess,
        }
    }
}

impl<K, R, KF, G> SaveLayer<K, R, KF, G> {
    /// Saves only the successes `good` accepts (see [`GoodAnswer`]).
    pub fn only_if<G2>(self, good: G2) -> SaveLayer<K, R, KF, G2> {
        SaveLayer {
            saved: self.saved,
            key: self.key,
            good,
        }
    }

    /// The store.
    pub fn saved(&self) -> &SavedAnswers<K, R> {
        &self.saved
    }

    /// The fallback that serves this layer's saved answers, with the same store and key
    /// function (see [`SavedFallback::new`]).
    pub fn fallback<ST, UN>(&self, stale: ST, unavailable: UN) -> SavedFallback<K, R, KF, ST, UN>
    where
        KF: Clone,
    {
        SavedFallback::new(self.saved.clone(), self.key.clone(), stale, unavailable)
    }
}

impl<S, K, R, KF: Clone, G: Clone> Layer<S> for SaveLayer<K, R, KF, G> {
    type Service = Save<S, K, R, KF, G>;

    fn layer(&self, inner: S) -> Self::Service {
        Save::new(
            inner,
            self.saved.clone(),
            self.key.clone(),
            self.good.clone(),
        )
    }
}

impl<K, R, KF: Clone, G: Clone> Clone for SaveLayer<K, R, KF, G> {
    fn clone(&self) -> Self {
        SaveLayer {
            saved: self.saved.clone(),
            key: self.key.clone(),
            good: self.good.clone(),
        }
    }
}

impl<K, R, KF, G> fmt::Debug for SaveLayer<K, R, KF, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaveLayer")
            .field("saved", &self.saved)
            .field("key", &std::any::type_name::<KF>())
            .field("good", &std::any::type_name::<G>())
            .finish()
    }
}

/// The service [`SaveLayer`] makes: the breaker, whose answers the classifier called a
/// success are saved.
pub struct Save<S, K, R, KF, G = EverySuccess> {
    inner: S,
    saved: SavedAnswers<K, R>,
    key: KF,
    good: G,
}

impl<S, K, R, KF, G> Save<S, K, R, KF, G> {
    /// Wraps `inner` (a breaker, answering [`Answer`]s), saving into `saved` under
    /// `key(&request)` the successes `good` accepts.
    pub fn new(inner: S, saved: SavedAnswers<K, R>, key: KF, good: G) -> Self {
        Save {
            inner,
            saved,
            key,
            good,
        }
    }

    /// The store.
    pub fn saved(&self) -> &SavedAnswers<K, R> {
        &self.saved
    }

    inner_service_accessors!(S);
}

impl<S, Request, K, R, KF, G> Service<Request> for Save<S, K, R, KF, G>
where
    S: Service<Request, Response = Answer<R>>,
    K: Hash + Eq,
    R: Replayable,
    KF: Fn(&Request) -> Option<K>,
    G: GoodAnswer<R> + Clone,
{
    type Response = Answer<R>;
    type Error = S::Error;
    type Future = SaveFuture<S::Future, K, R, G>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let saving = (self.key)(&request).map(|key| Saving {
            key,
            saved: self.saved.clone(),
            good: self.good.clone(),
        });
        SaveFuture {
            inner: self.inner.call(request),
            saving,
        }
    }
}

impl<S: Clone, K, R, KF: Clone, G: Clone> Clone for Save<S, K, R, KF, G> {
    fn clone(&self) -> Self {
        Save {
            inner: self.inner.clone(),
            saved: self.saved.clone(),
            key: self.key.clone(),
            good: self.good.clone(),
        }
    }
}

impl<S: fmt::Debug, K, R, KF, G> fmt::Debug for Save<S, K, R, KF, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Save")
            .field("inner", &self.inner)
            .field("saved", &self.saved)
            .field("key", &std::any::type_name::<KF>())
            .field("good", &std::any::type_name::<G>())
            .finish()
    }
}

struct Saving<K, R, G> {
    key: K,
    saved: SavedAnswers<K, R>,
    good: G,
}

pin_project! {
    /// The future of a [`Save`] call: the breaker's, unchanged, saving a success when
    /// it completes.
    pub struct SaveFuture<F, K, R, G> {
        #[pin]
        inner: F,
        saving: Option<Saving<K, R, G>>,
    }
}

impl<F, E, K, R, G> Future for SaveFuture<F, K, R, G>
where
    F: Future<Output = Result<Answer<R>, E>>,
    K: Hash + Eq,
    R: Replayable,
    G: GoodAnswer<R>,
{
    type Output = Result<Answer<R>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx));
        if let (Ok(answer), Some(saving)) = (&result, this.saving.take()) {
            // The breaker's own verdict: a fallback's answer has none.
            let success = answer.verdict() == Some(Verdict::Success);
            if success && saving.good.is_good(answer.get_ref()) {
                saving.saved.insert(saving.key, answer.get_ref().clone());
            }
        }
        Poll::Ready(result)
    }
}

impl<F, K, R, G> fmt::Debug for SaveFuture<F, K, R, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaveFuture")
            .field("saving", &self.saving.is_some())
            .finish_non_exhaustive()
    }
}
