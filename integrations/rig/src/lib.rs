//! [rig](https://docs.rs/rig-agent) agents under
//! [tower-circuit-breaker](https://docs.rs/tower-circuit-breaker): an agent's tools under
//! the expediter, and its model behind a breaker.
//!
//! - [`supervised`]: a rig tool whose calls go through its breaker in the expediter.
//! - [`ExpediterHook`]: the agent hook that decides each tool call before it is made (a
//!   skip answers the model with an honest tool result: why, what to use instead, when
//!   the tool is tried again) and advertises to the model, each turn, only the tools the
//!   expediter offers.
//! - [`BreakerHttpClient`]: rig's HTTP client behind a breaker, for the model's endpoint.
//!
//! ```no_run
//! use rig_agent::tool::server::ToolServer;
//! use rig_agent::AgentBuilder;
//! use rig_core::providers::openai::OpenAIConfig;
//! use tower_circuit_breaker::expediter::{Alternative, Expediter, ToolSpec};
//! use tower_circuit_breaker::CircuitBreakerLayer;
//! use tower_circuit_breaker_rig::{supervised, BreakerHttpClient, ExpediterHook};
//! # use rig_core::tool::{Tool, ToolContext};
//! # struct Search; struct Fetch;
//! # impl Tool for Search { const NAME: &'static str = "web_search"; type Args = serde_json::Value; type Output = String; type Error = std::io::Error;
//! #   fn description(&self) -> String { String::new() } fn parameters(&self) -> serde_json::Value { serde_json::json!({"type": "object"}) }
//! #   async fn call(&self, _: &mut ToolContext, _: Self::Args) -> Result<String, std::io::Error> { Ok(String::new()) } }
//! # impl Tool for Fetch { const NAME: &'static str = "docs_fetch"; type Args = serde_json::Value; type Output = String; type Error = std::io::Error;
//! #   fn description(&self) -> String { String::new() } fn parameters(&self) -> serde_json::Value { serde_json::json!({"type": "object"}) }
//! #   async fn call(&self, _: &mut ToolContext, _: Self::Args) -> Result<String, std::io::Error> { Ok(String::new()) } }
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let expediter = Expediter::builder()
//!     .tool(ToolSpec::new("web_search")
//!         .alternative(Alternative::high("docs_fetch", "fetch the docs page", "no wider search"))
//!         .fallback("ask the user"))
//!     .tool(ToolSpec::new("docs_fetch").fallback("ask the user for the page"))
//!     .build()?;
//! let breaker = CircuitBreakerLayer::builder().name("model").failure_threshold(3).build()?;
//! let http = BreakerHttpClient::new(rig_reqwest::ReqwestClient::default(), breaker);
//! let model = OpenAIConfig::new(std::env::var("OPENAI_API_KEY")?).connect(http).chat("gpt-4o-mini");
//!
//! let tools = ToolServer::new().run();
//! let agent = AgentBuilder::new(model)
//!     .tool_server_handle(tools.clone())
//!     .dynamic_tool(supervised(&expediter, Search)?)
//!     .dynamic_tool(supervised(&expediter, Fetch)?)
//!     .add_hook(ExpediterHook::new(expediter.clone(), tools))
//!     .build();
//! let answer = agent.prompt("What changed in acme-api 3.x?").max_turns(8).await;
//! println!("{answer:?}\n{}", expediter.report());
//! # Ok(()) }
//! ```
//!
//! Needs Rust 1.97.1 (rig-agent 0.46's rust-version); tower-circuit-breaker itself keeps
//! 1.85.
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]
#![forbid(unsafe_code)]

mod hook;
mod model;
mod tool;

pub use crate::hook::ExpediterHook;
pub use crate::model::{BreakerHttpClient, ModelClassifier};
pub use crate::tool::{supervised, supervised_dynamic};
