//! What can go wrong when an expediter is built or asked about something it does not
//! know: [`ExpediterError`].

use crate::error::ConfigError;

/// A capability map or expediter setting that cannot work, or a name the expediter does
/// not know.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ExpediterError {
    /// Two tools share a name.
    #[error("tool `{0}` is declared twice")]
    DuplicateTool(String),
    /// A tool has an empty name.
    #[error("a tool has an empty name")]
    EmptyToolName,
    /// An alternative names a tool the map does not have.
    #[error("tool `{tool}` names an unknown tool `{alternative}` as its alternative")]
    UnknownAlternative {
        /// The tool declaring it.
        tool: String,
        /// The unknown name.
        alternative: String,
    },
    /// A tool names itself as its alternative. (Tools may back each other up: A's
    /// alternative may be B while B's is A.)
    #[error("tool `{0}` names itself as its alternative: a tool cannot stand in for itself; name another tool, or give it a `.fallback(..)`")]
    SelfAlternative(String),
    /// A tool has no alternative and no manual fallback: its failure would leave the
    /// agent guessing.
    #[error("tool `{0}` has neither an alternative nor a manual fallback: give its ToolSpec an `.alternative(..)` or a `.fallback(..)`")]
    NoAlternativeOrFallback(String),
    /// The failure budget is zero: the agent would pause before its first failure.
    #[error("failure budget must be at least 1, got 0")]
    ZeroBudget,
    /// A cascade window of zero steps and zero time could never see two breakers open
    /// together.
    #[error("cascade window must not be empty")]
    EmptyCascadeWindow,
    /// The probe backoff after a confirmed recovery starts at zero steps (a probe at
    /// once, which is no backoff), or its cap is below its start.
    #[error("recovery probe backoff must start at 1 step or more and its cap must not be below its start, got start {start} and cap {cap}")]
    InvalidRecoveryBackoff {
        /// The steps before the first probe.
        start: u64,
        /// The most steps between two probes.
        cap: u64,
    },
    /// A tool's breaker settings are invalid.
    #[error("tool `{tool}`: {source}")]
    Breaker {
        /// The tool.
        tool: String,
        /// What is wrong.
        #[source]
        source: ConfigError,
    },
    /// The expediter has no tool of this name.
    #[error("unknown tool `{0}`")]
    UnknownTool(String),
    /// The run has no sub-task of this name.
    #[error("unknown sub-task `{0}`")]
    UnknownSubTask(String),
}
