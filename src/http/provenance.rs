//! Provenance on the plain response: see [`ProvenanceLayer`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use ::http::header::RETRY_AFTER;
use ::http::{Extensions, HeaderMap, HeaderName, HeaderValue, Response};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use super::retry_after::retry_after_value;
use crate::accessors::inner_service_accessors;
use crate::error::BoxError;
use crate::{Answer, NextProbe, Reason, Source, State};

/// The response header that says where an answer came from: `x-circuit-breaker`.
pub const X_CIRCUIT_BREAKER: HeaderName = HeaderName::from_static("x-circuit-breaker");

/// Where an answer came from, as a response extension written by [`Provenance`]: what
/// an [`Answer`] carries, kept once the answer is unwrapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AnswerInfo {
    /// Who produced the answer, and why.
    pub source: Source,
    /// The breaker's state when the call arrived.
    pub state: State,
    /// For a fallback answer, when the breaker will next let a probe through.
    pub next_probe: NextProbe,
}

impl AnswerInfo {
    /// What `answer` says about itself.
    pub fn of<T>(answer: &Answer<T>) -> Self {
        AnswerInfo {
            source: answer.source(),
            state: answer.state(),
            next_probe: answer.next_probe(),
        }
    }

    /// Whether the fallback produced the answer.
    pub fn is_fallback(&self) -> bool {
        self.source.is_fallback()
    }

    /// For a fallback's answer, how long from now until the breaker will next let a
    /// call through, when that is known in time (see [`NextProbe::retry_after`]),
    /// measured on the breaker's clock (`tokio::time`); `None` for the service's
    /// answers, and when only calls, a probe under way or a person decide, or the call
    /// failed with the breaker still closed (it sets no wait). It is what
    /// [`Provenance`] writes as `Retry-After`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_circuit_breaker::http::AnswerInfo;
    /// use tower_circuit_breaker::{Answer, NextProbe, Origin, Reason, Skip, State};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let at = tokio::time::Instant::now().into_std() + Duration::from_secs(20);
    /// let next_probe = NextProbe::After { calls: 1, at: Some(at) };
    /// let skip = Skip::new(Reason::Open, State::Open, next_probe);
    /// let answer = Answer::from_parts("unavailable", Origin::skipped(skip));
    /// tokio::time::advance(Duration::from_secs(5)).await;
    /// assert_eq!(AnswerInfo::of(&answer).retry_after(), Some(Duration::from_secs(15)));
    /// # }
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        if !self.is_fallback() {
            return None;
        }
        let now = tokio::time::Instant::now().into_std();
        self.next_probe.retry_after(now)
    }
}

/// The provenance [`Provenance`] wrote on `response`, if it went through one: the
/// [`AnswerInfo`] extension. Across a process boundary, or through a client that
/// drops extensions, read the [`X_CIRCUIT_BREAKER`] header with
/// [`source_from_header`] instead.
pub fn provenance<R: ProvenanceTarget>(response: &R) -> Option<AnswerInfo> {
    response.extensions().get::<AnswerInfo>().copied()
}

/// A fallback's answer, turned into an error by [`fallback_as_error`] for a client that
/// would otherwise take it for the service's: what the breaker said about it.
///
/// Client libraries that take a tower service in a middleware slot (async-openai's
/// `Client::with_http_service`) parse every response into their own types and drop its
/// headers and extensions, so a fallback response would reach the caller posing as a
/// completion, or as an API error with the fallback's body as its message. Put
/// `ServiceBuilder::new().map_result(fallback_as_error)` at the top of the slot
/// (outside [`ProvenanceLayer`]): the library hands such an error to the caller
/// untouched (async-openai: `OpenAIError::Boxed`), who downcasts it and reads why the
/// service was not asked and when it will be again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FallbackAnswer {
    /// Where the answer came from (always a fallback), the state, the next probe.
    pub info: AnswerInfo,
}

impl std::fmt::Display for FallbackAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the circuit breaker answered instead of the service: {}",
            self.info.source
        )
    }
}

impl std::error::Error for FallbackAnswer {}

