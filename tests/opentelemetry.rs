//! The `opentelemetry` feature as an application sees it: spans exported through
//! tracing-opentelemetry into the SDK's in-memory exporter, each call's decision among the
//! attributes of the span it was made in, and each change of state as a span event there.

use std::collections::BTreeMap;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tower::{service_fn, util::BoxService, Layer, Service, ServiceExt};
use tower_circuit_breaker::opentelemetry::names;
use tower_circuit_breaker::{Builder, CircuitBreakerHandle, Cooldown, KillSwitch, State};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

/// What the failing service says: a key and a URL with a query, which must not be exported.
const SECRET_ERROR: &str =
    "401 from https://api.example.com/v1?api_key=sk-live-4242: Bearer sk-live-4242";

type Tool = BoxService<bool, tower_circuit_breaker::Answer<&'static str>, tower::BoxError>;

/// An application traced into the in-memory exporter, with a breaker named `search` that
/// opens after 2 failures and probes 30 s later.
struct Traced {
    exporter: InMemorySpanExporter,
    _provider: SdkTracerProvider,
    _default: tracing::subscriber::DefaultGuard,
    tool: Tool,
    handle: CircuitBreakerHandle,
}

impl Traced {
    fn new(builder: Builder) -> Self {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let default = tracing::subscriber::set_default(subscriber);
        let layer = builder
            .name("search")
            .failure_threshold(2)
            .cooldown(Cooldown::Time(Duration::from_secs(30)))
            .build()
            .expect("valid settings");
        let handle = layer.handle();
        let tool = BoxService::new(layer.layer(service_fn(|fail: bool| async move {
            if fail {
                Err(std::io::Error::other(SECRET_ERROR))
            } else {
                Ok("found")
            }
        })));
        Traced {
            exporter,
            _provider: provider,
            _default: default,
            tool,
            handle,
        }
    }

    fn with_opentelemetry() -> Self {
        Traced::new(Builder::new().opentelemetry())
    }

    /// Makes one call (`fail`: the service fails) in a span of its own, and returns that
    /// span as exported.
    async fn call(&mut self, fail: bool) -> Exported {
        self.exporter.reset();
        let tool = &mut self.tool;
        let _ = async { tool.ready().await?.call(fail).await }
            .instrument(tracing::info_span!("tool call"))
            .await;
        self.only_span()
    }

    /// The one span exported since the last reset.
    fn only_span(&self) -> Exported {
        let mut spans = self.exporter.get_finished_spans().expect("spans");
        assert_eq!(spans.len(), 1, "one span exported: {spans:?}");
        Exported(spans.remove(0))
    }
}

/// An exported span, read as strings.
struct Exported(SpanData);

impl Exported {
    /// The breaker's attributes (tracing-opentelemetry adds its own: `code.*`,
    /// `thread.*`, timings).
    fn attributes(&self) -> BTreeMap<String, String> {
        self.0
            .attributes
            .iter()
            .filter(|kv| kv.key.as_str().starts_with("circuitbreaker."))
            .map(|kv| (kv.key.to_string(), kv.value.to_string()))
            .collect()
    }

    fn attribute(&self, key: &str) -> Option<String> {
        self.attributes().get(key).cloned()
    }

    /// Each state-change event's attributes, in order (the crate's `tracing` log lines
    /// are span events too).
    fn state_changes(&self) -> Vec<BTreeMap<String, String>> {
        self.0
            .events
            .iter()
            .filter(|event| event.name == names::STATE_CHANGE)
            .map(|event| {
                event
                    .attributes
                    .iter()
                    .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                    .collect()
            })
            .collect()
    }

    /// Every value exported on the span: every attribute and every event's, the crate's
    /// log lines included.
    fn every_value(&self) -> Vec<String> {
        let attributes = self.0.attributes.iter();
        let events = self.0.events.iter().flat_map(|event| &event.attributes);
        let mut values: Vec<String> = attributes
            .chain(events)
            .map(|kv| kv.value.to_string())
            .collect();
        values.extend(self.0.events.iter().map(|event| event.name.to_string()));
        values
    }
}

