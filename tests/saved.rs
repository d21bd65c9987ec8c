//! Saved answers: the last good answer per request key, served labelled stale with its
//! real age while the breaker is open, bounded by capacity and age; without one, an
//! honest "unavailable" answer whose retry-after is the breaker's real remaining
//! cooldown. Failures, answers that are not good, and requests without a key are never
//! saved, and the fallback never serves content the model did not really give.
//!
//! Every test runs on tokio's paused clock and moves it with `tokio::time::advance`.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{advance, Instant};
use tower::util::BoxCloneService;
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_circuit_breaker::saved::{
    stale_label, EverySuccess, Save, SaveFuture, SaveLayer, SavedAnswers, SavedConfigError,
    SavedFallback, Unavailable,
};
use tower_circuit_breaker::{
    Answer, Builder, CircuitBreakerHandle, Cooldown, Failure, NextProbe, Origin, Outcome, Reason,
    Source, State, Verdict,
};
use tower_test::{assert_request_eq, mock};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// What a caller is served: the test model's own text, or what the saved-answers fallback
/// gives in its place (a saved answer labelled with its age, or word that none was saved).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Served {
    /// The model's own answer.
    Model(String),
    /// A saved answer, labelled with its age by the fallback.
    Stale { answer: Box<Served>, age: Duration },
    /// The fallback had no saved answer.
    Unavailable(Unavailable),
}

/// How the model behaves for the next calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Behavior {
    /// Answers `answer #n to <prompt>`.
    Up,
    /// Answers `ERROR #n: ...`: an `Ok` that is not a good answer.
    Bad,
    /// Fails: connection refused.
    Down,
    /// Fails with a rate limit and a Retry-After.
    RateLimited(Duration),
    /// Fails with an exhausted quota: permanent.
    Quota,
    /// Never answers.
    Hang,
}

#[derive(Debug)]
enum ModelError {
    Refused,
    RateLimited(Duration),
    Quota,
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::Refused => f.write_str("connection refused"),
            ModelError::RateLimited(wait) => write!(f, "429, retry after {wait:?}"),
            ModelError::Quota => f.write_str("insufficient_quota"),
        }
    }
}

impl std::error::Error for ModelError {}

/// The model's behavior, and every call and answer it gave.
#[derive(Clone)]
struct World {
    behavior: Arc<Mutex<Behavior>>,
    calls: Arc<AtomicUsize>,
    /// `(prompt, answer)` for every `Ok` the model returned.
    answers: Arc<Mutex<Vec<(String, String)>>>,
}

impl World {
    fn new() -> Self {
        World {
            behavior: Arc::new(Mutex::new(Behavior::Up)),
            calls: Arc::new(AtomicUsize::new(0)),
            answers: Arc::default(),
        }
    }

