//! Provider failover over HTTP: when a call moves on ([`HttpFailover`]), and the route
//! written onto the response ([`RouteHeadersLayer`]).

use std::fmt;

use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use tower::util::MapResponseLayer;
use tower::Layer;

use super::buffer::BufferedResponse;
use super::classify::{
    contains_json_string, permanent_failure_named, refuses_the_key, DEFAULT_PERMANENT_MARKERS,
};
use super::error_body_bytes::ErrorBodyBytes;
use super::provenance::ProvenanceTarget;
use super::retry_after::requested_wait;
use crate::failover::{Attempted, FailoverPolicy, Route, Routed};
use crate::{Answer, Verdict};

/// `x-circuit-breaker-provider`: the failover provider that answered (absent when none
/// did).
pub const X_CIRCUIT_BREAKER_PROVIDER: HeaderName =
    HeaderName::from_static("x-circuit-breaker-provider");

/// `x-circuit-breaker-passed`: each failover provider passed before the answer, in
/// order, as `name; reason=<why>` separated by `, `: `openai; reason=open,
/// anthropic; reason=failed`. The reasons are [`PassReason::as_str`]'s
/// (`open`, `killed`, `forced_open`, `half_open_full`, `failed`, `not_prepared`);
/// messages stay in the typed [`Route`], never in a header.
///
/// [`PassReason::as_str`]: crate::failover::PassReason::as_str
pub const X_CIRCUIT_BREAKER_PASSED: HeaderName =
    HeaderName::from_static("x-circuit-breaker-passed");

/// When an HTTP call moves on to the next provider: a
/// [`FailoverPolicy`] for `http::Response<B>` and
/// [`BufferedResponse`].
///
/// By default it moves on after an error (a timeout, a transport error), a 5xx, a 429
/// (a rate limit, or an exhausted quota) and a 408, and keeps every other answer: a
/// caller's 4xx is the caller's to fix, and the next provider would say the same (a 401
/// or 403 moves on if [`auth_errors`](Self::auth_errors) says so). A 400
/// that says the context is too long (`context_length_exceeded`) moves on only if
/// [`context_too_long`](Self::context_too_long) says so: a model with a longer context
/// may take it. The route describes each provider passed by its status (`503 Service
/// Unavailable`, `429 Too Many Requests, retry after 20s`), never by its body.
///
/// ```
/// use tower_circuit_breaker::http::HttpFailover;
///
/// let policy = HttpFailover::new().rate_limits(false).context_too_long(true);
/// # let _ = policy;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct HttpFailover {
    errors: bool,
    server_errors: bool,
    rate_limits: bool,
    context_too_long: bool,
    auth_errors: bool,
}

impl Default for HttpFailover {
    fn default() -> Self {
        HttpFailover {
            errors: true,
            server_errors: true,
            rate_limits: true,
            context_too_long: false,
            auth_errors: false,
        }
    }
}

impl HttpFailover {
    /// Moves on after errors, 5xx, 408 and 429; not after a 400 "context too long".
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether an error (a timeout, a connection refused) moves on (default `true`).
    pub fn errors(mut self, yes: bool) -> Self {
        self.errors = yes;
        self
    }

    /// Whether a 5xx or a 408 moves on (default `true`).
    pub fn server_errors(mut self, yes: bool) -> Self {
        self.server_errors = yes;
        self
    }

    /// Whether a 429 (a rate limit or an exhausted quota) moves on (default `true`).
    pub fn rate_limits(mut self, yes: bool) -> Self {
        self.rate_limits = yes;
        self
    }

    /// Whether a 400 whose body says `context_length_exceeded` moves on (default
    /// `false`). The body must be readable: a [`BufferedResponse`], or an
    /// [`ErrorBodyBytes`] extension an [`ErrorBodyLayer`](super::ErrorBodyLayer) left.
    pub fn context_too_long(mut self, yes: bool) -> Self {
        self.context_too_long = yes;
        self
    }

