//! An agent with five real tools, one of them broken, that still finishes its task and
//! says honestly what it could not do.
//!
//! ```text
//! cargo run --example agent                # web_search is down: routed around
//! cargo run --example agent -- --systemic  # both HTTP servers down: one systemic event
//! ```
//!
//! The agent migrates a small project (a workspace made under the system temp directory
//! and removed at the end) from `acme-api` v2 to v3. Its tools are real services on this
//! machine, each a `tower` service behind the expediter's circuit breaker and a timeout:
//!
//! | tool         | what it does                                                   |
//! |--------------|----------------------------------------------------------------|
//! | `read_file`  | reads a file of the workspace                                  |
//! | `search`     | walks the workspace and returns `path:line: text` matches      |
//! | `shell`      | runs `sh -c COMMAND` in the workspace                          |
//! | `docs_fetch` | HTTP GET to a docs server this example runs on 127.0.0.1       |
//! | `web_search` | HTTP GET to a second loopback server, a tiny "search API"      |
//!
//! By default the search API is not running: connecting is refused. The agent calls it
//! until its breaker opens (3 failures), then the expediter routes around it to the
//! capability map's alternative, `docs_fetch` on the release-notes page. With
//! `--systemic` both HTTP servers are down: the second breaker opening with the same
//! "connection refused" signature is one systemic event, every call pauses, and after
//! the servers come back and recovery is confirmed the probes return and the breakers
//! close.
//!
//! The split is the seed's expediter and executor: the [`Expediter`] decides *whether* a
//! call is made (CALL, PROBE, SKIP with a route, PAUSE); the tool services decide *how*.
//! The agent never retries a failed call: the only second try is the breaker's probe.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tower::util::BoxService;
use tower::ServiceBuilder;
use tower_circuit_breaker::expediter::{
    Alternative, Attempt, Degradation, Expediter, ExpediterError, Route, SubTask, ToolSpec,
    WorkStatus,
};
use tower_circuit_breaker::{Answer, BoxError, State};

const USAGE: &str = "\
usage: cargo run --example agent [-- --systemic]

Runs an agent over five real tools (read_file, search, shell, docs_fetch, web_search)
behind tower-circuit-breaker's expediter, and prints each decision and the final
status report.

  (no flag)    web_search's server is down: its breaker opens after 3 failures and
               the agent routes around it
  --systemic   both HTTP servers are down: one systemic event pauses every call; then
               the servers come back, recovery is confirmed, probes close the breakers
  -h, --help   this text";

/// Every tool call gets this long before it counts as a failure.
const TOOL_TIMEOUT: Duration = Duration::from_secs(3);

