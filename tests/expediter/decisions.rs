//! The expediter decides; it never calls an open or killed tool and never retries.

use super::*;

#[tokio::test(start_paused = true)]
async fn killed_tools_are_never_called_and_skip_with_reason_killed() -> TestResult {
    let expediter = example_expediter();
    let mut grep = Tool::new(&expediter, "Grep");
    expediter.kill_switch().kill();
    for name in EXAMPLE_TOOLS {
        let decision = expediter.default_run().decide(name).await?;
        assert!(
            matches!(
                decision.action,
                Action::Skip {
                    reason: SkipReason::Breaker(Reason::Killed),
                    ..
                }
            ),
            "{decision}"
        );
    }
    // Even a caller that ignores the decision cannot reach the service.
    assert!(matches!(
        grep.execute(&expediter).await,
        Attempt::Skipped { .. } | Attempt::Paused { .. }
    ));
    let answer = grep.call().await;
    assert!(answer.is_err(), "the layer has no fallback, so it rejects");
    assert_eq!(grep.calls(), 0);
    let report = expediter.report();
    assert!(report.tools.iter().all(|t| t.killed));
    assert_eq!(report.budget.used, 0, "a killed tool is not a failure");
    expediter.kill_switch().revive();
    assert_eq!(grep.attempt(&expediter).await.action, Action::Call);
    assert_eq!(grep.calls(), 1);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn execute_makes_a_call_once_and_returns_a_failure_without_retrying() -> TestResult {
    let expediter = example_expediter();
    let mut bash = Tool::new(&expediter, "Bash");
    bash.fail_with("bash: exit status 2");
    match bash.execute(&expediter).await {
        Attempt::Made { decision, result } => {
            assert_eq!(decision.action, Action::Call);
            assert_eq!(result.unwrap_err().to_string(), "bash: exit status 2");
        }
        other => panic!("should have been made: {}", other.decision()),
    }
    assert_eq!(bash.calls(), 1, "one call, no retry");
    assert_eq!(expediter.report().budget.used, 1, "counted once");
    bash.heal();
    match bash.execute(&expediter).await {
        Attempt::Made { result, .. } => {
            assert_eq!(result?.into_inner(), "Bash answered Bash-request-2");
        }
        other => panic!("should have been made: {}", other.decision()),
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn agent_loop_never_calls_open_or_killed_tools_and_never_retries() -> TestResult {
    let expediter = example_map().failure_budget(8).build()?;
    let names = ["Grep", "Bash", "Read", "WebSearch"];
    let mut tools: Vec<Tool> = names.iter().map(|n| Tool::new(&expediter, n)).collect();
    // Grep is always broken; Bash recovers after a while; WebSearch is flaky; Read works.
    let schedule = |tool: &str, i: usize| -> Option<&'static str> {
        match tool {
            "Grep" => Some("grep: index corrupted"),
            "Bash" if i < 120 => Some("bash: exit status 2"),
            "WebSearch" if i % 3 == 0 => Some("search backend returned 500"),
            _ => None,
        }
    };
    let mut made_decisions = HashMap::<&str, usize>::new();
    let mut probes_decided = 0;
    let mut skips = 0;
    let mut killed_skips = 0;
    let mut pauses = 0;
    for i in 0..400 {
        advance(Duration::from_secs(1)).await;
        let killed = (150..190).contains(&i);
        if killed {
            expediter.kill_switch().kill();
        } else {
            expediter.kill_switch().revive();
        }
        let k = i % tools.len();
        match schedule(names[k], i) {
            Some(message) => tools[k].fail_with(message),
            None => tools[k].heal(),
        }
        let before: Vec<usize> = tools.iter().map(Tool::calls).collect();
        let state_before = expediter.handle(names[k])?.state();
        let attempt = tools[k].execute(&expediter).await;
        let after: Vec<usize> = tools.iter().map(Tool::calls).collect();
        match attempt {
            Attempt::Made { decision, .. } => {
                assert!(
                    !killed,
                    "step {i}: a call was made while killed: {decision}"
                );
                assert!(
                    !matches!(state_before, State::ForcedOpen),
                    "step {i}: {decision}"
                );
                assert_eq!(after[k], before[k] + 1, "step {i}: exactly one call");
                *made_decisions.entry(names[k]).or_default() += 1;
                if decision.action == Action::Probe {
                    probes_decided += 1;
                    assert_eq!(state_before, State::Open, "a probe is decided while open");
                } else {
                    assert_eq!(state_before, State::Closed, "step {i}: {decision}");
                }
            }
            Attempt::Skipped { decision, .. } | Attempt::Paused { decision, .. } => {
                assert!(!decision.should_call());
                match &decision.action {
                    Action::Skip { reason, .. } => {
                        skips += 1;
                        if killed {
                            killed_skips += 1;
                            assert_eq!(*reason, SkipReason::Breaker(Reason::Killed), "step {i}");
                        }
                    }
                    Action::Pause { reason, .. } => {
                        pauses += 1;
                        match reason {
                            PauseReason::BudgetExhausted => expediter.new_cycle(),
                            PauseReason::SystemicPause => expediter.confirm_recovery(),
                            other => panic!("unexpected pause reason {other}"),
                        }
                    }
                    _ => unreachable!(),
                }
            }
        }
        // The expediter never calls any tool on its own (it does not "cook").
        for (j, (b, a)) in before.iter().zip(&after).enumerate() {
            if j != k {
                assert_eq!(
                    a, b,
                    "step {i}: {} was called behind the agent's back",
                    names[j]
                );
            }
        }
    }

    let mut all_requests = HashSet::new();
    for (tool, name) in tools.iter().zip(names) {
        let seen = tool.ctl.seen.lock().unwrap().clone();
        assert_eq!(seen.len(), tool.calls());
        for request in seen {
            assert!(
                all_requests.insert(request.clone()),
                "{request} reached a service twice"
            );
        }
        for bad in ["open", "forced_open", "killed"] {
            assert_eq!(tool.calls_in(bad), 0, "{name} was called while {bad}");
        }
        assert_eq!(
            tool.calls_in("closed") + tool.calls_in("half_open"),
            tool.calls(),
            "{name}"
        );
        assert_eq!(made_decisions.get(name).copied().unwrap_or(0), tool.calls());
    }
    let half_open_calls: usize = tools.iter().map(|t| t.calls_in("half_open")).sum();
    assert_eq!(
        half_open_calls, probes_decided,
        "every probe call was a PROBE decision"
    );
    // The loop went through every kind of decision.
    assert!(probes_decided > 0 && skips > 0 && killed_skips > 0 && pauses > 0);
    assert!(
        tools[0].calls() < 100 / 2,
        "Grep is mostly skipped: {}",
        tools[0].calls()
    );
    assert_eq!(
        expediter.handle("Bash")?.state(),
        State::Closed,
        "Bash recovered by probing"
    );
    Ok(())
}
