//! The agent: its capability map, its plan, and the loop that asks the expediter
//! before every tool call and obeys it.

use std::collections::HashMap;
use std::net::SocketAddr;

use tower_circuit_breaker::error::BoxError;
use tower_circuit_breaker::expediter::{
    Action, Alternative, Attempt, Blame, Degradation, Expediter, ExpediterError, Route, Run,
    StatusReport, SubTask, ToolSpec, WorkStatus,
};
use tower_circuit_breaker::{Answer, State};

use crate::support::{docs_site, reserve_port, search_api, Server, Toolbox, Workspace};

/// Which tools are down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    /// The search API (web_search) is down.
    OneToolDown,
    /// Both HTTP servers are down for one shared reason.
    Systemic,
}

/// After a confirmed recovery, how many times the agent goes over its unfinished
/// sub-tasks before it reports.
const RESUME_ROUNDS: usize = 4;

/// What each tool provides, what can stand in for it, what a person could do, and whose
/// fault its errors are.
fn capability_map() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new("read_file")
            .provides("file content inspection")
            .alternative(Alternative::low(
                "shell",
                "cat the file",
                "loses the workspace path check",
            ))
            .fallback("ask the user to paste the file contents")
            // A path that does not exist, or leaves the workspace, is the caller's
            // mistake: the tool is fine, and nothing is counted against it.
            .blame(|message: &str| {
                if message.contains("not a path inside the workspace") {
                    Blame::Caller
                } else {
                    Blame::of(message)
                }
            }),
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

/// How an alternative serves a request meant for another tool: the map's "method".
fn reroute(from: &str, to: &str, request: &str) -> Option<String> {
    let quoted = format!("'{}'", request.replace('\'', r"'\''"));
    match (from, to) {
        ("web_search", "docs_fetch") => Some("/release-notes".to_string()),
        ("search", "shell") => Some(format!("grep -rn -- {quoted} .")),
        ("read_file", "shell") => Some(format!("cat -- {quoted}")),
        _ => None,
    }
}

/// One piece of the task: the tool it needs, what it asks of it (given what earlier
/// pieces found), and how much a stand-in may lose.
struct Job {
    name: &'static str,
    tool: &'static str,
    accepts: Degradation,
    requests: fn(&[String]) -> Vec<String>,
}

impl Job {
    fn subtask(&self) -> SubTask {
        SubTask::new(self.name, [self.tool]).max_degradation(self.accepts)
    }
}

/// The task, in order. `found` is what "Search for deprecated API calls" found.
const PLAN: &[Job] = &[
    Job {
        name: "Read the configuration",
        tool: "read_file",
        accepts: Degradation::High,
        requests: |_| vec!["agent.toml".into()],
    },
    Job {
        name: "Read the notes left by the last migration",
        tool: "read_file",
        accepts: Degradation::High,
        // There are none: the caller's mistake, not the tool's.
        requests: |_| vec!["MIGRATION-NOTES.md".into()],
    },
    Job {
        name: "Search for deprecated API calls",
        tool: "search",
        accepts: Degradation::High,
        requests: |_| vec!["deprecated:".into()],
    },
    Job {
        name: "Look up replacements for the deprecated calls",
        tool: "web_search",
        accepts: Degradation::High,
        requests: |found| {
            found
                .iter()
                .map(|s| format!("acme-api replacement for {s}"))
                .collect()
        },
    },
    Job {
        name: "Look up the latest API version",
        tool: "web_search",
        accepts: Degradation::High,
        requests: |_| vec!["acme-api latest version".into()],
    },
    Job {
        // The release notes say nothing about advisories: only a real search will do.
        name: "Check security advisories for acme-api 3.x",
        tool: "web_search",
        accepts: Degradation::Low,
        requests: |_| vec!["acme-api 3.x security advisories".into()],
    },
    Job {
        name: "Fetch the changelog and migration docs",
        tool: "docs_fetch",
        accepts: Degradation::High,
        requests: |_| {
            vec![
                "/changelog".into(),
                "/migration/v2-to-v3".into(),
                "/api/v3/client".into(),
            ]
        },
    },
    Job {
        name: "Count the lines to migrate",
        tool: "shell",
        accepts: Degradation::High,
        requests: |_| vec!["wc -l agent.toml src/*.rs".into()],
    },
];

/// Where a sub-task stands after the agent worked on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    Done,
    /// It failed while its tool could not be used: worth one more try once it can.
    FailedWithTool,
    /// It failed while its tool could be used: what was asked was wrong. Final.
    Failed,
    Deferred,
    Paused,
}

/// What one tool use gave.
enum Reply {
    Answer(String),
    /// The call was made and failed: counted once, not retried.
    Failed(String),
    /// No tool can do it now, or every call is paused.
    Stopped(Progress, String),
}

