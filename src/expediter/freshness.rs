//! Freshness labels for cached or earlier results: stale data is never
//! presented as current.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

/// How current a result is. Fresh data carries no label: labels are for uncertainty.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "freshness", rename_all = "snake_case"))]
pub enum Freshness {
    /// Just retrieved and not identical to an earlier result: no label.
    Fresh,
    /// Retrieved earlier (a saved answer, the last successful read).
    Stale {
        /// When it was retrieved, as an RFC 3339 UTC time.
        retrieved_at: String,
    },
    /// Identical to the previous result of the same call: maybe a cache hit.
    Cached {
        /// The tool that returned it.
        tool: String,
    },
    /// From a source with a date, current status unknown.
    Unverified {
        /// The tool.
        tool: String,
        /// The source's date.
        date: String,
    },
    /// No timestamp and no baseline to compare with.
    Unknown,
}

impl Freshness {
    /// Stale, retrieved at `at`.
    pub fn stale(at: SystemTime) -> Self {
        Freshness::Stale {
            retrieved_at: rfc3339(at),
        }
    }

    /// The label to put before the data, or `None` for fresh data.
    pub fn label(&self) -> Option<String> {
        match self {
            Freshness::Fresh => None,
            Freshness::Stale { retrieved_at } => Some(format!(
                "[STALE DATA — retrieved at {retrieved_at}, may not reflect current state]"
            )),
            Freshness::Cached { tool } => Some(format!(
                "[CACHED RESULT — {tool} returned identical results to previous call; the source may have changed since]"
            )),
            Freshness::Unverified { tool, date } => {
                Some(format!("[UNVERIFIED — {tool} result from {date}; current status unknown]"))
            }
            Freshness::Unknown => Some("[FRESHNESS UNKNOWN — no baseline for comparison]".to_string()),
        }
    }
}

/// A value with its freshness. Displays as the label (if any) on its own line, then the
/// value.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use tower_circuit_breaker::expediter::{Freshness, Labelled};
///
/// let saved = Labelled::new("port = 8080", Freshness::stale(UNIX_EPOCH + Duration::from_secs(1_700_000_000)));
/// assert_eq!(
///     saved.to_string(),
///     "[STALE DATA — retrieved at 2023-11-14T22:13:20Z, may not reflect current state]\nport = 8080"
/// );
/// assert_eq!(Labelled::new("fresh", Freshness::Fresh).to_string(), "fresh");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Labelled<T> {
    /// The data.
    pub value: T,
    /// How current it is.
    pub freshness: Freshness,
}

impl<T> Labelled<T> {
    /// Labels `value`.
    pub fn new(value: T, freshness: Freshness) -> Self {
        Labelled { value, freshness }
    }
}

impl<T: fmt::Display> fmt::Display for Labelled<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(label) = self.freshness.label() {
            writeln!(f, "{label}")?;
        }
        write!(f, "{}", self.value)
    }
}

/// Labels tool outputs by comparing each with the previous output of the same call:
/// identical means maybe cached.
///
/// ```
/// use tower_circuit_breaker::expediter::{Freshness, FreshnessTracker};
///
/// let mut tracker = FreshnessTracker::default();
/// assert_eq!(tracker.observe("Grep", "API_KEY", &"config.rs:3").freshness, Freshness::Fresh);
/// let again = tracker.observe("Grep", "API_KEY", &"config.rs:3");
/// assert!(matches!(again.freshness, Freshness::Cached { .. }));
/// ```
#[derive(Debug, Clone, Default)]
pub struct FreshnessTracker {
    last: HashMap<(String, String), u64>,
}

impl FreshnessTracker {
    /// Labels the output of `tool` for the call keyed `key`: [`Freshness::Cached`] when
    /// it equals the previous output for that key, [`Freshness::Fresh`] otherwise.
    pub fn observe<T: Hash + Clone>(&mut self, tool: &str, key: &str, output: &T) -> Labelled<T> {
        let mut hasher = DefaultHasher::new();
        output.hash(&mut hasher);
        let digest = hasher.finish();
        let previous = self
            .last
            .insert((tool.to_string(), key.to_string()), digest);
        let freshness = if previous == Some(digest) {
            Freshness::Cached {
                tool: tool.to_string(),
            }
        } else {
            Freshness::Fresh
        };
        Labelled::new(output.clone(), freshness)
    }
}

/// `at` as an RFC 3339 UTC time with second precision (the second it falls in: a time
/// before 1970 too).
pub(crate) fn rfc3339(at: SystemTime) -> String {
    let whole = |secs: u64| i64::try_from(secs).unwrap_or(i64::MAX);
    let secs = match at.duration_since(UNIX_EPOCH) {
        Ok(after) => whole(after.as_secs()),
        Err(before) => {
            let before = before.duration();
            -whole(before.as_secs()) - i64::from(before.subsec_nanos() > 0)
        }
    };
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{d:02}T{h:02}:{m:02}:{s:02}Z")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rfc3339_renders_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH - Duration::from_secs(86_400)),
            "1969-12-31T00:00:00Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH - Duration::from_millis(500)),
            "1969-12-31T23:59:59Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH - Duration::from_secs(951_782_400)),
            "1939-11-04T00:00:00Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(1_798_761_599)),
            "2026-12-31T23:59:59Z"
        );
    }

    #[test]
    fn every_uncertain_freshness_has_a_label_and_fresh_has_none() {
        assert_eq!(Freshness::Fresh.label(), None);
        assert!(Freshness::Unknown
            .label()
            .unwrap()
            .starts_with("[FRESHNESS UNKNOWN"));
        let unverified = Freshness::Unverified {
            tool: "WebSearch".into(),
            date: "2026-11-01".into(),
        };
        assert_eq!(
            unverified.label().unwrap(),
            "[UNVERIFIED — WebSearch result from 2026-11-01; current status unknown]"
        );
    }
}