/// After a confirmed recovery, how many times the agent goes over its unfinished
/// sub-tasks before it gives up and reports.
const RESUME_ROUNDS: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    /// One tool (web_search) is down.
    OneToolDown,
    /// Both HTTP tools are down for one shared reason.
    Systemic,
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<Option<Scenario>, String> {
    let mut scenario = Scenario::OneToolDown;
    for arg in args {
        match arg.as_str() {
            "--systemic" => scenario = Scenario::Systemic,
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(Some(scenario))
}

#[tokio::main]
async fn main() -> ExitCode {
    let scenario = match parse_args(std::env::args().skip(1)) {
        Ok(Some(scenario)) => scenario,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(scenario).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(scenario: Scenario) -> Result<(), BoxError> {
    let workspace = Workspace::create()?;
    // The docs server runs unless the scenario takes the network down; the search API
    // is down in both scenarios: its port is reserved and nothing listens on it.
    let docs_addr = reserve_port().await?;
    let search_addr = reserve_port().await?;
    let docs_server = match scenario {
        Scenario::OneToolDown => Some(Server::start(docs_addr, docs_site).await?),
        Scenario::Systemic => None,
    };

    let specs = capability_map();
    print_setup(
        &workspace,
        &specs,
        docs_server.is_some(),
        docs_addr,
        search_addr,
    );
    let expediter = Expediter::builder()
        .tools(specs)
        // A batch run: nobody to ask, so a tool with no alternative left means scope
        // reduction (the work is deferred and reported), not a question to a person.
        .user_available(false)
        .build()?;
    let tools = Toolbox::new(&expediter, workspace.root(), docs_addr, search_addr)?;
    let mut agent = Agent::new(expediter.clone(), tools);

    let unfinished = agent.work_through(&PLAN).await?;
    print_report(&expediter);

    if scenario == Scenario::Systemic {
        agent.show_pause().await?;
        // The operator fixes the shared cause: both servers come back on their ports.
        println!("\n== The network is back: both servers restart on their old ports ==");
        let docs = Server::start(docs_addr, docs_site).await?;
        let search = Server::start(search_addr, search_api).await?;
        expediter.confirm_recovery();
        println!("expediter.confirm_recovery(): calls resume; open tools are probed after a");
        println!("recovery backoff of 3 steps (6, 12 ... up to 20 after each failed probe)");
        println!("expediter.offered_tools():");
        for line in expediter.offered_tools().to_string().lines() {
            println!("  {line}");
        }
        agent.resume(unfinished).await?;
        print_report(&expediter);
        docs.stop().await;
        search.stop().await;
    }
    if let Some(server) = docs_server {
        server.stop().await;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// The capability map (seed step 1)
// ---------------------------------------------------------------------------------

/// What each tool provides, what can stand in for it, and what a person could do.
fn capability_map() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new("read_file")
            .provides("file content inspection")
            .alternative(Alternative::low(
                "shell",
                "cat the file",
                "loses the workspace path check",
            ))
            .fallback("ask the user to paste the file contents"),
        ToolSpec::new("search")
            .provides("content search across the workspace")
            .alternative(Alternative::low(
                "shell",
                "grep -rn over the workspace",
                "loses the tool's path:line formatting",
            ))
            .fallback("ask the user which files to examine"),
        ToolSpec::new("shell")
            .provides("command execution")
            .fallback("report the commands that need to be run manually"),
        ToolSpec::new("docs_fetch")
            .provides("documentation pages")
            .fallback("ask the user to paste the page"),
        ToolSpec::new("web_search")
            .provides("external information retrieval")
            .alternative(Alternative::high(
                "docs_fetch",
                "fetch the known release-notes page",
                "only what the release notes say; no wider search",
            ))
            .fallback("state what information is needed; ask the user to provide it"),
    ]
}

/// How an alternative tool serves a request meant for another: the capability map's
/// "method", made concrete.
fn reroute(from: &str, to: &str, request: &str) -> Option<String> {
    match (from, to) {
        ("web_search", "docs_fetch") => Some("/release-notes".to_string()),
        ("search", "shell") => Some(format!("grep -rn -- {} .", sh_quote(request))),
        ("read_file", "shell") => Some(format!("cat -- {}", sh_quote(request))),
        _ => None,
    }
}

fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

// ---------------------------------------------------------------------------------
// The agent
// ---------------------------------------------------------------------------------

/// The agent's task, in order. Each sub-task names the tools it needs, so the expediter
/// can plan it (go ahead, go ahead degraded, or defer) before any call is made.
const PLAN: [Job; 7] = [
    Job::ReadConfig,
    Job::FindDeprecated,
    Job::FindReplacements,
    Job::LatestVersion,
    Job::CheckAdvisories,
    Job::ReadMigrationDocs,
    Job::CountLines,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Job {
    ReadConfig,
    FindDeprecated,
    FindReplacements,
    LatestVersion,
    CheckAdvisories,
    ReadMigrationDocs,
    CountLines,
}

impl Job {
    fn name(self) -> &'static str {
        match self {
            Job::ReadConfig => "Read the configuration",
            Job::FindDeprecated => "Search for deprecated API calls",
            Job::FindReplacements => "Look up replacements for the deprecated calls",
            Job::LatestVersion => "Look up the latest API version",
            Job::CheckAdvisories => "Check security advisories for acme-api 3.x",
            Job::ReadMigrationDocs => "Fetch the changelog and migration docs",
            Job::CountLines => "Count the lines to migrate",
        }
    }

    fn tools(self) -> &'static [&'static str] {
        match self {
            Job::ReadConfig => &["read_file"],
            Job::FindDeprecated => &["search"],
            Job::FindReplacements | Job::LatestVersion | Job::CheckAdvisories => &["web_search"],
            Job::ReadMigrationDocs => &["docs_fetch"],
            Job::CountLines => &["shell"],
        }
    }

    fn subtask(self) -> SubTask {
        let task = SubTask::new(self.name(), self.tools().iter().copied());
        match self {
            // The release notes (web_search's high-degradation stand-in) say nothing
            // about advisories: only a real search will do, or the work is deferred.
            Job::CheckAdvisories => task.max_degradation(Degradation::Low),
            _ => task,
        }
    }
}

/// What a tool use gave the agent.
enum Reply {
    /// An answer, from the tool asked or (with the degradation it carries) from the
    /// alternative the expediter routed to.
    Answer {
        text: String,
        degraded: Option<String>,
    },
    /// The call was made and failed. Counted once; not retried.
    Failed(String),
}

/// Why a sub-task stops before its end.
enum Stop {
    /// No tool can do this now (scope reduction): the work is deferred.
    Unavailable(String),
    /// The expediter paused every call: the agent stops and reports.
    Paused(String),
    /// A bug in the agent itself (an unknown tool name...).
    Broken(ExpediterError),
}

impl From<ExpediterError> for Stop {
    fn from(error: ExpediterError) -> Self {
        Stop::Broken(error)
    }
}

/// How a sub-task ended.
enum Outcome {
    Done(String),
    Failed(String),
}

/// Where a sub-task stands after the agent worked on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    Done,
    Failed,
    Deferred,
    Paused,
}

struct Agent {
    expediter: Expediter,
    tools: Toolbox,
    /// Each tool's breaker state as last seen, to announce when one opens or closes.
    seen: HashMap<String, State>,
    /// Found by "Search for deprecated API calls", looked up by the next sub-task.
    deprecated: Vec<String>,
    /// How much degradation the current sub-task accepts from a stand-in tool.
    accept: Degradation,
}

impl Agent {
    fn new(expediter: Expediter, tools: Toolbox) -> Self {
        Agent {
            expediter,
            tools,
            seen: HashMap::new(),
            deprecated: Vec::new(),
            accept: Degradation::High,
        }
    }

    /// Works through the plan in order until it is done or the expediter pauses. Returns
    /// the sub-tasks not done (failed, deferred, or not reached because of a pause).
    async fn work_through(&mut self, jobs: &[Job]) -> Result<Vec<Job>, ExpediterError> {
        let mut unfinished = Vec::new();
        for (i, &job) in jobs.iter().enumerate() {
            match self.work_on(job).await? {
                Progress::Done => {}
                Progress::Failed | Progress::Deferred => unfinished.push(job),
                Progress::Paused => {
                    // Stop here. The sub-tasks not reached are declared anyway, so the
                    // report lists them as not attempted instead of leaving them out.
                    for &rest in &jobs[i + 1..] {
                        self.expediter.start_subtask(rest.subtask())?;
                    }
                    unfinished.extend_from_slice(&jobs[i..]);
                    break;
                }
            }
        }
        Ok(unfinished)
    }

    /// After a confirmed recovery: goes over the sub-tasks not done, in rounds. The
    /// cause of their failures is fixed, so each gets one new attempt; a failure now is
    /// final. A deferred one is not attempted: the agent asks the expediter once a round
    /// whether its tool may be used, and the expediter answers SKIP until a probe is
    /// due; the probe is the sub-task's first real call.
    async fn resume(&mut self, mut pending: Vec<Job>) -> Result<(), ExpediterError> {
        for round in 1..=RESUME_ROUNDS {
            if pending.is_empty() {
                break;
            }
            println!(
                "\n-- resume, round {round}: {} sub-task(s) left --",
                pending.len()
            );
            let mut still = Vec::new();
            for job in pending {
                match self.work_on(job).await? {
                    Progress::Done | Progress::Failed => {}
                    Progress::Deferred | Progress::Paused => still.push(job),
                }
            }
            pending = still;
        }
        Ok(())
    }

    /// One sub-task: the expediter plans it, the agent does it through the expediter's
    /// decisions, and the expediter records how it ended.
    async fn work_on(&mut self, job: Job) -> Result<Progress, ExpediterError> {
        println!("\n> {}  [needs {}]", job.name(), job.tools().join(", "));
        self.accept = job.subtask().degradation_limit();
        let plan = self.expediter.start_subtask(job.subtask())?;
        println!("  plan: {}", plan.status);
        for (tool, route) in &plan.routes {
            println!("  plan: {tool} is open -> {route}");
        }
        match plan.status {
            WorkStatus::NotAttempted { .. } => return Ok(Progress::Paused),
            WorkStatus::Deferred { .. } => {
                println!("  (deferred: not attempted; the agent only asks whether its tool may be probed)")
            }
            _ => {}
        }
        match self.perform(job).await {
            Ok(Outcome::Done(summary)) => {
                self.expediter.complete_subtask(job.name())?;
                println!("  = done: {summary}");
                Ok(Progress::Done)
            }
            Ok(Outcome::Failed(why)) => {
                self.expediter.fail_subtask(job.name(), &why)?;
                println!("  = failed: {why}");
                Ok(Progress::Failed)
            }
            Err(Stop::Unavailable(why)) => {
                println!("  = not done now: {why}");
                if plan.can_run() {
                    // A tool opened during the sub-task: plan again, so the expediter
                    // records it as deferred, with the reason and what would unblock it.
                    let plan = self.expediter.start_subtask(job.subtask())?;
                    println!("  plan: {}", plan.status);
                }
                Ok(Progress::Deferred)
            }
            Err(Stop::Paused(why)) => {
                println!("  = paused: {why}");
                Ok(Progress::Paused)
            }
            Err(Stop::Broken(error)) => Err(error),
        }
    }

    async fn perform(&mut self, job: Job) -> Result<Outcome, Stop> {
        match job {
            Job::ReadConfig => self.read_config().await,
            Job::FindDeprecated => self.find_deprecated().await,
            Job::FindReplacements => self.find_replacements().await,
            Job::LatestVersion => self.latest_version().await,
            Job::CheckAdvisories => self.check_advisories().await,
            Job::ReadMigrationDocs => self.read_migration_docs().await,
            Job::CountLines => self.count_lines().await,
        }
    }

    async fn read_config(&mut self) -> Result<Outcome, Stop> {
        Ok(match self.use_tool("read_file", "agent.toml").await? {
            Reply::Answer { text, degraded } => {
                let pinned = line_with(&text, "version").unwrap_or("no version pinned");
                Outcome::Done(with_degradation(format!("pinned: {pinned}"), degraded))
            }
            Reply::Failed(error) => Outcome::Failed(error),
        })
    }

    async fn find_deprecated(&mut self) -> Result<Outcome, Stop> {
        Ok(match self.use_tool("search", "deprecated:").await? {
            Reply::Answer { text, degraded } => {
                self.deprecated = text.lines().filter_map(deprecated_symbol).collect();
                let found = format!(
                    "{} deprecated call(s): {}",
                    self.deprecated.len(),
                    self.deprecated.join(", ")
                );
                Outcome::Done(with_degradation(found, degraded))
            }
            Reply::Failed(error) => Outcome::Failed(error),
        })
    }

    /// One web search per deprecated call. Three different questions, not three tries
    /// of one: each failure is counted, and none is repeated.
    async fn find_replacements(&mut self) -> Result<Outcome, Stop> {
        let mut found = Vec::new();
        let mut failed = Vec::new();
        for symbol in self.deprecated.clone() {
            let query = format!("acme-api replacement for {symbol}");
            match self.use_tool("web_search", &query).await? {
                Reply::Answer { text, degraded } => found.push(with_degradation(
                    line_with(&text, &symbol).unwrap_or("no result").to_string(),
                    degraded,
                )),
                Reply::Failed(error) => failed.push(format!("{symbol}: {error}")),
            }
        }
        Ok(match failed.first() {
            None => Outcome::Done(format!("{} found: {}", found.len(), found.join("; "))),
            Some(first) => Outcome::Failed(format!(
                "{} of {} lookups failed (first: {first})",
                failed.len(),
                failed.len() + found.len()
            )),
        })
    }

    async fn latest_version(&mut self) -> Result<Outcome, Stop> {
        Ok(
            match self
                .use_tool("web_search", "acme-api latest version")
                .await?
            {
                Reply::Answer { text, degraded } => {
                    let latest = line_with(&text, "latest").unwrap_or("not stated");
                    Outcome::Done(with_degradation(latest.to_string(), degraded))
                }
                Reply::Failed(error) => Outcome::Failed(error),
            },
        )
    }

    async fn check_advisories(&mut self) -> Result<Outcome, Stop> {
        Ok(
            match self
                .use_tool("web_search", "acme-api 3.x security advisories")
                .await?
            {
                Reply::Answer { text, degraded } => {
                    let found = line_with(&text, "advisor").unwrap_or("no advisories found");
                    Outcome::Done(with_degradation(found.to_string(), degraded))
                }
                Reply::Failed(error) => Outcome::Failed(error),
            },
        )
    }

    async fn read_migration_docs(&mut self) -> Result<Outcome, Stop> {
        let mut fetched = Vec::new();
        let mut failed = Vec::new();
        for page in ["/changelog", "/migration/v2-to-v3", "/api/v3/client"] {
            match self.use_tool("docs_fetch", page).await? {
                Reply::Answer { .. } => fetched.push(page),
                Reply::Failed(error) => failed.push(format!("{page}: {error}")),
            }
        }
        Ok(match failed.first() {
            None => Outcome::Done(format!("read {}", fetched.join(", "))),
            Some(first) => Outcome::Failed(format!(
                "{} of {} pages failed (first: {first})",
                failed.len(),
                failed.len() + fetched.len()
            )),
        })
    }

    async fn count_lines(&mut self) -> Result<Outcome, Stop> {
        Ok(
            match self.use_tool("shell", "wc -l agent.toml src/*.rs").await? {
                Reply::Answer { text, degraded } => {
                    let total = line_with(&text, "total")
                        .and_then(|line| line.split_whitespace().next())
                        .unwrap_or("?");
                    let summary = format!("{total} lines in the config and sources");
                    Outcome::Done(with_degradation(summary, degraded))
                }
                Reply::Failed(error) => Outcome::Failed(error),
            },
        )
    }

    /// One tool use, as the model asked for it. The expediter decides and the agent
    /// obeys: CALL or PROBE, the call is made once; SKIP to an alternative, that tool is
    /// used the way the capability map says and the answer carries the degradation;
    /// SKIP with nothing to stand in, or PAUSE, the sub-task stops.
    async fn use_tool(&mut self, tool: &str, request: &str) -> Result<Reply, Stop> {
        let (mut tool, mut request) = (tool.to_string(), request.to_string());
        let mut degraded = None;
        // At most one hop per alternative: the map has no cycles (checked at build).
        loop {
            let service = self.tools.get(&tool)?;
            // The sub-task's limit goes with the question: the expediter offers only the
            // stand-ins this work can live with.
            let attempt = self
                .expediter
                .execute_within(&tool, self.accept, service, request.clone())
                .await?;
            let route = match attempt {
                Attempt::Made { decision, result } => {
                    println!("  {decision:<26} {request}");
                    let reply = match result {
                        Ok(answer) => {
                            show_answer(&answer);
                            Reply::Answer {
                                text: answer.into_inner(),
                                degraded,
                            }
                        }
                        Err(error) => {
                            println!("      x {error}");
                            Reply::Failed(error.to_string())
                        }
                    };
                    self.announce_breaker_changes()?;
                    return Ok(reply);
                }
                Attempt::Skipped {
                    decision, route, ..
                } => {
                    println!("  {decision}");
                    route
                }
                Attempt::Paused {
                    decision, detail, ..
                } => {
                    println!("  {decision}");
                    return Err(Stop::Paused(detail));
                }
            };
            // Another tool stands in: ask the expediter about that one, the next step.
            let Route::Alternative {
                tool: alt,
                degradation,
                level,
                ..
            } = &route
            else {
                return Err(Stop::Unavailable(route.to_string()));
            };
            let Some(alt_request) = reroute(&tool, alt, &request) else {
                return Err(Stop::Unavailable(format!("{alt} cannot serve {request:?}")));
            };
            degraded = Some(format!(
                "via {alt} instead of {tool}, {} degradation: {degradation}",
                level.as_str()
            ));
            tool = alt.to_string();
            request = alt_request;
        }
    }

    /// Prints a line when a breaker opens or closes and, when one opens, what the model
    /// would now be offered.
    fn announce_breaker_changes(&mut self) -> Result<(), ExpediterError> {
        let mut opened = false;
        for tool in self.expediter.tools() {
            let snapshot = self.expediter.handle(&tool)?.snapshot();
            let before = self
                .seen
                .insert(tool.to_string(), snapshot.state)
                .unwrap_or(State::Closed);
            match (before, snapshot.state) {
                (State::Closed | State::HalfOpen, State::Open) => {
                    println!(
                        "  ** circuit OPEN for {tool}: {} consecutive failures",
                        snapshot.consecutive_failures
                    );
                    opened = true;
                }
                (State::Open | State::HalfOpen, State::Closed) => {
                    println!("  ** circuit CLOSED for {tool}: the probe succeeded");
                }
                _ => {}
            }
        }
        if opened {
            println!("  expediter.offered_tools():");
            for line in self.expediter.offered_tools().to_string().lines() {
                println!("    {line}");
            }
        }
        Ok(())
    }

    /// While paused, the model may keep asking for tools; every request, for a broken
    /// tool or a healthy one, gets the same answer and no call is made.
    async fn show_pause(&mut self) -> Result<(), ExpediterError> {
        println!(
            "\n== Paused: the model keeps asking for tools; each request gets the same answer =="
        );
        for tool in self.expediter.tools() {
            println!("  {}", self.expediter.decide(&tool).await?);
        }
        Ok(())
    }
}

fn show_answer(answer: &Answer<String>) {
    const SHOWN: usize = 3;
    let lines: Vec<&str> = answer.get_ref().lines().collect();
    for line in lines.iter().take(SHOWN) {
        println!("      | {line}");
    }
    if lines.len() > SHOWN {
        println!("      | ... ({} more lines)", lines.len() - SHOWN);
    }
}

fn with_degradation(summary: String, degraded: Option<String>) -> String {
    match degraded {
        Some(route) => format!("{summary}  [degraded: {route}]"),
        None => summary,
    }
}

fn line_with<'a>(text: &'a str, needle: &str) -> Option<&'a str> {
    text.lines().find(|line| line.contains(needle))
}

