//! A remote server reached over Streamable HTTP (feature `mcp-http`): its URL, the
//! headers sent with every request (never shown), the transport made for each session,
//! and what its transport's errors mean.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::{DynamicTransportError, StreamableHttpClientTransport};

use crate::redact;

use super::error::McpConfigError;
use super::quote::{quote, Secrets};
use super::url_free_client::UrlFreeClient;
use crate::redact::REDACTED;

/// Headers the MCP transport sets itself: a header of the caller's by one of these names
/// would fail every request, or (`Mcp-Protocol-Version`) contradict the version the
/// handshake agreed on.
const RESERVED: [&str; 4] = [
    "accept",
    "mcp-session-id",
    "last-event-id",
    "mcp-protocol-version",
];

/// How many times a broken event stream is resumed before the call it answers fails.
const STREAM_RESUMES: usize = 2;

/// Where a remote server is, and what is sent to it besides its messages.
#[derive(Clone)]
pub(crate) struct Remote {
    url: Arc<str>,
    /// Header names and values, as given; checked when the server is started.
    headers: Vec<(String, String)>,
    bearer: Option<String>,
}

impl Remote {
    pub(crate) fn new(url: &str) -> Self {
        Remote {
            url: url.into(),
            headers: Vec::new(),
            bearer: None,
        }
    }

    pub(crate) fn header(&mut self, name: &str, value: &str) {
        self.headers.push((name.to_string(), value.to_string()));
    }

    pub(crate) fn bearer_token(&mut self, token: &str) {
        self.bearer = Some(token.to_string());
    }

    /// Its header values and bearer token: what it must never be shown saying back.
    pub(crate) fn secrets(&self) -> Vec<String> {
        let values = self.headers.iter().map(|(_, value)| value.clone());
        values.chain(self.bearer.clone()).collect()
    }

    /// The URL as it may be shown: its user information and query string redacted.
    pub(crate) fn shown(&self) -> String {
        redact(&self.url).into_owned()
    }

    /// The URL must be `http` or `https` with a host; each header a valid, unreserved
    /// name and a valid value. No message quotes a header's value or the URL's secrets.
    pub(crate) fn validate(&self, server: &str) -> Result<(), McpConfigError> {
        let url_error = |why: &str| McpConfigError::Url {
            server: server.to_string(),
            url: self.shown(),
            why: why.to_string(),
        };
        let url = reqwest::Url::parse(&self.url).map_err(|e| url_error(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(url_error("only http and https URLs are served"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(url_error("it has no host"));
        }
        self.custom_headers(server).map(|_| ())
    }

    fn custom_headers(
        &self,
        server: &str,
    ) -> Result<HashMap<HeaderName, HeaderValue>, McpConfigError> {
        let mut headers = HashMap::new();
        for (name, value) in &self.headers {
            let header_error = |why: &str| McpConfigError::Header {
                server: server.to_string(),
                name: quote(name),
                why: why.to_string(),
            };
            let parsed = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| header_error("not a valid header name"))?;
            if RESERVED.contains(&parsed.as_str()) {
                return Err(header_error("the MCP transport sets it itself"));
            }
            if parsed == http::header::AUTHORIZATION && self.bearer.is_some() {
                return Err(header_error("a bearer token is set as well"));
            }
            let mut value = HeaderValue::from_str(value)
                .map_err(|_| header_error("its value is not a valid header value"))?;
            value.set_sensitive(true);
            // reqwest's `RequestBuilder::header` given a name twice sends both values;
            // the transport sends one value a name, so keeping either would be a guess.
            if headers.insert(parsed, value).is_some() {
                return Err(header_error(
                    "it is given twice, and only one value is sent",
                ));
            }
        }
        Ok(headers)
    }

    /// A new transport, for one session: rmcp's Streamable HTTP client over reqwest
    /// (whose errors, which rmcp logs, never name the URL), with no session recovery of
    /// its own (a session the server forgot is its supervisor's to make again, through
    /// the breaker's probe, and a call is never sent twice) and messages bounded by
    /// `max_message_bytes`.
    pub(crate) fn transport(
        &self,
        server: &str,
        max_message_bytes: usize,
    ) -> Result<StreamableHttpClientTransport<UrlFreeClient>, McpConfigError> {
        let mut config = StreamableHttpClientTransportConfig::with_uri(self.url.clone())
            .custom_headers(self.custom_headers(server)?)
            .reinit_on_expired_session(false)
            .max_sse_event_size(max_message_bytes)
            .max_json_response_size(max_message_bytes);
        // An answer's event stream that breaks is resumed (a GET from its last event, not
        // the call sent again) at most twice, within half a second: a server that died
        // fails the call at once rather than after the call timeout.
        let mut resume = ExponentialBackoff::default();
        resume.max_times = Some(STREAM_RESUMES);
        resume.base_duration = Duration::from_millis(100);
        resume.max_delay = Some(Duration::from_millis(400));
        config.retry_config = Arc::new(resume);
        if let Some(token) = &self.bearer {
            config = config.auth_header(token.clone());
        }
        let client =
            UrlFreeClient::new(Secrets::new(self.secrets())).map_err(|e| McpConfigError::Url {
                server: server.to_string(),
                url: self.shown(),
                why: format!("no HTTP client could be made: {}", e.without_url()),
            })?;
        Ok(StreamableHttpClientTransport::with_client(client, config))
    }
}

/// Names and the redacted URL only: header values and the bearer token never.
impl fmt::Debug for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Remote")
            .field("url", &self.shown())
            .field("headers", &names)
            .field("bearer_token", &self.bearer.as_ref().map(|_| REDACTED))
            .finish()
    }
}

