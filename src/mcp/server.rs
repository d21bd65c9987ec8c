//! A supervised server and what every part shares about it: [`McpServer`], its state
//! behind one lock, its status published to watchers, and changes delivered to
//! observers in order, outside the lock.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use rmcp::{Peer, RoleClient};
use tokio::sync::{mpsc, watch};
use tower::Layer;

use crate::fallback::NoFallback;
use crate::Builder;
use crate::CircuitBreaker;
use crate::CircuitBreakerHandle;
use crate::Cooldown;
use crate::KillSwitch;

use super::classify::{ServerCalls, ServerStarts};
use super::config::McpServerBuilder;
use super::connection::{Loss, Notice};
use super::error::{McpConfigError, McpError};
use super::service::{CallInner, Counters, McpService, ToolService};
use super::status::{ServerState, ServerStatus};
use super::supervisor::{Command, Starter, Supervisor};
use super::tool_list::ToolList;

/// An observer of a server's status.
type Observer = Arc<dyn Fn(&ServerStatus) + Send + Sync>;

/// A live connection to one process of the server.
#[derive(Debug)]
pub(crate) struct Connection {
    /// Which start of the server it is (1: the first that served).
    pub(crate) generation: u64,
    pub(crate) peer: Peer<RoleClient>,
    pub(crate) tools: ToolList,
}

/// What changes, under one lock.
struct State {
    status: ServerStatus,
    connection: Option<Arc<Connection>>,
    /// Tool names its lists had, each with the number of the last list that had it
    /// (those of the last list, and at most `max_tools` that vanished, the most
    /// recently listed).
    listed: HashMap<Arc<str>, u64>,
    /// How many tool lists it has had.
    lists: u64,
}

/// What every part of a server shares.
pub(crate) struct Shared {
    pub(crate) config: McpServerBuilder,
    state: Mutex<State>,
    watch: watch::Sender<ServerStatus>,
    observers: RwLock<Vec<Observer>>,
    /// Statuses waiting to be delivered to the observers, in the order they were made.
    queue: Mutex<VecDeque<ServerStatus>>,
    delivering: AtomicBool,
    pub(crate) breaker: CircuitBreakerHandle,
    pub(crate) calls: CircuitBreaker<CallInner, NoFallback, ServerCalls>,
    pub(crate) notices: mpsc::UnboundedSender<Notice>,
    counters: Arc<Counters>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn name(&self) -> &Arc<str> {
        &self.config.name
    }

    pub(crate) fn status(&self) -> ServerStatus {
        self.lock().status.clone()
    }

    /// The connection to call `tool` on, or why there is none.
    pub(crate) fn connection_for(&self, tool: &str) -> Result<Arc<Connection>, McpError> {
        let state = self.lock();
        let server = self.name().clone();
        if let Some(why) = state.status.unavailable_because() {
            return Err(McpError::Unavailable {
                server,
                why: why.into(),
            });
        }
        let Some(connection) = state.connection.clone() else {
            return Err(McpError::Unavailable {
                server,
                why: "it has no connection".into(),
            });
        };
        if connection.tools.get(tool).is_some() {
            return Ok(connection);
        }
        let tool: Arc<str> = tool.into();
        if state.listed.contains_key(&tool) {
            Err(McpError::ToolVanished { server, tool })
        } else {
            Err(McpError::UnknownTool { server, tool })
        }
    }

    /// Changes the state with `f`, then delivers the new status to the observers and
    /// then to the watchers (outside the lock, one status at a time, in order).
    pub(crate) fn update(&self, f: impl FnOnce(&mut ServerStatus, &mut Option<Arc<Connection>>)) {
        {
            let mut state = self.lock();
            let State {
                status,
                connection,
                listed,
                lists,
            } = &mut *state;
            let before = status.clone();
            f(status, connection);
            if status.tools != before.tools {
                status.vanished =
                    vanished(listed, lists, &status.tools, self.config.limits.max_tools);
            }
            if *status == before {
                return;
            }
            if status.state != before.state {
                status.since = tokio::time::Instant::now().into_std();
            }
            status.seq = before.seq.wrapping_add(1);
            self.queue
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push_back(status.clone());
        }
        self.deliver();
    }

    /// The connection of `generation` was lost under a call (or a remote server forgot
    /// its session): the server is down from now, and its supervisor is told. Calls
    /// that find it so at once make one report: only the first finds the connection.
    pub(crate) fn connection_lost(&self, generation: u64, loss: Loss) {
        self.update(|status, connection| {
            if connection
                .as_ref()
                .is_some_and(|c| c.generation == generation)
            {
                *connection = None;
                status.state = ServerState::Down(loss.into());
                status.pid = None;
            }
        });
        let _ = self.notices.send(Notice::Closed(generation, loss));
    }

