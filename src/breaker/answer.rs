//! Where an answer came from: [`Answer`], its [`Origin`] and [`Source`], and what the
//! breaker's classifier made of it ([`Verdict`]).

use std::fmt;
use std::future::Future;

use crate::breaker::state::{NextProbe, Reason, Skip, State};

/// Where a response came from, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
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
    /// The call was made and failed (the breaker counted the failure); a fallback
    /// answered instead ([`recover`](crate::recover)).
    FallbackAfterFailure,
    /// No call was made and no breaker skipped one: the request could not be prepared
    /// for any service (a [`Failover`](crate::failover::Failover)'s adapter made none
    /// from it: a body that cannot be copied, say); a fallback answered. Every breaker is
    /// as it was.
    FallbackNotPrepared,
}

impl Source {
    /// Whether the wrapped service produced the answer.
    pub fn is_service(&self) -> bool {
        !self.is_fallback()
    }

    /// Whether a fallback produced the answer: for a call the breaker skipped, or for one
    /// that failed.
    pub fn is_fallback(&self) -> bool {
        matches!(
            self,
            Source::Fallback(_) | Source::FallbackAfterFailure | Source::FallbackNotPrepared
        )
    }

    /// Why the call was not made (or, observing, would not have been).
    pub fn reason(&self) -> Option<Reason> {
        match *self {
            Source::Fallback(reason) | Source::Shadowed(reason) => Some(reason),
            Source::Service
            | Source::Probe
            | Source::FallbackAfterFailure
            | Source::FallbackNotPrepared => None,
        }
    }

    /// `service`, `probe`, `shadowed`, `fallback`, `fallback_after_failure` or
    /// `fallback_not_prepared`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Source::Service => "service",
            Source::Probe => "probe",
            Source::Shadowed(_) => "shadowed",
            Source::Fallback(_) => "fallback",
            Source::FallbackAfterFailure => "fallback_after_failure",
            Source::FallbackNotPrepared => "fallback_not_prepared",
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

/// What the breaker's classifier made of an answer of the wrapped service
/// ([`Answer::verdict`]).
///
/// A layer outside the breaker reads it instead of classifying the answer again:
/// [`SaveLayer`](crate::saved::SaveLayer) saves only [`Verdict::Success`] answers, and
/// [`RecoverLayer`](crate::recover::RecoverLayer) answers [`Verdict::Failure`] ones from
/// its fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verdict {
    /// A success. (The slow-call rule may still count it as a failure towards the
    /// breaker's state: the answer itself is good.)
    Success,
    /// A failure, counted by the breaker (the failure's message is the breaker's
    /// [`last_failure`](crate::snapshot::Snapshot::last_failure)). An HTTP 503 is an `Ok` to
    /// tower and a failure here.
    Failure,
    /// Says nothing about the service's health: not counted.
    Ignored,
    /// A success whose real outcome is known only later (a streamed body that may still
    /// break, see [`Classify::defer`](crate::classify::Classify::defer)).
    Deferred,
}

impl Verdict {
    /// `success`, `failure`, `ignored` or `deferred`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Success => "success",
            Verdict::Failure => "failure",
            Verdict::Ignored => "ignored",
            Verdict::Deferred => "deferred",
        }
    }
}

/// Everything an [`Answer`] says about itself besides its value: who produced it, in
/// which state, what the breaker's classifier made of it, and for a fallback's answer
/// why the service did not give it and when the breaker will try it again.
///
/// The breaker makes these; [`Answer::into_parts`] and [`Answer::from_parts`] carry one
/// across a change of the value that is not a plain function (a body read, a parse). A
/// tool adapter with no breaker of its own makes one with [`Origin::called`].
///
/// ```
/// use tower_circuit_breaker::{Answer, Origin, Source, State, Verdict};
///
/// // An in-process tool, answering as the expediter expects a tool to.
/// let answer = Answer::from_parts(
///     "3 files".to_string(),
///     Origin::called(Source::Service, State::Closed, Verdict::Success),
/// );
/// let (text, origin) = answer.into_parts();
/// let answer = Answer::from_parts(text.len(), origin);
/// assert_eq!((answer.source(), answer.verdict()), (Source::Service, Some(Verdict::Success)));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Origin {
    /// For an answer of the wrapped service, its source, state and verdict
    /// ([`Called`]); for a fallback's, its skip's time (as [`Skip`] keeps it).
    word: i64,
    /// A fallback's skip's calls until the probe, 56 bits in three pieces: bits 0-7,
    /// 8-23 and 24-55.
    calls_low: u8,
    calls_mid: u16,
    calls_high: u32,
    head: Head,
}

