//! What the model is offered: the tools worth calling now, and for each one withheld
//! an honest line saying why and when it is tried again, made from the ledger and from
//! the breakers as they are when the offer is made.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use crate::escape::one_line;

use super::capability::Degradation;
use super::decision::Route;
use super::ledger::Ledger;
use super::next_try::NextTry;
use super::report::failed_probes_phrase;
use super::standing::Unusable;
use super::toolbox::Toolbox;
use super::views::{Survey, ToolView};

/// A tool withheld from the model, and the honest line that says why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct WithheldTool {
    /// The tool.
    pub name: Arc<str>,
    /// Why it cannot be used.
    pub unusable: Unusable,
    /// When it is tried next.
    pub next_try: NextTry,
    /// Why it is withheld and when it is tried again, in one line: a character of a
    /// tool's error text (or of any other text in it) that would break the line is
    /// written as its escape (`\n`, `\u{2028}`).
    pub line: String,
}

/// What to offer the model: the tools worth calling, and a line for each one withheld.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ToolOffer {
    /// Tools to offer.
    pub offered: Vec<Arc<str>>,
    /// Tools removed, with why.
    pub withheld: Vec<WithheldTool>,
}

/// Its line: why it is withheld and when it is tried again.
impl fmt::Display for WithheldTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line)
    }
}

impl fmt::Display for ToolOffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<Cow<'_, str>> = self.offered.iter().map(|n| one_line(n)).collect();
        write!(
            f,
            "tools offered: {}",
            if names.is_empty() {
                "(none)".to_string()
            } else {
                names.join(", ")
            }
        )?;
        for w in &self.withheld {
            write!(f, "\n{}", w.line)?;
        }
        Ok(())
    }
}

/// What to offer the model now.
pub(crate) fn offer(ledger: &Ledger, toolbox: &Toolbox, views: &Survey<'_>) -> ToolOffer {
    let mut offer = ToolOffer {
        offered: Vec::new(),
        withheld: Vec::new(),
    };
    let pause = ledger.pause();
    for (tool, snapshot) in toolbox.tools().iter().zip(views.snapshots) {
        let name = tool.spec.name.clone();
        let standing = ledger.standing(&name, &ToolView::of(snapshot));
        let unusable = match (&pause, standing.unusable) {
            (Some(pause), _) => Unusable::Paused {
                reason: pause.reason,
            },
            (None, Some(unusable)) => unusable,
            (None, None) => {
                offer.offered.push(name);
                continue;
            }
        };
        let next = &standing.next_try;
        let line = if let (Unusable::Paused { .. }, Some(pause)) = (unusable, &pause) {
            format!(
                "{name} is not offered: all tools are paused ({}); it is tried again {next}; the status report says what remains",
                pause.detail
            )
        } else {
            let instead = match ledger
                .route(&tool.spec, Degradation::High, &views.by_name)
                .route
            {
                Route::Alternative { tool, method, .. } => format!("use {tool} ({method}) instead"),
                Route::Manual { ask } => format!("instead, {ask}"),
                Route::ReduceScope { .. } => "work that needs it is deferred".to_string(),
            };
            let why = match unusable {
                Unusable::Killed => "an operator switched it off".to_string(),
                Unusable::ForcedOpen => "an operator forced it open".to_string(),
                Unusable::Unavailable => match ledger.reported_why(&name) {
                    Some(why) => why.to_string(),
                    None => "its pre-call check says it is unavailable".to_string(),
                },
                Unusable::Held => {
                    "it is held open on a hint from outside (another replica saw it fail)"
                        .to_string()
                }
                Unusable::ProbesStopped => format!(
                    "it stays down ({}{})",
                    failed_probes_phrase(ledger.failed_probes(&name)),
                    snapshot
                        .last_failure
                        .as_ref()
                        .map(|f| format!("; last: {}", f.message))
                        .unwrap_or_default()
                ),
                _ => {
                    let last = snapshot
                        .last_failure
                        .as_ref()
                        .map(|f| format!(" (last: {})", f.message))
                        .unwrap_or_default();
                    format!(
                        "it failed {} times in a row{last}",
                        snapshot.consecutive_failures
                    )
                }
            };
            format!("{name} is not offered: {why}; it is tried again {next}; {instead}")
        };
        let line = one_line(&line).into_owned();
        offer.withheld.push(WithheldTool {
            name,
            unusable,
            next_try: standing.next_try,
            line,
        });
    }
    offer
}
