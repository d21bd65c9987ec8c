//! Every setting the builder rejects, with the exact `ConfigError`, and a property test
//! that no combination of values makes `build()` panic.

use std::time::Duration;

use proptest::prelude::*;
use tower_circuit_breaker::config::{RateWindow, TripPolicy};
use tower_circuit_breaker::error::ConfigError;
use tower_circuit_breaker::{Backoff, Builder, CircuitBreakerLayer, Cooldown, Mode};

/// `build_config()` and `build()` agree, and both return this error.
fn rejects(builder: Builder) -> ConfigError {
    let from_config = builder
        .build_config()
        .expect_err("build_config() accepted a bad setting");
    let from_build = builder.build().expect_err("build() accepted a bad setting");
    // NaN payloads are not equal to themselves, so compare the texts as well.
    assert_eq!(from_config.to_string(), from_build.to_string());
    assert_display_is_a_lowercase_phrase(&from_build);
    from_build
}

fn assert_display_is_a_lowercase_phrase(error: &ConfigError) {
    let text = error.to_string();
    assert!(!text.is_empty(), "{error:?} has an empty Display");
    let first = text.chars().next().unwrap();
    assert!(
        first.is_lowercase(),
        "{error:?} starts with an uppercase letter: {text:?}"
    );
    assert!(
        !text.ends_with('.'),
        "{error:?} ends with a full stop: {text:?}"
    );
    assert_eq!(text.trim(), text, "{error:?} has surrounding whitespace");
}

fn builds(builder: Builder) {
    let config = builder
        .build_config()
        .expect("build_config() rejected a good setting");
    drop(config);
    builder.build().expect("build() rejected a good setting");
}

#[test]
fn defaults_build() {
    builds(Builder::new());
    builds(CircuitBreakerLayer::builder());
    let config = Builder::new().build_config().unwrap();
    assert_eq!(config.trip_policy(), TripPolicy::ConsecutiveFailures(3));
    assert_eq!(config.cooldown(), Cooldown::Time(Duration::from_secs(30)));
    assert_eq!(config.half_open_probes(), 1);
    assert_eq!(config.max_half_open_dwell(), Some(Duration::from_secs(60)));
    assert_eq!(config.mode(), Mode::Enabled);
    assert_eq!(config.max_retry_after(), Duration::from_secs(300));
    assert!(
        config.open_on_retry_after(),
        "a retry-after opens at once by default"
    );
}

#[test]
fn zero_failure_threshold_is_rejected() {
    assert_eq!(
        rejects(Builder::new().failure_threshold(0)),
        ConfigError::ZeroThreshold
    );
    assert_eq!(
        rejects(Builder::new().trip_policy(TripPolicy::ConsecutiveFailures(0))),
        ConfigError::ZeroThreshold
    );
}

#[test]
fn zero_failure_rate_is_rejected() {
    let error = rejects(Builder::new().failure_rate(0.0, RateWindow::Calls(10), 5));
    assert_eq!(error, ConfigError::InvalidFailureRate(0.0));
}

#[test]
fn failure_rate_above_one_is_rejected() {
    let error = rejects(Builder::new().failure_rate(1.01, RateWindow::Calls(10), 5));
    assert_eq!(error, ConfigError::InvalidFailureRate(1.01));
    let error = rejects(Builder::new().failure_rate(f64::INFINITY, RateWindow::Calls(10), 5));
    assert_eq!(error, ConfigError::InvalidFailureRate(f64::INFINITY));
}

#[test]
fn nan_failure_rate_is_rejected() {
    let error = rejects(Builder::new().failure_rate(f64::NAN, RateWindow::Calls(10), 5));
    assert!(
        matches!(error, ConfigError::InvalidFailureRate(rate) if rate.is_nan()),
        "{error:?}"
    );
}

#[test]
fn negative_failure_rate_is_rejected() {
    let error = rejects(Builder::new().failure_rate(-0.5, RateWindow::Calls(10), 5));
    assert_eq!(error, ConfigError::InvalidFailureRate(-0.5));
    let error = rejects(Builder::new().failure_rate(-0.0, RateWindow::Calls(10), 5));
    assert!(
        matches!(error, ConfigError::InvalidFailureRate(rate) if rate == 0.0),
        "{error:?}"
    );
}