macro_rules! heads {
    ($($head:ident)*) => {
        /// Which kind an [`Origin`] is, in one byte: below [`Head::RECOVERED`], a skip
        /// and its seven flags (its reason, state, kind of next probe, and whether the
        /// service asked to wait longer, as [`Skip`] keeps them); from there, a call that
        /// failed and was answered by a fallback, with its state and kind of next probe;
        /// [`Head::CALLED`], an answer of the wrapped service; [`Head::NOT_PREPARED`], a
        /// fallback's answer to a request that could not be prepared.
        ///
        /// An enum and not a `u8`: the byte values it never takes are what a `Result` and a
        /// `Poll` around an answer mark themselves with, so that the awaited result of a
        /// call, `Poll<Result<Answer<u64>, BoxError>>`, is 24 bytes and not 32: a closed
        /// call some 4 ns faster in the awaited benchmark (docs/performance.md).
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        enum Head {
            $($head),*
        }

        impl Head {
            /// The head whose code is `code`; [`Head::CALLED`] past the last.
            #[inline(always)]
            fn of(code: u64) -> Head {
                // Folded into the code itself, bounded: each head's code is its place.
                $(
                    if code == Head::$head as u64 {
                        return Head::$head;
                    }
                )*
                Head::CALLED
            }
        }
    };
}

heads! {
    H0 H1 H2 H3 H4 H5 H6 H7 H8 H9 H10 H11 H12 H13 H14 H15 H16 H17 H18 H19 H20 H21 H22 H23
    H24 H25 H26 H27 H28 H29 H30 H31 H32 H33 H34 H35 H36 H37 H38 H39 H40 H41 H42 H43 H44 H45
    H46 H47 H48 H49 H50 H51 H52 H53 H54 H55 H56 H57 H58 H59 H60 H61 H62 H63 H64 H65 H66 H67
    H68 H69 H70 H71 H72 H73 H74 H75 H76 H77 H78 H79 H80 H81 H82 H83 H84 H85 H86 H87 H88 H89
    H90 H91 H92 H93 H94 H95 H96 H97 H98 H99 H100 H101 H102 H103 H104 H105 H106 H107 H108
    H109 H110 H111 H112 H113 H114 H115 H116 H117 H118 H119 H120 H121 H122 H123 H124 H125
    H126 H127 H128 H129 H130 H131 H132 H133 H134 H135 H136 H137 H138 H139 H140 H141 H142
    H143 H144 H145
}

impl Head {
    /// The first value of a recovered call's: 16 of them, its state and kind of next probe.
    const RECOVERED: u64 = 128;
    /// An answer of the wrapped service.
    const CALLED: Head = Head::H144;
    /// A fallback's answer to a request that could not be prepared for any service.
    const NOT_PREPARED: Head = Head::H145;

    #[inline(always)]
    fn code(self) -> u64 {
        self as u64
    }
}

/// What an [`Origin`] is, unpacked.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// The wrapped service answered as `source`, in `state`; the classifier said
    /// `verdict`.
    Called {
        source: Source,
        state: State,
        verdict: Verdict,
    },
    /// The breaker skipped the call; the fallback answered.
    Skipped(Skip),
    /// A call failed; a fallback answered instead. Kept as a skip: the breaker's state
    /// and next probe right after the failure; its reason is not used.
    Recovered(Skip),
    /// No request could be prepared, so no breaker was asked; a fallback answered.
    NotPrepared,
}

/// An answer of the wrapped service's source, state and verdict, in [`Origin::word`]: a
/// byte each.
struct Called;

impl Called {
    #[inline(always)]
    fn pack(source: Source, state: State, verdict: Verdict) -> i64 {
        let source = match source {
            Source::Service => 0,
            Source::Probe => 1,
            Source::FallbackAfterFailure => 2,
            Source::FallbackNotPrepared => 3,
            Source::Shadowed(reason) => 4 | reason.code(),
            Source::Fallback(reason) => 8 | reason.code(),
        };
        let verdict = match verdict {
            Verdict::Success => 0,
            Verdict::Failure => 1,
            Verdict::Ignored => 2,
            Verdict::Deferred => 3,
        };
        (source | state.code() << 8 | verdict << 16) as i64
    }

