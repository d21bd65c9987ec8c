//! OpenTelemetry for a breaker (feature `opentelemetry`): each decided call's attributes on
//! the caller's current span, and a span event for each change of state, through
//! [`tracing`](https://docs.rs/tracing) and
//! [`tracing-opentelemetry`](https://docs.rs/tracing-opentelemetry): the application keeps
//! its own SDK and exporter (OTLP, Jaeger, stdout), and no exporter is built here.
//!
//! Turn it on per breaker with [`Builder::opentelemetry`], as metrics are with
//! `Builder::metrics` (feature `metrics`): a breaker without it pays nothing,
//! and a library that turns the feature on for its own breakers changes no one else's.
//! The spans are the application's: instrument the code that calls through the breaker
//! (`#[tracing::instrument]`, or `.instrument(span)` on the future that polls the service
//! ready and calls it), under a subscriber with tracing-opentelemetry's layer.
//!
//! ```
//! use opentelemetry::trace::TracerProvider as _;
//! use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
//! use tower::{service_fn, Layer, Service, ServiceExt};
//! use tower_circuit_breaker::Builder;
//! use tracing::Instrument;
//! use tracing_subscriber::layer::SubscriberExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tower::BoxError> {
//! // The application's tracer: here the SDK's in-memory exporter, to read the span back.
//! let exporter = InMemorySpanExporter::default();
//! let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
//! let subscriber = tracing_subscriber::registry()
//!     .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("app")));
//! let _default = tracing::subscriber::set_default(subscriber);
//!
//! let layer = Builder::new().name("search-tool").opentelemetry().build()?;
//! let mut search = layer.layer(service_fn(|q: String| async move { Ok::<_, std::io::Error>(q.len()) }));
//! async { search.ready().await?.call("rust".to_string()).await }
//!     .instrument(tracing::info_span!("search"))
//!     .await?;
//!
//! let span = exporter.get_finished_spans()?.pop().expect("the search span");
//! let attribute = |key: &str| {
//!     span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.to_string())
//! };
//! assert_eq!(attribute("circuitbreaker.name").as_deref(), Some("search-tool"));
//! assert_eq!(attribute("circuitbreaker.state").as_deref(), Some("closed"));
//! assert_eq!(attribute("circuitbreaker.outcome").as_deref(), Some("success"));
//! # Ok(()) }
//! ```
//!
//! # Attributes and events
//!
//! The names are those of the OpenTelemetry semantic-conventions proposal for resilience
//! (open-telemetry/semantic-conventions#2355: `circuitbreaker.name`,
//! `circuitbreaker.state`, and an event for a change of state, which it does not name yet)
//! where it has them, and this crate's, in the same namespace, where it does not.
//!
//! On the caller's current span, for each call the breaker decides:
//!
//! | Attribute | Type | Value | Source |
//! |---|---|---|---|
//! | `circuitbreaker.name` | string | the breaker's name ([`Builder::name`]) | proposal |
//! | `circuitbreaker.state` | string | the state the call found ([`State::as_str`]): `closed`, `half_open` (a probe), or for a rejected call `open`, `half_open`, `forced_open`, or any state when a kill switch turned it away (`closed` included); not set for an observe-only shadow call | proposal |
//! | `circuitbreaker.outcome` | string | `success`, `failure`, `ignored` (the classifier's verdict, after the slow-call rule), or `rejected` (not made) | this crate |
//! | `circuitbreaker.probe` | bool | whether the call was the half-open breaker's probe | this crate |
//! | `circuitbreaker.rejected.reason` | string | a rejected call only: `open`, `half_open_full`, `killed`, `forced_open` ([`Reason::as_str`]) | this crate |
//! | `circuitbreaker.shadow` | bool | an observe-only shadow call only (one an enabled breaker would have rejected): `true` | this crate |
//!
//! On the current span of the task that caused it, for each change of state, the event
//! `circuitbreaker.state_change` with:
//!
//! | Attribute | Type | Value |
//! |---|---|---|
//! | `circuitbreaker.name` | string | the breaker's name |
//! | `circuitbreaker.state` | string | the state entered |
//! | `circuitbreaker.previous_state` | string | the state left |
//! | `circuitbreaker.cause` | string | why ([`Cause::as_str`]): `tripped`, `cooldown_elapsed`, `probe_succeeded`, `probe_failed`, `forced_open`, `reset`, ... |
//!
//! A failure's message and the request are never exported: they may hold a key, a URL's
//! query or a prompt. The breaker's name is the application's own choice.
//!
//! # Which span
//!
//! Attributes are set in the task whose call it was ([`Builder::on_event_at_once`]): a
//! rejection when the call is decided (in `poll_ready`), an outcome when the call's answer
//! is classified (in its response future; a streamed body's, when the body ends). A
//! transition goes to the span of what caused it: the failing call's (closed to open),
//! the probe's (open to half-open, and half-open to closed or open), the operator's
//! (forced open, reset). With no current span, or none that tracing-opentelemetry
//! exports, nothing is recorded.
//!
//! A span holds one value per attribute: several calls in one span (a retry around the
//! breaker, two breakers on one path) leave the last call's values, and an attribute set
//! by one call only (`circuitbreaker.rejected.reason`) stays after later ones. Give each
//! attempt a span of its own to see each.
//!
//! [`Builder::name`]: crate::Builder::name
//! [`Builder::on_event_at_once`]: crate::Builder::on_event_at_once
//! [`State::as_str`]: crate::State::as_str
//! [`Reason::as_str`]: crate::Reason::as_str
//! [`Cause::as_str`]: crate::Cause::as_str

