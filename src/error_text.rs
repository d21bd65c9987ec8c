//! The text of an error and its sources, as one line.

/// The error's text followed by its sources, skipping a source whose text is already
/// there: a transport error's own text often names only the URL
/// (`error sending request for url (...): ...: Connection refused (os error 111)`).
/// Not redacted here: a failure's message is redacted as the [`Failure`](crate::Failure)
/// is made, the one way a text enters the breaker; a text shown elsewhere goes through
/// [`redact`](crate::redact) itself.
pub(crate) fn text_with_sources(error: &(dyn std::error::Error + 'static)) -> String {
    use std::fmt::Write as _;
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            let _ = write!(message, ": {text}");
        }
        source = cause.source();
    }
    message
}