    fn unpack(word: i64) -> Kind {
        let word = word as u64;
        let source = match word & 0xff {
            0 => Source::Service,
            1 => Source::Probe,
            2 => Source::FallbackAfterFailure,
            3 => Source::FallbackNotPrepared,
            code if code & 8 == 0 => Source::Shadowed(Reason::from_code(code)),
            code => Source::Fallback(Reason::from_code(code)),
        };
        let verdict = match word >> 16 & 3 {
            0 => Verdict::Success,
            1 => Verdict::Failure,
            2 => Verdict::Ignored,
            _ => Verdict::Deferred,
        };
        Kind::Called {
            source,
            state: State::from_code(word >> 8),
            verdict,
        }
    }
}

impl Origin {
    /// The wrapped service answered a call made as `source` ([`Source::Service`], or a
    /// [`Source::Probe`]) in `state`, and the classifier said `verdict`.
    ///
    /// For a tool adapter that answers `Answer<T>` without a breaker of its own (an
    /// in-process tool): `Origin::called(Source::Service, State::Closed, Verdict::Success)`.
    #[inline]
    pub fn called(source: Source, state: State, verdict: Verdict) -> Self {
        Origin {
            word: Called::pack(source, state, verdict),
            calls_low: 0,
            calls_mid: 0,
            calls_high: 0,
            head: Head::CALLED,
        }
    }

    /// The breaker skipped the call, as `skip` says; the fallback answered.
    #[inline]
    pub fn skipped(skip: Skip) -> Self {
        let (bits, at) = skip.words();
        Self::packed(Head::of(bits >> 1 & 0x7f), bits >> 8, at)
    }

    /// A call failed (the breaker counted it); a fallback answered instead
    /// ([`Source::FallbackAfterFailure`]). `state` and `next_probe` are the breaker's
    /// right after the failure (a failure may have opened it; an error does not say
    /// which state its call found), as [`RecoverLayer`](crate::recover::RecoverLayer)
    /// reads them.
    pub fn fallback_after_failure(state: State, next_probe: NextProbe) -> Self {
        let (bits, at) = Skip::new(Reason::Open, state, next_probe).words();
        // The state and the kind of next probe: the reason is always the same, and no
        // service asked to wait longer.
        let head = Head::of(Head::RECOVERED + (bits >> 3 & 0xf));
        Self::packed(head, bits >> 8, at)
    }

    /// No request could be prepared for any service, so no breaker was asked; a
    /// fallback answered ([`Source::FallbackNotPrepared`]). Its state is
    /// [`State::Closed`] and its next probe [`NextProbe::NotNeeded`]: no breaker stands
    /// in the way, and no wait is told.
    pub fn not_prepared() -> Self {
        Self::packed(Head::NOT_PREPARED, 0, 0)
    }

    #[inline(always)]
    fn packed(head: Head, calls: u64, at: i64) -> Self {
        Origin {
            word: at,
            calls_low: calls as u8,
            calls_mid: (calls >> 8) as u16,
            calls_high: (calls >> 24) as u32,
            head,
        }
    }

    /// What it is, unpacked.
    fn kind(&self) -> Kind {
        let head = self.head.code();
        if self.head == Head::CALLED {
            return Called::unpack(self.word);
        }
        if self.head == Head::NOT_PREPARED {
            return Kind::NotPrepared;
        }
        let calls = u64::from(self.calls_low)
            | u64::from(self.calls_mid) << 8
            | u64::from(self.calls_high) << 24;
        if head < Head::RECOVERED {
            return Kind::Skipped(Skip::from_words(1 | head << 1 | calls << 8, self.word));
        }
        let flags = (head - Head::RECOVERED) << 2 | Reason::Open.code();
        Kind::Recovered(Skip::from_words(1 | flags << 1 | calls << 8, self.word))
    }

    /// Where it came from.
    pub fn source(&self) -> Source {
        match self.kind() {
            Kind::Called { source, .. } => source,
            Kind::Skipped(skip) => Source::Fallback(skip.reason()),
            Kind::Recovered(_) => Source::FallbackAfterFailure,
            Kind::NotPrepared => Source::FallbackNotPrepared,
        }
    }

    /// The breaker's state when the call arrived (after any open to half-open change);
    /// for a fallback's answer after a failure, its state right after the failure;
    /// [`State::Closed`] when no request could be prepared (no breaker was asked).
    pub fn state(&self) -> State {
        match self.kind() {
            Kind::Called { state, .. } => state,
            Kind::Skipped(skip) | Kind::Recovered(skip) => skip.state(),
            Kind::NotPrepared => State::Closed,
        }
    }

