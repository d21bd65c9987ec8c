//! Starting one server and talking to it: spawning its process (or opening a session
//! with a remote server), the `initialize` handshake, reading its tool list page by
//! page (bounded), a process's stderr kept for messages, and stopping it.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientRequest, Implementation, ListToolsRequest,
    PaginatedRequestParams, ServerResult,
};
use rmcp::service::{
    MaybeSendFuture, NotificationContext, RunningService, RunningServiceCancellationToken,
};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::IntoTransport;
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr, Command};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::watch;
use tokio::time::{timeout_at, Instant};

use crate::later::later;

use super::error::StartError;
use super::exit::Exit;
use super::quote::{Secrets, MAX_QUOTE};
use super::settings::ServerSettings;
use super::status::Down;
use super::tool_list::ToolList;
use super::transport::{self, Transport};

/// How many of its last stderr lines a server's messages may quote from.
const STDERR_LINES: usize = 20;
/// The most bytes of one stderr line read into memory: its start, enough for
/// [`MAX_QUOTE`] characters of any width; the rest of a longer line is read and dropped.
const MAX_STDERR_LINE_BYTES: usize = 4 * MAX_QUOTE;
/// How long, once a process has exited, its stderr gets to be read to its end, so that
/// the last line it wrote before it died can say why (a process it launched may hold
/// the pipe open longer).
const STDERR_SETTLE: Duration = Duration::from_millis(250);
/// How long a process that broke its handshake gets to exit, so its exit status can be
/// told.
const EXIT_GRACE: Duration = Duration::from_millis(500);

/// What a connection tells its supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Notice {
    /// The server of this generation says its tool list changed.
    ToolsChanged(u64),
    /// The connection of this generation ended: the server closed its output (or
    /// broke a call's answer stream), or forgot its session.
    Closed(u64, Loss),
}

/// How a connection was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loss {
    /// The server closed it, or it broke.
    Connection,
    /// A remote server answered that it does not know the session (HTTP 404, or a 400 saying so).
    Session,
}

impl From<Loss> for Down {
    fn from(loss: Loss) -> Down {
        match loss {
            Loss::Connection => Down::ConnectionLost,
            Loss::Session => Down::SessionExpired,
        }
    }
}

/// The client side of one connection: hears `notifications/tools/list_changed`.
pub(crate) struct Handler {
    generation: u64,
    notices: UnboundedSender<Notice>,
}

impl ClientHandler for Handler {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + MaybeSendFuture + '_ {
        let _ = self.notices.send(Notice::ToolsChanged(self.generation));
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("tower-circuit-breaker", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// The last lines a process wrote to stderr, read as bytes to its end: a byte that is
/// not UTF-8 is replaced, a line longer than [`MAX_STDERR_LINE_BYTES`] is kept cut short
/// (and the rest read and dropped), so a server cannot stop the reading (its stderr would
/// then fill, or break) or make it hold more than a bounded amount.
#[derive(Debug, Clone)]
pub(crate) struct StderrTail {
    lines: Arc<Mutex<VecDeque<String>>>,
    /// Whether the reading reached the end of the pipe.
    done: watch::Receiver<bool>,
}

impl StderrTail {
    fn follow(server: Arc<str>, secrets: Secrets, stderr: ChildStderr) -> StderrTail {
        let lines: Arc<Mutex<VecDeque<String>>> = Arc::default();
        let (finished, done) = watch::channel(false);
        let kept = lines.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr);
            let mut line = StderrLine::default();
            loop {
                let chunk = match reader.fill_buf().await {
                    Ok([]) | Err(_) => break,
                    Ok(chunk) => chunk,
                };
                let (read, ended) = match chunk.iter().position(|&b| b == b'\n') {
                    Some(at) => (at + 1, true),
                    None => (chunk.len(), false),
                };
                line.push(&chunk[..read - usize::from(ended)]);
                reader.consume(read);
                if ended {
                    keep(&server, &kept, line.take(&secrets));
                }
            }
            if !line.is_empty() {
                keep(&server, &kept, line.take(&secrets));
            }
            let _ = finished.send(true);
        });
        StderrTail { lines, done }
    }

    /// The last line that is not blank.
    pub(crate) fn last(&self) -> Option<String> {
        let lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        lines.iter().rev().find(|l| !l.trim().is_empty()).cloned()
    }

    /// The last line that is not blank, once the process has exited: what it wrote
    /// before it died read first (at most [`STDERR_SETTLE`]).
    pub(crate) async fn last_after_exit(&self) -> Option<String> {
        let mut done = self.done.clone();
        let _ = tokio::time::timeout(STDERR_SETTLE, done.wait_for(|d| *d)).await;
        self.last()
    }
}

