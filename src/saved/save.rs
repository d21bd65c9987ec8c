//! [`SaveLayer`]: saves the wrapped service's good answers.

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tower::{Layer, Service};

use super::{SavedAnswers, SavedFallback};

/// What counts as a good answer, worth saving: a predicate over the wrapped service's
/// response, implemented for closures `Fn(&R) -> bool`. The default, [`EveryOk`],
/// saves every `Ok` response; errors are never saved.
///
/// ```
/// use std::time::Duration;
/// use tower_circuit_breaker::saved::{SaveLayer, SavedAnswers};
///
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

/// Every `Ok` response is a good answer: the default [`GoodAnswer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct EveryOk;

impl<R> GoodAnswer<R> for EveryOk {
    fn is_good(&self, _: &R) -> bool {
        true
    }
}

/// Saves the wrapped service's good answers in a [`SavedAnswers`], under the key the
/// key function gives each request (`None`: not saved).
///
/// Place it **inside** the breaker (listed after it in a `ServiceBuilder`), so that only
/// the wrapped service's own answers, probes included, are saved, never the fallback's.
/// It changes no readiness, response or error, and never delays one: a call costs the
/// key function (and, with a key, a reference-count increment for the store and a
/// clone of the predicate), and a good answer with a key, a clone of the response and
/// one short lock when the response is ready.
///
/// See the [module docs](super) for a complete example.
///
/// # Clone
///
/// Clones share the store (see [`SavedAnswers`]); the key function and the predicate
/// are cloned.
pub struct SaveLayer<K, R, KF, G = EveryOk> {
    saved: SavedAnswers<K, R>,
    key: KF,
    good: G,
}

impl<K, R, KF> SaveLayer<K, R, KF> {
    /// Saves into `saved`, under `key(&request)`, every `Ok` response.
    pub fn new(saved: SavedAnswers<K, R>, key: KF) -> Self {
        SaveLayer {
            saved,
            key,
            good: EveryOk,
        }
    }
}

impl<K, R, KF, G> SaveLayer<K, R, KF, G> {
    /// Saves only the `Ok` responses `good` accepts (see [`GoodAnswer`]).
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

/// The service [`SaveLayer`] makes: the wrapped service, whose good answers are saved.
pub struct Save<S, K, R, KF, G = EveryOk> {
    inner: S,
    saved: SavedAnswers<K, R>,
    key: KF,
    good: G,
}

impl<S, K, R, KF, G> Save<S, K, R, KF, G> {
    /// Wraps `inner`, saving into `saved` under `key(&request)` the `Ok` responses
    /// `good` accepts.
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

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, Request, K, R, KF, G> Service<Request> for Save<S, K, R, KF, G>
where
    S: Service<Request, Response = R>,
    K: Hash + Eq,
    R: Clone,
    KF: Fn(&Request) -> Option<K>,
    G: GoodAnswer<R> + Clone,
{
    type Response = R;
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
    /// The future of a [`Save`] call: the wrapped service's, unchanged, saving a good
    /// answer when it completes.
    pub struct SaveFuture<F, K, R, G> {
        #[pin]
        inner: F,
        saving: Option<Saving<K, R, G>>,
    }
}

impl<F, E, K, R, G> Future for SaveFuture<F, K, R, G>
where
    F: Future<Output = Result<R, E>>,
    K: Hash + Eq,
    R: Clone,
    G: GoodAnswer<R>,
{
    type Output = Result<R, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx));
        if let (Ok(response), Some(saving)) = (&result, this.saving.take()) {
            if saving.good.is_good(response) {
                saving.saved.insert(saving.key, response.clone());
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