    /// What the breaker's classifier made of the wrapped service's answer; `None` for a
    /// fallback's answer.
    pub fn verdict(&self) -> Option<Verdict> {
        match self.kind() {
            Kind::Called { verdict, .. } => Some(verdict),
            Kind::Skipped(_) | Kind::Recovered(_) | Kind::NotPrepared => None,
        }
    }

    /// For a fallback's answer, when the breaker will next let a probe through (as of
    /// the skip, or of the failure); [`NextProbe::NotNeeded`] for an answer of the
    /// wrapped service.
    pub fn next_probe(&self) -> NextProbe {
        match self.kind() {
            Kind::Called { .. } | Kind::NotPrepared => NextProbe::NotNeeded,
            Kind::Skipped(skip) | Kind::Recovered(skip) => skip.next_probe(),
        }
    }

    /// For the fallback's answer to a skipped call, the skip: why, the state found, and
    /// when the next probe may go.
    pub fn skip(&self) -> Option<Skip> {
        match self.kind() {
            Kind::Skipped(skip) => Some(skip),
            Kind::Called { .. } | Kind::Recovered(_) | Kind::NotPrepared => None,
        }
    }
}

impl fmt::Debug for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Origin")
            .field("kind", &self.kind())
            .finish()
    }
}

/// A response with its provenance: every answer of a
/// [`CircuitBreaker`](crate::CircuitBreaker) says, in its type, whether the wrapped
/// service or a fallback produced it, and what the breaker's classifier made of it.
///
/// ```
/// use tower::{service_fn, Service, ServiceExt};
/// use tower_circuit_breaker::{CircuitBreakerLayer, Source, Verdict};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let layer = CircuitBreakerLayer::builder().build()?;
/// let mut svc = tower::Layer::layer(&layer, service_fn(|q: &'static str| async move {
///     Ok::<_, std::io::Error>(format!("answer to {q}"))
/// }));
/// let answer = svc.ready().await?.call("2+2").await?;
/// assert_eq!(answer.source(), Source::Service);
/// assert_eq!(answer.verdict(), Some(Verdict::Success));
/// assert_eq!(answer.into_inner(), "answer to 2+2");
/// # Ok(()) }
/// ```
///
/// # Keeping the stack's response type
///
/// Unlike `timeout` or `retry`, the breaker changes the response type, from `T` to
/// `Answer<T>`. An answer derefs to its response (`answer.len()`, `&*answer`), so code
/// that only reads it needs no change. Where a stack's response type is fixed (a server framework, a client
/// library's middleware slot), unwrap it outside the breaker with
/// `map_response(Answer::into_inner)`; the caller then can no longer tell a fallback's
/// answer from the service's. For HTTP, `http::ProvenanceLayer` (feature `http`) unwraps
/// it and keeps the provenance on the response, as a header and an extension.
///
/// ```
/// use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
/// use tower_circuit_breaker::{Answer, CircuitBreakerLayer};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), BoxError> {
/// let breaker = CircuitBreakerLayer::builder().build()?;
/// let mut svc = ServiceBuilder::new()
///     .map_response(Answer::into_inner)
///     .layer(breaker)
///     .service(service_fn(|q: String| async move { Ok::<_, std::io::Error>(q) }));
/// let answer: String = svc.ready().await?.call("2+2".into()).await?;
/// assert_eq!(answer, "2+2");
/// # Ok(()) }
/// ```
///
/// # Tool adapters
///
/// A tool's service that answers `Answer<reqwest::Response>` becomes one that answers
/// `Answer<String>` (what [`Run::execute`](crate::expediter::Run::execute)
/// and a model's tool call want) with [`try_map_async`](Self::try_map_async), which
/// keeps the provenance across the body read:
///
/// ```
/// use tower::{service_fn, BoxError, Service, ServiceExt};
/// use tower_circuit_breaker::{Answer, CircuitBreakerLayer, Source};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), BoxError> {
/// // Stands in for a `reqwest::Client` (a `tower::Service<reqwest::Request>`).
/// let client = service_fn(|_: reqwest::Request| async {
///     let response = http::Response::builder().status(200).body("sunny, 21 °C").unwrap();
///     Ok::<_, reqwest::Error>(reqwest::Response::from(response))
/// });
/// let breaker = CircuitBreakerLayer::builder().name("weather").build()?;
/// let mut weather = tower::ServiceBuilder::new()
///     .layer(breaker)
///     .service(client)
///     // The body is read after the breaker: its answer is already classified.
///     .and_then(|answer: Answer<reqwest::Response>| async move {
///         answer.try_map_async(|response| response.text()).await.map_err(BoxError::from)
///     });
///
/// let request = reqwest::Request::new(http::Method::GET, "http://127.0.0.1/today".parse()?);
/// let answer: Answer<String> = weather.ready().await?.call(request).await?;
/// assert_eq!(answer.source(), Source::Service);
/// assert_eq!(answer.get_ref(), "sunny, 21 °C");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer<T> {
    value: T,
    origin: Origin,
}