    /// Whether a 401 or a 403 moves on (default `false`). Turn it on where each provider
    /// is called with a key of its own (an `llm::Provider`'s `bearer`, feature `llm`):
    /// a 401 or 403 then says this provider's key is revoked or out of its scope, and the
    /// next provider, with its own key, may answer. Left off, it is the answer, as a
    /// caller's 4xx is (a key the caller sent would be refused by every provider). In an
    /// `llm::LlmClient`, turning it on also makes each provider's breaker count a 401 or
    /// 403 as a failure ([`HttpClassifier::auth_errors`](super::HttpClassifier::auth_errors)):
    /// a revoked key opens it, and the provider is passed with nothing sent until a probe
    /// finds the key works again.
    pub fn auth_errors(mut self, yes: bool) -> Self {
        self.auth_errors = yes;
        self
    }

    /// Whether a 401 or a 403 moves on ([`auth_errors`](Self::auth_errors)).
    #[cfg(feature = "llm")]
    pub(crate) fn moves_on_auth_errors(&self) -> bool {
        self.auth_errors
    }

    fn moves_on(&self, status: StatusCode, verdict: Option<Verdict>, body: Option<&[u8]>) -> bool {
        if self.auth_errors && refuses_the_key(status) {
            return true;
        }
        if status == StatusCode::TOO_MANY_REQUESTS {
            return self.rate_limits;
        }
        if status.is_server_error() || status == StatusCode::REQUEST_TIMEOUT {
            return self.server_errors;
        }
        if status == StatusCode::BAD_REQUEST
            && body.is_some_and(|body| contains_json_string(body, b"context_length_exceeded"))
        {
            return self.context_too_long;
        }
        // Another status the breaker's classifier called a failure.
        verdict == Some(Verdict::Failure) && self.server_errors
    }
}

/// What the policy reads of an HTTP response: its status, headers and, if at hand, body.
trait HttpParts {
    fn status(&self) -> StatusCode;
    fn headers(&self) -> &HeaderMap;
    fn body_bytes(&self) -> Option<&[u8]>;
}

impl HttpParts for BufferedResponse {
    fn status(&self) -> StatusCode {
        BufferedResponse::status(self)
    }
    fn headers(&self) -> &HeaderMap {
        BufferedResponse::headers(self)
    }
    fn body_bytes(&self) -> Option<&[u8]> {
        Some(self.body())
    }
}

impl<B> HttpParts for Response<B> {
    fn status(&self) -> StatusCode {
        Response::status(self)
    }
    fn headers(&self) -> &HeaderMap {
        Response::headers(self)
    }
    fn body_bytes(&self) -> Option<&[u8]> {
        self.extensions()
            .get::<ErrorBodyBytes>()
            .map(ErrorBodyBytes::as_bytes)
    }
}

fn fail_over<R: HttpParts>(policy: &HttpFailover, attempted: &Attempted<'_, R>) -> bool {
    match attempted {
        Attempted::Failed(_) => policy.errors,
        Attempted::Answered(answer) => {
            let response = answer.get_ref();
            policy.moves_on(response.status(), answer.verdict(), response.body_bytes())
        }
    }
}

fn describe<R: HttpParts>(attempted: &Attempted<'_, R>) -> Option<String> {
    let Attempted::Answered(answer) = attempted else {
        return None;
    };
    let response = answer.get_ref();
    let status = response.status();
    let mut text = status.to_string();
    if status == StatusCode::BAD_REQUEST
        && response
            .body_bytes()
            .is_some_and(|body| contains_json_string(body, b"context_length_exceeded"))
    {
        text.push_str(": context_length_exceeded");
    }
    // An exhausted quota does not pass by itself, whatever wait it names: named as the
    // classifier names it.
    if let Some(named) =
        permanent_failure_named(status, response.body_bytes(), DEFAULT_PERMANENT_MARKERS)
    {
        text.push_str(": ");
        text.push_str(&named);
        return Some(text);
    }
    if let Some(wait) = requested_wait(status, response.headers()) {
        let secs = crate::saved::ceil_secs(wait);
        text.push_str(&format!(", retry after {secs}s"));
    }
    Some(text)
}

impl FailoverPolicy<BufferedResponse> for HttpFailover {
    fn fail_over(&self, attempted: &Attempted<'_, BufferedResponse>) -> bool {
        fail_over(self, attempted)
    }

    fn describe(&self, attempted: &Attempted<'_, BufferedResponse>) -> Option<String> {
        describe(attempted)
    }
}