/// Passes the service's responses and errors on, and turns a response [`Provenance`]
/// labelled as a fallback's into a [`FallbackAnswer`] error; for `map_result` at the
/// top of a client library's middleware slot (see [`FallbackAnswer`]).
///
/// ```
/// use std::convert::Infallible;
/// use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
/// use tower_circuit_breaker::http::{fallback_as_error, FallbackAnswer, ProvenanceLayer};
/// use tower_circuit_breaker::{CircuitBreakerLayer, Reason, Source};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), BoxError> {
/// let breaker = CircuitBreakerLayer::builder().build()?;
/// breaker.handle().force_open();
/// let breaker = breaker.with_fallback(service_fn(|_: http::Request<()>| async {
///     Ok::<_, Infallible>(http::Response::new("try again later"))
/// }));
/// let mut slot = ServiceBuilder::new()
///     .map_result(fallback_as_error)
///     .layer(ProvenanceLayer::new())
///     .layer(breaker)
///     .service(service_fn(|_: http::Request<()>| async {
///         Ok::<_, std::io::Error>(http::Response::new("the answer"))
///     }));
/// let error = slot.ready().await?.call(http::Request::new(())).await.unwrap_err();
/// let fallback = error.downcast_ref::<FallbackAnswer>().expect("a fallback");
/// assert_eq!(fallback.info.source, Source::Fallback(Reason::ForcedOpen));
/// # Ok(()) }
/// ```
pub fn fallback_as_error<R: ProvenanceTarget>(result: Result<R, BoxError>) -> Result<R, BoxError> {
    let response = result?;
    match provenance(&response) {
        Some(info) if info.is_fallback() => Err(Box::new(FallbackAnswer { info })),
        _ => Ok(response),
    }
}

/// A response type the provenance can be written on: `http::Response<B>`, and with the
/// `reqwest` feature `reqwest::Response`.
pub trait ProvenanceTarget {
    /// Its headers.
    fn headers_mut(&mut self) -> &mut HeaderMap;
    /// Its extensions.
    fn extensions(&self) -> &Extensions;
    /// Its extensions, mutably.
    fn extensions_mut(&mut self) -> &mut Extensions;
}

impl<B> ProvenanceTarget for Response<B> {
    fn headers_mut(&mut self) -> &mut HeaderMap {
        Response::headers_mut(self)
    }

    fn extensions(&self) -> &Extensions {
        Response::extensions(self)
    }

    fn extensions_mut(&mut self) -> &mut Extensions {
        Response::extensions_mut(self)
    }
}

#[cfg(feature = "reqwest")]
impl ProvenanceTarget for ::reqwest::Response {
    fn headers_mut(&mut self) -> &mut HeaderMap {
        ::reqwest::Response::headers_mut(self)
    }

    fn extensions(&self) -> &Extensions {
        ::reqwest::Response::extensions(self)
    }

    fn extensions_mut(&mut self) -> &mut Extensions {
        ::reqwest::Response::extensions_mut(self)
    }
}

/// The [`X_CIRCUIT_BREAKER`] header value for `source`: `service`, `probe`,
/// `fallback; reason=open`, `shadowed; reason=open`, ...
pub fn header_value(source: Source) -> HeaderValue {
    HeaderValue::from_static(header_str(source))
}

/// The source an [`X_CIRCUIT_BREAKER`] header value names; `None` for a value this
/// crate does not write.
///
/// ```
/// use http::HeaderValue;
/// use tower_circuit_breaker::http::{header_value, source_from_header};
/// use tower_circuit_breaker::{Reason, Source};
///
/// let value = HeaderValue::from_static("fallback; reason=killed");
/// assert_eq!(source_from_header(&value), Some(Source::Fallback(Reason::Killed)));
/// assert_eq!(header_value(Source::Fallback(Reason::Killed)), value);
/// assert_eq!(source_from_header(&HeaderValue::from_static("cache")), None);
/// ```
pub fn source_from_header(value: &HeaderValue) -> Option<Source> {
    let text = value.to_str().ok()?.trim();
    match text.split_whitespace().collect::<String>().as_str() {
        "fallback;reason=failed" => return Some(Source::FallbackAfterFailure),
        "fallback;reason=not_prepared" => return Some(Source::FallbackNotPrepared),
        _ => {}
    }
    let (kind, reason) = match text.split_once(';') {
        Some((kind, rest)) => {
            let reason = rest.trim().strip_prefix("reason=")?;
            (kind.trim(), Some(reason_from_str(reason.trim())?))
        }
        None => (text, None),
    };
    match (kind, reason) {
        ("service", None) => Some(Source::Service),
        ("probe", None) => Some(Source::Probe),
        ("fallback", Some(reason)) => Some(Source::Fallback(reason)),
        ("shadowed", Some(reason)) => Some(Source::Shadowed(reason)),
        _ => None,
    }
}

