//! [`KeptHead`]: what the breaker needs of a response's head whose body was not read
//! whole.

use std::time::Duration;

use ::http::{HeaderMap, StatusCode};

use super::retry_after::requested_wait;

/// What the breaker needs of a response's head, kept by the error of a call whose body
/// was not read whole (a [`BodyTooLarge`](super::BodyTooLarge), a
/// [`BodyBrokeOff`](super::BodyBrokeOff)): the status, and the wait the response asked
/// for ([`requested_wait`]) when it arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct KeptHead {
    pub(super) status: StatusCode,
    pub(super) retry_after: Option<Duration>,
}

impl KeptHead {
    /// What is kept of the head with `status` and `headers`.
    pub(super) fn of(status: StatusCode, headers: &HeaderMap) -> Self {
        KeptHead {
            status,
            retry_after: requested_wait(status, headers),
        }
    }
}
