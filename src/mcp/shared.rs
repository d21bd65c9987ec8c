//! What every part of a supervised server shares: [`Shared`], its settings, its state
//! behind one lock, its status published to watchers, and changes delivered to
//! observers in order, outside the lock.

use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use tokio::sync::{mpsc, watch};

use crate::fallback::NoFallback;
use crate::{CircuitBreaker, CircuitBreakerHandle};

use super::call::{CallInner, Counters};
use super::classify::ServerCalls;
use super::connection::{list_tools, Connection, Loss, Notice};
use super::error::McpError;
use super::settings::ServerSettings;
use super::status::{ServerState, ServerStatus};
use super::tool_list::ToolList;

/// An observer of a server's status.
pub(crate) type Observer = Arc<dyn Fn(&ServerStatus) + Send + Sync>;

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
    pub(crate) settings: ServerSettings,
    state: Mutex<State>,
    watch: watch::Sender<ServerStatus>,
    observers: RwLock<Vec<Observer>>,
    /// Statuses waiting to be delivered to the observers, in the order they were made.
    queue: Mutex<VecDeque<ServerStatus>>,
    delivering: AtomicBool,
    pub(crate) breaker: CircuitBreakerHandle,
    pub(crate) calls: CircuitBreaker<CallInner, NoFallback, ServerCalls>,
    pub(crate) notices: mpsc::UnboundedSender<Notice>,
    pub(crate) counters: Arc<Counters>,
}

impl Shared {
    /// A server's shared state as it starts: no connection, its status `Starting`.
    pub(crate) fn new(
        settings: ServerSettings,
        breaker: CircuitBreakerHandle,
        calls: CircuitBreaker<CallInner, NoFallback, ServerCalls>,
        notices: mpsc::UnboundedSender<Notice>,
        counters: Arc<Counters>,
    ) -> Shared {
        let mut status = ServerStatus::new(settings.name.clone());
        status.url = settings.transport.url();
        Shared {
            settings,
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
            breaker,
            calls,
            notices,
            counters,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn name(&self) -> &Arc<str> {
        &self.settings.name
    }

    pub(crate) fn status(&self) -> ServerStatus {
        self.lock().status.clone()
    }

    /// Its tools as last read.
    pub(crate) fn tools(&self) -> ToolList {
        self.lock().status.tools.clone()
    }

    /// Its status, each change once the observers have seen it.
    pub(crate) fn watch(&self) -> watch::Receiver<ServerStatus> {
        self.watch.subscribe()
    }

    /// Runs `observer` on every change of its status, in order, outside the lock.
    pub(crate) fn observe(&self, observer: Observer) {
        self.observers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(observer);
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
                    vanished(listed, lists, &status.tools, self.settings.limits.max_tools);
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
            self.settings.call_timeout,
            list_tools(&connection.peer, &self.settings),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::tool_list::ToolLimits;

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
        ToolList::check(tools, &ToolLimits::default())
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
