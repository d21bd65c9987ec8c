//! The retry policy made for the breaker (`tower_circuit_breaker::retry`), one test per
//! rule, in paused time: backoff with full jitter under its cap, bounded attempts, the
//! retry budget, what is never retried (a caller's 4xx, a permanent quota failure, the
//! breaker's own rejection), `Retry-After` waited when short and handed back when long,
//! a `timeout` retried, and one outcome per user call for a breaker outside the retry.
//! The last test goes over real TCP on loopback (`tests/common/server.rs`), with a
//! `reqwest::Client` whose requests are kept with `try_clone`.
#![cfg(all(feature = "http", feature = "reqwest"))]

mod common;
#[path = "common/server.rs"]
mod server;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tower::retry::budget::Budget;
use tower::timeout::error::Elapsed;
use tower::{service_fn, BoxError, Layer, Service, ServiceBuilder, ServiceExt};
use tower_circuit_breaker::error::{CallError, Rejected};
use tower_circuit_breaker::http::{BufferBodyLayer, BufferedResponse, HttpClassifier};
use tower_circuit_breaker::retry::{BreakerVerdict, RetryConfigError, RetryLayer, RetryPolicy};
use tower_circuit_breaker::{CircuitBreakerHandle, CircuitBreakerLayer, Reason, Source, State};

use common::counts::assert_counts_add_up;
use server::{Reply, TestServer, CHAT_BODY, QUOTA_BODY};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

// ---------------------------------------------------------------------------------
// A scripted model in paused time.

/// What the model does with one call.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Answers with this status.
    Status(u16),
    /// Answers with this status and this header (`retry-after`, `retry-after-ms`).
    Waiting(u16, &'static str, &'static str),
    /// 429 with OpenAI's `insufficient_quota` body (and `Retry-After: 1`).
    Quota,
    /// A transport error: "connection refused #n", n the call's number from 1.
    Refused,
    /// Answers 200 after an hour.
    Hang,
}

fn response(
    status: u16,
    header: Option<(&'static str, &'static str)>,
    body: &'static str,
) -> BufferedResponse {
    let mut builder = http::Response::builder().status(status);
    if let Some((name, value)) = header {
        builder = builder.header(name, value);
    }
    builder
        .body(Bytes::from_static(body.as_bytes()))
        .expect("a valid response")
        .into()
}

/// A breaker named "model" that opens after `threshold` failures in a row.
fn model_breaker(threshold: u32) -> CircuitBreakerLayer {
    CircuitBreakerLayer::builder()
        .name("model")
        .failure_threshold(threshold)
        .build()
        .unwrap()
}

/// A fallback's answer: 503, the model is unavailable.
async fn model_unavailable(_: String) -> Result<BufferedResponse, Infallible> {
    Ok(response(503, None, "the model is unavailable"))
}

/// When each call reached the model.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<Instant>>>);

impl Calls {
    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    fn clear(&self) {
        self.0.lock().unwrap().clear();
    }

