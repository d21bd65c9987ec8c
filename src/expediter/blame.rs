//! Whose fault a tool's error is: the tool's (it counts against the tool's breaker and
//! the failure budget) or the caller's (a path that does not exist, invalid arguments:
//! the tool is healthy and nothing is counted).
//!
//! Each tool in the capability map has a rule ([`ToolSpec::blame`]); by default
//! [`Blame::of`], which names the usual caller mistakes by their messages.
//!
//! ```
//! use tower_circuit_breaker::expediter::{Blame, ToolSpec};
//!
//! // The default: a missing file is the caller's mistake, a refused connection is not.
//! assert_eq!(Blame::of("read notes.md: No such file or directory (os error 2)"), Blame::Caller);
//! assert_eq!(Blame::of("connect 127.0.0.1:8080: Connection refused"), Blame::Tool);
//!
//! // A tool with its own caller errors, and the default for everything else.
//! let read = ToolSpec::new("read_file")
//!     .fallback("ask the user to paste the file")
//!     .blame(|message: &str| {
//!         if message.contains("not a path inside the workspace") {
//!             Blame::Caller
//!         } else {
//!             Blame::of(message)
//!         }
//!     });
//! # let _ = read;
//! ```
//!
//! [`ToolSpec::blame`]: super::ToolSpec::blame

use std::fmt;
use std::sync::Arc;

use crate::classify::Classify;
use crate::Outcome;

/// Whose fault an error of a tool is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Blame {
    /// The tool failed: the error counts against its breaker and the failure budget.
    Tool,
    /// The caller asked for something the tool cannot give (a path that does not
    /// exist, invalid arguments): the tool is healthy, and the error is neither a
    /// failure nor a success of the tool (its breaker ignores it).
    Caller,
}

/// Messages that say the caller asked for the wrong thing, matched on the lowercased
/// message. "command not found" is not among them: a missing program is the
/// environment's fault.
const CALLER_ERRORS: &[&str] = &[
    "no such file or directory",
    "enoent",
    "not a directory",
    "is a directory",
    "not found",
    "invalid argument",
    "invalid input",
    "invalid parameter",
    "einval",
    "bad request",
    "http 400",
    "http 404",
    "http 422",
    "status 400",
    "status 404",
    "status 422",
];

/// Messages that contain a caller error's words but are the tool's (or its
/// environment's) fault: a program, a library or a host the tool needs is missing.
const TOOL_ERRORS: &[&str] = &[
    "command not found",
    "executable not found",
    "executable file not found",
    "program not found",
    "library not found",
    "module not found",
    "host not found",
    "no such host",
];

impl Blame {
    /// The default rule: [`Blame::Caller`] when the message says the thing asked for
    /// does not exist ("no such file or directory", "not found", HTTP 404) or the
    /// request is malformed ("invalid argument", "bad request", HTTP 400 or 422);
    /// [`Blame::Tool`] for everything else, a missing program, library or host ("command
    /// not found", "executable file not found in $PATH", "host not found") included.
    pub fn of(message: &str) -> Blame {
        let lower = message.to_lowercase();
        let caller = CALLER_ERRORS.iter().any(|words| lower.contains(words))
            && !TOOL_ERRORS.iter().any(|words| lower.contains(words));
        if caller {
            Blame::Caller
        } else {
            Blame::Tool
        }
    }
}

/// A rule that says whose fault an error's message is.
pub(crate) type BlameRule = Arc<dyn Fn(&str) -> Blame + Send + Sync>;

/// The classifier of a tool's breaker ([`Expediter::layer`]): `Ok` is a success, and an
/// `Err` is a failure or ignored, as the tool's blame rule says of the error's text.
///
/// Replace it with
/// [`CircuitBreakerLayer::with_classifier`](crate::CircuitBreakerLayer::with_classifier)
/// when the tool's answers themselves can be failures (an HTTP client that answers
/// `Ok` with a 503, say); the tool's blame rule then no longer applies.
///
/// [`Expediter::layer`]: super::Expediter::layer
#[derive(Clone)]
pub struct ToolClassifier {
    rule: Option<BlameRule>,
}

impl ToolClassifier {
    pub(crate) fn new(rule: Option<BlameRule>) -> Self {
        ToolClassifier { rule }
    }

    fn blame(&self, message: &str) -> Blame {
        match &self.rule {
            Some(rule) => rule(message),
            None => Blame::of(message),
        }
    }
}

impl<Response, Error: fmt::Display> Classify<Response, Error> for ToolClassifier {
    fn classify(&self, result: &Result<Response, Error>) -> Outcome {
        match result {
            Ok(_) => Outcome::Success,
            Err(error) => {
                match self.blame(&error.to_string()) {
                    // The breaker names the failure by the error and its sources
                    // (`error sending request: Connection refused`): a cause in a source
                    // is what tells tools failing together apart from one failing alone.
                    Blame::Tool => Outcome::failure(),
                    Blame::Caller => Outcome::Ignored,
                }
            }
        }
    }
}

impl fmt::Debug for ToolClassifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolClassifier")
            .field(
                "rule",
                &if self.rule.is_some() {
                    "custom"
                } else {
                    "Blame::of"
                },
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_names_the_usual_caller_mistakes() {
        for message in [
            "read notes.md: No such file or directory (os error 2)",
            "GET /missing: HTTP 404",
            "model `gpt-9` not found",
            "invalid argument: --frobnicate",
            "HTTP 400 Bad Request",
        ] {
            assert_eq!(Blame::of(message), Blame::Caller, "{message}");
        }
        for message in [
            "connect 127.0.0.1:40404: Connection refused (os error 111)",
            "sh: rg: command not found",
            r#"exec: "rg": executable file not found in $PATH"#,
            "dial tcp: lookup api.internal: no such host",
            "ldd: libssl.so.3: library not found",
            "request timed out after 30s",
            "GET /search: HTTP 503",
            "open /etc/shadow: Permission denied",
        ] {
            assert_eq!(Blame::of(message), Blame::Tool, "{message}");
        }
    }

    #[test]
    fn a_caller_error_is_ignored_and_a_tool_error_is_a_failure_the_breaker_names() {
        let classifier = ToolClassifier::new(None);
        let missing: Result<(), std::io::Error> = Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no such file or directory",
        ));
        assert_eq!(classifier.classify(&missing), Outcome::Ignored);
        let refused: Result<(), std::io::Error> = Err(std::io::Error::other("connection refused"));
        // No message of its own: the breaker writes the error with its sources.
        assert_eq!(classifier.classify(&refused), Outcome::failure());
        let ok: Result<u8, std::io::Error> = Ok(1);
        assert_eq!(classifier.classify(&ok), Outcome::Success);
        let strict = ToolClassifier::new(Some(Arc::new(|_: &str| Blame::Tool)));
        assert!(strict.classify(&missing).is_failure());
    }
}
