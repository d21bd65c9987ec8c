//! MCP tool servers under the breaker and the expediter (feature `mcp`): stdio servers
//! (and, with the feature `mcp-http`, remote servers over Streamable HTTP) supervised so
//! that a dead one comes back only through its breaker's probe, and their tools offered
//! to the model only while they work, with an honest line for each one held back.
//!
//! The feature needs Rust 1.88 (the rust-version of rmcp, the Rust MCP SDK it builds on:
//! its client, over the child's stdin and stdout), above the crate's own 1.85. It is a
//! feature rather than a crate of its own: without it, the crate still builds on 1.85
//! (checked with every other feature on); one crate keeps one version, one changelog and
//! one set of docs; and MCP support moves with the breaker's holds and the expediter's
//! availability it is built on.
//!
//! # A server
//!
//! [`McpServer`] runs one stdio server under a supervisor task:
//!
//! - **Start**: spawn, the `initialize` handshake and the tool list, within the start
//!   timeout. What the server sends is checked before it is believed: lines that are
//!   not JSON-RPC are dropped, a message over the size limit is dropped unread, an answer
//!   to another request is not taken for this one, and its tool list is checked tool by
//!   tool ([`ToolList`]: names, schemas, sizes, duplicates) and refused whole when it has
//!   too many tools or pages. Its last stderr line is kept to say why it died.
//! - **One breaker per server** ([`McpServer::breaker`]): every call goes through it;
//!   failures of the server (a timeout, a send error, a broken answer, the connection
//!   lost under the call) count, any answer is a success. When it opens on them (by
//!   default after 3 in a row) the server is unresponsive: its process is stopped, to be
//!   started afresh.
//! - **Restarts only through that breaker's probe**: when the server dies (or cannot
//!   start, or is stopped as unresponsive), the supervisor holds its breaker open for the
//!   restart backoff ([`RestartPolicy`]: 0.5 s doubling to 30 s by default); the restart
//!   is the breaker's probe, so it comes only when the breaker lets one through, never in
//!   a tight loop, and not at all while its kill switch is on. More restarts than the
//!   crash-loop limit within its window (5 in 60 s) and the supervisor gives up: the
//!   breaker is forced open, as an operator would, until [`McpServer::restart`] or a
//!   reset. After every restart the tool list is read again; a tool that is gone is
//!   reported as gone ([`McpError::ToolVanished`]) and never sent.
//! - **A call in flight when the server dies fails once** ([`McpError::ConnectionLost`])
//!   and is never sent again: it may have had effects. Calls while the server is down
//!   fail at once ([`McpError::Unavailable`], saying why and when it is restarted)
//!   without reaching anything.
//!
//! Calls go through [`McpServer::tool`] (a tower service for one tool, taking its
//! arguments) or [`McpServer::service`] (any tool, by [`ToolCall`]). Wrap them in a tool's
//! breaker with [`McpClassifier`], which knows whose fault each failure is ([`Fault`]):
//! the server's (down, lost, timed out) and the tool's (`isError: true`, by default)
//! count; the caller's never do: invalid arguments (JSON-RPC `-32602`, or the same
//! inside a result, as the TypeScript SDK reports it) and tools the server does not list
//! (never sent). [`ServerStatus`] says where a server stands, and
//! [`ServerStatus::unavailable_because`] why it cannot be used, in one line.
//!
//! ```no_run
//! use std::time::Duration;
//! use tower::{Layer, Service, ServiceExt};
//! use tower_circuit_breaker::mcp::{McpClassifier, McpServer, RestartPolicy};
//! use tower_circuit_breaker::{CircuitBreakerLayer, Cooldown};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), tower::BoxError> {
//! let server = McpServer::builder("files", "npx")
//!     .args(["-y", "@modelcontextprotocol/server-filesystem@2026.8.31", "/srv/project"])
//!     .call_timeout(Duration::from_secs(30))
//!     .restart(RestartPolicy::new().crash_loop(5, Duration::from_secs(60)))
//!     .start()?;
//! server.wait_ready(Duration::from_secs(60)).await?;
//!
//! // The tool's own breaker: three failures of the server or the tool open it.
//! let breaker = CircuitBreakerLayer::builder()
//!     .name("read_text_file")
//!     .failure_threshold(3)
//!     .cooldown(Cooldown::Time(Duration::from_secs(10)))
//!     .build()?
//!     .with_classifier(McpClassifier::new());
//! let mut read = breaker.layer(server.tool("read_text_file"));
//! let mut arguments = serde_json::Map::new();
//! arguments.insert("path".into(), "/srv/project/README.md".into());
//! let answer = read.ready().await?.call(arguments).await?;
//! println!("{:?}", answer.get_ref().content);
//! # Ok(()) }
//! ```
//!
//! # A remote server
//!
//! With the feature `mcp-http`, `McpServer::remote` reaches a server over Streamable
//! HTTP (rmcp's client, on reqwest) and the same supervisor keeps it: where a stdio
//! server is spawned, a remote one gets a session. Everything above applies, with a
//! session for the process: "restarting" it is a new session (`initialize` and the tool
//! list again), made only when its breaker lets a probe through; a call whose answer
//! stream or connection breaks under it (the server died) fails once with
//! [`McpError::ConnectionLost`] and is never sent again; a session the server forgot
//! (HTTP 404, or a 400 saying so) fails the calls that found it so ([`McpError::SessionExpired`]: not run, not
//! replayed; rmcp's own replay of them is turned off) and is made again once, the same
//! way ([`Down::SessionExpired`]). Answers that are not MCP (the wrong content type, JSON
//! that is not JSON-RPC, an event stream that breaks its format) are
//! [`McpError::Protocol`]; a refused connection or an HTTP error status is
//! [`McpError::Transport`]; both count against its breaker. Its URL is shown with its
//! user information and query string redacted ([`ServerStatus::url`]); its headers never.
//!
//! # Under an expediter
//!
//! [`McpTools`] makes each tool of each server a tool of an
//! [`Expediter`](crate::expediter::Expediter), named `server__tool`: its own breaker (one
//! per server above, one per tool here), a capability entry (from its description, with
//! a manual fallback, or your own: [`McpToolsBuilder::spec`]), and an availability
//! reported from its server's status as it changes
//! ([`Expediter::set_availability`](crate::expediter::Expediter::set_availability)).
//! While a server is down, restarting or given up, or no longer lists a tool, decisions
//! about its tools route away at once without spending the failure budget, and
//! [`McpTools::offered`] gives the model the MCP definitions of the tools that work with
//! a line for each one held back:
//!
//! ```text
//! memory__read_graph is not offered: server `memory` was killed by signal 9; it is
//! restarted when its breaker lets a probe through, after a 2 s wait; it is tried again
//! once it is reported available; instead, tell the user that `read_graph` (MCP server
//! `memory`) cannot be used now
//! ```
//!
//! `examples/mcp_agent` runs an agent over two real servers with a scripted model
//! behind async-openai, kills one mid-run, and shows its tools leave and return.