    /// The time between each call and the next.
    fn gaps(&self) -> Vec<Duration> {
        let calls = self.0.lock().unwrap();
        calls.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

/// A model that answers each call with the next step of `script`, then with
/// `otherwise`, and records when each call reached it.
fn model(
    script: impl IntoIterator<Item = Step>,
    otherwise: Step,
) -> (
    impl Service<String, Response = BufferedResponse, Error = std::io::Error> + Clone,
    Calls,
) {
    let script = Arc::new(Mutex::new(script.into_iter().collect::<VecDeque<_>>()));
    let calls = Calls::default();
    let svc = service_fn({
        let calls = calls.clone();
        move |_prompt: String| {
            let n = {
                let mut calls = calls.0.lock().unwrap();
                calls.push(Instant::now());
                calls.len()
            };
            let step = script.lock().unwrap().pop_front().unwrap_or(otherwise);
            async move {
                match step {
                    Step::Status(status) => Ok(response(status, None, "{}")),
                    Step::Waiting(status, name, value) => {
                        Ok(response(status, Some((name, value)), "{}"))
                    }
                    Step::Quota => Ok(response(429, Some(("retry-after", "1")), QUOTA_BODY)),
                    Step::Refused => Err(std::io::Error::other(format!("connection refused #{n}"))),
                    Step::Hang => {
                        tokio::time::sleep(secs(3600)).await;
                        Ok(response(200, None, "{}"))
                    }
                }
            }
        }
    });
    (svc, calls)
}

/// The policy with the HTTP classifier, a budget too large to matter, and waits of at
/// most `cap`.
fn retry(max_attempts: u32, cap: Duration) -> RetryLayer<HttpClassifier> {
    RetryLayer::builder()
        .max_attempts(max_attempts)
        .backoff(cap.min(ms(100)), cap)
        .tps_budget(secs(60), 1_000, 1000.0)
        .jitter_seed(7)
        .build()
        .expect("valid settings")
        .with_classifier(HttpClassifier::new())
}

async fn call<S>(svc: &mut S) -> Result<S::Response, S::Error>
where
    S: Service<String>,
{
    svc.ready()
        .await?
        .call("What is six times seven?".into())
        .await
}

// ---------------------------------------------------------------------------------
// Backoff, attempts, budget.

#[tokio::test(start_paused = true)]
async fn backoff_grows_and_stays_under_the_cap_with_full_jitter() {
    let (base, cap) = (ms(100), ms(1000));
    let layer = RetryLayer::builder()
        .max_attempts(8)
        .backoff(base, cap)
        .tps_budget(secs(60), 1_000, 1000.0)
        .jitter_seed(42)
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new());
    let (inner, calls) = model([], Step::Status(503));
    let mut svc = layer.layer(inner);

    // The waits before the n-th retry, over 20 user calls.
    let mut waits: Vec<Vec<Duration>> = vec![Vec::new(); 7];
    for _ in 0..20 {
        calls.clear();
        assert_eq!(call(&mut svc).await.unwrap().status(), 503);
        let gaps = calls.gaps();
        assert_eq!(gaps.len(), 7, "8 attempts");
        for (n, gap) in gaps.into_iter().enumerate() {
            // Full jitter: in [0, min(cap, base * 2^n)] (tokio's timer rounds a wait up
            // to the next millisecond).
            let ceiling = (base * 2u32.pow(n as u32)).min(cap);
            assert!(
                gap <= ceiling + ms(1),
                "retry {n} waited {gap:?}, above {ceiling:?}"
            );
            waits[n].push(gap);
        }
    }
    let max = |n: usize| waits[n].iter().max().copied().unwrap();
    for (n, waits) in waits.iter().enumerate() {
        let mut distinct = waits.clone();
        distinct.sort();
        distinct.dedup();
        assert!(
            distinct.len() >= 10,
            "retry {n}'s waits are spread: {waits:?}"
        );
    }
    // It grows: later retries wait longer than the earlier ceilings allow...
    assert!(max(2) > ms(200), "{:?}", waits[2]);
    assert!(max(3) > ms(400), "{:?}", waits[3]);
    // ...up to the cap, not to base * 2^n (1.6 s, 3.2 s, 6.4 s).
    assert!(
        (4..7).any(|n| max(n) > ms(800)),
        "the cap is reached: {waits:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn attempts_are_bounded_and_the_last_error_is_returned() {
    let (inner, calls) = model([], Step::Refused);
    let mut svc = retry(3, ms(10)).layer(inner);
    let err = call(&mut svc).await.unwrap_err();
    assert_eq!(err.to_string(), "connection refused #3");
    assert_eq!(calls.count(), 3);

    // One attempt: never retried.
    let (inner, calls) = model([], Step::Refused);
    let mut svc = retry(1, ms(10)).layer(inner);
    assert!(call(&mut svc).await.is_err());
    assert_eq!(calls.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_exhausted_budget_stops_retries_for_every_clone() {
    // A reserve of one retry (one a second over one second), and calls deposit nothing.
    let layer = RetryLayer::builder()
        .max_attempts(5)
        .backoff(ms(1), ms(2))
        .tps_budget(secs(1), 1, 0.0)
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new());
    let (inner, calls) = model([], Step::Status(503));
    let mut svc = layer.layer(inner);
    let mut other = svc.clone();

    assert_eq!(call(&mut svc).await.unwrap().status(), 503);
    assert_eq!(calls.count(), 2, "the one retry the budget holds");
    assert_eq!(call(&mut other).await.unwrap().status(), 503);
    assert_eq!(
        calls.count(),
        3,
        "a clone shares the spent budget: no retry"
    );
    assert_eq!(call(&mut svc).await.unwrap().status(), 503);
    assert_eq!(calls.count(), 4);

    // A window later the spent retry has expired: the reserve is back.
    tokio::time::advance(ms(1100)).await;
    assert_eq!(call(&mut svc).await.unwrap().status(), 503);
    assert_eq!(calls.count(), 6);
}

/// A budget that counts what the policy does with it, and refuses once closed.
#[derive(Default)]
struct CountingBudget {
    deposits: AtomicUsize,
    withdrawals: AtomicUsize,
    closed: AtomicBool,
}

impl Budget for CountingBudget {
    fn deposit(&self) {
        self.deposits.fetch_add(1, Ordering::SeqCst);
    }

    fn withdraw(&self) -> bool {
        self.withdrawals.fetch_add(1, Ordering::SeqCst);
        !self.closed.load(Ordering::SeqCst)
    }
}

#[tokio::test(start_paused = true)]
async fn a_budget_of_ones_own_gets_a_deposit_per_call_and_a_withdrawal_per_retry() {
    let budget = Arc::new(CountingBudget::default());
    let layer = RetryLayer::builder()
        .max_attempts(3)
        .backoff(ms(1), ms(2))
        .budget(budget.clone())
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new());
    let (inner, calls) = model([], Step::Status(503));
    let mut svc = layer.layer(inner);
    for _ in 0..2 {
        call(&mut svc).await.unwrap();
    }
    assert_eq!(calls.count(), 6);
    assert_eq!(budget.deposits.load(Ordering::SeqCst), 2);
    assert_eq!(budget.withdrawals.load(Ordering::SeqCst), 4);

    // A success deposits and withdraws nothing.
    let (ok, _) = model([], Step::Status(200));
    let mut ok = RetryLayer::builder()
        .budget(budget.clone())
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new())
        .layer(ok);
    call(&mut ok).await.unwrap();
    assert_eq!(budget.deposits.load(Ordering::SeqCst), 3);
    assert_eq!(budget.withdrawals.load(Ordering::SeqCst), 4);

    // Refused: the call is sent once.
    budget.closed.store(true, Ordering::SeqCst);
    call(&mut svc).await.unwrap();
    assert_eq!(calls.count(), 7);
}

// ---------------------------------------------------------------------------------
// Never retried.

#[tokio::test(start_paused = true)]
async fn a_callers_4xx_is_never_retried() {
    for status in [400, 401, 404, 422] {
        let (inner, calls) = model([Step::Status(status)], Step::Status(200));
        let mut svc = retry(5, ms(10)).layer(inner);
        assert_eq!(call(&mut svc).await.unwrap().status(), status);
        assert_eq!(calls.count(), 1, "{status} is the caller's mistake");
    }
    // A 5xx, a 429 and a 408 are the service's: retried.
    for status in [500, 503, 429, 408] {
        let (inner, calls) = model([Step::Status(status)], Step::Status(200));
        let mut svc = retry(5, ms(10)).layer(inner);
        assert_eq!(call(&mut svc).await.unwrap().status(), 200);
        assert_eq!(calls.count(), 2, "{status} is retried");
    }
}

#[tokio::test(start_paused = true)]
async fn a_permanent_quota_failure_is_never_retried() {
    let (inner, calls) = model([Step::Quota], Step::Status(200));
    let mut svc = retry(5, ms(10)).layer(inner);
    let answer = call(&mut svc).await.unwrap();
    assert_eq!(answer.status(), 429);
    assert_eq!(answer.body(), QUOTA_BODY);
    assert_eq!(calls.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_breakers_rejection_is_never_retried() {
    // The policy outside a breaker, with the default classifier, which calls every
    // error a failure: a rejection is still not retried.
    let breaker = CircuitBreakerLayer::builder()
        .name("model")
        .build()
        .unwrap();
    let handle = breaker.handle();
    handle.force_open();
    let (inner, calls) = model([], Step::Status(200));
    let mut svc = ServiceBuilder::new()
        .layer(RetryLayer::builder().max_attempts(5).build().unwrap())
        .layer(breaker)
        .service(inner);
    let err = call(&mut svc).await.unwrap_err();
    assert_eq!(
        err.downcast_ref::<Rejected>().unwrap().reason(),
        Reason::ForcedOpen
    );
    assert_eq!(
        handle.snapshot().counts.arrived,
        1,
        "one attempt reached the breaker"
    );
    assert_eq!(calls.count(), 0);

    // With typed errors: a `CallError::Rejected`.
    let breaker = CircuitBreakerLayer::builder()
        .name("model")
        .build()
        .unwrap()
        .with_typed_errors();
    let handle = breaker.handle();
    handle.kill_switch().kill();
    let (inner, calls) = model([], Step::Status(200));
    let mut svc = ServiceBuilder::new()
        .layer(RetryLayer::builder().max_attempts(5).build().unwrap())
        .layer(breaker)
        .service(inner);
    match call(&mut svc).await {
        Err(CallError::Rejected(rejected)) => assert_eq!(rejected.reason(), Reason::Killed),
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(handle.snapshot().counts.arrived, 1);
    assert_eq!(calls.count(), 0);

    // A failure of the service through such a breaker is still retried.
    let (inner, calls) = model([], Step::Refused);
    let breaker = model_breaker(10).with_typed_errors();
    let mut svc = ServiceBuilder::new()
        .layer(RetryLayer::builder().max_attempts(3).build().unwrap())
        .layer(breaker)
        .service(inner);
    assert!(matches!(call(&mut svc).await, Err(CallError::Service(_))));
    assert_eq!(calls.count(), 3);
}

// ---------------------------------------------------------------------------------
// Retry-After.

#[tokio::test(start_paused = true)]
async fn a_short_retry_after_is_waited_exactly_then_retried() {
    let (inner, calls) = model([Step::Waiting(429, "retry-after", "2")], Step::Status(200));
    let mut svc = retry(3, ms(100)).layer(inner);
    assert_eq!(call(&mut svc).await.unwrap().status(), 200);
    assert_eq!(
        calls.gaps(),
        [secs(2)],
        "the wait the server asked for, not the backoff"
    );

    // OpenAI's `retry-after-ms`, on a 503.
    let (inner, calls) = model(
        [Step::Waiting(503, "retry-after-ms", "1500")],
        Step::Status(200),
    );
    let mut svc = retry(3, ms(100)).layer(inner);
    assert_eq!(call(&mut svc).await.unwrap().status(), 200);
    assert_eq!(calls.gaps(), [ms(1500)]);

    // Up to the setting, included.
    let (inner, calls) = model([Step::Waiting(429, "retry-after", "5")], Step::Status(200));
    let mut svc = retry(3, ms(100)).layer(inner);
    assert_eq!(call(&mut svc).await.unwrap().status(), 200);
    assert_eq!(calls.gaps(), [secs(5)], "5 s is the default longest wait");
}

#[tokio::test(start_paused = true)]
async fn a_long_retry_after_is_returned_at_once_and_the_breaker_opens() {
    let breaker = model_breaker(3)
        .with_classifier(HttpClassifier::new())
        .with_fallback(service_fn(model_unavailable));
    let handle = breaker.handle();
    let (inner, calls) = model([Step::Waiting(429, "retry-after", "60")], Step::Status(200));
    let mut svc = ServiceBuilder::new()
        .layer(breaker)
        .layer(retry(5, ms(100)))
        .service(inner);

    let start = Instant::now();
    let answer = call(&mut svc).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO, "returned at once");
    assert_eq!(answer.status(), 429);
    assert_eq!(answer.source(), Source::Service);
    assert_eq!(calls.count(), 1);
    // The breaker opened for the server's wait.
    assert_eq!(handle.state(), State::Open);
    assert_eq!(handle.snapshot().retry_after(), Some(secs(60)));

    // The fallback answers meanwhile; the model is not called.
    let answer = call(&mut svc).await.unwrap();
    assert_eq!(answer.source(), Source::Fallback(Reason::Open));
    assert_eq!(answer.body(), "the model is unavailable");
    assert_eq!(calls.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_wait_past_the_longest_is_handed_back_though_the_classifiers_bound_is_within_it() {
    // The HTTP classifier bounds the breaker's wait at 5 min; the longest retry wait
    // is an hour. A server that asks for far more than an hour is not waited for 5 min.
    let retry_for_an_hour = |max_attempts| {
        RetryLayer::builder()
            .max_attempts(max_attempts)
            .backoff(ms(100), ms(100))
            .max_retry_after_wait(secs(3600))
            .build()
            .expect("valid settings")
            .with_classifier(HttpClassifier::new())
    };
    let (inner, calls) = model(
        [Step::Waiting(429, "retry-after", "99999999999999999999")],
        Step::Status(200),
    );
    let mut svc = retry_for_an_hour(3).layer(inner);
    let start = Instant::now();
    assert_eq!(call(&mut svc).await.unwrap().status(), 429);
    assert_eq!(start.elapsed(), Duration::ZERO, "handed back at once");
    assert_eq!(calls.count(), 1);

    // Within the hour, and past the classifier's bound: the wait asked for, whole.
    let (inner, calls) = model(
        [Step::Waiting(429, "retry-after", "600")],
        Step::Status(200),
    );
    let mut svc = retry_for_an_hour(3).layer(inner);
    assert_eq!(call(&mut svc).await.unwrap().status(), 200);
    assert_eq!(calls.gaps(), [secs(600)]);
}

// ---------------------------------------------------------------------------------
// Timeouts.

#[tokio::test(start_paused = true)]
async fn a_timeout_is_retried() {
    let (inner, calls) = model([Step::Hang], Step::Status(200));
    let mut svc = ServiceBuilder::new()
        .layer(retry(3, ms(100)))
        .timeout(secs(1))
        .service(inner);
    assert_eq!(call(&mut svc).await.unwrap().status(), 200);
    assert_eq!(calls.count(), 2);
    let gap = calls.gaps()[0];
    assert!(gap >= secs(1) && gap <= secs(1) + ms(101), "{gap:?}");

    // Every attempt timed out: the last `Elapsed` is returned.
    let (inner, calls) = model([], Step::Hang);
    let mut svc = ServiceBuilder::new()
        .layer(retry(2, ms(100)))
        .timeout(secs(1))
        .service(inner);
    assert!(call(&mut svc).await.unwrap_err().is::<Elapsed>());
    assert_eq!(calls.count(), 2);
}

// ---------------------------------------------------------------------------------
// The stack: breaker -> retry -> timeout -> model.

#[tokio::test(start_paused = true)]
async fn the_breaker_counts_one_outcome_per_user_call() {
    let breaker = model_breaker(2).with_classifier(HttpClassifier::new());
    let handle = breaker.handle();
    let script = [
        // 1: two failures, then a success.
        Step::Status(503),
        Step::Status(503),
        Step::Status(200),
        // 2: three failures: one failure to the breaker.
        Step::Status(502),
        Step::Refused,
        Step::Status(503),
        // 3: a hang, timed out, then a success.
        Step::Hang,
        Step::Status(200),
        // 4: a caller's 404: a success, once.
        Step::Status(404),
    ];
    let (inner, calls) = model(script, Step::Status(200));
    let mut svc = ServiceBuilder::new()
        .layer(breaker)
        .layer(retry(3, ms(100)))
        .timeout(secs(1))
        .service(inner);

    assert_eq!(call(&mut svc).await.unwrap().status(), 200);
    let snapshot = handle.snapshot();
    assert_eq!((snapshot.counts.made, snapshot.counts.successes), (1, 1));

    let answer = call(&mut svc).await.unwrap();
    assert_eq!(answer.status(), 503);
    assert!(answer.is_failure());
    let snapshot = handle.snapshot();
    assert_eq!((snapshot.counts.made, snapshot.counts.failures), (2, 1));
    assert_eq!(
        snapshot.consecutive_failures, 1,
        "three failed attempts, one failure"
    );
    assert_eq!(
        snapshot.state,
        State::Closed,
        "the threshold of 2 is not reached"
    );

    assert_eq!(call(&mut svc).await.unwrap().status(), 200);
    assert_eq!(call(&mut svc).await.unwrap().status(), 404);

    assert_eq!(calls.count(), 9);
    let counts = handle.snapshot().counts;
    assert_eq!(counts.arrived, 4);
    assert_eq!(counts.made, 4);
    assert_eq!((counts.successes, counts.failures), (3, 1));
    assert_counts_add_up(&counts);
}

// ---------------------------------------------------------------------------------
// Requests that are not `Clone`.

/// A request type that is not `Clone`.
#[derive(Debug)]
struct Prompt(String);

#[tokio::test(start_paused = true)]
async fn requests_are_kept_with_the_users_function_and_one_that_cannot_be_kept_is_sent_once() {
    let calls = Arc::new(AtomicUsize::new(0));
    let inner = service_fn({
        let calls = calls.clone();
        move |_: Prompt| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, std::io::Error>(response(503, None, "{}")) }
        }
    });
    let keep = |prompt: &Prompt| Some(Prompt(prompt.0.clone()));
    let mut svc = retry(3, ms(10))
        .keep_requests_with(keep)
        .layer(inner.clone());
    svc.ready()
        .await
        .unwrap()
        .call(Prompt("hi".into()))
        .await
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    let never = |_: &Prompt| None;
    let mut svc = retry(3, ms(10)).keep_requests_with(never).layer(inner);
    svc.ready()
        .await
        .unwrap()
        .call(Prompt("hi".into()))
        .await
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

// ---------------------------------------------------------------------------------
// Settings.

#[test]
fn bad_settings_are_typed_errors() {
    let err = |builder: tower_circuit_breaker::retry::RetryBuilder| builder.build().unwrap_err();
    assert_eq!(
        err(RetryLayer::builder().max_attempts(0)),
        RetryConfigError::ZeroAttempts
    );
    assert_eq!(
        err(RetryLayer::builder().backoff(Duration::ZERO, secs(1))),
        RetryConfigError::ZeroBackoffBase
    );
    assert_eq!(
        err(RetryLayer::builder().backoff(ms(1), Duration::ZERO)),
        RetryConfigError::ZeroBackoffCap
    );
    assert_eq!(
        err(RetryLayer::builder().backoff(secs(2), secs(1))),
        RetryConfigError::BackoffBaseAboveCap {
            base: secs(2),
            cap: secs(1)
        }
    );
    // What `TpsBudget::new` would panic on.
    assert_eq!(
        err(RetryLayer::builder().tps_budget(ms(999), 10, 0.2)),
        RetryConfigError::BudgetWindow(ms(999))
    );
    assert_eq!(
        err(RetryLayer::builder().tps_budget(secs(61), 10, 0.2)),
        RetryConfigError::BudgetWindow(secs(61))
    );
    assert_eq!(
        err(RetryLayer::builder().tps_budget(secs(10), 10, -0.5)),
        RetryConfigError::BudgetRatio(-0.5)
    );
    assert!(matches!(
        err(RetryLayer::builder().tps_budget(secs(10), 10, f32::NAN)),
        RetryConfigError::BudgetRatio(r) if r.is_nan()
    ));
    assert_eq!(
        err(RetryLayer::builder().tps_budget(secs(10), u32::MAX, 0.2)),
        RetryConfigError::BudgetReserve(u32::MAX)
    );
    assert_eq!(
        err(RetryLayer::builder().max_attempts(0)).to_string(),
        "retry attempts must be at least 1 (the call itself), got 0"
    );
    // The edges that work: one attempt, base equal to the cap, no Retry-After wait.
    RetryLayer::builder()
        .max_attempts(1)
        .backoff(secs(1), secs(1))
        .max_retry_after_wait(Duration::ZERO)
        .tps_budget(secs(60), 0, 1000.0)
        .build()
        .unwrap();
}

#[test]
fn public_types_are_send_sync_clone_and_debug() {
    fn check<T: Send + Sync + Clone + std::fmt::Debug>(_: &T) {}
    let layer = RetryLayer::builder()
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new())
        .keep_requests_with(reqwest::Request::try_clone as fn(&reqwest::Request) -> _);
    check(&layer);
    check(layer.policy());
    let policy: RetryPolicy<HttpClassifier, _> = layer.clone().into_policy();
    assert!(format!("{policy:?}").contains("max_attempts: 3"));
    check(&RetryLayer::builder());
    check(&RetryConfigError::ZeroAttempts);
}

// ---------------------------------------------------------------------------------
// Over real TCP.

/// One call to `url` with a JSON body, bounded by 10 s.
async fn post<S>(
    svc: &mut S,
    url: &str,
) -> Result<tower_circuit_breaker::Answer<BufferedResponse>, BoxError>
where
    S: Service<
        reqwest::Request,
        Response = tower_circuit_breaker::Answer<BufferedResponse>,
        Error = BoxError,
    >,
{
    let mut request = reqwest::Request::new(http::Method::POST, url.parse().expect("a URL"));
    *request.body_mut() = Some(r#"{"model":"local","messages":[]}"#.into());
    let call = async { svc.ready().await?.call(request).await };
    tokio::time::timeout(secs(10), call)
        .await
        .expect("a call ends within its bound")
}

#[tokio::test]
async fn over_tcp_503_503_200_is_one_success_after_three_requests() {
    let server = TestServer::start([Reply::Unavailable, Reply::Unavailable], Reply::Ok).await;
    let breaker = CircuitBreakerLayer::builder()
        .name("chat")
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new());
    let handle = breaker.handle();
    let retry = RetryLayer::builder()
        .backoff(ms(1), ms(5))
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new())
        .keep_requests_with(reqwest::Request::try_clone);
    let mut svc = ServiceBuilder::new()
        .layer(breaker)
        .layer(retry)
        .timeout(secs(5))
        .layer(BufferBodyLayer::new())
        .service(reqwest::Client::new());

    let answer = post(&mut svc, &server.url()).await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.text().unwrap(), CHAT_BODY);
    assert_eq!(answer.source(), Source::Service);
    assert_eq!(server.requests(), 3, "two retries reached the server");
    let counts = handle.snapshot().counts;
    assert_eq!((counts.made, counts.successes, counts.failures), (1, 1, 0));
    assert_counts_add_up(&counts);

    // A 429 with a long Retry-After: one request, the breaker opens, and the next call
    // does not reach the server.
    let limited = TestServer::start([Reply::RateLimited(120)], Reply::Ok).await;
    let answer = post(&mut svc, &limited.url()).await.unwrap();
    assert_eq!(answer.status(), 429);
    assert_eq!(limited.requests(), 1);
    assert_eq!(handle.state(), State::Open);
    let err = post(&mut svc, &limited.url()).await.unwrap_err();
    assert_eq!(
        err.downcast_ref::<Rejected>().unwrap().reason(),
        Reason::Open
    );
    assert_eq!(limited.requests(), 1);
}

// ---------------------------------------------------------------------------------
// Outside a breaker.

#[tokio::test(start_paused = true)]
async fn outside_a_breaker_a_fallbacks_answer_is_never_retried_and_a_failure_is() {
    let breaker = model_breaker(10)
        .with_classifier(HttpClassifier::new())
        .with_fallback(service_fn(model_unavailable));
    let handle = breaker.handle();
    let (inner, calls) = model([], Step::Status(503));
    let mut svc = ServiceBuilder::new()
        .layer(
            RetryLayer::builder()
                .max_attempts(3)
                .build()
                .unwrap()
                .with_classifier(BreakerVerdict),
        )
        .layer(breaker)
        .service(inner);

    // Each 503 is a failure to the breaker: retried, and each attempt counted.
    let answer = call(&mut svc).await.unwrap();
    assert!(answer.is_failure());
    assert_eq!(calls.count(), 3);
    assert_eq!(handle.snapshot().counts.failures, 3);

    // The fallback's 503 for a skipped call: not retried.
    handle.force_open();
    let answer = call(&mut svc).await.unwrap();
    assert_eq!(answer.source(), Source::Fallback(Reason::ForcedOpen));
    assert_eq!(handle.snapshot().counts.arrived, 4);
    assert_eq!(calls.count(), 3);
}

// ---------------------------------------------------------------------------------
// Against a reference model.

/// What the model says the policy does with one step's result.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fate {
    /// Returned: a success to the breaker (200, a caller's 404).
    Success,
    /// Retried (if attempts remain) after exactly this wait, or after the backoff.
    Transient(Option<Duration>),
    /// Returned at once: a failure to the breaker (a long `Retry-After`).
    Final,
    /// Returned at once, and the breaker stays open (an exhausted quota).
    Permanent,
}

