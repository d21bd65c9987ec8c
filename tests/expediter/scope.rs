//! Scope reduction (the example's 5 sub-tasks).

use super::*;

#[tokio::test(start_paused = true)]
async fn example_scope_report_defers_bash_subtasks_at_decision_time() -> TestResult {
    let expediter = example_expediter();
    let mut bash = Tool::new(&expediter, "Bash");
    let mut read = Tool::new(&expediter, "Read");
    let mut grep = Tool::new(&expediter, "Grep");
    let mut edit = Tool::new(&expediter, "Edit");
    bash.fail_times(&expediter, 3, "bash: permission denied")
        .await;

    let plans = expediter.default_run().plan(example_subtasks())?;
    let statuses: Vec<(&str, bool)> = plans.iter().map(|p| (&*p.name, p.can_run())).collect();
    assert_eq!(
        statuses,
        [
            ("Read configuration files", true),
            ("Search for deprecated patterns", true),
            ("Run test suite", false),
            ("Update documentation", true),
            ("Deploy to staging", false),
        ]
    );
    for plan in [&plans[2], &plans[4]] {
        let WorkStatus::Deferred { blocked_by } = &plan.status else {
            panic!("{} should be deferred: {:?}", plan.name, plan.status);
        };
        assert_eq!(blocked_by.len(), 1);
        assert_eq!(blocked_by[0].to_string(), "Bash: OPEN — no alternative");
        assert_eq!(
            blocked_by[0].next_try,
            NextTry::Probe {
                decisions: 3,
                not_before: None
            }
        );
        let unblock = blocked_by[0].unblock();
        assert!(
            unblock.contains("Bash is tried again in 3 calls"),
            "{unblock}"
        );
        assert!(
            unblock.contains("report commands that need to be run manually"),
            "{unblock}"
        );
    }

    // The report says so at once, before any other sub-task finishes.
    let early = expediter.report();
    assert!(early.completed.is_empty());
    let deferred: Vec<&str> = early
        .incomplete
        .iter()
        .filter(|w| matches!(w.status, WorkStatus::Deferred { .. }))
        .map(|w| &*w.name)
        .collect();
    assert_eq!(deferred, ["Run test suite", "Deploy to staging"]);

    // Work the achievable scope; never touch Bash.
    for (tool, task) in [
        (&mut read, "Read configuration files"),
        (&mut grep, "Search for deprecated patterns"),
        (&mut edit, "Update documentation"),
    ] {
        assert_eq!(tool.attempt(&expediter).await.action, Action::Call);
        expediter.default_run().complete_subtask(task)?;
    }
    assert_eq!(bash.calls(), 3, "deferred sub-tasks are not attempted");

    let report = expediter.report();
    let done: Vec<&str> = report.completed.iter().map(|w| &*w.name).collect();
    assert_eq!(
        done,
        [
            "Read configuration files",
            "Search for deprecated patterns",
            "Update documentation"
        ]
    );
    let left: Vec<&str> = report.incomplete.iter().map(|w| &*w.name).collect();
    assert_eq!(left, ["Run test suite", "Deploy to staging"]);
    assert!(report
        .incomplete
        .iter()
        .all(|w| matches!(w.status, WorkStatus::Deferred { .. })));

    let text = report.to_string();
    for task in ["Run test suite", "Deploy to staging"] {
        let line = text
            .lines()
            .find(|l| l.contains(task) && l.contains("DEFERRED"))
            .unwrap_or_else(|| panic!("no DEFERRED line for {task}:\n{text}"));
        assert!(line.contains("Bash: OPEN — no alternative"), "{line}");
        assert!(line.contains("to unblock:"), "{line}");
        assert!(
            line.contains("report commands that need to be run manually"),
            "{line}"
        );
    }
    for task in [
        "Read configuration files",
        "Search for deprecated patterns",
        "Update documentation",
    ] {
        assert!(text.contains(&format!("{task} (SUCCESS)")), "{text}");
    }
    assert!(
        report
            .next_steps
            .iter()
            .any(|s| s.starts_with("\"Run test suite\":")),
        "{:?}",
        report.next_steps
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn subtask_whose_tool_has_a_closed_alternative_runs_degraded() -> TestResult {
    let expediter = example_expediter();
    let mut grep = Tool::new(&expediter, "Grep");
    grep.fail_times(&expediter, 3, "grep: index corrupted")
        .await;
    let plan = expediter
        .default_run()
        .start_subtask(SubTask::new("Find API_KEY references", ["Grep"]))?;
    assert!(plan.can_run());
    assert_eq!(
        plan.routes,
        vec![ToolRoute {
            tool: Arc::from("Grep"),
            route: bash_for_grep()
        }]
    );
    expediter
        .default_run()
        .complete_subtask("Find API_KEY references")?;
    let report = expediter.report();
    assert_eq!(report.completed[0].degradations.len(), 1);
    let text = report.to_string();
    assert!(
        text.contains("degraded: use Bash (rg or grep command) [low degradation: loses Grep's built-in output formatting]"),
        "{text}"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn subtask_errors_name_the_unknown_tool_or_subtask() {
    let expediter = example_expediter();
    assert_eq!(
        expediter
            .default_run()
            .start_subtask(SubTask::new("Lint", ["Clippy"]))
            .unwrap_err(),
        ExpediterError::UnknownTool("Clippy".into())
    );
    assert_eq!(
        expediter
            .default_run()
            .complete_subtask("Lint")
            .unwrap_err(),
        ExpediterError::UnknownSubTask("Lint".into())
    );
    assert_eq!(
        expediter
            .default_run()
            .fail_subtask("Lint", "no reason")
            .unwrap_err(),
        ExpediterError::UnknownSubTask("Lint".into())
    );
}
