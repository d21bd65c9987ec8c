//! Where a skipped call goes instead: [`Route`].

use std::fmt;
use std::sync::Arc;

use crate::expediter::capability::Degradation;

/// Where a skipped call goes instead, in this priority order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "route", rename_all = "snake_case"))]
pub enum Route {
    /// Use another tool: low-degradation alternatives first, then high.
    Alternative {
        /// The tool to use.
        tool: Arc<str>,
        /// How.
        method: Arc<str>,
        /// What is lost; the output must say so.
        degradation: Arc<str>,
        /// How much.
        level: Degradation,
    },
    /// No tool can stand in: ask the user for this.
    Manual {
        /// What to ask.
        ask: Arc<str>,
    },
    /// Nothing can stand in and the user cannot be asked: drop the work that needs this
    /// tool from the scope, and report it.
    ReduceScope {
        /// The line for the report, `SKIPPED: ... — no tools available`.
        note: String,
    },
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Route::Alternative {
                tool,
                method,
                degradation,
                level,
            } => write!(
                f,
                "use {tool} ({method}) [{} degradation: {degradation}]",
                level.as_str()
            ),
            Route::Manual { ask } => write!(f, "ask the user: {ask}"),
            Route::ReduceScope { note } => f.write_str(note),
        }
    }
}