mod call;
mod classify;
mod config;
mod connection;
mod error;
mod exit;
mod offer;
mod quote;
#[cfg(feature = "mcp-http")]
mod refusal;
mod relist;
#[cfg(feature = "mcp-http")]
mod remote;
mod restart;
mod server;
mod service;
mod settings;
mod shared;
mod status;
mod supervisor;
mod tool_list;
mod tools;
mod transport;
#[cfg(feature = "mcp-http")]
mod url_free_client;

pub use self::call::McpFuture;
pub use self::classify::McpClassifier;
pub use self::config::McpServerBuilder;
pub use self::error::{Fault, McpConfigError, McpError, StartError};
pub use self::exit::Exit;
pub use self::offer::McpOffer;
pub use self::restart::RestartPolicy;
pub use self::server::McpServer;
pub use self::service::{McpService, ToolCall, ToolService};
pub use self::status::{Down, ServerState, ServerStatus};
pub use self::tool_list::{RefusedTool, ToolList};
pub use self::tools::{McpToolService, McpTools, McpToolsBuilder, ToolInfo};

/// The MCP SDK these types come from (rmcp), for its model types:
/// [`Tool`](rmcp::model::Tool), [`CallToolResult`](rmcp::model::CallToolResult),
/// [`JsonObject`](rmcp::model::JsonObject).
pub use rmcp;