/// What a request that could not be sent, or whose answer could not be read, came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendFailure {
    /// The server answered 404 to the session: it forgot it (it restarted, or expired
    /// it). It did not run the request.
    SessionExpired,
    /// It answered with what is not an MCP message: the wrong content type, JSON that
    /// is not JSON-RPC, an event stream that broke its format.
    Garbage,
    /// The connection broke after the request was sent, before its answer was whole:
    /// the server may have run it (it most likely died under it).
    Lost,
    /// No connection could be made (refused): the request was not sent, and the server
    /// is down.
    Unreachable,
    /// Anything else: a connection that could not be made for another reason (a name
    /// that did not resolve, a TLS handshake), an HTTP error status.
    Transport,
}

/// When a failed handshake is a server that could not be reached ([`refused`]), why, with
/// the causes (`Connection refused`).
pub(crate) fn unreachable(error: &rmcp::service::ClientInitializeError) -> Option<String> {
    let rmcp::service::ClientInitializeError::TransportError { error, .. } = error else {
        return None;
    };
    unreachable_cause(error)
}

/// When a request could not be sent because the server could not be reached
/// ([`refused`]), why, with the causes.
pub(crate) fn unreachable_cause(error: &DynamicTransportError) -> Option<String> {
    match error
        .error
        .downcast_ref::<StreamableHttpError<reqwest::Error>>()
    {
        Some(StreamableHttpError::Client(error)) if refused(error) => {
            Some(crate::error_text::text_with_sources(error))
        }
        _ => None,
    }
}

/// Whether a connection could not be made because the server is down: refused, reset as
/// it was made, its host or network unreachable, or timed out. Not a name that did not
/// resolve, a TLS handshake or a proxy that failed: those are mistakes that do not pass.
fn refused(error: &reqwest::Error) -> bool {
    use std::io::ErrorKind;
    if !error.is_connect() {
        return false;
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = cause {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                ErrorKind::ConnectionRefused
                    | ErrorKind::ConnectionReset
                    | ErrorKind::HostUnreachable
                    | ErrorKind::NetworkUnreachable
                    | ErrorKind::TimedOut
            );
        }
        cause = error.source();
    }
    false
}

impl SendFailure {
    pub(crate) fn of(error: &DynamicTransportError) -> SendFailure {
        match error
            .error
            .downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            Some(StreamableHttpError::SessionExpired) => SendFailure::SessionExpired,
            Some(
                StreamableHttpError::Deserialize(_)
                | StreamableHttpError::UnexpectedContentType(_)
                | StreamableHttpError::UnexpectedServerResponse(_)
                | StreamableHttpError::UnexpectedEndOfStream
                | StreamableHttpError::Sse(_),
            ) => SendFailure::Garbage,
            Some(StreamableHttpError::Client(error)) if refused(error) => SendFailure::Unreachable,
            Some(StreamableHttpError::Client(error))
                if (error.is_request() || error.is_body())
                    && !error.is_connect()
                    && !error.is_timeout() =>
            {
                SendFailure::Lost
            }
            _ => SendFailure::Transport,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_show_in_debug_or_in_errors() {
        let mut remote = Remote::new("https://bob:hunter2@mcp.example.com/mcp?key=SECRET");
        remote.header("X-Api-Key", "sk-HEADER");
        remote.bearer_token("sk-BEARER");
        let shown = format!("{remote:?}");
        for secret in ["hunter2", "SECRET", "sk-HEADER", "sk-BEARER"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(shown.contains("X-Api-Key"), "{shown}");
        assert_eq!(remote.validate("s"), Ok(()));

        remote.header("Bad Name", "sk-VALUE");
        let error = remote.validate("s").unwrap_err().to_string();
        assert!(!error.contains("sk-VALUE"), "{error}");
        assert!(error.contains("Bad Name"), "{error}");
    }

    #[test]
    fn a_header_given_twice_is_refused_without_showing_either_value() {
        let mut remote = Remote::new("http://127.0.0.1:1/mcp");
        remote.header("X-Api-Key", "sk-FIRST");
        remote.header("x-api-key", "sk-SECOND");
        let error = remote.validate("s").unwrap_err();
        assert!(
            matches!(&error, McpConfigError::Header { name, .. } if name.contains("x-api-key"))
        );
        let shown = error.to_string();
        assert!(shown.contains("twice"), "{shown}");
        assert!(
            !shown.contains("sk-FIRST") && !shown.contains("sk-SECOND"),
            "{shown}"
        );
    }

    #[test]
    fn a_url_must_be_http_with_a_host_and_reserved_headers_are_refused() {
        for url in ["ftp://example.com/mcp", "not a url", "http://"] {
            assert!(
                matches!(
                    Remote::new(url).validate("s"),
                    Err(McpConfigError::Url { .. })
                ),
                "{url}"
            );
        }
        let mut remote = Remote::new("http://127.0.0.1:1/mcp");
        remote.header("Mcp-Session-Id", "x");
        assert!(matches!(
            remote.validate("s"),
            Err(McpConfigError::Header { .. })
        ));
        let mut remote = Remote::new("http://127.0.0.1:1/mcp");
        remote.header("MCP-Protocol-Version", "2024-11-05");
        assert!(matches!(
            remote.validate("s"),
            Err(McpConfigError::Header { .. })
        ));
        let mut remote = Remote::new("http://127.0.0.1:1/mcp");
        remote.header("Authorization", "Basic x");
        remote.bearer_token("t");
        assert!(matches!(
            remote.validate("s"),
            Err(McpConfigError::Header { .. })
        ));
    }
}
