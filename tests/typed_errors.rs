//! Typed errors (`with_typed_errors`): a skipped call fails with `CallError::Rejected`, the
//! same rejection the default boxes into a `BoxError`, and the wrapped service's errors
//! come as `CallError::Service`, counted exactly as the default counts them. Time is
//! tokio's paused clock.

use std::io;
use std::time::Duration;

use tokio::time::advance;
use tower::{service_fn, Layer, Service, ServiceBuilder, ServiceExt};
use tower_circuit_breaker::error::{BoxError, CallError, Rejected};
use tower_circuit_breaker::keyed::KeyedCircuitBreakerLayer;
use tower_circuit_breaker::{Builder, Cooldown, Reason, Source, State};
use tower_test::mock;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A service that fails the request "fail" and echoes any other.
fn echo_or_fail(
) -> impl Service<&'static str, Response = &'static str, Error = io::Error, Future: Send> + Clone {
    service_fn(|request: &'static str| async move {
        match request {
            "fail" => Err(io::Error::other("connection refused")),
            request => Ok(request),
        }
    })
}

/// One call through `svc`, once it is ready.
async fn send<S, R>(svc: &mut S, request: R) -> Result<S::Response, S::Error>
where
    S: Service<R>,
    S::Error: std::fmt::Debug,
{
    svc.ready().await.expect("ready").call(request).await
}

fn settings() -> Builder {
    Builder::new()
        .name("search")
        .failure_threshold(2)
        .cooldown(Cooldown::Time(secs(10)))
}