/// `legacy_auth` from `src/client.rs:4: // deprecated: legacy_auth() ...`.
fn deprecated_symbol(line: &str) -> Option<String> {
    let after = line.split("deprecated: ").nth(1)?;
    let symbol: String = after
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!symbol.is_empty()).then_some(symbol)
}

fn print_report(expediter: &Expediter) {
    println!("\n== expediter.report() ==\n{}", expediter.report());
}

fn print_setup(
    workspace: &Workspace,
    specs: &[ToolSpec],
    docs_up: bool,
    docs_addr: SocketAddr,
    search_addr: SocketAddr,
) {
    let status = |up: bool| if up { "running" } else { "DOWN" };
    println!("== An agent migrates a project from acme-api v2 to v3 ==");
    println!("workspace:  {}", workspace.root().display());
    println!("docs:       http://{docs_addr}  ({})", status(docs_up));
    println!("search API: http://{search_addr}  ({})", status(false));
    println!("\ncapability map:");
    for spec in specs {
        println!("  {:<11} {}", spec.name(), spec.capability());
        for alt in spec.alternatives() {
            println!(
                "              alternative: {} ({}) [{} degradation: {}]",
                alt.tool(),
                alt.method(),
                alt.level().as_str(),
                alt.degradation()
            );
        }
        if let Some(ask) = spec.manual_fallback() {
            println!("              fallback: {ask}");
        }
    }
    println!("\nthreshold 3 failures, a probe every 3rd attempt after opening, failure budget 5, nobody to ask (batch run)");
}