fn fate(step: Step) -> Fate {
    match step {
        Step::Status(200 | 404) => Fate::Success,
        Step::Status(_) | Step::Refused => Fate::Transient(None),
        Step::Waiting(_, _, "2") => Fate::Transient(Some(secs(2))),
        Step::Waiting(..) => Fate::Final,
        Step::Quota => Fate::Permanent,
        Step::Hang => unreachable!("not generated"),
    }
}

fn steps() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        Just(Step::Status(200)),
        Just(Step::Status(404)),
        Just(Step::Status(503)),
        Just(Step::Refused),
        Just(Step::Waiting(429, "retry-after", "2")),
        Just(Step::Waiting(429, "retry-after", "60")),
        Just(Step::Quota),
    ]
}

/// Runs `user_calls` calls through breaker -> retry -> model(script) and checks each
/// against the reference model: the attempts made, the waits between them, what the
/// caller got, and one outcome per call in the breaker's counts.
fn check_against_model(
    script: Vec<Step>,
    max_attempts: u32,
) -> Result<(), proptest::test_runner::TestCaseError> {
    use proptest::prelude::*;
    let (base, cap) = (ms(100), ms(400));
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(async {
            let breaker = CircuitBreakerLayer::builder()
                .name("model")
                .failure_threshold(1_000)
                .open_on_retry_after(false)
                .build()
                .unwrap()
                .with_classifier(HttpClassifier::new());
            let handle = breaker.handle();
            let retry = RetryLayer::builder()
                .max_attempts(max_attempts)
                .backoff(base, cap)
                .tps_budget(secs(60), 1_000, 1000.0)
                .build()
                .unwrap()
                .with_classifier(HttpClassifier::new());
            let (inner, calls) = model(script.clone(), Step::Status(200));
            let mut svc = ServiceBuilder::new()
                .layer(breaker)
                .layer(retry)
                .service(inner);

            let mut next = script
                .into_iter()
                .chain(std::iter::repeat(Step::Status(200)));
            let (mut open, mut successes, mut failures) = (false, 0, 0);
            for user_call in 0..4 {
                calls.clear();
                let result = call(&mut svc).await;
                if open {
                    let rejected = result
                        .as_ref()
                        .err()
                        .and_then(|e| e.downcast_ref::<Rejected>());
                    prop_assert!(rejected.is_some(), "call {}: open for good", user_call);
                    prop_assert_eq!(calls.count(), 0);
                    continue;
                }
                // The model: attempts until one is not transient or none remain.
                let mut waits = Vec::new();
                let (last, last_fate) = loop {
                    let step = next.next().unwrap();
                    match fate(step) {
                        Fate::Transient(wait) if (waits.len() as u32) + 1 < max_attempts => {
                            waits.push(wait)
                        }
                        other => break (step, other),
                    }
                };
                prop_assert_eq!(calls.count(), waits.len() + 1, "call {}", user_call);
                for (n, (gap, wait)) in calls.gaps().into_iter().zip(&waits).enumerate() {
                    match wait {
                        Some(exact) => prop_assert_eq!(gap, *exact),
                        None => {
                            let ceiling = (base * 2u32.pow(n as u32)).min(cap);
                            prop_assert!(gap <= ceiling + ms(1), "{:?} > {:?}", gap, ceiling);
                        }
                    }
                }
                match (last, &result) {
                    (Step::Refused, Err(error)) => {
                        prop_assert!(error.to_string().contains("connection refused"))
                    }
                    (Step::Status(status) | Step::Waiting(status, ..), Ok(answer)) => {
                        prop_assert_eq!(answer.status().as_u16(), status)
                    }
                    (Step::Quota, Ok(answer)) => prop_assert_eq!(answer.status().as_u16(), 429),
                    (step, result) => prop_assert!(false, "{:?} gave {:?}", step, result.is_ok()),
                }
                match last_fate {
                    Fate::Success => successes += 1,
                    Fate::Permanent => {
                        failures += 1;
                        open = true;
                    }
                    Fate::Transient(_) | Fate::Final => failures += 1,
                }
                let counts = handle.snapshot().counts;
                prop_assert_eq!((counts.successes, counts.failures), (successes, failures));
            }
            let counts = handle.snapshot().counts;
            prop_assert_eq!(counts.arrived, 4);
            assert_counts_add_up(&counts);
            Ok(())
        })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 128,
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    #[test]
    fn the_policy_matches_its_reference_model(
        script in proptest::collection::vec(steps(), 0..16),
        max_attempts in 1u32..5,
    ) {
        check_against_model(script, max_attempts)?;
    }
}

