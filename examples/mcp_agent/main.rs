//! An agent whose tools come from two real MCP servers, one of which dies mid-run.
//!
//! ```text
//! cargo run --example mcp_agent
//! ```
//!
//! It needs node and npm: the reference servers `@modelcontextprotocol/server-filesystem`
//! and `server-memory` (pinned in `examples/mcp_agent/npm/`) are installed once into
//! `target/mcp-servers` with `npm ci` from the npm registry, and run over stdio. Without
//! node or npm it says so and exits with status 2.
//!
//! The model is an OpenAI-compatible tool-calling server on loopback (scripted: it works
//! through a plan, calling only the tools it is offered), called through async-openai.
//! The agent gives it, each turn, the tool definitions `McpTools::offered` returns and
//! the line for each tool held back. After it stores its first finding in memory, the
//! memory server is killed (`SIGKILL`): the next tool list has no memory tools and says
//! why, the model finishes on the filesystem server and says what it could not do, and
//! the agent prints the status report. The memory server is then restarted by its
//! supervisor, as its breaker's probe, after the restart backoff; its tools return, and
//! the model stores what it could not before. The run checks each of these and exits 0
//! when they hold.

mod model;
mod servers;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{
    ChatCompletionMessageToolCalls, ChatCompletionRequestAssistantMessageArgs,
    ChatCompletionRequestMessage, ChatCompletionRequestSystemMessageArgs,
    ChatCompletionRequestToolMessageArgs, ChatCompletionRequestUserMessageArgs, ChatCompletionTool,
    ChatCompletionTools, CreateChatCompletionRequestArgs, FunctionObject,
};
use async_openai::Client;
use serde_json::{json, Value};
use tower::BoxError;
use tower_circuit_breaker::expediter::{Attempt, Expediter, SubTask, WorkStatus};
use tower_circuit_breaker::mcp::rmcp::model::CallToolResult;
use tower_circuit_breaker::mcp::{
    Down, McpOffer, McpServer, McpTools, RestartPolicy, ServerState, ServerStatus,
};
use tower_circuit_breaker::Transition;

use model::{Model, Step};

/// How long a server may take to start (node, from a warm disk, takes about a second).
const START: Duration = Duration::from_secs(30);
/// The memory server's first restart waits this long: the run finishes meanwhile.
const BACKOFF: Duration = Duration::from_secs(2);

