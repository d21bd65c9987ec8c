//! Keyed breakers: one breaker per key, independent of each other; one kill switch for
//! all; a bounded registry that evicts only idle closed breakers and goes over its
//! capacity, counted, when it has none; fallbacks and `Rejected` per key; the tower
//! contract where the key is only known in `call`.
//!
//! Requests are `"key:action"` strings: the key is what comes before the colon, and the
//! test service answers `ok`, fails on `fail` and never answers `hang`. Time is tokio's
//! paused clock wherever it matters.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::advance;
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
use tower_circuit_breaker::error::ConfigError;
use tower_circuit_breaker::error::Rejected;
use tower_circuit_breaker::keyed::{
    KeyedBuilder, KeyedCircuitBreaker, KeyedCircuitBreakerHandle, KeyedCircuitBreakerLayer,
};
use tower_circuit_breaker::{
    Answer, Builder, Cooldown, KillSwitch, Outcome, Reason, Source, State,
};
use tower_test::mock;

type Req = &'static str;
type Key = fn(&Req) -> &'static str;

/// The key of a `"key:action"` request.
fn key(request: &Req) -> &'static str {
    request.split(':').next().unwrap_or_default()
}

fn builder(template: Builder) -> KeyedBuilder<&'static str, Key> {
    KeyedCircuitBreakerLayer::builder(template, key as Key)
}

fn build(template: Builder) -> KeyedCircuitBreakerLayer<&'static str, Key> {
    builder(template).build().expect("a valid configuration")
}

type Future_ = Pin<Box<dyn Future<Output = Result<Req, io::Error>> + Send>>;

/// The test service: `ok` answers the request, `fail` fails, `hang` never answers. It
/// counts the calls that reach it.
fn service(
    calls: Arc<AtomicUsize>,
) -> impl Service<Req, Response = Req, Error = io::Error, Future = Future_> + Clone {
    service_fn(move |request: Req| -> Future_ {
        calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            match request.split(':').nth(1) {
                Some("fail") => Err(io::Error::other(format!("{request}: refused"))),
                Some("hang") => std::future::pending().await,
                _ => Ok(request),
            }
        })
    })
}

/// The fallback: says which key it answered for.
fn fallback() -> impl Service<
    Req,
    Response = Req,
    Error = Infallible,
    Future = std::future::Ready<Result<Req, Infallible>>,
> + Clone {
    service_fn(|request: Req| {
        std::future::ready(Ok::<_, Infallible>(match key(&request) {
            "a" => "fallback for a",
            "b" => "fallback for b",
            _ => "fallback",
        }))
    })
}

async fn call<S>(svc: &mut S, request: Req) -> Result<Answer<Req>, BoxError>
where
    S: Service<Req, Response = Answer<Req>, Error = BoxError>,
{
    svc.ready().await?.call(request).await
}

fn state<K: std::hash::Hash + Eq>(registry: &KeyedCircuitBreakerHandle<K>, key: K) -> State {
    registry.get(&key).expect("the key has a breaker").state()
}

// ---------------------------------------------------------------------------------------
// One breaker per key
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn each_key_trips_independently() {
    let layer = build(Builder::new().name("hosts").failure_threshold(3));
    let registry = layer.handle();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = layer.layer(service(calls.clone()));

    // b fails twice, a three times: only a trips.
    for _ in 0..2 {
        assert!(call(&mut svc, "b:fail").await.is_err());
    }
    for _ in 0..3 {
        assert!(call(&mut svc, "a:fail").await.is_err());
    }
    assert_eq!(state(&registry, "a"), State::Open);
    assert_eq!(state(&registry, "b"), State::Closed);
    assert_eq!(
        registry.get(&"b").unwrap().snapshot().consecutive_failures,
        2
    );

    // a is skipped, b and a new key c still reach the service.
    let before = calls.load(Ordering::SeqCst);
    let error = call(&mut svc, "a:ok").await.unwrap_err();
    let rejected = error.downcast_ref::<Rejected>().expect("a typed rejection");
    assert_eq!(
        (rejected.name(), rejected.reason()),
        ("hosts[\"a\"]", Reason::Open)
    );
    assert_eq!(
        call(&mut svc, "b:ok").await.unwrap().source(),
        Source::Service
    );
    assert_eq!(
        call(&mut svc, "c:ok").await.unwrap().source(),
        Source::Service
    );
    assert_eq!(calls.load(Ordering::SeqCst), before + 2);
    assert_eq!(
        registry.get(&"b").unwrap().snapshot().consecutive_failures,
        0
    );
    assert_eq!(registry.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn each_key_gets_the_template_settings_names_and_observers() {
    let transitions = Arc::new(Mutex::new(Vec::new()));
    let seen = transitions.clone();
    let layer = build(
        Builder::new()
            .name("tools")
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(2))
            .on_transition(move |t| seen.lock().unwrap().push((t.name.to_string(), t.to))),
    );
    let registry = layer.handle();
    let mut svc = layer.layer(service(Arc::default()));
    assert_eq!(registry.name(), "tools");

    assert!(call(&mut svc, "search:fail").await.is_err());
    assert!(call(&mut svc, "fetch:fail").await.is_err());
    assert_eq!(
        *transitions.lock().unwrap(),
        [
            ("tools[\"search\"]".to_string(), State::Open),
            ("tools[\"fetch\"]".to_string(), State::Open),
        ]
    );
    // The cooldown counts each key's own calls: search's second call after opening is its
    // probe, whatever fetch does.
    assert!(call(&mut svc, "fetch:ok").await.is_err());
    assert!(call(&mut svc, "search:ok").await.is_err());
    assert_eq!(
        call(&mut svc, "search:ok").await.unwrap().source(),
        Source::Probe
    );
    assert_eq!(state(&registry, "search"), State::Closed);
    assert_eq!(state(&registry, "fetch"), State::Open);
}

#[tokio::test(start_paused = true)]
async fn keys_can_be_named_by_display() {
    let layer = builder(Builder::new().name("hosts").failure_threshold(1))
        .name_keys_by_display()
        .build()
        .unwrap();
    let registry = layer.handle();
    let mut svc = layer.layer(service(Arc::default()));
    assert!(call(&mut svc, "api.example.com:fail").await.is_err());
    let error = call(&mut svc, "api.example.com:ok").await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "circuit breaker `hosts[api.example.com]` skipped the call: it is open; next probe in 30s"
    );
    assert_eq!(
        registry.get(&"api.example.com").unwrap().name(),
        "hosts[api.example.com]"
    );
}

