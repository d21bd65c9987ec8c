//! The capability map is checked when built.

use super::*;

#[test]
fn example_capability_map_builds_and_lists_tools_in_order() {
    let expediter = example_expediter();
    let names: Vec<String> = expediter.tools().iter().map(|t| t.to_string()).collect();
    assert_eq!(names, EXAMPLE_TOOLS);
}

#[test]
fn alternative_naming_an_unknown_tool_is_rejected() {
    let err = Expediter::builder()
        .tool(
            ToolSpec::new("Grep")
                .alternative(Alternative::low("Rg", "ripgrep", "none"))
                .fallback("ask the user which files to examine"),
        )
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        ExpediterError::UnknownAlternative {
            tool: "Grep".into(),
            alternative: "Rg".into(),
        }
    );
}

/// Two search APIs, each the other's alternative.
fn two_searches() -> Expediter {
    let search = |name: &str, other: &str| {
        ToolSpec::new(name)
            .provides("web search")
            .alternative(Alternative::low(other, "the same query", "another index"))
            .fallback("ask the user to search")
    };
    Expediter::builder()
        .tool(search("search_a", "search_b"))
        .tool(search("search_b", "search_a"))
        .build()
        .expect("tools may back each other up")
}

fn search_b_for_a() -> Route {
    alternative(
        "search_b",
        "the same query",
        "another index",
        Degradation::Low,
    )
}

