//! The JSON shape of a [`Snapshot`] (feature `serde`): every time relative to the moment
//! it was taken, in whole milliseconds, so the numbers mean the same on another machine.

use std::time::{Duration, Instant};

use serde::ser::{Serialize, SerializeStruct, Serializer};

use super::{Counts, Snapshot};
use crate::breaker::clock::now;
use crate::breaker::state::{Advice, FailureRecord, NextProbe, State};

/// Whole milliseconds, rounded up: a caller that waits this long finds the wait over.
fn ceil_ms(wait: Duration) -> u64 {
    let ms = wait.as_millis() + u128::from(wait.subsec_nanos() % 1_000_000 != 0);
    u64::try_from(ms).unwrap_or(u64::MAX)
}

/// Whole milliseconds, rounded down: how long ago, as a clock shows it.
fn floor_ms(age: Duration) -> u64 {
    u64::try_from(age.as_millis()).unwrap_or(u64::MAX)
}

/// A [`NextProbe`] seen from `from`.
struct NextProbeFrom<'a>(&'a NextProbe, Instant);

impl Serialize for NextProbeFrom<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let NextProbeFrom(next, from) = *self;
        let retry_after_ms = next.retry_after(from).map(ceil_ms);
        match *next {
            NextProbe::After { calls, .. } => {
                let mut s = serializer.serialize_struct("NextProbe", 3)?;
                s.serialize_field("kind", "after")?;
                s.serialize_field("calls", &calls)?;
                s.serialize_field("retry_after_ms", &retry_after_ms)?;
                s.end()
            }
            other => {
                let kind = match other {
                    NextProbe::NotNeeded => "not_needed",
                    NextProbe::InFlight => "in_flight",
                    _ => "manual",
                };
                let mut s = serializer.serialize_struct("NextProbe", 1)?;
                s.serialize_field("kind", kind)?;
                s.end()
            }
        }
    }
}

/// `{"kind": "after", "calls": 3, "retry_after_ms": 1500}` (`retry_after_ms` is `null`
/// when only calls decide), `{"kind": "not_needed"}`, `{"kind": "in_flight"}` or
/// `{"kind": "manual"}`; the wait is measured from now, on the breaker's clock.
impl Serialize for NextProbe {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        NextProbeFrom(self, now()).serialize(serializer)
    }
}

/// A [`FailureRecord`] seen from `from`.
struct FailureFrom<'a>(&'a FailureRecord, Instant);

impl Serialize for FailureFrom<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let FailureFrom(failure, from) = *self;
        let mut s = serializer.serialize_struct("FailureRecord", 2)?;
        s.serialize_field("message", &*failure.message)?;
        s.serialize_field(
            "ago_ms",
            &floor_ms(from.saturating_duration_since(failure.at)),
        )?;
        s.end()
    }
}

/// `{"message": "503 Service Unavailable", "ago_ms": 1200}`, measured from now on the
/// breaker's clock.
impl Serialize for FailureRecord {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        FailureFrom(self, now()).serialize(serializer)
    }
}

/// `{"kind": "call"}`, `{"kind": "probe"}` or `{"kind": "skip", "reason": "killed"}`
/// (the [`Reason`](crate::Reason) as [`as_str`](crate::Reason::as_str) spells it).
struct AdviceJson(Advice);

impl Serialize for AdviceJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (kind, reason) = match self.0 {
            Advice::Call => ("call", None),
            Advice::Probe => ("probe", None),
            Advice::Skip(skip) => ("skip", Some(skip.reason().as_str())),
        };
        let mut s = serializer.serialize_struct("Advice", 1 + usize::from(reason.is_some()))?;
        s.serialize_field("kind", kind)?;
        if let Some(reason) = reason {
            s.serialize_field("reason", reason)?;
        }
        s.end()
    }
}