/// One stderr line as it is read: its first [`MAX_STDERR_LINE_BYTES`] bytes, and
/// whether there were more.
#[derive(Debug, Default)]
struct StderrLine {
    head: Vec<u8>,
    cut: bool,
}

impl StderrLine {
    fn push(&mut self, bytes: &[u8]) {
        let room = MAX_STDERR_LINE_BYTES - self.head.len();
        self.head.extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.cut |= bytes.len() > room;
    }

    fn is_empty(&self) -> bool {
        self.head.is_empty() && !self.cut
    }

    /// The line, as [`Secrets::said`] shows it (bad UTF-8 replaced, cut short with `…`);
    /// the next starts empty.
    fn take(&mut self, secrets: &Secrets) -> String {
        let line = std::mem::take(self);
        let text = String::from_utf8_lossy(&line.head);
        let text = text.strip_suffix('\r').unwrap_or(&text);
        // A line cut short may end inside a URL before its `@` (its password not yet
        // known for one): a URL it ends in goes, whole, before the rest is redacted.
        let text = match line.cut {
            true => {
                let last_word = text.rfind(char::is_whitespace).map_or(0, |at| at + 1);
                match text[last_word..].find("://") {
                    Some(_) => &text[..last_word],
                    None => text,
                }
            }
            false => text,
        };
        // A server may print a URL with its password, or a token: shown, it is redacted.
        let quoted = secrets.said(text);
        if line.cut && !quoted.ends_with('…') {
            format!("{quoted}…")
        } else {
            quoted
        }
    }
}

/// Keeps one line of a server's stderr, the oldest dropped past [`STDERR_LINES`].
fn keep(server: &str, lines: &Mutex<VecDeque<String>>, line: String) {
    tracing::debug!(target: "tower_circuit_breaker::mcp", server = %server, "stderr: {line}");
    let mut lines = lines.lock().unwrap_or_else(|p| p.into_inner());
    if lines.len() == STDERR_LINES {
        lines.pop_front();
    }
    lines.push_back(line);
}

/// A live connection to one process of the server.
#[derive(Debug)]
pub(crate) struct Connection {
    /// Which start of the server it is (1: the first that served).
    pub(crate) generation: u64,
    pub(crate) peer: Peer<RoleClient>,
    pub(crate) tools: ToolList,
}

/// A started server: its process (none for a remote server), its connection and its
/// tools.
pub(crate) struct Started {
    pub(crate) process: Option<Process>,
    pub(crate) session: Session,
    pub(crate) tools: ToolList,
}

/// A stdio server's process, and its stderr kept to say why it died.
pub(crate) struct Process {
    pub(crate) child: Child,
    pub(crate) stderr: StderrTail,
}

impl Process {
    /// Its process id while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// How it ended, once it has.
    pub(crate) async fn exited(&mut self) -> Exit {
        let status = self.child.wait().await;
        Exit::new(status.ok(), self.stderr.last_after_exit().await)
    }

    /// Waits at most `grace` for it to exit.
    pub(crate) async fn exits_within(&mut self, grace: Duration) -> Option<Exit> {
        tokio::time::timeout(grace, self.exited()).await.ok()
    }
}

/// The client's side of one connection, watched: it ends when the server closes its
/// output (dead or alive), or when it is closed.
pub(crate) struct Session {
    peer: Peer<RoleClient>,
    cancel: Option<RunningServiceCancellationToken>,
    ended: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl Session {
    fn new(client: RunningService<RoleClient, Handler>) -> Self {
        Session {
            peer: client.peer().clone(),
            cancel: Some(client.cancellation_token()),
            ended: Some(Box::pin(async move {
                let _ = client.waiting().await;
            })),
        }
    }

    pub(crate) fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }

    /// Resolves once the connection has ended, and never again after (cancel-safe).
    pub(crate) async fn ended(&mut self) {
        match &mut self.ended {
            Some(ended) => {
                ended.await;
                self.ended = None;
            }
            None => std::future::pending().await,
        }
    }

    /// Closes the connection (the server's input), waiting at most `grace` for it to
    /// end.
    async fn close(&mut self, grace: Duration) {
        if let Some(cancel) = self.cancel.take() {
            cancel.cancel();
        }
        if let Some(ended) = self.ended.take() {
            let _ = tokio::time::timeout(grace, ended).await;
        }
    }
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started")
            .field("pid", &self.process.as_ref().and_then(Process::pid))
            .field("tools", &self.tools.tools().len())
            .finish_non_exhaustive()
    }
}

