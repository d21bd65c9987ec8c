//! The model behind a breaker: rig's HTTP client stacked under a circuit breaker.

use std::fmt;
use std::future::Future;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use rig_core::http_client::multipart::MultipartForm;
use rig_core::http_client::{
    Error as HttpError, HttpClientExt, LazyBody, Result as HttpResult, StreamingResponse,
};
use rig_core::wasm_compat::WasmCompatSend;
use tower::{BoxError, Layer, ServiceExt, service_fn};
use tower_circuit_breaker::classify::Classify;
use tower_circuit_breaker::fallback::NoFallback;
use tower_circuit_breaker::{CircuitBreakerHandle, CircuitBreakerLayer, Outcome};

/// An HTTP client for rig whose every request goes through one circuit breaker: the
/// model's endpoint. Give it to a provider's configuration as you would the client it
/// wraps (`OpenAIConfig::connect(BreakerHttpClient::new(client, breaker))`).
///
/// What counts against the breaker: a request that got no answer (connection refused,
/// reset, timeout) and an error status, except a refused request (4xx other than 401,
/// 403, 408 and 429: the endpoint is up, the request was wrong), which is not counted. A
/// streamed reply is judged when it opens: a stream that breaks later is not counted.
/// While the breaker is open, a request fails at once, with no connection made, with an
/// error whose source is the breaker's
/// [`Rejected`](tower_circuit_breaker::error::Rejected) (it says when the model is
/// tried again); rig reports it as a provider error and the run fails rather than wait.
///
/// ```
/// use rig_core::providers::openai::OpenAIConfig;
/// use tower_circuit_breaker::CircuitBreakerLayer;
/// use tower_circuit_breaker_rig::BreakerHttpClient;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let breaker = CircuitBreakerLayer::builder().name("model").failure_threshold(3).build()?;
/// let http = BreakerHttpClient::new(rig_reqwest::ReqwestClient::default(), breaker);
/// let handle = http.handle(); // snapshot, kill switch, force_open, reset
/// let model = OpenAIConfig::new("sk-...")
///     .with_base_url("http://127.0.0.1:8080/v1")
///     .connect(http)
///     .chat("gpt-4o-mini");
/// # let _ = (model, handle);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct BreakerHttpClient<H> {
    http: H,
    breaker: CircuitBreakerLayer<NoFallback, ModelClassifier>,
}

impl<H> BreakerHttpClient<H> {
    /// `http` behind `breaker` (its settings, name, kill switch and observers are the
    /// layer's; its classifier is [`ModelClassifier`]).
    pub fn new(http: H, breaker: CircuitBreakerLayer) -> Self {
        BreakerHttpClient {
            http,
            breaker: breaker.with_classifier(ModelClassifier),
        }
    }

    /// The breaker's handle: its state, its kill switch, and an operator's acts.
    pub fn handle(&self) -> CircuitBreakerHandle {
        self.breaker.handle()
    }
}

impl<H> fmt::Debug for BreakerHttpClient<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerHttpClient")
            .field("breaker", &self.breaker.handle().name())
            .finish_non_exhaustive()
    }
}

impl<H> BreakerHttpClient<H>
where
    H: Clone + WasmCompatSend + Sync + 'static,
{
    /// Sends one request through the breaker: `send` is the wrapped client's call.
    fn through<Req, Resp, Fut>(
        &self,
        request: Req,
        send: impl Fn(H, Req) -> Fut + Send + Sync + 'static,
    ) -> impl Future<Output = HttpResult<Resp>> + WasmCompatSend + 'static
    where
        Req: Send + 'static,
        Resp: Send + 'static,
        Fut: Future<Output = HttpResult<Resp>> + Send + 'static,
    {
        let http = self.http.clone();
        let service = self
            .breaker
            .layer(service_fn(move |request: Req| send(http.clone(), request)));
        async move {
            match service.oneshot(request).await {
                Ok(answer) => Ok(answer.into_inner()),
                Err(error) => Err(into_http_error(error)),
            }
        }
    }
}

/// The wrapped client's own error as it was; the breaker's rejection as a transport error
/// whose source is the [`Rejected`](tower_circuit_breaker::error::Rejected).
fn into_http_error(error: BoxError) -> HttpError {
    match error.downcast::<HttpError>() {
        Ok(own) => *own,
        Err(other) => HttpError::Instance(other),
    }
}

impl<H> HttpClientExt for BreakerHttpClient<H>
where
    H: HttpClientExt + Clone + WasmCompatSend + Sync + 'static,
{
    fn send<T, U>(
        &self,
        req: Request<T>,
    ) -> impl Future<Output = HttpResult<Response<LazyBody<U>>>> + WasmCompatSend + 'static
    where
        T: Into<Bytes> + WasmCompatSend,
        U: From<Bytes> + WasmCompatSend + 'static,
    {
        let req = req.map(Into::<Bytes>::into);
        self.through(req, |http: H, req: Request<Bytes>| async move {
            http.send::<Bytes, U>(req).await
        })
    }

    fn send_multipart<U>(
        &self,
        req: Request<MultipartForm>,
    ) -> impl Future<Output = HttpResult<Response<LazyBody<U>>>> + WasmCompatSend + 'static
    where
        U: From<Bytes> + WasmCompatSend + 'static,
    {
        self.through(req, |http: H, req| async move {
            http.send_multipart::<U>(req).await
        })
    }

    fn send_streaming<T>(
        &self,
        req: Request<T>,
    ) -> impl Future<Output = HttpResult<StreamingResponse>> + WasmCompatSend
    where
        T: Into<Bytes> + WasmCompatSend,
    {
        let req = req.map(Into::<Bytes>::into);
        self.through(req, |http: H, req: Request<Bytes>| async move {
            http.send_streaming(req).await
        })
    }
}

/// How a model endpoint's answers count (see [`BreakerHttpClient`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelClassifier;

impl<R> Classify<R, HttpError> for ModelClassifier {
    fn classify(&self, result: &Result<R, HttpError>) -> Outcome {
        match result {
            Ok(_) => Outcome::Success,
            Err(HttpError::InvalidStatusCodeWithDetails { status, .. }) if refused(*status) => {
                Outcome::Ignored
            }
            Err(_) => Outcome::failure(),
        }
    }
}

/// A status that says the request was wrong, not that the endpoint is down.
fn refused(status: StatusCode) -> bool {
    status.is_client_error()
        && !matches!(
            status,
            StatusCode::UNAUTHORIZED
                | StatusCode::FORBIDDEN
                | StatusCode::REQUEST_TIMEOUT
                | StatusCode::TOO_MANY_REQUESTS
        )
}
