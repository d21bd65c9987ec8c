//! [`ServerSettings`]: what a supervised server was set up with, as every part of it
//! reads it once it is started.

use std::sync::Arc;
use std::time::Duration;

use crate::KillSwitch;

use super::quote::Secrets;
use super::restart::RestartPolicy;
use super::tool_list::ToolLimits;
use super::transport::Transport;

/// A server's settings, made by an [`McpServerBuilder`](super::McpServerBuilder) (whose
/// methods say what each means) and checked when it starts the server.
#[derive(Debug, Clone)]
pub(crate) struct ServerSettings {
    pub(crate) name: Arc<str>,
    pub(crate) transport: Transport,
    pub(crate) start_timeout: Duration,
    pub(crate) call_timeout: Duration,
    pub(crate) stop_timeout: Duration,
    pub(crate) restart: RestartPolicy,
    pub(crate) unresponsive_after: u32,
    pub(crate) kill_switch: Option<KillSwitch>,
    pub(crate) limits: ToolLimits,
    pub(crate) max_message_bytes: usize,
    pub(crate) expected: Vec<Arc<str>>,
    /// What the server is given that must never show ([`Transport::secrets`]), taken out
    /// of whatever it says that is shown.
    pub(crate) secrets: Secrets,
}

impl ServerSettings {
    /// The defaults, for the server `name` reached by `transport`.
    pub(crate) fn new(name: Arc<str>, transport: Transport) -> Self {
        ServerSettings {
            name,
            transport,
            start_timeout: Duration::from_secs(30),
            call_timeout: Duration::from_secs(60),
            stop_timeout: Duration::from_secs(2),
            restart: RestartPolicy::new(),
            unresponsive_after: 3,
            kill_switch: None,
            limits: ToolLimits::default(),
            max_message_bytes: rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH,
            expected: Vec::new(),
            secrets: Secrets::default(),
        }
    }
}
