//! What a server said, made safe to show in our messages: quoted ([`quote`]: control
//! characters escaped, cut short), with what looks like a credential redacted and what
//! the server was given to keep secret taken out ([`Secrets::said`]), and an rmcp error
//! in our words ([`Secrets::service_error`]).

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use rmcp::ServiceError;

use crate::escape::escaped;
use crate::redact::REDACTED;

/// The longest message quoted from the server (and the longest stderr line kept).
pub(crate) const MAX_QUOTE: usize = 300;

/// At most [`MAX_QUOTE`] characters of what a server said, control characters escaped.
pub(crate) fn quote(text: &str) -> String {
    let cleaned = escaped(text, |c| c.is_control() && c != '\t');
    match cleaned.char_indices().nth(MAX_QUOTE) {
        Some((end, _)) => format!("{}…", &cleaned[..end]),
        None => cleaned.into_owned(),
    }
}

/// What the server or its transport said, quoted, with what looks like a credential
/// redacted (an HTTP client's error names the URL it failed on, query string and all).
/// Only through [`Secrets::said`], which first takes out what the server was given.
fn said(text: &str) -> String {
    quote(&crate::redact(&without_type_names(text)))
}

/// The shortest value looked for in what a server says: a shorter one cannot be told
/// from ordinary text (a header `X-Debug: 1` would take every `1` out of every message),
/// and is no credential.
pub(crate) const MIN_SECRET_CHARS: usize = 4;

/// What one server was given that it may say back and that must never show: a remote
/// server's header values and bearer token, the values of a stdio server's secret
/// command-line flags (`--token …`, `--api-key=…`). Every text of the server's that is
/// shown (its errors, its stderr, its transport's) goes through [`Secrets::said`]: the
/// one place where what it said is made safe to show.
#[derive(Clone, Default)]
pub(crate) struct Secrets(Arc<[Box<str>]>);

impl Secrets {
    /// The secrets among `values`: those of at least [`MIN_SECRET_CHARS`] characters,
    /// the longest first (so that one holding another is taken out whole).
    pub(crate) fn new(values: impl IntoIterator<Item = String>) -> Self {
        let mut kept: Vec<Box<str>> = values
            .into_iter()
            .filter(|v| v.chars().count() >= MIN_SECRET_CHARS)
            .map(String::into_boxed_str)
            .collect();
        kept.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        kept.dedup();
        Secrets(kept.into())
    }

    /// `text` with every secret in it replaced by `[redacted]`.
    pub(crate) fn scrubbed<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut text = Cow::Borrowed(text);
        for secret in self.0.iter() {
            if text.contains(&**secret) {
                text = Cow::Owned(text.replace(&**secret, REDACTED));
            }
        }
        text
    }

    /// What the server or its transport said, as it may be shown: its secrets taken
    /// out, what looks like a credential redacted ([`crate::redact`]), quoted
    /// ([`quote`]).
    pub(crate) fn said(&self, text: &str) -> String {
        said(&self.scrubbed(text))
    }

    /// An rmcp error in our words, as it may be shown.
    pub(crate) fn service_error(&self, error: &ServiceError) -> String {
        match error {
            ServiceError::McpError(data) => {
                format!("error {}: {}", data.code.0, self.said(&data.message))
            }
            ServiceError::TransportClosed => "the connection is closed".into(),
            other => self.said(&other.to_string()),
        }
    }
}

/// How many there are, never what they are.
impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secrets({})", self.0.len())
    }
}

/// rmcp names its transport by its Rust type in an error ("Transport
/// [rmcp::transport::worker::WorkerTransport<...>] error: error sending request"): a name
/// that tells the reader nothing, and fills the quote. It is left out.
fn without_type_names(text: &str) -> String {
    const START: &str = "Transport [";
    const END: &str = "] error: ";
    let mut kept = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(START) {
        let Some(end) = rest[start..].find(END) else {
            break;
        };
        kept.push_str(&rest[..start]);
        kept.push_str("transport error: ");
        rest = &rest[start + end + END.len()..];
    }
    kept.push_str(rest);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transport_error_is_shown_without_the_transports_rust_type() {
        let rmcp = "Send message error Transport [rmcp::transport::worker::WorkerTransport<\
            rmcp::transport::streamable_http_client::StreamableHttpClientWorker<Client>>] \
            error: Client error: error sending request, when send initialize request";
        assert_eq!(
            said(rmcp),
            "Send message error transport error: Client error: error sending request, \
             when send initialize request"
        );
        assert_eq!(said("Transport [unclosed"), "Transport [unclosed");
        assert_eq!(said("plain"), "plain");
    }

    #[test]
    fn what_a_server_was_given_never_shows_in_what_it_says() {
        let secrets = Secrets::new(["HEADERSECRET".to_string(), "HEADER".into(), "1".into()]);
        assert_eq!(
            secrets.said("rejected x-api-key=HEADERSECRET and HEADER, code 1"),
            "rejected x-api-key=[redacted] and [redacted], code 1"
        );
        // Pattern redaction still applies, and the quote is cut after the secrets went.
        let long = format!("{} HEADERSECRET", "x".repeat(MAX_QUOTE - 5));
        assert!(!secrets.said(&long).contains("HEADER"));
        assert_eq!(
            Secrets::default().said("Bearer sk-1 https://u:p@h/"),
            "Bearer [redacted] https://[redacted]@h/"
        );
        assert_eq!(format!("{secrets:?}"), "Secrets(2)");
    }
}
