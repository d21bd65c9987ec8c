//! Where a supervised server stands: [`ServerStatus`], and the one rule that says, in
//! one line, why a server or one of its tools cannot be used now.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::expediter::Availability;

use super::error::StartError;
use super::exit::Exit;
use super::tool_list::ToolList;

/// Why a server is down.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Down {
    /// Its process ended.
    Exited(Exit),
    /// It closed its connection (its output ended), or the connection broke; its
    /// process is being stopped.
    ConnectionLost,
    /// A remote server answered that it does not know its session (HTTP 404, or a 400 saying so: it
    /// restarted, or expired the session); a new one is made through its breaker's
    /// probe.
    SessionExpired,
    /// It could not be started.
    StartFailed(StartError),
    /// Its breaker opened on failed calls (timeouts, broken messages): it was stopped,
    /// to be started afresh.
    Unresponsive {
        /// The last failure its breaker recorded.
        last_failure: String,
    },
}

impl fmt::Display for Down {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Down::Exited(exit) => exit.fmt(f),
            Down::ConnectionLost => f.write_str("closed its connection"),
            Down::SessionExpired => f.write_str("no longer knows its session"),
            Down::StartFailed(error) => write!(f, "could not start: {error}"),
            Down::Unresponsive { last_failure } => {
                write!(f, "stopped answering ({last_failure}) and was stopped")
            }
        }
    }
}

/// What a supervised server is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerState {
    /// Its first start is under way.
    Starting,
    /// Serving: started, its tool list read.
    Running,
    /// A restart is under way: its breaker let the probe through.
    Restarting,
    /// Not serving; restarted when its breaker lets a probe through.
    Down(Down),
    /// Restarted too often within the crash-loop window: not started again until an
    /// operator asks ([`McpServer::restart`](super::McpServer::restart), or a reset of
    /// its breaker).
    GaveUp {
        /// Why it went down the last time.
        last: Down,
        /// The restarts within the window.
        restarts: u32,
        /// The window.
        within: Duration,
    },
    /// Stopped by [`McpServer::stop`](super::McpServer::stop).
    Stopped,
}

impl ServerState {
    /// `starting`, `running`, `restarting`, `down`, `gave_up` or `stopped`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ServerState::Starting => "starting",
            ServerState::Running => "running",
            ServerState::Restarting => "restarting",
            ServerState::Down(_) => "down",
            ServerState::GaveUp { .. } => "gave_up",
            ServerState::Stopped => "stopped",
        }
    }
}

/// A supervised server, as it stands.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServerStatus {
    /// The server's name.
    pub name: Arc<str>,
    /// What it is doing.
    pub state: ServerState,
    /// When it entered that state.
    pub since: Instant,
    /// Its process id while it runs (a stdio server).
    pub pid: Option<u32>,
    /// A remote server's URL, its user information and query string redacted (feature
    /// `mcp-http`); `None` for a stdio server.
    pub url: Option<Arc<str>>,
    /// Whether its breaker's kill switch is on: no call and no restart.
    pub killed: bool,
    /// Whether its breaker is forced open ([`State::ForcedOpen`](crate::State::ForcedOpen):
    /// a person's [`force_open`](crate::CircuitBreakerHandle::force_open) or
    /// [`open_for`](crate::CircuitBreakerHandle::open_for), or the supervisor's own when it
    /// gave up): no call and no restart until it is reset (or its time is up).
    pub forced_open: bool,
    /// While down: when its breaker lets the next probe (the restart) through, if that
    /// is a time.
    pub next_start: Option<Instant>,
    /// While down: the backoff its restart waits.
    pub restart_wait: Option<Duration>,
    /// How many times it has been started (the first start and every restart).
    pub starts: u64,
    /// How many times it started and served (each a new process and connection).
    pub generation: u64,
    /// Its tools as last read (kept while it is down: they are what it offered).
    pub tools: ToolList,
    /// Tools an earlier tool list had that the last one does not: at most its
    /// `max_tools`, the most recently listed (older ones are forgotten).
    pub vanished: Vec<Arc<str>>,
    /// Counts every change, so that two statuses can be ordered.
    pub seq: u64,
}

impl ServerStatus {
    pub(crate) fn new(name: Arc<str>) -> Self {
        ServerStatus {
            name,
            state: ServerState::Starting,
            since: tokio::time::Instant::now().into_std(),
            pid: None,
            url: None,
            killed: false,
            forced_open: false,
            next_start: None,
            restart_wait: None,
            starts: 0,
            generation: 0,
            tools: ToolList::default(),
            vanished: Vec::new(),
            seq: 0,
        }
    }

    /// Whether it serves calls now.
    pub fn is_running(&self) -> bool {
        self.unavailable_because().is_none()
    }

