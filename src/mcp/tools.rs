//! An agent's MCP tools under its expediter: [`McpTools`] declares each tool of each
//! server as a tool of the expediter (its own breaker and capability entry), keeps each
//! one's availability reported from its server's status, gives the model the working
//! tools' definitions, and calls them through their breakers.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};

use rmcp::model::{CallToolResult, JsonObject, Tool};
use tower::Layer;

use crate::expediter::{
    Attempt, Availability, Expediter, ExpediterError, NextTry, ToolSpec, Unusable, WithheldTool,
};
use crate::fallback::NoFallback;
use crate::CircuitBreaker;

use super::classify::McpClassifier;
use super::error::McpConfigError;
use super::offer::McpOffer;
use super::quote::quote;
use super::server::McpServer;
use super::service::ToolService;
use super::status::ServerStatus;

/// The tower service of one MCP tool under its expediter breaker: the server's
/// [`ToolService`] wrapped in the tool's breaker, classified by [`McpClassifier`].
pub type McpToolService = CircuitBreaker<ToolService, NoFallback, McpClassifier>;

/// Between a server's name and its tool's in the names the model sees.
const SEPARATOR: &str = "__";

/// What a capability entry is made from: one tool of one server.
#[derive(Debug, Clone, Copy)]
pub struct ToolInfo<'a> {
    name: &'a str,
    server: &'a str,
    tool: &'a str,
    definition: Option<&'a Tool>,
}

impl<'a> ToolInfo<'a> {
    /// The name the expediter and the model use (`server__tool`): the spec must have it.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// The server.
    pub fn server(&self) -> &'a str {
        self.server
    }

    /// The tool's name on its server.
    pub fn tool(&self) -> &'a str {
        self.tool
    }

    /// Its definition, once its server has listed it (a tool expected by the server's
    /// builder has none before).
    pub fn definition(&self) -> Option<&'a Tool> {
        self.definition
    }

    /// The default capability entry: what it provides from the first line of its
    /// description, and a manual fallback telling the user it cannot be used.
    pub fn default_spec(&self) -> ToolSpec {
        let provides = self
            .definition
            .and_then(|d| d.description.as_deref())
            .and_then(|d| d.lines().map(str::trim).find(|l| !l.is_empty()))
            .map(quote)
            .unwrap_or_else(|| format!("`{}` of MCP server `{}`", self.tool, self.server));
        ToolSpec::new(self.name)
            .provides(&provides)
            .fallback(&format!(
                "tell the user that `{}` (MCP server `{}`) cannot be used now",
                self.tool, self.server
            ))
    }
}

type SpecMaker = Arc<dyn Fn(&ToolInfo<'_>) -> ToolSpec + Send + Sync>;

/// One MCP tool as the expediter knows it.
#[derive(Debug, Clone)]
struct Entry {
    server: usize,
    tool: Arc<str>,
}

/// Where syncing a server's tools to the expediter stands: one task syncs at a time,
/// from the server's latest status, and syncs again if the status changed meanwhile.
#[derive(Debug, Default)]
struct Syncing {
    running: bool,
    dirty: bool,
}

/// A server's sync state, and what waiters wait on for a sync under way to end.
type SyncSlot = Arc<(Mutex<Syncing>, Condvar)>;

/// Marks the sync under way over when dropped, and wakes whoever waits.
struct Running<'a>(&'a SyncSlot);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let (lock, done) = &**self.0;
        lock.lock().unwrap_or_else(|p| p.into_inner()).running = false;
        done.notify_all();
    }
}

struct Inner {
    expediter: Expediter,
    spec: SpecMaker,
    classifier: McpClassifier,
    servers: RwLock<Vec<(McpServer, SyncSlot)>>,
    entries: RwLock<HashMap<Arc<str>, Entry>>,
}

/// An agent's MCP tools under its expediter. Each tool of each added server becomes a
/// tool of the expediter named `server__tool`, with its own breaker, a capability entry
/// (by default from its description, with a manual fallback), and an availability
/// reported from its server's status as it changes: while the server is down,
/// restarting, given up, held (its breaker forced open or its kill switch on), or no
/// longer lists the tool, decisions route away from it at once, without spending the
/// failure budget, and the offer says why.
///
/// ```no_run
/// use std::time::Duration;
/// use tower_circuit_breaker::expediter::Expediter;
/// use tower_circuit_breaker::mcp::{McpServer, McpTools};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let expediter = Expediter::builder().build()?;
/// let tools = McpTools::new(&expediter);
/// let memory = McpServer::builder("memory", "mcp-server-memory").start()?;
/// memory.wait_ready(Duration::from_secs(30)).await?;
/// tools.add_server(&memory)?;
///
/// let offer = tools.offered();              // the definitions to give the model
/// for tool in &offer.tools {
///     println!("{}: {}", tool.name, tool.description.as_deref().unwrap_or(""));
/// }
/// let mut arguments = serde_json::Map::new();
/// arguments.insert("query".into(), "alice".into());
/// let attempt = tools.execute("memory__search_nodes", arguments).await?;
/// println!("{:?}", attempt.decision().action);
/// # Ok(()) }
/// ```
///
/// # Clone
///
/// Clones share the servers, the tools and the expediter.
#[derive(Clone)]
pub struct McpTools {
    inner: Arc<Inner>,
}