#[tokio::test(start_paused = true)]
async fn cooldowns_in_time_run_per_key() {
    let layer = build(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Time(Duration::from_secs(10))),
    );
    let registry = layer.handle();
    let mut svc = layer.layer(service(Arc::default()));

    assert!(call(&mut svc, "a:fail").await.is_err());
    advance(Duration::from_secs(5)).await;
    assert!(call(&mut svc, "b:fail").await.is_err());
    let error = call(&mut svc, "b:ok").await.unwrap_err();
    let rejected = error.downcast_ref::<Rejected>().unwrap();
    assert_eq!(
        rejected.retry_after_from(tokio::time::Instant::now().into_std()),
        Some(Duration::from_secs(10))
    );

    // 10 s after a opened, 5 s after b did: a probes and closes, b waits.
    advance(Duration::from_secs(5)).await;
    assert_eq!(
        call(&mut svc, "a:ok").await.unwrap().source(),
        Source::Probe
    );
    assert_eq!(state(&registry, "a"), State::Closed);
    let error = call(&mut svc, "b:ok").await.unwrap_err();
    let rejected = error.downcast_ref::<Rejected>().unwrap();
    assert_eq!(
        rejected.retry_after_from(tokio::time::Instant::now().into_std()),
        Some(Duration::from_secs(5))
    );

    advance(Duration::from_secs(5)).await;
    assert_eq!(
        call(&mut svc, "b:ok").await.unwrap().source(),
        Source::Probe
    );
    assert_eq!(state(&registry, "b"), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_key_that_only_succeeded_looks_like_a_new_breaker_and_trips_like_one() {
    let layer = build(Builder::new().failure_threshold(3));
    let registry = layer.handle();
    let mut svc = layer.layer(service(Arc::default()));
    for _ in 0..5 {
        call(&mut svc, "a:ok").await.expect("closed");
    }
    let handle = registry.get(&"a").expect("the key has a breaker");
    let snapshot = handle.snapshot();
    assert_eq!(
        (
            snapshot.state,
            snapshot.consecutive_failures,
            snapshot.cause
        ),
        (State::Closed, 0, None)
    );
    assert_eq!((snapshot.counts.successes, snapshot.counts.made), (5, 5));
    assert_eq!(&*snapshot.name, handle.name());

    for _ in 0..3 {
        assert!(call(&mut svc, "a:fail").await.is_err());
    }
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(
        (snapshot.counts.successes, snapshot.counts.failures),
        (5, 3)
    );
    let answer = call(&mut svc, "a:ok").await;
    assert!(Rejected::find(&*answer.unwrap_err()).is_some());
}

#[test]
fn a_new_keys_first_failures_from_many_threads_at_once_are_all_counted() {
    const THREADS: usize = 8;
    const CALLS: u32 = 50;
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
    };
    let layer = build(Builder::new().failure_threshold(THREADS as u32 * CALLS + 1));
    let registry = layer.handle();
    let svc = layer.layer(service(Arc::default()));
    // Every key's breaker exists before the threads start, with nothing but a success:
    // the threads' first failures find it closed and quiet, all at once.
    runtime().block_on(async {
        for key in ["a:ok", "b:ok", "c:ok", "d:ok"] {
            call(&mut svc.clone(), key).await.expect("closed");
        }
    });
    let start = std::sync::Barrier::new(THREADS);
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (mut svc, start) = (svc.clone(), &start);
            scope.spawn(move || {
                let request = ["a:fail", "b:fail", "c:fail", "d:fail"][t % 4];
                start.wait();
                runtime().block_on(async {
                    for _ in 0..CALLS {
                        assert!(call(&mut svc, request).await.is_err());
                    }
                });
            });
        }
    });
    for key in ["a", "b", "c", "d"] {
        let snapshot = registry.get(&key).expect("the key").snapshot();
        let failures = (THREADS / 4) as u32 * CALLS;
        assert_eq!(snapshot.consecutive_failures, failures, "key {key}");
        assert_eq!(snapshot.counts.failures, u64::from(failures), "key {key}");
        assert_eq!(snapshot.counts.successes, 1, "key {key}");
        assert_eq!(snapshot.state, State::Closed, "key {key}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_seeded_template_gives_each_key_its_own_jitter_the_same_in_every_run() {
    async fn waits() -> Vec<Duration> {
        let layer = build(
            Builder::new()
                .failure_threshold(1)
                .cooldown(Cooldown::Time(Duration::from_secs(100)))
                .jitter(0.5)
                .jitter_seed(7),
        );
        let registry = layer.handle();
        let mut svc = layer.layer(service(Arc::default()));
        let mut waits = Vec::new();
        for request in ["a:fail", "b:fail", "c:fail", "d:fail"] {
            assert!(call(&mut svc, request).await.is_err());
            let snapshot = registry.get(&key(&request)).unwrap().snapshot();
            waits.push(snapshot.retry_after().unwrap());
        }
        waits
    }
    let first = waits().await;
    assert_eq!(first, waits().await, "the same seed, the same waits");
    let mut distinct = first.clone();
    distinct.dedup();
    assert!(distinct.len() > 1, "every key waited {:?}", first[0]);
}

// ---------------------------------------------------------------------------------------
// Fallback, Rejected, classifier
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn the_fallback_answers_for_the_open_key_only() {
    let layer = build(Builder::new().failure_threshold(1)).with_fallback(fallback());
    let registry = layer.handle();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = layer.layer(service(calls.clone()));

    assert!(call(&mut svc, "a:fail").await.is_err());
    let answer = call(&mut svc, "a:ok").await.unwrap();
    assert_eq!(answer.source(), Source::Fallback(Reason::Open));
    assert_eq!(answer.state(), State::Open);
    assert_eq!(answer.into_inner(), "fallback for a");
    let answer = call(&mut svc, "b:ok").await.unwrap();
    assert_eq!(
        (answer.source(), *answer.get_ref()),
        (Source::Service, "b:ok")
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    // Forced open is per key as well.
    registry.get(&"b").unwrap().force_open();
    let answer = call(&mut svc, "b:ok").await.unwrap();
    assert_eq!(answer.source(), Source::Fallback(Reason::ForcedOpen));
    assert_eq!(answer.into_inner(), "fallback for b");
    assert_eq!(
        call(&mut svc, "c:ok").await.unwrap().source(),
        Source::Service
    );
}

#[tokio::test(start_paused = true)]
async fn without_a_fallback_the_open_key_is_rejected_by_name() {
    let layer = build(Builder::new().name("models").failure_threshold(1));
    let mut svc = layer.layer(service(Arc::default()));
    assert!(call(&mut svc, "large:fail").await.is_err());

    let error = call(&mut svc, "large:ok").await.unwrap_err();
    let rejected = error.downcast_ref::<Rejected>().expect("a typed rejection");
    assert_eq!(rejected.name(), "models[\"large\"]");
    assert_eq!(
        (rejected.reason(), rejected.state()),
        (Reason::Open, State::Open)
    );
    assert!(call(&mut svc, "small:ok").await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn the_classifier_decides_for_every_key() {
    // An answer of "x:ok" is a failure for this classifier.
    let layer = build(Builder::new().failure_threshold(1)).with_classifier(
        |result: &Result<Req, io::Error>| match result {
            Ok(answer) if answer.ends_with(":ok") && answer.starts_with('x') => {
                Outcome::failure_with("bad answer")
            }
            Ok(_) => Outcome::Success,
            Err(_) => Outcome::failure(),
        },
    );
    let registry = layer.handle();
    let mut svc = layer.layer(service(Arc::default()));
    assert!(
        call(&mut svc, "x:ok").await.is_ok(),
        "the answer still comes back"
    );
    assert!(call(&mut svc, "y:ok").await.is_ok());
    assert_eq!(state(&registry, "x"), State::Open);
    assert_eq!(state(&registry, "y"), State::Closed);
    let failure = registry.get(&"x").unwrap().snapshot().last_failure.unwrap();
    assert_eq!(&*failure.message, "bad answer");
}

// ---------------------------------------------------------------------------------------
// Kill switch
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn the_kill_switch_applies_to_every_key_even_new_ones() {
    let stop = KillSwitch::new();
    let layer = build(Builder::new().kill_switch(stop.clone())).with_fallback(fallback());
    let registry = layer.handle();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = layer.layer(service(calls.clone()));
    assert_eq!(*registry.kill_switch(), stop);

    call(&mut svc, "a:ok").await.unwrap();
    call(&mut svc, "b:ok").await.unwrap();
    stop.kill();
    for request in ["a:ok", "b:ok", "c:ok"] {
        let answer = call(&mut svc, request).await.unwrap();
        assert_eq!(
            answer.source(),
            Source::Fallback(Reason::Killed),
            "{request}"
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2, "no call while killed");
    for k in ["a", "b", "c"] {
        let breaker = registry.get(&k).unwrap();
        assert_eq!(*breaker.kill_switch(), stop);
        let snapshot = breaker.snapshot();
        assert!(snapshot.killed);
        assert_eq!(
            (snapshot.state, snapshot.counts.skipped_killed),
            (State::Closed, 1)
        );
    }

    stop.revive();
    for request in ["a:ok", "b:ok", "c:ok"] {
        assert_eq!(
            call(&mut svc, request).await.unwrap().source(),
            Source::Service
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_killed_registry_answers_without_waiting_for_the_wrapped_service() {
    let layer = build(Builder::new()).with_fallback(fallback());
    let registry = layer.handle();
    let (mut svc, mut mock) = mock::spawn_layer::<Req, Req, _>(layer);

    mock.allow(0);
    assert!(
        svc.poll_ready().is_pending(),
        "waits for the wrapped service"
    );
    registry.kill_switch().kill();
    // Woken by the kill, as `ready().await` needs: the wrapped service may never be ready.
    assert!(
        svc.is_woken(),
        "the waiting caller was not woken by the kill"
    );
    assert!(matches!(svc.poll_ready(), Poll::Ready(Ok(()))));
    let answer = svc.call("a:ok").await.unwrap();
    assert_eq!(answer.source(), Source::Fallback(Reason::Killed));
    assert!(
        mock.poll_request().is_pending(),
        "the wrapped service was not called"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_polled_while_killed_stays_killed_if_revived_before_the_call() {
    let layer = build(Builder::new()).with_fallback(fallback());
    let registry = layer.handle();
    let (mut svc, mut mock) = mock::spawn_layer::<Req, Req, _>(layer);
    mock.allow(0);

    registry.kill_switch().kill();
    assert!(matches!(svc.poll_ready(), Poll::Ready(Ok(()))));
    registry.kill_switch().revive();
    // The wrapped service was never polled ready, so it must not be called.
    let answer = svc.call("a:ok").await.unwrap();
    assert_eq!(answer.source(), Source::Fallback(Reason::Killed));
    assert!(mock.poll_request().is_pending());
    let snapshot = registry.get(&"a").unwrap().snapshot();
    assert_eq!(
        (snapshot.state, snapshot.probes_in_flight),
        (State::Closed, 0)
    );
    assert_eq!(
        (snapshot.counts.skipped_killed, snapshot.counts.abandoned),
        (1, 0),
        "counted as the killed call its caller was answered for"
    );

    // Next time round it waits for the wrapped service again.
    assert!(svc.poll_ready().is_pending());
}

// ---------------------------------------------------------------------------------------
// The tower contract
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn poll_ready_waits_for_the_wrapped_service_and_call_settles_the_key() {
    let layer = build(Builder::new().failure_threshold(2));
    let registry = layer.handle();
    let (mut svc, mut mock) = mock::spawn_layer::<Req, Req, _>(layer);

    mock.allow(0);
    assert!(svc.poll_ready().is_pending());
    assert!(registry.is_empty(), "no key yet, so no breaker");
    mock.allow(2);
    assert!(svc.is_woken());
    assert!(matches!(svc.poll_ready(), Poll::Ready(Ok(()))));
    let response = svc.call("a:x");
    let (request, reply) = mock.next_request().await.unwrap();
    assert_eq!(request, "a:x");
    reply.send_error(io::Error::other("refused"));
    assert!(response.await.is_err());
    assert_eq!(
        registry.get(&"a").unwrap().snapshot().consecutive_failures,
        1
    );

    // A dropped response future hands the permit back and counts nothing.
    assert!(matches!(svc.poll_ready(), Poll::Ready(Ok(()))));
    drop(svc.call("a:y"));
    let snapshot = registry.get(&"a").unwrap().snapshot();
    assert_eq!(
        (snapshot.consecutive_failures, snapshot.counts.cancelled),
        (1, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn a_poll_ready_error_is_returned_and_counts_against_no_key() {
    let layer = build(Builder::new().failure_threshold(1));
    let registry = layer.handle();
    let (mut svc, mut mock) = mock::spawn_layer::<Req, Req, _>(layer);
    mock.send_error("broken");
    match svc.poll_ready() {
        Poll::Ready(Err(error)) => assert_eq!(error.to_string(), "broken"),
        other => panic!("expected the error, got {other:?}"),
    }
    assert!(registry.is_empty());
}

#[test]
#[should_panic(expected = "poll_ready must be called first")]
fn call_without_poll_ready_panics() {
    let layer = build(Builder::new());
    let mut svc = layer.layer(service(Arc::default()));
    drop(svc.call("a:ok"));
}

#[tokio::test(start_paused = true)]
async fn a_clone_starts_not_ready_and_shares_the_registry() {
    let layer = build(Builder::new().failure_threshold(1));
    let registry = layer.handle();
    let mut svc = layer.layer(service(Arc::default()));
    assert!(call(&mut svc, "a:fail").await.is_err());
    let mut clone = svc.clone();
    assert_eq!(
        clone.handle().get(&"a").unwrap(),
        registry.get(&"a").unwrap()
    );
    assert_eq!(
        call(&mut clone, "a:ok")
            .await
            .unwrap_err()
            .downcast_ref::<Rejected>()
            .unwrap()
            .reason(),
        Reason::Open
    );
    let outcome = catch_unwind(AssertUnwindSafe(|| drop(svc.clone().call("a:ok"))));
    assert!(outcome.is_err(), "a clone is not ready");
}

#[tokio::test(start_paused = true)]
async fn a_panicking_service_counts_as_a_failure_for_its_key() {
    let layer = build(Builder::new().failure_threshold(1));
    let registry = layer.handle();
    let mut svc = layer.layer(service_fn(|request: Req| {
        if request == "a:panic" {
            panic!("the service panicked");
        }
        std::future::ready(Ok::<_, io::Error>(request))
    }));
    svc.ready().await.unwrap();
    let outcome = catch_unwind(AssertUnwindSafe(|| drop(svc.call("a:panic"))));
    assert!(outcome.is_err(), "the panic goes on to the caller");
    assert_eq!(state(&registry, "a"), State::Open);
    assert!(call(&mut svc, "b:ok").await.is_ok());
}

// ---------------------------------------------------------------------------------------
// The registry
// ---------------------------------------------------------------------------------------

#[test]
fn a_capacity_of_zero_is_a_config_error_and_so_is_a_bad_template() {
    let error = builder(Builder::new()).capacity(0).build().unwrap_err();
    assert_eq!(error, ConfigError::ZeroCapacity);
    assert_eq!(
        error.to_string(),
        "keyed registry capacity must be at least 1, got 0"
    );
    let error = builder(Builder::new().failure_threshold(0))
        .capacity(10)
        .build()
        .unwrap_err();
    assert_eq!(error, ConfigError::ZeroThreshold);
    let layer = builder(Builder::new()).capacity(1).build().unwrap();
    assert_eq!(layer.handle().capacity(), 1);
    assert_eq!(
        build(Builder::new()).handle().capacity(),
        1024,
        "the default"
    );
}

#[tokio::test(start_paused = true)]
async fn it_evicts_the_least_recently_used_idle_closed_breaker() {
    let layer = builder(Builder::new()).capacity(3).build().unwrap();
    let registry = layer.handle();
    let mut svc = layer.layer(service(Arc::default()));
    for request in ["a:ok", "b:ok", "c:ok", "a:ok"] {
        call(&mut svc, request).await.unwrap();
    }
    call(&mut svc, "d:ok").await.unwrap();
    let mut keys = registry.keys();
    keys.sort();
    assert_eq!(keys, ["a", "c", "d"], "b was the least recently used");
    assert_eq!(
        (
            registry.len(),
            registry.evictions(),
            registry.over_capacity()
        ),
        (3, 1, 0)
    );

    // A key that comes back starts afresh.
    call(&mut svc, "b:ok").await.unwrap();
    assert_eq!(registry.get(&"b").unwrap().snapshot().counts.arrived, 1);
    assert_eq!(registry.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn it_never_evicts_an_open_half_open_or_forced_open_breaker_and_goes_over_capacity() {
    let layer = builder(
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1))
            .max_half_open_dwell(None),
    )
    .capacity(3)
    .build()
    .unwrap();
    let registry = layer.handle();
    let mut svc = layer.layer(service(Arc::default()));

    // a: open. b: forced open. c: half-open (its probe was dropped, unanswered).
    assert!(call(&mut svc, "a:fail").await.is_err());
    call(&mut svc, "b:ok").await.unwrap();
    registry.get(&"b").unwrap().force_open();
    assert!(call(&mut svc, "c:fail").await.is_err());
    svc.ready().await.unwrap();
    drop(svc.call("c:hang"));
    assert_eq!(state(&registry, "a"), State::Open);
    assert_eq!(state(&registry, "b"), State::ForcedOpen);
    assert_eq!(state(&registry, "c"), State::HalfOpen);

    // Nothing can be evicted: d gets its breaker over capacity, and it is counted.
    call(&mut svc, "d:ok").await.unwrap();
    assert_eq!(
        (
            registry.len(),
            registry.evictions(),
            registry.over_capacity()
        ),
        (4, 0, 1)
    );
    // e evicts d, the one closed breaker; the registry stays one over.
    call(&mut svc, "e:ok").await.unwrap();
    assert_eq!(
        (
            registry.len(),
            registry.evictions(),
            registry.over_capacity()
        ),
        (4, 1, 1)
    );
    assert!(registry.get(&"d").is_none());
    for k in ["a", "b", "c"] {
        assert_ne!(state(&registry, k), State::Closed, "{k} was kept");
    }

    // Once they close, the next new key brings the registry back to its capacity.
    for k in ["a", "b", "c"] {
        registry.get(&k).unwrap().reset();
    }
    call(&mut svc, "f:ok").await.unwrap();
    assert_eq!(
        (
            registry.len(),
            registry.evictions(),
            registry.over_capacity()
        ),
        (3, 3, 1)
    );
    assert!(registry.get(&"f").is_some());
}

/// Keys from the network that each fail once: the registry goes over its capacity with
/// their open breakers, but never past twice it; past that, the least recently used open
/// ones are evicted. A breaker a person forced open, or one whose handle is held, stays.
#[test]
fn failing_keys_without_end_never_grow_the_registry_past_twice_its_capacity() {
    const CAPACITY: usize = 64;
    let layer =
        KeyedCircuitBreakerLayer::builder(Builder::new().failure_threshold(1), |n: &u64| *n)
            .capacity(CAPACITY)
            .build()
            .unwrap();
    let registry = layer.handle();
    let mut svc = layer.layer(service_fn(|n: u64| {
        std::future::ready(if n == 0 || n == 1 {
            Ok(n)
        } else {
            Err(io::Error::other("refused"))
        })
    }));
    let mut cx = Context::from_waker(Waker::noop());
    let mut call = |n: u64| {
        assert!(svc.poll_ready(&mut cx).is_ready());
        let Poll::Ready(_) = pin!(svc.call(n)).poll(&mut cx) else {
            panic!("the call completes at once")
        };
    };
    call(0);
    registry.get(&0).unwrap().force_open();
    call(1);
    let held = registry.get(&1).unwrap();
    held.force_open();
    held.reset();
    let mut most = 0;
    for n in 2..20_000 {
        call(n);
        most = most.max(registry.len());
    }
    assert!(most <= 2 * CAPACITY, "{most} breakers at most");
    assert!(
        registry.len() > CAPACITY,
        "open breakers are kept up to the ceiling"
    );
    assert!(registry.evictions() > 19_000);
    assert_eq!(
        state(&registry, 0),
        State::ForcedOpen,
        "a person's forced open stays"
    );
    assert!(
        registry.get(&1).is_some(),
        "a held handle keeps its breaker"
    );
    // The newest failing key is still open: only the least recently used went.
    assert_eq!(state(&registry, 19_999), State::Open);
}

#[test]
fn a_registry_full_of_open_breakers_goes_over_by_at_most_a_sixteenth_and_drains() {
    const CAPACITY: usize = 160;
    let layer = KeyedCircuitBreakerLayer::builder(Builder::new(), |n: &u64| *n)
        .capacity(CAPACITY)
        .build()
        .unwrap();
    let registry = layer.handle();
    let mut svc = layer.layer(service_fn(|n: u64| {
        std::future::ready(Ok::<_, Infallible>(n))
    }));
    let mut cx = Context::from_waker(Waker::noop());
    let mut call = |n: u64| {
        assert!(svc.poll_ready(&mut cx).is_ready());
        let Poll::Ready(Ok(_)) = pin!(svc.call(n)).poll(&mut cx) else {
            panic!("the call completes at once")
        };
    };
    for n in 0..CAPACITY as u64 {
        call(n);
        registry.get(&n).unwrap().force_open();
    }

    // New keys, each called once: the registry looks for room again only after as many
    // new keys as its eviction batch (a sixteenth of its capacity) lacked.
    let mut most = 0;
    for n in 1_000..2_000 {
        call(n);
        most = most.max(registry.len());
    }
    assert!(registry.over_capacity() > 0);
    assert!(
        most > CAPACITY && most <= CAPACITY + CAPACITY / 16,
        "{most} breakers at most"
    );
    for n in 0..CAPACITY as u64 {
        assert_eq!(state(&registry, n), State::ForcedOpen);
    }

    // Once they are reset, new keys bring the registry back to its capacity.
    for n in 0..CAPACITY as u64 {
        registry.get(&n).unwrap().reset();
    }
    let over = registry.over_capacity();
    for n in 2_000..2_100 {
        call(n);
    }
    assert_eq!(registry.len(), CAPACITY);
    assert_eq!(registry.over_capacity(), over);
}

#[tokio::test(start_paused = true)]
async fn a_call_in_flight_or_a_held_handle_keeps_its_breaker() {
    let layer = builder(Builder::new()).capacity(2).build().unwrap();
    let registry = layer.handle();
    let mut svc = layer.layer(service(Arc::default()));

    svc.ready().await.unwrap();
    let in_flight = svc.call("a:hang");
    call(&mut svc, "b:ok").await.unwrap();
    let held = registry.get(&"b").unwrap();
    call(&mut svc, "c:ok").await.unwrap();
    assert_eq!(
        (
            registry.len(),
            registry.evictions(),
            registry.over_capacity()
        ),
        (3, 0, 1)
    );

    drop(in_flight);
    drop(held);
    call(&mut svc, "d:ok").await.unwrap();
    // Room for d, and the overflow drained: two evicted (a and b, the oldest).
    assert_eq!((registry.len(), registry.evictions()), (2, 2));
    let mut keys = registry.keys();
    keys.sort();
    assert_eq!(keys, ["c", "d"]);
}

#[tokio::test(start_paused = true)]
async fn a_registry_capped_at_10_000_holds_no_more_through_100_000_keys() {
    const CAPACITY: usize = 10_000;
    let layer = KeyedCircuitBreakerLayer::builder(Builder::new().name("hosts"), |n: &u64| *n)
        .capacity(CAPACITY)
        .build()
        .unwrap();
    let registry = layer.handle();
    let mut svc = layer.layer(service_fn(|n: u64| {
        std::future::ready(Ok::<_, Infallible>(n))
    }));
    let mut cx = Context::from_waker(Waker::noop());
    for n in 0..100_000u64 {
        assert!(svc.poll_ready(&mut cx).is_ready());
        let Poll::Ready(Ok(answer)) = pin!(svc.call(n)).poll(&mut cx) else {
            panic!("the call completes at once")
        };
        assert_eq!(answer.into_inner(), n);
        assert!(
            registry.len() <= CAPACITY,
            "{} breakers after key {n}",
            registry.len()
        );
    }
    assert_eq!(registry.len(), CAPACITY);
    assert_eq!(registry.keys().len(), CAPACITY);
    assert_eq!(
        (registry.evictions(), registry.over_capacity()),
        (90_000, 0)
    );
    // The most recent keys are the ones kept.
    assert!(registry.get(&99_999).is_some());
    assert!(registry.get(&0).is_none());
}

/// A key whose every value hashes alike, and whose `Eq` panics at its `n`th comparison
/// after [`PanickyKey::arm`]: user code the registry runs under its locks.
#[derive(Debug, Clone)]
struct PanickyKey(&'static str);

static COMPARISONS_LEFT: AtomicUsize = AtomicUsize::new(usize::MAX);

impl PanickyKey {
    fn arm(comparisons_before_the_panic: usize) {
        COMPARISONS_LEFT.store(comparisons_before_the_panic, Ordering::SeqCst);
    }
}

impl std::hash::Hash for PanickyKey {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

impl PartialEq for PanickyKey {
    fn eq(&self, other: &Self) -> bool {
        if COMPARISONS_LEFT.fetch_sub(1, Ordering::SeqCst) == 0 {
            COMPARISONS_LEFT.store(usize::MAX, Ordering::SeqCst);
            panic!("the key's Eq panicked");
        }
        self.0 == other.0
    }
}

impl Eq for PanickyKey {}

#[tokio::test]
async fn a_key_whose_eq_panics_while_its_breaker_is_made_leaves_no_slot_taken() {
    let layer = KeyedCircuitBreakerLayer::builder(Builder::new(), |r: &Req| PanickyKey(key(r)))
        .capacity(10)
        .build()
        .unwrap();
    let registry = layer.handle();
    let mut svc = layer.layer(service(Arc::default()));
    call(&mut svc, "a:ok").await.unwrap();
    assert_eq!(registry.len(), 1);

    // "b" is looked up against "a" once to find it missing, then again under the write
    // lock, where the comparison panics.
    PanickyKey::arm(1);
    svc.ready().await.unwrap();
    let outcome = catch_unwind(AssertUnwindSafe(|| drop(svc.call("b:ok"))));
    assert!(outcome.is_err(), "the key's panic goes on to the caller");
    assert_eq!(registry.len(), 1, "the panic took no slot");
    assert_eq!(registry.keys().len(), 1);

    // The registry goes on: "b" is made, and counted once.
    call(&mut svc, "b:ok").await.unwrap();
    assert_eq!(registry.len(), 2);
    assert_eq!(registry.keys().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_callers_get_one_breaker_per_key_and_respect_the_capacity() {
    const CAPACITY: usize = 500;
    let layer = KeyedCircuitBreakerLayer::builder(Builder::new(), |n: &u64| *n)
        .capacity(CAPACITY)
        .build()
        .unwrap();
    let registry = layer.handle();
    let svc = layer.layer(service_fn(|n: u64| async move {
        tokio::task::yield_now().await;
        Ok::<_, Infallible>(n)
    }));

    // Eight tasks race to make the same 100 keys' breakers.
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let mut svc = svc.clone();
            tokio::spawn(async move {
                for n in 0..100 {
                    svc.ready().await.unwrap().call(n).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(registry.len(), 100);
    for n in 0..100 {
        assert_eq!(registry.get(&n).unwrap().snapshot().counts.successes, 8);
    }

    // Then through 8 x 2,000 distinct keys.
    let tasks: Vec<_> = (0..8u64)
        .map(|t| {
            let mut svc = svc.clone();
            tokio::spawn(async move {
                for n in 0..2_000 {
                    svc.ready()
                        .await
                        .unwrap()
                        .call(1_000 + t * 10_000 + n)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert!(registry.len() <= CAPACITY, "{} breakers", registry.len());
    assert_eq!(registry.keys().len(), registry.len());
    assert_eq!(registry.evictions() as usize, 100 + 16_000 - registry.len());
}

// ---------------------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------------------

#[test]
fn public_types_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    type Svc = tower::util::BoxCloneSyncService<Req, Req, io::Error>;
    send_sync::<KeyedCircuitBreakerLayer<&'static str, Key>>();
    send_sync::<KeyedCircuitBreaker<Svc, &'static str, Key>>();
    send_sync::<KeyedCircuitBreakerHandle<String>>();
    send_sync::<KeyedBuilder<String, fn(&String) -> String>>();
    fn send<T: Send>(_: &T) {}
    let layer = build(Builder::new());
    let mut svc = layer.layer(service(Arc::default()));
    assert!(svc
        .poll_ready(&mut Context::from_waker(Waker::noop()))
        .is_ready());
    send(&svc.call("a:ok"));
}

#[tokio::test(start_paused = true)]
async fn a_keys_credentials_and_line_breaks_never_show_in_its_breakers_name() {
    for by_display in [false, true] {
        let template = Builder::new().name("fetch").failure_threshold(1);
        let mut builder = KeyedCircuitBreakerLayer::builder(template, |url: &String| url.clone());
        if by_display {
            builder = builder.name_keys_by_display();
        }
        let layer = builder.build().unwrap();
        let registry = layer.handle();
        let mut svc = layer.layer(service_fn(|_: String| async {
            Err::<(), _>(io::Error::other("refused"))
        }));
        // A key from the network: a URL with a password and a key, and a line break.
        let key = "https://bob:hunter2@api.example.com/v1?key=SECRET\n[forged]".to_string();
        let _ = svc.ready().await.unwrap().call(key.clone()).await;
        let error = svc
            .ready()
            .await
            .unwrap()
            .call(key.clone())
            .await
            .unwrap_err();
        let name = registry.get(&key).unwrap().name().to_owned();
        let shown = format!("{error} {name}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("SECRET"),
            "{shown}"
        );
        assert!(!shown.contains('\n'), "{shown}");
        assert!(
            name.contains("api.example.com") && name.ends_with(']'),
            "{name}"
        );
        // Another key that differs only in what was taken out keeps a name of its own.
        let other = key.replace("SECRET", "OTHER");
        let _ = svc.ready().await.unwrap().call(other.clone()).await;
        let other_name = registry.get(&other).unwrap().name().to_owned();
        assert_ne!(name, other_name);
        assert!(!other_name.contains("OTHER"), "{other_name}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_held_open_by_a_permanent_failure_is_kept_past_other_failures_yet_bounded() {
    let template = Builder::new().name("k").failure_threshold(1);
    let layer = KeyedCircuitBreakerLayer::builder(template, |n: &u64| *n)
        .capacity(16)
        .build()
        .unwrap()
        .with_classifier(|result: &Result<u64, io::Error>| match result {
            Ok(_) => Outcome::Success,
            Err(e) if e.to_string() == "revoked" => {
                Outcome::Failure(tower_circuit_breaker::Failure::new("revoked key").permanent())
            }
            Err(_) => Outcome::failure(),
        });
    let registry = layer.handle();
    let calls_for_zero = Arc::new(AtomicUsize::new(0));
    let counted = calls_for_zero.clone();
    let mut svc = layer.layer(service_fn(move |n: u64| {
        if n == 0 {
            counted.fetch_add(1, Ordering::SeqCst);
        }
        let permanent = n == 0 || n >= 1_000;
        async move {
            Err::<u64, _>(io::Error::other(if permanent {
                "revoked"
            } else {
                "refused"
            }))
        }
    }));
    let _ = svc.ready().await.unwrap().call(0).await;
    assert_eq!(registry.get(&0).unwrap().state(), State::Open);
    // A flood of failing keys, far past twice the capacity: open ones are evicted.
    for n in 1..=64 {
        let _ = svc.ready().await.unwrap().call(n).await;
    }
    assert!(registry.evictions() > 0);
    assert!(
        registry.get(&0).is_some(),
        "the key a person must reset is kept"
    );
    let error = svc.ready().await.unwrap().call(0).await.unwrap_err();
    assert!(Rejected::find(&*error).is_some(), "{error}");
    assert_eq!(
        calls_for_zero.load(Ordering::SeqCst),
        1,
        "never called again"
    );
    // Keys that all fail permanently (a quota error a server gives any key): past four
    // times the capacity those go too, so the registry stays bounded.
    for n in 1_000..1_500 {
        let _ = svc.ready().await.unwrap().call(n).await;
    }
    assert!(registry.len() <= 4 * 16 + 2, "{}", registry.len());
}

/// Makes `svc` call `request` and waits for its answer: the test service is ready at once
/// and answers `ok` at once, so no runtime is needed (an observer can call it).
fn call_at_once<S>(svc: &mut S, request: Req)
where
    S: Service<Req>,
{
    let mut cx = Context::from_waker(Waker::noop());
    assert!(svc.poll_ready(&mut cx).is_ready(), "ready at once");
    let Poll::Ready(_) = pin!(svc.call(request)).poll(&mut cx) else {
        panic!("the call completes at once")
    };
}

/// An observer told of an eviction may call the keyed service back with a new key that
/// makes room again, on the very thread that evicted (warming a replacement key up, say):
/// the registry tells observers with none of its locks held.
#[test]
fn an_observer_calling_the_keyed_service_with_a_new_key_on_an_eviction_does_not_deadlock() {
    type Callback = Box<dyn FnMut(Req) + Send>;
    let slot: Arc<Mutex<Option<Callback>>> = Arc::default();
    let evictions = Arc::new(AtomicUsize::new(0));
    let template = Builder::new().name("warm").on_event({
        let (slot, evictions) = (slot.clone(), evictions.clone());
        move |event| {
            if let tower_circuit_breaker::Event::Evicted { .. } = event {
                // Only at the first: the warm key's own call evicts again.
                if evictions.fetch_add(1, Ordering::SeqCst) == 0 {
                    if let Some(call) = slot.lock().unwrap().as_mut() {
                        call("warm:ok");
                    }
                }
            }
        }
    });
    let layer = builder(template).capacity(1).build().unwrap();
    let registry = layer.handle();
    let svc = layer.layer(service(Arc::default()));
    let mut inner = svc.clone();
    *slot.lock().unwrap() = Some(Box::new(move |request| call_at_once(&mut inner, request)));
    let (done, finished) = std::sync::mpsc::channel();
    let mut outer = svc.clone();
    // On a thread of its own, so that a deadlock fails the test rather than hangs it.
    std::thread::spawn(move || {
        call_at_once(&mut outer, "a:ok");
        call_at_once(&mut outer, "b:ok"); // evicts a: its observer calls warm
        let _ = done.send(());
    });
    finished
        .recv_timeout(Duration::from_secs(10))
        .expect("the eviction's observer called the service back and returned");
    assert_eq!(evictions.load(Ordering::SeqCst), 1, "a's");
    // warm came while b was being made: nothing idle was left to evict, so it went over
    // capacity, counted.
    let mut keys = registry.keys();
    keys.sort_unstable();
    assert_eq!(keys, ["b", "warm"]);
    assert_eq!((registry.len(), registry.over_capacity()), (2, 1));
}

/// An observer slow to take an eviction in (an exporter's flush) holds up the call that
/// evicted, and no other key's first call.
#[test]
fn a_slow_eviction_observer_holds_up_no_other_keys_first_call() {
    let (evicting, told) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = Mutex::new(released);
    let template = Builder::new().name("slow").on_event(move |event| {
        if let tower_circuit_breaker::Event::Evicted { name, .. } = event {
            if *name == "slow[\"a\"]" {
                let _ = evicting.send(());
                // Bounded: the test fails, rather than hangs, if never released.
                let _ = released
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(10));
            }
        }
    });
    let layer = builder(template).capacity(2).build().unwrap();
    let registry = layer.handle();
    let svc = layer.layer(service(Arc::default()));
    let mut first = svc.clone();
    call_at_once(&mut first, "a:ok");
    call_at_once(&mut first, "b:ok");
    let evicting_thread = std::thread::spawn(move || call_at_once(&mut first, "c:ok"));
    told.recv_timeout(Duration::from_secs(10))
        .expect("a's eviction is being told");
    // While a's observer is busy, d's first call makes room (evicting b) and returns.
    let (done, finished) = std::sync::mpsc::channel();
    let mut second = svc.clone();
    let other_thread = std::thread::spawn(move || {
        call_at_once(&mut second, "d:ok");
        let _ = done.send(());
    });
    let d_returned = finished.recv_timeout(Duration::from_secs(10));
    release.send(()).unwrap();
    evicting_thread.join().unwrap();
    other_thread.join().unwrap();
    assert!(
        d_returned.is_ok(),
        "d's first call waited for the observer of a's eviction"
    );
    assert_eq!(registry.evictions(), 2);
    assert!(registry.get(&"d").is_some() && registry.get(&"c").is_some());
}

/// Past twice the capacity a half-open breaker with no call in flight goes as an open one
/// does: its probes so far succeeded (a failed one would have opened it again), and its
/// key comes back closed. One whose probe is in flight stays. Kept, such breakers would
/// let keys that fail, then send one good probe of several, grow the registry.
#[tokio::test(start_paused = true)]
async fn past_twice_the_capacity_an_idle_half_open_key_is_evicted_and_comes_back_closed() {
    let layer = builder(
        Builder::new()
            .name("recovering")
            .failure_threshold(1)
            .cooldown(Cooldown::Time(Duration::from_secs(1)))
            .half_open_probes(2)
            .max_half_open_dwell(Some(Duration::from_secs(600))),
    )
    .capacity(1)
    .build()
    .unwrap();
    let registry = layer.handle();
    let mut svc = layer.layer(service(Arc::default()));
    assert!(call(&mut svc, "a:fail").await.is_err());
    assert!(call(&mut svc, "p:fail").await.is_err());
    advance(Duration::from_secs(2)).await;
    // a: one good probe of two, none in flight. p: its probe in flight.
    call(&mut svc, "a:ok").await.unwrap();
    svc.ready().await.unwrap();
    let probe = svc.call("p:hang");
    assert_eq!(state(&registry, "a"), State::HalfOpen);
    assert_eq!(state(&registry, "p"), State::HalfOpen);
    // A third key is past twice the capacity: a goes, p stays.
    assert!(call(&mut svc, "b:fail").await.is_err());
    assert!(registry.get(&"a").is_none(), "{:?}", registry.keys());
    assert_eq!(registry.evictions(), 1);
    assert_eq!(state(&registry, "p"), State::HalfOpen);
    drop(probe);
    // a comes back with a fresh breaker: closed, its calls made.
    assert_eq!(
        call(&mut svc, "a:ok").await.unwrap().source(),
        Source::Service
    );
    assert_eq!(state(&registry, "a"), State::Closed);
}

/// A key that is a URL's authority (`Uri::authority`, or a URL written scheme-relative)
/// holds the URL's user information: its breaker's name, shown in errors, snapshots, logs
/// and metric labels, hides it, whichever naming.
#[tokio::test(start_paused = true)]
async fn an_authority_keys_password_never_shows_in_its_breakers_name() {
    for by_display in [false, true] {
        let template = Builder::new().name("fetch").failure_threshold(1);
        let mut builder = KeyedCircuitBreakerLayer::builder(template, |r: &http::Request<()>| {
            r.uri().authority().cloned().expect("an absolute URL")
        });
        if by_display {
            builder = builder.name_keys_by_display();
        }
        let layer = builder.build().unwrap();
        let registry = layer.handle();
        let mut svc = layer.layer(service_fn(|_: http::Request<()>| async {
            Err::<(), _>(io::Error::other("refused"))
        }));
        let mut names = Vec::new();
        for password in ["hunter2", "other"] {
            let url = format!("https://bob:{password}@api.example.com/v1");
            let request = || http::Request::get(url.as_str()).body(()).unwrap();
            let _ = svc.ready().await.unwrap().call(request()).await;
            let error = svc
                .ready()
                .await
                .unwrap()
                .call(request())
                .await
                .unwrap_err();
            let key = request().uri().authority().cloned().unwrap();
            let breaker = registry.get(&key).unwrap();
            let name = breaker.name().to_owned();
            let shown = format!("{error} | {error:?} | {name} | {:?}", breaker.snapshot());
            assert!(
                !shown.contains(password) && !shown.contains("bob"),
                "display={by_display}: {shown}"
            );
            assert!(name.contains("[redacted]@api.example.com"), "{name}");
            names.push(name);
        }
        assert_ne!(names[0], names[1], "keys that differ in their password");
    }
    // Written scheme-relative, as a link may be.
    let layer =
        KeyedCircuitBreakerLayer::builder(Builder::new().name("fetch"), |k: &String| k.clone())
            .name_keys_by_display()
            .build()
            .unwrap();
    let registry = layer.handle();
    let mut svc = layer.layer(service_fn(|_: String| async { Ok::<_, io::Error>(()) }));
    let key = "//bob:hunter2@h.example/x".to_string();
    svc.ready().await.unwrap().call(key.clone()).await.unwrap();
    let name = registry.get(&key).unwrap().name().to_owned();
    assert!(
        name.starts_with("fetch[//[redacted]@h.example/x #"),
        "{name}"
    );
}

/// Escaping alone can make two keys look alike: a line break is shown `\n`, as a
/// backslash followed by an `n` is. Each key named by `Display` still gets a name (and so
/// metric series) of its own: a key changed by escaping is followed by its short hash.
#[tokio::test(start_paused = true)]
async fn distinct_keys_named_by_display_get_distinct_names_even_when_escaping_makes_them_alike() {
    let layer =
        KeyedCircuitBreakerLayer::builder(Builder::new().name("host"), |k: &String| k.clone())
            .name_keys_by_display()
            .build()
            .unwrap();
    let registry = layer.handle();
    let mut svc = layer.layer(service_fn(|_: String| async { Ok::<_, io::Error>(()) }));
    let line_break = "a\nb".to_string();
    let backslash_n = "a\\nb".to_string();
    for key in [&line_break, &backslash_n] {
        svc.ready().await.unwrap().call(key.clone()).await.unwrap();
    }
    let name = |key: &String| registry.get(key).unwrap().name().to_owned();
    let (escaped, as_written) = (name(&line_break), name(&backslash_n));
    assert_ne!(escaped, as_written);
    assert_eq!(
        as_written, "host[a\\nb]",
        "a key shown as written has no hash"
    );
    assert!(
        escaped.starts_with("host[a\\nb #") && !escaped.contains('\n'),
        "{escaped}"
    );
}

/// A key's line or paragraph separator, or a bidirectional override or isolate, would
/// break or reorder the line its breaker's name is shown on (a log line, an error): it is
/// escaped as a control character is, under either naming, and the name takes the key's
/// hash as any escaped key's does.
#[tokio::test(start_paused = true)]
async fn a_keys_line_separators_and_bidi_overrides_are_escaped_in_its_breakers_name() {
    let breaking = [
        '\u{2028}', '\u{2029}', '\u{202a}', '\u{202e}', '\u{2066}', '\u{2069}',
    ];
    for by_display in [false, true] {
        let mut builder =
            KeyedCircuitBreakerLayer::builder(Builder::new().name("host"), |k: &String| k.clone());
        if by_display {
            builder = builder.name_keys_by_display();
        }
        let layer = builder.build().unwrap();
        let registry = layer.handle();
        let mut svc = layer.layer(service_fn(|_: String| async { Ok::<_, io::Error>(()) }));
        for c in breaking {
            let key = format!("a{c}b");
            svc.ready().await.unwrap().call(key.clone()).await.unwrap();
            let name = registry.get(&key).unwrap().name().to_owned();
            assert!(!name.contains(c), "display={by_display}: {name:?}");
            let escape: String = c.escape_default().collect();
            assert!(name.contains(&escape), "display={by_display}: {name:?}");
        }
        if by_display {
            let name = registry
                .get(&"a\u{202e}b".to_string())
                .unwrap()
                .name()
                .to_owned();
            assert!(name.starts_with("host[a\\u{202e}b #"), "{name}");
        }
    }
}