    fn set(&self, behavior: Behavior) {
        *self.behavior.lock().unwrap() = behavior;
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Whether the model really gave `answer` to `prompt`.
    fn gave(&self, prompt: &str, answer: &str) -> bool {
        self.answers
            .lock()
            .unwrap()
            .iter()
            .any(|(p, a)| p == prompt && a == answer)
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The model client.
fn model(
    world: World,
) -> impl Service<
    String,
    Response = Served,
    Error = ModelError,
    Future = BoxFuture<Result<Served, ModelError>>,
> + Clone
       + Send
       + 'static {
    service_fn(
        move |prompt: String| -> BoxFuture<Result<Served, ModelError>> {
            let n = world.calls.fetch_add(1, Ordering::SeqCst) + 1;
            let behavior = *world.behavior.lock().unwrap();
            let answers = world.answers.clone();
            Box::pin(async move {
                let text = match behavior {
                    Behavior::Up => format!("answer #{n} to {prompt}"),
                    Behavior::Bad => format!("ERROR #{n}: the model refused to answer"),
                    Behavior::Down => return Err(ModelError::Refused),
                    Behavior::RateLimited(wait) => return Err(ModelError::RateLimited(wait)),
                    Behavior::Quota => return Err(ModelError::Quota),
                    Behavior::Hang => std::future::pending().await,
                };
                answers.lock().unwrap().push((prompt, text.clone()));
                Ok(Served::Model(text))
            })
        },
    )
}

type Key = fn(&String) -> Option<String>;
type Good = fn(&Served) -> bool;
type Stale = fn(Served, Duration) -> Served;
type Unav = fn(Unavailable) -> Served;

/// Prompts starting with `private:` have no key: never saved, never served.
#[allow(clippy::ptr_arg)] // a key function takes `&Request`, and requests are `String`s
fn key(prompt: &String) -> Option<String> {
    (!prompt.starts_with("private:")).then(|| prompt.clone())
}

fn good(reply: &Served) -> bool {
    !matches!(reply, Served::Model(text) if text.starts_with("ERROR"))
}

fn stale(answer: Served, age: Duration) -> Served {
    Served::Stale {
        answer: Box::new(answer),
        age,
    }
}

fn unavailable(unavailable: Unavailable) -> Served {
    Served::Unavailable(unavailable)
}

fn classify(result: &Result<Served, ModelError>) -> Outcome {
    match result {
        Ok(_) => Outcome::Success,
        Err(ModelError::Refused) => Outcome::failure(),
        Err(ModelError::RateLimited(wait)) => {
            Outcome::Failure(Failure::new("rate limited").retry_after(*wait))
        }
        Err(ModelError::Quota) => Outcome::Failure(Failure::new("insufficient_quota").permanent()),
    }
}

type Stack = BoxCloneService<String, Answer<Served>, BoxError>;

/// The breaker (named `model`) with the save layer outside and the saved fallback.
fn stack(
    breaker: Builder,
    saved: &SavedAnswers<String, Served>,
    world: &World,
) -> (Stack, CircuitBreakerHandle) {
    let breaker = breaker.name("model").build().expect("valid settings");
    let handle = breaker.handle();
    let save = SaveLayer::new(saved.clone(), key as Key).only_if(good as Good);
    let fallback = save.fallback(stale as Stale, unavailable as Unav);
    let service = ServiceBuilder::new()
        .layer(save)
        .layer(
            breaker
                .with_fallback_context(fallback)
                .with_classifier(classify as fn(&Result<Served, ModelError>) -> Outcome),
        )
        .service(model(world.clone()));
    (BoxCloneService::new(service), handle)
}

fn store(capacity: usize, max_age: Duration) -> SavedAnswers<String, Served> {
    SavedAnswers::new(capacity, max_age).expect("valid settings")
}

async fn ask(service: &mut Stack, prompt: &str) -> Result<Answer<Served>, BoxError> {
    service.ready().await?.call(prompt.to_string()).await
}

/// Asks and expects the model's own answer; returns its text.
async fn ask_model(service: &mut Stack, prompt: &str) -> String {
    let answer = ask(service, prompt).await.expect("an answer");
    assert!(answer.source().is_service(), "{answer:?}");
    match answer.into_inner() {
        Served::Model(text) => text,
        other => panic!("expected the model's answer, got {other:?}"),
    }
}

/// Asks and expects a saved answer from the fallback; returns its text and age.
async fn ask_stale(service: &mut Stack, prompt: &str) -> (String, Duration) {
    let answer = ask(service, prompt).await.expect("an answer");
    assert!(answer.is_fallback(), "{answer:?}");
    match answer.into_inner() {
        Served::Stale { answer, age } => match *answer {
            Served::Model(text) => (text, age),
            other => panic!("a saved answer that is not the model's: {other:?}"),
        },
        other => panic!("expected a saved answer, got {other:?}"),
    }
}

/// Asks and expects the fallback's unavailable answer.
async fn ask_unavailable(service: &mut Stack, prompt: &str) -> Unavailable {
    let answer = ask(service, prompt).await.expect("an answer");
    assert!(answer.is_fallback(), "{answer:?}");
    match answer.into_inner() {
        Served::Unavailable(unavailable) => unavailable,
        other => panic!("expected an unavailable answer, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_saved_answer_is_served_labeled_with_its_real_age_while_open() {
    let (world, saved) = (World::new(), store(100, secs(3600)));
    let (mut model, handle) = stack(Builder::new(), &saved, &world);

    let real = ask_model(&mut model, "capital of France?").await;
    assert_eq!(saved.len(), 1);

    advance(secs(90)).await;
    handle.force_open();
    let answer = ask(&mut model, "capital of France?").await.unwrap();
    assert_eq!(answer.source(), Source::Fallback(Reason::ForcedOpen));
    assert_eq!(
        answer.into_inner(),
        Served::Stale {
            answer: Box::new(Served::Model(real.clone())),
            age: secs(90)
        }
    );

    // Serving it did not save it again: its age keeps counting from the real answer.
    advance(Duration::from_millis(15_250)).await;
    assert_eq!(
        ask_stale(&mut model, "capital of France?").await,
        (real, Duration::from_millis(105_250))
    );
    assert_eq!(world.calls(), 1, "the model is not called while open");
    assert_eq!(
        (saved.stored(), saved.served(), saved.unavailable()),
        (1, 2, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn the_stale_label_names_the_real_age() {
    let saved = SavedAnswers::<String, String>::new(10, secs(24 * 3600)).unwrap();
    let breaker = Builder::new().name("model").build().unwrap();
    let handle = breaker.handle();
    let save = SaveLayer::new(saved.clone(), |prompt: &String| Some(prompt.clone()));
    let fallback = save.fallback(
        |answer: String, age: Duration| format!("{}\n{answer}", stale_label(age)),
        |unavailable: Unavailable| unavailable.to_string(),
    );
    let mut model = ServiceBuilder::new()
        .layer(save)
        .layer(breaker.with_fallback_context(fallback))
        .service(service_fn(|prompt: String| async move {
            Ok::<_, std::io::Error>(format!("{prompt} → 4"))
        }));

    model
        .ready()
        .await
        .unwrap()
        .call("2+2".into())
        .await
        .unwrap();
    advance(secs(2 * 3600 + 65)).await;
    handle.force_open();
    let answer = model
        .ready()
        .await
        .unwrap()
        .call("2+2".into())
        .await
        .unwrap();
    assert_eq!(
        answer.into_inner(),
        "[STALE DATA — saved 2h 1m 5s ago, may not reflect current state]\n2+2 → 4"
    );
    let answer = model
        .ready()
        .await
        .unwrap()
        .call("3+3".into())
        .await
        .unwrap();
    assert_eq!(
        answer.into_inner(),
        "model is unavailable (it was forced open); no retry is scheduled until a person resets it"
    );
}

#[tokio::test(start_paused = true)]
async fn an_answer_past_the_age_limit_is_never_served() {
    let (world, saved) = (World::new(), store(100, secs(60)));
    let (mut model, handle) = stack(Builder::new(), &saved, &world);

    let real = ask_model(&mut model, "weather?").await;
    handle.force_open();
    advance(secs(60)).await;
    assert_eq!(ask_stale(&mut model, "weather?").await, (real, secs(60)));

    advance(Duration::from_nanos(1)).await;
    let unavailable = ask_unavailable(&mut model, "weather?").await;
    assert_eq!(unavailable.reason(), Some(Reason::ForcedOpen));
    assert_eq!((saved.len(), saved.expired()), (0, 1));
    assert_eq!(saved.get(&"weather?".to_string()), None);
    assert_eq!((saved.served(), saved.unavailable()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn expired_answers_are_dropped_when_another_is_stored() {
    let (world, saved) = (World::new(), store(100, secs(60)));
    let (mut model, _) = stack(Builder::new(), &saved, &world);

    ask_model(&mut model, "a").await;
    ask_model(&mut model, "b").await;
    advance(secs(61)).await;
    ask_model(&mut model, "c").await;
    assert_eq!(saved.expired(), 2);
    assert_eq!(saved.len(), 1);
    assert!(saved.contains(&"c".to_string()));
}

#[tokio::test(start_paused = true)]
async fn capacity_evicts_the_least_recently_stored_answer() {
    let (world, saved) = (World::new(), store(2, secs(3600)));
    let (mut model, handle) = stack(Builder::new(), &saved, &world);

    ask_model(&mut model, "a").await;
    advance(secs(1)).await;
    ask_model(&mut model, "b").await;
    advance(secs(1)).await;
    // Answered again: `a` is now the most recently stored, `b` the least.
    let a = ask_model(&mut model, "a").await;
    advance(secs(1)).await;
    let c = ask_model(&mut model, "c").await;

    assert_eq!((saved.len(), saved.evicted(), saved.stored()), (2, 1, 4));
    assert!(!saved.contains(&"b".to_string()));
    assert_eq!(saved.age(&"a".to_string()), Some(secs(1)));

    handle.force_open();
    assert_eq!(ask_stale(&mut model, "a").await, (a, secs(1)));
    assert_eq!(ask_stale(&mut model, "c").await, (c, Duration::ZERO));
    ask_unavailable(&mut model, "b").await;
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_the_breakers_real_remaining_cooldown() {
    let (world, saved) = (World::new(), store(100, secs(3600)));
    let breaker = Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(30)));
    let (mut model, handle) = stack(breaker, &saved, &world);

    world.set(Behavior::Down);
    assert!(ask(&mut model, "q").await.is_err());
    assert_eq!(handle.state(), State::Open);

    let unavailable = ask_unavailable(&mut model, "q").await;
    assert_eq!(unavailable.retry_after(), Some(secs(30)));
    assert_eq!(unavailable.retry_after(), handle.snapshot().retry_after());
    assert_eq!(
        (unavailable.name(), unavailable.reason()),
        ("model", Some(Reason::Open))
    );

    advance(secs(12)).await;
    let unavailable = ask_unavailable(&mut model, "q").await;
    assert_eq!(unavailable.retry_after(), Some(secs(18)));
    assert_eq!(unavailable.retry_after(), handle.snapshot().retry_after());
    assert_eq!(
        unavailable.to_string(),
        "model is unavailable (its circuit breaker is open); retry after 18s"
    );

    advance(Duration::from_millis(17_500)).await;
    let unavailable = ask_unavailable(&mut model, "q").await;
    assert_eq!(unavailable.retry_after(), Some(Duration::from_millis(500)));
    // Rounded up: whoever waits that long finds the probe allowed.
    assert!(unavailable.to_string().ends_with("retry after 1s"));

    // At the deadline the next call is the probe: the model is called again.
    advance(Duration::from_millis(500)).await;
    world.set(Behavior::Up);
    let calls = world.calls();
    let answer = ask(&mut model, "q").await.unwrap();
    assert_eq!(answer.source(), Source::Probe);
    assert_eq!(world.calls(), calls + 1);
    assert_eq!(handle.state(), State::Closed);
    assert!(
        saved.contains(&"q".to_string()),
        "a probe's good answer is saved"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_follows_the_wait_the_service_asked_for() {
    let (world, saved) = (World::new(), store(100, secs(3600)));
    let breaker = Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1_000));
    let (mut model, _) = stack(breaker, &saved, &world);

    world.set(Behavior::RateLimited(secs(7)));
    assert!(ask(&mut model, "q").await.is_err());
    advance(secs(2)).await;
    let unavailable = ask_unavailable(&mut model, "q").await;
    assert_eq!(unavailable.retry_after(), Some(secs(5)));
    assert_eq!(unavailable.calls_until_probe(), Some(999));
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_unknown_when_only_calls_or_a_person_can_reopen_it() {
    // A cooldown in calls: the number of calls is known, not a time.
    let (world, saved) = (World::new(), store(100, secs(3600)));
    let breaker = Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(4));
    let (mut model, handle) = stack(breaker, &saved, &world);
    world.set(Behavior::Down);
    assert!(ask(&mut model, "q").await.is_err());
    let unavailable = ask_unavailable(&mut model, "q").await;
    assert_eq!(unavailable.retry_after(), None);
    assert_eq!(unavailable.calls_until_probe(), Some(3));
    assert_eq!(
        unavailable.calls_until_probe(),
        handle.snapshot().next_probe.calls()
    );
    assert_eq!(
        unavailable.to_string(),
        "model is unavailable (its circuit breaker is open); it will be tried again in 3 calls"
    );
    ask_unavailable(&mut model, "q").await;
    // The next call is the probe: no wait, and said as such (never "retry now").
    let unavailable = ask_unavailable(&mut model, "q").await;
    assert_eq!(
        (unavailable.retry_after(), unavailable.calls_until_probe()),
        (Some(Duration::ZERO), Some(1))
    );
    assert_eq!(
        unavailable.to_string(),
        "model is unavailable (its circuit breaker is open); the next call will be its probe"
    );

    // The kill switch.
    handle.kill_switch().kill();
    let unavailable = ask_unavailable(&mut model, "q").await;
    assert_eq!(
        (unavailable.reason(), unavailable.retry_after()),
        (Some(Reason::Killed), None)
    );
    assert_eq!(unavailable.next_probe(), NextProbe::Manual);
    assert_eq!(
        unavailable.to_string(),
        "model is unavailable (the kill switch is on); no retry is scheduled until a person turns the kill switch off"
    );
    handle.kill_switch().revive();

    // A permanent failure (an exhausted quota).
    handle.reset();
    world.set(Behavior::Quota);
    assert!(ask(&mut model, "q").await.is_err());
    let unavailable = ask_unavailable(&mut model, "q").await;
    assert_eq!(
        (
            unavailable.reason(),
            unavailable.state(),
            unavailable.retry_after()
        ),
        (Some(Reason::Open), State::Open, None)
    );
    // It says which failure holds it open, and that only a person ends it.
    assert!(unavailable.is_permanent());
    assert_eq!(unavailable.failure(), Some("insufficient_quota"));
    assert_eq!(
        unavailable.to_string(),
        "model is unavailable: insufficient_quota; it does not pass by itself, so no retry is \
         scheduled until a person resets it"
    );
    let from_snapshot = Unavailable::from_snapshot(&handle.snapshot());
    assert_eq!(from_snapshot.to_string(), unavailable.to_string());
}

#[tokio::test(start_paused = true)]
async fn a_call_skipped_while_a_probe_is_under_way_is_told_so() {
    let (world, saved) = (World::new(), store(100, secs(3600)));
    let breaker = Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(secs(5)));
    let (mut model, _) = stack(breaker, &saved, &world);
    world.set(Behavior::Down);
    assert!(ask(&mut model, "q").await.is_err());
    advance(secs(5)).await;

    world.set(Behavior::Hang);
    let mut prober = model.clone();
    let probe = prober.ready().await.unwrap().call("q".into());
    let unavailable = ask_unavailable(&mut model, "q").await;
    assert_eq!(
        (
            unavailable.reason(),
            unavailable.state(),
            unavailable.retry_after()
        ),
        (Some(Reason::HalfOpenFull), State::HalfOpen, None)
    );
    assert_eq!(
        unavailable.to_string(),
        "model is unavailable (a probe is checking whether it is back); retry shortly"
    );
    drop(probe);
}

#[tokio::test(start_paused = true)]
async fn failures_and_answers_that_are_not_good_are_never_saved() {
    let (world, saved) = (World::new(), store(100, secs(3600)));
    // Only counted, so that the breaker stays closed through them.
    let breaker = Builder::new()
        .failure_threshold(10)
        .open_on_retry_after(false);
    let (mut model, handle) = stack(breaker, &saved, &world);

    world.set(Behavior::Down);
    assert!(ask(&mut model, "a").await.is_err());
    world.set(Behavior::RateLimited(secs(1)));
    assert!(ask(&mut model, "a").await.is_err());
    world.set(Behavior::Bad);
    let bad = ask_model(&mut model, "b").await;
    assert!(bad.starts_with("ERROR"));
    assert_eq!((saved.len(), saved.stored()), (0, 0));

    // A good answer, then a failure and a bad answer to the same question: the good
    // answer stays.
    world.set(Behavior::Up);
    let real = ask_model(&mut model, "c").await;
    advance(secs(3)).await;
    world.set(Behavior::Down);
    assert!(ask(&mut model, "c").await.is_err());
    world.set(Behavior::Bad);
    ask_model(&mut model, "c").await;
    assert_eq!((saved.len(), saved.stored()), (1, 1));

    handle.force_open();
    ask_unavailable(&mut model, "a").await;
    ask_unavailable(&mut model, "b").await;
    assert_eq!(ask_stale(&mut model, "c").await, (real, secs(3)));
}

#[tokio::test(start_paused = true)]
async fn only_what_the_breakers_classifier_calls_a_success_is_saved() {
    // `Ok`s that are failures (a 503, to an HTTP classifier) or say nothing, and errors.
    let classify = |result: &Result<String, std::io::Error>| match result {
        Ok(text) if text.starts_with("503") => Outcome::failure_with("503"),
        Ok(text) if text.starts_with("cancelled") => Outcome::Ignored,
        Ok(_) => Outcome::Success,
        Err(_) => Outcome::failure(),
    };
    let saved = SavedAnswers::<u32, String>::new(10, secs(60)).unwrap();
    let breaker = Builder::new()
        .failure_threshold(100)
        .build()
        .unwrap()
        .with_classifier(classify);
    let mut service = ServiceBuilder::new()
        .layer(SaveLayer::new(saved.clone(), |n: &u32| Some(*n)))
        .layer(breaker)
        .service(service_fn(|n: u32| async move {
            match n % 4 {
                0 => Ok(format!("answer {n}")),
                1 => Ok(format!("503 Service Unavailable {n}")),
                2 => Ok(format!("cancelled {n}")),
                _ => Err(std::io::Error::other(format!("failed: {n}"))),
            }
        }));
    for n in 0..8 {
        let _ = service.ready().await.unwrap().call(n).await;
    }
    assert_eq!(saved.len(), 2);
    assert_eq!(
        saved.get(&4),
        Some(("answer 4".to_string(), Duration::ZERO))
    );
    for never in [1, 2, 3, 5, 6, 7] {
        assert_eq!(saved.get(&never), None, "{never}");
    }

    // A failure of the same question later never replaces its good answer.
    let mut failing = ServiceBuilder::new()
        .layer(SaveLayer::new(saved.clone(), |_: &u32| Some(4)))
        .layer(
            Builder::new()
                .failure_threshold(100)
                .build()
                .unwrap()
                .with_classifier(classify),
        )
        .service(service_fn(|_: u32| async {
            Ok::<_, std::io::Error>("503 Service Unavailable".to_string())
        }));
    let answer = failing.ready().await.unwrap().call(0).await.unwrap();
    assert!(answer.is_failure());
    assert_eq!(
        saved.get(&4),
        Some(("answer 4".to_string(), Duration::ZERO))
    );
}

#[tokio::test(start_paused = true)]
async fn requests_without_a_key_are_never_saved_or_served() {
    let (world, saved) = (World::new(), store(100, secs(3600)));
    let (mut model, handle) = stack(Builder::new(), &saved, &world);

    ask_model(&mut model, "private: my diagnosis?").await;
    assert_eq!((saved.len(), saved.stored()), (0, 0));
    let real = ask_model(&mut model, "q").await;

    handle.force_open();
    // Another answer is saved, but a request without a key gets none of it.
    ask_unavailable(&mut model, "private: my diagnosis?").await;
    ask_unavailable(&mut model, "private: q").await;
    assert_eq!(ask_stale(&mut model, "q").await, (real, Duration::ZERO));
    assert_eq!((saved.served(), saved.unavailable()), (1, 2));
}

/// A small reference model of the store: insertion order, capacity, age limit.
struct Reference {
    capacity: usize,
    max_age: Duration,
    /// `(prompt, answer, stored at)`, least recently stored first.
    entries: VecDeque<(String, String, Instant)>,
}

impl Reference {
    fn prune(&mut self, now: Instant) {
        while self
            .entries
            .front()
            .is_some_and(|(_, _, at)| now - *at > self.max_age)
        {
            self.entries.pop_front();
        }
    }

    fn store(&mut self, prompt: &str, answer: &str, now: Instant) {
        self.prune(now);
        if let Some(i) = self.entries.iter().position(|(p, _, _)| p == prompt) {
            self.entries.remove(i);
        } else if self.entries.len() >= self.capacity {
            self.entries.pop_front();
        }
        self.entries
            .push_back((prompt.to_string(), answer.to_string(), now));
    }

    fn get(&mut self, prompt: &str, now: Instant) -> Option<(String, Duration)> {
        self.prune(now);
        self.entries
            .iter()
            .find(|(p, _, _)| p == prompt)
            .map(|(_, answer, at)| (answer.clone(), now - *at))
    }
}

/// A small deterministic generator (xorshift), so runs repeat.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[tokio::test(start_paused = true)]
async fn the_fallback_never_serves_content_that_was_not_a_real_answer() {
    for seed in 1..=8u64 {
        let (world, saved) = (World::new(), store(4, secs(50)));
        let breaker = Builder::new()
            .failure_threshold(2)
            .cooldown(Cooldown::Time(secs(7)));
        let (mut model, handle) = stack(breaker, &saved, &world);
        let mut reference = Reference {
            capacity: 4,
            max_age: secs(50),
            entries: VecDeque::new(),
        };
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut fallbacks = 0;

        for _ in 0..1_500 {
            match rng.below(20) {
                0 => advance(secs(rng.below(30))).await,
                1 => handle.force_open(),
                2 => handle.reset(),
                3 if handle.kill_switch().is_killed() => handle.kill_switch().revive(),
                3 => handle.kill_switch().kill(),
                _ => {}
            }
            world.set(match rng.below(10) {
                0..=5 => Behavior::Up,
                6..=7 => Behavior::Down,
                _ => Behavior::Bad,
            });
            advance(Duration::from_millis(rng.below(2_000))).await;
            let prompt = match rng.below(10) {
                0 => "private: q".to_string(),
                n => format!("q{}", n % 7),
            };
            let now = Instant::now();
            let Ok(answer) = ask(&mut model, &prompt).await else {
                continue;
            };
            let source = answer.source();
            match answer.into_inner() {
                Served::Model(text) => {
                    assert!(source.is_service());
                    assert!(world.gave(&prompt, &text));
                    if !text.starts_with("ERROR") && key(&prompt).is_some() {
                        reference.store(&prompt, &text, now);
                    }
                }
                Served::Stale { answer, age } => {
                    fallbacks += 1;
                    assert!(source.is_fallback());
                    let Served::Model(text) = *answer else {
                        panic!("a saved answer that is not the model's: {answer:?}");
                    };
                    assert!(
                        world.gave(&prompt, &text),
                        "{prompt}: {text} was never given"
                    );
                    assert!(age <= secs(50));
                    assert_eq!(reference.get(&prompt, now), Some((text, age)));
                }
                Served::Unavailable(_) => {
                    fallbacks += 1;
                    assert!(source.is_fallback());
                    assert_eq!(reference.get(&prompt, now), None);
                }
            }
        }
        assert_eq!(saved.served() + saved.unavailable(), fallbacks);
        assert!(saved.served() > 0 && saved.unavailable() > 0, "seed {seed}");
        assert!(saved.len() <= 4);
    }
}

#[tokio::test(start_paused = true)]
async fn the_save_layer_changes_neither_readiness_nor_answers_nor_errors() {
    let saved = SavedAnswers::<String, String>::new(10, secs(60)).unwrap();
    let layer = SaveLayer::new(saved.clone(), |request: &String| Some(request.clone()));
    let (mut service, mut handle) = mock::spawn_layer::<String, Answer<String>, _>(layer);
    let answer = |text: &str, verdict| {
        Answer::from_parts(
            text.to_string(),
            Origin::called(Source::Service, State::Closed, verdict),
        )
    };

    handle.allow(0);
    assert!(service.poll_ready().is_pending());
    handle.allow(1);
    assert!(service.poll_ready().is_ready());
    let response = service.call("hello".into());
    assert_request_eq!(handle, "hello".to_string())
        .send_response(answer("world", Verdict::Success));
    assert_eq!(response.await.unwrap(), answer("world", Verdict::Success));
    assert_eq!(
        saved.get(&"hello".to_string()),
        Some(("world".to_string(), Duration::ZERO))
    );

    // A failure, an ignored answer, a fallback's answer: passed on, never saved.
    let skipped = Answer::from_parts(
        "fallback".to_string(),
        Origin::skipped(tower_circuit_breaker::Skip::new(
            Reason::Open,
            State::Open,
            NextProbe::Manual,
        )),
    );
    for (request, response) in [
        ("a", answer("503", Verdict::Failure)),
        ("b", answer("?", Verdict::Ignored)),
        ("c", skipped),
    ] {
        handle.allow(1);
        assert!(service.poll_ready().is_ready());
        let future = service.call(request.into());
        assert_request_eq!(handle, request.to_string()).send_response(response.clone());
        assert_eq!(future.await.unwrap(), response);
    }

    handle.allow(1);
    assert!(service.poll_ready().is_ready());
    let response = service.call("boom".into());
    assert_request_eq!(handle, "boom".to_string()).send_error(std::io::Error::other("refused"));
    let err = response.await.unwrap_err();
    assert_eq!(err.to_string(), "refused");
    assert!(err.is::<std::io::Error>());
    assert_eq!(saved.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_before_it_ends_saves_nothing() {
    let (world, saved) = (World::new(), store(100, secs(3600)));
    let (mut model, _) = stack(Builder::new(), &saved, &world);
    world.set(Behavior::Hang);
    let future = model.ready().await.unwrap().call("q".into());
    drop(future);
    assert!(saved.is_empty());
}

#[test]
fn bad_settings_are_typed_errors() {
    let zero = SavedAnswers::<String, String>::new(0, secs(1)).unwrap_err();
    assert_eq!(zero, SavedConfigError::ZeroCapacity);
    assert_eq!(
        zero.to_string(),
        "saved answers capacity must be at least 1, got 0"
    );
    let zero = SavedAnswers::<String, String>::new(1, Duration::ZERO).unwrap_err();
    assert_eq!(zero, SavedConfigError::ZeroMaxAge);
    assert_eq!(
        zero.to_string(),
        "saved answers maximum age must be more than zero"
    );
    let saved = SavedAnswers::<String, String>::new(3, Duration::MAX).unwrap();
    assert_eq!((saved.capacity(), saved.max_age()), (3, Duration::MAX));
}

#[tokio::test(start_paused = true)]
async fn clones_share_one_store_and_remove_and_clear_forget() {
    let (world, saved) = (World::new(), store(100, secs(3600)));
    let watcher = saved.clone();
    assert_eq!(watcher, saved);
    assert_ne!(watcher, store(100, secs(3600)));
    let (mut model, handle) = stack(Builder::new(), &saved, &world);
    ask_model(&mut model, "a").await;
    ask_model(&mut model, "b").await;
    assert_eq!(watcher.len(), 2);

    assert!(watcher.remove(&"a".to_string()));
    assert!(!watcher.remove(&"a".to_string()));
    handle.force_open();
    ask_unavailable(&mut model, "a").await;
    watcher.clear();
    ask_unavailable(&mut model, "b").await;
    assert!(saved.is_empty());
    assert_eq!(saved.unavailable(), 2);
}

#[test]
fn public_types_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<SavedAnswers<String, String>>();
    send_sync::<SaveLayer<String, String, Key>>();
    send_sync::<Save<tower::util::ServiceFn<fn(String)>, String, Served, Key, Good>>();
    send_sync::<
        SaveFuture<std::future::Ready<Result<Served, BoxError>>, String, Served, EverySuccess>,
    >();
    send_sync::<SavedFallback<String, Served, Key, Stale, Unav>>();
    send_sync::<Unavailable>();
    send_sync::<SavedConfigError>();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_saves_and_serves_keep_the_store_bounded_and_honest() {
    let (world, saved) = (World::new(), store(8, secs(3600)));
    let (model, handle) = stack(Builder::new().failure_threshold(1_000), &saved, &world);
    let tasks: Vec<_> = (0..8u64)
        .map(|task| {
            let (mut model, handle, world) = (model.clone(), handle.clone(), world.clone());
            tokio::spawn(async move {
                let mut rng = Rng(task + 1);
                for _ in 0..500 {
                    if rng.below(50) == 0 {
                        handle.force_open();
                    } else if rng.below(50) == 0 {
                        handle.reset();
                    }
                    let prompt = format!("q{}", rng.below(20));
                    match ask(&mut model, &prompt).await.unwrap().into_inner() {
                        Served::Model(text) => assert!(world.gave(&prompt, &text)),
                        Served::Stale { answer, .. } => match *answer {
                            Served::Model(text) => assert!(world.gave(&prompt, &text)),
                            other => panic!("not the model's: {other:?}"),
                        },
                        Served::Unavailable(_) => {}
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert!(saved.len() <= 8);
    assert_eq!(saved.stored() as usize, world.answers.lock().unwrap().len());
}

#[test]
fn layers_and_fallbacks_clone_whatever_the_key_and_response_types() {
    /// Neither `Clone` nor `Debug`.
    #[derive(PartialEq, Eq, Hash)]
    struct OpaqueKey(u32);
    fn key(request: &u32) -> Option<OpaqueKey> {
        Some(OpaqueKey(*request))
    }
    fn assert_clone<T: Clone + fmt::Debug>(_: &T) {}

    let saved = SavedAnswers::<OpaqueKey, String>::new(1, secs(1)).unwrap();
    let layer = SaveLayer::new(saved.clone(), key as fn(&u32) -> Option<OpaqueKey>);
    assert_clone(&saved);
    assert_clone(&layer);
    assert_clone(&tower::Layer::layer(
        &layer,
        service_fn(|n: u32| async move {
            Ok::<_, std::io::Error>(Answer::from_parts(
                n.to_string(),
                Origin::called(Source::Service, State::Closed, Verdict::Success),
            ))
        }),
    ));
    assert_clone(&layer.fallback(
        stale_string as fn(String, Duration) -> String,
        |u: Unavailable| u.to_string(),
    ));

    fn stale_string(answer: String, age: Duration) -> String {
        format!("{}\n{answer}", stale_label(age))
    }
}

#[tokio::test(start_paused = true)]
async fn an_answer_whose_outcome_is_deferred_is_not_saved_until_known_so_never() {
    use tower_circuit_breaker::classify::{Classify, Settlement};

    /// A streamed answer: its outcome is settled by whoever reads it.
    #[derive(Clone)]
    struct Streamed(Arc<Mutex<Option<Settlement>>>);

    #[derive(Clone)]
    struct Defers;

    impl Classify<Streamed, std::io::Error> for Defers {
        fn classify(&self, _: &Result<Streamed, std::io::Error>) -> Outcome {
            Outcome::Success
        }

        fn defer(&self, response: &mut Streamed, settlement: Settlement) -> Result<(), Settlement> {
            *response.0.lock().unwrap() = Some(settlement);
            Ok(())
        }
    }

    let saved = SavedAnswers::<u32, Streamed>::new(10, secs(60)).unwrap();
    let breaker = Builder::new().build().unwrap().with_classifier(Defers);
    let handle = breaker.handle();
    let mut svc = ServiceBuilder::new()
        .layer(SaveLayer::new(saved.clone(), |n: &u32| Some(*n)))
        .layer(breaker)
        .service(service_fn(|_: u32| async {
            Ok::<_, std::io::Error>(Streamed(Arc::default()))
        }));
    let answer = svc.ready().await.unwrap().call(1).await.unwrap();
    assert_eq!(answer.verdict(), Some(Verdict::Deferred));
    assert!(
        saved.is_empty(),
        "a stream that may still break is not saved"
    );
    // Settled later, as a success: the breaker counts it; the store has nothing.
    let settlement = answer.get_ref().0.lock().unwrap().take().unwrap();
    settlement.success();
    assert_eq!(handle.snapshot().counts.successes, 1);
    assert!(saved.is_empty());
}
