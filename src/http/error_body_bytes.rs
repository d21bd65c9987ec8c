//! [`ErrorBodyBytes`]: the start of an error response's body, kept for the classifier.

use bytes::Bytes;

/// The start of an error response's body, as read by [`ErrorBody`](super::ErrorBody): at
/// most its limit, so a longer body is cut short here (the caller's body is not).
///
/// [`HttpClassifier`](super::HttpClassifier) looks for it in the response's
/// extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorBodyBytes(pub Bytes);

impl ErrorBodyBytes {
    /// The bytes read.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}