/// Builds an [`McpTools`] ([`McpTools::builder`]).
pub struct McpToolsBuilder {
    expediter: Expediter,
    spec: SpecMaker,
    classifier: McpClassifier,
}

impl McpToolsBuilder {
    /// How each tool's capability entry is made (default
    /// [`ToolInfo::default_spec`]): what it provides, its alternatives, its manual
    /// fallback, its breaker settings. The spec must be named
    /// [`ToolInfo::name`]; its pre-call check, if any, does not run while the tool's
    /// availability is reported from its server (always, once the server is added).
    pub fn spec(
        mut self,
        maker: impl Fn(&ToolInfo<'_>) -> ToolSpec + Send + Sync + 'static,
    ) -> Self {
        self.spec = Arc::new(maker);
        self
    }

    /// The classifier of every tool's breaker (default [`McpClassifier::new`]).
    pub fn classifier(mut self, classifier: McpClassifier) -> Self {
        self.classifier = classifier;
        self
    }

    /// The tool set.
    pub fn build(self) -> McpTools {
        McpTools {
            inner: Arc::new(Inner {
                expediter: self.expediter,
                spec: self.spec,
                classifier: self.classifier,
                servers: RwLock::new(Vec::new()),
                entries: RwLock::new(HashMap::new()),
            }),
        }
    }
}

impl fmt::Debug for McpToolsBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpToolsBuilder")
            .field("classifier", &self.classifier)
            .finish_non_exhaustive()
    }
}

impl McpTools {
    /// The MCP tools of `expediter`, with default capability entries and classifier.
    pub fn new(expediter: &Expediter) -> McpTools {
        McpTools::builder(expediter).build()
    }

