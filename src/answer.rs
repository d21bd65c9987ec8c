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
    provenance: Provenance,
}

/// Where an answer came from: the call made, or the skip the fallback answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Provenance {
    Called { source: Source, state: State },
    Skipped(Skip),
}

impl<T> Answer<T> {
    /// The wrapped service's answer to a call made as `source`, in `state`.
    #[inline]
    pub(crate) fn called(value: T, source: Source, state: State) -> Self {
        Answer {
            value,
            provenance: Provenance::Called { source, state },
        }
    }

    /// The fallback's answer to a call the breaker skipped.
    #[inline]
    pub(crate) fn skipped(value: T, skip: Skip) -> Self {
        Answer {
            value,
            provenance: Provenance::Skipped(skip),
        }
    }

    /// Where it came from.
    pub fn source(&self) -> Source {
        match self.provenance {
            Provenance::Called { source, .. } => source,
            Provenance::Skipped(skip) => Source::Fallback(skip.reason()),
        }
    }

    /// Whether the fallback produced it.
    pub fn is_fallback(&self) -> bool {
        matches!(self.provenance, Provenance::Skipped(_))
    }

    /// The breaker's state when the call arrived (after any open to half-open change).
    pub fn state(&self) -> State {
        match self.provenance {
            Provenance::Called { state, .. } => state,
            Provenance::Skipped(skip) => skip.state(),
        }
    }

    /// For a fallback answer, when the breaker will next let a probe through;
    /// [`NextProbe::NotNeeded`] for an answer of the wrapped service.
    pub fn next_probe(&self) -> NextProbe {
        match self.provenance {
            Provenance::Called { .. } => NextProbe::NotNeeded,
            Provenance::Skipped(skip) => skip.next_probe(),
        }
    }

    /// For a fallback answer, the skip it answered: why, the state found, and when the
    /// next probe may go.
    pub fn skip(&self) -> Option<Skip> {
        match self.provenance {
            Provenance::Called { .. } => None,
            Provenance::Skipped(skip) => Some(skip),
        }
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
        let source = self.source();
        (self.value, source)
    }

    /// Changes the response, keeping the provenance.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Answer<U> {
        Answer {
            value: f(self.value),
            provenance: self.provenance,
        }
    }
}