struct Agent {
    expediter: Expediter,
    /// Where its calls are decided and its sub-tasks planned: the agent has the
    /// expediter to itself, so its run is the expediter's default run.
    run: Run,
    tools: Toolbox,
    /// The deprecated symbols found so far.
    found: Vec<String>,
    /// Each tool's breaker state as last seen, to announce changes.
    seen: HashMap<String, State>,
}

impl Agent {
    /// Works through `jobs` until they are done or the expediter pauses; returns the
    /// indexes of the jobs worth another round (deferred, paused, or failed while their
    /// tool was down).
    async fn work_through(&mut self, jobs: &[usize]) -> Result<Vec<usize>, ExpediterError> {
        let mut left = Vec::new();
        for (n, &job) in jobs.iter().enumerate() {
            match self.work_on(&PLAN[job]).await? {
                Progress::Done | Progress::Failed => {}
                Progress::FailedWithTool | Progress::Deferred => left.push(job),
                Progress::Paused => {
                    // The jobs not reached are declared anyway: the report lists them.
                    for &rest in &jobs[n + 1..] {
                        self.run.start_subtask(PLAN[rest].subtask())?;
                    }
                    left.extend_from_slice(&jobs[n..]);
                    break;
                }
            }
        }
        Ok(left)
    }

    /// One sub-task: the expediter plans it; a deferred one is not attempted (the agent
    /// only peeks, which counts nothing, whether its tool's probe is due); otherwise
    /// each request goes through the expediter's decision.
    async fn work_on(&mut self, job: &Job) -> Result<Progress, ExpediterError> {
        println!(
            "\n> {}  [needs {}; accepts {} degradation]",
            job.name, job.tool, job.accepts
        );
        let plan = self.run.start_subtask(job.subtask())?;
        println!("  plan: {}", plan.status);
        match &plan.status {
            WorkStatus::NotAttempted { .. } => return Ok(Progress::Paused),
            WorkStatus::Deferred { blocked_by } => {
                let due = self.expediter.peek_within(job.tool, job.accepts)?;
                if !matches!(due, Action::Call | Action::Probe) {
                    for blocker in blocked_by {
                        println!(
                            "  = deferred, not attempted: {} is tried again {}",
                            blocker.tool, blocker.next_try
                        );
                    }
                    return Ok(Progress::Deferred);
                }
                println!(
                    "  (deferred, but expediter.peek says {}: the first call is the probe)",
                    due.as_str()
                );
            }
            _ => {}
        }
        // Several requests are different questions, not tries of one: each is asked
        // once, and each failure is counted once.
        let (mut answers, mut failed) = (Vec::new(), Vec::new());
        let requests = (job.requests)(&self.found);
        for request in &requests {
            match self.use_tool(job.tool, request, job.accepts).await? {
                Reply::Answer(text) => answers.push(text),
                Reply::Failed(error) => failed.push(error),
                Reply::Stopped(progress, why) => {
                    println!("  = stopped: {why}");
                    if progress == Progress::Deferred {
                        // Its tool opened on the way: plan again, so it is recorded as
                        // deferred, with what is in the way.
                        println!("  plan: {}", self.run.start_subtask(job.subtask())?.status);
                    }
                    return Ok(progress);
                }
            }
        }
        if let Some(first) = failed.first() {
            let why = match requests.len() {
                1 => first.clone(),
                n => format!("{} of {n} requests failed (first: {first})", failed.len()),
            };
            self.run.fail_subtask(job.name, &why)?;
            println!("  = failed: {why}");
            // The cause of a failure while the tool itself is down may pass; a failure
            // while it stayed usable is in the request, and is not tried again.
            return Ok(if self.expediter.handle(job.tool)?.is_closed() {
                Progress::Failed
            } else {
                Progress::FailedWithTool
            });
        }
        if job.tool == "search" {
            self.found = answers
                .iter()
                .flat_map(|a| a.lines())
                .filter_map(deprecated_symbol)
                .collect();
        }
        self.run.complete_subtask(job.name)?;
        println!("  = done");
        Ok(Progress::Done)
    }

