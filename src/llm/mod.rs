//! The LLM client's whole stack in a few lines: [`LlmClient`] assembles, for a
//! `reqwest::Client`, every layer an OpenAI-compatible chat client needs (cargo feature
//! `llm`).
//!
//! Outside in, what a request goes through (one not addressed under the first provider's
//! base URL is refused first, with [`NotUnderBaseUrl`]):
//!
//! 1. [`ProvenanceLayer`]: the answer is a plain [`BufferedResponse`] with an
//!    `x-circuit-breaker` header saying where it came from (`service`, `probe`,
//!    `fallback; reason=open`), and an [`AnswerInfo`](crate::http::AnswerInfo) extension.
//! 2. [`SaveLayer`]: each 2xx answer the breaker's classifier called a success is saved
//!    under its request's method, path and query, and body (the same model and messages to
//!    the same endpoint: the same question).
//! 3. [`RouteHeadersLayer`] over a [`Failover`]: the providers in order, each under its
//!    own breaker and kill switch; a provider whose breaker is open or killed is passed
//!    with nothing sent, one that fails (5xx, 429, a timeout, a connection refused; not a
//!    caller's 4xx) is passed for the next ([`HttpFailover`]); the answer's
//!    `x-circuit-breaker-provider` and `x-circuit-breaker-passed` headers say who
//!    answered and why the others were passed. When no provider answers: the saved
//!    answer to the same question, marked stale ([`http::stale`](crate::http::stale):
//!    `Age`, `x-circuit-breaker-stale`, `x-circuit-breaker-saved-from` naming the provider
//!    that gave it, the content labelled), or an honest 503
//!    "unavailable" JSON error with `Retry-After` when a provider's next probe time is
//!    known. A request whose body cannot be copied (a stream) is made for no provider:
//!    nothing is sent and it gets that 503 with the code
//!    [`NOT_PREPARED`](crate::http::NOT_PREPARED) and `x-circuit-breaker: fallback;
//!    reason=not_prepared`; give bodies as bytes (`.json(…)`, `.body(String)`).
//! 4. For each provider: its breaker, with the [`HttpClassifier`] (a 429 or 503 with
//!    `Retry-After` opens it for that long; `insufficient_quota` holds it open until a
//!    reset); a [`RetryLayer`](crate::retry::RetryLayer) inside it (transient failures only, backoff with full
//!    jitter, a short `Retry-After` waited, a long one handed back at once so the breaker
//!    opens; the breaker counts one outcome per user call); [`BufferBodyLayer`] (the
//!    answer read whole, so it can be saved and served again), under the attempt's time
//!    limit (a hang is a failure; a limit reached while a 429's body is read still
//!    keeps its `Retry-After`); the client.
//!
//! ```
//! use std::time::Duration;
//! use tower::{Service, ServiceExt};
//! use tower_circuit_breaker::llm::{LlmClient, Provider};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tower::BoxError> {
//! let llm = LlmClient::builder()
//!     .provider(Provider::new("openai", "https://api.openai.com/v1").bearer("sk-…").model("gpt-4o-mini"))
//!     .provider(Provider::new("local", "http://127.0.0.1:11434/v1").model("llama3.2"))
//!     .timeout(Duration::from_secs(30))
//!     // A provider's redirect is its answer: nothing is sent on to where it points.
//!     .build(reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build()?)?;
//! let admin_handles = llm.handles(); // every provider's breaker: for the admin service
//! let mut chat = llm.service();      // a BoxCloneSyncService<reqwest::Request, BufferedResponse, BoxError>
//! let request = reqwest::Client::new()
//!     .post(llm.url("/chat/completions"))
//!     .json(&serde_json::json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}))
//!     .build()?;
//! # let _ = (admin_handles, &mut chat, request);
//! // let answer = chat.ready().await?.call(request).await?;
//! # Ok(()) }
//! ```

mod addressed;
mod body_model;
mod provider;

use std::convert::Infallible;
use std::fmt;
use std::time::Duration;

use tower::util::BoxCloneSyncService;
use tower::{service_fn, BoxError, ServiceBuilder};

pub use self::addressed::NotUnderBaseUrl;
pub use self::provider::{Provider, Redirected};

use self::addressed::Addressed;

use crate::error::ConfigError;
use crate::failover::{Failover, FailoverConfigError, PassReason, Route, Unanswered};
use crate::http::{
    BufferBodyLayer, BufferedResponse, HttpClassifier, HttpFailover, ProvenanceLayer,
    RouteHeadersLayer,
};
use crate::retry::{RetryBuilder, RetryConfigError};
use crate::saved::{SaveLayer, SavedAnswers, SavedConfigError};
use crate::{Builder, CircuitBreakerHandle};