#[tokio::test(start_paused = true)]
async fn two_tools_that_back_each_other_up_route_each_to_the_other_while_it_works() {
    let expediter = two_searches();
    let (mut a, mut b) = (
        Tool::new(&expediter, "search_a"),
        Tool::new(&expediter, "search_b"),
    );
    a.fail_times(&expediter, 3, "connect: Connection refused")
        .await;
    let decision = a.attempt(&expediter).await;
    assert_eq!(
        decision.action,
        Action::Skip {
            reason: SkipReason::Breaker(Reason::Open),
            route: search_b_for_a(),
        }
    );
    // The route is taken: search_b is called.
    assert_eq!(b.attempt(&expediter).await.action, Action::Call);
    assert_eq!(b.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn when_both_tools_that_back_each_other_up_are_down_neither_routes_back_to_the_other() {
    let expediter = two_searches();
    let (mut a, mut b) = (
        Tool::new(&expediter, "search_a"),
        Tool::new(&expediter, "search_b"),
    );
    a.fail_times(&expediter, 3, "search_a: HTTP 503").await;
    // A routes to B, which is called and fails until it opens too.
    assert_eq!(
        a.attempt(&expediter).await.action,
        Action::Skip {
            reason: SkipReason::Breaker(Reason::Open),
            route: search_b_for_a(),
        }
    );
    b.fail_times(&expediter, 1, "search_b: HTTP 503").await;
    expediter.new_cycle();
    b.fail_times(&expediter, 2, "search_b: HTTP 503").await;
    // B, down too, does not route back to A (down): the manual fallback; and A no
    // longer routes to B.
    for tool in [&mut b, &mut a] {
        let decision = tool.attempt(&expediter).await;
        assert_eq!(
            decision.action,
            Action::Skip {
                reason: SkipReason::Breaker(Reason::Open),
                route: manual("ask the user to search"),
            },
            "{}",
            tool.name
        );
    }
    // With nobody to ask, the work is reduced, naming the other tool as down.
    expediter.set_user_available(false);
    let Action::Skip {
        route: Route::ReduceScope { note },
        ..
    } = expediter.peek("search_b").unwrap()
    else {
        panic!("scope reduction expected");
    };
    assert_eq!(
        note,
        "SKIPPED: web search — no acceptable tool (search_a: OPEN), and nobody to ask"
    );
    assert_eq!((a.calls(), b.calls()), (3, 3), "no call while open");
}

/// A chain of alternatives as long as the map (each tool standing in for the next),
/// its last tool's alternative the first, is checked without running out of stack.
#[test]
fn a_ring_of_alternatives_tens_of_thousands_long_is_checked_without_overflow() {
    const TOOLS: usize = 30_000;
    let mut builder = Expediter::builder();
    for i in 0..TOOLS {
        let next = format!("t{}", (i + 1) % TOOLS);
        builder = builder.tool(
            ToolSpec::new(&format!("t{i}"))
                .alternative(Alternative::low(&next, "stand in", "some"))
                .fallback("ask the user"),
        );
    }
    // On a thread with a small stack: a check that recursed once per tool would
    // overflow it.
    let built = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || builder.build().map(|e| e.tools().len()))
        .unwrap()
        .join()
        .expect("no stack overflow");
    assert_eq!(built, Ok(TOOLS));
}

#[tokio::test(start_paused = true)]
async fn a_ring_of_three_alternatives_routes_only_to_each_tools_own_alternative_that_works() {
    let tool = |name: &str, next: &str| {
        ToolSpec::new(name)
            .alternative(Alternative::low(next, "stand in", "some"))
            .fallback("ask the user")
    };
    let expediter = Expediter::builder()
        .tool(tool("A", "B"))
        .tool(tool("B", "C"))
        .tool(tool("C", "A"))
        .build()
        .expect("a ring of alternatives is a valid map");
    let (mut a, mut b) = (Tool::new(&expediter, "A"), Tool::new(&expediter, "B"));
    a.fail_times(&expediter, 3, "A broke").await;
    let route_of = |action: Action| match action {
        Action::Skip { route, .. } => route,
        other => panic!("expected a skip, got {other:?}"),
    };
    assert_eq!(
        route_of(expediter.default_run().decide("A").await.unwrap().action),
        alternative("B", "stand in", "some", Degradation::Low)
    );
    expediter.new_cycle();
    b.fail_times(&expediter, 3, "B broke").await;
    // A's only alternative is down: A asks the user; B goes on to C, never back to A.
    assert_eq!(
        route_of(expediter.default_run().decide("A").await.unwrap().action),
        manual("ask the user")
    );
    assert_eq!(
        route_of(expediter.default_run().decide("B").await.unwrap().action),
        alternative("C", "stand in", "some", Degradation::Low)
    );
    assert_eq!(
        expediter.default_run().decide("C").await.unwrap().action,
        Action::Call
    );
}

#[test]
fn tool_naming_itself_as_alternative_is_refused_with_why() {
    let err = Expediter::builder()
        .tool(
            ToolSpec::new("Grep")
                .alternative(Alternative::low("Grep", "grep again", "none"))
                .fallback("ask the user which files to examine"),
        )
        .build()
        .unwrap_err();
    assert_eq!(err, ExpediterError::SelfAlternative("Grep".into()));
    assert_eq!(
        err.to_string(),
        "tool `Grep` names itself as its alternative: a tool cannot stand in for itself; name another tool, or give it a `.fallback(..)`"
    );
}

#[test]
fn tool_with_neither_alternative_nor_fallback_is_rejected() {
    let err = Expediter::builder()
        .tool(bash_spec())
        .tool(ToolSpec::new("WebSearch").provides("external information retrieval"))
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        ExpediterError::NoAlternativeOrFallback("WebSearch".into())
    );
}

#[test]
fn tool_with_only_an_alternative_is_accepted() {
    Expediter::builder()
        .tool(bash_spec())
        .tool(ToolSpec::new("Read").alternative(Alternative::low("Bash", "cat", "no line numbers")))
        .build()
        .expect("an alternative alone is enough");
}

#[test]
fn duplicate_tool_names_are_rejected() {
    let err = example_map().tool(bash_spec()).build().unwrap_err();
    assert_eq!(err, ExpediterError::DuplicateTool("Bash".into()));
}

#[test]
fn empty_tool_name_is_rejected() {
    let err = Expediter::builder()
        .tool(ToolSpec::new("").fallback("ask the user"))
        .build()
        .unwrap_err();
    assert_eq!(err, ExpediterError::EmptyToolName);
}

#[test]
fn zero_failure_budget_is_rejected() {
    let err = example_map().failure_budget(0).build().unwrap_err();
    assert_eq!(err, ExpediterError::ZeroBudget);
}

