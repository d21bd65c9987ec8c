//! Saved answers: the last good answer to each question, served labelled stale while the
//! breaker is open, or, with none saved, an honest "unavailable, retry after T" answer.
//!
//! Three parts, sharing one store ([`SavedAnswers`]):
//!
//! - [`SaveLayer`] goes **outside** the breaker: each answer of the wrapped service that
//!   the breaker's classifier called a success ([`Verdict::Success`](crate::Verdict)) is
//!   stored under the request's key (a key function you give; `None` means "do not save
//!   this one"). It reads the breaker's verdict on the answer, so a 503 (an `Ok` to
//!   tower) is never saved, and there is no second classifier to keep in step.
//! - [`SavedFallback`] is the breaker's fallback
//!   ([`CircuitBreakerLayer::with_fallback_context`](crate::CircuitBreakerLayer::with_fallback_context)):
//!   for a skipped call, it serves the saved answer to the same question, passed through
//!   your `stale` function so it says how old it is; with no saved answer, or one older
//!   than the store's age limit, it builds your `unavailable` answer from an
//!   [`Unavailable`]: the breaker's name, why, and the real time until the next probe,
//!   from the breaker's own decision for that call ([`Skipped`](crate::fallback::Skipped)). Given
//!   to a [`RecoverLayer`](crate::recover::RecoverLayer) too, it answers the calls that
//!   fail the same way.
//! - [`SavedAnswers`] is bounded in memory (a capacity, the least recently stored answer
//!   evicted first) and in time (an age limit: older answers are never served), and
//!   counts what the fallback served.
//!
//! ```
//! use std::time::Duration;
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::sync::Arc;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_circuit_breaker::saved::{stale_label, SaveLayer, SavedAnswers, Unavailable};
//! use tower_circuit_breaker::{CircuitBreakerLayer, Cooldown, Reason, Source, State};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), tower::BoxError> {
//! // The model client: up until `down` is set.
//! let down = Arc::new(AtomicBool::new(false));
//! let client = service_fn({
//!     let down = down.clone();
//!     move |prompt: String| {
//!         let down = down.load(Ordering::SeqCst);
//!         async move {
//!             if down {
//!                 return Err(std::io::Error::other("connection refused"));
//!             }
//!             Ok(format!("The answer to {prompt:?} is 42."))
//!         }
//!     }
//! });
//!
//! let saved = SavedAnswers::new(1_000, Duration::from_secs(24 * 3600))?;
//! let breaker = CircuitBreakerLayer::builder()
//!     .name("model")
//!     .failure_threshold(3)
//!     .cooldown(Cooldown::Time(Duration::from_secs(30)))
//!     .build()?;
//! // The answer to a prompt is saved under the prompt.
//! let save = SaveLayer::new(saved.clone(), |prompt: &String| Some(prompt.clone()));
//! let fallback = save.fallback(
//!     |answer: String, age: Duration| format!("{}\n{answer}", stale_label(age)),
//!     |unavailable: Unavailable| unavailable.to_string(),
//! );
//! let mut model = ServiceBuilder::new()
//!     .layer(save) // outside the breaker: saves what its classifier calls a success
//!     .layer(breaker.with_fallback_context(fallback))
//!     .service(client);
//!
//! // A first good answer, saved.
//! let question = "What is six times seven?".to_string();
//! let answer = model.ready().await?.call(question.clone()).await?;
//! assert_eq!(answer.source(), Source::Service);
//! assert_eq!(saved.len(), 1);
//!
//! // Ten minutes later the model is down; three failures open the breaker.
//! tokio::time::advance(Duration::from_secs(600)).await;
//! down.store(true, Ordering::SeqCst);
//! for _ in 0..3 {
//!     assert!(model.ready().await?.call("Hello?".into()).await.is_err());
//! }
//! assert_eq!(saved.len(), 1); // failures are never saved
//!
//! // The same question gets the saved answer, labelled with its age.
//! let answer = model.ready().await?.call(question).await?;
//! assert_eq!(answer.source(), Source::Fallback(Reason::Open));
//! assert_eq!(
//!     answer.get_ref(),
//!     "[STALE DATA — saved 10m 0s ago, may not reflect current state]\n\
//!      The answer to \"What is six times seven?\" is 42."
//! );
//!
//! // A new question has no saved answer: it is told when to come back.
//! tokio::time::advance(Duration::from_secs(12)).await;
//! let answer = model.ready().await?.call("What is the time?".into()).await?;
//! assert_eq!(
//!     answer.get_ref(),
//!     "model is unavailable (its circuit breaker is open); retry after 18s"
//! );
//! assert_eq!((saved.served(), saved.unavailable()), (1, 1));
//! # Ok(()) }
//! ```
//!
//! # What it never does
//!
//! - It never makes up content: the only content [`SavedFallback`] serves is an answer
//!   the wrapped service really gave to a request with the same key, and nothing else
//!   writes to the store (there is no public insert). It saves only what the breaker's
//!   classifier called a success: never a failure, an ignored answer, or a fallback's
//!   answer (which carries no verdict).
//! - It never serves a saved answer unlabeled: every one goes through your `stale`
//!   function with its age, and the breaker's [`Answer`](crate::Answer) also marks it
//!   [`Source::Fallback`](crate::Source::Fallback).
//! - It never serves an answer older than the age limit.
//!
//! # HTTP responses
//!
//! A saved answer is served again, so it must be [`Replayable`] (`Clone`). A
//! `reqwest::Response` or an `http::Response<Incoming>` is not: its body is a stream.
//! Put `http::BufferBodyLayer` inside the breaker (feature `http`): its
//! `http::BufferedResponse` holds the status, headers and body bytes, is
//! `Clone`, is classified by `HttpClassifier` and labelled by `ProvenanceLayer`, and
//! converts to and from `http::Response` and `reqwest::Response`. Or save the parsed
//! answer (`map_response` inside the save layer).
//!
//! For `BufferedResponse`s the two functions are ready-made:
//! `save.fallback(http::stale, http::unavailable)` serves a saved answer with `Age`, an
//! `x-circuit-breaker-stale: age=<seconds>` marker and, in an OpenAI chat completion,
//! [`stale_label`] in each message's content (the JSON kept valid), and answers a call
//! with nothing saved with a 503 that carries `Retry-After` when the wait is known and an
//! OpenAI-style error body saying why.
//!
//! # Keys
//!
//! The key decides which questions are "the same". Key on everything that changes the
//! answer (the model, the system prompt, the messages, the sampling settings that
//! matter), and return `None` for requests whose answers must not be replayed: personal
//! data, time-sensitive questions, tool calls with side effects. A key too coarse serves
//! one question's answer to another.
//!
//! # Time
//!
//! Ages are measured on `tokio::time`'s clock, like the breaker's cooldowns, so
//! paused-time tests run instantly.