#[test]
fn empty_count_window_is_rejected() {
    let error = rejects(Builder::new().failure_rate(0.5, RateWindow::Calls(0), 0));
    assert_eq!(error, ConfigError::EmptyWindow);
}

#[test]
fn a_count_window_over_a_million_calls_is_rejected_instead_of_allocated() {
    let error = rejects(Builder::new().failure_rate(0.5, RateWindow::Calls(u32::MAX), 5));
    assert_eq!(error, ConfigError::WindowTooLong { window: u32::MAX });
    let error =
        rejects(Builder::new().failure_rate(0.5, RateWindow::Calls(RateWindow::MAX_CALLS + 1), 5));
    assert_eq!(
        error,
        ConfigError::WindowTooLong {
            window: RateWindow::MAX_CALLS + 1
        }
    );
    builds(Builder::new().failure_rate(0.5, RateWindow::Calls(RateWindow::MAX_CALLS), 5));
}

#[test]
fn empty_time_window_is_rejected() {
    let error = rejects(Builder::new().failure_rate(0.5, RateWindow::Time(Duration::ZERO), 1));
    assert_eq!(error, ConfigError::EmptyWindow);
}

#[test]
fn minimum_calls_above_count_window_is_rejected() {
    let error = rejects(Builder::new().failure_rate(0.5, RateWindow::Calls(10), 11));
    assert_eq!(
        error,
        ConfigError::MinimumCallsAboveWindow {
            minimum_calls: 11,
            window: 10
        }
    );
    assert!(error.to_string().contains("11"), "{error}");
    assert!(error.to_string().contains("10"), "{error}");
}

#[test]
fn zero_cooldown_in_calls_is_rejected() {
    assert_eq!(
        rejects(Builder::new().cooldown(Cooldown::Calls(0))),
        ConfigError::ZeroCooldown
    );
}

#[test]
fn zero_cooldown_in_time_is_rejected() {
    assert_eq!(
        rejects(Builder::new().cooldown(Cooldown::Time(Duration::ZERO))),
        ConfigError::ZeroCooldown
    );
}

#[test]
fn zero_half_open_probes_is_rejected() {
    assert_eq!(
        rejects(Builder::new().half_open_probes(0)),
        ConfigError::ZeroHalfOpenProbes
    );
}

#[test]
fn backoff_multiplier_below_one_is_rejected() {
    let error = rejects(
        Builder::new()
            .cooldown(Cooldown::Calls(2))
            .backoff(Backoff::exponential(0.5, Cooldown::Calls(10))),
    );
    assert_eq!(error, ConfigError::InvalidMultiplier(0.5));
    let error = rejects(
        Builder::new()
            .cooldown(Cooldown::Calls(2))
            .backoff(Backoff::exponential(-2.0, Cooldown::Calls(10))),
    );
    assert_eq!(error, ConfigError::InvalidMultiplier(-2.0));
}

#[test]
fn nan_backoff_multiplier_is_rejected() {
    let error = rejects(
        Builder::new()
            .cooldown(Cooldown::Calls(2))
            .backoff(Backoff::exponential(f64::NAN, Cooldown::Calls(10))),
    );
    assert!(
        matches!(error, ConfigError::InvalidMultiplier(m) if m.is_nan()),
        "{error:?}"
    );
}

#[test]
fn infinite_backoff_multiplier_is_rejected() {
    let error = rejects(
        Builder::new()
            .cooldown(Cooldown::Calls(2))
            .backoff(Backoff::exponential(f64::INFINITY, Cooldown::Calls(10))),
    );
    assert_eq!(error, ConfigError::InvalidMultiplier(f64::INFINITY));
}

#[test]
fn backoff_cap_in_another_unit_is_rejected() {
    let error = rejects(
        Builder::new()
            .cooldown(Cooldown::Calls(2))
            .backoff(Backoff::exponential(
                2.0,
                Cooldown::Time(Duration::from_secs(60)),
            )),
    );
    assert_eq!(
        error,
        ConfigError::BackoffUnitMismatch {
            cooldown: "calls",
            cap: "time"
        }
    );
    let error = rejects(
        Builder::new()
            .cooldown(Cooldown::Time(Duration::from_secs(5)))
            .backoff(Backoff::exponential(2.0, Cooldown::Calls(100))),
    );
    assert_eq!(
        error,
        ConfigError::BackoffUnitMismatch {
            cooldown: "time",
            cap: "calls"
        }
    );
}