// ---------------------------------------------------------------------------------
// The tools: tower services behind the expediter's breakers
// ---------------------------------------------------------------------------------

/// A tool as the agent holds it: the breaker layer, a timeout, the service.
type Tool = BoxService<String, Answer<String>, BoxError>;

struct Toolbox {
    tools: HashMap<&'static str, Tool>,
}

impl Toolbox {
    fn new(
        expediter: &Expediter,
        root: &Path,
        docs_addr: SocketAddr,
        search_addr: SocketAddr,
    ) -> Result<Self, ExpediterError> {
        let root: Arc<Path> = Arc::from(root);
        let (r1, r2, r3) = (root.clone(), root.clone(), root);
        let tools = HashMap::from([
            (
                "read_file",
                tool(expediter, "read_file", move |path: String| {
                    let root = r1.clone();
                    blocking(move || read_file(&root, &path))
                })?,
            ),
            (
                "search",
                tool(expediter, "search", move |pattern: String| {
                    let root = r2.clone();
                    blocking(move || search(&root, &pattern))
                })?,
            ),
            (
                "shell",
                tool(expediter, "shell", move |command: String| {
                    let root = r3.clone();
                    blocking(move || shell(&root, &command))
                })?,
            ),
            (
                "docs_fetch",
                tool(expediter, "docs_fetch", move |path: String| async move {
                    http_get(docs_addr, &path).await
                })?,
            ),
            (
                "web_search",
                tool(expediter, "web_search", move |query: String| async move {
                    http_get(search_addr, &format!("/search?q={}", encode_query(&query))).await
                })?,
            ),
        ]);
        Ok(Toolbox { tools })
    }

