//! The expediter's figures are exact and its report agrees with itself: the budget is
//! always the failures recorded with each systemic event counted once, extreme
//! settings saturate instead of overflowing, every statement of when a tool is tried
//! next is the breaker's own at the time of the report, looking counts nothing, a
//! caller's mistake is not the tool's failure, and the cascade window runs on the
//! breakers' clock.
//!
//! Time is tokio's paused clock: nothing waits on the wall clock.

use std::time::Duration;

use tokio::time::advance;
mod common;

use common::tool::Tool;
use tower_circuit_breaker::error::BoxError;
use tower_circuit_breaker::expediter::{
    Action, Alternative, Blame, Degradation, Expediter, NextTry, PauseReason, Route, SkipReason,
    StatusReport, SubTask, ToolSpec, Unusable, WorkStatus,
};
use tower_circuit_breaker::{Builder, Cooldown, NextProbe, State};

type TestResult = Result<(), BoxError>;

fn spec(name: &str) -> ToolSpec {
    ToolSpec::new(name)
        .provides(&format!("{name}'s capability"))
        .fallback(&format!("ask the user to do {name}'s work"))
}

/// The budget's rule, as the report states it: used = the failures not part of a
/// systemic event, plus one per systemic event of the cycle.
fn assert_budget_agrees(report: &StatusReport) {
    let budget = &report.budget;
    assert_eq!(
        budget.used as usize,
        budget.ordinary() + budget.systemic_events as usize,
        "{report}"
    );
}