/// The service an [`LlmClient`] gives: a request addressed under the first provider's
/// base URL in, a labelled, buffered response out.
pub type LlmService = BoxCloneSyncService<reqwest::Request, BufferedResponse, BoxError>;

/// An LLM client that cannot be built; each variant says which setting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LlmConfigError {
    /// A provider's settings are not valid (never shows a key).
    #[error("provider `{provider}`: {what}")]
    InvalidProvider {
        /// The provider's name.
        provider: String,
        /// What is wrong.
        what: String,
    },
    /// The breakers' settings.
    #[error(transparent)]
    Breaker(#[from] ConfigError),
    /// The retry policy's settings.
    #[error(transparent)]
    Retry(#[from] RetryConfigError),
    /// The saved answers' settings.
    #[error(transparent)]
    Saved(#[from] SavedConfigError),
    /// The providers: none, or two with one name, or a name unfit for a header.
    #[error(transparent)]
    Failover(#[from] FailoverConfigError),
    /// A zero timeout.
    #[error("the timeout must be more than zero")]
    ZeroTimeout,
    /// A zero [`max_answer_bytes`](LlmClientBuilder::max_answer_bytes): every answer with
    /// a body would fail its provider.
    #[error("max_answer_bytes must be more than zero")]
    ZeroMaxAnswerBytes,
}

/// Sets up an [`LlmClient`]: providers in order, then whatever differs from the
/// defaults.
#[derive(Debug, Clone)]
pub struct LlmClientBuilder {
    providers: Vec<Provider>,
    breaker: Builder,
    retry: Option<RetryBuilder>,
    timeout: Duration,
    saved: Option<(usize, Duration)>,
    failover: HttpFailover,
    buffer_limit: Option<usize>,
}

impl Default for LlmClientBuilder {
    fn default() -> Self {
        LlmClientBuilder {
            providers: Vec::new(),
            breaker: Builder::new(),
            retry: Some(RetryBuilder::new()),
            timeout: Duration::from_secs(60),
            saved: Some((1_000, Duration::from_secs(3600))),
            failover: HttpFailover::new(),
            buffer_limit: None,
        }
    }
}

impl LlmClientBuilder {
    /// The next provider, tried after those added before it. The first is the primary:
    /// requests are addressed under its base URL.
    pub fn provider(mut self, provider: Provider) -> Self {
        self.providers.push(provider);
        self
    }

    /// The breakers' settings (threshold, cooldown, backoff, ...), the same for every
    /// provider; each breaker is named for its provider. Default: [`Builder::new`].
    pub fn breaker(mut self, breaker: Builder) -> Self {
        self.breaker = breaker;
        self
    }

    /// The retry policy inside each breaker; default: [`RetryBuilder::new`] (3 attempts,
    /// backoff from 500 ms to 8 s, `Retry-After` waited up to 5 s).
    pub fn retry(mut self, retry: RetryBuilder) -> Self {
        self.retry = Some(retry);
        self
    }

    /// No retries: each provider is called once per user call.
    pub fn no_retry(mut self) -> Self {
        self.retry = None;
        self
    }

    /// How long one attempt may take, its answer read whole included, before it fails
    /// (default 60 s). A response whose body is still being read then keeps its status
    /// and `Retry-After` for the breaker
    /// ([`BufferBodyLayer::timeout`](crate::http::BufferBodyLayer::timeout)).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Saved answers: at most `capacity`, each served for at most `max_age` (default
    /// 1,000 for an hour).
    pub fn saved_answers(mut self, capacity: usize, max_age: Duration) -> Self {
        self.saved = Some((capacity, max_age));
        self
    }

    /// No saved answers: with every provider down, the honest 503 only.
    pub fn no_saved_answers(mut self) -> Self {
        self.saved = None;
        self
    }

    /// When a provider's answer passes the call on to the next one (default
    /// [`HttpFailover::new`]).
    pub fn failover(mut self, failover: HttpFailover) -> Self {
        self.failover = failover;
        self
    }

    /// The largest answer read, in bytes (default
    /// [`DEFAULT_BUFFER_LIMIT`](crate::http::DEFAULT_BUFFER_LIMIT), 8 MiB). A larger
    /// answer is a failure of its provider, as a body that breaks off is
    /// ([`BodyTooLarge`](crate::http::BodyTooLarge)): counted by its breaker, retried and
    /// failed over; set it well above the answers you expect.
    pub fn max_answer_bytes(mut self, limit: usize) -> Self {
        self.buffer_limit = Some(limit);
        self
    }

    /// The client, over `client`; an error for a setting that is not valid.
    ///
    /// Give it a client that does not follow redirects,
    /// `reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build()?`:
    /// a provider's redirect is then its answer. One that follows them sends the request
    /// on to wherever a provider points, with headers reqwest does not drop (`x-api-key`)
    /// and past that server's breaker; such an answer from another origin fails its
    /// provider ([`Redirected`]) and the next one is tried.
    pub fn build(self, client: reqwest::Client) -> Result<LlmClient, LlmConfigError> {
        if self.timeout.is_zero() {
            return Err(LlmConfigError::ZeroTimeout);
        }
        if self.buffer_limit == Some(0) {
            return Err(LlmConfigError::ZeroMaxAnswerBytes);
        }
        let prepared = self
            .providers
            .iter()
            .map(Provider::check)
            .collect::<Result<Vec<_>, _>>()?;
        let Some(first) = prepared.first().cloned() else {
            return Err(FailoverConfigError::NoProviders.into());
        };
        let primary = first.base.clone();
        let prepared: Vec<_> = prepared
            .into_iter()
            .map(|p| p.for_primary(&first))
            .collect();
        let buffer = match self.buffer_limit {
            Some(limit) => BufferBodyLayer::new().limit(limit),
            None => BufferBodyLayer::new(),
        };
        // A failover that moves on after a 401 or 403 takes each provider's key to be its
        // own: its breaker counts them as failures, so a revoked key is passed with nothing
        // sent until a probe finds it works again. Its retries never repeat them.
        let classifier = HttpClassifier::new().auth_errors(self.failover.moves_on_auth_errors());
        let mut failover = Failover::builder::<_, reqwest::Request, BufferedResponse>();
        let mut handles = Vec::new();
        for (provider, prepared) in self.providers.iter().zip(prepared) {
            let breaker = self.breaker.clone().name(provider.name.clone()).build()?;
            let handle = breaker.handle();
            // No retry goes out once the breaker would skip a call (killed, forced open).
            let retry = match &self.retry {
                Some(retry) => Some(
                    retry
                        .clone()
                        .breaker(handle.clone())
                        .build()?
                        .with_classifier(HttpClassifier::new())
                        .keep_requests_with(reqwest::Request::try_clone as fn(&_) -> _),
                ),
                None => None,
            };
            // The buffer's own time limit, not a `timeout` layer outside it: one that cuts
            // a body's read keeps the head, so a 429 whose body stalls still opens the
            // breaker for the wait it asked for, and is not retried at once.
            let answered_here = {
                let (prepared, name) = (prepared.clone(), provider.name.clone());
                move |result: Result<BufferedResponse, BoxError>| {
                    prepared.answered_here(&name, result?)
                }
            };
            let service = ServiceBuilder::new()
                .layer(breaker.with_classifier(classifier))
                // Outside the retry: a redirect is not followed again by a retry.
                .map_result(answered_here)
                .option_layer(retry)
                .layer(buffer.timeout(self.timeout))
                .service(client.clone());
            let primary = primary.clone();
            failover = failover.provider_with(
                provider.name.clone(),
                handle.clone(),
                service,
                move |request: &reqwest::Request| prepared.prepare(&primary, request),
            );
            handles.push(handle);
        }
        let saved = self
            .saved
            .map(|(capacity, max_age)| SavedAnswers::new(capacity, max_age))
            .transpose()?;
        let fallback = {
            let saved = saved.clone();
            service_fn(move |unanswered: Unanswered<reqwest::Request>| {
                let answer = saved_answer(saved.as_ref(), &unanswered.request)
                    .unwrap_or_else(|| unavailable(&unanswered.route));
                async move { Ok::<_, Infallible>(answer) }
            })
        };
        let failover = failover.policy(self.failover).fallback(fallback).build()?;
        let routed = ServiceBuilder::new()
            .layer(RouteHeadersLayer::new())
            .service(failover);
        let service = match &saved {
            Some(saved) => {
                let save = SaveLayer::new(saved.clone(), request_key as fn(&_) -> _)
                    .only_if(|answer: &BufferedResponse| answer.status().is_success());
                let saving = ProvenanceLayer::new().layer_service(save.layer_service(routed));
                LlmService::new(Addressed::new(&primary, saving))
            }
            None => LlmService::new(Addressed::new(
                &primary,
                ProvenanceLayer::new().layer_service(routed),
            )),
        };
        Ok(LlmClient {
            service,
            handles,
            saved,
            primary,
        })
    }
}

/// `Layer::layer`, named for reading a stack inside out.
trait LayerService<S>: tower::Layer<S> {
    fn layer_service(&self, inner: S) -> Self::Service {
        self.layer(inner)
    }
}

impl<L: tower::Layer<S>, S> LayerService<S> for L {}

/// The same question: the method, the path (a chat completion's saved answer never
/// answers an embeddings call) with its query (`?api-version=`, a tenant: another query
/// may be another question), and the body (the model and the messages), byte for byte.
fn request_key(request: &reqwest::Request) -> Option<String> {
    let body = request.body()?.as_bytes()?;
    let (method, path) = (request.method(), request.url().path());
    let query = request.url().query().unwrap_or_default();
    Some(format!("{method} {path}?{query}\n{}", body_key(body)))
}

/// A body as a key holds it: `t` and its text, or, for a body that is not UTF-8 (Latin-1
/// text, bytes), `b` and its bytes in hex. Bodies that differ have different keys: read
/// as lossy UTF-8, `caf\xe9` and `caf\xe8` were one key, and one's saved answer was
/// served to the other.
fn body_key(body: &[u8]) -> String {
    match std::str::from_utf8(body) {
        Ok(text) => format!("t{text}"),
        Err(_) => {
            use std::fmt::Write as _;
            let mut key = String::with_capacity(1 + 2 * body.len());
            key.push('b');
            for byte in body {
                let _ = write!(key, "{byte:02x}");
            }
            key
        }
    }
}

/// The saved answer to the request, marked stale: `Age`, `x-circuit-breaker-stale`, and
/// a chat completion's content labelled.
fn saved_answer(
    saved: Option<&SavedAnswers<String, BufferedResponse>>,
    request: &reqwest::Request,
) -> Option<BufferedResponse> {
    let (answer, age) = saved?.serve(&request_key(request)?)?;
    Some(crate::http::stale(answer, age))
}

/// An honest 503: no provider answered, each one's reason, `Retry-After` when every
/// provider was skipped with a known time, and the code [`CALL_FAILED`] when a provider
/// was called and failed, [`CIRCUIT_OPEN`] when none was and a breaker skipped the call,
/// [`NOT_PREPARED`] when the request could be made for no provider (nothing was sent,
/// no breaker asked).
///
/// [`CALL_FAILED`]: crate::http::CALL_FAILED
/// [`CIRCUIT_OPEN`]: crate::http::CIRCUIT_OPEN
/// [`NOT_PREPARED`]: crate::http::NOT_PREPARED
fn unavailable(route: &Route) -> BufferedResponse {
    let why = |reason: fn(&PassReason) -> bool| route.passed().iter().any(|p| reason(p.why()));
    let code = if why(|why| matches!(why, PassReason::Failed(_))) {
        crate::http::CALL_FAILED
    } else if why(|why| matches!(why, PassReason::Skipped(_))) {
        crate::http::CIRCUIT_OPEN
    } else {
        crate::http::NOT_PREPARED
    };
    crate::http::unavailable::service_unavailable(&route.to_string(), code, route.retry_after())
}

/// An LLM client's stack, built: the service to call, every provider's breaker, and the
/// saved answers.
#[derive(Clone)]
pub struct LlmClient {
    service: LlmService,
    handles: Vec<CircuitBreakerHandle>,
    saved: Option<SavedAnswers<String, BufferedResponse>>,
    primary: String,
}

impl LlmClient {
    /// A builder: add providers, then [`build`](LlmClientBuilder::build).
    pub fn builder() -> LlmClientBuilder {
        LlmClientBuilder::default()
    }

    /// The service: a clone of it for each task. Call it with requests addressed under
    /// the first provider's base URL ([`url`](Self::url)).
    pub fn service(&self) -> LlmService {
        self.service.clone()
    }

    /// The first provider's base URL with `path` appended (`/chat/completions`).
    pub fn url(&self, path: &str) -> String {
        format!("{}/{}", self.primary, path.trim_start_matches('/'))
    }

    /// Every provider's breaker, in order: its kill switch, snapshot, force open,
    /// reset; give them to an `admin::Admin` service.
    pub fn handles(&self) -> &[CircuitBreakerHandle] {
        &self.handles
    }

    /// The provider's breaker, by name.
    pub fn handle(&self, provider: &str) -> Option<&CircuitBreakerHandle> {
        self.handles.iter().find(|handle| handle.name() == provider)
    }

    /// The saved answers, if kept.
    pub fn saved(&self) -> Option<&SavedAnswers<String, BufferedResponse>> {
        self.saved.as_ref()
    }
}

impl fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmClient")
            .field(
                "providers",
                &self
                    .handles
                    .iter()
                    .map(CircuitBreakerHandle::name)
                    .collect::<Vec<_>>(),
            )
            .field("primary", &self.primary)
            .field("saved", &self.saved.as_ref().map(SavedAnswers::len))
            .finish()
    }
}