#[tokio::main]
async fn main() -> ExitCode {
    let installed = match servers::locate(true) {
        Ok(installed) => installed,
        Err(why) => {
            eprintln!("mcp_agent cannot run: {why}.\nIt needs {}.", servers::NEEDS);
            return ExitCode::from(2);
        }
    };
    match run(&installed).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("mcp_agent: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(installed: &servers::Installed) -> Result<(), BoxError> {
    let project = project()?;
    let restart = RestartPolicy::new().backoff(BACKOFF, Duration::from_secs(10));
    let files = McpServer::builder("files", "node")
        .arg(installed.script("server-filesystem"))
        .arg(&project)
        .start_timeout(START)
        .restart(restart)
        .start()?;
    let memory = McpServer::builder("memory", "node")
        .arg(installed.script("server-memory"))
        .env("MEMORY_FILE_PATH", project.join(".memory.jsonl"))
        .start_timeout(START)
        .restart(restart)
        .start()?;
    files.wait_ready(START).await?;
    memory.wait_ready(START).await?;
    let mut memory_breaker = memory.breaker().subscribe();

    let expediter = Expediter::builder().build()?;
    // The agent has the expediter to itself: its sub-tasks are the default run's, the
    // run the MCP tools' calls are decided in.
    let run = expediter.default_run();
    let tools = McpTools::new(&expediter);
    tools.add_server(&files)?;
    tools.add_server(&memory)?;
    for server in tools.servers() {
        println!("{server}");
    }
    let survey = || {
        SubTask::new(
            "Survey the project",
            [
                "files__list_directory",
                "files__read_text_file",
                "files__search_files",
            ],
        )
    };
    let remember = || {
        SubTask::new(
            "Remember the findings",
            ["memory__create_entities", "memory__add_observations"],
        )
    };
    run.plan([survey(), remember()])?;

    let at = |file: &str| project.join(file).display().to_string();
    let plan = vec![
        step("files__list_directory", json!({ "path": at("") })),
        step("files__read_text_file", json!({ "path": at("NOTES.md") })),
        step(
            "memory__create_entities",
            json!({"entities": [{"name": "acme-migration", "entityType": "project",
                "observations": ["moving from acme-api 2.x to 3.x; legacy_auth() is removed in 3.0"]}]}),
        ),
        step(
            "files__search_files",
            json!({ "path": at(""), "pattern": "**/*.rs" }),
        ),
        step("files__read_text_file", json!({ "path": at("src/lib.rs") })),
        step(
            "memory__add_observations",
            json!({"observations": [{"entityName": "acme-migration",
                "contents": ["src/lib.rs still calls legacy_auth() and has 2 TODOs"]}]}),
        ),
    ];
    let model = Model::start(plan).await?;
    let client = Client::with_config(
        OpenAIConfig::new()
            .with_api_base(format!("http://{}/v1", model.addr))
            .with_api_key("not-a-real-key"),
    );
    println!(
        "model: a scripted OpenAI-compatible server on http://{}/v1",
        model.addr
    );

    let mut history: Vec<ChatCompletionRequestMessage> = vec![
        ChatCompletionRequestSystemMessageArgs::default()
            .content("You are a migration assistant. Use only the tools you are given.")
            .build()?
            .into(),
        ChatCompletionRequestUserMessageArgs::default()
            .content(
                "Survey the project for the acme-api 3.x migration and remember what you find.",
            )
            .build()?
            .into(),
    ];

    println!("\n== the run");
    let mut memory_pid = None;
    let mut offer_after_kill = None;
    let answer = converse(&client, &tools, &mut history, |name, offer| {
        // Mid-run, once the first finding is stored, the memory server dies.
        if name == "memory__create_entities" && memory_pid.is_none() {
            memory_pid = memory.status().pid;
            Some(memory.clone())
        } else {
            if memory_pid.is_some() && offer_after_kill.is_none() {
                offer_after_kill = Some(offer.clone());
            }
            None
        }
    })
    .await?;

    // The survey is done; remembering is not, and planning it again says why.
    run.complete_subtask("Survey the project")?;
    let plan = run.start_subtask(remember())?;
    println!("\nplan: {} — {}", plan.name, plan.status);
    let deferred = matches!(plan.status, WorkStatus::Deferred { .. });

    let report = expediter.report();
    println!("\n== expediter.report()\n{report}");
    println!("\n== MCP servers");
    for server in tools.servers() {
        println!("{server}");
    }
    print_transitions(&mut memory_breaker);

    // Checks: the memory tools left the offer, with why, and cost nothing.
    let offer = offer_after_kill.ok_or("the run never got past the kill")?;
    if offer.tools.iter().any(|t| t.name.starts_with("memory__")) {
        return Err("memory tools were offered while the memory server was down".into());
    }
    let line = offer
        .withheld
        .iter()
        .find(|w| w.name.starts_with("memory__"))
        .map(|w| w.line.clone())
        .ok_or("no line for the memory tools")?;
    if !line.contains("was killed by signal 9") {
        return Err(format!("the line does not say why: {line}").into());
    }
    if !answer.contains("Not done: memory__add_observations") {
        return Err(format!("the model did not say what it could not do: {answer}").into());
    }
    if report.budget.used != 0 {
        return Err("routing away from a dead server spent the budget".into());
    }
    if !deferred {
        return Err("remembering the findings was not deferred while memory was down".into());
    }

    println!("\n== the memory server comes back: its supervisor restarts it when its breaker lets a probe through");
    let back = wait_running(&memory).await?;
    println!("{back}");
    print_transitions(&mut memory_breaker);
    if back.generation != 2 || back.pid == memory_pid {
        return Err(format!("the memory server did not come back as a new process: {back}").into());
    }

    println!("\n== the run resumes");
    history.push(
        ChatCompletionRequestUserMessageArgs::default()
            .content("The memory server is back: store what you could not.")
            .build()?
            .into(),
    );
    let plan = run.start_subtask(remember())?;
    println!("plan: {} — {}", plan.name, plan.status);
    if plan.status != WorkStatus::InProgress {
        return Err("the memory tools were not usable again after the restart".into());
    }
    let answer = converse(&client, &tools, &mut history, |_, _| None).await?;
    if answer.contains("Not done") {
        return Err(format!("the model could not finish: {answer}").into());
    }
    run.complete_subtask("Remember the findings")?;
    let report = expediter.report();
    println!("\n{}", report.headline);
    for item in report.completed.iter().chain(&report.incomplete) {
        println!("  - {} ({})", item.name, item.status);
    }
    println!(
        "  failures: {} / {} budget consumed",
        report.budget.used, report.budget.limit
    );
    let graph = tools
        .execute("memory__read_graph", serde_json::Map::new())
        .await?;
    let Attempt::Made {
        result: Ok(graph), ..
    } = graph
    else {
        return Err("the memory graph could not be read".into());
    };
    let stored = full_text(
        graph
            .get_ref()
            .content
            .iter()
            .filter_map(|c| c.as_text())
            .map(|t| t.text.as_str()),
    );
    if !stored.contains("2 TODOs") {
        return Err(format!("the finding was not stored: {stored}").into());
    }
    println!(
        "\nthe memory server holds both findings; the model server answered {} requests",
        model.requests()
    );
    files.stop().await;
    memory.stop().await;
    let _ = std::fs::remove_dir_all(&project);
    Ok(())
}

fn step(tool: &str, arguments: Value) -> Step {
    Step {
        tool: tool.into(),
        arguments,
    }
}

/// Turns with the model until it answers: each turn it is given the tools offered now,
/// and the lines of those held back. `on_call` sees each tool called, with the offer it
/// was made under, and may return a server to kill before the next turn.
async fn converse(
    client: &Client<OpenAIConfig>,
    tools: &McpTools,
    history: &mut Vec<ChatCompletionRequestMessage>,
    mut on_call: impl FnMut(&str, &McpOffer) -> Option<McpServer>,
) -> Result<String, BoxError> {
    for turn in 1..=20 {
        let offer = tools.offered();
        print_offer(turn, &offer);
        let definitions: Vec<ChatCompletionTools> = offer
            .tools
            .iter()
            .map(|tool| {
                ChatCompletionTools::Function(ChatCompletionTool {
                    function: FunctionObject {
                        name: tool.name.to_string(),
                        description: tool.description.as_deref().map(str::to_string),
                        parameters: Some(Value::Object((*tool.input_schema).clone())),
                        strict: None,
                    },
                })
            })
            .collect();
        let mut messages = history.clone();
        if !offer.withheld.is_empty() {
            let lines: Vec<&str> = offer.withheld.iter().map(|w| w.line.as_str()).collect();
            messages.push(
                ChatCompletionRequestSystemMessageArgs::default()
                    .content(format!("Tools held back now:\n{}", lines.join("\n")))
                    .build()?
                    .into(),
            );
        }
        let request = CreateChatCompletionRequestArgs::default()
            .model("scripted")
            .messages(messages)
            .tools(definitions)
            .build()?;
        let response = client.chat().create(request).await?;
        let message = response
            .choices
            .into_iter()
            .next()
            .ok_or("the model answered nothing")?
            .message;
        let calls = message.tool_calls.unwrap_or_default();
        if calls.is_empty() {
            let answer = message.content.unwrap_or_default();
            println!("  model: {answer}");
            history.push(
                ChatCompletionRequestAssistantMessageArgs::default()
                    .content(answer.clone())
                    .build()?
                    .into(),
            );
            return Ok(answer);
        }
        history.push(
            ChatCompletionRequestAssistantMessageArgs::default()
                .tool_calls(calls.clone())
                .build()?
                .into(),
        );
        let mut to_kill = None;
        for call in calls {
            let ChatCompletionMessageToolCalls::Function(call) = call else {
                continue;
            };
            let (name, arguments) = (call.function.name, call.function.arguments);
            println!("  model -> {name} {arguments}");
            let said = match serde_json::from_str::<Value>(&arguments) {
                Ok(Value::Object(arguments)) => match tools.execute(&name, arguments).await {
                    Ok(attempt) => outcome(&attempt),
                    Err(error) => format!("not called: {error}"),
                },
                _ => "not called: the arguments are not a JSON object".to_string(),
            };
            println!("  {}", said.lines().next().unwrap_or(""));
            history.push(
                ChatCompletionRequestToolMessageArgs::default()
                    .tool_call_id(call.id)
                    .content(said)
                    .build()?
                    .into(),
            );
            to_kill = to_kill.or_else(|| on_call(&name, &offer));
        }
        if let Some(server) = to_kill {
            kill(&server).await?;
        }
    }
    Err("the model never answered".into())
}

/// What a call came to, in one line for the log and for the model.
fn outcome(attempt: &Attempt<CallToolResult>) -> String {
    let decision = attempt.decision();
    match attempt {
        Attempt::Made {
            result: Ok(answer), ..
        } => {
            let texts = answer.get_ref().content.iter().filter_map(|c| c.as_text());
            let said = text(texts.map(|t| t.text.as_str()));
            format!("{} {} -> {}", decision.action.as_str(), decision.tool, said)
        }
        Attempt::Made {
            result: Err(error), ..
        } => {
            format!(
                "{} {} -> error: {error}",
                decision.action.as_str(),
                decision.tool
            )
        }
        other => format!("not called: {}", other.decision()),
    }
}

/// A tool's text on one line: JSON compacted, lines joined with ` | `, cut at 160
/// characters.
fn text<'a>(parts: impl Iterator<Item = &'a str>) -> String {
    let line = full_text(parts);
    match line.char_indices().nth(160) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line,
    }
}

