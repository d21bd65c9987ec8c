//! The `Retry-After` header (and OpenAI's `retry-after-ms`), read from a response and
//! written on one: [`parse_retry_after`], [`retry_after_value`].

use std::time::{Duration, SystemTime};

use ::http::header::{HeaderValue, RETRY_AFTER};
use ::http::{HeaderMap, StatusCode};

use crate::saved::ceil_secs;

/// The wait a `Retry-After` value asks for, seen from `now`: delta-seconds, or an HTTP
/// date minus `now`. `None` for a date in the past (or `now` itself) and for anything
/// that is neither form.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::HeaderValue;
/// use tower_circuit_breaker::http::parse_retry_after;
///
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480); // 2015-10-21 07:28:00 UTC
/// assert_eq!(parse_retry_after(&HeaderValue::from_static("120"), now), Some(Duration::from_secs(120)));
/// let date = HeaderValue::from_static("Wed, 21 Oct 2015 07:28:30 GMT");
/// assert_eq!(parse_retry_after(&date, now), Some(Duration::from_secs(30)));
/// assert_eq!(parse_retry_after(&HeaderValue::from_static("soon"), now), None);
/// ```
pub fn parse_retry_after(value: &HeaderValue, now: SystemTime) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for a u64 is a very long wait; the cap cuts it anyway.
        let secs = text.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    match at.duration_since(now) {
        Ok(wait) if !wait.is_zero() => Some(wait),
        _ => None,
    }
}

/// The wait a 429 or a 503 asks for, not yet cut to any cap: `retry-after-ms` in
/// milliseconds if it is a number, else `Retry-After` (seconds, or a date measured from
/// now); `None` for other statuses and for a response that asks for nothing readable.
pub(super) fn requested_wait(status: StatusCode, headers: &HeaderMap) -> Option<Duration> {
    if status != StatusCode::TOO_MANY_REQUESTS && status != StatusCode::SERVICE_UNAVAILABLE {
        return None;
    }
    let millis = headers.get(RETRY_AFTER_MS).and_then(parse_retry_after_ms);
    millis.or_else(|| {
        headers
            .get(RETRY_AFTER)
            .and_then(|value| parse_retry_after(value, SystemTime::now()))
    })
}

/// OpenAI's `retry-after-ms` header.
pub(super) const RETRY_AFTER_MS: &str = "retry-after-ms";

/// A `retry-after-ms` value: a non-negative number of milliseconds, with or without a
/// fraction or an exponent; one too large for a float (`1e999`) is a very long wait, as
/// a `Retry-After` too long for a `u64` is. `None` for anything else (a negative number,
/// text such as `NaN` or `inf`).
fn parse_retry_after_ms(value: &HeaderValue) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    let numeral = text
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'));
    let millis: f64 = text.parse().ok().filter(|_| numeral)?;
    if millis.is_nan() || millis < 0.0 {
        return None;
    }
    // Beyond what a `Duration` holds is a very long wait; the cap cuts it anyway.
    Some(Duration::try_from_secs_f64(millis / 1000.0).unwrap_or(Duration::MAX))
}

/// A `Retry-After` value for `wait`: whole seconds, rounded up, so that a caller who
/// waits that long finds the wait over (`1.2 s` is `2`, zero is `0`).
///
/// ```
/// use std::time::Duration;
/// use tower_circuit_breaker::http::retry_after_value;
///
/// assert_eq!(retry_after_value(Duration::from_millis(17_001)), "18");
/// assert_eq!(retry_after_value(Duration::from_secs(30)), "30");
/// assert_eq!(retry_after_value(Duration::ZERO), "0");
/// ```
pub fn retry_after_value(wait: Duration) -> HeaderValue {
    HeaderValue::from(ceil_secs(wait))
}