impl<T> Answer<T> {
    /// An answer from its value and its origin (see [`into_parts`](Self::into_parts)).
    pub fn from_parts(value: T, origin: Origin) -> Self {
        Answer { value, origin }
    }

    /// The response and its origin, to put back together with
    /// [`from_parts`](Self::from_parts) once the response is changed.
    pub fn into_parts(self) -> (T, Origin) {
        (self.value, self.origin)
    }

    /// Where it came from, and what the classifier made of it.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// Where it came from.
    pub fn source(&self) -> Source {
        self.origin.source()
    }

    /// Whether a fallback produced it.
    pub fn is_fallback(&self) -> bool {
        self.source().is_fallback()
    }

    /// The breaker's state when the call arrived (after any open to half-open change).
    pub fn state(&self) -> State {
        self.origin.state()
    }

    /// What the breaker's classifier made of the wrapped service's answer; `None` for a
    /// fallback's answer (see [`Verdict`]).
    pub fn verdict(&self) -> Option<Verdict> {
        self.origin.verdict()
    }

    /// Whether the breaker's classifier called the wrapped service's answer a failure:
    /// an HTTP 503 is an `Ok` to tower, and a failure to an HTTP classifier. The
    /// breaker counted it; the caller still gets the answer, unless a
    /// [`RecoverLayer`](crate::recover::RecoverLayer) answers it from a fallback.
    pub fn is_failure(&self) -> bool {
        self.verdict() == Some(Verdict::Failure)
    }

    /// For a fallback answer, when the breaker will next let a probe through;
    /// [`NextProbe::NotNeeded`] for an answer of the wrapped service.
    pub fn next_probe(&self) -> NextProbe {
        self.origin.next_probe()
    }

    /// For the fallback's answer to a skipped call, the skip it answered: why, the state
    /// found, and when the next probe may go.
    pub fn skip(&self) -> Option<Skip> {
        self.origin.skip()
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

    /// Changes the response, keeping the provenance.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Answer<U> {
        Answer::from_parts(f(self.value), self.origin)
    }

    /// Changes the response with a function that may fail, keeping the provenance.
    ///
    /// # Errors
    ///
    /// `f`'s error; the provenance is dropped with the response.
    pub fn try_map<U, E>(self, f: impl FnOnce(T) -> Result<U, E>) -> Result<Answer<U>, E> {
        Ok(Answer::from_parts(f(self.value)?, self.origin))
    }

    /// Changes the response with an async function (reading a body), keeping the
    /// provenance.
    pub async fn map_async<U, Fut>(self, f: impl FnOnce(T) -> Fut) -> Answer<U>
    where
        Fut: Future<Output = U>,
    {
        Answer::from_parts(f(self.value).await, self.origin)
    }

    /// Changes the response with an async function that may fail (reading a body as
    /// text, parsing it), keeping the provenance; see the [type docs](Self) for an
    /// example with reqwest.
    ///
    /// # Errors
    ///
    /// `f`'s error.
    pub async fn try_map_async<U, E, Fut>(self, f: impl FnOnce(T) -> Fut) -> Result<Answer<U>, E>
    where
        Fut: Future<Output = Result<U, E>>,
    {
        Ok(Answer::from_parts(f(self.value).await?, self.origin))
    }
}

