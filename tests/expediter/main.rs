//! The expediter (the README's "An agent's tools: the expediter"), driven the way an agent
//! drives it: each tool is a `tower::service_fn` that counts its own calls, wrapped with
//! the expediter's layer for that tool; the agent asks `decide` (or `execute`) before
//! every call and calls the service only when the decision says so.
//!
//! The capability map, sub-tasks and failure messages are those of one worked example:
//! an agent with six tools looking for where an `API_KEY` is used. Time is tokio's paused
//! clock: nothing waits on the wall clock.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::advance;
mod budget;
mod capability_map;
mod cascades;
#[path = "../common/mod.rs"]
mod common;
mod decisions;
mod freshness;
mod offered;
mod prechecks;
mod probe_allowance;
mod routing;
mod scope;
mod state_table;

use common::tool::Tool;
use common::{bash_spec, edit_spec, grep_spec, read_spec, websearch_spec, write_spec};
use tower_circuit_breaker::error::{BoxError, ConfigError};
use tower_circuit_breaker::expediter::{
    Action, Alternative, Attempt, Availability, Decision, Degradation, Expediter, ExpediterBuilder,
    ExpediterError, Freshness, FreshnessTracker, Labelled, NextTry, PauseReason, Route, SkipReason,
    SubTask, ToolRoute, ToolSpec, Unusable, WorkStatus,
};
use tower_circuit_breaker::{Builder, Cooldown, Mode, Reason, State};

type TestResult = Result<(), BoxError>;

// ---------------------------------------------------------------------------------------
// The example's capability map, with Edit declared since Write names it.
// ---------------------------------------------------------------------------------------

const EXAMPLE_TOOLS: [&str; 6] = ["Grep", "Bash", "Read", "Write", "Edit", "WebSearch"];

fn example_map() -> ExpediterBuilder {
    Expediter::builder()
        .tool(grep_spec())
        .tool(bash_spec())
        .tool(read_spec())
        .tool(write_spec())
        .tool(edit_spec())
        .tool(websearch_spec())
}

fn example_expediter() -> Expediter {
    example_map()
        .build()
        .expect("the example's capability map is valid")
}

// ---------------------------------------------------------------------------------------
// Tool services that count their own calls.
// ---------------------------------------------------------------------------------------

fn alternative(tool: &str, method: &str, degradation: &str, level: Degradation) -> Route {
    Route::Alternative {
        tool: tool.into(),
        method: method.into(),
        degradation: degradation.into(),
        level,
    }
}

fn bash_for_grep() -> Route {
    alternative(
        "Bash",
        "rg or grep command",
        "loses Grep's built-in output formatting",
        Degradation::Low,
    )
}

fn read_for_grep() -> Route {
    alternative(
        "Read",
        "read suspected files directly",
        "requires knowing which files to check; no broad search",
        Degradation::High,
    )
}

fn manual(ask: &str) -> Route {
    Route::Manual { ask: ask.into() }
}

fn is_pause(decision: &Decision, why: PauseReason) -> bool {
    matches!(&decision.action, Action::Pause { reason, .. } if *reason == why)
}

/// Lets time and steps pass so that breakers opened before and after do not count as
/// opening "together" (default window: 3 steps or 30 s).
async fn let_time_pass(expediter: &Expediter, healthy: &mut Tool) {
    advance(Duration::from_secs(60)).await;
    for _ in 0..4 {
        assert_eq!(healthy.attempt(expediter).await.action, Action::Call);
    }
}

fn example_subtasks() -> Vec<SubTask> {
    vec![
        SubTask::new("Read configuration files", ["Read"]),
        SubTask::new("Search for deprecated patterns", ["Grep"]),
        SubTask::new("Run test suite", ["Bash"]),
        SubTask::new("Update documentation", ["Edit"]),
        SubTask::new("Deploy to staging", ["Bash"]),
    ]
}

/// Grep then Bash open on "connection refused": one systemic event.
async fn network_outage(expediter: &Expediter) -> (Tool, Tool) {
    let mut grep = Tool::new(expediter, "Grep");
    let mut bash = Tool::new(expediter, "Bash");
    grep.fail_times(
        expediter,
        3,
        "tcp connect error: Connection refused (os error 111)",
    )
    .await;
    assert_eq!(
        expediter.report().systemic,
        None,
        "one open tool is not systemic"
    );
    bash.fail_until_systemic(expediter, "connection refused")
        .await;
    (grep, bash)
}

fn assert_no_invitation(line: &str) {
    let lower = line.to_lowercase();
    assert!(!lower.contains("try again"), "{line}");
    assert!(!lower.contains("please"), "{line}");
}

/// Like `network_outage`, for two other tools.
async fn network_outage_on(expediter: &Expediter, a: &'static str, b: &'static str) {
    let mut a = Tool::new(expediter, a);
    let mut b = Tool::new(expediter, b);
    a.fail_times(expediter, 3, "connection refused").await;
    b.fail_until_systemic(expediter, "connection refused").await;
}