    fn get(&mut self, name: &str) -> Result<&mut Tool, ExpediterError> {
        self.tools
            .get_mut(name)
            .ok_or_else(|| ExpediterError::UnknownTool(name.to_string()))
    }
}

/// Wraps a tool function in the expediter's breaker for `name` and a timeout.
fn tool<F, Fut>(expediter: &Expediter, name: &str, f: F) -> Result<Tool, ExpediterError>
where
    F: FnMut(String) -> Fut + Send + 'static,
    Fut: Future<Output = Result<String, BoxError>> + Send + 'static,
{
    let service = ServiceBuilder::new()
        .layer(expediter.layer(name)?)
        .timeout(TOOL_TIMEOUT)
        .service_fn(f);
    Ok(BoxService::new(service))
}

/// Runs file and process work on tokio's blocking threads.
async fn blocking(
    work: impl FnOnce() -> Result<String, BoxError> + Send + 'static,
) -> Result<String, BoxError> {
    tokio::task::spawn_blocking(work).await?
}

fn read_file(root: &Path, name: &str) -> Result<String, BoxError> {
    let path = inside(root, name)?;
    Ok(std::fs::read_to_string(path).map_err(|e| format!("read {name}: {e}"))?)
}

/// A relative path that stays inside the workspace.
fn inside(root: &Path, name: &str) -> Result<PathBuf, BoxError> {
    let relative = Path::new(name);
    let escapes = relative.is_absolute()
        || relative
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)));
    if escapes {
        return Err(format!("{name}: not a path inside the workspace").into());
    }
    Ok(root.join(relative))
}