    /// Reads the tool list of the connection of `generation` again (within the call
    /// timeout) and keeps it, if that connection still serves. Returns the new list.
    pub(crate) async fn refresh_tools(&self, generation: u64) -> Option<ToolList> {
        let connection = self.lock().connection.clone()?;
        if connection.generation != generation {
            return None;
        }
        let listed = tokio::time::timeout(
            self.config.call_timeout,
            super::connection::list_tools(&connection.peer, &self.config),
        )
        .await;
        let tools = match listed {
            Ok(Ok(tools)) => tools,
            Ok(Err(error)) => {
                tracing::warn!(target: "tower_circuit_breaker::mcp", server = %self.name(), "reading the tool list again failed: {error}");
                return None;
            }
            Err(_) => {
                tracing::warn!(target: "tower_circuit_breaker::mcp", server = %self.name(), "reading the tool list again timed out");
                return None;
            }
        };
        self.update(|status, current| {
            if current.as_ref().is_some_and(|c| c.generation == generation) {
                *current = Some(Arc::new(Connection {
                    generation,
                    peer: connection.peer.clone(),
                    tools: tools.clone(),
                }));
                status.tools = tools.clone();
            }
        });
        Some(tools)
    }

    /// Delivers queued statuses unless another task is delivering (it delivers them).
    fn deliver(&self) {
        loop {
            if self.delivering.swap(true, Ordering::Acquire) {
                return;
            }
            loop {
                let next = self
                    .queue
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .pop_front();
                let Some(status) = next else { break };
                let observers = self
                    .observers
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                for observer in observers {
                    // An observer that panics is someone else's bug: the others still hear.
                    let _ = catch_unwind(AssertUnwindSafe(|| observer(&status)));
                }
                // Watchers hear of a change once the observers have: whoever waits for a
                // status sees what the observers made of it (an expediter told).
                self.watch.send_replace(status);
            }
            self.delivering.store(false, Ordering::Release);
            if self
                .queue
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty()
            {
                return;
            }
        }
    }
}