/// A forced opening seen from `from`: `{"until": "reset"}`, or `{"until": "time",
/// "ends_in_ms": 30000}` for a timed one ([`Snapshot::forced_until`]).
struct ForcedFrom(Option<Instant>, Instant);

impl Serialize for ForcedFrom {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let ForcedFrom(until, from) = *self;
        match until {
            None => {
                let mut s = serializer.serialize_struct("ForcedOpen", 1)?;
                s.serialize_field("until", "reset")?;
                s.end()
            }
            Some(until) => {
                let mut s = serializer.serialize_struct("ForcedOpen", 2)?;
                s.serialize_field("until", "time")?;
                s.serialize_field(
                    "ends_in_ms",
                    &ceil_ms(until.saturating_duration_since(from)),
                )?;
                s.end()
            }
        }
    }
}

/// Every field, and `skipped`, the sum of the four kinds of skip.
impl Serialize for Counts {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("Counts", 15)?;
        s.serialize_field("arrived", &self.arrived)?;
        s.serialize_field("made", &self.made)?;
        s.serialize_field("probes", &self.probes)?;
        s.serialize_field("skipped", &self.skipped())?;
        s.serialize_field("skipped_open", &self.skipped_open)?;
        s.serialize_field("skipped_half_open_full", &self.skipped_half_open_full)?;
        s.serialize_field("skipped_killed", &self.skipped_killed)?;
        s.serialize_field("skipped_forced_open", &self.skipped_forced_open)?;
        s.serialize_field("abandoned", &self.abandoned)?;
        s.serialize_field("successes", &self.successes)?;
        s.serialize_field("failures", &self.failures)?;
        s.serialize_field("ignored", &self.ignored)?;
        s.serialize_field("cancelled", &self.cancelled)?;
        s.serialize_field("late", &self.late)?;
        s.serialize_field("would_have_skipped", &self.would_have_skipped)?;
        s.end()
    }
}

/// The shape documented on [`Snapshot`]; every time is measured from
/// [`Snapshot::taken_at`].
impl Serialize for Snapshot {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let from = self.taken_at;
        let mut s = serializer.serialize_struct("Snapshot", 16)?;
        s.serialize_field("name", &*self.name)?;
        s.serialize_field("state", &self.state)?;
        s.serialize_field("cause", &self.cause.map(|cause| cause.as_str()))?;
        let forced =
            (self.state == State::ForcedOpen).then_some(ForcedFrom(self.forced_until, from));
        s.serialize_field("forced_open", &forced)?;
        s.serialize_field("mode", &self.mode)?;
        s.serialize_field("killed", &self.killed)?;
        s.serialize_field("advice", &AdviceJson(self.advice))?;
        s.serialize_field("consecutive_failures", &self.consecutive_failures)?;
        s.serialize_field("window", &self.window)?;
        s.serialize_field("probes_in_flight", &self.probes_in_flight)?;
        let last_failure = self.last_failure.as_ref().map(|f| FailureFrom(f, from));
        s.serialize_field("last_failure", &last_failure)?;
        s.serialize_field("next_probe", &NextProbeFrom(&self.next_probe, from))?;
        s.serialize_field("retry_after_ms", &self.retry_after().map(ceil_ms))?;
        s.serialize_field("requested_wait_ms", &self.requested_wait().map(ceil_ms))?;
        s.serialize_field("counts", &self.counts)?;
        s.serialize_field("generation", &self.generation)?;
        s.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_round_up_and_ages_round_down() {
        assert_eq!(ceil_ms(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_ms(Duration::from_millis(1500)), 1500);
        assert_eq!(ceil_ms(Duration::from_micros(1_500_001)), 1501);
        assert_eq!(ceil_ms(Duration::ZERO), 0);
        assert_eq!(ceil_ms(Duration::MAX), u64::MAX);
        assert_eq!(floor_ms(Duration::from_micros(1_999)), 1);
        assert_eq!(floor_ms(Duration::MAX), u64::MAX);
    }
}
