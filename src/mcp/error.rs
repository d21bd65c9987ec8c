//! What can go wrong: a server set up wrong ([`McpConfigError`]), a start that failed
//! ([`StartError`]), and a call that failed ([`McpError`]), each saying whose fault it
//! is.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::CallToolResult;

use super::exit::Exit;

/// A server or tool set that cannot work, refused when built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum McpConfigError {
    /// The server's name is empty or has characters other than letters, digits, `_` and
    /// `-` (it becomes part of the names the model sees).
    #[error("server name `{0}` must be 1 to 64 letters, digits, `_` or `-`")]
    ServerName(String),
    /// The command to run is empty.
    #[error("server `{0}` has an empty command")]
    EmptyCommand(String),
    /// A remote server's URL is not an `http` or `https` URL with a host (feature
    /// `mcp-http`). The URL is shown with its user information and query string
    /// redacted.
    #[error("server `{server}`: `{url}` cannot be served: {why}")]
    Url {
        /// The server.
        server: String,
        /// The URL, redacted.
        url: String,
        /// What is wrong.
        why: String,
    },
    /// A header for a remote server is not valid, or is one the MCP transport sets
    /// itself (feature `mcp-http`). Its value is never shown.
    #[error("server `{server}`: header `{name}` cannot be sent: {why}")]
    Header {
        /// The server.
        server: String,
        /// The header's name.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// A setting of a stdio server (a command's arguments, environment or folder) was
    /// given for a remote one, or a remote server's (headers, a bearer token) for a
    /// stdio one.
    #[error("server `{server}`: `{setting}` is not a setting of {kind} server")]
    NotASetting {
        /// The server.
        server: String,
        /// The builder method.
        setting: &'static str,
        /// `a stdio` or `a remote`.
        kind: &'static str,
    },
    /// A timeout of zero would fail every start or call.
    #[error("server `{server}`: the {which} timeout must be above zero")]
    ZeroTimeout {
        /// The server.
        server: String,
        /// `start`, `call` or `stop`.
        which: &'static str,
    },
    /// The restart backoff starts at zero or its cap is below its start.
    #[error("restart backoff must start above zero and its cap must not be below its start, got {initial:?} and {max:?}")]
    RestartBackoff {
        /// The first wait.
        initial: Duration,
        /// The cap.
        max: Duration,
    },
    /// The crash-loop window is empty.
    #[error("the crash-loop window must be above zero")]
    CrashLoopWindow,
    /// A limit on what the server may send is zero.
    #[error("server `{server}`: {which} must be at least 1")]
    ZeroLimit {
        /// The server.
        server: String,
        /// Which limit.
        which: &'static str,
    },
    /// The breaker that guards the server has bad settings.
    #[error("server `{server}`: {source}")]
    Breaker {
        /// The server.
        server: String,
        /// What is wrong.
        #[source]
        source: crate::error::ConfigError,
    },
    /// Servers are supervised by a task: they must be started inside a tokio runtime.
    #[error("server `{0}` must be started inside a tokio runtime")]
    NoRuntime(String),
    /// Two servers of one tool set share a name.
    #[error("server `{0}` is added twice")]
    DuplicateServer(String),
    /// A tool of the server has the name (`server__tool`) of another server's tool in
    /// the same tool set (server `a`'s tool `b__c` and server `a__b`'s tool `c`): the
    /// name stays with the tool that had it first.
    #[error("server `{server}`'s tool `{tool}` would be `{name}`, which is already server `{taken_by}`'s tool")]
    ToolNameTaken {
        /// The name both tools would have.
        name: String,
        /// The server refused.
        server: String,
        /// Its tool.
        tool: String,
        /// The server whose tool has the name.
        taken_by: String,
    },
    /// The server has had as many tools declared in the tool set as it may (its
    /// expected tools and twice its `max_tools`: the expediter keeps every tool it is
    /// given): a new name is not declared.
    #[error(
        "server `{server}` has had {limit} tools declared, as many as it may; `{tool}` is not"
    )]
    TooManyTools {
        /// The server.
        server: String,
        /// The tool not declared.
        tool: String,
        /// How many of its tools may be declared.
        limit: usize,
    },
    /// The expediter refused a tool of the server.
    #[error("server `{server}`: {source}")]
    Expediter {
        /// The server.
        server: String,
        /// What the expediter said.
        #[source]
        source: crate::expediter::ExpediterError,
    },
}

