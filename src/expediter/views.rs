//! The tools as seen from outside, taken before the ledger's lock: one tool's breaker
//! ([`ToolView`]), every tool at once for a report or an offer ([`Survey`]), and a
//! tool's alternatives for a decision's route ([`alternatives`]).

use std::collections::HashMap;
use std::sync::Arc;

use crate::snapshot::Snapshot;
use crate::{Cause, State};

use super::next_try::NextTry;
use super::toolbox::{Tool, Toolbox};

/// A tool's breaker as seen from outside, taken without the expediter's lock.
#[derive(Debug, Clone)]
pub(crate) struct ToolView {
    pub(crate) state: State,
    /// Open on a hint from outside, not on failures of its own.
    pub(crate) held: bool,
    pub(crate) killed: bool,
    /// When the breaker itself would let a probe through, as of the look, the kill
    /// switch aside (`killed` says whether it is on).
    pub(crate) breaker: NextTry,
    pub(crate) generation: u64,
}

impl ToolView {
    pub(crate) fn of(snapshot: &Snapshot) -> Self {
        ToolView {
            state: snapshot.state,
            held: snapshot.cause == Some(Cause::Hint),
            killed: snapshot.killed,
            breaker: NextTry::of_breaker(snapshot.next_probe_once_revived, snapshot.taken_at),
            generation: snapshot.generation,
        }
    }

    /// A closed breaker, seen at the cost of one load (its generation is not read).
    pub(crate) fn closed(killed: bool) -> Self {
        ToolView {
            state: State::Closed,
            held: false,
            killed,
            breaker: NextTry::Now,
            generation: 0,
        }
    }
}

/// The tools as seen before the ledger's lock, by name.
pub(crate) trait Views {
    fn view(&self, tool: &str) -> Option<&ToolView>;
}

impl Views for HashMap<Arc<str>, ToolView> {
    fn view(&self, tool: &str) -> Option<&ToolView> {
        self.get(tool)
    }
}

/// A few views (a tool's alternatives), searched in order.
impl Views for [(Arc<str>, ToolView)] {
    fn view(&self, tool: &str) -> Option<&ToolView> {
        self.iter()
            .find(|(name, _)| **name == *tool)
            .map(|(_, view)| view)
    }
}

/// Every tool as a report or an offer sees it: one snapshot each, taken before the
/// ledger's lock.
pub(crate) struct Survey<'a> {
    pub(crate) snapshots: &'a [Snapshot],
    pub(crate) by_name: HashMap<Arc<str>, ToolView>,
}

impl<'a> Survey<'a> {
    pub(crate) fn new(toolbox: &Toolbox, snapshots: &'a [Snapshot]) -> Self {
        let by_name = toolbox
            .tools()
            .iter()
            .zip(snapshots)
            .map(|(tool, snapshot)| (tool.spec.name.clone(), ToolView::of(snapshot)))
            .collect();
        Survey { snapshots, by_name }
    }
}

/// How `tool`'s alternatives look now: a closed one at the cost of one load, the
/// others from a snapshot.
pub(crate) fn alternatives(
    toolbox: &Toolbox,
    tool: &Tool,
    killed: bool,
) -> Vec<(Arc<str>, ToolView)> {
    tool.spec
        .alternatives
        .iter()
        .filter_map(|alt| toolbox.get(&alt.tool))
        .map(|alt| {
            let view = if alt.handle.is_closed() {
                ToolView::closed(killed)
            } else {
                ToolView::of(&alt.handle.snapshot())
            };
            (alt.spec.name.clone(), view)
        })
        .collect()
}
