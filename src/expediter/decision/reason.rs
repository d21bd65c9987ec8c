//! Why a call was not made: [`SkipReason`] for one tool, [`PauseReason`] for every
//! call.

use std::fmt;

use crate::Reason;

/// Why the expediter did not call a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SkipReason {
    /// The tool's breaker would skip the call (open, half-open with its probes taken,
    /// killed, forced open).
    Breaker(Reason),
    /// A pre-call check said the tool is unavailable.
    Unavailable,
    /// After a confirmed recovery from a systemic failure, the tool's probe waits for
    /// its turn in the recovery backoff (3, 6, 12 ... steps).
    RecoveryBackoff,
    /// The tool stayed down: its failed probes used up their allowance of the failure
    /// budget ([`ExpediterBuilder::probe_allowance`](crate::expediter::ExpediterBuilder::probe_allowance)),
    /// and it is held open until a new cycle or a person frees it.
    ProbesStopped,
}

impl SkipReason {
    /// The breaker's reason (`open`, `half_open_full`, `killed`, `forced_open`),
    /// `unavailable`, `recovery_backoff` or `probes_stopped`.
    pub fn as_str(&self) -> &'static str {
        match self {
            SkipReason::Breaker(reason) => reason.as_str(),
            SkipReason::Unavailable => "unavailable",
            SkipReason::RecoveryBackoff => "recovery_backoff",
            SkipReason::ProbesStopped => "probes_stopped",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for SkipReason {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for SkipReason {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        match &*text {
            "unavailable" => Ok(SkipReason::Unavailable),
            "recovery_backoff" => Ok(SkipReason::RecoveryBackoff),
            "probes_stopped" => Ok(SkipReason::ProbesStopped),
            other => Reason::deserialize(serde::de::value::StrDeserializer::<D::Error>::new(other))
                .map(SkipReason::Breaker),
        }
    }
}

/// Why the expediter paused every call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum PauseReason {
    /// The cycle's shared failure budget is used up.
    BudgetExhausted,
    /// Several tools failed together; every call waits for recovery.
    SystemicPause,
}

impl PauseReason {
    /// `budget_exhausted` or `systemic_pause`.
    pub fn as_str(&self) -> &'static str {
        match self {
            PauseReason::BudgetExhausted => "budget_exhausted",
            PauseReason::SystemicPause => "systemic_pause",
        }
    }
}

impl fmt::Display for PauseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