/// Why a server could not be started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The command could not be run (not found, not executable...).
    #[error("cannot run `{command}`: {message}")]
    Spawn {
        /// The command.
        command: String,
        /// The operating system's words.
        message: String,
    },
    /// The process ended before it was ready.
    #[error("it {exit} before it was ready")]
    Exited {
        /// How it ended.
        exit: Exit,
    },
    /// The process answered the handshake wrongly, or closed its output.
    #[error("its handshake failed: {message}")]
    Handshake {
        /// What went wrong.
        message: String,
    },
    /// It did not finish a step of its start in time (nothing it printed was a
    /// message, or it hung).
    #[error("it did not answer {step} within {after:?}")]
    Timeout {
        /// `initialize` or `tools/list`.
        step: &'static str,
        /// The start timeout.
        after: Duration,
    },
    /// Its tool list could not be read, or was refused whole.
    #[error("its tool list was refused: {message}")]
    ToolList {
        /// Why.
        message: String,
    },
    /// A remote server could not be reached (the connection was refused, or its host or
    /// network is unreachable): it is down, not crashing. Such starts are not counted towards the crash-loop
    /// limit: the server is tried again at the backoff's pace until it answers.
    #[error("it could not be reached: {message}")]
    Unreachable {
        /// Why.
        message: String,
    },
}