// ---------------------------------------------------------------------------------
// Defect 1: a failure held back as maybe systemic was never counted.
// ---------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_failure_sharing_an_open_tools_signature_counts_when_that_tool_recovers_first(
) -> TestResult {
    let expediter = Expediter::builder()
        .tool(spec("A"))
        .tool(spec("B"))
        .failure_budget(10)
        .build()?;
    let (mut a, mut b) = (Tool::new(&expediter, "A"), Tool::new(&expediter, "B"));
    a.fail_times(&expediter, 3, "connection refused").await;
    b.fail_times(&expediter, 2, "connection refused").await;
    let report = expediter.report();
    assert_eq!(
        (report.budget.used, report.budget.failures.len()),
        (5, 5),
        "every failure counts at once: {report}"
    );
    assert_budget_agrees(&report);

    // A's probe succeeds: A closes. B's failures stay counted.
    a.heal();
    while expediter.handle("A")?.state() != State::Closed {
        a.attempt(&expediter).await;
    }
    let report = expediter.report();
    assert_eq!((report.budget.used, report.budget.failures.len()), (5, 5));
    assert_budget_agrees(&report);
    assert_eq!(
        expediter.default_run().decide("B").await?.action,
        Action::Call
    );
    assert!(b.call().await.is_err());

    // B opens alone: its own third failure, no systemic event.
    assert_eq!(expediter.handle("B")?.state(), State::Open);
    let report = expediter.report();
    assert_eq!(report.systemic, None);
    assert_eq!((report.budget.used, report.budget.failures.len()), (6, 6));
    assert_budget_agrees(&report);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_failure_that_would_use_up_the_budget_with_an_open_tools_signature_is_one_systemic_event(
) -> TestResult {
    // The case with the default budget of 5: A open on "connection refused",
    // B fails twice with it. Before B's breaker can open, its second failure would use
    // up the budget: that is the shared cause, counted once, not a budget pause.
    let expediter = Expediter::builder()
        .tool(spec("A"))
        .tool(spec("B"))
        .tool(spec("C"))
        .build()?;
    let (mut a, mut b) = (Tool::new(&expediter, "A"), Tool::new(&expediter, "B"));
    a.fail_times(&expediter, 3, "connect: Connection refused (os error 111)")
        .await;
    b.fail_times(&expediter, 1, "connection refused").await;
    let report = expediter.report();
    assert_eq!((report.budget.used, report.systemic.is_none()), (4, true));
    b.fail_times(&expediter, 1, "connection refused").await;

    let report = expediter.report();
    assert_budget_agrees(&report);
    assert_eq!(report.budget.used, 1, "{report}");
    assert_eq!(report.budget.systemic_events, 1);
    assert_eq!(report.budget.failures.len(), 5);
    assert!(report.budget.failures.iter().all(|f| f.systemic));
    let systemic = report.systemic.expect("one systemic event");
    assert_eq!(systemic.signature.as_deref(), Some("connection refused"));
    assert_eq!(
        systemic.tools,
        ["A".into(), "B".into()] as [std::sync::Arc<str>; 2]
    );
    assert!(
        systemic
            .cause
            .contains("would have used up the failure budget"),
        "{}",
        systemic.cause
    );
    for tool in ["A", "B", "C"] {
        let decision = expediter.default_run().decide(tool).await?;
        assert!(
            matches!(
                decision.action,
                Action::Pause {
                    reason: PauseReason::SystemicPause,
                    ..
                }
            ),
            "{decision}"
        );
    }
    assert_eq!((a.calls(), b.calls()), (3, 2));
    Ok(())
}

// ---------------------------------------------------------------------------------
// Defect 3: extreme settings overflowed.
// ---------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn an_extreme_recovery_backoff_saturates_instead_of_overflowing() -> TestResult {
    let expediter = Expediter::builder()
        .tool(spec("A"))
        .tool(spec("B"))
        .failure_budget(u32::MAX)
        .recovery_backoff(u64::MAX, u64::MAX)
        .build()?;
    let (mut a, mut b) = (Tool::new(&expediter, "A"), Tool::new(&expediter, "B"));
    a.fail_times(&expediter, 3, "connection refused").await;
    b.fail_times(&expediter, 3, "connection refused").await;
    assert!(expediter.report().systemic.is_some());
    expediter.confirm_recovery();
    // A backoff of u64::MAX steps: no probe, ever, and no wrap to "probe now".
    for _ in 0..5 {
        let decision = a.attempt(&expediter).await;
        assert_eq!(
            decision.action,
            Action::Skip {
                reason: SkipReason::RecoveryBackoff,
                route: Route::Manual {
                    ask: "ask the user to do A's work".into()
                }
            }
        );
    }
    let row = expediter.report().tools.remove(0);
    assert_eq!(row.unusable, Some(Unusable::RecoveryBackoff));
    assert!(
        matches!(row.next_try, NextTry::RecoveryBackoff { decisions } if decisions > u64::MAX / 2),
        "{:?}",
        row.next_try
    );
    assert_eq!(a.calls(), 3);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn an_unbounded_cascade_window_sees_every_opening_as_together() -> TestResult {
    let expediter = Expediter::builder()
        .tools(["A", "B", "C", "D"].map(spec))
        .failure_budget(100)
        .cascade_window(u64::MAX, Duration::MAX)
        .build()?;
    let mut d = Tool::new(&expediter, "D");
    for (name, message) in [("A", "a broke"), ("B", "b broke"), ("C", "c broke")] {
        Tool::new(&expediter, name)
            .fail_times(&expediter, 3, message)
            .await;
        advance(Duration::from_secs(3600)).await;
        for _ in 0..50 {
            d.attempt(&expediter).await;
        }
    }
    let report = expediter.report();
    let systemic = report.systemic.clone().expect("three openings together");
    assert_eq!(systemic.signature, None);
    assert_eq!(report.budget.used, 1, "{report}");
    Ok(())
}

// ---------------------------------------------------------------------------------
// Defect 5: the report contradicted itself.
// ---------------------------------------------------------------------------------

/// web_search open, docs_fetch its high-degradation stand-in, nobody to ask.
async fn search_down() -> Result<(Expediter, Tool), BoxError> {
    let expediter = Expediter::builder()
        .tool(
            ToolSpec::new("web_search")
                .provides("external information retrieval")
                .alternative(Alternative::high(
                    "docs_fetch",
                    "fetch the release notes",
                    "no wider search",
                ))
                .fallback("ask the user"),
        )
        .tool(spec("docs_fetch"))
        .user_available(false)
        .build()?;
    let mut search = Tool::new(&expediter, "web_search");
    search.fail_times(&expediter, 3, "connection refused").await;
    Ok((expediter, search))
}

#[tokio::test(start_paused = true)]
async fn a_deferred_sub_tasks_next_try_is_the_tool_healths_at_report_time() -> TestResult {
    let (expediter, mut search) = search_down().await?;
    let plan = expediter.default_run().start_subtask(
        SubTask::new("Check advisories", ["web_search"]).max_degradation(Degradation::Low),
    )?;
    let WorkStatus::Deferred { blocked_by } = &plan.status else {
        panic!("{:?}", plan.status);
    };
    let probe = |decisions| NextTry::Probe {
        decisions,
        not_before: None,
    };
    assert_eq!(blocked_by[0].next_try, probe(3));
    // Another sub-task's decision about web_search is a skip, and counts.
    search.attempt(&expediter).await;

    let report = expediter.report();
    let row = report
        .tools
        .iter()
        .find(|t| &*t.name == "web_search")
        .unwrap();
    assert_eq!(row.next_try, probe(2));
    let WorkStatus::Deferred { blocked_by } = &report.incomplete[0].status else {
        panic!("{:?}", report.incomplete[0].status);
    };
    assert_eq!(blocked_by[0].next_try, row.next_try);
    assert_eq!(
        expediter
            .handle("web_search")?
            .snapshot()
            .next_probe
            .calls(),
        Some(2),
        "the breaker's own"
    );
    let said = format!("web_search is tried again {}", row.next_try);
    let text = report.to_string();
    assert!(text.contains(&said), "{text}");
    // Every sentence about when web_search is tried again says the same thing.
    for line in text
        .lines()
        .filter(|l| l.contains("web_search is tried again"))
    {
        assert!(line.contains(&said), "{line}\nin\n{text}");
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn scope_reduction_names_the_alternative_it_refused_instead_of_saying_no_tools() -> TestResult
{
    let (expediter, _search) = search_down().await?;
    let decision = expediter
        .default_run()
        .decide_within("web_search", Degradation::Low)
        .await?;
    assert_eq!(
        expediter.offered_tools().offered,
        ["docs_fetch".into()] as [std::sync::Arc<str>; 1]
    );
    let Action::Skip {
        route: Route::ReduceScope { note },
        ..
    } = &decision.action
    else {
        panic!("{decision}");
    };
    assert_eq!(
        note,
        "SKIPPED: external information retrieval — no acceptable tool (docs_fetch loses too much (high degradation)), and nobody to ask"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_report_says_what_its_next_try_counts() -> TestResult {
    let (expediter, _search) = search_down().await?;
    let text = expediter.report().to_string();
    assert!(
        text.contains("Next Try counts calls of the tool, skipped ones too"),
        "{text}"
    );
    assert!(
        !text.contains("attempt"),
        "'attempts' is never defined:\n{text}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------
// Defect 6: looking moved a call-counted cooldown on.
// ---------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn peeking_at_a_deferred_sub_tasks_tool_counts_nothing() -> TestResult {
    let (expediter, mut search) = search_down().await?;
    let plan = expediter.default_run().start_subtask(
        SubTask::new("Check advisories", ["web_search"]).max_degradation(Degradation::Low),
    )?;
    assert!(!plan.can_run());
    let handle = expediter.handle("web_search")?;
    let before = (handle.snapshot(), expediter.report());
    for _ in 0..10 {
        let action = expediter.peek_within("web_search", Degradation::Low)?;
        assert!(
            matches!(
                action,
                Action::Skip {
                    reason: SkipReason::Breaker(_),
                    ..
                }
            ),
            "{action:?}"
        );
        expediter.default_run().start_subtask(
            SubTask::new("Check advisories", ["web_search"]).max_degradation(Degradation::Low),
        )?;
        expediter.offered_tools();
    }
    let after = (handle.snapshot(), expediter.report());
    assert_eq!(after.0.next_probe, before.0.next_probe);
    assert_eq!(after.0.counts, before.0.counts);
    assert_eq!(after.1.step, before.1.step);
    assert_eq!(after.1.degradations, before.1.degradations);
    assert_eq!(after.0.next_probe, NextProbe::After { calls: 3, at: None });

    // The peek says PROBE exactly when the decision would.
    search.attempt(&expediter).await;
    search.attempt(&expediter).await;
    assert_eq!(expediter.peek("web_search")?, Action::Probe);
    assert_eq!(expediter.peek("web_search")?, Action::Probe);
    assert_eq!(
        expediter.default_run().decide("web_search").await?.action,
        Action::Probe
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn peeking_at_a_tool_in_recovery_backoff_says_probe_when_the_decision_would() -> TestResult {
    let expediter = Expediter::builder()
        .tools(["A", "B", "C"].map(spec))
        .failure_budget(20)
        .build()?;
    let (mut a, mut b, mut c) = (
        Tool::new(&expediter, "A"),
        Tool::new(&expediter, "B"),
        Tool::new(&expediter, "C"),
    );
    a.fail_times(&expediter, 3, "connection refused").await;
    b.fail_times(&expediter, 3, "connection refused").await;
    expediter.confirm_recovery();
    for _ in 0..2 {
        assert!(matches!(
            expediter.peek("A")?,
            Action::Skip {
                reason: SkipReason::RecoveryBackoff,
                ..
            }
        ));
        c.attempt(&expediter).await;
    }
    assert_eq!(expediter.peek("A")?, Action::Probe);
    assert_eq!(
        expediter.report().tools[0].next_try,
        NextTry::Probe {
            decisions: 1,
            not_before: None
        }
    );
    assert_eq!(a.attempt(&expediter).await.action, Action::Probe);
    Ok(())
}

// ---------------------------------------------------------------------------------
// Defect 7: a caller's own mistake spent the budget.
// ---------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_callers_missing_path_spends_no_budget_and_the_report_does_not_blame_the_tool(
) -> TestResult {
    let expediter = Expediter::builder()
        .tool(spec("read_file"))
        .failure_budget(1)
        .build()?;
    let mut read = Tool::new(&expediter, "read_file");
    expediter
        .default_run()
        .start_subtask(SubTask::new("Read the notes", ["read_file"]))?;
    read.fail_with("read notes.md: No such file or directory (os error 2)");
    for _ in 0..5 {
        assert_eq!(read.attempt(&expediter).await.action, Action::Call);
    }
    expediter
        .default_run()
        .fail_subtask("Read the notes", "read notes.md: No such file or directory")?;
    let report = expediter.report();
    assert_eq!(report.budget.used, 0, "{report}");
    assert!(report.headline.starts_with("STATUS"), "{report}");
    let snapshot = expediter.handle("read_file")?.snapshot();
    assert_eq!(
        (snapshot.state, snapshot.consecutive_failures),
        (State::Closed, 0)
    );
    assert_eq!(snapshot.counts.ignored, 5);
    let text = report.to_string();
    assert!(!text.contains("once read_file can be used again"), "{text}");
    assert!(
        report.next_steps.iter().any(|s| s.contains(
            "\"Read the notes\" failed (read notes.md: No such file or directory) while read_file could be used"
        )),
        "{:?}",
        report.next_steps
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_tool_whose_blame_rule_owns_every_error_counts_not_found() -> TestResult {
    let expediter = Expediter::builder()
        .tool(spec("web_search").blame(|_: &str| Blame::Tool))
        .failure_budget(1)
        .build()?;
    let mut search = Tool::new(&expediter, "web_search");
    search
        .fail_times(&expediter, 1, "GET /search: HTTP 404")
        .await;
    let report = expediter.report();
    assert_eq!(report.budget.used, 1);
    assert!(matches!(
        expediter.default_run().decide("web_search").await?.action,
        Action::Pause {
            reason: PauseReason::BudgetExhausted,
            ..
        }
    ));
    Ok(())
}

// ---------------------------------------------------------------------------------
// Defect 8: the cascade window's time must be the breakers' clock.
// ---------------------------------------------------------------------------------

/// A, B and C open one after the other with `gap` of paused time between them, and
/// many steps (decisions about D) between them too.
async fn openings_apart_in_time(gap: Duration) -> Result<StatusReport, BoxError> {
    let expediter = Expediter::builder()
        .tools(["A", "B", "C", "D"].map(spec))
        .failure_budget(100)
        .cascade_window(1, Duration::from_secs(30))
        .build()?;
    let mut d = Tool::new(&expediter, "D");
    for (name, message) in [("A", "a broke"), ("B", "b broke"), ("C", "c broke")] {
        Tool::new(&expediter, name)
            .fail_times(&expediter, 3, message)
            .await;
        advance(gap).await;
        for _ in 0..3 {
            d.attempt(&expediter).await;
        }
    }
    Ok(expediter.report())
}

#[tokio::test(start_paused = true)]
async fn the_cascade_window_in_time_follows_the_breakers_paused_clock() -> TestResult {
    // Far apart in steps, close in (paused) time: together.
    let close = openings_apart_in_time(Duration::from_secs(5)).await?;
    assert!(close.systemic.is_some(), "{close}");
    // Far apart in steps and in (paused) time: independent.
    let far = openings_apart_in_time(Duration::from_secs(60)).await?;
    assert!(far.systemic.is_none(), "{far}");
    assert_eq!(far.budget.used, 9);
    Ok(())
}

// ---------------------------------------------------------------------------------
// One run's figures with the breaker's own, at every step of a small scenario.
// ---------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_killed_tools_next_try_waits_for_an_operator_and_its_breaker_still_counts() -> TestResult
{
    let expediter = Expediter::builder()
        .tool(
            spec("A").breaker(
                Builder::new()
                    .failure_threshold(1)
                    .cooldown(Cooldown::Calls(2)),
            ),
        )
        .build()?;
    let mut a = Tool::new(&expediter, "A");
    a.fail_times(&expediter, 1, "boom").await;
    expediter.kill_switch().kill();
    let row = expediter.report().tools.remove(0);
    assert_eq!(row.unusable, Some(Unusable::Killed));
    let probe = NextTry::Probe {
        decisions: 2,
        not_before: None,
    };
    assert_eq!(
        row.next_try,
        NextTry::WhenRevivedThen {
            then: Box::new(probe.clone())
        }
    );
    expediter.kill_switch().revive();
    let row = expediter.report().tools.remove(0);
    assert_eq!(row.next_try, probe);
    Ok(())
}

// ---------------------------------------------------------------------------------
// Pre-call checks that never finish, or panic, are run again next time.
// ---------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_pre_call_check_that_is_cancelled_or_panics_is_run_again_by_the_next_decision(
) -> TestResult {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;
    use tower_circuit_breaker::expediter::Availability;

    // Run 1 hangs (its decision is cancelled), run 2 panics, run 3 answers.
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let expediter = Expediter::builder()
        .tool(spec("A").precheck(move || {
            let run = counted.fetch_add(1, SeqCst) + 1;
            async move {
                match run {
                    1 => {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        Availability::Available
                    }
                    2 => panic!("the check broke"),
                    _ => Availability::Unavailable,
                }
            }
        }))
        .build()?;
    let hung =
        tokio::time::timeout(Duration::from_secs(1), expediter.default_run().decide("A")).await;
    assert!(hung.is_err(), "the first check hangs");
    let panicked = tokio::spawn({
        let expediter = expediter.clone();
        async move { expediter.default_run().decide("A").await }
    })
    .await;
    assert!(panicked.is_err_and(|e| e.is_panic()));
    let decision = expediter.default_run().decide("A").await?;
    assert!(
        matches!(
            decision.action,
            Action::Skip {
                reason: SkipReason::Unavailable,
                ..
            }
        ),
        "{decision}"
    );
    assert_eq!(runs.load(SeqCst), 3);
    // Cached now: no fourth run.
    expediter.default_run().decide("A").await?;
    assert_eq!(runs.load(SeqCst), 3);
    Ok(())
}

// ---------------------------------------------------------------------------------
// Tools held open on hints from outside (another replica) are not failures here.
// ---------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn tools_held_open_on_hints_spend_no_budget_and_make_no_systemic_event() -> TestResult {
    let expediter = Expediter::builder()
        .tool(spec("A"))
        .tool(spec("B"))
        .tool(spec("C"))
        .build()?;
    let until = tokio::time::Instant::now().into_std() + Duration::from_secs(60);
    for tool in ["A", "B", "C"] {
        assert!(expediter.handle(tool)?.hold_open_until(until));
    }
    // The observer's events are applied on the next look.
    let decision = expediter.default_run().decide("A").await?;
    assert!(
        matches!(decision.action, Action::Skip { .. }),
        "held open: skipped and routed, not paused: {:?}",
        decision.action
    );
    let report = expediter.report();
    assert_eq!(report.budget.used, 0, "{report}");
    assert_eq!(
        report.systemic, None,
        "three held together are no cascade here"
    );
    let offer = expediter.offered_tools();
    let a = offer
        .withheld
        .iter()
        .find(|w| &*w.name == "A")
        .expect("withheld");
    assert_eq!(a.unusable, Unusable::Held);
    assert!(a.line.contains("held open on a hint"), "{}", a.line);
    assert!(
        !a.line.contains("failed"),
        "it did not fail here: {}",
        a.line
    );

    // When the hold ends, the probe decides as for any opening.
    advance(Duration::from_secs(60)).await;
    assert_eq!(
        expediter.default_run().decide("A").await?.action,
        Action::Probe
    );
    Ok(())
}

// ---------------------------------------------------------------------------------
// A failure still being delivered to the breaker's observers when its caller decides
// again.
// ---------------------------------------------------------------------------------

/// An observer that holds the delivery of its breaker's first failure until released,
/// and what tells when it holds it and releases it.
fn slow_first_failure() -> (
    impl Fn(&tower_circuit_breaker::Event<'_>) + Send + Sync + 'static,
    SlowDelivery,
) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Mutex};
    use tower_circuit_breaker::{Event, Outcome};

    let (entered, held) = mpsc::channel::<()>();
    let (release, released) = mpsc::channel::<()>();
    let released = Mutex::new(released);
    let first = AtomicBool::new(true);
    let observer = move |event: &Event<'_>| {
        if let Event::Recorded {
            outcome: Outcome::Failure(_),
            ..
        } = event
        {
            if first.swap(false, Ordering::SeqCst) {
                let _ = entered.send(());
                let _ = released.lock().unwrap().recv();
            }
        }
    };
    (observer, SlowDelivery { held, release })
}

/// [`slow_first_failure`]'s: `held` hears when it holds a failure, `release` lets it go.
struct SlowDelivery {
    held: std::sync::mpsc::Receiver<()>,
    release: std::sync::mpsc::Sender<()>,
}

/// A failing tool's service.
fn refusing(
    layer: tower_circuit_breaker::expediter::ToolLayer,
) -> impl tower::Service<&'static str, Error = BoxError> + Clone + Send + 'static {
    use tower::{service_fn, Layer};
    layer.layer(service_fn(|_: &str| async {
        Err::<String, _>(std::io::Error::other("backend refused"))
    }))
}

/// One call of `service`, on a thread (and a runtime) of its own.
fn call_on_a_thread_of_its_own<S>(mut service: S) -> std::thread::JoinHandle<()>
where
    S: tower::Service<&'static str, Error = BoxError> + Send + 'static,
{
    use tower::ServiceExt;
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let _ = service.ready().await.unwrap().call("a").await;
        });
    })
}

fn assert_budget_exhausted(action: &Action) {
    assert!(
        matches!(
            action,
            Action::Pause {
                reason: PauseReason::BudgetExhausted,
                ..
            }
        ),
        "{action:?}"
    );
}

/// Another observer of the tool's breaker is slow: it holds the delivery of the first
/// failure (on another thread) while a second call fails and its caller decides again.
/// That decision waits for both failures to reach the budget, which they use up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_after_a_failure_counts_it_even_while_another_thread_delivers() -> TestResult {
    use tower::{Service, ServiceExt};

    let (slow_observer, slow) = slow_first_failure();
    let expediter = Expediter::builder()
        .failure_budget(2)
        .tool(
            spec("search").breaker(
                Builder::new()
                    .failure_threshold(100)
                    .on_event(slow_observer),
            ),
        )
        .build()?;
    let mut search = refusing(expediter.layer("search")?);

    // The first failure, on a thread of its own: its delivery stops in the slow observer.
    let first_call = call_on_a_thread_of_its_own(search.clone());
    slow.held.recv()?;

    // The second failure is queued behind the first's delivery.
    assert!(search.ready().await?.call("b").await.is_err());

    let run = expediter.default_run();
    let decision = run.decide("search");
    let mut decision = std::pin::pin!(decision);
    assert!(
        futures::poll!(decision.as_mut()).is_pending(),
        "the decision waits until both failures have reached the budget"
    );
    slow.release.send(())?;
    assert_budget_exhausted(&decision.await?.action);
    assert_eq!(expediter.report().budget.used, 2);
    first_call.join().expect("the first call ends");
    Ok(())
}

