//! What can go wrong in a fleet: bad settings when it is built, and operator commands
//! that could not reach Redis.

use std::sync::Arc;
use std::time::Instant;

use super::act::KillAct;

/// An error of the fleet layer: a setting or name that cannot work (returned when the
/// fleet is built or something is shared with it), or a command that could not reach
/// Redis.
///
/// Nothing here is ever returned by a call through a breaker: calls are decided locally
/// and never wait on Redis.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    /// The Redis address or its settings could not be understood.
    #[error("bad redis address: {reason}")]
    BadAddress {
        /// What the client said.
        reason: String,
    },
    /// A setting that cannot work (a zero duration, a limit too small).
    #[error("bad fleet setting `{setting}`: {reason}")]
    BadSetting {
        /// The builder method.
        setting: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// A name (key prefix, replica, kill switch or breaker) that cannot be used in keys
    /// and messages.
    #[error("bad {what} name {name:?}: {reason}")]
    BadName {
        /// `prefix`, `replica`, `kill switch` or `breaker`.
        what: &'static str,
        /// The name.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// TLS was asked for, but the crate was built without the `fleet-tls` feature.
    #[error("TLS to redis needs the `fleet-tls` feature")]
    TlsNotBuilt,
    /// TLS was asked for, but no rustls crypto provider is installed: install one
    /// (`rustls::crypto::ring::default_provider().install_default()`, or aws-lc-rs's)
    /// before starting the fleet.
    #[error("TLS to redis needs a rustls crypto provider installed first")]
    NoCryptoProvider,
    /// The fleet was started outside a tokio runtime.
    #[error("the fleet must be started inside a tokio runtime")]
    NoRuntime,
    /// Another kill switch or breaker is already shared under this name.
    #[error("another {what} is already shared as {name:?}")]
    NameTaken {
        /// `kill switch` or `breaker`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// The kill switch is already shared under another name. One switch follows one
    /// name: under two, a flip heard for one would be published for the other, and kill
    /// it on every replica.
    #[error("this kill switch is already shared as {shared_as:?}, not {name:?}")]
    SharedAs {
        /// The name asked for.
        name: String,
        /// The name it is shared under.
        shared_as: String,
    },
    /// Redis is not reachable. A kill or revive was applied on this replica at once and is
    /// kept: it is written to Redis when the link comes back, unless a later act was made
    /// meanwhile ([`FleetEvent::Written`](super::FleetEvent::Written) or
    /// [`FleetEvent::Overridden`](super::FleetEvent::Overridden) tells which). A sync was
    /// not done.
    #[error("the fleet's link to redis is down (for {:?}): {error}", since.elapsed())]
    LinkDown {
        /// Since when, on the breaker's clock (`tokio::time`).
        since: Instant,
        /// The last error.
        error: Arc<str>,
    },
    /// Redis answered the command with an error, or did not answer in time. A kill or
    /// revive is applied here and kept, as with [`FleetError::LinkDown`].
    #[error("redis: {0}")]
    Redis(Arc<str>),
    /// The kill or revive was applied here, but the key already held a later act (made
    /// elsewhere, by the fleet's [order](super::act)), which wins: the switch follows it.
    #[error("a later act on this kill switch wins (killed: {}, stamped {} by replica {:?})", by.killed, by.at_ms, by.replica)]
    Superseded {
        /// The later act.
        by: KillAct,
    },
    /// The link did not come up in the time given.
    #[error("the fleet's link to redis did not come up in time: {error}")]
    NotConnected {
        /// The last error.
        error: Arc<str>,
    },
}
