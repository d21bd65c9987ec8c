//! One `tools/call` as the server's breaker wraps it: [`CallInner`] sends it, bounded by
//! the call timeout and counted, and reads its answer into a typed [`McpError`].

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, ErrorCode, JsonObject};
use rmcp::ServiceError;
use tower::Service;

use super::connection::Connection;
use super::error::McpError;
use super::quote::Secrets;
#[cfg(feature = "mcp-http")]
use super::remote::SendFailure;

/// The future of an MCP call.
pub type McpFuture = Pin<Box<dyn Future<Output = Result<CallToolResult, McpError>> + Send>>;

/// The prefix the official TypeScript SDK gives a protocol error it reports inside a
/// tool result (`isError: true`) rather than as a JSON-RPC error: invalid arguments and
/// unknown tools come back this way.
const INVALID_PARAMS_IN_RESULT: &str = "MCP error -32602:";

/// A call as the server's breaker sees it.
pub(crate) struct Call {
    pub(crate) connection: Arc<Connection>,
    pub(crate) tool: Arc<str>,
    pub(crate) arguments: JsonObject,
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
    /// What the server was given: never shown in what it says.
    pub(crate) secrets: Secrets,
}

impl Service<Call> for CallInner {
    type Response = CallToolResult;
    type Error = McpError;
    type Future = McpFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), McpError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: Call) -> McpFuture {
        let (server, timeout, counters, secrets) = (
            self.server.clone(),
            self.timeout,
            self.counters.clone(),
            self.secrets.clone(),
        );
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
                Ok(Ok(result)) => checked(&secrets, server, call.tool, result),
                Ok(Err(error)) => Err(from_service_error(&secrets, server, call.tool, error)),
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
/// really invalid arguments (as the TypeScript SDK reports them) is the caller's. Its
/// text, in the error's message, is shown as [`Secrets::said`] makes it.
fn checked(
    secrets: &Secrets,
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
            message: secrets.said(rest.trim()),
        });
    }
    let message = if text.trim().is_empty() {
        "the tool reported an error and said nothing more".to_string()
    } else {
        secrets.said(text.trim())
    };
    Err(McpError::Tool {
        server,
        tool,
        message,
        result: Box::new(result),
    })
}

/// A call's error in our words: whatever the server said in it shown as
/// [`Secrets::said`] makes it.
fn from_service_error(
    secrets: &Secrets,
    server: Arc<str>,
    tool: Arc<str>,
    error: ServiceError,
) -> McpError {
    match error {
        ServiceError::McpError(data) if data.code == ErrorCode::INVALID_PARAMS => {
            McpError::InvalidArguments {
                server,
                tool,
                message: secrets.said(&data.message),
            }
        }
        ServiceError::McpError(data) => McpError::Server {
            server,
            tool,
            code: data.code.0,
            message: secrets.said(&data.message),
        },
        ServiceError::TransportClosed => McpError::ConnectionLost { server, tool },
        ServiceError::TransportSend(error) => {
            let message = secrets.said(&error.to_string());
            #[cfg(feature = "mcp-http")]
            match SendFailure::of(&error) {
                SendFailure::SessionExpired => return McpError::SessionExpired { server, tool },
                SendFailure::Garbage => {
                    return McpError::Protocol {
                        server,
                        tool,
                        message,
                    }
                }
                SendFailure::Lost => return McpError::ConnectionLost { server, tool },
                SendFailure::Unreachable => {
                    let message = super::remote::unreachable_cause(&error)
                        .map_or(message, |cause| secrets.said(&cause));
                    return McpError::Unreachable {
                        server,
                        tool,
                        message,
                    };
                }
                SendFailure::Transport => {}
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
            reason: secrets.said(reason.as_deref().unwrap_or("no reason given")),
        },
        other => McpError::Protocol {
            server,
            tool,
            message: secrets.service_error(&other),
        },
    }
}