impl<B> FailoverPolicy<Response<B>> for HttpFailover {
    fn fail_over(&self, attempted: &Attempted<'_, Response<B>>) -> bool {
        fail_over(self, attempted)
    }

    fn describe(&self, attempted: &Attempted<'_, Response<B>>) -> Option<String> {
        describe(attempted)
    }
}

/// Writes a failover's [`Route`] onto its response and gives back the plain
/// [`Answer`], for layers that take one (a [`SaveLayer`](crate::saved::SaveLayer), a
/// [`ProvenanceLayer`](super::ProvenanceLayer)): the [`X_CIRCUIT_BREAKER_PROVIDER`] and
/// [`X_CIRCUIT_BREAKER_PASSED`] headers, and the `Route` as an extension.
///
/// ```
/// use tower_circuit_breaker::failover::Route;
/// use tower_circuit_breaker::http::{route_headers, X_CIRCUIT_BREAKER_PROVIDER};
/// # use tower::{service_fn, BoxError, Service, ServiceExt, Layer};
/// # use tower_circuit_breaker::{failover::Failover, CircuitBreakerLayer};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), BoxError> {
/// # let breaker = CircuitBreakerLayer::builder().name("local").build()?;
/// # let model = service_fn(|_: ()| async { Ok::<_, BoxError>(http::Response::new(String::from("hi"))) });
/// # let mut failover = Failover::builder().provider("local", breaker.handle(), breaker.layer(model)).build()?;
/// let routed = failover.ready().await?.call(()).await?;
/// let answer = route_headers(routed);
/// assert_eq!(answer.get_ref().headers()[X_CIRCUIT_BREAKER_PROVIDER], "local");
/// assert_eq!(answer.get_ref().extensions().get::<Route>().unwrap().provider(), Some("local"));
/// # Ok(()) }
/// ```
pub fn route_headers<R: ProvenanceTarget>(routed: Routed<R>) -> Answer<R> {
    let (answer, route) = routed.into_parts();
    let (mut response, origin) = answer.into_parts();
    let headers = response.headers_mut();
    // A saved answer carries the route it took then: this call's route replaces it.
    headers.remove(X_CIRCUIT_BREAKER_PROVIDER);
    headers.remove(X_CIRCUIT_BREAKER_PASSED);
    if let Some(provider) = route.provider().and_then(|p| HeaderValue::from_str(p).ok()) {
        headers.insert(X_CIRCUIT_BREAKER_PROVIDER, provider);
    }
    if !route.passed().is_empty() {
        let passed = route
            .passed()
            .iter()
            .map(|passed| format!("{}; reason={}", passed.provider(), passed.why().as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        if let Ok(value) = HeaderValue::from_str(&passed) {
            headers.insert(X_CIRCUIT_BREAKER_PASSED, value);
        }
    }
    response.extensions_mut().insert(route);
    Answer::from_parts(response, origin)
}

/// The route a response took, from its extension ([`route_headers`] left it).
pub fn route_of<R: ProvenanceTarget>(response: &R) -> Option<&Route> {
    response.extensions().get::<Route>()
}

/// A [`Layer`] that applies [`route_headers`] to every answer of a
/// [`Failover`](crate::failover::Failover).
pub struct RouteHeadersLayer<R> {
    _response: std::marker::PhantomData<fn(R)>,
}

impl<R> RouteHeadersLayer<R> {
    /// The layer.
    pub fn new() -> Self {
        RouteHeadersLayer {
            _response: std::marker::PhantomData,
        }
    }
}

impl<R> Default for RouteHeadersLayer<R> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R> Clone for RouteHeadersLayer<R> {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl<R> fmt::Debug for RouteHeadersLayer<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RouteHeadersLayer")
    }
}

/// The service a [`RouteHeadersLayer`] makes.
pub type RouteHeaders<S, R> = tower::util::MapResponse<S, fn(Routed<R>) -> Answer<R>>;

impl<S, R: ProvenanceTarget> Layer<S> for RouteHeadersLayer<R> {
    type Service = RouteHeaders<S, R>;

    fn layer(&self, inner: S) -> Self::Service {
        MapResponseLayer::new(route_headers as fn(Routed<R>) -> Answer<R>).layer(inner)
    }
}