fn full_text<'a>(parts: impl Iterator<Item = &'a str>) -> String {
    let parts: Vec<String> = parts
        .map(|part| match serde_json::from_str::<Value>(part) {
            Ok(json) if !json.is_string() => json.to_string(),
            _ => {
                let lines: Vec<&str> = part.lines().filter(|l| !l.trim().is_empty()).collect();
                lines.join(" | ")
            }
        })
        .collect();
    parts.join(" | ")
}

/// The offer: how many tools of each server, and the tools held back, the first one's
/// line in full and the others that are held back for the same reason by name.
fn print_offer(turn: usize, offer: &McpOffer) {
    let mut by_server: BTreeMap<&str, usize> = BTreeMap::new();
    for tool in &offer.tools {
        let server = tool.name.split("__").next().unwrap_or("");
        *by_server.entry(server).or_default() += 1;
    }
    let counts: Vec<String> = by_server.iter().map(|(s, n)| format!("{s}: {n}")).collect();
    println!(
        "turn {turn}: {} tools offered ({})",
        offer.tools.len() + offer.other.len(),
        counts.join(", ")
    );
    // Why, without the name and each tool's own fallback.
    let why = |line: &str| {
        let after = line
            .split_once(" is not offered: ")
            .map_or(line, |(_, why)| why);
        after.split("; instead").next().unwrap_or(after).to_string()
    };
    let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
    for withheld in &offer.withheld {
        let reason = why(&withheld.line);
        match groups.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, names)) => names.push(&withheld.name),
            None => {
                println!("  {}", withheld.line);
                groups.push((reason, vec![&withheld.name]));
            }
        }
    }
    for (_, names) in groups.iter().filter(|(_, names)| names.len() > 1) {
        println!(
            "  (and {} more, for the same reason: {})",
            names.len() - 1,
            names[1..].join(", ")
        );
    }
}