/// A call to a server's tool that failed, and whose fault it was.
///
/// The [classifier](super::McpClassifier) of a tool's breaker reads it: the server's
/// faults (it is down, it died under the call, it timed out, it sent what is not a
/// message) and the tool's ([`McpError::Tool`], by default) count against the breakers;
/// the caller's (invalid arguments, a tool the server does not have) do not.
///
/// Every message in it is shown as the crate shows what a server says: what looks like a
/// credential redacted ([`redact`](crate::redact)), and what the server was given (a
/// remote server's header values and bearer token, the secrets on a stdio server's
/// command line) taken out. [`McpError::Tool`]'s `result` is the tool's answer as it
/// came, for the caller; its `Debug` shows the result's shape, not its text.
#[derive(Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The server is not serving (starting, down, restarting, given up, stopped, its
    /// breaker open or killed): the call was not sent.
    #[error("server `{server}` is unavailable: {why}")]
    Unavailable {
        /// The server.
        server: Arc<str>,
        /// Why, in one line, and when it may be back.
        why: Arc<str>,
    },
    /// The server closed the connection (it died) while the call was in flight. The call
    /// is not sent again: it may have had effects.
    #[error("server `{server}` closed the connection while `{tool}` was in flight; the call was not replayed")]
    ConnectionLost {
        /// The server.
        server: Arc<str>,
        /// The tool.
        tool: Arc<str>,
    },
    /// A remote server answered that it does not know the session (HTTP 404, or a 400 saying so: it
    /// restarted, or expired the session): it did not run the call. The call is not sent
    /// again; a new session is made through the server's breaker's probe.
    #[error("server `{server}` no longer knows its session: `{tool}` was not run and not replayed; a new session is made when its breaker lets a probe through")]
    SessionExpired {
        /// The server.
        server: Arc<str>,
        /// The tool.
        tool: Arc<str>,
    },
    /// A remote server could not be reached (the connection was refused, or its host or
    /// network is unreachable): the call was not sent. The server is taken as down at once, and tried
    /// again through its breaker's probe; the calls after this one fail at once as
    /// [`Unavailable`](McpError::Unavailable).
    #[error("server `{server}` could not be reached ({message}): `{tool}` was not sent; it is tried again when its breaker lets a probe through")]
    Unreachable {
        /// The server.
        server: Arc<str>,
        /// The tool.
        tool: Arc<str>,
        /// Why, with its causes (`Connection refused`), redacted.
        message: String,
    },
    /// The server did not answer in time; the call was cancelled.
    #[error(
        "`{tool}` on server `{server}` did not answer within {after:?}; the call was cancelled"
    )]
    Timeout {
        /// The server.
        server: Arc<str>,
        /// The tool.
        tool: Arc<str>,
        /// The call timeout.
        after: Duration,
    },
    /// The call could not be sent to the server.
    #[error("sending `{tool}` to server `{server}` failed: {message}")]
    Transport {
        /// The server.
        server: Arc<str>,
        /// The tool.
        tool: Arc<str>,
        /// What went wrong.
        message: String,
    },
    /// The server answered with something that is not a tool's result.
    #[error(
        "server `{server}` answered `{tool}` with something that is not a tool result: {message}"
    )]
    Protocol {
        /// The server.
        server: Arc<str>,
        /// The tool.
        tool: Arc<str>,
        /// What was wrong.
        message: String,
    },
    /// The server answered with a JSON-RPC error other than invalid parameters.
    #[error("server `{server}` answered `{tool}` with error {code}: {message}")]
    Server {
        /// The server.
        server: Arc<str>,
        /// The tool.
        tool: Arc<str>,
        /// The JSON-RPC error code.
        code: i32,
        /// Its message.
        message: String,
    },
    /// The arguments do not fit the tool's input schema (JSON-RPC `-32602` for a tool
    /// the server lists): the caller's mistake.
    #[error("invalid arguments for `{tool}` on server `{server}`: {message}")]
    InvalidArguments {
        /// The server.
        server: Arc<str>,
        /// The tool.
        tool: Arc<str>,
        /// What the server said.
        message: String,
    },
    /// The server never listed a tool of this name: the caller's mistake, never sent.
    #[error("server `{server}` has no tool `{tool}`")]
    UnknownTool {
        /// The server.
        server: Arc<str>,
        /// The tool.
        tool: Arc<str>,
    },
    /// The server listed the tool once but no longer does (its tool list was read
    /// again after a restart or a change): not sent, not retried.
    #[error("server `{server}` no longer lists `{tool}`")]
    ToolVanished {
        /// The server.
        server: Arc<str>,
        /// The tool.
        tool: Arc<str>,
    },
    /// The tool ran and reported a failure (`isError: true`). The result is kept: its
    /// text is for the model.
    #[error("`{tool}` on server `{server}` failed: {message}")]
    Tool {
        /// The server.
        server: Arc<str>,
        /// The tool.
        tool: Arc<str>,
        /// The result's text, as it may be shown.
        message: String,
        /// The whole result, as the tool answered (its text not redacted: the caller's
        /// data, for the model).
        result: Box<CallToolResult>,
    },
    /// The server cancelled the call.
    #[error("server `{server}` cancelled `{tool}`: {reason}")]
    Cancelled {
        /// The server.
        server: Arc<str>,
        /// The tool.
        tool: Arc<str>,
        /// Its reason.
        reason: String,
    },
}