#[test]
fn empty_cascade_window_and_bad_recovery_backoff_are_rejected() {
    assert_eq!(
        example_map()
            .cascade_window(0, Duration::ZERO)
            .build()
            .unwrap_err(),
        ExpediterError::EmptyCascadeWindow
    );
    assert_eq!(
        example_map().recovery_backoff(0, 20).build().unwrap_err(),
        ExpediterError::InvalidRecoveryBackoff { start: 0, cap: 20 }
    );
    assert_eq!(
        example_map().recovery_backoff(8, 4).build().unwrap_err(),
        ExpediterError::InvalidRecoveryBackoff { start: 8, cap: 4 }
    );
}

#[test]
fn bad_breaker_settings_of_a_tool_are_rejected_with_its_name() {
    let err = Expediter::builder()
        .tool(bash_spec().breaker(Builder::new().failure_threshold(0)))
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        ExpediterError::Breaker {
            tool: "Bash".into(),
            source: ConfigError::ZeroThreshold,
        }
    );
}

#[test]
fn bad_default_breaker_settings_are_rejected() {
    let err = example_map()
        .default_breaker(Builder::new().cooldown(Cooldown::Calls(0)))
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            ExpediterError::Breaker {
                source: ConfigError::ZeroCooldown,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn add_tool_at_runtime_validates_like_build() {
    let expediter = example_expediter();
    assert_eq!(
        expediter.add_tool(bash_spec()).unwrap_err(),
        ExpediterError::DuplicateTool("Bash".into())
    );
    assert_eq!(
        expediter
            .add_tool(
                ToolSpec::new("Glob")
                    .alternative(Alternative::low("Find", "find command", "slower"))
                    .fallback("ask the user for the paths")
            )
            .unwrap_err(),
        ExpediterError::UnknownAlternative {
            tool: "Glob".into(),
            alternative: "Find".into(),
        }
    );
    assert_eq!(
        expediter
            .add_tool(
                ToolSpec::new("Glob")
                    .alternative(Alternative::low("Glob", "glob again", "none"))
                    .fallback("ask the user for the paths")
            )
            .unwrap_err(),
        ExpediterError::SelfAlternative("Glob".into())
    );
    assert_eq!(
        expediter
            .add_tool(ToolSpec::new("Glob").provides("file name search"))
            .unwrap_err(),
        ExpediterError::NoAlternativeOrFallback("Glob".into())
    );
    assert!(matches!(
        expediter.add_tool(
            ToolSpec::new("Glob")
                .fallback("ask the user for the paths")
                .breaker(Builder::new().failure_threshold(0))
        ),
        Err(ExpediterError::Breaker { ref tool, source: ConfigError::ZeroThreshold }) if tool == "Glob"
    ));
    assert_eq!(expediter.tools().len(), 6, "no rejected tool was added");
    assert!(matches!(
        expediter.default_run().decide("Glob").await,
        Err(ExpediterError::UnknownTool(name)) if name == "Glob"
    ));
}

#[tokio::test(start_paused = true)]
async fn tool_added_at_runtime_starts_closed_with_no_failures() -> TestResult {
    let expediter = example_expediter();
    let mut bash = Tool::new(&expediter, "Bash");
    bash.fail_times(&expediter, 2, "bash: exit status 2").await;

    expediter.add_tool(
        ToolSpec::new("Glob")
            .provides("file name search")
            .alternative(Alternative::low(
                "Bash",
                "find command",
                "slower, no globbing",
            ))
            .fallback("ask the user for the paths"),
    )?;
    assert_eq!(
        expediter.tools().last().map(|t| t.to_string()).as_deref(),
        Some("Glob")
    );
    let report = expediter.report();
    let row = report.tools.iter().find(|t| &*t.name == "Glob").unwrap();
    assert_eq!((row.state, row.consecutive_failures), (State::Closed, 0));
    assert_eq!(
        (row.last_failure.as_deref(), row.last_failure_step),
        (None, None)
    );
    assert_eq!(row.last_success_step, None);

    let mut glob = Tool::new(&expediter, "Glob");
    assert_eq!(glob.attempt(&expediter).await.action, Action::Call);
    assert_eq!(glob.calls(), 1);
    // Its breaker is the example's: three failures open it.
    glob.fail_times(&expediter, 3, "glob: pattern engine crashed")
        .await;
    assert_eq!(expediter.handle("Glob")?.state(), State::Open);
    Ok(())
}