/// `kill -9` of a server's process; returns once its supervisor has seen it die. (Its
/// output ends first, which takes it out of service at once, as "closed its connection";
/// the exit, "killed by signal 9", is known a moment later.)
async fn kill(server: &McpServer) -> Result<(), BoxError> {
    let pid = server.status().pid.ok_or("the server has no process")?;
    println!("** kill -9 {pid}: the {} server dies", server.name());
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()?;
    let mut watch = server.watch();
    tokio::time::timeout(
        START,
        watch.wait_for(|s| matches!(s.state, ServerState::Down(Down::Exited(_)))),
    )
    .await??;
    Ok(())
}

async fn wait_running(server: &McpServer) -> Result<ServerStatus, BoxError> {
    let mut watch = server.watch();
    let status =
        tokio::time::timeout(BACKOFF * 5 + START, watch.wait_for(|s| s.is_running())).await??;
    Ok(status.clone())
}

fn print_transitions(transitions: &mut tokio::sync::broadcast::Receiver<Transition>) {
    while let Ok(t) = transitions.try_recv() {
        println!("  memory's breaker: {} -> {} ({})", t.from, t.to, t.cause);
    }
}

/// A small project to survey.
fn project() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("mcp-agent-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src"))?;
    write(
        &dir,
        "README.md",
        "# acme-client\nA client for the acme API.\n",
    )?;
    write(
        &dir,
        "NOTES.md",
        "# Migration notes\nWe move from acme-api 2.x to 3.x.\nlegacy_auth() is removed in 3.0.\n",
    )?;
    write(
        &dir,
        "src/lib.rs",
        "// TODO: replace legacy_auth() with Client::login()\npub fn connect() { legacy_auth(); }\n// TODO: use Client::pages() for pagination\nfn legacy_auth() {}\n",
    )?;
    // The filesystem server resolves symlinks: give it the folder's real path.
    dir.canonicalize()
}

fn write(dir: &Path, file: &str, text: &str) -> std::io::Result<()> {
    std::fs::write(dir.join(file), text)
}
