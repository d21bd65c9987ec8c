//! The demo agent (`examples/agent/`), run in both scenarios over its real tools and
//! loopback servers: every status report it prints is checked, at the moment it is
//! printed, against the tools' breaker handles and against itself — no statement of
//! when a tool is tried next differs from what the handles say or from another line of
//! the same report, no healthy tool is blamed, and the budget adds up.

#[path = "../examples/agent/agent.rs"]
mod agent;
#[path = "../examples/agent/support/mod.rs"]
mod support;

use agent::Scenario;
use tower_circuit_breaker::expediter::{
    Action, Expediter, NextTry, SkipReason, StatusReport, WorkStatus,
};
use tower_circuit_breaker::Reason;

/// Whether `line` says when `tool` (the whole name, not part of another) is tried again.
fn mentions(line: &str, tool: &str) -> bool {
    let mention = format!("{tool} is tried again");
    line.match_indices(&mention).any(|(at, _)| {
        !line[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// Everything in `report` that the handles, or the report itself, contradict.
fn contradictions(expediter: &Expediter, report: &StatusReport) -> Vec<String> {
    let mut found = Vec::new();
    let text = report.to_string();
    let budget = &report.budget;
    if budget.used as usize != budget.ordinary() + budget.systemic_events as usize {
        found.push(format!("the budget does not add up: {budget:?}"));
    }
    for row in &report.tools {
        let handle = expediter.handle(&row.name).expect("a known tool");
        let snapshot = handle.snapshot();
        if (row.state, row.consecutive_failures) != (snapshot.state, snapshot.consecutive_failures)
        {
            found.push(format!("{}: row {row:?}, handle {snapshot:?}", row.name));
        }
        // What a decision would do now, asked without counting anything.
        let peek = expediter.peek(&row.name).expect("a known tool");
        let agrees = match (&row.next_try, &peek) {
            (NextTry::Paused { .. }, Action::Pause { .. }) => true,
            (NextTry::Now, Action::Call) => true,
            (NextTry::Probe { decisions: 1, .. }, Action::Probe) => true,
            (
                NextTry::Probe { decisions, .. },
                Action::Skip {
                    reason: SkipReason::Breaker(Reason::Open),
                    ..
                },
            ) => snapshot.next_probe.calls() == Some(*decisions),
            (
                NextTry::RecoveryBackoff { .. },
                Action::Skip {
                    reason: SkipReason::RecoveryBackoff,
                    ..
                },
            ) => true,
            _ => false,
        };
        if !agrees {
            found.push(format!(
                "{}: the report says it is tried again {}, a decision now would be {peek:?}",
                row.name, row.next_try
            ));
        }
        let said = format!("{} is tried again {}", row.name, row.next_try);
        for line in text.lines().filter(|l| mentions(l, &row.name)) {
            if !line.contains(&said) {
                found.push(format!("{line}\n  does not say: {said}"));
            }
        }
        let blamed = format!("once {} can be used again", row.name);
        if row.unusable.is_none() && text.contains(&blamed) {
            found.push(format!("{} can be used, and is blamed: {blamed}", row.name));
        }
    }
    for item in &report.incomplete {
        if let WorkStatus::Deferred { blocked_by } = &item.status {
            for blocker in blocked_by {
                let row = report
                    .tools
                    .iter()
                    .find(|t| t.name == blocker.tool)
                    .unwrap();
                if blocker.next_try != row.next_try {
                    found.push(format!(
                        "{}: deferred on {} tried again {}, its row says {}",
                        item.name, blocker.tool, blocker.next_try, row.next_try
                    ));
                }
            }
        }
    }
    for words in ["no tools available", "attempt"] {
        if text.contains(words) {
            found.push(format!("the report says {words:?}"));
        }
    }
    if report.systemic.as_ref().is_some_and(|s| !s.resolved)
        != report.headline.starts_with("SYSTEMIC")
    {
        found.push(format!(
            "headline {} with {:?}",
            report.headline, report.systemic
        ));
    }
    found
}

async fn run_checked(scenario: Scenario) -> Vec<StatusReport> {
    let mut reports = Vec::new();
    let mut problems = Vec::new();
    agent::run(scenario, &mut |expediter, report| {
        problems.extend(contradictions(expediter, report));
        reports.push(report.clone());
    })
    .await
    .expect("the demo runs");
    assert!(
        problems.is_empty(),
        "{scenario:?}: the report contradicts itself or the handles:\n{}",
        problems.join("\n")
    );
    reports
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_with_one_tool_down_reports_no_contradiction() {
    let reports = run_checked(Scenario::OneToolDown).await;
    let [report] = &reports[..] else {
        panic!("one report, got {}", reports.len());
    };
    // The missing notes file is the caller's mistake: only web_search's 3 failures.
    assert_eq!(report.budget.used, 3, "{report}");
    assert!(report
        .incomplete
        .iter()
        .any(|w| matches!(w.status, WorkStatus::Deferred { .. })));
    assert_eq!(report.completed.len(), 5, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_with_a_systemic_failure_reports_no_contradiction_before_and_after_recovery() {
    let reports = run_checked(Scenario::Systemic).await;
    let [paused, after] = &reports[..] else {
        panic!("two reports, got {}", reports.len());
    };
    assert_eq!(paused.headline, "SYSTEMIC FAILURE — PAUSING");
    assert_eq!(paused.budget.used, 1, "{paused}");
    assert!(after.systemic.as_ref().is_some_and(|s| s.resolved));
    assert!(after.tools.iter().all(|t| t.unusable.is_none()), "{after}");
    let left: Vec<&str> = after.incomplete.iter().map(|w| &*w.name).collect();
    assert_eq!(
        left,
        ["Read the notes left by the last migration"],
        "{after}"
    );
}