mod fallback;
mod save;
mod store;
mod unavailable;

pub use self::fallback::{SavedFallback, Unanswered};
pub use self::save::{EverySuccess, GoodAnswer, Save, SaveFuture, SaveLayer};
pub use self::store::{SavedAnswers, SavedConfigError};
pub(crate) use self::unavailable::ceil_secs;
pub use self::unavailable::{stale_label, Unavailable};

/// An answer that can be saved and served again: one that is `Clone`, since each time it
/// is served it is a copy of the one saved. Implemented for every `Clone` type.
///
/// A response whose body is a stream (`reqwest::Response`, `http::Response<Incoming>`)
/// is not: it can be read only once. Buffer it first with
/// `http::BufferBodyLayer` (feature `http`), inside the breaker, whose
/// `http::BufferedResponse` (status, headers and body bytes) is `Clone` and
/// still works with `ErrorBodyLayer` and `ProvenanceLayer`; or save the parsed answer
/// (a `String`, your completion type) behind a `map_response`.
///
/// The compiler says so where the store meets the response type:
///
/// ```compile_fail,E0277
/// use std::time::Duration;
/// use tower_circuit_breaker::saved::{SaveLayer, SavedAnswers};
///
/// let saved = SavedAnswers::<String, reqwest::Response>::new(100, Duration::from_secs(60))?;
/// // error[E0277]: `reqwest::Response` cannot be saved and served again: a saved answer
/// // must be `Clone` ... buffer it inside the breaker with `BufferBodyLayer` ...
/// let save = SaveLayer::new(saved, |prompt: &String| Some(prompt.clone()));
/// # Ok::<(), tower_circuit_breaker::saved::SavedConfigError>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be saved and served again: a saved answer must be `Clone`",
    label = "not `Clone`, so not `Replayable`",
    note = "a response whose body is a stream can be read once; buffer it inside the breaker with `tower_circuit_breaker::http::BufferBodyLayer` (its `BufferedResponse` is `Clone`), or save the parsed answer"
)]
pub trait Replayable: Clone {}

impl<T: Clone> Replayable for T {}
