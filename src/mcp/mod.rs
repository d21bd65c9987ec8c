//! MCP tool servers under the breaker and the expediter.

mod classify;
mod config;
mod connection;
mod error;
mod offer;
mod restart;
mod server;
mod service;
mod status;
mod supervisor;
mod tool_list;
mod tools;

pub use self::classify::McpClassifier;
pub use self::config::McpServerBuilder;
pub use self::error::{Fault, McpConfigError, McpError, StartError};
pub use self::offer::McpOffer;
pub use self::restart::RestartPolicy;
pub use self::server::McpServer;
pub use self::service::{McpFuture, McpService, ToolCall, ToolService};
pub use self::status::{Down, Exit, ServerState, ServerStatus};
pub use self::tool_list::{RefusedTool, ToolList};
pub use self::tools::{McpToolService, McpTools, McpToolsBuilder, ToolInfo};

/// The MCP SDK these types come from (rmcp), for its model types: [`Tool`](rmcp::model::Tool),
/// [`CallToolResult`](rmcp::model::CallToolResult), [`JsonObject`](rmcp::model::JsonObject).
pub use rmcp;
