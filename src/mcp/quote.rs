//! What a server said, made safe to show in our messages: quoted ([`quote`]: control
//! characters escaped, cut short), with what looks like a credential redacted
//! ([`said`]), and an rmcp error in our words ([`service_error`]).

use rmcp::ServiceError;

/// The longest message quoted from the server (and the longest stderr line kept).
pub(crate) const MAX_QUOTE: usize = 300;

/// At most [`MAX_QUOTE`] characters of what a server said, control characters escaped.
pub(crate) fn quote(text: &str) -> String {
    let cleaned: String = text
        .chars()
        .flat_map(|c| {
            if c.is_control() && c != '\t' {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect();
    match cleaned.char_indices().nth(MAX_QUOTE) {
        Some((end, _)) => format!("{}…", &cleaned[..end]),
        None => cleaned,
    }
}

/// What the server or its transport said, quoted, with what looks like a credential
/// redacted (an HTTP client's error names the URL it failed on, query string and all).
pub(crate) fn said(text: &str) -> String {
    quote(&crate::redact(text))
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
