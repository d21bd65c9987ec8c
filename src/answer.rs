//! Where an answer came from: [`Answer`] and [`Source`].

use crate::machine::{NextProbe, Reason, Skip, State};

/// Where a response came from, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// The wrapped service answered a normal call.
    Service,
    /// The wrapped service answered a half-open probe.
    Probe,
    /// The wrapped service answered, but only because the breaker is in
    /// [`Mode::ObserveOnly`](crate::Mode::ObserveOnly): an enabled breaker would have
    /// skipped the call for this reason.
    Shadowed(Reason),
    /// The call was not made; the fallback answered, for this reason.
    Fallback(Reason),
}

impl Source {
    /// Whether the wrapped service produced the answer.
    pub fn is_service(&self) -> bool {
        !self.is_fallback()
    }

    /// Whether the fallback produced the answer.
    pub fn is_fallback(&self) -> bool {
        matches!(self, Source::Fallback(_))
    }

    /// Why the call was not made (or, observing, would not have been).
    pub fn reason(&self) -> Option<Reason> {
        match *self {
            Source::Fallback(reason) | Source::Shadowed(reason) => Some(reason),
            Source::Service | Source::Probe => None,
        }
    }

    /// `service`, `probe`, `shadowed` or `fallback`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Source::Service => "service",
            Source::Probe => "probe",
            Source::Shadowed(_) => "shadowed",
            Source::Fallback(_) => "fallback",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.reason() {
            Some(reason) => write!(f, "{} ({reason})", self.as_str()),
            None => f.write_str(self.as_str()),
        }
    }
}

/// A response with its provenance: every answer of a
/// [`CircuitBreaker`](crate::CircuitBreaker) says, in its type, whether the wrapped
/// service or the fallback produced it.
///
/// ```
/// use tower::{service_fn, Service, ServiceExt};
/// use tower_circuit_breaker::{CircuitBreakerLayer, Source};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let layer = CircuitBreakerLayer::builder().build()?;
/// let mut svc = tower::Layer::layer(&layer, service_fn(|q: &'static str| async move {
///     Ok::<_, std::io::Error>(format!("answer to {q}"))
/// }));
/// let answer = svc.ready().await?.call("2+2").await?;
/// assert_eq!(answer.source(), Source::Service);
/// assert_eq!(answer.into_inner(), "answer to 2+2");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer<T> {
    value: T,
    source: Source,
    state: State,
    next_probe: NextProbe,
}

impl<T> Answer<T> {
    pub(crate) fn new(value: T, source: Source, state: State, next_probe: NextProbe) -> Self {
        Answer {
            value,
            source,
            state,
            next_probe,
        }
    }

    /// The fallback's answer to a call the breaker skipped.
    pub(crate) fn skipped(value: T, skip: Skip) -> Self {
        Answer::new(
            value,
            Source::Fallback(skip.reason),
            skip.state,
            skip.next_probe,
        )
    }

    /// Where it came from.
    pub fn source(&self) -> Source {
        self.source
    }

    /// Whether the fallback produced it.
    pub fn is_fallback(&self) -> bool {
        self.source.is_fallback()
    }

    /// The breaker's state when the call arrived (after any open to half-open change).
    pub fn state(&self) -> State {
        self.state
    }

    /// For a fallback answer, when the breaker will next let a probe through.
    pub fn next_probe(&self) -> NextProbe {
        self.next_probe
    }

    /// The response.
    pub fn get_ref(&self) -> &T {
        &self.value
    }

    /// The response, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.value
    }

    /// The response, without its provenance.
    pub fn into_inner(self) -> T {
        self.value
    }

    /// The response and its source.
    pub fn into_parts(self) -> (T, Source) {
        (self.value, self.source)
    }

    /// Changes the response, keeping the provenance.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Answer<U> {
        Answer {
            value: f(self.value),
            source: self.source,
            state: self.state,
            next_probe: self.next_probe,
        }
    }
}
