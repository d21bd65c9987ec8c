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
//! machine, each a `tower` service behind the expediter's circuit breaker and a timeout
//! (`support/`):
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
//! capability map's alternative, `docs_fetch` on the release-notes page; the work that
//! cannot live with that is deferred, and the agent only peeks (counting nothing) at
//! whether its probe is due. Reading a file that does not exist fails the sub-task but
//! is the caller's mistake: it spends no budget. With `--systemic` both HTTP servers are
//! down: failures with the signature "connection refused" on a second tool are one
//! systemic event, every call pauses, and after the servers come back and recovery is
//! confirmed the probes return and the breakers close.
//!
//! The split is an expediter and an executor (`agent.rs`): the [`Expediter`]
//! decides *whether* a call is made (CALL, PROBE, SKIP with a route, PAUSE); the tool
//! services decide *how*. The agent never retries a failed call: the only second try is
//! the breaker's probe.
//!
//! [`Expediter`]: tower_circuit_breaker::expediter::Expediter

mod agent;
mod support;

use std::process::ExitCode;

use agent::Scenario;

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
    match agent::run(scenario, &mut |_, _| {}).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
