//! Runs and their sub-tasks, as the ledger keeps them.

use std::sync::Arc;

use crate::expediter::capability::Degradation;
use crate::expediter::decision::Route;
use crate::expediter::routing;
use crate::expediter::scope::{Assessment, Blocker, RunState, SubTask, ToolRoute, Work, WorkState};
use crate::expediter::toolbox::Toolbox;
use crate::expediter::views::Views;

use super::notes::Note;
use super::Ledger;

/// A run's key: 0 is the expediter's own.
pub(crate) type RunId = u64;

impl Ledger {
    /// The key of the run named `run`, made if new (`None`: the default run).
    pub(crate) fn run_key(&mut self, run: Option<&str>) -> RunId {
        run.map_or(0, |name| self.run_named(name))
    }

    pub(crate) fn runs(&self) -> impl Iterator<Item = &RunState> {
        self.runs.values()
    }

    pub(crate) fn run(&self, id: RunId) -> Option<&RunState> {
        self.runs.get(&id)
    }

    /// The run named `name`, made if new.
    pub(crate) fn run_named(&mut self, name: &str) -> RunId {
        if let Some(&id) = self.run_names.get(name) {
            return id;
        }
        let id = self.next_run;
        self.next_run = self.next_run.saturating_add(1);
        let name: Arc<str> = name.into();
        self.run_names.insert(name.clone(), id);
        self.runs.insert(
            id,
            RunState {
                name: Some(name),
                ..RunState::default()
            },
        );
        id
    }

    /// The run named `name`, if there is one.
    pub(crate) fn run_id_of(&self, name: &str) -> Option<RunId> {
        self.run_names.get(name).copied()
    }

    /// Forgets a run.
    pub(crate) fn close_run(&mut self, id: RunId) {
        if let Some(state) = self.runs.remove(&id) {
            if let Some(name) = state.name {
                self.run_names.remove(&name);
            }
        }
        self.runs.entry(0).or_default();
    }

    /// Records the plan of a sub-task of `run`.
    pub(crate) fn plan(
        &mut self,
        run: RunId,
        task: &SubTask,
        state: WorkState,
        degradations: Vec<String>,
    ) {
        let step = self.step;
        if state == WorkState::Deferred {
            self.notes.push(Note::Deferred {
                task: task.name.clone(),
            });
        }
        self.runs.entry(run).or_default().plan(Work {
            name: task.name.clone(),
            tools: task.tools.clone(),
            limit: task.max_degradation,
            state,
            step,
            degradations,
        });
    }

    /// Marks a sub-task of `run` done or failed.
    pub(crate) fn finish(&mut self, run: RunId, name: &str, state: WorkState) -> bool {
        let step = self.step;
        let Some(work) = self
            .runs
            .get_mut(&run)
            .and_then(|r| r.work.iter_mut().find(|w| *w.name == *name))
        else {
            return false;
        };
        work.state = state;
        work.step = step;
        true
    }

    /// Records a route a decision of `run` took at `step`.
    pub(crate) fn record_route(&mut self, run: RunId, tool: &Arc<str>, route: &Route, step: u64) {
        let state = self.runs.entry(run).or_default();
        state.note_route(tool, route);
        routing::note(
            &mut state.degradations,
            &state.name.clone(),
            tool,
            route,
            step,
        );
    }

    /// The tools in the way of work needing `tools` within `limit`, and the routes
    /// for the tools that cannot be used but have an alternative.
    pub(crate) fn assess(
        &self,
        tools: &[Arc<str>],
        limit: Degradation,
        toolbox: &Toolbox,
        views: &(impl Views + ?Sized),
    ) -> Assessment {
        let mut assessment = Assessment::default();
        for name in tools {
            let (Some(tool), Some(view)) = (toolbox.get(name), views.view(name)) else {
                continue;
            };
            let spec = &tool.spec;
            let own = self.own_standing(name, view);
            let Some(unusable) = own.unusable else {
                continue;
            };
            let found = self.route(spec, limit, views);
            match found.route {
                route @ Route::Alternative { .. } => assessment.routes.push(ToolRoute {
                    tool: name.clone(),
                    route,
                }),
                // Planning is not a skip: the route is recorded as a degradation only
                // when a decision takes it.
                _ => assessment.blocked.push(Blocker {
                    tool: name.clone(),
                    unusable,
                    alternatives: found.refused,
                    next_try: self.standing(name, view).next_try,
                    fallback: spec.fallback.clone(),
                }),
            }
        }
        assessment
    }
}