#[tokio::test(start_paused = true)]
async fn a_skip_fails_with_the_same_rejection_the_default_boxes() {
    let typed = settings().build().expect("valid").with_typed_errors();
    let boxed = settings().build().expect("valid");
    let (typed_handle, boxed_handle) = (typed.handle(), boxed.handle());
    let mut typed = typed.layer(echo_or_fail());
    let mut boxed = boxed.layer(echo_or_fail());
    for _ in 0..2 {
        let error = send(&mut typed, "fail").await.unwrap_err();
        assert!(matches!(error, CallError::Service(_)), "{error:?}");
        assert!(send(&mut boxed, "fail").await.is_err());
    }
    assert_eq!(typed_handle.state(), State::Open);
    assert_eq!(boxed_handle.state(), State::Open);
    advance(secs(4)).await;

    let typed_error = send(&mut typed, "hi").await.unwrap_err();
    let boxed_error = send(&mut boxed, "hi").await.unwrap_err();
    let CallError::Rejected(rejected) = &typed_error else {
        panic!("rejected, got {typed_error:?}");
    };
    let boxed_rejected = boxed_error.downcast_ref::<Rejected>().expect("a Rejected");
    assert_eq!(rejected.name(), "search");
    assert_eq!(rejected.reason(), Reason::Open);
    assert_eq!(rejected.state(), boxed_rejected.state());
    assert_eq!(rejected.calls_until_probe(), Some(1));
    assert_eq!(
        typed_error.to_string(),
        "circuit breaker `search` skipped the call: it is open; next probe in 6s"
    );
    assert_eq!(typed_error.to_string(), boxed_error.to_string());
    assert_eq!(
        typed_error.rejected().map(Rejected::reason),
        Some(Reason::Open)
    );
    assert_eq!(
        typed_handle.snapshot().counts,
        boxed_handle.snapshot().counts
    );

    // After the cooldown the next call is the probe, as by default.
    advance(secs(6)).await;
    let answer = send(&mut typed, "hi").await.expect("probe");
    assert_eq!(answer.source(), Source::Probe);
    assert_eq!(typed_handle.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn the_wrapped_services_errors_come_as_service_errors_and_count_as_failures() {
    let layer = settings()
        .failure_threshold(3)
        .build()
        .expect("valid")
        .with_typed_errors();
    let breaker = layer.handle();
    let (mut svc, mut mock) = mock::spawn_layer::<&str, &str, _>(layer);

    // An error from the wrapped service's `poll_ready`.
    mock.send_error("overloaded");
    match svc.poll_ready() {
        std::task::Poll::Ready(Err(CallError::Service(error))) => {
            assert_eq!(error.to_string(), "overloaded")
        }
        other => panic!("the inner error as a service error, got {other:?}"),
    }
    assert_eq!(breaker.snapshot().counts.failures, 1);

    // An error from its call.
    mock.allow(1);
    assert!(svc.poll_ready().is_ready());
    let call = svc.call("q");
    let (request, respond) = mock.next_request().await.expect("the call reached it");
    assert_eq!(request, "q");
    respond.send_error(io::Error::other("connection reset"));
    match call.await {
        Err(CallError::Service(error)) => {
            assert_eq!(error.to_string(), "connection reset");
            assert!(error.downcast_ref::<io::Error>().is_some());
        }
        other => panic!("the call's error as a service error, got {other:?}"),
    }
    let snapshot = breaker.snapshot();
    assert_eq!(snapshot.counts.failures, 2);
    assert_eq!(snapshot.consecutive_failures, 2);
    assert_eq!(
        snapshot.last_failure.expect("recorded").message.as_ref(),
        "connection reset"
    );
}

#[tokio::test(start_paused = true)]
async fn a_timeout_inside_the_breaker_comes_as_a_service_error_the_caller_can_downcast() {
    let layer = settings().build().expect("valid").with_typed_errors();
    let mut svc = ServiceBuilder::new()
        .layer(layer)
        .timeout(secs(1))
        .service(service_fn(|_: ()| async {
            tokio::time::sleep(secs(5)).await;
            Ok::<_, io::Error>(())
        }));
    match svc.ready().await.expect("ready").call(()).await {
        Err(CallError::Service(error)) => {
            assert!(error.is::<tower::timeout::error::Elapsed>(), "{error}")
        }
        other => panic!("a timeout, got {other:?}"),
    }
}

/// `?` boxes a `CallError` into a `BoxError` like any error; its message and source are
/// those of what it holds.
#[tokio::test(start_paused = true)]
async fn a_call_error_boxes_with_its_message_and_source() {
    async fn call(svc: &mut (impl Service<(), Error = CallError> + Send)) -> Result<(), BoxError> {
        svc.ready().await?.call(()).await?;
        Ok(())
    }
    let layer = settings().build().expect("valid").with_typed_errors();
    layer.handle().kill_switch().kill();
    let mut killed = layer.layer(service_fn(|_: ()| async { Ok::<_, io::Error>(()) }));
    let error = call(&mut killed).await.unwrap_err();
    let typed = error.downcast_ref::<CallError>().expect("a CallError");
    assert_eq!(typed.rejected().map(Rejected::reason), Some(Reason::Killed));
    assert_eq!(
        error.to_string(),
        "circuit breaker `search` skipped the call: the kill switch is on"
    );

    #[derive(Debug, thiserror::Error)]
    #[error("request failed")]
    struct Outer(#[source] io::Error);
    let mut failing = settings()
        .build()
        .expect("valid")
        .with_typed_errors()
        .layer(service_fn(|_: ()| async {
            Err::<(), _>(Outer(io::Error::other("connection refused")))
        }));
    let error = call(&mut failing).await.unwrap_err();
    assert_eq!(error.to_string(), "request failed");
    let source = std::error::Error::source(&*error).expect("the service error's source");
    assert_eq!(source.to_string(), "connection refused");
}

#[tokio::test(start_paused = true)]
async fn keyed_breakers_fail_with_typed_errors_naming_the_keys_breaker() {
    let layer = KeyedCircuitBreakerLayer::builder(settings(), |request: &&'static str| *request)
        .name_keys_by_display()
        .build()
        .expect("valid")
        .with_typed_errors();
    let mut svc = layer.layer(echo_or_fail());
    for _ in 0..2 {
        let error = send(&mut svc, "fail").await.unwrap_err();
        assert!(matches!(error, CallError::Service(_)), "{error:?}");
    }
    let error = send(&mut svc, "fail").await.unwrap_err();
    let rejected = error.rejected().expect("rejected");
    assert_eq!(rejected.reason(), Reason::Open);
    assert!(rejected.name().contains("fail"), "{}", rejected.name());
    let answer = send(&mut svc, "up").await.expect("its own breaker");
    assert_eq!(answer.source(), Source::Service);
}