#[test]
fn backoff_cap_below_base_in_calls_is_rejected() {
    let error = rejects(
        Builder::new()
            .cooldown(Cooldown::Calls(10))
            .backoff(Backoff::exponential(2.0, Cooldown::Calls(9))),
    );
    assert_eq!(error, ConfigError::BackoffCapBelowBase);
}

#[test]
fn backoff_cap_below_base_in_time_is_rejected() {
    let error = rejects(
        Builder::new()
            .cooldown(Cooldown::Time(Duration::from_secs(10)))
            .backoff(Backoff::exponential(
                2.0,
                Cooldown::Time(Duration::from_millis(9_999)),
            )),
    );
    assert_eq!(error, ConfigError::BackoffCapBelowBase);
}

#[test]
fn negative_jitter_is_rejected() {
    assert_eq!(
        rejects(Builder::new().jitter(-0.1)),
        ConfigError::InvalidJitter(-0.1)
    );
}

#[test]
fn jitter_of_one_or_more_is_rejected() {
    assert_eq!(
        rejects(Builder::new().jitter(1.0)),
        ConfigError::InvalidJitter(1.0)
    );
    assert_eq!(
        rejects(Builder::new().jitter(2.5)),
        ConfigError::InvalidJitter(2.5)
    );
    assert_eq!(
        rejects(Builder::new().jitter(f64::INFINITY)),
        ConfigError::InvalidJitter(f64::INFINITY)
    );
}

#[test]
fn nan_jitter_is_rejected() {
    let error = rejects(Builder::new().jitter(f64::NAN));
    assert!(
        matches!(error, ConfigError::InvalidJitter(j) if j.is_nan()),
        "{error:?}"
    );
}

#[test]
fn zero_half_open_dwell_is_rejected() {
    assert_eq!(
        rejects(Builder::new().max_half_open_dwell(Some(Duration::ZERO))),
        ConfigError::ZeroDwell
    );
}

#[test]
fn zero_slow_call_threshold_is_rejected() {
    assert_eq!(
        rejects(Builder::new().slow_call_threshold(Duration::ZERO)),
        ConfigError::ZeroSlowCall
    );
}

#[test]
fn zero_max_retry_after_is_rejected() {
    assert_eq!(
        rejects(Builder::new().max_retry_after(Duration::ZERO)),
        ConfigError::ZeroMaxRetryAfter
    );
}

#[test]
fn a_cooldown_in_calls_longer_than_the_longest_is_rejected_and_the_longest_builds() {
    builds(Builder::new().cooldown(Cooldown::Calls(Cooldown::MAX_CALLS)));
    assert_eq!(
        rejects(Builder::new().cooldown(Cooldown::Calls(Cooldown::MAX_CALLS + 1))),
        ConfigError::CooldownTooLong
    );
    assert_eq!(
        rejects(Builder::new().cooldown(Cooldown::Calls(u64::MAX))),
        ConfigError::CooldownTooLong
    );
    assert_eq!(
        rejects(
            Builder::new()
                .cooldown(Cooldown::Calls(1))
                .backoff(Backoff::exponential(2.0, Cooldown::Calls(u64::MAX)))
        ),
        ConfigError::CooldownTooLong
    );
}

#[test]
fn empty_name_is_rejected() {
    assert_eq!(rejects(Builder::new().name("")), ConfigError::EmptyName);
    assert_eq!(
        rejects(CircuitBreakerLayer::builder().name(String::new())),
        ConfigError::EmptyName
    );
}

#[test]
fn every_error_display_is_a_lowercase_phrase_without_full_stop() {
    let errors = [
        ConfigError::ZeroThreshold,
        ConfigError::InvalidFailureRate(f64::NAN),
        ConfigError::InvalidFailureRate(0.0),
        ConfigError::EmptyWindow,
        ConfigError::WindowTooLong { window: u32::MAX },
        ConfigError::MinimumCallsAboveWindow {
            minimum_calls: 11,
            window: 10,
        },
        ConfigError::ZeroCooldown,
        ConfigError::CooldownTooLong,
        ConfigError::ZeroHalfOpenProbes,
        ConfigError::InvalidMultiplier(0.5),
        ConfigError::BackoffUnitMismatch {
            cooldown: "calls",
            cap: "time",
        },
        ConfigError::BackoffCapBelowBase,
        ConfigError::InvalidJitter(1.0),
        ConfigError::ZeroDwell,
        ConfigError::ZeroSlowCall,
        ConfigError::ZeroMaxRetryAfter,
        ConfigError::EmptyName,
    ];
    for error in &errors {
        assert_display_is_a_lowercase_phrase(error);
        // It is a std error, so it boxes into tower's error type.
        let boxed: tower::BoxError = error.clone().into();
        assert_eq!(boxed.to_string(), error.to_string());
    }
}

