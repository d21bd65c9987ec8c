//! What an MCP call's result means for a breaker: [`McpClassifier`] for a tool's
//! breaker, and the server's breaker's own rules for calls and starts.

use std::fmt;
use std::sync::Arc;

use rmcp::model::CallToolResult;

use crate::classify::Classify;
use crate::expediter::Blame;
use crate::Outcome;

use super::connection::Started;
use super::error::{Fault, McpError, StartError};

/// The rule for a tool's own failures (`isError: true`).
type ToolErrorRule = Arc<dyn Fn(&str) -> Blame + Send + Sync>;

/// The classifier of an MCP tool's breaker: the server's faults and the tool's count,
/// the caller's do not.
///
/// | Result | The tool's breaker | The server's breaker |
/// | --- | --- | --- |
/// | a result | success | success |
/// | `isError: true` ([`McpError::Tool`]) | failure (or as the rule says) | success: it answered |
/// | a JSON-RPC error ([`McpError::Server`]) | failure | success: it answered |
/// | invalid arguments, `-32602` ([`McpError::InvalidArguments`]) | ignored: the caller's | success |
/// | a tool it does not (or no longer) list | ignored, never sent | not asked |
/// | down, unavailable ([`McpError::Unavailable`]) | failure | not asked |
/// | the connection lost under the call, the session forgotten (HTTP 404, or a 400 saying so), or a remote server that could not be reached ([`McpError::Unreachable`]) | failure | not counted: its supervisor makes a new connection |
/// | a timeout, a send error, a broken answer | failure | failure |
/// | cancelled by the server | ignored | success |
///
/// By default every `isError: true` result is the tool's failure. A tool whose errors
/// are often the caller's (a file that does not exist) can be given a rule over the
/// result's text:
///
/// ```
/// use tower_circuit_breaker::expediter::Blame;
/// use tower_circuit_breaker::mcp::McpClassifier;
///
/// // "ENOENT: no such file or directory" is the caller's; anything else the tool's.
/// let classifier = McpClassifier::new().tool_errors(Blame::of);
/// # let _ = classifier;
/// ```
#[derive(Clone, Default)]
pub struct McpClassifier {
    tool_errors: Option<ToolErrorRule>,
}

impl McpClassifier {
    /// Every tool error counts against the tool.
    pub fn new() -> Self {
        McpClassifier::default()
    }

    /// Whose fault each `isError: true` result is, from its text: [`Blame::Caller`]
    /// is not counted.
    pub fn tool_errors(mut self, rule: impl Fn(&str) -> Blame + Send + Sync + 'static) -> Self {
        self.tool_errors = Some(Arc::new(rule));
        self
    }

    /// What `error` means for the tool's breaker.
    pub fn outcome(&self, error: &McpError) -> Outcome {
        match (error, error.fault()) {
            (McpError::Tool { message, .. }, _) => {
                let blame = self
                    .tool_errors
                    .as_ref()
                    .map_or(Blame::Tool, |r| r(message));
                match blame {
                    Blame::Tool => Outcome::failure_with(error.to_string()),
                    Blame::Caller => Outcome::Ignored,
                }
            }
            (_, Fault::Server | Fault::Tool) => Outcome::failure_with(error.to_string()),
            (_, Fault::Caller) => Outcome::Ignored,
        }
    }
}

impl Classify<CallToolResult, McpError> for McpClassifier {
    fn classify(&self, result: &Result<CallToolResult, McpError>) -> Outcome {
        match result {
            Ok(_) => Outcome::Success,
            Err(error) => self.outcome(error),
        }
    }
}

impl fmt::Debug for McpClassifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpClassifier")
            .field(
                "tool_errors",
                &if self.tool_errors.is_some() {
                    "custom"
                } else {
                    "the tool's"
                },
            )
            .finish()
    }
}

/// The server's breaker over calls: only the server's own faults count; any answer
/// shows it is there. A lost connection (or session) says nothing here: its supervisor
/// sees the connection end and the process exit, and says why; counted, the calls in flight when
/// a server is killed would trip its breaker first, as if it had stopped answering.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ServerCalls;

impl Classify<CallToolResult, McpError> for ServerCalls {
    fn classify(&self, result: &Result<CallToolResult, McpError>) -> Outcome {
        match result {
            Err(
                McpError::ConnectionLost { .. }
                | McpError::SessionExpired { .. }
                | McpError::Unreachable { .. },
            ) => Outcome::Ignored,
            Err(error) if error.fault() == Fault::Server => {
                Outcome::failure_with(error.to_string())
            }
            _ => Outcome::Success,
        }
    }
}

/// The server's breaker over starts: a start that failed is a failure.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ServerStarts;

impl Classify<Started, StartError> for ServerStarts {
    fn classify(&self, result: &Result<Started, StartError>) -> Outcome {
        match result {
            Ok(_) => Outcome::Success,
            Err(error) => Outcome::failure_with(format!("it {error}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors() -> Vec<McpError> {
        let (server, tool): (Arc<str>, Arc<str>) = ("s".into(), "t".into());
        vec![
            McpError::Unavailable {
                server: server.clone(),
                why: "down".into(),
            },
            McpError::ConnectionLost {
                server: server.clone(),
                tool: tool.clone(),
            },
            McpError::Timeout {
                server: server.clone(),
                tool: tool.clone(),
                after: std::time::Duration::from_secs(1),
            },
            McpError::Server {
                server: server.clone(),
                tool: tool.clone(),
                code: -32603,
                message: "internal".into(),
            },
            McpError::Tool {
                server: server.clone(),
                tool: tool.clone(),
                message: "ENOENT: no such file or directory".into(),
                result: Box::new(CallToolResult::error(vec![])),
            },
            McpError::InvalidArguments {
                server: server.clone(),
                tool: tool.clone(),
                message: "expected number".into(),
            },
            McpError::UnknownTool {
                server: server.clone(),
                tool: tool.clone(),
            },
            McpError::ToolVanished { server, tool },
        ]
    }

    #[test]
    fn the_tool_breaker_counts_server_and_tool_faults_never_the_callers() {
        let counted: Vec<bool> = errors()
            .iter()
            .map(|e| McpClassifier::new().outcome(e).is_failure())
            .collect();
        assert_eq!(counted, [true, true, true, true, true, false, false, false]);
        let lenient = McpClassifier::new().tool_errors(Blame::of);
        assert_eq!(lenient.outcome(&errors()[4]), Outcome::Ignored);
    }

    #[test]
    fn the_server_breaker_counts_only_the_servers_own_faults_and_not_a_lost_connection() {
        let counted: Vec<bool> = errors()
            .into_iter()
            .map(|e| ServerCalls.classify(&Err(e)).is_failure())
            .collect();
        assert_eq!(
            counted,
            [true, false, true, false, false, false, false, false]
        );
    }
}