use opentelemetry::KeyValue;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::Builder;
use crate::Event;
use crate::Outcome;
use crate::State;

/// The attributes' and the event's names: the one place they are written.
pub mod names {
    /// The breaker's name.
    pub const NAME: &str = "circuitbreaker.name";
    /// The state the call found, or, on a state-change event, the state entered.
    pub const STATE: &str = "circuitbreaker.state";
    /// `success`, `failure`, `ignored` or `rejected`.
    pub const OUTCOME: &str = "circuitbreaker.outcome";
    /// Whether the call was a probe.
    pub const PROBE: &str = "circuitbreaker.probe";
    /// Why a rejected call was not made.
    pub const REJECTED_REASON: &str = "circuitbreaker.rejected.reason";
    /// An observe-only shadow call.
    pub const SHADOW: &str = "circuitbreaker.shadow";
    /// The span event of a change of state.
    pub const STATE_CHANGE: &str = "circuitbreaker.state_change";
    /// On a state-change event: the state left.
    pub const PREVIOUS_STATE: &str = "circuitbreaker.previous_state";
    /// On a state-change event: why the state changed.
    pub const CAUSE: &str = "circuitbreaker.cause";
}

impl Builder {
    /// Sets each decided call's attributes on the caller's current span, and adds a span
    /// event for each change of state, through `tracing` and tracing-opentelemetry
    /// (feature `opentelemetry`); see [the module](crate::opentelemetry) for the names.
    /// Every breaker built from this builder (each key's, for a keyed registry) does.
    ///
    /// With it, every success in the closed state is reported to the breaker's
    /// observers, which the breaker otherwise skips (a few nanoseconds a call, as for
    /// the `metrics` feature's series).
    pub fn opentelemetry(self) -> Self {
        self.on_event_at_once(on_current_span)
    }
}

/// Records `event` on the current span.
fn on_current_span(event: &Event<'_>) {
    let span = tracing::Span::current();
    if span.is_disabled() {
        return;
    }
    match *event {
        Event::Recorded {
            name,
            outcome,
            probe,
            shadow,
            ..
        } => {
            span.set_attribute(names::NAME, name.to_owned());
            if shadow {
                span.set_attribute(names::SHADOW, true);
            } else {
                let found = if probe {
                    State::HalfOpen
                } else {
                    State::Closed
                };
                span.set_attribute(names::STATE, found.as_str());
            }
            span.set_attribute(names::OUTCOME, outcome_str(outcome));
            span.set_attribute(names::PROBE, probe);
        }
        Event::Skipped { name, skip } => {
            span.set_attribute(names::NAME, name.to_owned());
            span.set_attribute(names::STATE, skip.state().as_str());
            span.set_attribute(names::OUTCOME, "rejected");
            span.set_attribute(names::PROBE, false);
            span.set_attribute(names::REJECTED_REASON, skip.reason().as_str());
        }
        Event::Transition(transition) => span.add_event(
            names::STATE_CHANGE,
            vec![
                KeyValue::new(names::NAME, transition.name.to_string()),
                KeyValue::new(names::STATE, transition.to.as_str()),
                KeyValue::new(names::PREVIOUS_STATE, transition.from.as_str()),
                KeyValue::new(names::CAUSE, transition.cause.as_str()),
            ],
        ),
        _ => {}
    }
}

/// A recorded outcome's value of `circuitbreaker.outcome`.
fn outcome_str(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Success => "success",
        Outcome::Failure(_) => "failure",
        Outcome::Ignored => "ignored",
    }
}