/// Notes a new tool list in `listed` and returns the tools an earlier list had and this
/// one does not, sorted: the `max` most recently listed of them; older ones are
/// forgotten (a call of one is then of a tool the server does not have), so a server
/// renaming its tools holds no more than its last list and `max` names.
fn vanished(
    listed: &mut HashMap<Arc<str>, u64>,
    lists: &mut u64,
    tools: &ToolList,
    max: usize,
) -> Vec<Arc<str>> {
    *lists += 1;
    let this = *lists;
    for name in tools.names() {
        match listed.get_mut(name) {
            Some(seen) => *seen = this,
            None => {
                listed.insert(name.into(), this);
            }
        }
    }
    let mut gone: Vec<(u64, Arc<str>)> = listed
        .iter()
        .filter(|(_, seen)| **seen != this)
        .map(|(name, seen)| (*seen, name.clone()))
        .collect();
    if gone.len() > max {
        gone.sort_unstable_by_key(|(seen, _)| std::cmp::Reverse(*seen));
        for (_, forgotten) in gone.drain(max..) {
            listed.remove(&forgotten);
        }
    }
    let mut names: Vec<Arc<str>> = gone.into_iter().map(|(_, name)| name).collect();
    names.sort();
    names
}

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
    /// A server named `name` (letters, digits, `_`, `-`; it prefixes its tools' names),
    /// run as `program` with the arguments given next.
    pub fn builder(name: &str, program: impl AsRef<OsStr>) -> McpServerBuilder {
        McpServerBuilder::new(name, program.as_ref())
    }

    /// A remote server named `name`, reached over Streamable HTTP at `url` (feature
    /// `mcp-http`), supervised as a stdio server is: its calls under its breaker, and
    /// "restarting" it means a new session (a new `initialize` and tool list), made only
    /// when its breaker lets a probe through. A session it forgets (HTTP 404) is made
    /// again the same way, once for every call that found it forgotten. The URL is shown
    /// (in errors, statuses and logs) with its user information and query string
    /// redacted; headers ([`header`](McpServerBuilder::header),
    /// [`bearer_token`](McpServerBuilder::bearer_token)) are never shown.
    ///
    /// No TLS backend is built in: for an `https://` URL, turn on one of reqwest 0.13's
    /// (`rustls` or `native-tls`) in your Cargo.toml.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tower_circuit_breaker::mcp::McpServer;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let token = std::env::var("JIRA_MCP_TOKEN")?;
    /// let jira = McpServer::remote("jira", "https://mcp.example.com/mcp")
    ///     .bearer_token(&token)
    ///     .call_timeout(Duration::from_secs(20)) // the first calls to a hung server
    ///     .start()?;
    /// jira.wait_ready(Duration::from_secs(30)).await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "mcp-http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mcp-http")))]
    pub fn remote(name: &str, url: &str) -> McpServerBuilder {
        McpServerBuilder::remote(name, url)
    }

    pub(crate) fn start(config: McpServerBuilder) -> Result<McpServer, McpConfigError> {
        let name = config.name.clone();
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| McpConfigError::NoRuntime(name.to_string()))?;
        let mut breaker = Builder::new()
            .name(name.clone())
            .failure_threshold(config.unresponsive_after)
            .cooldown(Cooldown::Time(config.restart.initial()));
        if let Some(kill) = &config.kill_switch {
            breaker = breaker.kill_switch(kill.clone());
        }
        let layer = breaker.build().map_err(|source| McpConfigError::Breaker {
            server: name.to_string(),
            source,
        })?;
        let counters = Arc::new(Counters::default());
        let calls = layer.clone().with_classifier(ServerCalls).layer(CallInner {
            server: name.clone(),
            timeout: config.call_timeout,
            counters: counters.clone(),
        });
        let starts = layer.clone().with_classifier(ServerStarts).layer(Starter);
        let (notices, notices_rx) = mpsc::unbounded_channel();
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let mut status = ServerStatus::new(name.clone());
        status.url = config.url();
        let shared = Arc::new(Shared {
            config,
            state: Mutex::new(State {
                status: status.clone(),
                connection: None,
                listed: HashMap::new(),
                lists: 0,
            }),
            watch: watch::Sender::new(status),
            observers: RwLock::new(Vec::new()),
            queue: Mutex::new(VecDeque::new()),
            delivering: AtomicBool::new(false),
            breaker: layer.handle(),
            calls,
            notices,
            counters,
        });
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
        self.shared.watch.subscribe()
    }

    /// Runs `observer` on every change of its status, in order, never under the
    /// server's lock: it may call the server (or anything else) back.
    pub fn on_change(&self, observer: impl Fn(&ServerStatus) + Send + Sync + 'static) {
        self.shared
            .observers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::new(observer));
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
            !matches!(s.state, ServerState::Starting | ServerState::Restarting) || s.killed
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
        self.shared.lock().status.tools.clone()
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

    /// Starts it afresh, as an operator would: a running process is stopped first, its
    /// breaker is reset and its restart record cleared, so the new start is a call, not
    /// a probe. The way back from [`ServerState::GaveUp`].
    pub fn restart(&self) {
        let _ = self.control.commands.send(Command::Restart);
    }

    /// Stops it for good: closes its input, waits for it to exit (the stop timeout),
    /// kills it if it must. Returns once it is stopped (at most the stop timeout and a
    /// little more).
    pub async fn stop(&self) {
        let (done, stopped) = tokio::sync::oneshot::channel();
        if self.control.commands.send(Command::Stop(done)).is_ok() {
            let grace = (self.shared.config.stop_timeout.saturating_mul(2))
                .saturating_add(Duration::from_secs(1));
            let _ = tokio::time::timeout(grace, stopped).await;
        }
    }
}

impl fmt::Debug for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.name())
            .field("command", &self.shared.config.command_line())
            .field("status", &self.status().state.as_str())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(names: &[&str]) -> ToolList {
        let tools = names
            .iter()
            .map(|n| {
                serde_json::from_value(
                    serde_json::json!({"name": n, "inputSchema": {"type": "object"}}),
                )
                .expect("a tool")
            })
            .collect();
        ToolList::check(tools, &super::super::tool_list::ToolLimits::default())
    }

    #[test]
    fn vanished_names_are_the_most_recently_listed_within_the_bound() {
        let (mut listed, mut lists) = (HashMap::new(), 0);
        for n in 0..100 {
            let name = format!("t_{n}");
            let gone = vanished(&mut listed, &mut lists, &list(&[&name, "stays"]), 3);
            assert!(gone.len() <= 3, "{gone:?}");
        }
        let gone = vanished(&mut listed, &mut lists, &list(&["stays"]), 3);
        let gone: Vec<&str> = gone.iter().map(|n| &**n).collect();
        assert_eq!(gone, ["t_97", "t_98", "t_99"]);
        assert_eq!(listed.len(), 4, "the list's name and three vanished");
    }
}