fn search(root: &Path, pattern: &str) -> Result<String, BoxError> {
    let mut files = Vec::new();
    collect_files(root, &mut files)?;
    files.sort();
    let mut hits = Vec::new();
    for file in &files {
        // Binary or unreadable files have no lines to match.
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let shown = file.strip_prefix(root).unwrap_or(file).display();
        for (n, line) in text.lines().enumerate() {
            if line.contains(pattern) {
                hits.push(format!("{shown}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    Ok(if hits.is_empty() {
        format!("no matches for {pattern:?}")
    } else {
        hits.join("\n")
    })
}

fn collect_files(dir: &Path, files: &mut Vec<PathBuf>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_files(&path, files)?;
        } else {
            files.push(path);
        }
    }
    Ok(())
}

fn shell(root: &Path, command: &str) -> Result<String, BoxError> {
    let output = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(root)
        .output()
        .map_err(|e| format!("sh: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        Err(format!("`{command}` failed ({}): {}", output.status, stderr.trim()).into())
    }
}

// ---------------------------------------------------------------------------------
// A minimal HTTP/1.1 client and server on loopback
// ---------------------------------------------------------------------------------

/// `GET target` with `Connection: close`; the body of a 200, an error otherwise.
async fn http_get(addr: SocketAddr, target: &str) -> Result<String, BoxError> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let request = format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let raw = String::from_utf8_lossy(&raw);
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .ok_or("malformed HTTP response")?;
    let status = head.split(' ').nth(1).ok_or("malformed HTTP status line")?;
    if status != "200" {
        return Err(format!("GET {target}: HTTP {status}").into());
    }
    Ok(body.to_string())
}

/// A free loopback port: bind to port 0, note the port, close the listener. Nothing
/// listens there until a server is started on it, so connecting is refused.
async fn reserve_port() -> io::Result<SocketAddr> {
    TcpListener::bind("127.0.0.1:0").await?.local_addr()
}

/// Answers a request target with a page, or `None` for a 404.
type Site = fn(&str) -> Option<String>;

/// A loopback HTTP server: one task accepting connections until stopped.
struct Server {
    task: JoinHandle<()>,
}

impl Server {
    async fn start(addr: SocketAddr, site: Site) -> io::Result<Server> {
        let listener = TcpListener::bind(addr).await?;
        Ok(Server {
            task: tokio::spawn(serve(listener, site)),
        })
    }

    /// Stops accepting and closes the listening socket before returning.
    async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

async fn serve(listener: TcpListener, site: Site) {
    loop {
        if let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(respond(stream, site));
        }
    }
}

async fn respond(mut stream: TcpStream, site: Site) {
    // Read the request head (a GET has no body); 8 KiB is plenty for this demo.
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let target = head
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("GET "))
        .and_then(|rest| rest.split(' ').next());
    let (status, body) = match target.and_then(site) {
        Some(body) => ("200 OK", body),
        None => ("404 Not Found", "not found\n".to_string()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn encode_query(query: &str) -> String {
    query
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            b' ' => "+".to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The docs server's pages.
fn docs_site(target: &str) -> Option<String> {
    let page = match target {
        "/release-notes" => {
            "acme-api release notes\n\
             3.1.0 (latest): API v3; adds Client::pages() streaming\n\
             3.0.0: removes legacy_auth(), old_paginate() and v1_upload()\n"
        }
        "/changelog" => {
            "## 3.1.0\n- Client::pages() streams results\n\
             ## 3.0.0\n- legacy_auth(), old_paginate(), v1_upload() removed\n\
             ## 2.9.0\n- deprecation warnings for the v2 entry points\n"
        }
        "/migration/v2-to-v3" => {
            "legacy_auth(user, password) -> Client::with_token(token)\n\
             old_paginate(query)         -> Client::pages(query)\n\
             v1_upload(path)             -> Client::upload(path)\n"
        }
        "/api/v3/client" => {
            "Client::with_token(token) -> Client\n\
             Client::pages(query) -> Pages\n\
             Client::upload(path) -> Upload\n"
        }
        _ => return None,
    };
    Some(page.to_string())
}

/// The search API: `/search?q=...`, one result line per indexed term in the query.
fn search_api(target: &str) -> Option<String> {
    const INDEX: &[(&str, &str)] = &[
        ("latest", "acme-api 3.1.0 is the latest release (API v3)"),
        (
            "advisories",
            "one advisory for 3.0.x (token logging, fixed in 3.0.2); none for 3.1",
        ),
        (
            "legacy_auth",
            "legacy_auth() is gone in 3.0: use Client::with_token()",
        ),
        (
            "old_paginate",
            "old_paginate() is gone in 3.0: use Client::pages()",
        ),
        (
            "v1_upload",
            "v1_upload() is gone in 3.0: use Client::upload()",
        ),
    ];
    let query = target.strip_prefix("/search?q=")?.replace('+', " ");
    let results: Vec<&str> = INDEX
        .iter()
        .filter(|(term, _)| query.contains(term))
        .map(|(_, result)| *result)
        .collect();
    Some(if results.is_empty() {
        "no results\n".to_string()
    } else {
        results.join("\n") + "\n"
    })
}

// ---------------------------------------------------------------------------------
// The demo workspace
// ---------------------------------------------------------------------------------

const FILES: &[(&str, &str)] = &[
    (
        "agent.toml",
        "[api]\nendpoint = \"https://api.acme.example\"\nversion = \"v2\"\n",
    ),
    (
        "src/main.rs",
        "mod client;\nmod upload;\n\nfn main() {\n    let client = client::connect();\n    upload::send(&client, \"report.csv\");\n}\n",
    ),
    (
        "src/client.rs",
        "pub fn connect() -> acme_api::Client {\n    // deprecated: legacy_auth() is removed in acme-api 3.0\n    let token = acme_api::legacy_auth(\"demo\", \"secret\");\n    acme_api::Client::new(token)\n}\n\npub fn all_items(client: &acme_api::Client) -> Vec<acme_api::Item> {\n    // deprecated: old_paginate() is removed in acme-api 3.0\n    acme_api::old_paginate(client, \"items\")\n}\n",
    ),
    (
        "src/upload.rs",
        "pub fn send(client: &acme_api::Client, path: &str) {\n    // deprecated: v1_upload() is removed in acme-api 3.0\n    acme_api::v1_upload(client, path);\n}\n",
    ),
];

/// A small project under the system temp directory, unique to this process, removed
/// when dropped.
struct Workspace {
    root: PathBuf,
}

impl Workspace {
    fn create() -> io::Result<Workspace> {
        let root = std::env::temp_dir().join(format!(
            "tower-circuit-breaker-agent-{}",
            std::process::id()
        ));
        // Whatever an earlier process with the same id left behind goes first.
        let _ = std::fs::remove_dir_all(&root);
        let workspace = Workspace { root };
        for (name, text) in FILES {
            let path = workspace.root.join(name);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(path, text)?;
        }
        Ok(workspace)
    }

    fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
