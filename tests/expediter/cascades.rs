//! Cascading failures.

use super::*;

#[tokio::test(start_paused = true)]
async fn two_tools_opening_on_connection_refused_are_one_systemic_event() -> TestResult {
    // A budget of 10: with the default 5, Bash's second failure would use it up, and
    // is the systemic event (`a_failure_that_would_use_up_the_budget_...`).
    let expediter = example_map().failure_budget(10).build()?;
    let (grep, bash) = network_outage(&expediter).await;

    let report = expediter.report();
    assert_eq!(report.budget.used, 1, "counted once, not 6");
    assert_eq!(report.budget.failures.len(), 6);
    assert!(report.budget.failures.iter().all(|f| f.systemic));
    assert!(!report.budget.exhausted());
    let systemic = report.systemic.clone().expect("a systemic event");
    assert_eq!(systemic.signature.as_deref(), Some("connection refused"));
    assert!(
        systemic.cause.contains("connection refused"),
        "{}",
        systemic.cause
    );
    assert!(systemic.cause.contains("network"), "{}", systemic.cause);
    let tools: Vec<&str> = systemic.tools.iter().map(|t| &**t).collect();
    assert_eq!(tools, ["Grep", "Bash"]);
    assert!(!systemic.resolved);
    assert_eq!(report.headline, "SYSTEMIC FAILURE — PAUSING");
    let text = report.to_string();
    assert!(text.contains("Suspected systemic cause (active"), "{text}");
    assert!(text.contains("[systemic: counted once]"), "{text}");
    assert!(
        report.next_steps[0].contains("confirm recovery"),
        "{:?}",
        report.next_steps
    );

    // Every call pauses, healthy tools too, and no probe runs however long we wait.
    for _ in 0..10 {
        for name in EXAMPLE_TOOLS {
            let decision = expediter.default_run().decide(name).await?;
            assert!(
                is_pause(&decision, PauseReason::SystemicPause),
                "{decision}"
            );
        }
    }
    assert_eq!((grep.calls(), bash.calls()), (3, 3));
    assert_eq!(expediter.handle("Grep")?.state(), State::Open);
    assert_eq!(expediter.handle("Bash")?.state(), State::Open);
    assert_eq!(expediter.report().budget.used, 1);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn no_probe_runs_during_a_systemic_pause_until_recovery_is_confirmed() -> TestResult {
    let expediter = example_expediter();
    let (mut grep, _bash) = network_outage(&expediter).await;
    let mut read = Tool::new(&expediter, "Read");
    for _ in 0..25 {
        assert!(
            matches!(grep.execute(&expediter).await, Attempt::Paused { decision: d, .. } if is_pause(&d, PauseReason::SystemicPause))
        );
        assert!(matches!(
            read.execute(&expediter).await,
            Attempt::Skipped { .. } | Attempt::Paused { .. }
        ));
    }
    assert_eq!((grep.calls(), read.calls()), (3, 0));
    assert_eq!(expediter.handle("Grep")?.snapshot().counts.probes, 0);

    expediter.confirm_recovery();
    let report = expediter.report();
    assert!(report.systemic.as_ref().unwrap().resolved);
    assert!(report.headline.starts_with("STATUS"), "{}", report.headline);
    // Healthy tools are called again at once.
    assert_eq!(read.attempt(&expediter).await.action, Action::Call);
    assert_eq!(read.calls(), 1);
    Ok(())
}

/// Decides `tool` until the expediter says PROBE; returns how many decisions that took
/// (the probe's own included), checking every decision before it is a skip.
async fn decisions_until_probe(expediter: &Expediter, tool: &mut Tool, limit: usize) -> usize {
    for n in 1..=limit {
        let decision = tool.attempt(expediter).await;
        match decision.action {
            Action::Probe => return n,
            Action::Skip {
                reason: SkipReason::RecoveryBackoff,
                ..
            } => {}
            _ => panic!("decision {n} for {}: {decision}", tool.name),
        }
    }
    panic!("no probe for {} within {limit} decisions", tool.name);
}

#[tokio::test(start_paused = true)]
async fn after_recovery_no_probe_goes_before_the_backoff_and_it_grows() -> TestResult {
    // The weak form: probes never come earlier than 3, 6, 12, 20, 20 steps.
    let expediter = example_map().failure_budget(20).build()?;
    let (mut grep, _bash) = network_outage(&expediter).await;
    expediter.confirm_recovery();
    // Bash comes back on its own, so Grep's failed probes are Grep's alone.
    expediter.handle("Bash")?.reset();
    let report = expediter.report();
    let row = report.tools.iter().find(|t| &*t.name == "Grep").unwrap();
    assert_eq!(row.next_try, NextTry::RecoveryBackoff { decisions: 3 });
    assert!(
        report.to_string().contains("3 calls (any tool)"),
        "{report}"
    );

    let mut gaps = Vec::new();
    for _ in 0..5 {
        gaps.push(decisions_until_probe(&expediter, &mut grep, 40).await);
    }
    for (gap, floor) in gaps.iter().zip([3, 6, 12, 20, 20]) {
        assert!(
            *gap >= floor,
            "probe gaps {gaps:?} came earlier than 3, 6, 12, 20, 20"
        );
    }
    assert!(gaps.iter().all(|g| *g <= 25), "{gaps:?}");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn after_recovery_probes_come_at_3_then_6_then_12_steps_capped_at_20() -> TestResult {
    // After a recovery the probes come at step 3, then 6, then 12, capped at 20; and
    // backoffs must not compound (multiply along a cascade). Each gap is the
    // number of decisions from the previous probe (or the confirmation) to this probe.
    // Bash is reset so that Grep's failed probes are Grep's alone.
    let expediter = example_map().failure_budget(20).build()?;
    let (mut grep, _bash) = network_outage(&expediter).await;
    expediter.confirm_recovery();
    expediter.handle("Bash")?.reset();
    let mut gaps = Vec::new();
    for _ in 0..5 {
        gaps.push(decisions_until_probe(&expediter, &mut grep, 40).await);
    }
    assert_eq!(gaps, [3, 6, 12, 20, 20]);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn recovery_backoff_setting_sets_start_and_cap() -> TestResult {
    // `recovery_backoff(4, 10)`: probes after 4, then 8, then 10 (the cap) steps.
    let expediter = example_map()
        .failure_budget(20)
        .recovery_backoff(4, 10)
        .build()?;
    let (mut grep, _bash) = network_outage(&expediter).await;
    expediter.confirm_recovery();
    expediter.handle("Bash")?.reset();
    let mut gaps = Vec::new();
    for _ in 0..4 {
        gaps.push(decisions_until_probe(&expediter, &mut grep, 40).await);
    }
    assert_eq!(gaps, [4, 8, 10, 10]);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn failed_probe_after_recovery_backs_off_instead_of_pausing_again() -> TestResult {
    // The network is still down after the user's confirmation: Grep's probe fails with
    // the same signature while Bash is still open. The documented answer to this is
    // the growing backoff (probe at 3, then 6, then 12 ...), which only exists if the
    // failed probe leads to a longer wait, not to a new pause whose confirmation starts
    // the backoff over at 3.
    let expediter = example_map().failure_budget(20).build()?;
    let (mut grep, _bash) = network_outage(&expediter).await;
    expediter.confirm_recovery();
    decisions_until_probe(&expediter, &mut grep, 10).await;
    let next = expediter.default_run().decide("Read").await?;
    assert!(
        !matches!(next.action, Action::Pause { .. }),
        "a failed recovery probe started a new systemic pause: {next}\n{}",
        expediter.report()
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn recovery_probe_interval_grows_even_when_the_user_confirms_again() -> TestResult {
    // The same outage as above, with a user who confirms recovery whenever asked. The
    // wait between Grep's failed probes should grow (3, 6, 12 ... capped at 20), and
    // the failed probes of one outage should not each be a new systemic event.
    let expediter = example_map().failure_budget(50).build()?;
    let (mut grep, _bash) = network_outage(&expediter).await;
    expediter.confirm_recovery();
    let (mut gaps, mut since, mut pauses) = (Vec::new(), 0, 0);
    while gaps.len() < 4 {
        let decision = grep.attempt(&expediter).await;
        match decision.action {
            Action::Pause { .. } => {
                pauses += 1;
                expediter.confirm_recovery();
            }
            Action::Probe => {
                gaps.push(since + 1);
                since = 0;
            }
            _ => since += 1,
        }
        assert!(pauses < 20, "no end to the pauses");
    }
    assert!(
        gaps.windows(2).all(|w| w[1] > w[0]),
        "decisions from one probe to the next: {gaps:?}, with {pauses} new systemic pauses"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn three_tools_opening_in_the_window_with_different_messages_are_systemic() -> TestResult {
    // A budget of 10: with the default 5, the budget pauses the agent (6 failures)
    // before a third tool can open.
    let expediter = example_map().failure_budget(10).build()?;
    let mut grep = Tool::new(&expediter, "Grep");
    let mut bash = Tool::new(&expediter, "Bash");
    let mut read = Tool::new(&expediter, "Read");
    grep.fail_times(&expediter, 3, "grep: index corrupted")
        .await;
    bash.fail_times(&expediter, 3, "bash: exit status 2").await;
    assert_eq!(
        expediter.report().systemic,
        None,
        "two unrelated opens are not systemic"
    );
    read.fail_times(&expediter, 3, "read: unexpected end of input")
        .await;

    let report = expediter.report();
    let systemic = report
        .systemic
        .clone()
        .expect("three opens together are systemic");
    assert_eq!(systemic.signature, None);
    let tools: Vec<&str> = systemic.tools.iter().map(|t| &**t).collect();
    assert_eq!(tools, ["Grep", "Bash", "Read"]);
    assert!(
        systemic.cause.contains("3 tools opened together"),
        "{}",
        systemic.cause
    );
    for name in EXAMPLE_TOOLS {
        assert!(is_pause(
            &expediter.default_run().decide(name).await?,
            PauseReason::SystemicPause
        ));
    }
    // One systemic event: the nine failures behind it count once.
    assert_eq!(
        report.budget.used, 1,
        "budget lines: {:#?}",
        report.budget.failures
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn three_tools_opening_far_apart_are_not_systemic() -> TestResult {
    let expediter = example_map().failure_budget(20).build()?;
    let mut grep = Tool::new(&expediter, "Grep");
    let mut bash = Tool::new(&expediter, "Bash");
    let mut read = Tool::new(&expediter, "Read");
    let mut websearch = Tool::new(&expediter, "WebSearch");
    grep.fail_times(&expediter, 3, "grep: index corrupted")
        .await;
    let_time_pass(&expediter, &mut websearch).await;
    bash.fail_times(&expediter, 3, "bash: exit status 2").await;
    let_time_pass(&expediter, &mut websearch).await;
    read.fail_times(&expediter, 3, "read: unexpected end of input")
        .await;
    assert_eq!(
        expediter.default_run().decide("WebSearch").await?.action,
        Action::Call
    );
    let report = expediter.report();
    assert_eq!(report.systemic, None);
    assert_eq!(report.budget.used, 9, "independent failures each count");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn two_tools_opening_on_their_first_connection_refused_are_systemic() -> TestResult {
    // The cascade of `two_tools_opening_on_connection_refused_are_one_systemic_event`,
    // with tools whose threshold is 1: the failure that opens each breaker is its only
    // one, so its signature must be the one the cascade check sees.
    let quick = || {
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(3))
    };
    let expediter = Expediter::builder()
        .tool(grep_spec().breaker(quick()))
        .tool(bash_spec().breaker(quick()))
        .tool(read_spec())
        .build()?;
    let mut grep = Tool::new(&expediter, "Grep");
    let mut bash = Tool::new(&expediter, "Bash");
    grep.fail_times(&expediter, 1, "connection refused").await;
    bash.fail_times(&expediter, 1, "connection refused").await;
    let report = expediter.report();
    let systemic = report.systemic.clone();
    assert_eq!(
        systemic.as_ref().and_then(|s| s.signature.as_deref()),
        Some("connection refused"),
        "{report}"
    );
    assert_eq!(report.budget.used, 1);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn different_signatures_on_two_tools_are_independent_failures() -> TestResult {
    let expediter = example_map().failure_budget(10).build()?;
    let mut grep = Tool::new(&expediter, "Grep");
    let mut bash = Tool::new(&expediter, "Bash");
    grep.fail_times(&expediter, 3, "connection refused").await;
    bash.fail_times(&expediter, 3, "permission denied").await;
    assert_eq!(
        expediter.default_run().decide("Read").await?.action,
        Action::Call
    );
    let report = expediter.report();
    assert_eq!(report.systemic, None);
    assert_eq!(report.budget.used, 6);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_tool_reset_while_its_breaker_is_disabled_is_not_named_in_a_later_systemic_event(
) -> TestResult {
    for mode in [Mode::Disabled, Mode::ObserveOnly] {
        let expediter = example_map().failure_budget(50).build()?;
        let mut grep = Tool::new(&expediter, "Grep");
        let mut bash = Tool::new(&expediter, "Bash");
        grep.fail_times(&expediter, 3, "connection refused").await;
        let handle = expediter.handle("Grep")?;
        handle.set_mode(mode);
        handle.reset();
        handle.set_mode(Mode::Enabled);
        assert_eq!(handle.state(), State::Closed);
        bash.fail_times(&expediter, 3, "connection refused").await;
        let report = expediter.report();
        assert!(report.systemic.is_none(), "reset in {mode:?}: {report}");
        assert_eq!(
            expediter.default_run().decide("Grep").await?.action,
            Action::Call,
            "reset in {mode:?}"
        );
    }
    Ok(())
}

/// An HTTP client's error, as reqwest's reads: what failed on top, why in its source.
#[derive(Debug)]
struct Sending(std::io::Error);

impl std::fmt::Display for Sending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("error sending request for url (http://127.0.0.1:1/search)")
    }
}

impl std::error::Error for Sending {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Fails `tool` `times` times (as its decisions allow) with an error whose cause,
/// "Connection refused", is in its source only.
async fn fail_with_the_cause_in_a_source(expediter: &Expediter, tool: &str, times: usize) {
    let mut svc = tower::ServiceBuilder::new()
        .layer(expediter.layer(tool).expect("a tool"))
        .service(tower::service_fn(|_: ()| async {
            Err::<(), _>(Sending(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "Connection refused",
            )))
        }));
    let run = expediter.default_run();
    for _ in 0..times {
        if run.decide(tool).await.expect("a decision").should_call() {
            let ready = tower::ServiceExt::ready(&mut svc).await.expect("ready");
            let _ = tower::Service::call(ready, ()).await;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn two_http_tools_refused_a_connection_are_systemic_though_the_cause_is_in_the_errors_source(
) -> TestResult {
    let expediter = example_map().failure_budget(10).build()?;
    fail_with_the_cause_in_a_source(&expediter, "Grep", 3).await;
    fail_with_the_cause_in_a_source(&expediter, "Bash", 3).await;
    let report = expediter.report();
    let systemic = report.systemic.clone().expect("a systemic event");
    assert_eq!(systemic.signature.as_deref(), Some("connection refused"));
    assert_eq!(report.budget.used, 1, "counted once: {report}");
    let grep = expediter.handle("Grep")?.snapshot();
    let message = grep.last_failure.expect("a failure").message;
    assert!(message.contains("error sending request"), "{message}");
    assert!(message.contains("Connection refused"), "{message}");
    Ok(())
}