/// Starts the server (spawns its process, or opens an HTTP session with it), makes the
/// handshake and reads its tool list, all within the start timeout.
pub(crate) async fn start(
    settings: &ServerSettings,
    generation: u64,
    notices: UnboundedSender<Notice>,
) -> Result<Started, StartError> {
    // A timeout too long for the clock means none.
    let deadline = Instant::from_std(later(Instant::now().into_std(), settings.start_timeout));
    let handler = Handler {
        generation,
        notices,
    };
    match &settings.transport {
        Transport::Stdio(command) => spawn(settings, command, handler, deadline).await,
        #[cfg(feature = "mcp-http")]
        Transport::Remote(remote) => {
            let transport = remote
                .transport(&settings.name, settings.max_message_bytes)
                .map_err(|e| StartError::Handshake {
                    message: e.to_string(),
                })?;
            let (session, listed) = handshake(settings, handler, transport, deadline).await?;
            let tools = listed?;
            Ok(Started {
                process: None,
                session,
                tools,
            })
        }
    }
}

/// The `initialize` handshake over `transport`, then the tool list, by `deadline`. A
/// tool list that failed comes with the session still open: a process whose input were
/// closed would exit, and its exit be taken for why its start failed.
async fn handshake<T, E, A>(
    settings: &ServerSettings,
    handler: Handler,
    transport: T,
    deadline: Instant,
) -> Result<(Session, Result<ToolList, StartError>), StartError>
where
    T: IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let client = match timeout_at(deadline, handler.serve(transport)).await {
        Ok(Ok(client)) => client,
        Ok(Err(error)) => {
            #[cfg(feature = "mcp-http")]
            if let Some(why) = super::remote::unreachable(&error) {
                return Err(StartError::Unreachable {
                    message: settings.secrets.said(&why),
                });
            }
            return Err(StartError::Handshake {
                message: settings.secrets.said(&error.to_string()),
            });
        }
        Err(_) => {
            return Err(StartError::Timeout {
                step: "initialize",
                after: settings.start_timeout,
            })
        }
    };
    let listed = match timeout_at(deadline, list_tools(client.peer(), settings)).await {
        Ok(listed) => listed,
        Err(_) => Err(StartError::Timeout {
            step: "tools/list",
            after: settings.start_timeout,
        }),
    };
    Ok((Session::new(client), listed))
}