/// A decision's pre-call check is still running when a tool is added and fails, its
/// failure's delivery held on another thread by a slow observer: once the check is
/// done the decision waits for that delivery too (the tool is in the map by then), and
/// the failure uses up the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_waits_for_the_failure_of_a_tool_added_during_its_pre_call_check() -> TestResult
{
    use std::sync::Arc;
    use tokio::sync::Notify;
    use tower_circuit_breaker::expediter::Availability;

    let checked = Arc::new(Notify::new());
    let expediter = Expediter::builder()
        .failure_budget(1)
        .tool(spec("search").precheck({
            let checked = checked.clone();
            move || {
                let checked = checked.clone();
                async move {
                    checked.notified().await;
                    Availability::Available
                }
            }
        }))
        .build()?;
    let run = expediter.default_run();
    let decision = run.decide("search");
    let mut decision = std::pin::pin!(decision);
    assert!(
        futures::poll!(decision.as_mut()).is_pending(),
        "the decision waits for its pre-call check"
    );

    let (slow_observer, slow) = slow_first_failure();
    expediter.add_tool(
        spec("fetch").breaker(
            Builder::new()
                .failure_threshold(100)
                .on_event(slow_observer),
        ),
    )?;
    // The failure, on a thread of its own: its delivery stops in the slow observer.
    let failed_call = call_on_a_thread_of_its_own(refusing(expediter.layer("fetch")?));
    slow.held.recv()?;

    checked.notify_one();
    assert!(
        futures::poll!(decision.as_mut()).is_pending(),
        "the decision waits until the added tool's failure has reached the budget"
    );
    slow.release.send(())?;
    assert_budget_exhausted(&decision.await?.action);
    failed_call.join().expect("the failed call ends");
    Ok(())
}

// ---------------------------------------------------------------------------------
// A failure category rule of the user's that panics.
// ---------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_category_rule_that_panics_leaves_the_failure_charged_uncategorized() -> TestResult {
    let expediter = Expediter::builder()
        .tools(["A", "B"].map(spec))
        .failure_budget(50)
        .categorize(|message: &str| {
            assert!(!message.contains("weird"), "a bug in the rule");
            None
        })
        .build()?;
    let mut a = Tool::new(&expediter, "A");
    a.fail_times(&expediter, 3, "weird: connection refused")
        .await;
    let snapshot = expediter.handle("A")?.snapshot();
    assert_eq!(snapshot.state, State::Open);
    let report = expediter.report();
    assert_eq!(
        u64::from(report.budget.used),
        snapshot.counts.failures,
        "{report}"
    );
    assert_budget_agrees(&report);
    // Uncategorized: B opening on "connection refused" shares no signature with A.
    let mut b = Tool::new(&expediter, "B");
    b.fail_times(&expediter, 3, "connection refused").await;
    let report = expediter.report();
    assert!(report.systemic.is_none(), "{report}");
    assert_eq!(report.budget.used, 6, "{report}");
    Ok(())
}