    /// One tool use. The expediter decides and the agent obeys: CALL or PROBE, the call
    /// is made once; SKIP to an alternative, that tool is asked instead (the answer
    /// carries the degradation); SKIP with nothing to stand in, or PAUSE, it stops.
    async fn use_tool(
        &mut self,
        tool: &str,
        request: &str,
        accepts: Degradation,
    ) -> Result<Reply, ExpediterError> {
        let (mut tool, mut request) = (tool.to_string(), request.to_string());
        // A route goes only to a tool that can be used now, so following routes never
        // comes back to a tool that was skipped for being down.
        loop {
            let service = self.tools.get(&tool)?;
            let attempt = self
                .run
                .execute_within(&tool, accepts, service, request.clone())
                .await?;
            let route = match attempt {
                Attempt::Made { decision, result } => {
                    println!("  {decision:<26} {request}");
                    let reply = match result {
                        Ok(answer) => {
                            show(&answer);
                            Reply::Answer(answer.into_inner())
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
                    return Ok(Reply::Stopped(Progress::Paused, detail));
                }
            };
            let Route::Alternative { tool: alt, .. } = &route else {
                return Ok(Reply::Stopped(Progress::Deferred, route.to_string()));
            };
            let Some(alt_request) = reroute(&tool, alt, &request) else {
                return Ok(Reply::Stopped(
                    Progress::Deferred,
                    format!("{alt} cannot serve {request:?}"),
                ));
            };
            tool = alt.to_string();
            request = alt_request;
        }
    }

    /// Prints a line when a breaker opens or closes, and what the model is then offered.
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
                    println!("  ** circuit CLOSED for {tool}: the probe succeeded")
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
}

/// Runs the demo; `on_report` gets each status report the agent prints, at once.
pub(crate) async fn run(
    scenario: Scenario,
    on_report: &mut dyn FnMut(&Expediter, &StatusReport),
) -> Result<(), BoxError> {
    let workspace = Workspace::create()?;
    // The search API is down in both scenarios: its port is reserved, nothing listens.
    let (docs_addr, search_addr) = (reserve_port().await?, reserve_port().await?);
    let docs = match scenario {
        Scenario::OneToolDown => Some(Server::start(docs_addr, docs_site).await?),
        Scenario::Systemic => None,
    };
    let specs = capability_map();
    print_setup(&workspace, &specs, docs.is_some(), docs_addr, search_addr);
    let expediter = Expediter::builder()
        .tools(specs)
        // A batch run: nobody to ask, so a tool with no alternative left means scope
        // reduction (the work is deferred and reported), not a question to a person.
        .user_available(false)
        .build()?;
    let tools = Toolbox::new(&expediter, workspace.root(), docs_addr, search_addr)?;
    let mut agent = Agent {
        expediter: expediter.clone(),
        run: expediter.default_run(),
        tools,
        found: Vec::new(),
        seen: HashMap::new(),
    };

    let all: Vec<usize> = (0..PLAN.len()).collect();
    let mut left = agent.work_through(&all).await?;
    report(&expediter, on_report);

    if scenario == Scenario::Systemic {
        println!(
            "\n== Paused: the model keeps asking for tools; each request gets the same answer =="
        );
        for tool in expediter.tools() {
            println!("  {}", agent.run.decide(&tool).await?);
        }
        println!("\n== The network is back: both servers restart on their old ports ==");
        let docs = Server::start(docs_addr, docs_site).await?;
        let search = Server::start(search_addr, search_api).await?;
        expediter.confirm_recovery();
        println!("expediter.confirm_recovery(): calls resume; tools still open are probed after 3");
        println!("calls to any tool (then 6, 12 ... up to 20 after each failed probe)");
        println!("expediter.offered_tools():");
        for line in expediter.offered_tools().to_string().lines() {
            println!("  {line}");
        }
        for round in 1..=RESUME_ROUNDS {
            if left.is_empty() {
                break;
            }
            println!(
                "\n-- resume, round {round}: {} sub-task(s) left --",
                left.len()
            );
            left = agent.work_through(&left).await?;
        }
        report(&expediter, on_report);
        docs.stop().await;
        search.stop().await;
    }
    if let Some(server) = docs {
        server.stop().await;
    }
    Ok(())
}

fn report(expediter: &Expediter, on_report: &mut dyn FnMut(&Expediter, &StatusReport)) {
    let report = expediter.report();
    println!("\n== expediter.report() ==\n{report}");
    on_report(expediter, &report);
}

fn show(answer: &Answer<String>) {
    const SHOWN: usize = 3;
    let lines: Vec<&str> = answer.get_ref().lines().collect();
    for line in lines.iter().take(SHOWN) {
        println!("      | {line}");
    }
    if lines.len() > SHOWN {
        println!("      | ... ({} more lines)", lines.len() - SHOWN);
    }
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

fn print_setup(
    workspace: &Workspace,
    specs: &[ToolSpec],
    docs_up: bool,
    docs: SocketAddr,
    search: SocketAddr,
) {
    let status = |up: bool| if up { "running" } else { "DOWN" };
    println!("== An agent migrates a project from acme-api v2 to v3 ==");
    println!("workspace:  {}", workspace.root().display());
    println!("docs:       http://{docs}  ({})", status(docs_up));
    println!("search API: http://{search}  ({})", status(false));
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
    println!(
        "\nthreshold 3 failures, a probe on the 3rd call after opening, failure budget 5 (a tool"
    );
    println!(
        "that stays down is held open after 1 failed probe, keeping the rest for the others),"
    );
    println!(
        "nobody to ask (batch run); a caller's mistake (a missing file) is not the tool's failure"
    );
}
