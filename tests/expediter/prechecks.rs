//! Pre-call checks.

use super::*;

/// A check that returns what `answer` holds and counts its runs.
fn check(
    answer: Availability,
) -> (
    Arc<Mutex<Availability>>,
    Arc<AtomicUsize>,
    impl Fn() -> std::future::Ready<Availability> + Send + Sync + 'static,
) {
    let answer = Arc::new(Mutex::new(answer));
    let runs = Arc::new(AtomicUsize::new(0));
    let (a, r) = (answer.clone(), runs.clone());
    (answer, runs, move || {
        r.fetch_add(1, SeqCst);
        std::future::ready(*a.lock().unwrap())
    })
}

#[tokio::test(start_paused = true)]
async fn available_precheck_proceeds_to_the_breaker_and_is_cached() -> TestResult {
    let (_, runs, bash_check) = check(Availability::Available);
    let expediter = Expediter::builder()
        .tool(grep_spec())
        .tool(bash_spec().precheck(bash_check))
        .tool(read_spec())
        .build()?;
    let mut bash = Tool::new(&expediter, "Bash");
    assert_eq!(bash.attempt(&expediter).await.action, Action::Call);
    assert_eq!(bash.attempt(&expediter).await.action, Action::Call);
    assert_eq!(bash.calls(), 2);
    assert_eq!(runs.load(SeqCst), 1, "the result is cached");
    let report = expediter.report();
    let row = report.tools.iter().find(|t| &*t.name == "Bash").unwrap();
    assert_eq!(row.availability, Some(Availability::Available));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn async_closure_precheck_is_accepted() -> TestResult {
    let expediter = Expediter::builder()
        .tool(bash_spec().precheck(|| async { Availability::Available }))
        .build()?;
    assert_eq!(
        expediter.default_run().decide("Bash").await?.action,
        Action::Call
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn degraded_precheck_lowers_the_threshold_by_one() -> TestResult {
    let expediter = Expediter::builder()
        .tool(grep_spec())
        .tool(bash_spec().precheck(|| async { Availability::Degraded }))
        .tool(read_spec())
        .build()?;
    let mut bash = Tool::new(&expediter, "Bash");
    bash.fail_times(&expediter, 2, "bash: exit status 2").await;
    assert_eq!(
        expediter.handle("Bash")?.state(),
        State::Open,
        "2 failures, not 3"
    );
    assert!(matches!(
        bash.attempt(&expediter).await.action,
        Action::Skip {
            reason: SkipReason::Breaker(Reason::Open),
            ..
        }
    ));
    assert_eq!(bash.calls(), 2);
    // Tools without a degraded check keep the threshold of 3.
    let mut read = Tool::new(&expediter, "Read");
    read.fail_times(&expediter, 2, "read: unexpected end of input")
        .await;
    assert_eq!(expediter.handle("Read")?.state(), State::Closed);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn unavailable_precheck_routes_away_without_budget_or_call() -> TestResult {
    let (answer, runs, bash_check) = check(Availability::Unavailable);
    let expediter = Expediter::builder()
        .tool(grep_spec())
        .tool(bash_spec().precheck(bash_check))
        .tool(read_spec())
        .build()?;
    let mut bash = Tool::new(&expediter, "Bash");
    for _ in 0..5 {
        match bash.execute(&expediter).await {
            Attempt::Skipped { decision, .. } | Attempt::Paused { decision, .. } => assert_eq!(
                decision.action,
                Action::Skip {
                    reason: SkipReason::Unavailable,
                    route: manual("report commands that need to be run manually")
                }
            ),
            Attempt::Made { decision, .. } => panic!("called an unavailable tool: {decision}"),
        }
    }
    assert_eq!(bash.calls(), 0);
    assert_eq!(runs.load(SeqCst), 1);
    let report = expediter.report();
    assert_eq!(report.budget.used, 0, "no budget for a predictable failure");
    let row = report.tools.iter().find(|t| &*t.name == "Bash").unwrap();
    assert_eq!((row.state, row.consecutive_failures), (State::Closed, 0));
    assert_eq!(row.availability, Some(Availability::Unavailable));

    // An unavailable tool is not an alternative either: Grep goes to Read.
    expediter.handle("Grep")?.force_open();
    assert!(matches!(
        expediter.default_run().decide("Grep").await?.action,
        Action::Skip { route, .. } if route == read_for_grep()
    ));

    // A new cycle looks again.
    *answer.lock().unwrap() = Availability::Available;
    expediter.new_cycle();
    assert_eq!(bash.attempt(&expediter).await.action, Action::Call);
    assert_eq!(runs.load(SeqCst), 2);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn prechecks_are_run_again_after_a_systemic_event_and_after_recovery() -> TestResult {
    let (_, runs, read_check) = check(Availability::Available);
    let expediter = Expediter::builder()
        .tool(grep_spec())
        .tool(bash_spec())
        .tool(read_spec().precheck(read_check))
        .build()?;
    assert_eq!(
        expediter.default_run().decide("Read").await?.action,
        Action::Call
    );
    assert_eq!(
        expediter.default_run().decide("Read").await?.action,
        Action::Call
    );
    assert_eq!(runs.load(SeqCst), 1);

    network_outage(&expediter).await;
    assert!(expediter.report().systemic.is_some());
    assert!(is_pause(
        &expediter.default_run().decide("Read").await?,
        PauseReason::SystemicPause
    ));
    assert_eq!(
        runs.load(SeqCst),
        2,
        "the systemic event invalidated the check"
    );
    assert!(is_pause(
        &expediter.default_run().decide("Read").await?,
        PauseReason::SystemicPause
    ));
    assert_eq!(runs.load(SeqCst), 2, "then cached again");

    expediter.confirm_recovery();
    assert_eq!(
        expediter.default_run().decide("Read").await?.action,
        Action::Call
    );
    assert_eq!(runs.load(SeqCst), 3, "recovery invalidated it too");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn degraded_then_available_restores_the_threshold() -> TestResult {
    let (answer, _, bash_check) = check(Availability::Degraded);
    let expediter = Expediter::builder()
        .tool(bash_spec().precheck(bash_check))
        .failure_budget(20)
        .build()?;
    let mut bash = Tool::new(&expediter, "Bash");
    assert_eq!(bash.attempt(&expediter).await.action, Action::Call);
    *answer.lock().unwrap() = Availability::Available;
    expediter.new_cycle();
    bash.fail_times(&expediter, 2, "bash: exit status 2").await;
    assert_eq!(
        expediter.handle("Bash")?.state(),
        State::Closed,
        "threshold back at 3"
    );
    bash.fail_times(&expediter, 1, "bash: exit status 2").await;
    assert_eq!(expediter.handle("Bash")?.state(), State::Open);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_reported_availability_stands_over_cycles_and_systemic_events_until_reported_again(
) -> TestResult {
    let (answer, runs, bash_check) = check(Availability::Available);
    let expediter = Expediter::builder()
        .tool(grep_spec())
        .tool(bash_spec().precheck(bash_check))
        .tool(read_spec())
        .build()?;
    let mut bash = Tool::new(&expediter, "Bash");
    expediter.set_availability("Bash", Availability::Unavailable, "its host is rebooting")?;
    for _ in 0..3 {
        assert!(matches!(
            bash.attempt(&expediter).await.action,
            Action::Skip {
                reason: SkipReason::Unavailable,
                ..
            }
        ));
    }
    assert_eq!(
        (bash.calls(), runs.load(SeqCst)),
        (0, 0),
        "no call, no check"
    );
    let offer = expediter.offered_tools();
    let line = &offer.withheld[0].line;
    assert_eq!(
        line,
        "Bash is not offered: its host is rebooting; it is tried again once it is reported \
         available; instead, report commands that need to be run manually"
    );
    assert_no_invitation(line);
    let report = expediter.report();
    assert_eq!(report.budget.used, 0);
    let row = report.tools.iter().find(|t| &*t.name == "Bash").unwrap();
    assert_eq!(row.next_try, NextTry::WhenReported);
    assert!(report.next_steps.iter().any(|s| s
        == "Bash is unavailable: its host is rebooting; it is tried again once it is reported available"));

    // Neither a new cycle nor a systemic event drops it.
    expediter.new_cycle();
    network_outage_on(&expediter, "Grep", "Read").await;
    assert!(expediter.report().systemic.is_some());
    expediter.confirm_recovery();
    expediter.new_cycle();
    assert_eq!(expediter.peek("Bash")?.as_str(), "SKIP");
    assert_eq!(runs.load(SeqCst), 0);

    // Reported available: called, still without its check.
    expediter.set_availability("Bash", Availability::Available, "its host is back")?;
    assert_eq!(bash.attempt(&expediter).await.action, Action::Call);
    assert_eq!(runs.load(SeqCst), 0);

    // Degraded lowers the threshold by one, as a check's result does.
    expediter.set_availability("Bash", Availability::Degraded, "its host is slow")?;
    bash.fail_times(&expediter, 2, "bash: exit status 2").await;
    assert_eq!(expediter.handle("Bash")?.state(), State::Open);

    // Cleared: the check decides again, and the threshold is back.
    expediter.handle("Bash")?.reset();
    *answer.lock().unwrap() = Availability::Unavailable;
    expediter.clear_availability("Bash")?;
    assert!(matches!(
        bash.attempt(&expediter).await.action,
        Action::Skip {
            reason: SkipReason::Unavailable,
            ..
        }
    ));
    assert_eq!(runs.load(SeqCst), 1);
    let row = expediter
        .report()
        .tools
        .into_iter()
        .find(|t| &*t.name == "Bash")
        .unwrap();
    assert_eq!(row.next_try, NextTry::WhenAvailable);
    // A tool without a check of its own is routed away the same way.
    expediter.set_availability("Read", Availability::Unavailable, "its disk is gone")?;
    assert!(matches!(
        expediter.default_run().decide("Read").await?.action,
        Action::Skip {
            reason: SkipReason::Unavailable,
            ..
        }
    ));
    assert!(matches!(
        expediter.set_availability("nope", Availability::Available, ""),
        Err(ExpediterError::UnknownTool(_))
    ));
    Ok(())
}
