//! The expediter (seed `000`, SPEC "Many tools: the expediter"), driven the way an agent
//! drives it: each tool is a `tower::service_fn` that counts its own calls, wrapped with
//! the expediter's layer for that tool; the agent asks `decide` (or `execute`) before
//! every call and calls the service only when the decision says so.
//!
//! The capability map, sub-tasks and failure messages are the seed's own examples where
//! it has them. Time is tokio's paused clock: nothing waits on the wall clock.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::advance;
mod common;

use common::tool::Tool;
use common::{bash_spec, edit_spec, grep_spec, read_spec, websearch_spec, write_spec};
use tower_circuit_breaker::error::{BoxError, ConfigError};
use tower_circuit_breaker::expediter::{
    Action, Alternative, Attempt, Availability, Decision, Degradation, Expediter, ExpediterBuilder,
    ExpediterError, Freshness, FreshnessTracker, Labelled, NextTry, PauseReason, Route, SkipReason,
    SubTask, ToolRoute, ToolSpec, Unusable, WorkStatus,
};
use tower_circuit_breaker::{Builder, Cooldown, Reason, State};

type TestResult = Result<(), BoxError>;

// ---------------------------------------------------------------------------------------
// The seed's capability map (step 1), with Edit declared since Write names it.
// ---------------------------------------------------------------------------------------

const SEED_TOOLS: [&str; 6] = ["Grep", "Bash", "Read", "Write", "Edit", "WebSearch"];

fn seed_map() -> ExpediterBuilder {
    Expediter::builder()
        .tool(grep_spec())
        .tool(bash_spec())
        .tool(read_spec())
        .tool(write_spec())
        .tool(edit_spec())
        .tool(websearch_spec())
}