#[test]
fn valid_edges_build() {
    builds(Builder::new().failure_threshold(1));
    builds(Builder::new().jitter(0.0));
    builds(Builder::new().jitter(0.999));
    builds(Builder::new().failure_rate(1.0, RateWindow::Calls(10), 5));
    builds(Builder::new().failure_rate(0.5, RateWindow::Calls(10), 10));
    builds(Builder::new().failure_rate(f64::MIN_POSITIVE, RateWindow::Calls(1), 1));
    // Minimum calls of 0 is allowed (the machine treats it as 1).
    builds(Builder::new().failure_rate(0.5, RateWindow::Calls(10), 0));
    // A time window has no call count to compare the minimum with.
    builds(Builder::new().failure_rate(0.5, RateWindow::Time(Duration::from_secs(1)), 1_000));
    builds(Builder::new().cooldown(Cooldown::Calls(1)));
    builds(Builder::new().cooldown(Cooldown::Time(Duration::from_nanos(1))));
    // Multiplier exactly 1 and cap equal to the base.
    builds(
        Builder::new()
            .cooldown(Cooldown::Calls(3))
            .backoff(Backoff::exponential(1.0, Cooldown::Calls(3))),
    );
    builds(
        Builder::new()
            .cooldown(Cooldown::Time(Duration::from_secs(3)))
            .backoff(Backoff::exponential(
                2.0,
                Cooldown::Time(Duration::from_secs(3)),
            )),
    );
    builds(Builder::new().half_open_probes(1));
    builds(Builder::new().max_half_open_dwell(None));
    builds(Builder::new().max_half_open_dwell(Some(Duration::from_nanos(1))));
    builds(Builder::new().slow_call_threshold(Duration::from_nanos(1)));
    builds(Builder::new().max_retry_after(Duration::from_nanos(1)));
    builds(Builder::new().name("x"));
    builds(Builder::new().mode(Mode::Disabled));
    builds(Builder::new().mode(Mode::ObserveOnly));
}

#[test]
fn the_edge_values_survive_into_the_config() {
    let config = Builder::new()
        .name("edge")
        .failure_rate(1.0, RateWindow::Calls(10), 10)
        .cooldown(Cooldown::Calls(1))
        .jitter(0.0)
        .half_open_probes(1)
        .max_retry_after(Duration::from_nanos(1))
        .open_on_retry_after(false)
        .build_config()
        .unwrap();
    assert_eq!(config.name(), "edge");
    assert_eq!(config.max_retry_after(), Duration::from_nanos(1));
    assert!(!config.open_on_retry_after());
    assert_eq!(
        config.trip_policy(),
        TripPolicy::FailureRate {
            rate: 1.0,
            window: RateWindow::Calls(10),
            minimum_calls: 10
        }
    );
    assert_eq!(config.cooldown(), Cooldown::Calls(1));
    assert_eq!(config.half_open_probes(), 1);
}

// ---------------------------------------------------------------------------------
// Property: any value of any setter, build() never panics.
// ---------------------------------------------------------------------------------

fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(0.0),
        Just(-0.0),
        Just(1.0),
        Just(0.5),
        Just(0.999_999),
        -2.0..2.0f64,
    ]
}

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        (0u64..100_000).prop_map(Duration::from_millis),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

fn small_or_any_u32() -> impl Strategy<Value = u32> {
    prop_oneof![Just(0u32), Just(1u32), 0u32..200, any::<u32>()]
}

fn small_or_any_u64() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), Just(1u64), 0u64..200, any::<u64>()]
}