/// The response, read through its answer (`answer.len()`, `&*answer`), as
/// [`get_ref`](Answer::get_ref) gives it.
///
/// ```
/// use tower::{service_fn, Layer, ServiceExt};
/// use tower_circuit_breaker::CircuitBreakerLayer;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let layer = CircuitBreakerLayer::builder().build()?;
/// let svc = layer.layer(service_fn(|q: String| async move { Ok::<_, std::io::Error>(q) }));
/// let answer = svc.oneshot("hello".to_string()).await?;
/// assert_eq!(answer.len(), 5);
/// assert_eq!(&*answer, "hello");
/// # Ok(()) }
/// ```
impl<T> std::ops::Deref for Answer<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.get_ref()
    }
}
#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn reasons() -> [Reason; 4] {
        [
            Reason::Open,
            Reason::HalfOpenFull,
            Reason::Killed,
            Reason::ForcedOpen,
        ]
    }

    fn states() -> [State; 4] {
        [
            State::Closed,
            State::Open,
            State::HalfOpen,
            State::ForcedOpen,
        ]
    }

    fn next_probes() -> Vec<NextProbe> {
        let now = Instant::now();
        let mut all = vec![NextProbe::NotNeeded, NextProbe::InFlight, NextProbe::Manual];
        for calls in [
            1,
            2,
            255,
            256,
            65_535,
            65_536,
            1 << 24,
            1 << 40,
            crate::Cooldown::MAX_CALLS,
        ] {
            for at in [
                None,
                Some(now),
                Some(now + Duration::from_secs(3600 * 24 * 365 * 100)),
            ] {
                all.push(NextProbe::After { calls, at });
            }
        }
        all
    }

    #[test]
    fn an_answer_of_the_service_says_what_it_was_made_with() {
        let mut sources = vec![
            Source::Service,
            Source::Probe,
            Source::FallbackAfterFailure,
            Source::FallbackNotPrepared,
        ];
        for reason in reasons() {
            sources.extend([Source::Shadowed(reason), Source::Fallback(reason)]);
        }
        let verdicts = [
            Verdict::Success,
            Verdict::Failure,
            Verdict::Ignored,
            Verdict::Deferred,
        ];
        for source in sources {
            for state in states() {
                for verdict in verdicts {
                    let origin = Origin::called(source, state, verdict);
                    assert_eq!(
                        (origin.source(), origin.state(), origin.verdict()),
                        (source, state, Some(verdict))
                    );
                    assert_eq!(
                        (origin.skip(), origin.next_probe()),
                        (None, NextProbe::NotNeeded)
                    );
                }
            }
        }
    }

    #[test]
    fn a_fallbacks_answer_keeps_its_skip_whole() {
        for reason in reasons() {
            for state in states() {
                for next_probe in next_probes() {
                    for asked_longer in [false, true] {
                        let skip = match next_probe {
                            NextProbe::After { calls, at } => Skip::waiting(
                                reason,
                                state,
                                calls,
                                at.map(crate::breaker::nanos::Nanos::of),
                                asked_longer,
                            ),
                            _ => Skip::new(reason, state, next_probe),
                        };
                        let origin = Origin::skipped(skip);
                        assert_eq!(origin.skip(), Some(skip));
                        assert_eq!(origin.source(), Source::Fallback(reason));
                        assert_eq!((origin.state(), origin.verdict()), (state, None));
                        assert_eq!(origin.next_probe(), skip.next_probe());
                        assert_eq!(origin, Origin::skipped(skip));
                    }
                }
            }
        }
    }

    #[test]
    fn a_recovered_answer_keeps_the_state_and_next_probe_after_the_failure() {
        for state in states() {
            for next_probe in next_probes() {
                let origin = Origin::fallback_after_failure(state, next_probe);
                assert_eq!(origin.source(), Source::FallbackAfterFailure);
                assert_eq!((origin.state(), origin.next_probe()), (state, next_probe));
                assert_eq!((origin.skip(), origin.verdict()), (None, None));
            }
        }
    }

    #[test]
    fn origins_of_different_kinds_differ() {
        let skip = Skip::new(Reason::Open, State::Open, NextProbe::Manual);
        let kinds = [
            Origin::called(Source::Service, State::Closed, Verdict::Success),
            Origin::skipped(skip),
            Origin::fallback_after_failure(State::Open, NextProbe::Manual),
            Origin::not_prepared(),
        ];
        for (i, a) in kinds.iter().enumerate() {
            for (j, b) in kinds.iter().enumerate() {
                assert_eq!(a == b, i == j, "{a:?} {b:?}");
            }
        }
        assert_eq!(
            format!("{:?}", kinds[0]),
            "Origin { kind: Called { source: Service, state: Closed, verdict: Success } }"
        );
    }
}