const REASONS: [Reason; 4] = [
    Reason::Open,
    Reason::HalfOpenFull,
    Reason::Killed,
    Reason::ForcedOpen,
];

fn reason_from_str(text: &str) -> Option<Reason> {
    REASONS.into_iter().find(|reason| reason.as_str() == text)
}

/// Static strings, so that labelling a response allocates nothing. The match is
/// exhaustive on purpose: a new [`Reason`] must be given its header value here.
fn header_str(source: Source) -> &'static str {
    match source {
        Source::Service => "service",
        Source::Probe => "probe",
        Source::Fallback(reason) => match reason {
            Reason::Open => "fallback; reason=open",
            Reason::HalfOpenFull => "fallback; reason=half_open_full",
            Reason::Killed => "fallback; reason=killed",
            Reason::ForcedOpen => "fallback; reason=forced_open",
        },
        Source::FallbackAfterFailure => "fallback; reason=failed",
        Source::FallbackNotPrepared => "fallback; reason=not_prepared",
        Source::Shadowed(reason) => match reason {
            Reason::Open => "shadowed; reason=open",
            Reason::HalfOpenFull => "shadowed; reason=half_open_full",
            Reason::Killed => "shadowed; reason=killed",
            Reason::ForcedOpen => "shadowed; reason=forced_open",
        },
    }
}

/// Where an answer came from, carried on the `http::Response`
/// itself, for stacks whose response type is fixed.
///
/// A [`CircuitBreaker`](crate::CircuitBreaker) answers with
/// [`Answer<http::Response<B>>`](crate::Answer), whose type says whether the service or
/// the fallback produced it. A client library that takes a tower service in a
/// middleware slot expects its own response type, so the `Answer` must be unwrapped
/// there, and its provenance would be lost. [`Provenance`] unwraps it and writes the
/// provenance onto the response twice:
///
/// - a header, [`X_CIRCUIT_BREAKER`] (`x-circuit-breaker: fallback; reason=open`): it
///   survives whatever the response goes through, including a conversion by a client
///   library that keeps headers but drops extensions, and a hop to another process;
/// - an extension, [`AnswerInfo`]: typed, with the breaker's state and the next
///   probe, for code in the same process ([`provenance`] reads it).
///
/// The header's values are `service`, `probe`, `fallback; reason=<reason>` and
/// `shadowed; reason=<reason>` (the reason as [`Reason::as_str`] writes it: `open`,
/// `half_open_full`, `killed`, `forced_open`, ...), `fallback; reason=failed` for a
/// fallback's answer to a call that failed ([`Source::FallbackAfterFailure`]), and
/// `fallback; reason=not_prepared` for one to a request that could be prepared for no
/// service, so that nothing was sent ([`Source::FallbackNotPrepared`]: a failover's
/// request with a body it cannot copy). A fallback's response gets the
/// header too: it is the breaker that labels it, not the fallback. Each breaker on the
/// way appends its value, so a response that went through several carries one value
/// per breaker, the innermost (or the one farthest away, in another process) first;
/// read them all with [`HeaderMap::get_all`](::http::HeaderMap::get_all). The extension
/// is the nearest breaker's.
///
/// A fallback's answer also gets `Retry-After`, in whole seconds rounded up, when the
/// breaker knows how long until it next lets a call through
/// ([`AnswerInfo::retry_after`]) and the answer has none of its own: a saved answer
/// served while the breaker is open says when to ask again, as an honest 503 does. None
/// is written when the wait is not known in time, nor after a failed call with the
/// breaker still closed.
///
/// ```
/// use std::convert::Infallible;
/// use http::{Request, Response};
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_circuit_breaker::http::{provenance, ProvenanceLayer, X_CIRCUIT_BREAKER};
/// use tower_circuit_breaker::{CircuitBreakerLayer, Reason, Source};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let breaker = CircuitBreakerLayer::builder().build()?;
/// let handle = breaker.handle();
/// let breaker = breaker.with_fallback(service_fn(|_: Request<()>| async {
///     Ok::<_, Infallible>(Response::new("unavailable".to_string()))
/// }));
/// let mut client = ServiceBuilder::new()
///     .layer(ProvenanceLayer::new())
///     .layer(breaker)
///     .service(service_fn(|_: Request<()>| async {
///         Ok::<_, Infallible>(Response::new("hello".to_string()))
///     }));
///
/// let response: Response<String> = client.ready().await?.call(Request::new(())).await?;
/// assert_eq!(response.headers()[X_CIRCUIT_BREAKER], "service");
///
/// handle.force_open();
/// let response = client.ready().await?.call(Request::new(())).await?;
/// assert_eq!(response.headers()[X_CIRCUIT_BREAKER], "fallback; reason=forced_open");
/// assert_eq!(provenance(&response).unwrap().source, Source::Fallback(Reason::ForcedOpen));
/// # Ok(()) }
/// ```
///
/// Unwraps a breaker's [`Answer<R>`](crate::Answer) into the plain response `R`
/// (`http::Response<B>`, or `reqwest::Response` with the `reqwest` feature: any
/// [`ProvenanceTarget`] type) labelled with its provenance.
///
/// Place it directly outside the breaker.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProvenanceLayer {
    _priv: (),
}

