//! An attempted call: decided, then made once if the decision says so, and reported
//! as skipped if the tool's breaker refused it after all.

use tower::{Service, ServiceExt};

use crate::error::{BoxError, Rejected};
use crate::expediter::capability::Degradation;
use crate::expediter::error::ExpediterError;
use crate::expediter::Expediter;
use crate::{Answer, CircuitBreakerHandle, Reason};

use super::decide::Finding;
use super::{Action, Attempt, Decision, SkipReason};

/// Why `breaker` refused the call whose result this is, if it did: the call was not
/// made. A refusal by another breaker, further inside the service, is the tool's answer.
fn refused_by<T>(breaker: &CircuitBreakerHandle, result: &Result<T, BoxError>) -> Option<Reason> {
    let rejected = result.as_ref().err()?.downcast_ref::<Rejected>()?;
    (rejected.name() == breaker.name()).then(|| rejected.reason())
}

impl Expediter {
    pub(crate) async fn execute_in<S, Request, T>(
        &self,
        run: Option<&str>,
        tool: &str,
        limit: Degradation,
        service: &mut S,
        request: Request,
    ) -> Result<Attempt<T>, ExpediterError>
    where
        S: Service<Request, Response = Answer<T>, Error = BoxError>,
    {
        let decision = self.decide_in(run, tool, limit).await?;
        match &decision.action {
            Action::Call | Action::Probe => {}
            Action::Skip { reason, route } => {
                let (reason, route) = (*reason, route.clone());
                return Ok(Attempt::Skipped {
                    decision,
                    reason,
                    route,
                });
            }
            Action::Pause { reason, detail } => {
                let (reason, detail) = (*reason, detail.clone());
                return Ok(Attempt::Paused {
                    decision,
                    reason,
                    detail,
                });
            }
        }
        let result = match service.ready().await {
            Ok(ready) => ready.call(request).await,
            Err(error) => Err(error),
        };
        let toolbox = self.toolbox();
        let Some(tool) = toolbox.get(&decision.tool) else {
            return Ok(Attempt::Made { decision, result });
        };
        let Some(reason) = refused_by(&tool.handle, &result) else {
            return Ok(Attempt::Made { decision, result });
        };
        // The tool's breaker refused the call it was told to make (a person acted, or
        // another agent's probe took the slot since): it was not made, and is routed as
        // the decision would have been.
        let finding = Finding::Skip(SkipReason::Breaker(reason));
        let action = self.action(&toolbox, tool, limit, finding, Some((run, decision.step)));
        let Action::Skip { reason, route } = &action else {
            unreachable!("a skip's action is a skip");
        };
        let (reason, route) = (*reason, route.clone());
        Ok(Attempt::Skipped {
            decision: Decision { action, ..decision },
            reason,
            route,
        })
    }
}