fn cooldown() -> impl Strategy<Value = Cooldown> {
    prop_oneof![
        small_or_any_u64().prop_map(Cooldown::Calls),
        duration().prop_map(Cooldown::Time),
    ]
}

fn rate_window() -> impl Strategy<Value = RateWindow> {
    prop_oneof![
        small_or_any_u32().prop_map(RateWindow::Calls),
        duration().prop_map(RateWindow::Time),
    ]
}

fn trip_policy() -> impl Strategy<Value = TripPolicy> {
    prop_oneof![
        small_or_any_u32().prop_map(TripPolicy::ConsecutiveFailures),
        (float(), rate_window(), small_or_any_u32()).prop_map(|(rate, window, minimum_calls)| {
            TripPolicy::FailureRate {
                rate,
                window,
                minimum_calls,
            }
        }),
    ]
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![
        Just(Mode::Enabled),
        Just(Mode::ObserveOnly),
        Just(Mode::Disabled)
    ]
}

#[derive(Debug, Clone)]
struct Settings {
    name: String,
    trip: TripPolicy,
    cooldown: Option<Cooldown>,
    backoff: Option<(f64, Cooldown)>,
    jitter: Option<f64>,
    jitter_seed: Option<u64>,
    probes: Option<u32>,
    dwell: Option<Option<Duration>>,
    max_retry_after: Option<Duration>,
    open_on_retry_after: Option<bool>,
    slow_call: Option<Duration>,
    mode: Mode,
}

fn settings() -> impl Strategy<Value = Settings> {
    (
        prop_oneof![Just(String::new()), "[a-z-]{1,12}", any::<String>()],
        trip_policy(),
        proptest::option::of(cooldown()),
        proptest::option::of((float(), cooldown())),
        proptest::option::of(float()),
        proptest::option::of(any::<u64>()),
        proptest::option::of(small_or_any_u32()),
        proptest::option::of(proptest::option::of(duration())),
        proptest::option::of(duration()),
        proptest::option::of(any::<bool>()),
        proptest::option::of(duration()),
        mode(),
    )
        .prop_map(
            |(
                name,
                trip,
                cooldown,
                backoff,
                jitter,
                jitter_seed,
                probes,
                dwell,
                max_retry_after,
                open_on_retry_after,
                slow_call,
                mode,
            )| Settings {
                name,
                trip,
                cooldown,
                backoff,
                jitter,
                jitter_seed,
                probes,
                dwell,
                max_retry_after,
                open_on_retry_after,
                slow_call,
                mode,
            },
        )
}

