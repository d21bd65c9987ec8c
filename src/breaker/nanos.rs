//! [`Nanos`]: an instant in one word, as a breaker's door and its skips keep times.

// Each `#[inline(always)]` here pays in the awaited benchmark (the door and the state
// words: docs/performance.md, "Inlining").
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// An instant as signed nanoseconds from an anchor taken once per process: exact for
/// 292 years either way (the machine never sets a time further off than a century), and
/// one word, so that a door or a skip that holds one is copied in registers. A paused
/// test clock may stand before the anchor: then it is negative.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(in crate::breaker) struct Nanos(pub(in crate::breaker) i64);

fn anchor() -> Instant {
    static ANCHOR: OnceLock<Instant> = OnceLock::new();
    *ANCHOR.get_or_init(Instant::now)
}

impl Nanos {
    #[inline]
    pub(in crate::breaker) fn of(at: Instant) -> Nanos {
        let anchor = anchor();
        let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        Nanos(match at.checked_duration_since(anchor) {
            Some(after) => nanos(after),
            None => -nanos(anchor.saturating_duration_since(at)),
        })
    }

    /// Whether `at` is within the range kept exactly (292 years of the anchor).
    pub(in crate::breaker) fn holds(at: Instant) -> bool {
        Nanos::of(at).instant() == at
    }

    #[inline(always)]
    pub(in crate::breaker) fn instant(self) -> Instant {
        let by = Duration::from_nanos(self.0.unsigned_abs());
        let anchor = anchor();
        let at = if self.0 >= 0 {
            anchor.checked_add(by)
        } else {
            anchor.checked_sub(by)
        };
        at.unwrap_or(anchor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_survives_the_round_trip_exactly() {
        let now = Instant::now();
        for at in [
            now,
            now + Duration::from_nanos(1),
            now + Duration::from_secs(100 * 365 * 24 * 3600),
            anchor(),
        ] {
            assert_eq!(Nanos::of(at).instant(), at);
        }
        if let Some(before) = anchor().checked_sub(Duration::from_nanos(12_345)) {
            assert_eq!(Nanos::of(before), Nanos(-12_345));
            assert_eq!(Nanos::of(before).instant(), before);
        }
    }
}
