//! Calling a server's tools as a tower service: [`McpService`] (any tool, by
//! [`ToolCall`]) and [`ToolService`] (one tool, by its arguments). A call goes to the
//! server only if it runs, lists the tool, and its breaker lets the call through; the
//! answer is checked and every failure is a typed [`McpError`].

use std::sync::Arc;
use std::task::{Context, Poll};

use rmcp::model::{CallToolResult, JsonObject};
use tower::{Service, ServiceExt};

use crate::error::Rejected;

use super::call::{Call, McpFuture};
use super::connection::Loss;
use super::error::McpError;
use super::shared::Shared;

/// One call of a tool: its name (as the server lists it) and its arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The tool.
    pub name: Arc<str>,
    /// Its arguments, a JSON object.
    pub arguments: JsonObject,
}

impl ToolCall {
    /// A call of `name` with `arguments`.
    pub fn new(name: &str, arguments: JsonObject) -> Self {
        ToolCall {
            name: name.into(),
            arguments,
        }
    }
}

/// Calls any tool of one server. Always ready: a call that cannot be made fails in its
/// future with a typed error, without reaching the server.
///
/// # Clone
///
/// Clones call the same server, through its one breaker.
#[derive(Clone)]
pub struct McpService {
    shared: Arc<Shared>,
}

impl McpService {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        McpService { shared }
    }
}

impl Service<ToolCall> for McpService {
    type Response = CallToolResult;
    type Error = McpError;
    type Future = McpFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), McpError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: ToolCall) -> McpFuture {
        Box::pin(call_tool(self.shared.clone(), call.name, call.arguments))
    }
}

impl std::fmt::Debug for McpService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpService")
            .field("server", self.shared.name())
            .finish()
    }
}

/// Calls one tool of one server with the arguments it is given. Always ready, as
/// [`McpService`] is.
///
/// # Clone
///
/// Clones call the same tool, through the server's one breaker.
#[derive(Clone)]
pub struct ToolService {
    shared: Arc<Shared>,
    tool: Arc<str>,
}

impl ToolService {
    pub(crate) fn new(shared: Arc<Shared>, tool: Arc<str>) -> Self {
        ToolService { shared, tool }
    }

    /// The tool's name, as the server lists it.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The server's name.
    pub fn server(&self) -> &str {
        self.shared.name()
    }
}

impl Service<JsonObject> for ToolService {
    type Response = CallToolResult;
    type Error = McpError;
    type Future = McpFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), McpError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, arguments: JsonObject) -> McpFuture {
        Box::pin(call_tool(self.shared.clone(), self.tool.clone(), arguments))
    }
}

impl std::fmt::Debug for ToolService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolService")
            .field("server", self.shared.name())
            .field("tool", &self.tool)
            .finish()
    }
}

/// One call: checked against the server's state and tool list, made through the
/// server's breaker, its failure told to the server's state (a lost connection) and
/// checked against a fresh tool list (invalid arguments for a tool that vanished).
pub(crate) async fn call_tool(
    shared: Arc<Shared>,
    tool: Arc<str>,
    arguments: JsonObject,
) -> Result<CallToolResult, McpError> {
    let connection = shared.connection_for(&tool)?;
    let generation = connection.generation;
    let request = Call {
        connection,
        tool: tool.clone(),
        arguments,
    };
    let error = match shared.calls.clone().oneshot(request).await {
        Ok(answer) => return Ok(answer.into_inner()),
        Err(error) => error,
    };
    let server = shared.name().clone();
    let error = match error.downcast::<McpError>() {
        Ok(error) => *error,
        Err(other) => {
            let why = match other.downcast_ref::<Rejected>() {
                Some(rejected) => shared
                    .status()
                    .unavailable_because()
                    .unwrap_or_else(|| rejected.to_string()),
                // A panic under the call, as the breaker reports it.
                None => other.to_string(),
            };
            return Err(McpError::Unavailable {
                server,
                why: why.into(),
            });
        }
    };
    match error {
        // Unreachable: the server is down; taken so at once, the calls after this one
        // fail at once rather than each finding it out.
        McpError::ConnectionLost { .. } | McpError::Unreachable { .. } => {
            shared.connection_lost(generation, Loss::Connection);
            Err(error)
        }
        McpError::SessionExpired { .. } => {
            shared.connection_lost(generation, Loss::Session);
            Err(error)
        }
        // A server may answer "invalid parameters" for a tool it has just dropped: its
        // list says which.
        McpError::InvalidArguments { .. } => match shared.refresh_tools(generation).await {
            Some(tools) if tools.get(&tool).is_none() => {
                Err(McpError::ToolVanished { server, tool })
            }
            _ => Err(error),
        },
        other => Err(other),
    }
}
