//! Failure categories: the error signatures that tell one shared cause from several
//! independent ones.

use std::borrow::Cow;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// An error signature such as "connection refused", and the shared infrastructure it
/// points at ("network").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FailureCategory {
    signature: Cow<'static, str>,
    domain: Cow<'static, str>,
}

impl FailureCategory {
    /// A category: `signature` is what failures have in common, `domain` the shared
    /// infrastructure a correlated failure suggests (network, filesystem, permissions).
    pub fn new(
        signature: impl Into<Cow<'static, str>>,
        domain: impl Into<Cow<'static, str>>,
    ) -> Self {
        FailureCategory {
            signature: signature.into(),
            domain: domain.into(),
        }
    }

    /// What the failures have in common.
    pub fn signature(&self) -> &str {
        &self.signature
    }

    /// The shared infrastructure it points at.
    pub fn domain(&self) -> &str {
        &self.domain
    }
}

impl fmt::Display for FailureCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.signature, self.domain)
    }
}

/// A rule that names the category of a failure message, or passes.
pub(crate) type Rule = Arc<dyn Fn(&str) -> Option<FailureCategory> + Send + Sync>;

/// The built-in signatures, checked after the user's rules. Matching is on the
/// lowercased message; the first match wins, so the specific come before the general. A
/// short needle (`403`, `dns`) counts only as a word of its own, never inside a request
/// id, an address or another word (`7f4031`, `10.0.0.5:14030`).
const BUILT_IN: &[(&[&str], &str, &str)] = &[
    (
        &["connection refused", "econnrefused"],
        "connection refused",
        "network",
    ),
    (
        &["connection reset", "econnreset", "broken pipe"],
        "connection reset",
        "network",
    ),
    (
        &[
            "dns",
            "name resolution",
            "failed to lookup address",
            "no route to host",
            "network is unreachable",
        ],
        "network unreachable",
        "network",
    ),
    (
        &["permission denied", "eacces", "eperm", "forbidden", "403"],
        "permission denied",
        "permissions",
    ),
    (
        &[
            "command not found",
            "no such command",
            "executable not found",
        ],
        "command not found",
        "environment",
    ),
    (
        &["no space left", "disk full", "read-only file system"],
        "disk unavailable",
        "filesystem",
    ),
    (
        &["no such file", "enoent", "not a directory"],
        "no such file",
        "filesystem",
    ),
    (
        &["timed out", "timeout", "deadline exceeded", "elapsed"],
        "timeout",
        "network or load",
    ),
];

/// Names categories: the user's rules first, then the built-in signatures.
#[derive(Clone, Default)]
pub(crate) struct Categorizer {
    rules: Vec<Rule>,
}

impl Categorizer {
    pub(crate) fn push(&mut self, rule: Rule) {
        self.rules.push(rule);
    }

    /// The category of `message`. A rule that panics names none: the failure is still
    /// charged to the budget, uncategorized, and the panic does not reach the breaker
    /// reporting the failure.
    pub(crate) fn categorize(&self, message: &str) -> Option<FailureCategory> {
        let ruled = catch_unwind(AssertUnwindSafe(|| {
            self.rules.iter().find_map(|rule| rule(message))
        }));
        match ruled {
            Ok(Some(category)) => return Some(category),
            Ok(None) => {}
            Err(_) => {
                tracing::error!(
                    target: "tower_circuit_breaker::expediter",
                    "a failure category rule panicked; the failure is charged uncategorized"
                );
                return None;
            }
        }
        let lower = message.to_lowercase();
        BUILT_IN.iter().find_map(|(needles, signature, domain)| {
            needles
                .iter()
                .any(|n| found(&lower, n))
                .then(|| FailureCategory::new(*signature, *domain))
        })
    }
}

/// Whether `needle` is in `message`; a short one only with no letter or digit on
/// either side.
fn found(message: &str, needle: &str) -> bool {
    const SHORT: usize = 3;
    if needle.len() > SHORT {
        return message.contains(needle);
    }
    let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    message.match_indices(needle).any(|(at, _)| {
        !word(message[..at].chars().next_back())
            && !word(message[at + needle.len()..].chars().next())
    })
}

impl fmt::Debug for Categorizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Categorizer")
            .field("rules", &self.rules.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_signatures_name_common_infrastructure_failures() {
        let c = Categorizer::default();
        let sig = |m: &str| c.categorize(m).map(|c| c.signature().to_string());
        assert_eq!(
            sig("tcp connect error: Connection refused (os error 111)").as_deref(),
            Some("connection refused")
        );
        assert_eq!(
            sig("sh: rg: command not found").as_deref(),
            Some("command not found")
        );
        assert_eq!(
            sig("open /etc/shadow: Permission denied").as_deref(),
            Some("permission denied")
        );
        assert_eq!(
            sig("request timed out after 30s").as_deref(),
            Some("timeout")
        );
        assert_eq!(sig("model said something odd"), None);
    }

    #[test]
    fn a_short_signature_is_a_word_never_part_of_an_id_or_an_address() {
        let c = Categorizer::default();
        let sig = |m: &str| c.categorize(m).map(|c| c.signature().to_string());
        assert_eq!(sig("upstream 500, request id 7f4031"), None);
        assert_eq!(sig("bad gateway, trace 9403"), None);
        assert_eq!(sig("connect 10.0.0.5:14030: bad gateway"), None);
        assert_eq!(sig("dnsmasq restarted"), None);
        assert_eq!(
            sig("HTTP 403 from the API").as_deref(),
            Some("permission denied")
        );
        assert_eq!(sig("status=403").as_deref(), Some("permission denied"));
        assert_eq!(
            sig("dns error: no record").as_deref(),
            Some("network unreachable")
        );
    }

    #[test]
    fn user_rules_come_before_built_in_ones() {
        let mut c = Categorizer::default();
        c.push(Arc::new(|m: &str| {
            m.contains("refused")
                .then(|| FailureCategory::new("proxy down", "network"))
        }));
        assert_eq!(
            c.categorize("connection refused").unwrap().signature(),
            "proxy down"
        );
    }
}