// ---------------------------------------------------------------------------------
// The breaker's handle.

#[tokio::test(start_paused = true)]
async fn with_the_breakers_handle_no_retry_goes_out_once_a_person_kills_it() {
    for told in [false, true] {
        let breaker = CircuitBreakerLayer::builder()
            .name("model")
            .build()
            .unwrap()
            .with_classifier(HttpClassifier::new());
        let handle = breaker.handle();
        let calls = Arc::new(AtomicUsize::new(0));
        // The first call fails, and an operator kills the breaker while it does.
        let inner = service_fn({
            let (calls, handle) = (calls.clone(), handle.clone());
            move |_: String| {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    handle.kill_switch().kill();
                }
                async { Ok::<_, std::io::Error>(response(503, None, "{}")) }
            }
        });
        let mut retry = RetryLayer::builder().max_attempts(3);
        if told {
            retry = retry.breaker(handle.clone());
        }
        let mut svc = ServiceBuilder::new()
            .layer(breaker)
            .layer(
                retry
                    .build()
                    .unwrap()
                    .with_classifier(HttpClassifier::new()),
            )
            .service(inner);
        let answer = call(&mut svc).await.unwrap();
        assert_eq!(answer.status(), 503);
        assert_eq!(answer.source(), Source::Service);
        let expected = if told { 1 } else { 3 };
        assert_eq!(
            calls.load(Ordering::SeqCst),
            expected,
            "told the breaker: {told}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn with_the_breakers_handle_a_kill_during_a_retry_after_wait_ends_the_wait_at_once() {
    for act in ["kill", "force open", "transition then kill"] {
        let breaker = CircuitBreakerLayer::builder()
            .name("model")
            .build()
            .unwrap()
            .with_classifier(HttpClassifier::new());
        let handle = breaker.handle();
        // The server asks for 4 s; a person acts 1 s into the wait.
        let (inner, calls) = model([Step::Waiting(429, "retry-after", "4")], Step::Status(200));
        let retry = RetryLayer::builder()
            .max_attempts(3)
            .breaker(handle.clone())
            .build()
            .unwrap()
            .with_classifier(HttpClassifier::new());
        let mut svc = ServiceBuilder::new()
            .layer(breaker)
            .layer(retry)
            .service(inner);
        let person = tokio::spawn({
            let handle = handle.clone();
            async move {
                tokio::time::sleep(secs(1)).await;
                match act {
                    "kill" => handle.kill_switch().kill(),
                    "force open" => handle.force_open(),
                    _ => {
                        // A change that does not stop retries first: watched again.
                        handle.reset();
                        tokio::time::sleep(ms(500)).await;
                        handle.kill_switch().kill();
                    }
                }
            }
        });
        let started = tokio::time::Instant::now();
        let answer = call(&mut svc).await.unwrap();
        let acted_at = if act == "transition then kill" {
            ms(1500)
        } else {
            secs(1)
        };
        assert_eq!(
            started.elapsed(),
            acted_at,
            "{act}: the wait ended with the act"
        );
        assert_eq!(answer.status(), 429, "{act}: the last answer is returned");
        assert_eq!(calls.count(), 1, "{act}: no retry went out");
        person.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn with_the_breakers_handle_a_probe_is_still_retried() {
    // The breaker is half-open and this call is its probe: its slot taken is no reason
    // to stop.
    let breaker = CircuitBreakerLayer::builder()
        .name("model")
        .failure_threshold(1)
        .cooldown(tower_circuit_breaker::Cooldown::Time(secs(1)))
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new());
    let handle = breaker.handle();
    let (inner, calls) = model(
        [Step::Status(503), Step::Status(503), Step::Status(200)],
        Step::Status(200),
    );
    let retry = RetryLayer::builder()
        .max_attempts(1)
        .breaker(handle.clone())
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new());
    let mut once = ServiceBuilder::new()
        .layer(breaker.clone())
        .layer(retry)
        .service(inner.clone());
    assert_eq!(call(&mut once).await.unwrap().status(), 503);
    assert_eq!(handle.state(), State::Open);
    tokio::time::advance(secs(2)).await;

    let retry = RetryLayer::builder()
        .max_attempts(3)
        .breaker(handle.clone())
        .build()
        .unwrap()
        .with_classifier(HttpClassifier::new());
    let mut svc = ServiceBuilder::new()
        .layer(breaker)
        .layer(retry)
        .service(inner);
    let answer = call(&mut svc).await.unwrap();
    assert_eq!(answer.source(), Source::Probe);
    assert_eq!(answer.status(), 200);
    assert_eq!(calls.count(), 3, "the probe's retry went out");
    assert_eq!(handle.state(), State::Closed);
}

/// `attempts` attempts a millisecond apart, no retry once `handle`'s breaker would skip.
fn quick_retry_for(handle: &CircuitBreakerHandle, attempts: u32) -> RetryLayer {
    RetryLayer::builder()
        .max_attempts(attempts)
        .backoff(ms(1), ms(1))
        .breaker(handle.clone())
        .build()
        .unwrap()
}

/// A service that is ready once, then never again: a retry waits for it for ever.
#[derive(Clone)]
struct ReadyOnce {
    polls: Arc<AtomicUsize>,
}

impl Service<u8> for ReadyOnce {
    type Response = u8;
    type Error = BoxError;
    type Future = std::future::Ready<Result<u8, BoxError>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        if self.polls.fetch_add(1, Ordering::SeqCst) == 0 {
            std::task::Poll::Ready(Ok(()))
        } else {
            std::task::Poll::Pending
        }
    }

    fn call(&mut self, _: u8) -> Self::Future {
        std::future::ready(Err("503 Service Unavailable".into()))
    }
}

