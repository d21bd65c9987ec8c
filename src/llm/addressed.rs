//! [`NotUnderBaseUrl`]: a request the client has no provider for, refused before any is
//! tried.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tower::{BoxError, Service};

use super::provider::under;
use crate::redact;

/// A request addressed elsewhere than under the first provider's base URL (make it with
/// [`LlmClient::url`](super::LlmClient::url)): the caller's mistake, refused before any
/// provider is tried. No breaker counts it and no saved answer is served for it. Both
/// URLs are shown with their user information and query string redacted.
///
/// ```
/// use tower::{Service, ServiceExt};
/// use tower_circuit_breaker::llm::{LlmClient, NotUnderBaseUrl, Provider};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let llm = LlmClient::builder()
///     .provider(Provider::new("local", "http://127.0.0.1:11434/v1"))
///     .build(reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build()?)?;
/// let request = reqwest::Client::new()
///     .post("http://127.0.0.1:11434/v1beta/chat/completions?key=SECRET")
///     .body("{}")
///     .build()?;
/// let error = llm.service().ready().await?.call(request).await.unwrap_err();
/// let error = error.downcast_ref::<NotUnderBaseUrl>().expect("refused");
/// assert_eq!(error.base(), "http://127.0.0.1:11434/v1");
/// assert!(!error.to_string().contains("SECRET"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[error("the request's URL {url} is not under the first provider's base URL {base}: address it with LlmClient::url")]
pub struct NotUnderBaseUrl {
    url: String,
    base: String,
}

impl NotUnderBaseUrl {
    /// The request's URL, redacted.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The first provider's base URL, redacted.
    pub fn base(&self) -> &str {
        &self.base
    }
}

/// Refuses a request not under `base` with [`NotUnderBaseUrl`]; hands the others on.
#[derive(Clone)]
pub(super) struct Addressed<S> {
    base: Arc<str>,
    inner: S,
}

impl<S> Addressed<S> {
    pub(super) fn new(base: &str, inner: S) -> Self {
        Addressed {
            base: base.into(),
            inner,
        }
    }
}

impl<S, R> Service<reqwest::Request> for Addressed<S>
where
    S: Service<reqwest::Request, Response = R, Error = BoxError>,
{
    type Response = R;
    type Error = BoxError;
    type Future = AddressedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: reqwest::Request) -> Self::Future {
        if under(&self.base, request.url().as_str()).is_none() {
            let refused = NotUnderBaseUrl {
                url: redact(request.url().as_str()).into_owned(),
                base: redact(&self.base).into_owned(),
            };
            return AddressedFuture::Refused {
                refused: Some(refused),
            };
        }
        AddressedFuture::Sent {
            future: self.inner.call(request),
        }
    }
}

pin_project! {
    /// The inner service's future, or the refusal.
    #[project = AddressedProj]
    pub(super) enum AddressedFuture<F> {
        Refused { refused: Option<NotUnderBaseUrl> },
        Sent { #[pin] future: F },
    }
}

impl<F, R> Future for AddressedFuture<F>
where
    F: Future<Output = Result<R, BoxError>>,
{
    type Output = Result<R, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            AddressedProj::Refused { refused } => {
                let refused = refused.take().expect("polled after completion");
                Poll::Ready(Err(refused.into()))
            }
            AddressedProj::Sent { future } => future.poll(cx),
        }
    }
}
