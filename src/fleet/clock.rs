//! Times between replicas: a breaker's times are instants on its own process's clock
//! (`tokio::time`), meaningless elsewhere, so hints carry wall-clock times (Unix
//! milliseconds) and each side converts at the moment it writes or reads. Replicas'
//! clocks must roughly agree (NTP); a skew moves a hold by as much, and the longest hold
//! bounds what it can do.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Now on the breaker's clock.
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Now on the wall clock, in Unix milliseconds.
pub(crate) fn wall_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `at` (on the breaker's clock) in Unix milliseconds.
pub(crate) fn to_wall_ms(at: Instant) -> u64 {
    let now = now();
    let wall = wall_now_ms();
    if at >= now {
        let ahead = u64::try_from(at.duration_since(now).as_millis()).unwrap_or(u64::MAX);
        wall.saturating_add(ahead)
    } else {
        let behind = u64::try_from(now.duration_since(at).as_millis()).unwrap_or(u64::MAX);
        wall.saturating_sub(behind)
    }
}

/// How long from now until `ms` (Unix milliseconds); `None` when it has passed.
pub(crate) fn until_wall_ms(ms: u64) -> Option<Duration> {
    let wait = ms.checked_sub(wall_now_ms())?;
    (wait > 0).then(|| Duration::from_millis(wait))
}