    /// A builder, to say how capability entries are made and tools classified.
    pub fn builder(expediter: &Expediter) -> McpToolsBuilder {
        McpToolsBuilder {
            expediter: expediter.clone(),
            spec: Arc::new(|info: &ToolInfo<'_>| info.default_spec()),
            classifier: McpClassifier::new(),
        }
    }

    /// The name the expediter and the model use for `tool` of `server`.
    pub fn name_of(server: &str, tool: &str) -> String {
        format!("{server}{SEPARATOR}{tool}")
    }

    /// The expediter.
    pub fn expediter(&self) -> &Expediter {
        &self.inner.expediter
    }

    /// Adds a server: its expected tools and the tools it lists now become tools of the
    /// expediter, and so do tools it lists later (after a restart or a change of its
    /// list); each one's availability follows the server's status from now on.
    ///
    /// Two tools never share a name: a server one of whose tools (expected or listed)
    /// would have the name of another server's tool is refused whole, and a tool a
    /// server lists later under a name another server's tool has is not declared (the
    /// name keeps calling the tool that had it first; a warning says why). A server has
    /// at most its expected tools and twice its
    /// [`max_tools`](super::McpServerBuilder::max_tools) declared (the expediter keeps
    /// every tool it is given, so a server that renames its tools cannot grow the set
    /// without bound): later new names are not declared, with a warning.
    ///
    /// # Errors
    ///
    /// [`McpConfigError::DuplicateServer`]; [`McpConfigError::ToolNameTaken`] (nothing
    /// of the server is added); or [`McpConfigError::Expediter`] when the expediter
    /// refuses a tool's capability entry (a spec not named as it must be is
    /// [`ExpediterError::UnknownTool`]).
    pub fn add_server(&self, server: &McpServer) -> Result<(), McpConfigError> {
        let status = server.status();
        let expected = server.shared.settings.expected.clone();
        let listed: Vec<Tool> = status.tools.tools().to_vec();
        let index = {
            let mut servers = self
                .inner
                .servers
                .write()
                .unwrap_or_else(|p| p.into_inner());
            if servers.iter().any(|(s, _)| s.name() == server.name()) {
                return Err(McpConfigError::DuplicateServer(server.name().to_string()));
            }
            // A name another server's tool has refuses the server before any of it is
            // declared.
            let names = expected
                .iter()
                .map(|t| &**t)
                .chain(listed.iter().map(|t| &*t.name));
            for tool in names {
                let name = McpTools::name_of(server.name(), tool);
                let taken = self.entries().get(&*name).map(|e| e.server);
                if let Some(taken) = taken {
                    return Err(McpConfigError::ToolNameTaken {
                        name,
                        server: server.name().to_string(),
                        tool: tool.to_string(),
                        taken_by: servers[taken].0.name().to_string(),
                    });
                }
            }
            servers.push((
                server.clone(),
                Arc::new((Mutex::new(Syncing::default()), Condvar::new())),
            ));
            servers.len() - 1
        };
        for tool in &expected {
            self.declare(
                index,
                server,
                tool,
                listed.iter().find(|t| t.name == **tool),
            )?;
        }
        for tool in &listed {
            self.declare(index, server, &tool.name, Some(tool))?;
        }
        let weak = Arc::downgrade(&self.inner);
        server.on_change(move |_| {
            if let Some(inner) = Weak::upgrade(&weak) {
                McpTools { inner }.sync(index, false);
            }
        });
        self.sync(index, true);
        Ok(())
    }

    /// Declares one tool of server `index` in the expediter, once: not a name another
    /// server's tool has, and not past the server's bound on declared tools (its
    /// expected tools and twice its `max_tools`).
    fn declare(
        &self,
        index: usize,
        server: &McpServer,
        tool: &str,
        definition: Option<&Tool>,
    ) -> Result<(), McpConfigError> {
        let name: Arc<str> = McpTools::name_of(server.name(), tool).into();
        let config = &server.shared.settings;
        let limit = config
            .expected
            .len()
            .saturating_add(config.limits.max_tools.saturating_mul(2));
        // The name is checked and taken in one critical section, so that two servers
        // declaring at once cannot both take it; the expediter is told after, outside the
        // lock, and the name is given back if it refuses.
        let taken_by = {
            let mut entries = self
                .inner
                .entries
                .write()
                .unwrap_or_else(|p| p.into_inner());
            match entries.get(&name).map(|e| e.server) {
                Some(owner) if owner == index => return Ok(()),
                Some(owner) => Some(owner),
                None => {
                    if entries.values().filter(|e| e.server == index).count() >= limit {
                        return Err(McpConfigError::TooManyTools {
                            server: server.name().to_string(),
                            tool: tool.to_string(),
                            limit,
                        });
                    }
                    let entry = Entry {
                        server: index,
                        tool: tool.into(),
                    };
                    entries.insert(name.clone(), entry);
                    None
                }
            }
        };
        if let Some(owner) = taken_by {
            return Err(McpConfigError::ToolNameTaken {
                name: name.to_string(),
                server: server.name().to_string(),
                tool: tool.to_string(),
                taken_by: self
                    .server(owner)
                    .map(|(s, _)| s.name().to_string())
                    .unwrap_or_default(),
            });
        }
        let give_back = |error| {
            let mut entries = self
                .inner
                .entries
                .write()
                .unwrap_or_else(|p| p.into_inner());
            entries.remove(&name);
            Err(error)
        };
        let server = server.name();
        let info = ToolInfo {
            name: &name,
            server,
            tool,
            definition,
        };
        let spec = (self.inner.spec)(&info);
        let refused = |source| McpConfigError::Expediter {
            server: server.to_string(),
            source,
        };
        if spec.name() != &*name {
            return give_back(refused(ExpediterError::UnknownTool(name.to_string())));
        }
        match self.inner.expediter.add_tool(spec) {
            // Declared in the expediter already (by the caller, under this name).
            Ok(()) | Err(ExpediterError::DuplicateTool(_)) => Ok(()),
            Err(error) => give_back(refused(error)),
        }
    }

    fn entries(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Arc<str>, Entry>> {
        self.inner.entries.read().unwrap_or_else(|p| p.into_inner())
    }

    fn server(&self, index: usize) -> Option<(McpServer, SyncSlot)> {
        self.inner
            .servers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(index)
            .cloned()
    }

    /// Brings the expediter up to date with server `index`'s latest status: tools it
    /// lists are declared, and every tool of it gets its availability reported. One task
    /// at a time, each time from the latest status, never under a lock of ours; a task
    /// that finds another syncing leaves the work to it, or (`wait`) waits until it has
    /// synced from a status at least as new.
    fn sync(&self, index: usize, wait: bool) {
        let Some((server, sync)) = self.server(index) else {
            return;
        };
        let (lock, done) = &*sync;
        {
            let mut state = lock.lock().unwrap_or_else(|p| p.into_inner());
            state.dirty = true;
            if state.running {
                while wait && state.running {
                    state = done.wait(state).unwrap_or_else(|p| p.into_inner());
                }
                return;
            }
            state.running = true;
        }
        // Whatever happens below (a panic included), the next task can sync.
        let _running = Running(&sync);
        loop {
            lock.lock().unwrap_or_else(|p| p.into_inner()).dirty = false;
            let status = server.status();
            self.push(index, &server, &status);
            if !lock.lock().unwrap_or_else(|p| p.into_inner()).dirty {
                return;
            }
        }
    }

    fn push(&self, index: usize, server: &McpServer, status: &ServerStatus) {
        for tool in status.tools.tools() {
            if let Err(error) = self.declare(index, server, &tool.name, Some(tool)) {
                tracing::warn!(target: "tower_circuit_breaker::mcp", server = %server.name(), "a new tool was not declared: {error}");
            }
        }
        let mine: Vec<(Arc<str>, Arc<str>)> = self
            .entries()
            .iter()
            .filter(|(_, e)| e.server == index)
            .map(|(name, e)| (name.clone(), e.tool.clone()))
            .collect();
        for (name, tool) in mine {
            let (availability, why) = status.tool_availability(&tool);
            let _ = self
                .inner
                .expediter
                .set_availability(&name, availability, &why);
        }
    }

    /// The tower service of the MCP tool `name` (`server__tool`), under its breaker.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`] for a name that is not an MCP tool of this set.
    pub fn service(&self, name: &str) -> Result<McpToolService, ExpediterError> {
        let entry = self
            .entries()
            .get(name)
            .cloned()
            .ok_or_else(|| ExpediterError::UnknownTool(name.to_string()))?;
        let (server, _) = self
            .server(entry.server)
            .ok_or_else(|| ExpediterError::UnknownTool(name.to_string()))?;
        let layer = self
            .inner
            .expediter
            .layer(name)?
            .with_classifier(self.inner.classifier.clone());
        Ok(layer.layer(server.tool(&entry.tool)))
    }

    /// Decides one call of the MCP tool `name` and makes it only if the decision says
    /// so ([`Run::execute`](crate::expediter::Run::execute), on the expediter's
    /// [default run](Expediter::default_run)): never retried. The tool's availability is brought up
    /// to date with its server first, so a server seen down is never called.
    ///
    /// # Errors
    ///
    /// [`ExpediterError::UnknownTool`].
    pub async fn execute(
        &self,
        name: &str,
        arguments: JsonObject,
    ) -> Result<Attempt<CallToolResult>, ExpediterError> {
        let mut service = self.service(name)?;
        let entry = self.entries().get(name).cloned();
        if let Some(entry) = entry {
            self.sync(entry.server, true);
        }
        self.inner
            .expediter
            .default_run()
            .execute(name, &mut service, arguments)
            .await
    }

    /// What to give the model now: the definitions of the MCP tools worth calling
    /// (named `server__tool`), the expediter's other tools worth calling, and one line
    /// for each tool held back ([`Expediter::offered_tools`], with each MCP tool's
    /// availability brought up to date with its server first).
    pub fn offered(&self) -> McpOffer {
        let count = self
            .inner
            .servers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .len();
        for index in 0..count {
            self.sync(index, true);
        }
        let offer = self.inner.expediter.offered_tools();
        let mut tools = Vec::new();
        let mut other = Vec::new();
        let mut withheld = offer.withheld;
        for name in offer.offered {
            let Some(entry) = self.entries().get(&name).cloned() else {
                other.push(name);
                continue;
            };
            let Some((server, _)) = self.server(entry.server) else {
                continue;
            };
            let status = server.status();
            match status.tools.get(&entry.tool) {
                Some(definition) => {
                    let mut definition = definition.clone();
                    definition.name = name.to_string().into();
                    tools.push(definition);
                }
                // Its server changed its list a moment ago.
                None => {
                    let (_, why) = status.tool_availability(&entry.tool);
                    withheld.push(WithheldTool {
                        line: format!("{name} is not offered: {why}; it is tried again once it is reported available"),
                        name,
                        unusable: Unusable::Unavailable,
                        next_try: NextTry::WhenReported,
                    });
                }
            }
        }
        McpOffer {
            tools,
            other,
            withheld,
        }
    }

    /// Every server's status, in the order they were added.
    pub fn servers(&self) -> Vec<ServerStatus> {
        self.inner
            .servers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(s, _)| s.status())
            .collect()
    }

    /// The server of the MCP tool `name`, and the tool's name on it.
    pub fn lookup(&self, name: &str) -> Option<(McpServer, Arc<str>)> {
        let entry = self.entries().get(name).cloned()?;
        let (server, _) = self.server(entry.server)?;
        Some((server, entry.tool))
    }

    /// Whether `name` is one of these MCP tools and its server serves it now.
    pub fn is_available(&self, name: &str) -> bool {
        self.lookup(name).is_some_and(|(server, tool)| {
            server.status().tool_availability(&tool).0 == Availability::Available
        })
    }
}

impl fmt::Debug for McpTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let servers: Vec<String> = self.servers().iter().map(|s| s.name.to_string()).collect();
        f.debug_struct("McpTools")
            .field("servers", &servers)
            .field("tools", &self.entries().len())
            .finish_non_exhaustive()
    }
}
