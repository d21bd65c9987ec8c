//! Routing when a tool cannot be called: a low-degradation alternative,
//! then a high one, then the manual fallback, then scope reduction; and the record of
//! every degradation taken.

use std::fmt;
use std::sync::Arc;

use super::capability::{Degradation, ToolSpec};
use super::decision::Route;
use super::standing::Unusable;

/// Why an alternative was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "refused", rename_all = "snake_case"))]
pub enum Refused {
    /// It loses more than the work accepts.
    TooDegraded,
    /// It cannot be used now either.
    Unusable {
        /// Why.
        why: Unusable,
    },
}

/// `loses too much` or why it cannot be used (`OPEN`, `KILLED`...).
impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::TooDegraded => f.write_str("loses too much"),
            Refused::Unusable { why } => write!(f, "{why}"),
        }
    }
}

/// An alternative that was not taken, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RefusedAlternative {
    /// The alternative tool.
    pub tool: Arc<str>,
    /// How much it loses.
    pub level: Degradation,
    /// Why it was not taken.
    pub refused: Refused,
}

impl fmt::Display for RefusedAlternative {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.refused {
            Refused::TooDegraded => write!(
                f,
                "{} loses too much ({} degradation)",
                self.tool,
                self.level.as_str()
            ),
            Refused::Unusable { why } => write!(f, "{}: {why}", self.tool),
        }
    }
}

/// The route for a tool that cannot be called, and the alternatives passed over on
/// the way to it.
#[derive(Debug, Clone)]
pub(crate) struct RouteSearch {
    pub(crate) route: Route,
    pub(crate) refused: Vec<RefusedAlternative>,
}

/// Finds the route, in priority order: a usable alternative within `limit` (low
/// degradation first, each in the order declared), the manual fallback if a person can
/// be asked, scope reduction. `usable` says why a tool cannot be used now, or `None`.
///
/// Only an alternative that can be used now is a route: a tool that is down (open,
/// killed, unavailable, held...) never is. So where tools back each other up (A's
/// alternative is B and B's is A), a route from A to B never leads back to A while A
/// is down, and following routes while nothing else changes visits each tool at most
/// once: a route's tool is called when decided on, unless its own pre-call check, run
/// then for the first time, finds it unavailable, and then it is known to be down.
/// `tests/expediter_model.rs` checks this against a reference under random outages.
pub(crate) fn search(
    spec: &ToolSpec,
    limit: Degradation,
    user_available: bool,
    usable: impl Fn(&str) -> Option<Unusable>,
) -> RouteSearch {
    let mut refused = Vec::new();
    for alt in spec.routing_order() {
        let why = if alt.level > limit {
            Some(Refused::TooDegraded)
        } else {
            usable(&alt.tool).map(|why| Refused::Unusable { why })
        };
        match why {
            None => {
                return RouteSearch {
                    route: Route::Alternative {
                        tool: alt.tool.clone(),
                        method: alt.method.clone(),
                        degradation: alt.degradation.clone(),
                        level: alt.level,
                    },
                    refused,
                }
            }
            Some(why) => refused.push(RefusedAlternative {
                tool: alt.tool.clone(),
                level: alt.level,
                refused: why,
            }),
        }
    }
    if let (Some(ask), true) = (&spec.fallback, user_available) {
        return RouteSearch {
            route: Route::Manual { ask: ask.clone() },
            refused,
        };
    }
    let capability = if spec.provides.is_empty() {
        &spec.name
    } else {
        &spec.provides
    };
    let mut why = if refused.is_empty() {
        "no alternative tool".to_string()
    } else {
        let each: Vec<String> = refused.iter().map(|r| r.to_string()).collect();
        format!("no acceptable tool ({})", each.join("; "))
    };
    if spec.fallback.is_some() {
        why.push_str(", and nobody to ask");
    }
    RouteSearch {
        route: Route::ReduceScope {
            note: format!("SKIPPED: {capability} — {why}"),
        },
        refused,
    }
}

/// A degradation the agent accepted (an alternative tool, the user, or less scope).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DegradationRecord {
    /// The run whose decisions took it (`None`: the expediter's own).
    pub run: Option<Arc<str>>,
    /// The tool that could not be called.
    pub tool: Arc<str>,
    /// What was done instead.
    pub route: Route,
    /// The first step it happened.
    pub first_step: u64,
    /// The last step it happened.
    pub last_step: u64,
    /// How often.
    pub times: u32,
}

/// `web_search: use docs_fetch (...) [high degradation: ...] (step 7)`, or
/// `(steps 7-9, 3 times)`. The run is not named.
impl fmt::Display for DegradationRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} (", self.tool, self.route)?;
        if self.first_step == self.last_step {
            write!(f, "step {})", self.first_step)
        } else {
            write!(
                f,
                "steps {}-{}, {} times)",
                self.first_step, self.last_step, self.times
            )
        }
    }
}

/// Records a route taken at `step`: once per tool and route, with how often.
pub(crate) fn note(
    records: &mut Vec<DegradationRecord>,
    run: &Option<Arc<str>>,
    tool: &Arc<str>,
    route: &Route,
    step: u64,
) {
    match records
        .iter_mut()
        .find(|d| d.tool == *tool && d.route == *route)
    {
        Some(existing) => {
            existing.times = existing.times.saturating_add(1);
            existing.last_step = step;
        }
        None => records.push(DegradationRecord {
            run: run.clone(),
            tool: tool.clone(),
            route: route.clone(),
            first_step: step,
            last_step: step,
            times: 1,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expediter::Alternative;

    fn search_spec() -> ToolSpec {
        ToolSpec::new("web_search")
            .provides("external information retrieval")
            .alternative(Alternative::high(
                "docs_fetch",
                "release notes",
                "no wider search",
            ))
            .fallback("ask the user")
    }

    #[test]
    fn scope_reduction_says_why_each_alternative_was_passed_over() {
        let spec = search_spec();
        let found = search(&spec, Degradation::Low, false, |_| None);
        assert_eq!(
            found.route.to_string(),
            "SKIPPED: external information retrieval — no acceptable tool (docs_fetch loses too much (high degradation)), and nobody to ask"
        );
        let found = search(&spec, Degradation::High, false, |_| Some(Unusable::Open));
        assert_eq!(
            found.route.to_string(),
            "SKIPPED: external information retrieval — no acceptable tool (docs_fetch: OPEN), and nobody to ask"
        );
        let found = search(&spec, Degradation::High, true, |_| Some(Unusable::Open));
        assert_eq!(
            found.route,
            Route::Manual {
                ask: "ask the user".into()
            }
        );
        assert!(matches!(
            search(&spec, Degradation::High, false, |_| None).route,
            Route::Alternative { .. }
        ));
    }
}
