//! The HTTP client a remote server's transport is given (feature `mcp-http`): reqwest's,
//! with every error it returns stripped of the URL it failed on.
//!
//! rmcp logs a failed request's error as it is, at `warn` and `error` level ("fail to get
//! common stream", "fail to delete session", "sse stream error"), and reqwest's error
//! text ends in `for url (...)`: the whole URL, query string (an API key) and all. With
//! the URL taken out of the error before rmcp sees it, no log line of rmcp's can carry
//! it. Errors in a response's body (an event stream that breaks) carry no URL in reqwest,
//! so the streams are handed on as they are.

use std::collections::HashMap;
use std::sync::Arc;

use super::quote::Secrets;
use super::refusal;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

/// How many same-origin redirects a request follows.
const MAX_REDIRECTS: usize = 10;

/// reqwest's client, whose errors never name the URL, nor what the server was given
/// (its [`Secrets`]: a server may say its headers back in an error).
#[derive(Debug, Clone)]
pub(crate) struct UrlFreeClient {
    client: reqwest::Client,
    secrets: Secrets,
}

impl UrlFreeClient {
    /// A client as rmcp makes its own: no idle connections kept (a response not read to
    /// its end would stall the next request on it), and only redirects that keep the
    /// request whole (307, 308) to the same origin followed, so a message is never
    /// dropped and the session and headers never go to another host.
    pub(crate) fn new(secrets: Secrets) -> Result<Self, reqwest::Error> {
        let redirects = reqwest::redirect::Policy::custom(|attempt| {
            let keeps_the_body = matches!(attempt.status().as_u16(), 307 | 308);
            let same_origin = attempt
                .previous()
                .first()
                .is_some_and(|first| first.origin() == attempt.url().origin());
            if !keeps_the_body || !same_origin {
                attempt.stop()
            } else if attempt.previous().len() > MAX_REDIRECTS {
                attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
            } else {
                attempt.follow()
            }
        });
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(redirects)
            .build()?;
        Ok(UrlFreeClient { client, secrets })
    }

    /// The error with reqwest's URL taken out of it (the only variant that holds one),
    /// and the server's secrets out of what it answered (an HTTP error's body).
    fn url_free<T>(
        &self,
        result: Result<T, StreamableHttpError<reqwest::Error>>,
    ) -> Result<T, StreamableHttpError<reqwest::Error>> {
        result.map_err(|error| match error {
            StreamableHttpError::Client(error) => StreamableHttpError::Client(error.without_url()),
            StreamableHttpError::UnexpectedServerResponse(text) => {
                StreamableHttpError::UnexpectedServerResponse(
                    self.secrets.scrubbed(&text).into_owned().into(),
                )
            }
            other => other,
        })
    }
}

/// Each method forwards to reqwest's implementation (so its size limits apply), and
/// takes the URL out of its error; a POST's answer that is a refusal naming no request is
/// read as [`refusal`] says.
impl StreamableHttpClient for UrlFreeClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        let (awaits, in_session) = (refusal::awaits_answer(&message), session_id.is_some());
        let answer = self
            .client
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await;
        refusal::read(&self.secrets, awaits, in_session, self.url_free(answer))
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        let (awaits, in_session) = (refusal::awaits_answer(&message), session_id.is_some());
        let answer = self
            .client
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        refusal::read(&self.secrets, awaits, in_session, self.url_free(answer))
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        let (awaits, in_session) = (refusal::awaits_answer(&message), session_id.is_some());
        let answer = self
            .client
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        refusal::read(&self.secrets, awaits, in_session, self.url_free(answer))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<reqwest::Error>> {
        self.url_free(
            self.client
                .delete_session(uri, session_id, auth_header, custom_headers)
                .await,
        )
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxedSseResponse, StreamableHttpError<reqwest::Error>> {
        self.url_free(
            self.client
                .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
                .await,
        )
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxedSseResponse, StreamableHttpError<reqwest::Error>> {
        self.url_free(
            self.client
                .get_stream_with_max_sse_event_size(
                    uri,
                    session_id,
                    last_event_id,
                    auth_header,
                    custom_headers,
                    max_sse_event_size,
                )
                .await,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_connection_fails_without_naming_the_url() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let client = UrlFreeClient::new(Secrets::default()).expect("a client");
        let error = client
            .delete_session(
                format!("http://127.0.0.1:{port}/mcp?key=SECRET").into(),
                "session".into(),
                None,
                HashMap::new(),
            )
            .await
            .expect_err("nothing listens there");
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(
            matches!(&error, StreamableHttpError::Client(e) if e.is_connect()),
            "{shown}"
        );
    }
}