/// The attributes a decided call sets, as `(key, value)` pairs.
fn call_attributes(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn state_change(from: &str, to: &str, cause: &str) -> BTreeMap<String, String> {
    call_attributes(&[
        (names::NAME, "search"),
        (names::PREVIOUS_STATE, from),
        (names::STATE, to),
        (names::CAUSE, cause),
    ])
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_successful_call_sets_the_name_the_closed_state_and_success_on_the_callers_span() {
    let mut app = Traced::with_opentelemetry();
    let span = app.call(false).await;
    assert_eq!(
        span.attributes(),
        call_attributes(&[
            (names::NAME, "search"),
            (names::STATE, "closed"),
            (names::OUTCOME, "success"),
            (names::PROBE, "false"),
        ])
    );
    assert!(span.state_changes().is_empty());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_failed_call_sets_failure_and_exports_nothing_of_the_error() {
    let mut app = Traced::with_opentelemetry();
    let span = app.call(true).await;
    assert_eq!(
        span.attributes(),
        call_attributes(&[
            (names::NAME, "search"),
            (names::STATE, "closed"),
            (names::OUTCOME, "failure"),
            (names::PROBE, "false"),
        ])
    );
    for value in span.every_value() {
        assert!(!value.contains("sk-live"), "a secret was exported: {value}");
        assert!(
            !value.contains("api.example.com"),
            "the URL was exported: {value}"
        );
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_call_that_trips_the_breaker_gets_the_closed_to_open_event() {
    let mut app = Traced::with_opentelemetry();
    let first = app.call(true).await;
    assert!(
        first.state_changes().is_empty(),
        "one failure opens nothing"
    );
    let second = app.call(true).await;
    assert_eq!(second.attribute(names::OUTCOME).as_deref(), Some("failure"));
    assert_eq!(
        second.state_changes(),
        [state_change("closed", "open", "tripped")]
    );
    for value in second.every_value() {
        assert!(!value.contains("sk-live"), "a secret was exported: {value}");
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_rejected_call_sets_rejected_with_its_reason_and_the_state_it_found() {
    let mut app = Traced::with_opentelemetry();
    app.call(true).await;
    app.call(true).await;
    let rejected = app.call(false).await;
    assert_eq!(
        rejected.attributes(),
        call_attributes(&[
            (names::NAME, "search"),
            (names::STATE, "open"),
            (names::OUTCOME, "rejected"),
            (names::PROBE, "false"),
            (names::REJECTED_REASON, "open"),
        ])
    );
    assert!(rejected.state_changes().is_empty());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_successful_probe_is_marked_and_its_span_gets_open_to_half_open_to_closed() {
    let mut app = Traced::with_opentelemetry();
    app.call(true).await;
    app.call(true).await;
    tokio::time::advance(Duration::from_secs(31)).await;
    let probe = app.call(false).await;
    assert_eq!(
        probe.attributes(),
        call_attributes(&[
            (names::NAME, "search"),
            (names::STATE, "half_open"),
            (names::OUTCOME, "success"),
            (names::PROBE, "true"),
        ])
    );
    assert_eq!(
        probe.state_changes(),
        [
            state_change("open", "half_open", "cooldown_elapsed"),
            state_change("half_open", "closed", "probe_succeeded"),
        ]
    );
    assert_eq!(app.handle.state(), State::Closed);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_failed_probe_is_marked_and_its_span_gets_half_open_to_open() {
    let mut app = Traced::with_opentelemetry();
    app.call(true).await;
    app.call(true).await;
    tokio::time::advance(Duration::from_secs(31)).await;
    let probe = app.call(true).await;
    assert_eq!(probe.attribute(names::OUTCOME).as_deref(), Some("failure"));
    assert_eq!(probe.attribute(names::PROBE).as_deref(), Some("true"));
    assert_eq!(
        probe.state_changes(),
        [
            state_change("open", "half_open", "cooldown_elapsed"),
            state_change("half_open", "open", "probe_failed"),
        ]
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn forcing_the_breaker_open_is_an_event_on_the_operators_span_and_its_calls_are_rejected() {
    let mut app = Traced::with_opentelemetry();
    app.exporter.reset();
    tracing::info_span!("operator").in_scope(|| app.handle.force_open());
    let operator = app.only_span();
    assert_eq!(
        operator.state_changes(),
        [state_change("closed", "forced_open", "forced_open")]
    );
    let rejected = app.call(false).await;
    assert_eq!(
        rejected.attribute(names::STATE).as_deref(),
        Some("forced_open")
    );
    assert_eq!(
        rejected.attribute(names::REJECTED_REASON).as_deref(),
        Some("forced_open")
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_call_stopped_by_the_kill_switch_is_rejected_with_reason_killed() {
    let kill = KillSwitch::new();
    let mut app = Traced::new(Builder::new().kill_switch(kill.clone()).opentelemetry());
    kill.kill();
    let rejected = app.call(false).await;
    assert_eq!(
        rejected.attributes(),
        call_attributes(&[
            (names::NAME, "search"),
            (names::STATE, "closed"),
            (names::OUTCOME, "rejected"),
            (names::PROBE, "false"),
            (names::REJECTED_REASON, "killed"),
        ])
    );
    // The kill switch is not a state: no state change.
    assert!(rejected.state_changes().is_empty());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_breaker_built_without_opentelemetry_sets_nothing_on_the_span() {
    let mut app = Traced::new(Builder::new());
    app.call(true).await;
    let tripping = app.call(true).await;
    assert!(tripping.attributes().is_empty());
    assert!(tripping.state_changes().is_empty());
}

/// Calls in flight together, ending in another order than they started: each span gets
/// its own call's outcome, whichever task reports the breaker's events in order.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn calls_in_flight_together_each_set_their_own_outcome_on_their_own_span() {
    let app = Traced::with_opentelemetry();
    let layer = Builder::new()
        .name("slow-search")
        .failure_threshold(100)
        .opentelemetry()
        .build()
        .expect("valid settings");
    let tool = layer.layer(service_fn(|n: u64| async move {
        // The later calls end first.
        tokio::time::sleep(Duration::from_millis(100 - n * 10)).await;
        if n % 2 == 1 {
            Err(std::io::Error::other(SECRET_ERROR))
        } else {
            Ok(n)
        }
    }));
    app.exporter.reset();
    let calls: Vec<_> = (0..8u64)
        .map(|n| {
            let mut tool = tool.clone();
            let span = tracing::info_span!("tool call", otel.name = format!("call {n}"));
            tokio::spawn(async move { tool.ready().await?.call(n).await }.instrument(span))
        })
        .collect();
    for call in calls {
        let _ = call.await.expect("the call's task");
    }
    let spans = app.exporter.get_finished_spans().expect("spans");
    assert_eq!(spans.len(), 8);
    for span in spans {
        let n: u64 = span
            .name
            .trim_start_matches("call ")
            .parse()
            .expect("a call's span");
        let span = Exported(span);
        let expected = if n % 2 == 1 { "failure" } else { "success" };
        assert_eq!(
            span.attribute(names::OUTCOME).as_deref(),
            Some(expected),
            "call {n}"
        );
        assert_eq!(span.attribute(names::NAME).as_deref(), Some("slow-search"));
    }
}
