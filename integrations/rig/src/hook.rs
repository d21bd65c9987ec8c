//! The agent hook that puts a rig agent's tool calls under the expediter.

use std::collections::HashSet;
use std::fmt;

use rig_agent::agent::{
    AgentHook, CompletionCallAction, CompletionCallEvent, DispatchAction, DispatchEvent,
    HookContext, InvalidToolCallAction, InvalidToolCallContext, InvalidToolCallReason,
    RequestPatch,
};
use rig_agent::tool::server::ToolServerHandle;
use tower_circuit_breaker::expediter::{Action, Decision, Expediter, ExpediterError};

/// A rig [`AgentHook`] that puts every tool call of the expediter's tools under its
/// decisions, and offers the model only the tools worth calling.
///
/// - **Each turn**, before the model is called, the tools the expediter withholds
///   ([`Expediter::offered_tools`]: open, killed, unavailable, paused) are left out of
///   the tools advertised to the model. The model is not told of a tool it cannot use.
/// - **Each tool call** is decided before it is made
///   ([`Run::decide`](tower_circuit_breaker::expediter::Run::decide), in the expediter's
///   [default run](Expediter::default_run)): CALL and PROBE let it through (to the
///   tool's breaker, see [`supervised`](crate::supervised)); SKIP answers the model
///   with an honest tool result instead, never a made-up one: why the tool was not
///   called, what to use instead, and when it is tried again
///   ([`skip_text`](ExpediterHook::skip_text)); PAUSE (the failure budget is used up, or
///   several tools failed with one cause) stops the run with the expediter's reason, and
///   the application shows [`Expediter::report`].
/// - **A call of a withheld tool** the model makes anyway (from an earlier turn's list) is
///   answered with the same honest text, not failed.
///
/// Tools the expediter does not know are left alone. `tools` is the agent's tool
/// registry, from which the advertised list is made (`AgentBuilder::tool_server_handle`
/// shares one with the agent; `Agent::tool_server_handle` gives it back).
///
/// ```
/// use rig_agent::tool::server::ToolServer;
/// use tower_circuit_breaker::expediter::{Expediter, ToolSpec};
/// use tower_circuit_breaker_rig::ExpediterHook;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let expediter = Expediter::builder()
///     .tool(ToolSpec::new("weather").fallback("ask the user to look outside"))
///     .build()?;
/// let tools = ToolServer::new().run(); // shared with the agent: AgentBuilder::tool_server_handle
/// let hook = ExpediterHook::new(expediter.clone(), tools.clone());
/// // AgentBuilder::new(model).tool_server_handle(tools).dynamic_tool(..).add_hook(hook)
/// # let _ = hook;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ExpediterHook {
    expediter: Expediter,
    tools: ToolServerHandle,
}

impl fmt::Debug for ExpediterHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExpediterHook")
            .field("tools", &self.expediter.tools())
            .finish_non_exhaustive()
    }
}

impl ExpediterHook {
    /// The hook for an agent whose tool registry is `tools`.
    pub fn new(expediter: Expediter, tools: ToolServerHandle) -> Self {
        ExpediterHook { expediter, tools }
    }

    /// The expediter.
    pub fn expediter(&self) -> &Expediter {
        &self.expediter
    }

    /// The tools to advertise this turn: the registry's, less those the expediter
    /// withholds; `None` when it withholds none of them (the request is left as it is).
    pub fn advertised(&self) -> Option<Vec<String>> {
        let offer = self.expediter.offered_tools();
        let withheld: HashSet<&str> = offer.withheld.iter().map(|t| &*t.name).collect();
        let toolset = self.tools.toolset();
        let names: Vec<&str> = toolset.always_exposed_names().collect();
        if !names.iter().any(|name| withheld.contains(name)) {
            return None;
        }
        Some(
            names
                .into_iter()
                .filter(|name| !withheld.contains(name))
                .map(str::to_string)
                .collect(),
        )
    }

    /// The tool result the model gets for a call of `tool` that is not made: why, what to
    /// use instead, and when the tool is tried again.
    pub fn skip_text(&self, tool: &str) -> String {
        skip_text(&self.expediter, tool, None)
    }
}

/// The honest answer to a call of `tool` that is not made: the expediter's own line for
/// a withheld tool (why, when it is tried again, what to use instead), else the
/// decision's reason and route.
pub(crate) fn skip_text(expediter: &Expediter, tool: &str, decision: Option<&Decision>) -> String {
    let offer = expediter.offered_tools();
    if let Some(withheld) = offer.withheld.iter().find(|t| &*t.name == tool) {
        return format!("not called: {}", withheld.line);
    }
    match decision.map(|d| &d.action) {
        Some(Action::Skip { reason, route }) => {
            format!("not called: {tool} was skipped ({reason}); {route}")
        }
        _ => format!("not called: {tool} cannot be called now; it is tried again later"),
    }
}

impl AgentHook for ExpediterHook {
    fn name(&self) -> Option<String> {
        Some("ExpediterHook".to_string())
    }

    async fn on_completion_call(
        &self,
        _ctx: &HookContext,
        _event: CompletionCallEvent<'_>,
    ) -> CompletionCallAction {
        match self.advertised() {
            Some(names) => CompletionCallAction::patch(RequestPatch::new().active_tools(names)),
            None => CompletionCallAction::continue_run(),
        }
    }

    async fn on_dispatch(&self, _ctx: &HookContext, event: DispatchEvent<'_>) -> DispatchAction {
        let Some(tool) = event.tool_name() else {
            return DispatchAction::proceed();
        };
        let decision = match self.expediter.default_run().decide(tool).await {
            Ok(decision) => decision,
            Err(ExpediterError::UnknownTool(_)) => return DispatchAction::proceed(),
            Err(other) => return DispatchAction::skip(format!("not called: {other}")),
        };
        match &decision.action {
            Action::Call | Action::Probe => DispatchAction::proceed(),
            Action::Skip { .. } => {
                DispatchAction::skip(skip_text(&self.expediter, tool, Some(&decision)))
            }
            Action::Pause { detail, .. } => {
                DispatchAction::stop(format!("every tool call is paused: {detail}"))
            }
        }
    }

    async fn on_invalid_tool_call(
        &self,
        _ctx: &HookContext,
        event: &InvalidToolCallContext,
    ) -> Option<InvalidToolCallAction> {
        if event.reason != InvalidToolCallReason::UnknownTool {
            return None;
        }
        let offer = self.expediter.offered_tools();
        let withheld = offer
            .withheld
            .iter()
            .find(|t| *t.name == *event.tool_name)?;
        Some(InvalidToolCallAction::Skip {
            reason: format!("not called: {}", withheld.line),
        })
    }
}