#[tokio::test(start_paused = true)]
async fn with_the_breakers_handle_a_kill_ends_a_retry_waiting_for_its_service_to_be_ready() {
    let breaker = CircuitBreakerLayer::builder()
        .failure_threshold(100)
        .build()
        .unwrap();
    let handle = breaker.handle();
    let retry = quick_retry_for(&handle, 3);
    let mut svc = ServiceBuilder::new()
        .layer(breaker)
        .layer(retry)
        .service(ReadyOnce {
            polls: Arc::new(AtomicUsize::new(0)),
        });
    let call = async { svc.ready().await?.call(0).await };
    let person = async {
        tokio::time::sleep(secs(1)).await;
        handle.kill_switch().kill();
    };
    let (answer, ()) = tokio::join!(tokio::time::timeout(secs(60), call), person);
    let answer = answer.expect("the kill ends the retry's wait at once");
    assert!(answer.is_err(), "the last result, the 503");
    assert_counts_add_up(&handle.snapshot().counts);
}

#[tokio::test(start_paused = true)]
async fn with_the_breakers_handle_a_retry_that_waited_for_a_busy_service_is_not_sent_after_a_kill()
{
    let breaker = CircuitBreakerLayer::builder()
        .failure_threshold(100)
        .build()
        .unwrap();
    let handle = breaker.handle();
    let (calls, after_kill, killed) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let inner = service_fn({
        let (calls, after_kill, killed) = (calls.clone(), after_kill.clone(), killed.clone());
        move |who: u8| {
            calls.fetch_add(1, Ordering::SeqCst);
            if killed.load(Ordering::SeqCst) {
                after_kill.fetch_add(1, Ordering::SeqCst);
            }
            async move {
                if who == 1 {
                    tokio::time::sleep(secs(10)).await;
                    Ok::<_, BoxError>(1)
                } else {
                    Err::<u8, BoxError>("503 Service Unavailable".into())
                }
            }
        }
    });
    // One call at a time: the retry waits for the other caller's permit.
    let limited = tower::limit::ConcurrencyLimit::new(inner, 1);
    let retry = quick_retry_for(&handle, 3);
    let mut svc = ServiceBuilder::new()
        .layer(breaker)
        .layer(retry)
        .service(limited.clone());
    let call = async { svc.ready().await?.call(0).await };
    let others = async {
        tokio::task::yield_now().await;
        assert_eq!(calls.load(Ordering::SeqCst), 1, "the first attempt failed");
        let mut other = limited.clone();
        let busy = async move { other.ready().await?.call(1).await };
        let person = async {
            tokio::time::sleep(secs(1)).await;
            killed.store(true, Ordering::SeqCst);
            handle.kill_switch().kill();
        };
        let (busy, ()) = tokio::join!(busy, person);
        busy.unwrap();
    };
    let (answer, ()) = tokio::join!(call, others);
    assert!(answer.is_err(), "the last result, the 503");
    assert_eq!(
        after_kill.load(Ordering::SeqCst),
        0,
        "no retry reaches the service after the kill"
    );
}

