//! Setting up a supervised server: [`McpServerBuilder`] ([`McpServer::builder`],
//! `McpServer::remote`), checked when the server is started.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

use crate::KillSwitch;

use super::error::McpConfigError;
#[cfg(feature = "mcp-http")]
use super::remote::Remote;
use super::restart::RestartPolicy;
use super::server::McpServer;
use super::settings::ServerSettings;
use super::transport::{Command, Transport};

/// The longest server name: it becomes part of the names the model sees.
const MAX_SERVER_NAME: usize = 64;

/// Builds a supervised MCP server: a stdio server it spawns ([`McpServer::builder`]) or
/// a remote one over Streamable HTTP (`McpServer::remote`, feature `mcp-http`). Both
/// take the settings below but the transport's own: a command's arguments, environment
/// and folder for a stdio server, headers and a bearer token for a remote one (the other
/// kind's settings fail the start with [`McpConfigError::NotASetting`]).
///
/// ```no_run
/// use std::time::Duration;
/// use tower_circuit_breaker::mcp::{McpServer, RestartPolicy};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let memory = McpServer::builder("memory", "npx")
///     .args(["-y", "@modelcontextprotocol/server-memory@2026.8.31"])
///     .env("MEMORY_FILE_PATH", "/tmp/agent-memory.jsonl")
///     .start_timeout(Duration::from_secs(30))    // spawn, initialize, tools/list
///     .call_timeout(Duration::from_secs(60))     // each call; a timeout is the server's failure
///     .restart(RestartPolicy::new().backoff(Duration::from_secs(1), Duration::from_secs(30)))
///     .start()?;
/// memory.wait_ready(Duration::from_secs(30)).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct McpServerBuilder {
    settings: ServerSettings,
    /// A setting of the other transport, given: refused at start.
    misplaced: Option<&'static str>,
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
    /// when its breaker lets a probe through. A session it forgets (HTTP 404, or a 400 saying so) is made
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
}

impl McpServerBuilder {
    fn new(name: &str, program: &OsStr) -> Self {
        Self::with_transport(
            name,
            Transport::Stdio(Command {
                program: program.to_owned(),
                args: Vec::new(),
                env: Vec::new(),
                current_dir: None,
            }),
        )
    }

    #[cfg(feature = "mcp-http")]
    fn remote(name: &str, url: &str) -> Self {
        Self::with_transport(name, Transport::Remote(Remote::new(url)))
    }

    fn with_transport(name: &str, transport: Transport) -> Self {
        McpServerBuilder {
            settings: ServerSettings::new(name.into(), transport),
            misplaced: None,
        }
    }

    /// Adds an argument to the command (a stdio server's setting).
    pub fn arg(self, arg: impl AsRef<OsStr>) -> Self {
        self.command("arg", |c| c.args.push(arg.as_ref().to_owned()))
    }

    /// Adds arguments to the command (a stdio server's setting).
    pub fn args<I, A>(self, args: I) -> Self
    where
        I: IntoIterator<Item = A>,
        A: AsRef<OsStr>,
    {
        self.command("args", |c| {
            c.args
                .extend(args.into_iter().map(|a| a.as_ref().to_owned()))
        })
    }

