//! Deciding one call: the pre-call check, the gate under the ledger's lock, the tool's
//! breaker outside it, and a skip's route.

use crate::expediter::capability::Degradation;
use crate::expediter::error::ExpediterError;
use crate::expediter::ledger::{Gate, Pause};
use crate::expediter::precheck::Availability;
use crate::expediter::toolbox::{Tool, Toolbox};
use crate::expediter::views;
use crate::expediter::Expediter;
use crate::{Advice, NextProbe, Reason};

use super::{Action, Decision, SkipReason};

/// What a decision found before its route: the gate, then the tool's breaker.
pub(super) enum Finding {
    Call,
    Probe,
    Skip(SkipReason),
    Pause(Pause),
}

impl Expediter {
    /// Decides one attempted call of `tool` (one step), within `limit`, for `run`
    /// (`None`: the default run), whose degradations record a skip's route.
    pub(crate) async fn decide_in(
        &self,
        run: Option<&str>,
        tool: &str,
        limit: Degradation,
    ) -> Result<Decision, ExpediterError> {
        let toolbox = self.toolbox();
        let tool = toolbox
            .get(tool)
            .ok_or_else(|| ExpediterError::UnknownTool(tool.to_string()))?;
        let availability = self.availability(tool).await;
        // Every failure a breaker recorded before this decision counts in it, even one
        // whose event another task is still delivering (rare: then each tool's breaker
        // is waited for). The tools as they are now: one added while the pre-call check
        // ran may have failed since.
        if !self.inner.delivery.all_delivered() {
            for each in self.toolbox().tools() {
                each.handle.events_delivered().await;
            }
        }
        let (step, gate) = {
            let mut ledger = self.lock();
            ledger.drain();
            ledger.begin_decision(&tool.spec.name, availability)
        };
        let finding = self.find(tool, gate, true);
        let action = self.action(&toolbox, tool, limit, finding, Some((run, step)));
        Ok(Decision {
            tool: tool.spec.name.clone(),
            step,
            action,
        })
    }

    /// What a decision about `tool` within `limit` would be now, with nothing counted
    /// (see [`Expediter::peek`]).
    pub(crate) fn peek_in(&self, tool: &str, limit: Degradation) -> Result<Action, ExpediterError> {
        let toolbox = self.toolbox();
        let tool = toolbox
            .get(tool)
            .ok_or_else(|| ExpediterError::UnknownTool(tool.to_string()))?;
        let gate = {
            let mut ledger = self.lock();
            ledger.drain();
            let availability = ledger
                .availability(&tool.spec.name)
                .unwrap_or(Availability::Available);
            ledger.gate(
                &tool.spec.name,
                availability,
                ledger.step().saturating_add(1),
            )
        };
        let finding = self.find(tool, gate, false);
        Ok(self.action(&toolbox, tool, limit, finding, None))
    }

    /// A finding as an action. A skip's route is found under the lock with the
    /// alternatives looked at before it; a decision's (`taken`: its run and step) is
    /// recorded as a degradation.
    pub(super) fn action(
        &self,
        toolbox: &Toolbox,
        tool: &Tool,
        limit: Degradation,
        finding: Finding,
        taken: Option<(Option<&str>, u64)>,
    ) -> Action {
        let reason = match finding {
            Finding::Call => return Action::Call,
            Finding::Probe => return Action::Probe,
            Finding::Pause(pause) => {
                return Action::Pause {
                    reason: pause.reason,
                    detail: pause.detail,
                }
            }
            Finding::Skip(reason) => reason,
        };
        let views = views::alternatives(toolbox, tool, self.inner.kill.is_killed());
        let mut ledger = self.lock();
        ledger.drain();
        let route = ledger.route(&tool.spec, limit, &views[..]).route;
        if let Some((run, step)) = taken {
            let id = ledger.run_key(run);
            ledger.record_route(id, &tool.spec.name, &route, step);
        }
        Action::Skip { reason, route }
    }

    /// Carries out a gate outside the lock: asks the tool's breaker, counting the
    /// attempt (`count`) or only looking.
    fn find(&self, tool: &Tool, gate: Gate, count: bool) -> Finding {
        let release = match gate {
            Gate::Pause(pause) => return Finding::Pause(pause),
            Gate::Skip(reason) => return Finding::Skip(reason),
            // Only looked at: no call of a held tool reaches its breaker.
            Gate::Held => {
                return Finding::Skip(match tool.handle.peek() {
                    Advice::Skip(skip)
                        if matches!(skip.reason(), Reason::Killed | Reason::ForcedOpen) =>
                    {
                        SkipReason::Breaker(skip.reason())
                    }
                    _ => SkipReason::ProbesStopped,
                })
            }
            Gate::Breaker { release } => release,
        };
        let advice = if count {
            // After a confirmed recovery the backoff decides when to probe, not the
            // breaker's own cooldown: the two must not add up.
            if release {
                tool.handle.allow_probe();
            }
            tool.handle.advise()
        } else {
            match tool.handle.peek() {
                // What `allow_probe` would do: an open breaker lets the next call
                // through as the probe, unless only a person can end its wait.
                Advice::Skip(skip)
                    if release
                        && skip.reason() == Reason::Open
                        && skip.next_probe() != NextProbe::Manual =>
                {
                    Advice::Probe
                }
                advice => advice,
            }
        };
        match advice {
            Advice::Call => Finding::Call,
            Advice::Probe => Finding::Probe,
            Advice::Skip(skip) => Finding::Skip(SkipReason::Breaker(skip.reason())),
        }
    }
}
