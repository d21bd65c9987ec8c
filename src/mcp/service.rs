//! Calling a server's tools as a tower service: [`McpService`] (any tool, by
//! [`ToolCall`]) and [`ToolService`] (one tool, by its arguments). A call goes to the
//! server only if it runs, lists the tool, and its breaker lets the call through; the
//! answer is checked and every failure is a typed [`McpError`].

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, ErrorCode, JsonObject};
use rmcp::ServiceError;
use tower::{Service, ServiceExt};

use crate::error::Rejected;

use super::connection::{quote, said, service_error, Loss};
use super::error::McpError;
use super::server::{Connection, Shared};

/// The future of an MCP call.
pub type McpFuture = Pin<Box<dyn Future<Output = Result<CallToolResult, McpError>> + Send>>;

/// The prefix the official TypeScript SDK gives a protocol error it reports inside a
/// tool result (`isError: true`) rather than as a JSON-RPC error: invalid arguments and
/// unknown tools come back this way.
const INVALID_PARAMS_IN_RESULT: &str = "MCP error -32602:";

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

/// A call as the server's breaker sees it.
pub(crate) struct Call {
    connection: Arc<Connection>,
    tool: Arc<str>,
    arguments: JsonObject,
}

/// Calls in flight and sent, counted where a call is sent.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) in_flight: AtomicUsize,
    pub(crate) sent: AtomicU64,
}

/// What the server's breaker wraps for calls: one `tools/call`, bounded by the call
/// timeout (dropped, it tells the server the call is cancelled).
#[derive(Debug, Clone)]
pub(crate) struct CallInner {
    pub(crate) server: Arc<str>,
    pub(crate) timeout: Duration,
    pub(crate) counters: Arc<Counters>,
}

impl Service<Call> for CallInner {
    type Response = CallToolResult;
    type Error = McpError;
    type Future = McpFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), McpError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: Call) -> McpFuture {
        let (server, timeout, counters) =
            (self.server.clone(), self.timeout, self.counters.clone());
        Box::pin(async move {
            let params =
                CallToolRequestParams::new(call.tool.to_string()).with_arguments(call.arguments);
            counters.sent.fetch_add(1, Ordering::SeqCst);
            counters.in_flight.fetch_add(1, Ordering::SeqCst);
            let _in_flight = InFlight(&counters);
            match tokio::time::timeout(timeout, call.connection.peer.call_tool(params)).await {
                Err(_) => Err(McpError::Timeout {
                    server,
                    tool: call.tool,
                    after: timeout,
                }),
                Ok(Ok(result)) => checked(server, call.tool, result),
                Ok(Err(error)) => Err(from_service_error(server, call.tool, error)),
            }
        })
    }
}

/// Counts a call out of flight when it ends, however it ends.
struct InFlight<'a>(&'a Counters);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A result as it is: a tool's failure (`isError: true`) is an error, and one that is
/// really invalid arguments (as the TypeScript SDK reports them) is the caller's.
fn checked(
    server: Arc<str>,
    tool: Arc<str>,
    result: CallToolResult,
) -> Result<CallToolResult, McpError> {
    if result.is_error != Some(true) {
        return Ok(result);
    }
    let text: Vec<&str> = result
        .content
        .iter()
        .filter_map(|c| c.as_text())
        .map(|t| t.text.as_str())
        .collect();
    let text = text.join("\n");
    if let Some(rest) = text.strip_prefix(INVALID_PARAMS_IN_RESULT) {
        return Err(McpError::InvalidArguments {
            server,
            tool,
            message: quote(rest.trim()),
        });
    }
    let message = if text.trim().is_empty() {
        "the tool reported an error and said nothing more".to_string()
    } else {
        quote(text.trim())
    };
    Err(McpError::Tool {
        server,
        tool,
        message,
        result: Box::new(result),
    })
}

fn from_service_error(server: Arc<str>, tool: Arc<str>, error: ServiceError) -> McpError {
    match error {
        ServiceError::McpError(data) if data.code == ErrorCode::INVALID_PARAMS => {
            McpError::InvalidArguments {
                server,
                tool,
                message: quote(&data.message),
            }
        }
        ServiceError::McpError(data) => McpError::Server {
            server,
            tool,
            code: data.code.0,
            message: quote(&data.message),
        },
        ServiceError::TransportClosed => McpError::ConnectionLost { server, tool },
        ServiceError::TransportSend(error) => {
            let message = said(&error.to_string());
            #[cfg(feature = "mcp-http")]
            match super::remote::SendFailure::of(&error) {
                super::remote::SendFailure::SessionExpired => {
                    return McpError::SessionExpired { server, tool }
                }
                super::remote::SendFailure::Garbage => {
                    return McpError::Protocol {
                        server,
                        tool,
                        message,
                    }
                }
                super::remote::SendFailure::Lost => {
                    return McpError::ConnectionLost { server, tool }
                }
                super::remote::SendFailure::Transport => {}
            }
            McpError::Transport {
                server,
                tool,
                message,
            }
        }
        ServiceError::Timeout { timeout } => McpError::Timeout {
            server,
            tool,
            after: timeout,
        },
        ServiceError::Cancelled { reason } => McpError::Cancelled {
            server,
            tool,
            reason: quote(reason.as_deref().unwrap_or("no reason given")),
        },
        other => McpError::Protocol {
            server,
            tool,
            message: service_error(&other),
        },
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
        McpError::ConnectionLost { .. } => {
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