    /// Sets an environment variable for the server (the rest is inherited; a stdio
    /// server's setting).
    pub fn env(self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.command("env", |c| {
            c.env
                .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())))
        })
    }

    /// Removes an inherited environment variable (a stdio server's setting).
    pub fn env_remove(self, key: impl AsRef<OsStr>) -> Self {
        self.command("env_remove", |c| {
            c.env.push((key.as_ref().to_owned(), None))
        })
    }

    /// The server's working directory (a stdio server's setting).
    pub fn current_dir(self, dir: impl Into<PathBuf>) -> Self {
        self.command("current_dir", |c| c.current_dir = Some(dir.into()))
    }

    /// Changes the command of a stdio server, or notes the setting as misplaced.
    fn command(mut self, setting: &'static str, change: impl FnOnce(&mut Command)) -> Self {
        #[cfg(not(feature = "mcp-http"))]
        let _ = setting; // every server is a stdio one
        match &mut self.settings.transport {
            Transport::Stdio(command) => change(command),
            #[cfg(feature = "mcp-http")]
            Transport::Remote(_) => {
                self.misplaced.get_or_insert(setting);
            }
        }
        self
    }

    /// A header sent with every request to a remote server (feature `mcp-http`), such
    /// as an API key. Its value is never shown: not in errors, logs, statuses or
    /// `Debug`. Checked when the server is started: a header the MCP transport sets
    /// itself (`Accept`, `Mcp-Session-Id`, `Last-Event-Id`, `Mcp-Protocol-Version`) is
    /// refused, and so is a name given twice (in any case): reqwest would send both
    /// values, the transport sends one, and which to keep would be a guess.
    #[cfg(feature = "mcp-http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mcp-http")))]
    pub fn header(self, name: &str, value: &str) -> Self {
        self.remote_setting("header", |r| r.header(name, value))
    }

    /// The bearer token sent with every request to a remote server, as
    /// `Authorization: Bearer <token>` (feature `mcp-http`). Never shown.
    #[cfg(feature = "mcp-http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mcp-http")))]
    pub fn bearer_token(self, token: &str) -> Self {
        self.remote_setting("bearer_token", |r| r.bearer_token(token))
    }

    /// Changes a remote server's settings, or notes the setting as misplaced.
    #[cfg(feature = "mcp-http")]
    fn remote_setting(mut self, setting: &'static str, change: impl FnOnce(&mut Remote)) -> Self {
        match &mut self.settings.transport {
            Transport::Remote(remote) => change(remote),
            Transport::Stdio(_) => {
                self.misplaced.get_or_insert(setting);
            }
        }
        self
    }

    /// How long a start may take: spawning (or, for a remote server, connecting), the
    /// `initialize` handshake and reading the tool list (default 30 s; `npx` downloading a package needs longer than a server
    /// installed beforehand). A server that prints no message, hangs, or sends only
    /// garbage fails its start when it passes.
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.settings.start_timeout = timeout;
        self
    }

    /// How long one call may take (default 60 s). A call that takes longer is
    /// cancelled (the server is told) and counts as the server's failure.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.settings.call_timeout = timeout;
        self
    }

    /// How long a server being stopped may take to exit after its input is closed,
    /// before it is killed (default 2 s).
    pub fn stop_timeout(mut self, timeout: Duration) -> Self {
        self.settings.stop_timeout = timeout;
        self
    }

    /// When it is started again after it died or could not start (see
    /// [`RestartPolicy`]).
    pub fn restart(mut self, policy: RestartPolicy) -> Self {
        self.settings.restart = policy;
        self
    }

    /// How many failed calls in a row (timeouts, broken messages) make the server
    /// unresponsive (default 3): its breaker opens, the process is stopped (a remote
    /// server's session closed), and it is started again when the breaker lets a probe
    /// through.
    pub fn unresponsive_after(mut self, failures: u32) -> Self {
        self.settings.unresponsive_after = failures;
        self
    }

    /// The kill switch of the server's breaker (default: one of its own, on
    /// [`McpServer::breaker`]). While it is on, no call is sent and the server is not
    /// restarted.
    pub fn kill_switch(mut self, kill: KillSwitch) -> Self {
        self.settings.kill_switch = Some(kill);
        self
    }

    /// The most tools its list may have (default 1,024); a longer list is refused
    /// whole, and the start fails.
    pub fn max_tools(mut self, tools: usize) -> Self {
        self.settings.limits.max_tools = tools;
        self
    }

    /// The largest message it may send, in bytes (default 16 MiB); a larger one is
    /// dropped unread.
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.settings.max_message_bytes = bytes;
        self
    }

    /// A tool the agent relies on, known before the server has ever started: a tool set
    /// ([`McpTools`](super::McpTools)) declares it at once, unavailable (with why)
    /// until the server lists it.
    pub fn expect_tool(mut self, tool: &str) -> Self {
        self.settings.expected.push(tool.into());
        self
    }

    /// Starts the server under supervision: a task spawns it, reads its tool list, and
    /// restarts it through its breaker when it dies. Returns at once; see
    /// [`McpServer::wait_ready`].
    ///
    /// # Errors
    ///
    /// A bad name, an empty command, a zero timeout or limit, a bad restart policy, or
    /// no tokio runtime to run the supervisor on.
    pub fn start(self) -> Result<McpServer, McpConfigError> {
        self.validate()?;
        McpServer::start(self.settings)
    }

    fn validate(&self) -> Result<(), McpConfigError> {
        let name = &*self.settings.name;
        let good = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if name.is_empty() || name.len() > MAX_SERVER_NAME || !name.chars().all(good) {
            return Err(McpConfigError::ServerName(name.to_string()));
        }
        if let Some(setting) = self.misplaced {
            return Err(McpConfigError::NotASetting {
                server: name.to_string(),
                setting,
                kind: match self.settings.transport {
                    Transport::Stdio(_) => "a stdio",
                    #[cfg(feature = "mcp-http")]
                    Transport::Remote(_) => "a remote",
                },
            });
        }
        match &self.settings.transport {
            Transport::Stdio(command) if command.program.is_empty() => {
                return Err(McpConfigError::EmptyCommand(name.to_string()));
            }
            Transport::Stdio(_) => {}
            #[cfg(feature = "mcp-http")]
            Transport::Remote(remote) => remote.validate(name)?,
        }
        for (which, timeout) in [
            ("start", self.settings.start_timeout),
            ("call", self.settings.call_timeout),
            ("stop", self.settings.stop_timeout),
        ] {
            if timeout.is_zero() {
                return Err(McpConfigError::ZeroTimeout {
                    server: name.to_string(),
                    which,
                });
            }
        }
        for (which, limit) in [
            ("max_tools", self.settings.limits.max_tools),
            ("max_message_bytes", self.settings.max_message_bytes),
            (
                "unresponsive_after",
                self.settings.unresponsive_after as usize,
            ),
        ] {
            if limit == 0 {
                return Err(McpConfigError::ZeroLimit {
                    server: name.to_string(),
                    which,
                });
            }
        }
        self.settings.restart.validate()
    }
}