fn seed_expediter() -> Expediter {
    seed_map()
        .build()
        .expect("the seed's capability map is valid")
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

// ---------------------------------------------------------------------------------------
// Step 1: the capability map is checked when built.
// ---------------------------------------------------------------------------------------

#[test]
fn seed_capability_map_builds_and_lists_tools_in_order() {
    let expediter = seed_expediter();
    let names: Vec<String> = expediter.tools().iter().map(|t| t.to_string()).collect();
    assert_eq!(names, SEED_TOOLS);
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
    let err = seed_map().tool(bash_spec()).build().unwrap_err();
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
    let err = seed_map().failure_budget(0).build().unwrap_err();
    assert_eq!(err, ExpediterError::ZeroBudget);
}

#[test]
fn empty_cascade_window_and_bad_recovery_backoff_are_rejected() {
    assert_eq!(
        seed_map()
            .cascade_window(0, Duration::ZERO)
            .build()
            .unwrap_err(),
        ExpediterError::EmptyCascadeWindow
    );
    assert_eq!(
        seed_map().recovery_backoff(0, 20).build().unwrap_err(),
        ExpediterError::InvalidRecoveryBackoff { start: 0, cap: 20 }
    );
    assert_eq!(
        seed_map().recovery_backoff(8, 4).build().unwrap_err(),
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
    let err = seed_map()
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
    let expediter = seed_expediter();
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
    let expediter = seed_expediter();
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
    // Its breaker is the seed's: three failures open it.
    glob.fail_times(&expediter, 3, "glob: pattern engine crashed")
        .await;
    assert_eq!(expediter.handle("Glob")?.state(), State::Open);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Steps 2 and 3: the state table and the call/track loop.
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn every_tool_starts_closed_with_zero_failures_and_an_empty_budget() {
    let expediter = seed_expediter();
    let report = expediter.report();
    let names: Vec<&str> = report.tools.iter().map(|t| &*t.name).collect();
    assert_eq!(names, SEED_TOOLS);
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
    for name in SEED_TOOLS {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("| {name} ")))
            .unwrap_or_else(|| panic!("no table row for {name}:\n{text}"));
        assert!(line.contains("| CLOSED "), "{line}");
    }
}

#[tokio::test(start_paused = true)]
async fn closed_tool_gets_call_and_success_is_recorded() {
    let expediter = seed_expediter();
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
    let expediter = seed_expediter();
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
    let expediter = seed_expediter();
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
    let expediter = seed_expediter();
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
    let expediter = seed_map().probe_allowance(2).build()?;
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
    let expediter = seed_expediter();
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

// ---------------------------------------------------------------------------------------
// Step 4: routing when a tool is open (the seed's Grep / "API_KEY" example).
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn seed_routing_example_goes_bash_then_read_then_user_then_scope_reduction() -> TestResult {
    // Grep keeps the seed's threshold but probes late, so that no half-open probe
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
    let expediter = seed_map()
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
    let expediter = seed_expediter();
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
    // A person switching tools off is not a failure: the seed's cascade rule is about
    // breakers tripping together ("相関する障害"), and the failure budget counts
    // failures. Here three tools are force-opened in one step with no failure at all.
    let expediter = seed_expediter();
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
    let expediter = seed_expediter();
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

// ---------------------------------------------------------------------------------------
// Step 5: scope reduction (the seed's 5 sub-tasks).
// ---------------------------------------------------------------------------------------

fn seed_subtasks() -> Vec<SubTask> {
    vec![
        SubTask::new("Read configuration files", ["Read"]),
        SubTask::new("Search for deprecated patterns", ["Grep"]),
        SubTask::new("Run test suite", ["Bash"]),
        SubTask::new("Update documentation", ["Edit"]),
        SubTask::new("Deploy to staging", ["Bash"]),
    ]
}

#[tokio::test(start_paused = true)]
async fn seed_scope_report_defers_bash_subtasks_at_decision_time() -> TestResult {
    let expediter = seed_expediter();
    let mut bash = Tool::new(&expediter, "Bash");
    let mut read = Tool::new(&expediter, "Read");
    let mut grep = Tool::new(&expediter, "Grep");
    let mut edit = Tool::new(&expediter, "Edit");
    bash.fail_times(&expediter, 3, "bash: permission denied")
        .await;

    let plans = expediter.default_run().plan(seed_subtasks())?;
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
    let expediter = seed_expediter();
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
    let expediter = seed_expediter();
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

// ---------------------------------------------------------------------------------------
// Step 6: freshness labels.
// ---------------------------------------------------------------------------------------

#[test]
fn freshness_labels_follow_the_seed_and_fresh_data_has_none() {
    let stale = Freshness::stale(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    assert_eq!(
        stale.label().as_deref(),
        Some("[STALE DATA — retrieved at 2023-11-14T22:13:20Z, may not reflect current state]")
    );
    let cached = Freshness::Cached {
        tool: "Grep".into(),
    }
    .label()
    .unwrap();
    assert!(
        cached.starts_with("[CACHED RESULT — Grep returned identical results to previous call;"),
        "{cached}"
    );
    assert!(cached.ends_with("may have changed since]"), "{cached}");
    assert_eq!(
        Freshness::Unverified {
            tool: "WebSearch".into(),
            date: "2026-11-01".into()
        }
        .label()
        .as_deref(),
        Some("[UNVERIFIED — WebSearch result from 2026-11-01; current status unknown]")
    );
    assert_eq!(
        Freshness::Unknown.label().as_deref(),
        Some("[FRESHNESS UNKNOWN — no baseline for comparison]")
    );
    assert_eq!(Freshness::Fresh.label(), None);
}

#[test]
fn labeled_values_carry_their_label_on_the_line_before() {
    let saved = Labelled::new(
        "port = 8080",
        Freshness::stale(SystemTime::UNIX_EPOCH + Duration::from_secs(86_400)),
    );
    assert_eq!(
        saved.to_string(),
        "[STALE DATA — retrieved at 1970-01-02T00:00:00Z, may not reflect current state]\nport = 8080"
    );
    assert_eq!(
        Labelled::new("port = 8080", Freshness::Fresh).to_string(),
        "port = 8080"
    );
    assert!(Labelled::new(1, Freshness::Unknown)
        .to_string()
        .starts_with("[FRESHNESS UNKNOWN"));
}

#[test]
fn freshness_tracker_marks_an_identical_repeated_output_as_cached() {
    let mut tracker = FreshnessTracker::default();
    let hits = vec!["config.rs:3".to_string(), "env.rs:12".to_string()];
    let first = tracker.observe("Grep", "API_KEY", &hits);
    assert_eq!(first.freshness, Freshness::Fresh);
    assert_eq!(first.freshness.label(), None);
    let again = tracker.observe("Grep", "API_KEY", &hits);
    assert_eq!(
        again.freshness,
        Freshness::Cached {
            tool: "Grep".into()
        }
    );
    assert_eq!(again.value, hits);
    // A changed output is fresh again, and becomes cached when repeated.
    let changed = vec!["config.rs:3".to_string()];
    assert_eq!(
        tracker.observe("Grep", "API_KEY", &changed).freshness,
        Freshness::Fresh
    );
    assert!(matches!(
        tracker.observe("Grep", "API_KEY", &changed).freshness,
        Freshness::Cached { .. }
    ));
    // Other calls and other tools are compared with their own previous output.
    assert_eq!(
        tracker.observe("Grep", "SECRET", &changed).freshness,
        Freshness::Fresh
    );
    assert_eq!(
        tracker.observe("Read", "API_KEY", &changed).freshness,
        Freshness::Fresh
    );
}

// ---------------------------------------------------------------------------------------
// Step 7: the failure budget (the seed's example).
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn seed_budget_example_pauses_at_five_of_five_and_reports() -> TestResult {
    let expediter = seed_expediter();
    let mut read = Tool::new(&expediter, "Read");
    let mut grep = Tool::new(&expediter, "Grep");
    let mut bash = Tool::new(&expediter, "Bash");
    let mut edit = Tool::new(&expediter, "Edit");
    let mut websearch = Tool::new(&expediter, "WebSearch");
    let tasks = seed_subtasks();

    assert!(expediter
        .default_run()
        .start_subtask(tasks[0].clone())?
        .can_run());
    assert_eq!(read.attempt(&expediter).await.action, Action::Call);
    expediter
        .default_run()
        .complete_subtask("Read configuration files")?;
    assert!(expediter
        .default_run()
        .start_subtask(tasks[1].clone())?
        .can_run());
    assert_eq!(grep.attempt(&expediter).await.action, Action::Call);
    expediter
        .default_run()
        .complete_subtask("Search for deprecated patterns")?;

    // Sub-task 3: Bash fails three ways and opens.
    assert!(expediter
        .default_run()
        .start_subtask(tasks[2].clone())?
        .can_run());
    for message in [
        "permission denied",
        "command not found",
        "timeout after 120s",
    ] {
        bash.fail_times(&expediter, 1, message).await;
    }
    expediter
        .default_run()
        .fail_subtask("Run test suite", "Bash circuit OPEN")?;
    // Failure 4: WebSearch, connection refused.
    websearch
        .fail_times(&expediter, 1, "connection refused")
        .await;

    let report = expediter.report();
    assert_eq!((report.budget.used, report.budget.limit), (4, 5));
    assert!(!report.budget.exhausted());
    let lines: Vec<(&str, &str)> = report
        .budget
        .failures
        .iter()
        .map(|f| (&*f.tool, f.message.as_str()))
        .collect();
    assert_eq!(
        lines,
        [
            ("Bash", "permission denied"),
            ("Bash", "command not found"),
            ("Bash", "timeout after 120s"),
            ("WebSearch", "connection refused"),
        ]
    );
    assert!(report.to_string().contains("Failures: 4 / 5"));
    // One failure remains: the next call still proceeds.
    let decision = expediter.default_run().decide("WebSearch").await?;
    assert_eq!(decision.action, Action::Call);
    assert!(websearch.call().await.is_err());

    // 5 / 5: every decision is a pause, for every tool.
    let report = expediter.report();
    assert_eq!(report.budget.used, 5);
    assert!(report.budget.exhausted());
    for name in SEED_TOOLS {
        let decision = expediter.default_run().decide(name).await?;
        assert!(
            is_pause(&decision, PauseReason::BudgetExhausted),
            "{decision}"
        );
        let Action::Pause { detail, .. } = &decision.action else {
            unreachable!()
        };
        assert!(detail.contains("5 / 5"), "{detail}");
    }
    let before = [
        read.calls(),
        grep.calls(),
        bash.calls(),
        edit.calls(),
        websearch.calls(),
    ];
    assert!(
        matches!(edit.execute(&expediter).await, Attempt::Paused { decision: d, .. } if is_pause(&d, PauseReason::BudgetExhausted))
    );
    assert!(matches!(
        read.execute(&expediter).await,
        Attempt::Skipped { .. } | Attempt::Paused { .. }
    ));
    assert_eq!(
        before,
        [
            read.calls(),
            grep.calls(),
            bash.calls(),
            edit.calls(),
            websearch.calls()
        ],
        "nothing is called while paused"
    );

    // Sub-tasks 4 and 5 are not attempted.
    for task in &tasks[3..] {
        let plan = expediter.default_run().start_subtask(task.clone())?;
        assert_eq!(
            plan.status,
            WorkStatus::NotAttempted {
                why: "paused: the failure budget is used up".into()
            }
        );
    }

    let report = expediter.report();
    assert_eq!(report.headline, "FAILURE BUDGET EXHAUSTED — PAUSING");
    let done: Vec<&str> = report.completed.iter().map(|w| &*w.name).collect();
    assert_eq!(
        done,
        ["Read configuration files", "Search for deprecated patterns"]
    );
    let incomplete: Vec<(&str, &WorkStatus)> = report
        .incomplete
        .iter()
        .map(|w| (&*w.name, &w.status))
        .collect();
    assert_eq!(
        incomplete,
        [
            (
                "Run test suite",
                &WorkStatus::Failed {
                    why: "Bash circuit OPEN".into()
                }
            ),
            (
                "Update documentation",
                &WorkStatus::NotAttempted {
                    why: "paused: the failure budget is used up".into()
                }
            ),
            (
                "Deploy to staging",
                &WorkStatus::NotAttempted {
                    why: "paused: the failure budget is used up".into()
                }
            ),
        ]
    );
    let bash_row = report.tools.iter().find(|t| &*t.name == "Bash").unwrap();
    assert_eq!(
        (bash_row.state, bash_row.consecutive_failures),
        (State::Open, 3)
    );
    assert!(report
        .tools
        .iter()
        .filter(|t| ["Grep", "Read", "Edit"].contains(&&*t.name))
        .all(|t| t.state == State::Closed));
    assert!(!report.next_steps.is_empty());

    let text = report.to_string();
    assert!(
        text.starts_with("FAILURE BUDGET EXHAUSTED — PAUSING\n"),
        "{text}"
    );
    for needle in [
        "Completed work:",
        "Read configuration files (SUCCESS)",
        "Search for deprecated patterns (SUCCESS)",
        "Incomplete work:",
        "Run test suite (FAILED — Bash circuit OPEN)",
        "Update documentation (NOT ATTEMPTED — paused: the failure budget is used up)",
        "Deploy to staging (NOT ATTEMPTED — paused: the failure budget is used up)",
        "Tool health:",
        "Bash: OPEN (3 consecutive failures — timeout after 120s)",
        "Failures: 5 / 5",
        "Next steps:",
        "Investigate Bash",
        "Resume from \"Update documentation\"",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    let order = [
        "Completed work:",
        "Incomplete work:",
        "Tool health:",
        "Failures: 5 / 5",
        "Next steps:",
    ]
    .map(|s| text.find(s).unwrap());
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "sections out of order:\n{text}"
    );

    // A new cycle refills the budget; breakers keep their state.
    expediter.new_cycle();
    let report = expediter.report();
    assert_eq!((report.budget.used, report.budget.cycle), (0, 2));
    assert!(report.headline.starts_with("STATUS"), "{}", report.headline);
    assert_eq!(edit.attempt(&expediter).await.action, Action::Call);
    assert_eq!(expediter.handle("Bash")?.state(), State::Open);
    assert!(matches!(
        expediter.default_run().decide("Bash").await?.action,
        Action::Skip {
            reason: SkipReason::Breaker(Reason::Open),
            ..
        }
    ));
    assert_eq!(bash.calls(), 3);
    Ok(())
}

/// The report's tool table lines up on a terminal whatever script the tools' names are
/// written in: a CJK character or an emoji takes two columns, a combining accent none.
#[tokio::test(start_paused = true)]
async fn the_tool_health_table_lines_up_with_cjk_and_emoji_tool_names() -> TestResult {
    // Each name, the columns a terminal gives it, and a letter to stand for it.
    let names: [(&'static str, usize, char); 5] = [
        ("検索", 4, 'a'),
        ("ファイル読み取り", 16, 'b'),
        ("🔍web", 5, 'c'),
        ("👩\u{200d}💻coder", 7, 'd'),
        ("cafe\u{301}", 4, 'e'),
    ];
    let mut builder = Expediter::builder();
    for (name, ..) in names {
        builder = builder.tool(
            ToolSpec::new(name)
                .provides("a tool named in another script")
                .fallback("ask the user"),
        );
    }
    let expediter = builder.build()?;
    Tool::new(&expediter, "検索")
        .fail_times(&expediter, 3, "検索: timeout")
        .await;
    let mut web = Tool::new(&expediter, "🔍web");
    assert!(matches!(
        web.execute(&expediter).await,
        Attempt::Made { result: Ok(_), .. }
    ));

    let text = expediter.report().to_string();
    // The table with each name replaced by its letter, as many times as the columns it
    // takes: what is left is one column per character.
    let table: Vec<String> = text
        .lines()
        .skip_while(|line| *line != "Tool health:")
        .skip(1)
        .take_while(|line| line.starts_with(['+', '|']))
        .map(|line| {
            names
                .iter()
                .fold(line.to_string(), |line, (name, columns, letter)| {
                    line.replace(name, &letter.to_string().repeat(*columns))
                })
        })
        .collect();
    assert_eq!(table.len(), 4 + names.len(), "{text}");
    let borders = |line: &str| -> Vec<usize> {
        line.chars()
            .enumerate()
            .filter(|(_, c)| matches!(c, '+' | '|'))
            .map(|(column, _)| column)
            .collect()
    };
    let header = borders(&table[1]);
    for line in &table {
        assert_eq!(borders(line), header, "{line:?} in:\n{text}");
    }
    // The widest name, 16 columns, sets the first column: "| " + 16 + " ".
    assert_eq!(header[..2], [0, 19], "{text}");
    let row = |letter: char, columns: usize| {
        let cell = format!("| {} ", letter.to_string().repeat(columns));
        table.iter().find(|line| line.starts_with(&cell))
    };
    for (name, columns, letter) in names {
        assert!(
            row(letter, columns).is_some(),
            "no row for {name} in:\n{text}"
        );
    }
    assert!(row('a', 4).unwrap().contains("| OPEN "), "{text}");
    assert!(row('c', 5).unwrap().contains("| CLOSED "), "{text}");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn budget_is_shared_across_tools_and_configurable() -> TestResult {
    let expediter = seed_map().failure_budget(2).build()?;
    let mut read = Tool::new(&expediter, "Read");
    let mut edit = Tool::new(&expediter, "Edit");
    read.fail_times(&expediter, 1, "read: unexpected end of input")
        .await;
    assert_eq!(expediter.report().budget.used, 1);
    edit.fail_times(&expediter, 1, "edit: merge conflict").await;
    assert!(is_pause(
        &expediter.default_run().decide("Grep").await?,
        PauseReason::BudgetExhausted
    ));
    assert_eq!(expediter.report().budget.limit, 2);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Step 8: the expediter decides; it never calls an open or killed tool and never retries.
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn killed_tools_are_never_called_and_skip_with_reason_killed() -> TestResult {
    let expediter = seed_expediter();
    let mut grep = Tool::new(&expediter, "Grep");
    expediter.kill_switch().kill();
    for name in SEED_TOOLS {
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
    let expediter = seed_expediter();
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
    let expediter = seed_map().failure_budget(8).build()?;
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

// ---------------------------------------------------------------------------------------
// Step 9: cascading failures.
// ---------------------------------------------------------------------------------------

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

#[tokio::test(start_paused = true)]
async fn two_tools_opening_on_connection_refused_are_one_systemic_event() -> TestResult {
    // A budget of 10: with the default 5, Bash's second failure would use it up, and
    // is the systemic event (`a_failure_that_would_use_up_the_budget_...`).
    let expediter = seed_map().failure_budget(10).build()?;
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
        for name in SEED_TOOLS {
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
    let expediter = seed_expediter();
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
    let expediter = seed_map().failure_budget(20).build()?;
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
    // Seed step 9: "ステップ3でプローブし、次にステップ6、次にステップ12", capped at 20;
    // and its pitfall "連鎖バックオフ乗算": backoffs must not compound. Each gap is the
    // number of decisions from the previous probe (or the confirmation) to this probe.
    // Bash is reset so that Grep's failed probes are Grep's alone.
    let expediter = seed_map().failure_budget(20).build()?;
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
    let expediter = seed_map()
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
    // the same signature while Bash is still open. The seed's answer to this is the
    // compound backoff (probe at 3, then 6, then 12 ...), which only exists if the
    // failed probe leads to a longer wait, not to a new pause whose confirmation starts
    // the backoff over at 3.
    let expediter = seed_map().failure_budget(20).build()?;
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
    let expediter = seed_map().failure_budget(50).build()?;
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
    let expediter = seed_map().failure_budget(10).build()?;
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
    for name in SEED_TOOLS {
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
    let expediter = seed_map().failure_budget(20).build()?;
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
    let expediter = seed_map().failure_budget(10).build()?;
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

// ---------------------------------------------------------------------------------------
// Step 10: pre-call checks.
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// What the model is offered.
// ---------------------------------------------------------------------------------------

fn assert_no_invitation(line: &str) {
    let lower = line.to_lowercase();
    assert!(!lower.contains("try again"), "{line}");
    assert!(!lower.contains("please"), "{line}");
}

#[tokio::test(start_paused = true)]
async fn offered_tools_withhold_open_and_killed_tools_with_one_honest_line() -> TestResult {
    let expediter = seed_expediter();
    let offer = expediter.offered_tools();
    assert_eq!(offer.offered.len(), 6);
    assert!(offer.withheld.is_empty());

    let mut grep = Tool::new(&expediter, "Grep");
    grep.fail_times(&expediter, 3, "grep: index corrupted")
        .await;
    let offer = expediter.offered_tools();
    let offered: Vec<&str> = offer.offered.iter().map(|t| &**t).collect();
    assert_eq!(offered, ["Bash", "Read", "Write", "Edit", "WebSearch"]);
    assert_eq!(offer.withheld.len(), 1);
    let line = &offer.withheld[0].line;
    assert_eq!(&*offer.withheld[0].name, "Grep");
    assert!(line.starts_with("Grep is not offered:"), "{line}");
    assert!(line.contains("failed 3 times in a row"), "{line}");
    assert!(line.contains("grep: index corrupted"), "{line}");
    assert!(line.contains("it is tried again in 3 calls"), "{line}");
    assert!(
        line.contains("use Bash (rg or grep command) instead"),
        "{line}"
    );
    assert_eq!(line.lines().count(), 1);
    assert_no_invitation(line);
    let text = offer.to_string();
    assert!(
        text.starts_with("tools offered: Bash, Read, Write, Edit, WebSearch\n"),
        "{text}"
    );

    expediter.kill_switch().kill();
    let offer = expediter.offered_tools();
    assert!(offer.offered.is_empty());
    assert_eq!(offer.withheld.len(), 6, "one line per tool");
    for withheld in &offer.withheld {
        assert_eq!(withheld.line.lines().count(), 1);
        assert!(withheld.line.contains("operator"), "{}", withheld.line);
        assert!(withheld.line.contains("revive"), "{}", withheld.line);
        assert_no_invitation(&withheld.line);
    }
    assert!(offer.to_string().starts_with("tools offered: (none)"));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn killed_tool_line_says_it_is_tried_again_once_revived() -> TestResult {
    let expediter = seed_expediter();
    expediter.kill_switch().kill();
    let offer = expediter.offered_tools();
    let line = &offer.withheld[0].line;
    // "it will not be called when an operator revives it" says the opposite of when
    // the tool will be used again.
    assert!(
        !line.contains("will not be called when an operator revives it"),
        "{line}"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn force_opened_tool_line_does_not_claim_it_failed() -> TestResult {
    let expediter = seed_expediter();
    expediter.handle("Bash")?.force_open();
    let offer = expediter.offered_tools();
    assert_eq!(offer.withheld.len(), 1);
    let line = &offer.withheld[0].line;
    assert!(line.contains("only once an operator resets it"), "{line}");
    assert_no_invitation(line);
    assert!(!line.contains("failed 0 times"), "{line}");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn every_withheld_line_says_when_the_tool_is_tried_again() -> TestResult {
    // `Expediter::offered_tools` promises, for each tool withheld (open, killed,
    // unavailable, paused), one line saying why and when it will be tried again.
    let says_when = |line: &str| {
        [
            "tried again",
            "revive",
            "recovery",
            "confirmed",
            "new cycle",
            "checked again",
        ]
        .iter()
        .any(|w| line.contains(w))
    };
    let mut missing = Vec::new();

    let expediter = Expediter::builder()
        .tool(grep_spec())
        .tool(bash_spec().precheck(|| async { Availability::Unavailable }))
        .tool(read_spec())
        .build()?;
    assert!(!expediter.default_run().decide("Bash").await?.should_call());
    let offer = expediter.offered_tools();
    assert_eq!(offer.withheld.len(), 1);
    missing.extend(
        offer
            .withheld
            .iter()
            .filter(|w| !says_when(&w.line))
            .map(|w| format!("unavailable: {}", w.line)),
    );

    network_outage_on(&expediter, "Grep", "Read").await;
    let offer = expediter.offered_tools();
    assert_eq!(offer.withheld.len(), 3);
    missing.extend(
        offer
            .withheld
            .iter()
            .filter(|w| !says_when(&w.line))
            .map(|w| format!("systemic pause: {}", w.line)),
    );

    let expediter = seed_map().failure_budget(1).build()?;
    Tool::new(&expediter, "Edit")
        .fail_times(&expediter, 1, "edit: merge conflict")
        .await;
    let offer = expediter.offered_tools();
    assert_eq!(offer.withheld.len(), 6);
    missing.extend(
        offer
            .withheld
            .iter()
            .filter(|w| !says_when(&w.line))
            .take(1)
            .map(|w| format!("budget pause: {}", w.line)),
    );
    assert!(
        missing.is_empty(),
        "lines that do not say when:\n{}",
        missing.join("\n")
    );
    Ok(())
}

/// Like `network_outage`, for two other tools.
async fn network_outage_on(expediter: &Expediter, a: &'static str, b: &'static str) {
    let mut a = Tool::new(expediter, a);
    let mut b = Tool::new(expediter, b);
    a.fail_times(expediter, 3, "connection refused").await;
    b.fail_until_systemic(expediter, "connection refused").await;
}

// ---------------------------------------------------------------------------------------
// The report and clones.
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn clones_share_tools_budget_and_report() -> TestResult {
    let expediter = seed_expediter();
    let clone = expediter.clone();
    let mut bash = Tool::new(&clone, "Bash");
    bash.fail_times(&clone, 2, "bash: exit status 2").await;
    assert_eq!(expediter.report().budget.used, 2);
    assert!(expediter.handle("Bash")?.same_as(&clone.handle("Bash")?));
    assert!(expediter.kill_switch().same_as(clone.kill_switch()));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The probe allowance: a tool that stays down does not spend the whole budget.
// ---------------------------------------------------------------------------------------

/// WebSearch (no alternative) and Bash, with the defaults: budget 5, threshold 3, a
/// probe on every 3rd call after opening, a probe allowance of 1.
fn search_and_bash(builder: ExpediterBuilder) -> (Expediter, Tool, Tool) {
    let expediter = builder
        .tool(websearch_spec())
        .tool(bash_spec())
        .build()
        .unwrap();
    let search = Tool::new(&expediter, "WebSearch");
    let bash = Tool::new(&expediter, "Bash");
    (expediter, search, bash)
}

/// Decides about `tool` until a decision is a probe (at most `within`), calling it
/// whenever told to; returns the decisions made.
async fn until_probe(expediter: &Expediter, tool: &mut Tool, within: usize) -> Vec<Action> {
    let mut actions = Vec::new();
    for _ in 0..within {
        let decision = tool.attempt(expediter).await;
        actions.push(decision.action.clone());
        if decision.action == Action::Probe {
            return actions;
        }
    }
    panic!("no probe within {within} decisions: {actions:?}");
}

fn probes_stopped(route: Route) -> Action {
    Action::Skip {
        reason: SkipReason::ProbesStopped,
        route,
    }
}

fn ask_for_search() -> Route {
    manual("state what information is needed; ask user to provide it")
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_stays_down_is_held_open_after_its_failed_probe_and_the_rest_of_the_budget_stays_for_the_others(
) {
    let (expediter, mut search, mut bash) = search_and_bash(Expediter::builder());
    search
        .fail_times(&expediter, 3, "connect: Connection refused")
        .await;
    let before = until_probe(&expediter, &mut search, 3).await;
    assert_eq!(before.len(), 3, "the probe is the 3rd call after opening");
    // The failed probe is charged, as the method says.
    assert_eq!(expediter.report().budget.used, 4);
    for _ in 0..30 {
        assert_eq!(
            search.attempt(&expediter).await.action,
            probes_stopped(ask_for_search())
        );
    }
    assert_eq!(search.calls(), 4, "no call and no probe while held");
    // The healthy tool keeps working, with the last failure of the budget to spare.
    for _ in 0..10 {
        assert_eq!(bash.attempt(&expediter).await.action, Action::Call);
    }
    let report = expediter.report();
    assert_eq!((report.budget.used, report.budget.probe_allowance), (4, 1));
    let row = &report.tools[0];
    assert_eq!(
        (row.unusable, row.failed_probes, &row.next_try),
        (Some(Unusable::ProbesStopped), 1, &NextTry::WhenFreed)
    );
    let text = report.to_string();
    assert!(
        text.contains("  WebSearch: held open, no more probes: 1 failed probe used up its allowance (1); it is tried again in a new cycle, or once a person frees it\n"),
        "{text}"
    );
    assert!(
        report.next_steps.iter().any(|s| s.starts_with(
            "WebSearch stays down (1 failed probe; last failure: connect: Connection refused): it is held open with no more probes"
        )),
        "{:#?}",
        report.next_steps
    );
    let offer = expediter.offered_tools();
    assert_eq!(offer.offered, ["Bash".into()] as [Arc<str>; 1]);
    assert_eq!(
        offer.withheld[0].line,
        "WebSearch is not offered: it stays down (1 failed probe; last: connect: Connection refused); it is tried again in a new cycle, or once a person frees it; instead, state what information is needed; ask user to provide it"
    );
}

#[tokio::test(start_paused = true)]
async fn a_new_cycle_frees_a_held_tool_and_its_next_failed_probe_is_charged_and_holds_it_again() {
    let (expediter, mut search, _bash) = search_and_bash(Expediter::builder());
    search.fail_times(&expediter, 3, "HTTP 503").await;
    until_probe(&expediter, &mut search, 3).await;
    assert!(matches!(
        search.attempt(&expediter).await.action,
        Action::Skip {
            reason: SkipReason::ProbesStopped,
            ..
        }
    ));
    expediter.new_cycle();
    // Its breaker counted nothing while it was held: the probe is 3 calls away.
    let actions = until_probe(&expediter, &mut search, 3).await;
    assert_eq!(actions.len(), 3, "{actions:?}");
    assert_eq!(expediter.report().budget.used, 1);
    assert_eq!(
        search.attempt(&expediter).await.action,
        probes_stopped(ask_for_search())
    );
}

#[tokio::test(start_paused = true)]
async fn a_person_frees_a_held_tool_and_its_next_call_is_the_probe_that_closes_it() {
    let (expediter, mut search, _bash) = search_and_bash(Expediter::builder());
    search.fail_times(&expediter, 3, "HTTP 503").await;
    until_probe(&expediter, &mut search, 3).await;
    assert!(
        !expediter.resume_probes("Bash").unwrap(),
        "Bash is not held"
    );
    search.heal();
    assert!(expediter.resume_probes("WebSearch").unwrap());
    assert_eq!(search.attempt(&expediter).await.action, Action::Probe);
    assert_eq!(search.attempt(&expediter).await.action, Action::Call);
    assert_eq!(expediter.report().tools[0].failed_probes, 0);
    assert!(matches!(
        expediter.resume_probes("Nope"),
        Err(ExpediterError::UnknownTool(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn a_reset_of_a_held_tools_breaker_frees_it_with_its_whole_allowance() {
    let (expediter, mut search, _bash) = search_and_bash(Expediter::builder().failure_budget(20));
    search.fail_times(&expediter, 3, "HTTP 503").await;
    until_probe(&expediter, &mut search, 3).await;
    expediter.handle("WebSearch").unwrap().reset();
    // Calls go through at once; still down, it opens again and gets one more probe.
    search.fail_times(&expediter, 3, "HTTP 503").await;
    until_probe(&expediter, &mut search, 3).await;
    assert_eq!(expediter.report().budget.used, 8);
    assert_eq!(
        search.attempt(&expediter).await.action,
        probes_stopped(ask_for_search())
    );
}

#[tokio::test(start_paused = true)]
async fn a_probe_allowance_of_two_charges_two_failed_probes_before_the_tool_is_held() {
    let (expediter, mut search, _bash) =
        search_and_bash(Expediter::builder().failure_budget(10).probe_allowance(2));
    search.fail_times(&expediter, 3, "HTTP 503").await;
    until_probe(&expediter, &mut search, 3).await;
    assert_eq!(expediter.report().tools[0].unusable, Some(Unusable::Open));
    until_probe(&expediter, &mut search, 3).await;
    let report = expediter.report();
    assert_eq!((report.budget.used, report.tools[0].failed_probes), (5, 2));
    assert_eq!(report.tools[0].unusable, Some(Unusable::ProbesStopped));
}

#[tokio::test(start_paused = true)]
async fn a_probe_allowance_of_zero_holds_a_tool_as_soon_as_it_opens() {
    let (expediter, mut search, _bash) = search_and_bash(Expediter::builder().probe_allowance(0));
    search.fail_times(&expediter, 3, "HTTP 503").await;
    for _ in 0..10 {
        assert_eq!(
            search.attempt(&expediter).await.action,
            probes_stopped(ask_for_search())
        );
    }
    assert_eq!(expediter.report().budget.used, 3);
}

#[tokio::test(start_paused = true)]
async fn with_an_unlimited_probe_allowance_every_failed_probe_is_charged_until_every_tool_pauses() {
    let (expediter, mut search, mut bash) =
        search_and_bash(Expediter::builder().probe_allowance(u32::MAX));
    search.fail_times(&expediter, 3, "HTTP 503").await;
    until_probe(&expediter, &mut search, 3).await;
    until_probe(&expediter, &mut search, 3).await;
    assert_eq!(expediter.report().budget.used, 5);
    assert!(is_pause(
        &bash.attempt(&expediter).await,
        PauseReason::BudgetExhausted
    ));
}