#[tokio::test(start_paused = true)]
async fn with_the_breakers_handle_no_retry_goes_out_while_another_calls_probe_holds_the_breaker() {
    let breaker = CircuitBreakerLayer::builder()
        .failure_threshold(1)
        .cooldown(tower_circuit_breaker::Cooldown::Time(secs(1)))
        .build()
        .unwrap();
    let handle = breaker.handle();
    let sent = Arc::new(AtomicUsize::new(0));
    let inner = service_fn({
        let sent = sent.clone();
        move |_: u8| {
            let n = sent.fetch_add(1, Ordering::SeqCst);
            async move {
                match n {
                    // The first call's first attempt: slow, then a failure to retry.
                    0 => tokio::time::sleep(secs(2)).await,
                    // The probe: it hangs.
                    2 => tokio::time::sleep(secs(100)).await,
                    _ => {}
                }
                Err::<u8, BoxError>("503 Service Unavailable".into())
            }
        }
    });
    let retry = quick_retry_for(&handle, 2);
    let mut first = ServiceBuilder::new()
        .layer(breaker.clone())
        .layer(retry)
        .service(inner.clone());
    let mut others = ServiceBuilder::new().layer(breaker).service(inner);
    let first_call = async { first.ready().await?.call(0).await };
    let rest = async {
        tokio::task::yield_now().await;
        // Another call's failure opens the breaker; after the cooldown a third is the probe.
        assert!(others.ready().await.unwrap().call(1).await.is_err());
        assert_eq!(handle.state(), State::Open);
        tokio::time::sleep(ms(1500)).await;
        let mut prober = others.clone();
        let probe = prober.ready().await.unwrap().call(2);
        tokio::select! {
            _ = probe => {}
            _ = tokio::time::sleep(secs(5)) => {}
        }
    };
    let (answer, ()) = tokio::join!(first_call, rest);
    assert!(answer.is_err(), "the first call's last result");
    assert_eq!(
        sent.load(Ordering::SeqCst),
        3,
        "the first call's retry is not sent while another call is the probe"
    );
}
