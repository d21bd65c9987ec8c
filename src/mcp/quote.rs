//! What a server said, made safe to show in our messages: quoted ([`quote`]: control
//! characters escaped, cut short), with what looks like a credential redacted
//! ([`said`]), and an rmcp error in our words ([`service_error`]).

use rmcp::ServiceError;

use crate::escape::escaped;

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
pub(crate) fn said(text: &str) -> String {
    quote(&crate::redact(&without_type_names(text)))
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

/// An rmcp error in our words, quoted safely.
pub(crate) fn service_error(error: &ServiceError) -> String {
    match error {
        ServiceError::McpError(data) => {
            format!("error {}: {}", data.code.0, said(&data.message))
        }
        ServiceError::TransportClosed => "the connection is closed".into(),
        other => said(&other.to_string()),
    }
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
}
