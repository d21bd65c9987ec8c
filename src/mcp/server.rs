//! A supervised server: [`McpServer`], started with its breaker and its supervisor, and
//! what it offers (its status, its tools, services calling them, restart and stop).

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tower::Layer;

use crate::{Builder, CircuitBreakerHandle, Cooldown, KillSwitch};

use super::call::{CallInner, Counters};
use super::classify::{ServerCalls, ServerStarts};
use super::error::{McpConfigError, McpError};
use super::service::{McpService, ToolService};
use super::settings::ServerSettings;
use super::shared::Shared;
use super::status::{ServerState, ServerStatus};
use super::supervisor::{Command, Starter, Supervisor};
use super::tool_list::ToolList;

/// A supervised MCP server: a stdio server's process, or a remote server's sessions.
/// See the [module docs](super).
///
/// # Clone
///
/// Clones refer to the same server: one process (or session), one breaker, one status.
/// When the last clone is dropped the supervisor stops the process (or closes the
/// session).
#[derive(Clone)]
pub struct McpServer {
    pub(crate) shared: Arc<Shared>,
    control: Arc<Control>,
}

/// Held by every clone of an [`McpServer`]: the supervisor ends when the last is gone.
struct Control {
    commands: mpsc::UnboundedSender<Command>,
}

impl McpServer {
    /// Starts the server `settings` (checked) set up: its breaker, and its supervisor on
    /// the tokio runtime it is called on.
    pub(crate) fn start(mut settings: ServerSettings) -> Result<McpServer, McpConfigError> {
        settings.secrets = settings.transport.secrets();
        let name = settings.name.clone();
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| McpConfigError::NoRuntime(name.to_string()))?;
        let mut breaker = Builder::new()
            .name(name.clone())
            .failure_threshold(settings.unresponsive_after)
            .cooldown(Cooldown::Time(settings.restart.initial()));
        if let Some(kill) = &settings.kill_switch {
            breaker = breaker.kill_switch(kill.clone());
        }
        let layer = breaker.build().map_err(|source| McpConfigError::Breaker {
            server: name.to_string(),
            source,
        })?;
        let counters = Arc::new(Counters::default());
        let calls = layer.clone().with_classifier(ServerCalls).layer(CallInner {
            server: name.clone(),
            timeout: settings.call_timeout,
            counters: counters.clone(),
            secrets: settings.secrets.clone(),
        });
        let starts = layer.clone().with_classifier(ServerStarts).layer(Starter);
        let (notices, notices_rx) = mpsc::unbounded_channel();
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared::new(
            settings,
            layer.handle(),
            calls,
            notices,
            counters,
        ));
        let supervisor = Supervisor::new(shared.clone(), starts, notices_rx, commands_rx);
        runtime.spawn(supervisor.run());
        Ok(McpServer {
            shared,
            control: Arc::new(Control { commands }),
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        self.shared.name()
    }

    /// Where it stands now.
    pub fn status(&self) -> ServerStatus {
        self.shared.status()
    }

    /// Its status, each change once its [observers](Self::on_change) have seen it (so
    /// a tool set waiting on it finds the expediter already told).
    pub fn watch(&self) -> watch::Receiver<ServerStatus> {
        self.shared.watch()
    }

    /// Runs `observer` on every change of its status, in order, never under the
    /// server's lock: it may call the server (or anything else) back.
    pub fn on_change(&self, observer: impl Fn(&ServerStatus) + Send + Sync + 'static) {
        self.shared.observe(Arc::new(observer));
    }

    /// Waits (at most `timeout`) until it runs, or until its start has failed.
    ///
    /// # Errors
    ///
    /// [`McpError::Unavailable`], saying why, when it is not running when the start
    /// under way has ended or the time is up.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), McpError> {
        let mut watch = self.watch();
        let settled = |s: &ServerStatus| {
            !matches!(s.state, ServerState::Starting | ServerState::Restarting)
                || s.killed
                || s.forced_open
        };
        let _ = tokio::time::timeout(timeout, watch.wait_for(|s| settled(s))).await;
        let status = self.status();
        match status.unavailable_because() {
            None => Ok(()),
            Some(why) => Err(McpError::Unavailable {
                server: status.name,
                why: why.into(),
            }),
        }
    }

    /// Its tools as last read.
    pub fn tools(&self) -> ToolList {
        self.shared.tools()
    }

    /// The handle on its breaker: failed calls open it (the process is then stopped),
    /// and every restart is its probe. Its kill switch stops calls and restarts.
    pub fn breaker(&self) -> CircuitBreakerHandle {
        self.shared.breaker.clone()
    }

    /// The kill switch of its breaker.
    pub fn kill_switch(&self) -> &KillSwitch {
        self.shared.breaker.kill_switch()
    }

    /// A service calling any of its tools.
    pub fn service(&self) -> McpService {
        McpService::new(self.shared.clone())
    }

    /// A service calling its tool `tool` with the arguments it is given.
    pub fn tool(&self, tool: &str) -> ToolService {
        ToolService::new(self.shared.clone(), tool.into())
    }

    /// Calls sent to it and not yet answered.
    pub fn calls_in_flight(&self) -> usize {
        self.shared.counters.in_flight.load(Ordering::SeqCst)
    }

    /// Calls sent to it, over every process it has run.
    pub fn calls_sent(&self) -> u64 {
        self.shared.counters.sent.load(Ordering::SeqCst)
    }

    /// Starts it afresh, as an operator would: a running process is stopped first (a
    /// restart under way, the breaker's probe, is dropped and its process killed; a
    /// first start under way is taken as this one), its breaker is reset and its restart
    /// record cleared, so the new start is a call, not a probe. The way back from
    /// [`ServerState::GaveUp`].
    pub fn restart(&self) {
        let _ = self.control.commands.send(Command::Restart);
    }

    /// Stops it for good: closes its input, waits for it to exit (the stop timeout),
    /// kills it if it must. Returns once it is stopped (at most the stop timeout and a
    /// little more).
    pub async fn stop(&self) {
        let (done, stopped) = tokio::sync::oneshot::channel();
        if self.control.commands.send(Command::Stop(done)).is_ok() {
            let grace = (self.shared.settings.stop_timeout.saturating_mul(2))
                .saturating_add(Duration::from_secs(1));
            let _ = tokio::time::timeout(grace, stopped).await;
        }
    }
}

impl fmt::Debug for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.name())
            .field("command", &self.shared.settings.transport.command_line())
            .field("status", &self.status().state.as_str())
            .finish_non_exhaustive()
    }
}