impl ProvenanceLayer {
    /// The layer.
    pub fn new() -> Self {
        ProvenanceLayer { _priv: () }
    }
}

impl<S> Layer<S> for ProvenanceLayer {
    type Service = Provenance<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Provenance::new(inner)
    }
}

/// A breaker whose answers are plain responses labelled with an
/// [`X_CIRCUIT_BREAKER`] header and an [`AnswerInfo`] extension; made by
/// [`ProvenanceLayer`].
///
/// # Errors
///
/// The breaker's errors, unchanged.
#[derive(Debug, Clone)]
pub struct Provenance<S> {
    inner: S,
}

impl<S> Provenance<S> {
    /// Labels the answers of `inner`.
    pub fn new(inner: S) -> Self {
        Provenance { inner }
    }

    inner_service_accessors!(S);
}

impl<S, Request, R> Service<Request> for Provenance<S>
where
    S: Service<Request, Response = Answer<R>>,
    R: ProvenanceTarget,
{
    type Response = R;
    type Error = S::Error;
    type Future = ProvenanceFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        ProvenanceFuture::new(self.inner.call(request))
    }
}

pin_project! {
    /// The future of a [`Provenance`] call: the breaker's answer, unwrapped and
    /// labelled.
    pub struct ProvenanceFuture<F> {
        #[pin]
        future: F,
    }
}

impl<F> ProvenanceFuture<F> {
    pub(crate) fn new(future: F) -> Self {
        ProvenanceFuture { future }
    }
}

impl<F, R, E> Future for ProvenanceFuture<F>
where
    F: Future<Output = Result<Answer<R>, E>>,
    R: ProvenanceTarget,
{
    type Output = Result<R, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let answer = ready!(self.project().future.poll(cx))?;
        let info = AnswerInfo::of(&answer);
        let mut response = answer.into_inner();
        let headers = response.headers_mut();
        headers.append(X_CIRCUIT_BREAKER, header_value(info.source));
        if let Some(wait) = info.retry_after() {
            if !headers.contains_key(RETRY_AFTER) {
                headers.insert(RETRY_AFTER, retry_after_value(wait));
            }
        }
        response.extensions_mut().insert(info);
        Poll::Ready(Ok(response))
    }
}

impl<F> fmt::Debug for ProvenanceFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProvenanceFuture").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_header_value_parses_back_to_its_source() {
        let mut sources = vec![Source::Service, Source::Probe];
        let failed = header_value(Source::FallbackAfterFailure);
        assert_eq!(failed, "fallback; reason=failed");
        assert_eq!(
            source_from_header(&failed),
            Some(Source::FallbackAfterFailure)
        );
        let not_prepared = header_value(Source::FallbackNotPrepared);
        assert_eq!(not_prepared, "fallback; reason=not_prepared");
        assert_eq!(
            source_from_header(&not_prepared),
            Some(Source::FallbackNotPrepared)
        );
        for reason in REASONS {
            sources.push(Source::Fallback(reason));
            sources.push(Source::Shadowed(reason));
        }
        for source in sources {
            let value = header_value(source);
            assert_eq!(source_from_header(&value), Some(source), "{value:?}");
            if let Some(reason) = source.reason() {
                let expected = format!("{}; reason={}", source.as_str(), reason.as_str());
                assert_eq!(value, expected.as_str());
            } else {
                assert_eq!(value, source.as_str());
            }
        }
    }
}
