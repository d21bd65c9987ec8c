//! Where the fleet's state lives in Redis, and the rule for the names in it.
//!
//! With the default prefix `tcb`:
//!
//! | what | Redis | value |
//! | --- | --- | --- |
//! | kill switch `NAME` | key `tcb:kill:NAME` | the latest act, JSON (see [`wire`](super::wire)); by hand `1`: killed, `0`: revived; absent: no act |
//! | kill switch changes | channel `tcb:kills` | a kill message (JSON) |
//! | breaker transitions | channel `tcb:hints` | a hint message (JSON) |

use std::sync::Arc;

use super::error::FleetError;

/// The longest name (prefix, replica, kill switch, breaker) the fleet accepts, in bytes.
pub(crate) const MAX_NAME: usize = 200;

/// Checks a name used in keys and messages: 1 to [`MAX_NAME`] bytes, no control
/// characters, no whitespace at either end. The same rule for names given locally and
/// names read from the network.
pub(crate) fn check_name(what: &'static str, name: &str) -> Result<(), FleetError> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if name.len() > MAX_NAME {
        "it is longer than 200 bytes"
    } else if name.chars().any(char::is_control) {
        "it has a control character"
    } else if name.trim() != name {
        "it starts or ends with whitespace"
    } else {
        return Ok(());
    };
    Err(FleetError::BadName {
        what,
        name: name.chars().take(MAX_NAME).collect(),
        reason,
    })
}

/// The keys and channels under one prefix.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: Arc<str>,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Result<Keys, FleetError> {
        check_name("prefix", prefix)?;
        if prefix.contains(char::is_whitespace) {
            return Err(FleetError::BadName {
                what: "prefix",
                name: prefix.into(),
                reason: "it has whitespace",
            });
        }
        Ok(Keys {
            prefix: prefix.into(),
        })
    }

    /// The key that holds kill switch `name`'s state.
    pub(crate) fn kill_key(&self, name: &str) -> String {
        format!("{}:kill:{name}", self.prefix)
    }

    /// The channel every kill switch change is published on.
    pub(crate) fn kill_channel(&self) -> String {
        format!("{}:kills", self.prefix)
    }

    /// The channel breaker transitions are published on.
    pub(crate) fn hint_channel(&self) -> String {
        format!("{}:hints", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_live_under_the_prefix() {
        let keys = Keys::new("prod-agents").unwrap();
        assert_eq!(keys.kill_key("gpt 4o"), "prod-agents:kill:gpt 4o");
        assert_eq!(keys.kill_channel(), "prod-agents:kills");
        assert_eq!(keys.hint_channel(), "prod-agents:hints");
    }

    #[test]
    fn names_that_cannot_be_keys_are_refused() {
        for bad in ["", " model", "model\n", "a\u{7}b", &"x".repeat(201)] {
            assert!(
                matches!(check_name("breaker", bad), Err(FleetError::BadName { .. })),
                "{bad:?}"
            );
        }
        check_name("breaker", "web search/v2").unwrap();
        assert!(Keys::new("my prefix").is_err());
    }
}
