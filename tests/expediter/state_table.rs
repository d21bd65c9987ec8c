//! The state table and the call/track loop.

use super::*;

#[tokio::test(start_paused = true)]
async fn every_tool_starts_closed_with_zero_failures_and_an_empty_budget() {
    let expediter = example_expediter();
    let report = expediter.report();
    let names: Vec<&str> = report.tools.iter().map(|t| &*t.name).collect();
    assert_eq!(names, EXAMPLE_TOOLS);
    for row in &report.tools {
        assert_eq!(row.state, State::Closed, "{}", row.name);
        assert!(!row.killed);
        assert_eq!(row.consecutive_failures, 0);
        assert_eq!(row.last_failure, None);
        assert_eq!(row.last_failure_step, None);
        assert_eq!(row.last_success_step, None);
    }
    assert_eq!((report.budget.used, report.budget.limit), (0, 5));
    assert!(!report.budget.exhausted());
    let text = report.to_string();
    assert!(text.contains("Failures: 0 / 5"), "{text}");
    for name in EXAMPLE_TOOLS {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("| {name} ")))
            .unwrap_or_else(|| panic!("no table row for {name}:\n{text}"));
        assert!(line.contains("| CLOSED "), "{line}");
    }
}

#[tokio::test(start_paused = true)]
async fn closed_tool_gets_call_and_success_is_recorded() {
    let expediter = example_expediter();
    let mut read = Tool::new(&expediter, "Read");
    let decision = read.attempt(&expediter).await;
    assert_eq!(decision.action, Action::Call);
    assert!(decision.should_call());
    assert_eq!(&*decision.tool, "Read");
    assert_eq!(read.calls(), 1);
    let report = expediter.report();
    let row = report.tools.iter().find(|t| &*t.name == "Read").unwrap();
    assert_eq!(row.last_success_step, Some(decision.step));
    assert_eq!(report.budget.used, 0);
}

#[tokio::test(start_paused = true)]
async fn three_consecutive_failures_open_the_tool() -> TestResult {
    let expediter = example_expediter();
    let mut bash = Tool::new(&expediter, "Bash");
    bash.fail_times(&expediter, 2, "bash: exit status 2").await;
    assert_eq!(expediter.handle("Bash")?.state(), State::Closed);
    assert_eq!(
        expediter.default_run().decide("Bash").await?.action,
        Action::Call
    );
    assert!(bash.call().await.is_err());
    assert_eq!(expediter.handle("Bash")?.state(), State::Open);

    let report = expediter.report();
    let row = report.tools.iter().find(|t| &*t.name == "Bash").unwrap();
    assert_eq!((row.state, row.consecutive_failures), (State::Open, 3));
    assert_eq!(row.last_failure.as_deref(), Some("bash: exit status 2"));
    assert_eq!(report.budget.used, 3);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_success_resets_the_consecutive_failure_count() -> TestResult {
    let expediter = example_expediter();
    let mut bash = Tool::new(&expediter, "Bash");
    bash.fail_times(&expediter, 2, "bash: exit status 2").await;
    bash.heal();
    assert_eq!(bash.attempt(&expediter).await.action, Action::Call);
    assert_eq!(expediter.handle("Bash")?.snapshot().consecutive_failures, 0);
    bash.fail_times(&expediter, 2, "bash: exit status 2").await;
    assert_eq!(expediter.handle("Bash")?.state(), State::Closed);
    assert_eq!(expediter.handle("Bash")?.snapshot().consecutive_failures, 2);
    // Every failure still counts against the budget.
    assert_eq!(expediter.report().budget.used, 4);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn open_tool_is_skipped_then_probed_on_the_third_attempt_and_closes_on_success() -> TestResult
{
    let expediter = example_expediter();
    let mut bash = Tool::new(&expediter, "Bash");
    bash.fail_times(&expediter, 3, "bash: exit status 2").await;

    let route = manual("report commands that need to be run manually");
    for _ in 0..2 {
        let decision = bash.attempt(&expediter).await;
        assert_eq!(
            decision.action,
            Action::Skip {
                reason: SkipReason::Breaker(Reason::Open),
                route: route.clone()
            }
        );
        assert!(!decision.should_call());
    }
    assert_eq!(bash.calls(), 3, "skipped attempts never reach the service");

    bash.heal();
    let probe = bash.attempt(&expediter).await;
    assert_eq!(probe.action, Action::Probe, "the 3rd attempt after opening");
    assert!(probe.should_call());
    assert_eq!(bash.calls(), 4);
    assert_eq!(bash.calls_in("half_open"), 1, "the probe ran half-open");
    assert_eq!(expediter.handle("Bash")?.state(), State::Closed);
    assert_eq!(bash.attempt(&expediter).await.action, Action::Call);
    let report = expediter.report();
    let row = report.tools.iter().find(|t| &*t.name == "Bash").unwrap();
    assert_eq!((row.state, row.consecutive_failures), (State::Closed, 0));
    assert_eq!(report.budget.used, 3);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn failed_probe_reopens_and_consumes_budget() -> TestResult {
    // An allowance for both failed probes: Bash is not held open after the first.
    let expediter = example_map().probe_allowance(2).build()?;
    let mut bash = Tool::new(&expediter, "Bash");
    bash.fail_times(&expediter, 3, "bash: exit status 2").await;
    assert!(matches!(
        bash.attempt(&expediter).await.action,
        Action::Skip { .. }
    ));
    assert!(matches!(
        bash.attempt(&expediter).await.action,
        Action::Skip { .. }
    ));
    assert_eq!(bash.attempt(&expediter).await.action, Action::Probe);
    assert_eq!(expediter.handle("Bash")?.state(), State::Open);
    assert_eq!(expediter.report().budget.used, 4);
    // The cycle starts again: two skips, then the next probe.
    assert!(matches!(
        bash.attempt(&expediter).await.action,
        Action::Skip { .. }
    ));
    assert!(matches!(
        bash.attempt(&expediter).await.action,
        Action::Skip { .. }
    ));
    assert_eq!(bash.attempt(&expediter).await.action, Action::Probe);
    assert_eq!(
        bash.calls(),
        5,
        "three failures and two probes, nothing else"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn decisions_are_numbered_steps_and_unknown_tools_are_errors() {
    let expediter = example_expediter();
    let first = expediter.default_run().decide("Read").await.unwrap();
    let second = expediter.default_run().decide("Grep").await.unwrap();
    assert_eq!((first.step, second.step), (1, 2));
    assert_eq!(first.to_string(), "step 1: CALL Read");
    assert_eq!(
        expediter.default_run().decide("Glob").await.unwrap_err(),
        ExpediterError::UnknownTool("Glob".into())
    );
    assert!(matches!(
        expediter.layer("Glob"),
        Err(ExpediterError::UnknownTool(_))
    ));
    assert!(matches!(
        expediter.handle("Glob"),
        Err(ExpediterError::UnknownTool(_))
    ));
}
