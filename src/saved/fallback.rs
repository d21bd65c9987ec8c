//! [`SavedFallback`]: the fallback that serves saved answers.

use std::convert::Infallible;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tower::Service;

#[cfg(doc)]
use super::SaveLayer;
use super::{Replayable, SavedAnswers, Unavailable};
use crate::fallback::Skipped;
use crate::recover::Failed;

/// The fallback that serves saved answers: give it to
/// [`CircuitBreakerLayer::with_fallback_context`](crate::CircuitBreakerLayer::with_fallback_context)
/// for the calls the breaker skips, and to a
/// [`RecoverLayer`](crate::recover::RecoverLayer) for the calls that fail, if they too
/// should get a saved answer rather than an error.
///
/// For a skipped or failed call, it takes the request's key and:
///
/// - with an answer saved for that key, not past the store's age limit, answers
///   `stale(saved, age)`: your function must label the answer as stale with its age
///   (the library never serves a saved answer any other way);
/// - otherwise (no key, no answer, or too old) answers `unavailable(Unavailable)`,
///   built from the breaker's decision for the call (or its state right after the
///   failure): name, reason, the failure that does not pass by itself if one holds the
///   breaker open, and the real time to the next probe.
///
/// It never fails and never makes up content: the only content it serves is a real
/// answer the wrapped service gave. Each answer is counted in the store
/// ([`SavedAnswers::served`], [`SavedAnswers::unavailable`]).
///
/// Both functions build a response of the service's own type, so the answer can reach
/// callers that only know that type; the breaker's [`Answer`](crate::Answer) also says
/// [`Source::Fallback`](crate::Source::Fallback). With a structured response, put the
/// label where the caller will see it (the message content, a header) and keep it
/// distinguishable from the real service's answers.
///
/// A stale label with the time of retrieval, as the expediter's
/// [`Freshness::Stale`](crate::expediter::Freshness::Stale) writes it:
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use tower_circuit_breaker::expediter::{Freshness, Labelled};
/// use tower_circuit_breaker::saved::{SavedAnswers, SavedFallback, Unavailable};
/// use tower_circuit_breaker::CircuitBreakerLayer;
///
/// let saved = SavedAnswers::<String, String>::new(1_000, Duration::from_secs(3600))?;
/// let breaker = CircuitBreakerLayer::builder().name("model").build()?;
/// let fallback = SavedFallback::new(
///     saved,
///     |prompt: &String| Some(prompt.clone()),
///     |answer: String, age: Duration| {
///         let retrieved = SystemTime::now().checked_sub(age).unwrap_or(UNIX_EPOCH);
///         // "[STALE DATA — retrieved at 2031-05-04T10:11:12Z, may not reflect current state]\n..."
///         Labelled::new(answer, Freshness::stale(retrieved)).to_string()
///     },
///     |unavailable: Unavailable| format!("[UNAVAILABLE] {unavailable}"),
/// );
/// let breaker = breaker.with_fallback_context(fallback);
/// # let _ = breaker;
/// # Ok::<(), tower::BoxError>(())
/// ```
///
/// # Clone
///
/// Clones share the store and the functions.
pub struct SavedFallback<K, R, KF, ST, UN> {
    saved: SavedAnswers<K, R>,
    functions: Arc<Functions<KF, ST, UN>>,
}

struct Functions<KF, ST, UN> {
    key: KF,
    stale: ST,
    unavailable: UN,
}

impl<K, R, KF, ST, UN> SavedFallback<K, R, KF, ST, UN> {
    /// Serves the answers saved in `saved` under `key(&request)` (the same key function
    /// as the [`SaveLayer`]'s: [`SaveLayer::fallback`] makes sure of it), labelled by
    /// `stale(answer, age)`, or `unavailable(Unavailable)` built from the breaker's own
    /// decision for the call (it is a context-aware fallback: give it to
    /// [`with_fallback_context`](crate::CircuitBreakerLayer::with_fallback_context)).
    pub fn new(saved: SavedAnswers<K, R>, key: KF, stale: ST, unavailable: UN) -> Self {
        SavedFallback {
            saved,
            functions: Arc::new(Functions {
                key,
                stale,
                unavailable,
            }),
        }
    }

    /// The store.
    pub fn saved(&self) -> &SavedAnswers<K, R> {
        &self.saved
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A call a [`SavedFallback`] answers: one the breaker skipped ([`Skipped`], when it is
/// the breaker's fallback) or one that was made and failed ([`Failed`], when it is a
/// [`RecoverLayer`](crate::recover::RecoverLayer)'s). Sealed.
pub trait Unanswered: sealed::Sealed {
    /// The request the call was for.
    type Request;

    /// The request, for its key.
    #[doc(hidden)]
    fn request(&self) -> &Self::Request;

    /// What the caller is told when nothing is saved for it.
    #[doc(hidden)]
    fn unavailable(&self) -> Unavailable;
}

impl<Request> sealed::Sealed for Skipped<Request> {}
impl<Request> sealed::Sealed for Failed<Request> {}

impl<Request> Unanswered for Skipped<Request> {
    type Request = Request;

    fn request(&self) -> &Request {
        &self.request
    }

    fn unavailable(&self) -> Unavailable {
        Unavailable::from_skipped(self, tokio::time::Instant::now().into_std())
    }
}

impl<Request> Unanswered for Failed<Request> {
    type Request = Request;

    fn request(&self) -> &Request {
        &self.request
    }

    fn unavailable(&self) -> Unavailable {
        Unavailable::from_failed(self)
    }
}

impl<C, K, R, KF, ST, UN> Service<C> for SavedFallback<K, R, KF, ST, UN>
where
    C: Unanswered,
    K: Hash + Eq,
    R: Replayable,
    KF: Fn(&C::Request) -> Option<K>,
    ST: Fn(R, Duration) -> R,
    UN: Fn(Unavailable) -> R,
{
    type Response = R;
    type Error = Infallible;
    type Future = std::future::Ready<Result<R, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: C) -> Self::Future {
        let functions = &*self.functions;
        let response = match (functions.key)(call.request()).and_then(|key| self.saved.get(&key)) {
            Some((answer, age)) => {
                self.saved.count_served();
                (functions.stale)(answer, age)
            }
            None => {
                self.saved.count_unavailable();
                (functions.unavailable)(call.unavailable())
            }
        };
        std::future::ready(Ok(response))
    }
}

impl<K, R, KF, ST, UN> Clone for SavedFallback<K, R, KF, ST, UN> {
    fn clone(&self) -> Self {
        SavedFallback {
            saved: self.saved.clone(),
            functions: self.functions.clone(),
        }
    }
}

impl<K, R, KF, ST, UN> fmt::Debug for SavedFallback<K, R, KF, ST, UN> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SavedFallback")
            .field("saved", &self.saved)
            .finish_non_exhaustive()
    }
}