    /// Why it cannot serve calls now, in one line (`None`: it can).
    pub fn unavailable_because(&self) -> Option<String> {
        let name = &self.name;
        if self.killed {
            return Some(format!(
                "server `{name}`'s kill switch is on: no calls and no restarts until it is revived"
            ));
        }
        // Given up or stopped says more than the breaker held open for it.
        if self.forced_open
            && !matches!(
                self.state,
                ServerState::GaveUp { .. } | ServerState::Stopped
            )
        {
            return Some(format!(
                "server `{name}`'s breaker is forced open: no calls and no restarts until it is reset (or the time it was opened for is up)"
            ));
        }
        let restart = match self.restart_wait {
            Some(wait) => format!(
                "it is restarted when its breaker lets a probe through, after a {} wait",
                seconds(wait)
            ),
            None => "it is restarted when its breaker lets a probe through".to_string(),
        };
        Some(match &self.state {
            ServerState::Running => return None,
            ServerState::Starting => format!("server `{name}` is starting"),
            ServerState::Restarting => {
                format!("server `{name}` is restarting (its breaker's probe is under way)")
            }
            ServerState::Down(down) => format!("server `{name}` {down}; {restart}"),
            ServerState::GaveUp {
                last,
                restarts,
                within,
            } => format!(
                "server `{name}` {last}, after {restarts} restart{} within {}: it is not restarted again until an operator restarts it",
                if *restarts == 1 { "" } else { "s" },
                seconds(*within)
            ),
            ServerState::Stopped => format!("server `{name}` was stopped"),
        })
    }

    /// Whether the tool named `tool` can be called now, and why, in one line.
    pub fn tool_availability(&self, tool: &str) -> (Availability, String) {
        if let Some(why) = self.unavailable_because() {
            return (Availability::Unavailable, why);
        }
        let name = &self.name;
        if self.tools.get(tool).is_some() {
            return (
                Availability::Available,
                format!("server `{name}` serves it"),
            );
        }
        let why = if let Some(refused) = self.tools.refusal(tool) {
            format!(
                "server `{name}` lists `{tool}`, but it was refused: {}",
                refused.why
            )
        } else if self.vanished.iter().any(|v| &**v == tool) {
            format!(
                "server `{name}` no longer lists `{tool}` (its tool list was read again after a restart or a change)"
            )
        } else {
            format!("server `{name}` does not list `{tool}`")
        };
        (Availability::Unavailable, why)
    }
}

/// `0.5 s`, `12 s`.
fn seconds(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs < 10.0 {
        format!("{} s", (secs * 10.0).round() / 10.0)
    } else {
        format!("{} s", secs.round())
    }
}

/// `memory: running (pid 4242, started 2 times, 9 tools)`; when it cannot serve calls,
/// why (`memory: running — server `memory`'s kill switch is on: …`).
impl fmt::Display for ServerStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name, self.state.as_str())?;
        if let Some(why) = self.unavailable_because() {
            return write!(f, " — {why}");
        }
        match (&self.state, self.pid) {
            (ServerState::Running, Some(pid)) => write!(
                f,
                " (pid {pid}, started {} times, {} tools)",
                self.starts,
                self.tools.tools().len()
            ),
            (ServerState::Running, None) => match &self.url {
                Some(url) => write!(
                    f,
                    " ({url}, started {} times, {} tools)",
                    self.starts,
                    self.tools.tools().len()
                ),
                None => write!(f, " ({} tools)", self.tools.tools().len()),
            },
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(state: ServerState) -> ServerStatus {
        ServerStatus {
            state,
            ..ServerStatus::new("memory".into())
        }
    }

    #[test]
    fn every_state_says_why_in_one_line() {
        // Its banner, not why it died: not quoted.
        let exit = Exit::of(None, Some(9), Some("running on stdio"));
        let mut down = status(ServerState::Down(Down::Exited(exit.clone())));
        down.restart_wait = Some(Duration::from_millis(500));
        assert_eq!(
            down.unavailable_because().unwrap(),
            "server `memory` was killed by signal 9; it is restarted when its breaker lets a probe through, after a 0.5 s wait"
        );
        let gave_up = status(ServerState::GaveUp {
            last: Down::StartFailed(StartError::Exited {
                exit: Exit::of(Some(1), None, Some("boom")),
            }),
            restarts: 3,
            within: Duration::from_secs(60),
        });
        assert_eq!(
            gave_up.unavailable_because().unwrap(),
            "server `memory` could not start: it exited with status 1 (stderr: \"boom\") before it was ready, after 3 restarts within 60 s: it is not restarted again until an operator restarts it"
        );
        let mut killed = status(ServerState::Running);
        killed.killed = true;
        assert!(killed
            .unavailable_because()
            .unwrap()
            .contains("kill switch"));
        assert!(!killed.is_running());
        assert!(killed.to_string().contains("kill switch"), "{killed}");
        let mut forced = status(ServerState::Running);
        forced.forced_open = true;
        assert!(!forced.is_running());
        assert_eq!(
            forced.unavailable_because().unwrap(),
            "server `memory`'s breaker is forced open: no calls and no restarts until it is reset (or the time it was opened for is up)"
        );
        assert!(
            forced.to_string().starts_with("memory: running — "),
            "{forced}"
        );
        let mut gave_up_forced = gave_up.clone();
        gave_up_forced.forced_open = true;
        assert_eq!(
            gave_up_forced.unavailable_because(),
            gave_up.unavailable_because(),
            "given up says why, not only that its breaker is held"
        );
        assert_eq!(status(ServerState::Running).unavailable_because(), None);
        let (a, why) = status(ServerState::Running).tool_availability("read_graph");
        assert_eq!(a, Availability::Unavailable);
        assert_eq!(why, "server `memory` does not list `read_graph`");
        let mut vanished = status(ServerState::Running);
        vanished.vanished = vec!["read_graph".into()];
        assert!(vanished
            .tool_availability("read_graph")
            .1
            .contains("no longer lists"));
    }
}