/// Spawns a stdio server and starts it over its stdin and stdout.
async fn spawn(
    settings: &ServerSettings,
    spec: &transport::Command,
    handler: Handler,
    deadline: Instant,
) -> Result<Started, StartError> {
    let mut command = Command::new(&spec.program);
    command
        .args(&spec.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // A group of its own, so that stopping it stops what it launched (see `kill`).
    #[cfg(unix)]
    command.process_group(0);
    for (key, value) in &spec.env {
        match value {
            Some(value) => command.env(key, value),
            None => command.env_remove(key),
        };
    }
    if let Some(dir) = &spec.current_dir {
        command.current_dir(dir);
    }
    let mut child = command.spawn().map_err(|e| StartError::Spawn {
        command: settings.transport.command_line(),
        message: e.to_string(),
    })?;
    let (Some(stdout), Some(stdin), Some(pipe)) =
        (child.stdout.take(), child.stdin.take(), child.stderr.take())
    else {
        return Err(StartError::Handshake {
            message: "its stdin, stdout or stderr could not be opened".into(),
        });
    };
    let stderr = StderrTail::follow(settings.name.clone(), settings.secrets.clone(), pipe);
    let transport = AsyncRwTransport::new_client(stdout, stdin)
        .with_max_line_length(settings.max_message_bytes);
    let (session, listed) = match handshake(settings, handler, transport, deadline).await {
        Ok(handshaken) => handshaken,
        Err(error) => return Err(broken_start(&mut child, &stderr, error).await),
    };
    match listed {
        Ok(tools) => Ok(Started {
            process: Some(Process { child, stderr }),
            session,
            tools,
        }),
        Err(error) => {
            let error = broken_start(&mut child, &stderr, error).await;
            drop(session);
            Err(error)
        }
    }
}

/// A start that broke: if the process ended (or ends within a moment), that is the
/// reason; otherwise it is killed and `error` stands.
async fn broken_start(child: &mut Child, stderr: &StderrTail, error: StartError) -> StartError {
    let pid = child.id();
    let exited = match child.try_wait() {
        Ok(Some(status)) => Some(status),
        _ if !matches!(error, StartError::Timeout { .. }) => {
            tokio::time::timeout(EXIT_GRACE, child.wait())
                .await
                .ok()
                .and_then(Result::ok)
        }
        _ => None,
    };
    match exited {
        Some(status) => {
            // It exited; what it launched may not have.
            kill_group(pid);
            StartError::Exited {
                exit: Exit::new(Some(status), stderr.last_after_exit().await),
            }
        }
        None => {
            kill(child).await;
            error
        }
    }
}

/// Kills the server and everything in its process group: a launcher (`npx`, `sh -c`, a
/// wrapper script) would otherwise leave the server it launched running. Then reaps the
/// server's own process.
async fn kill(child: &mut Child) {
    kill_group(child.id());
    let _ = child.kill().await;
}

/// Kills what is left of the process group the server leads, if any. Called while the
/// server's process is not yet reaped, or right after: its group id cannot have been
/// given to another process meanwhile while any member lives.
pub(crate) fn kill_group(pid: Option<u32>) {
    #[cfg(unix)]
    if let Some(pid) = pid
        .and_then(|pid| i32::try_from(pid).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        // ESRCH (the group is gone) is the usual answer after a clean exit.
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    #[cfg(not(unix))]
    let _ = pid;
}

/// Reads every page of the tool list, refusing more pages or tools than allowed, and
/// checks each tool. Asked of the server directly (not through the client's cache, which
/// would answer an error with an older list).
pub(crate) async fn list_tools(
    peer: &Peer<RoleClient>,
    settings: &ServerSettings,
) -> Result<ToolList, StartError> {
    let limits = &settings.limits;
    let mut tools = Vec::new();
    let mut cursor = None;
    for _ in 0..limits.max_pages {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let request = ClientRequest::ListToolsRequest(ListToolsRequest::with_param(params));
        let page = match peer.send_request(request).await {
            Ok(ServerResult::ListToolsResult(page)) => page,
            Ok(_) => {
                return Err(StartError::ToolList {
                    message: "the server answered tools/list with something else".into(),
                })
            }
            Err(error) => {
                return Err(StartError::ToolList {
                    message: settings.secrets.service_error(&error),
                })
            }
        };
        tools.extend(page.tools);
        if tools.len() > limits.max_tools {
            return Err(StartError::ToolList {
                message: format!("more than {} tools", limits.max_tools),
            });
        }
        match page.next_cursor {
            Some(next) if !next.is_empty() => cursor = Some(next),
            _ => return Ok(ToolList::check(tools, limits)),
        }
    }
    Err(StartError::ToolList {
        message: format!("more than {} pages", limits.max_pages),
    })
}

/// Stops a server: closes the connection (a stdio server's input; a remote server's
/// session), gives a process `grace` to exit, then kills it. Returns how a process ended.
pub(crate) async fn stop(
    process: Option<Process>,
    mut session: Session,
    grace: Duration,
) -> Option<Exit> {
    session.close(grace).await;
    let Process { mut child, stderr } = process?;
    let pid = child.id();
    let status = match tokio::time::timeout(grace, child.wait()).await {
        Ok(Ok(status)) => {
            // It exited; what it launched may not have.
            kill_group(pid);
            Some(status)
        }
        _ => {
            kill(&mut child).await;
            child.try_wait().ok().flatten()
        }
    };
    Some(Exit::new(status, stderr.last_after_exit().await))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stderr_line_is_kept_cut_short_and_bad_utf8_replaced() {
        let mut line = StderrLine::default();
        line.push(b"\xff\xfebad\r");
        assert_eq!(line.take(&Secrets::default()), "\u{fffd}\u{fffd}bad");
        for _ in 0..1000 {
            line.push(&[b'x'; 1024]);
        }
        assert!(line.head.len() <= MAX_STDERR_LINE_BYTES);
        let long = line.take(&Secrets::default());
        assert!(long.ends_with('…'), "{long}");
        assert_eq!(long.chars().count(), MAX_QUOTE + 1);
        assert!(line.is_empty());
        // Cut inside a URL, before its `@`: the URL goes whole.
        line.push(b"fatal: GET https://bob:hun");
        line.cut = true;
        assert_eq!(line.take(&Secrets::default()), "fatal: GET …");
    }
}
