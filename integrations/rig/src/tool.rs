//! A rig tool whose calls go through its breaker in the expediter.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rig_core::tool::{
    DynamicTool, IntoToolOutput, Tool, ToolContext, ToolErrorKind, ToolExecutionError,
    tool_definition,
};
use serde_json::Value;
use tower::{Layer, ServiceExt, service_fn};
use tower_circuit_breaker::error::Rejected;
use tower_circuit_breaker::expediter::{Expediter, ExpediterError};

use crate::hook::skip_text;

/// `tool` as a rig [`DynamicTool`] whose every call goes through the tool's breaker in
/// `expediter` ([`Expediter::layer`]): its outcomes count towards the breaker and the
/// expediter's failure budget. Add it to the agent with `AgentBuilder::dynamic_tool`, and
/// the [`ExpediterHook`](crate::ExpediterHook) to the agent so that each call is decided
/// before it is made.
///
/// Arguments that do not parse are the model's mistake: they are answered without a
/// call and never count against the tool. A tool error of kind `InvalidArgs` or
/// `NotFound` is judged by the tool's [blame rule](tower_circuit_breaker::expediter::Blame)
/// as `invalid argument: ...` or `not found: ...` (by default, the caller's mistake). A
/// call the breaker refuses (it opened after the decision, or an operator killed it) is
/// answered with the same honest text a skip has. The caller's [`ToolContext`] is lent
/// to the tool and handed back however the call ends: done, failed or refused.
///
/// ```
/// use rig_core::tool::{Tool, ToolContext};
/// use tower_circuit_breaker::expediter::{Expediter, ToolSpec};
///
/// struct Weather;
///
/// impl Tool for Weather {
///     const NAME: &'static str = "weather";
///     type Args = serde_json::Value;
///     type Output = String;
///     type Error = std::io::Error;
///
///     fn description(&self) -> String {
///         "The weather in a city".into()
///     }
///     fn parameters(&self) -> serde_json::Value {
///         serde_json::json!({ "type": "object", "properties": { "city": { "type": "string" } } })
///     }
///     async fn call(&self, _: &mut ToolContext, _: Self::Args) -> Result<String, std::io::Error> {
///         Ok("sunny".into())
///     }
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let expediter = Expediter::builder()
///     .tool(ToolSpec::new("weather").fallback("ask the user to look outside"))
///     .build()?;
/// let tool = tower_circuit_breaker_rig::supervised(&expediter, Weather)?;
/// assert_eq!(tool.name().as_str(), "weather");
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`ExpediterError::UnknownTool`] when `expediter` has no tool of that name.
pub fn supervised<T>(expediter: &Expediter, tool: T) -> Result<DynamicTool, ExpediterError>
where
    T: Tool + 'static,
{
    let definition = tool_definition(&tool);
    let tool = Arc::new(tool);
    let dynamic = DynamicTool::new_with_context(
        definition.name.clone(),
        definition.description.clone(),
        definition.parameters.clone(),
        move |context: &mut ToolContext, args: Value| {
            let tool = tool.clone();
            Box::pin(async move {
                let args: T::Args = parse_args(args)?;
                let output = tool
                    .call(context, args)
                    .await
                    .map_err(|e| tool.map_error(e))?;
                output.into_tool_output()
            })
        },
    )
    .with_annotations(definition.annotations);
    supervised_dynamic(expediter, dynamic)
}

/// [`supervised`] for a tool defined at runtime (a rig [`DynamicTool`], such as one an
/// MCP client made).
///
/// # Errors
///
/// [`ExpediterError::UnknownTool`] when `expediter` has no tool of that name.
pub fn supervised_dynamic(
    expediter: &Expediter,
    tool: DynamicTool,
) -> Result<DynamicTool, ExpediterError> {
    let name = tool.name().clone();
    let layer = expediter.layer(name.as_str())?;
    let expediter = expediter.clone();
    let definition = tool.definition();
    let supervised = DynamicTool::new_with_context(
        definition.name,
        definition.description,
        definition.parameters,
        move |context: &mut ToolContext, args: Value| {
            let tool = tool.clone();
            let layer = layer.clone();
            let expediter = expediter.clone();
            let name = name.clone();
            Box::pin(async move {
                // The dispatch's context waits in a slot: the call borrows it and puts it
                // back however it ends (done, failed, dropped), and a call the breaker
                // refuses never takes it. Either way the caller gets it back as it was.
                let slot = Arc::new(Mutex::new(Some(std::mem::replace(
                    context,
                    ToolContext::new(),
                ))));
                let lent = slot.clone();
                let inner = service_fn(move |args: Value| {
                    let tool = tool.clone();
                    let mut borrowed = Borrowed::from(&lent);
                    async move {
                        let context = borrowed.context();
                        tool.run_with(context, args).await.map_err(ToolFailure)
                    }
                });
                let outcome = layer.layer(inner).oneshot(args).await;
                if let Some(returned) = lock(&slot).take() {
                    *context = returned;
                }
                match outcome {
                    Ok(answer) => Ok(answer.into_inner()),
                    Err(error) => Err(match error.downcast::<ToolFailure>() {
                        Ok(failure) => failure.0,
                        Err(other) => match Rejected::find(&*other) {
                            Some(_) => ToolExecutionError::new(
                                ToolErrorKind::Other,
                                skip_text(&expediter, name.as_str(), None),
                            ),
                            None => {
                                ToolExecutionError::new(ToolErrorKind::Other, other.to_string())
                            }
                        },
                    }),
                }
            })
        },
    )
    .with_annotations(definition.annotations);
    Ok(supervised)
}

/// Arguments that do not parse: answered before the breaker, as the model's mistake.
fn parse_args<A: rig_core::serde::de::DeserializeOwned>(
    args: Value,
) -> Result<A, ToolExecutionError> {
    let args = if args.is_null() {
        Value::Object(Default::default())
    } else {
        args
    };
    serde_json::from_value(args).map_err(|error| {
        ToolExecutionError::new(
            ToolErrorKind::InvalidArgs,
            format!("failed to parse tool arguments: {error}"),
        )
    })
}

/// Where a call's rig context waits while the call is under the breaker.
type Slot = Arc<Mutex<Option<ToolContext>>>;

fn lock(slot: &Slot) -> MutexGuard<'_, Option<ToolContext>> {
    slot.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The context, taken from its slot for one run of the tool and put back when the run
/// ends or is dropped.
struct Borrowed {
    slot: Slot,
    context: Option<ToolContext>,
}

impl From<&Slot> for Borrowed {
    fn from(slot: &Slot) -> Self {
        let context = lock(slot).take();
        Borrowed {
            slot: slot.clone(),
            context,
        }
    }
}

impl Borrowed {
    fn context(&mut self) -> &mut ToolContext {
        // Only a second run at once (none is made) would find the slot empty.
        self.context.get_or_insert_with(ToolContext::new)
    }
}

impl Drop for Borrowed {
    fn drop(&mut self) {
        if let Some(context) = self.context.take() {
            *lock(&self.slot) = Some(context);
        }
    }
}

/// A tool's own error, as its breaker's blame rule reads it.
struct ToolFailure(ToolExecutionError);

impl fmt::Debug for ToolFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for ToolFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.kind() {
            ToolErrorKind::InvalidArgs => write!(f, "invalid argument: {}", self.0.message()),
            ToolErrorKind::NotFound => write!(f, "not found: {}", self.0.message()),
            _ => f.write_str(self.0.message()),
        }
    }
}

impl std::error::Error for ToolFailure {}
