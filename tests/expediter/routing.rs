//! Routing when a tool is open (Grep, searching for "API_KEY", is open).

use super::*;

#[tokio::test(start_paused = true)]
async fn routing_example_goes_bash_then_read_then_user_then_scope_reduction() -> TestResult {
    // Grep keeps the example's threshold but probes late, so that no half-open probe
    // comes between the routing decisions of this example.
    let expediter = Expediter::builder()
        .tool(
            grep_spec().breaker(
                Builder::new()
                    .failure_threshold(3)
                    .cooldown(Cooldown::Calls(50)),
            ),
        )
        .tool(bash_spec())
        .tool(read_spec())
        .tool(write_spec())
        .tool(edit_spec())
        .tool(websearch_spec())
        .build()?;
    let mut grep = Tool::new(&expediter, "Grep");
    let mut websearch = Tool::new(&expediter, "WebSearch");

    // Grep's circuit opens: route 1, Bash with rg (low degradation).
    grep.fail_times(&expediter, 3, "grep: index corrupted")
        .await;
    let decision = grep.attempt(&expediter).await;
    assert_eq!(
        decision.action,
        Action::Skip {
            reason: SkipReason::Breaker(Reason::Open),
            route: bash_for_grep()
        }
    );
    assert!(decision
        .to_string()
        .contains("use Bash (rg or grep command)"));

    // Bash also open: route 2, Read suspected files (high degradation).
    let_time_pass(&expediter, &mut websearch).await;
    expediter.handle("Bash")?.force_open();
    assert_eq!(
        expediter.default_run().decide("Bash").await?.action,
        Action::Skip {
            reason: SkipReason::Breaker(Reason::ForcedOpen),
            route: manual("report commands that need to be run manually")
        }
    );
    assert!(matches!(
        grep.attempt(&expediter).await.action,
        Action::Skip { route, .. } if route == read_for_grep()
    ));

    // Read also open: route 3, ask the user.
    let_time_pass(&expediter, &mut websearch).await;
    expediter.handle("Read")?.force_open();
    let decision = grep.attempt(&expediter).await;
    assert!(
        matches!(
            &decision.action,
            Action::Skip { route, .. } if *route == manual("ask the user which files to examine")
        ),
        "{decision}\n{}",
        expediter.report()
    );

    // The user is unavailable: route 4, scope reduction, documented as SKIPPED.
    expediter.set_user_available(false);
    let decision = grep.attempt(&expediter).await;
    let Action::Skip {
        route: Route::ReduceScope { note },
        ..
    } = &decision.action
    else {
        panic!("expected scope reduction, got {decision}");
    };
    assert_eq!(
        note,
        "SKIPPED: content search across files — no acceptable tool (Bash: FORCED_OPEN; Read: FORCED_OPEN), and nobody to ask"
    );

    assert_eq!(grep.calls(), 3, "Grep was never called while open");
    assert_eq!(expediter.report().systemic, None);

    // Every route taken is recorded as a degradation.
    let report = expediter.report();
    let grep_routes: Vec<&Route> = report
        .degradations
        .iter()
        .filter(|d| &*d.tool == "Grep")
        .map(|d| &d.route)
        .collect();
    assert_eq!(grep_routes.len(), 4, "{grep_routes:?}");
    assert_eq!(grep_routes[0], &bash_for_grep());
    assert_eq!(grep_routes[1], &read_for_grep());
    assert_eq!(
        grep_routes[2],
        &manual("ask the user which files to examine")
    );
    assert!(matches!(grep_routes[3], Route::ReduceScope { .. }));
    let text = report.to_string();
    assert!(text.contains("Degradations:"), "{text}");
    assert!(text.contains("SKIPPED:"), "{text}");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn user_unavailable_from_the_builder_goes_from_alternatives_to_scope_reduction() -> TestResult
{
    let expediter = example_map()
        .user_available(false)
        .failure_budget(10)
        .build()?;
    let mut bash = Tool::new(&expediter, "Bash");
    bash.fail_times(&expediter, 3, "bash: exit status 2").await;
    let decision = bash.attempt(&expediter).await;
    let Action::Skip {
        reason: SkipReason::Breaker(Reason::Open),
        route: Route::ReduceScope { note },
    } = &decision.action
    else {
        panic!("expected scope reduction, got {decision}");
    };
    assert!(note.starts_with("SKIPPED: "), "{note}");
    // Alternatives come first even without a user.
    let mut grep = Tool::new(&expediter, "Grep");
    grep.fail_times(&expediter, 3, "grep: index corrupted")
        .await;
    assert!(matches!(
        grep.attempt(&expediter).await.action,
        Action::Skip { route, .. } if route == read_for_grep()
    ));
    // And the user coming back restores the manual route.
    expediter.set_user_available(true);
    assert_eq!(
        bash.attempt(&expediter).await.action,
        Action::Skip {
            reason: SkipReason::Breaker(Reason::Open),
            route: manual("report commands that need to be run manually")
        }
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn low_degradation_alternatives_are_tried_before_high_ones() -> TestResult {
    // Write declares Edit (low) then Bash (high); with Edit open, Bash is next.
    let expediter = example_expediter();
    expediter.handle("Write")?.force_open();
    assert!(matches!(
        expediter.default_run().decide("Write").await?.action,
        Action::Skip { reason: SkipReason::Breaker(Reason::ForcedOpen), route: Route::Alternative { ref tool, level: Degradation::Low, .. } } if &**tool == "Edit"
    ));
    expediter.handle("Edit")?.force_open();
    assert!(matches!(
        expediter.default_run().decide("Write").await?.action,
        Action::Skip { route: Route::Alternative { ref tool, level: Degradation::High, .. }, .. } if &**tool == "Bash"
    ));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn operator_force_opening_three_tools_is_not_a_systemic_failure() -> TestResult {
    // A person switching tools off is not a failure: the cascade rule is about
    // breakers tripping together (correlated failures), and the failure budget counts
    // failures. Here three tools are force-opened in one step with no failure at all.
    let expediter = example_expediter();
    expediter.handle("Grep")?.force_open();
    expediter.handle("Bash")?.force_open();
    expediter.handle("Read")?.force_open();
    assert_eq!(
        expediter.default_run().decide("Write").await?.action,
        Action::Call
    );
    let report = expediter.report();
    assert_eq!(report.systemic, None, "{report}");
    assert_eq!(report.budget.used, 0, "no failure happened");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn work_that_cannot_live_with_high_degradation_is_not_routed_to_it() -> TestResult {
    // Grep and Bash forced open: the only stand-in left is Read, a high-degradation one.
    let expediter = example_expediter();
    expediter.handle("Grep")?.force_open();
    expediter.handle("Bash")?.force_open();
    let any = expediter.default_run().decide("Grep").await?;
    assert!(
        matches!(&any.action, Action::Skip { route: Route::Alternative { tool, .. }, .. } if &**tool == "Read"),
        "{any}"
    );
    // Work that needs low degradation at most is not offered Read: it goes to the user.
    let strict = expediter
        .default_run()
        .decide_within("Grep", Degradation::Low)
        .await?;
    assert_eq!(
        strict.action,
        Action::Skip {
            reason: SkipReason::Breaker(Reason::ForcedOpen),
            route: manual("ask the user which files to examine"),
        }
    );
    // Only the route taken is reported as a degradation.
    let report = expediter.report();
    let routes: Vec<String> = report
        .degradations
        .iter()
        .map(|d| d.route.to_string())
        .collect();
    assert_eq!(routes.len(), 2, "{routes:?}");
    assert!(
        routes[0].contains("Read") && routes[1].contains("ask the user"),
        "{routes:?}"
    );
    Ok(())
}
