//! Instants as one signed number, nanoseconds from an anchor taken once per process:
//! two words of `Instant` moved through a reservation and a future cost more than the
//! arithmetic. (Tests run runtimes whose paused clocks may stand before the anchor, so
//! the number is signed.)

use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn anchor() -> Instant {
    static ANCHOR: OnceLock<Instant> = OnceLock::new();
    *ANCHOR.get_or_init(Instant::now)
}

/// `at` as nanoseconds from the anchor, saturated to some 292 years either way.
pub(crate) fn of(at: Instant) -> i64 {
    let anchor = anchor();
    let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    match at.checked_duration_since(anchor) {
        Some(after) => nanos(after),
        None => -nanos(anchor.saturating_duration_since(at)),
    }
}

/// The instant `nanos` from the anchor.
pub(crate) fn instant(nanos: i64) -> Instant {
    let anchor = anchor();
    let by = Duration::from_nanos(nanos.unsigned_abs());
    let at = if nanos >= 0 {
        anchor.checked_add(by)
    } else {
        anchor.checked_sub(by)
    };
    at.unwrap_or(anchor)
}