fn builder(s: &Settings) -> Builder {
    let mut b = Builder::new()
        .name(s.name.as_str())
        .trip_policy(s.trip)
        .mode(s.mode);
    if let Some(cooldown) = s.cooldown {
        b = b.cooldown(cooldown);
    }
    if let Some((multiplier, cap)) = s.backoff {
        b = b.backoff(Backoff::exponential(multiplier, cap));
    }
    if let Some(jitter) = s.jitter {
        b = b.jitter(jitter);
    }
    if let Some(seed) = s.jitter_seed {
        b = b.jitter_seed(seed);
    }
    if let Some(probes) = s.probes {
        b = b.half_open_probes(probes);
    }
    if let Some(dwell) = s.dwell {
        b = b.max_half_open_dwell(dwell);
    }
    if let Some(cap) = s.max_retry_after {
        b = b.max_retry_after(cap);
    }
    if let Some(open) = s.open_on_retry_after {
        b = b.open_on_retry_after(open);
    }
    if let Some(slow) = s.slow_call {
        b = b.slow_call_threshold(slow);
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_settings_build_or_return_an_error(s in settings()) {
        let b = builder(&s);
        let from_config = b.build_config();
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.clone().build()));
        let built = match built {
            Ok(result) => result,
            Err(_) => return Err(TestCaseError::fail(format!("build() panicked for {s:?}"))),
        };
        match (&from_config, &built) {
            (Ok(config), Ok(layer)) => {
                prop_assert_eq!(config.name(), s.name.as_str());
                let handle = layer.handle();
                prop_assert_eq!(handle.name(), s.name.as_str());
                prop_assert_eq!(config.trip_policy(), s.trip);
            }
            (Err(a), Err(b)) => {
                prop_assert_eq!(a.to_string(), b.to_string());
                assert_display_is_a_lowercase_phrase(b);
            }
            (a, b) => {
                return Err(TestCaseError::fail(format!(
                    "build_config() and build() disagree: {a:?} vs {:?}",
                    b.as_ref().map(|_| "layer")
                )));
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// A setting build() accepts must also work when the breaker runs.
// ---------------------------------------------------------------------------------

mod accepted_settings_run {
    use std::future::ready;
    use std::time::Duration;

    use tower::{service_fn, Layer, Service, ServiceExt};
    use tower_circuit_breaker::{Builder, Cooldown, Failure, Outcome, Source, State};

    /// Trips the breaker, lets the probe through and, while it is under way, lets
    /// another call arrive; then fails the probe: every path that turns a setting into
    /// a deadline. `hint` is the failures' retry-after, if any.
    ///
    /// A wait longer than the clock can hold means "not by time": then no probe comes
    /// within the year and the breaker stays open, without panicking.
    fn trip_probe_and_reopen(builder: Builder, hint: Option<Duration>) -> Result<(), String> {
        let layer = builder
            .failure_threshold(1)
            .build()
            .map_err(|e| e.to_string())?;
        let handle = layer.handle();
        let classify = move |_: &Result<(), std::convert::Infallible>| {
            let failure = Failure::new("down");
            Outcome::Failure(match hint {
                Some(wait) => failure.retry_after(wait),
                None => failure,
            })
        };
        let layer = layer
            .with_classifier(classify)
            .with_fallback(service_fn(|_: ()| {
                ready(Ok::<_, std::convert::Infallible>(()))
            }));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .map_err(|e| e.to_string())?;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            runtime.block_on(async {
                let mut svc = layer.layer(service_fn(|_: ()| {
                    ready(Ok::<_, std::convert::Infallible>(()))
                }));
                let _ = svc.ready().await.unwrap().call(()).await;
                assert_eq!(handle.state(), State::Open);
                let _ = handle.snapshot();
                // Far enough in the future for any cooldown a test can wait for.
                tokio::time::advance(Duration::from_secs(60 * 60 * 24 * 365)).await;
                let mut probe = None;
                for _ in 0..3 {
                    let mut spare = svc.clone();
                    spare.ready().await.unwrap();
                    if handle.snapshot().probes_in_flight == 1 {
                        probe = Some(spare);
                        break;
                    }
                    let _ = spare.call(()).await;
                }
                let Some(mut probe) = probe else {
                    assert_eq!(
                        handle.state(),
                        State::Open,
                        "an endless wait keeps the breaker open"
                    );
                    return;
                };
                assert_eq!(handle.state(), State::HalfOpen);
                // A second call while the probe is under way: the dwell limit is checked.
                let answer = svc.ready().await.unwrap().call(()).await.unwrap();
                assert!(matches!(answer.source(), Source::Fallback(_)));
                let _ = handle.snapshot();
                let _ = probe.call(()).await;
                let _ = handle.snapshot();
            })
        }));
        result.map_err(|panic| {
            panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default()
        })
    }

    #[test]
    fn the_longest_time_cooldown_build_accepts_does_not_panic_when_it_trips() {
        let builder = Builder::new().cooldown(Cooldown::Time(Duration::MAX));
        assert!(builder.build_config().is_ok());
        // Tripping computes `now + cooldown`.
        trip_probe_and_reopen(builder, None).expect("accepted cooldown panicked");
    }

    #[test]
    fn the_longest_half_open_dwell_build_accepts_does_not_panic_in_half_open() {
        let builder = Builder::new()
            .cooldown(Cooldown::Calls(1))
            .max_half_open_dwell(Some(Duration::MAX));
        assert!(builder.build_config().is_ok());
        // Each call in half-open computes `entered_at + dwell`.
        trip_probe_and_reopen(builder, None).expect("accepted dwell limit panicked");
    }

    #[test]
    fn the_longest_max_retry_after_build_accepts_does_not_panic_on_a_retry_after_hint() {
        let builder = Builder::new()
            .cooldown(Cooldown::Calls(1))
            .max_retry_after(Duration::MAX);
        assert!(builder.build_config().is_ok());
        // A failure asking for a long wait computes `now + min(hint, cap)`.
        trip_probe_and_reopen(builder, Some(Duration::MAX))
            .expect("accepted retry-after cap panicked");
    }
}