/// Every field but a tool result's content, which is the tool's text as it came: its
/// size is shown instead.
impl fmt::Debug for McpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (variant, message) = match self {
            McpError::Unavailable { server, why } => {
                return f
                    .debug_struct("Unavailable")
                    .field("server", server)
                    .field("why", why)
                    .finish();
            }
            McpError::Timeout {
                server,
                tool,
                after,
            } => {
                return f
                    .debug_struct("Timeout")
                    .field("server", server)
                    .field("tool", tool)
                    .field("after", after)
                    .finish();
            }
            McpError::Server {
                server,
                tool,
                code,
                message,
            } => {
                return f
                    .debug_struct("Server")
                    .field("server", server)
                    .field("tool", tool)
                    .field("code", code)
                    .field("message", message)
                    .finish();
            }
            McpError::Tool {
                server,
                tool,
                message,
                result,
            } => {
                return f
                    .debug_struct("Tool")
                    .field("server", server)
                    .field("tool", tool)
                    .field("message", message)
                    .field(
                        "result",
                        &format_args!(
                            "CallToolResult {{ content: [{} items], is_error: {:?}, .. }}",
                            result.content.len(),
                            result.is_error
                        ),
                    )
                    .finish();
            }
            McpError::ConnectionLost { .. } => ("ConnectionLost", None),
            McpError::SessionExpired { .. } => ("SessionExpired", None),
            McpError::UnknownTool { .. } => ("UnknownTool", None),
            McpError::ToolVanished { .. } => ("ToolVanished", None),
            McpError::Unreachable { message, .. } => ("Unreachable", Some(("message", message))),
            McpError::Transport { message, .. } => ("Transport", Some(("message", message))),
            McpError::Protocol { message, .. } => ("Protocol", Some(("message", message))),
            McpError::InvalidArguments { message, .. } => {
                ("InvalidArguments", Some(("message", message)))
            }
            McpError::Cancelled { reason, .. } => ("Cancelled", Some(("reason", reason))),
        };
        let mut shown = f.debug_struct(variant);
        shown.field("server", &self.server());
        if let Some(tool) = self.tool() {
            shown.field("tool", &tool);
        }
        if let Some((name, text)) = message {
            shown.field(name, text);
        }
        shown.finish()
    }
}

impl McpError {
    /// The tool the call was of (`None`: [`McpError::Unavailable`], which is about the
    /// server).
    fn tool(&self) -> Option<&str> {
        match self {
            McpError::Unavailable { .. } => None,
            McpError::ConnectionLost { tool, .. }
            | McpError::SessionExpired { tool, .. }
            | McpError::Unreachable { tool, .. }
            | McpError::Timeout { tool, .. }
            | McpError::Transport { tool, .. }
            | McpError::Protocol { tool, .. }
            | McpError::Server { tool, .. }
            | McpError::InvalidArguments { tool, .. }
            | McpError::UnknownTool { tool, .. }
            | McpError::ToolVanished { tool, .. }
            | McpError::Tool { tool, .. }
            | McpError::Cancelled { tool, .. } => Some(tool),
        }
    }

    /// The server the call was for.
    pub fn server(&self) -> &str {
        match self {
            McpError::Unavailable { server, .. }
            | McpError::ConnectionLost { server, .. }
            | McpError::SessionExpired { server, .. }
            | McpError::Unreachable { server, .. }
            | McpError::Timeout { server, .. }
            | McpError::Transport { server, .. }
            | McpError::Protocol { server, .. }
            | McpError::Server { server, .. }
            | McpError::InvalidArguments { server, .. }
            | McpError::UnknownTool { server, .. }
            | McpError::ToolVanished { server, .. }
            | McpError::Tool { server, .. }
            | McpError::Cancelled { server, .. } => server,
        }
    }

    /// Whose fault it is. See [`Fault`].
    pub fn fault(&self) -> Fault {
        match self {
            McpError::Unavailable { .. }
            | McpError::ConnectionLost { .. }
            | McpError::SessionExpired { .. }
            | McpError::Unreachable { .. }
            | McpError::Timeout { .. }
            | McpError::Transport { .. }
            | McpError::Protocol { .. } => Fault::Server,
            McpError::Server { .. } | McpError::Tool { .. } => Fault::Tool,
            McpError::InvalidArguments { .. }
            | McpError::UnknownTool { .. }
            | McpError::ToolVanished { .. }
            | McpError::Cancelled { .. } => Fault::Caller,
        }
    }
}

/// Whose fault a failed call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The server's: it is down, died under the call, did not answer in time, or sent
    /// what is not a message. Counts against the server's breaker and the tool's.
    Server,
    /// The tool's: the server answered, and the tool failed. Counts against the tool's
    /// breaker (for `isError: true`, as the classifier is told).
    Tool,
    /// The caller's, or nobody's: invalid arguments, a tool the server does not list, a
    /// call the server cancelled. Counts against no breaker.
    Caller,
}
