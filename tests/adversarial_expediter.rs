//! An attacker's and a new user's look at the expediter, `RecoverLayer` and the keyed
//! registry: races on the budget, limits at their edges, operators acting mid-run, bad
//! input, and the report's claims set against what really happened.
//!
//! Time is tokio's paused clock where time matters; nothing waits on the wall clock.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use tokio::time::advance;
use tower::{service_fn, Layer, Service, ServiceBuilder, ServiceExt};

mod common;

use common::tool::Tool;
use tower_circuit_breaker::error::{BoxError, Rejected};
use tower_circuit_breaker::expediter::{
    Action, Alternative, Attempt, Availability, Expediter, ExpediterError, Freshness,
    FreshnessTracker, PauseReason, SkipReason, SubTask, ToolSpec,
};
use tower_circuit_breaker::keyed::KeyedCircuitBreakerLayer;
use tower_circuit_breaker::recover::{Failed, RecoverLayer};
use tower_circuit_breaker::{Builder, Cooldown, Reason, Source, State};

type TestResult = Result<(), BoxError>;

fn spec(name: &str) -> ToolSpec {
    ToolSpec::new(name)
        .provides(&format!("{name}'s capability"))
        .fallback(&format!("ask the user to do {name}'s work"))
}

/// A breaker that never opens on its own within a test.
fn never_opens() -> Builder {
    Builder::new()
        .failure_threshold(1_000_000)
        .cooldown(Cooldown::Calls(3))
}

/// One tool, `T`, on the default breaker, with a failure budget no test here uses up.
fn one_tool() -> Result<Expediter, ExpediterError> {
    Expediter::builder()
        .tool(spec("T"))
        .failure_budget(50)
        .build()
}

/// One tool, `T`, whose breaker never opens, with a failure budget of `limit`.
fn one_tool_with_budget(limit: u32) -> Result<Expediter, ExpediterError> {
    Expediter::builder()
        .tool(spec("T"))
        .default_breaker(never_opens())
        .failure_budget(limit)
        .build()
}

// ---------------------------------------------------------------------------------
// The failure budget under racing callers.
// ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_failures_on_many_threads_are_each_counted_once() -> TestResult {
    const TASKS: usize = 16;
    const EACH: usize = 25;
    let names = ["T0", "T1", "T2", "T3"];
    let expediter = Expediter::builder()
        .tools(names.iter().map(|n| spec(n)))
        .default_breaker(never_opens())
        .failure_budget(1_000_000)
        .build()?;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let expediter = expediter.clone();
        let name = names[t % names.len()];
        tasks.push(tokio::spawn(async move {
            let mut tool = Tool::new(&expediter, name);
            tool.fail_with("tool exploded");
            let mut made = 0;
            for _ in 0..EACH {
                match tool.execute(&expediter).await {
                    Attempt::Made { result, .. } => {
                        assert!(result.is_err());
                        made += 1;
                    }
                    other => panic!("{other:?}"),
                }
                tokio::task::yield_now().await;
            }
            made
        }));
    }
    let mut made = 0;
    for task in tasks {
        made += task.await?;
    }
    assert_eq!(made, TASKS * EACH);
    let report = expediter.report();
    assert_eq!(report.budget.used as usize, TASKS * EACH, "{report}");
    assert_eq!(report.budget.failures.len(), TASKS * EACH);
    assert_eq!(report.step as usize, TASKS * EACH);
    for name in names {
        let snapshot = expediter.handle(name)?.snapshot();
        assert_eq!(
            snapshot.counts.failures as usize,
            TASKS * EACH / names.len()
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_callers_at_the_budget_limit_lose_no_failure_and_all_end_paused() -> TestResult {
    const TASKS: usize = 16;
    let expediter = one_tool_with_budget(5)?;
    let made = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (expediter, made) = (expediter.clone(), made.clone());
        tasks.push(tokio::spawn(async move {
            let mut tool = Tool::new(&expediter, "T");
            tool.fail_with("tool exploded");
            loop {
                match tool.execute(&expediter).await {
                    Attempt::Made { .. } => {
                        made.fetch_add(1, SeqCst);
                    }
                    Attempt::Paused { reason, .. } => {
                        assert_eq!(reason, PauseReason::BudgetExhausted);
                        return;
                    }
                    other => panic!("{other:?}"),
                }
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    let report = expediter.report();
    let made = made.load(SeqCst);
    assert!(made >= 5, "{made}");
    assert_eq!(report.budget.failures.len(), made, "{report}");
    assert_eq!(report.budget.used as usize, made);
    assert!(report.budget.exhausted());
    assert_eq!(
        expediter.handle("T")?.snapshot().counts.failures as usize,
        made
    );
    assert!(matches!(
        expediter.default_run().decide("T").await?.action,
        Action::Pause {
            reason: PauseReason::BudgetExhausted,
            ..
        }
    ));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_budget_pauses_exactly_at_its_limit_and_a_new_cycle_refills_it() -> TestResult {
    let expediter = one_tool_with_budget(3)?;
    let mut tool = Tool::new(&expediter, "T");
    tool.fail_times(&expediter, 2, "tool exploded").await;
    assert_eq!(expediter.report().budget.used, 2);
    assert!(!expediter.report().budget.exhausted());
    // The third failure is allowed, and uses the budget up.
    tool.fail_times(&expediter, 1, "tool exploded").await;
    let report = expediter.report();
    assert_eq!((report.budget.used, report.budget.limit), (3, 3));
    assert!(report.budget.exhausted());
    assert!(report.headline.contains("BUDGET EXHAUSTED"), "{report}");
    let calls = tool.calls();
    for _ in 0..5 {
        assert!(matches!(
            tool.attempt(&expediter).await.action,
            Action::Pause {
                reason: PauseReason::BudgetExhausted,
                ..
            }
        ));
    }
    assert_eq!(tool.calls(), calls, "no call while paused");
    expediter.new_cycle();
    let report = expediter.report();
    assert_eq!((report.budget.used, report.budget.cycle), (0, 2));
    assert_eq!(tool.attempt(&expediter).await.action, Action::Call);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_budget_of_one_pauses_after_the_first_failure_and_the_largest_budget_counts() -> TestResult
{
    let expediter = Expediter::builder()
        .tool(spec("T"))
        .failure_budget(1)
        .build()?;
    let mut tool = Tool::new(&expediter, "T");
    tool.fail_times(&expediter, 1, "tool exploded").await;
    assert!(matches!(
        expediter.default_run().decide("T").await?.action,
        Action::Pause { .. }
    ));

    let expediter = one_tool_with_budget(u32::MAX)?;
    let mut tool = Tool::new(&expediter, "T");
    tool.fail_times(&expediter, 10, "tool exploded").await;
    let report = expediter.report();
    assert_eq!((report.budget.used, report.budget.limit), (10, u32::MAX));
    Ok(())
}

// ---------------------------------------------------------------------------------
// Decisions against what the breaker then does.
// ---------------------------------------------------------------------------------

/// `decide` reserves nothing, so two agents deciding at once may both hear PROBE; the
/// breaker lets one probe through and refuses the other. Through `execute`, the agent
/// refused is told it was skipped, with a route, and the tool is reached once.
#[tokio::test(start_paused = true)]
async fn two_agents_executing_a_due_probe_at_once_reach_the_tool_once_and_the_other_is_routed(
) -> TestResult {
    let expediter = one_tool()?;
    let mut opener = Tool::new(&expediter, "T");
    opener.fail_times(&expediter, 3, "tool exploded").await;
    let reached = Arc::new(AtomicUsize::new(0));
    // A slow tool: each call takes a second.
    let slow = || {
        let seen = reached.clone();
        ServiceBuilder::new()
            .layer(expediter.layer("T").unwrap())
            .service(service_fn(move |q: String| {
                seen.fetch_add(1, SeqCst);
                async move {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Ok::<_, std::io::Error>(q)
                }
            }))
    };
    let (mut first, mut second) = (slow(), slow());
    // Decide (each one a step, skipped) until the probe is due.
    while expediter.default_run().decide("T").await?.action != Action::Probe {}
    assert_eq!(expediter.peek("T")?, Action::Probe, "the probe is due");
    let run = expediter.default_run();
    let (a, b) = tokio::join!(
        run.execute("T", &mut first, "first".to_string()),
        run.execute("T", &mut second, "second".to_string()),
    );
    let (a, b) = (a?, b?);
    assert_eq!(reached.load(SeqCst), 1, "one probe reached the tool");
    let made = [&a, &b]
        .into_iter()
        .filter(|attempt| matches!(attempt, Attempt::Made { .. }))
        .count();
    assert_eq!(made, 1, "one attempt was made: {a:?} {b:?}");
    for attempt in [&a, &b] {
        match attempt {
            Attempt::Made { result, .. } => {
                assert_eq!(
                    result.as_ref().map_err(|e| e.to_string())?.source(),
                    Source::Probe
                )
            }
            Attempt::Skipped {
                reason, decision, ..
            } => {
                assert_eq!(*reason, SkipReason::Breaker(Reason::HalfOpenFull));
                assert_eq!(decision.action.as_str(), "SKIP", "{decision:?}");
            }
            Attempt::Paused { .. } => panic!("not paused: {attempt:?}"),
        }
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn execute_never_reports_a_call_made_that_the_breaker_refused() -> TestResult {
    let expediter = one_tool()?;
    let handle = expediter.handle("T")?;
    let reached = Arc::new(AtomicUsize::new(0));
    let seen = reached.clone();
    // An operator forces the tool open after the decision and before the call.
    let inner = ServiceBuilder::new()
        .layer(expediter.layer("T")?)
        .service(service_fn(move |request: String| {
            seen.fetch_add(1, SeqCst);
            async move { Ok::<_, std::io::Error>(request) }
        }));
    let mut svc = ForceOpenOnReady {
        inner,
        handle: handle.clone(),
        armed: true,
    };
    let attempt = expediter
        .default_run()
        .execute("T", &mut svc, "q".to_string())
        .await?;
    assert_eq!(reached.load(SeqCst), 0, "the tool was not called");
    match attempt {
        Attempt::Made { result, .. } => {
            let refused = result.as_ref().err().is_some_and(|e| e.is::<Rejected>());
            panic!(
                "Attempt::Made for a call the breaker refused (Rejected: {refused}): {result:?}"
            );
        }
        Attempt::Skipped { reason, .. } => {
            assert_eq!(reason, SkipReason::Breaker(Reason::ForcedOpen))
        }
        Attempt::Paused { .. } => panic!("not paused"),
    }
    Ok(())
}

/// Forces its breaker open the first time it is polled ready, then polls the breaker.
struct ForceOpenOnReady<S> {
    inner: S,
    handle: tower_circuit_breaker::CircuitBreakerHandle,
    armed: bool,
}

impl<S: Service<String>> Service<String> for ForceOpenOnReady<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        if std::mem::take(&mut self.armed) {
            self.handle.force_open();
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: String) -> S::Future {
        self.inner.call(request)
    }
}

// ---------------------------------------------------------------------------------
// Pre-call checks at their edges.
// ---------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_degraded_check_on_a_threshold_of_one_still_allows_the_first_call() -> TestResult {
    let expediter = Expediter::builder()
        .tool(
            spec("T")
                .breaker(Builder::new().failure_threshold(1))
                .precheck(|| async { Availability::Degraded }),
        )
        .build()?;
    let mut tool = Tool::new(&expediter, "T");
    assert_eq!(tool.attempt(&expediter).await.action, Action::Call);
    assert_eq!(tool.calls(), 1);
    assert_eq!(expediter.handle("T")?.state(), State::Closed);
    tool.fail_times(&expediter, 1, "tool exploded").await;
    assert_eq!(expediter.handle("T")?.state(), State::Open);
    Ok(())
}

// ---------------------------------------------------------------------------------
// Cascade detection at the edges of its window.
// ---------------------------------------------------------------------------------

/// Three tools with a breaker that opens on one failure, each failing with its own
/// message (no shared signature); `gaps[i]` decisions of a healthy tool pass between
/// the openings, and `time` passes before each opening.
async fn openings(
    window_steps: u64,
    window_time: Duration,
    gaps: [usize; 2],
    time: Duration,
) -> Result<Expediter, BoxError> {
    let expediter = Expediter::builder()
        .tools(["A", "B", "C", "H"].map(spec))
        .default_breaker(Builder::new().failure_threshold(1))
        .failure_budget(50)
        .cascade_window(window_steps, window_time)
        .build()?;
    let mut healthy = Tool::new(&expediter, "H");
    let messages = ["disk quota exceeded", "segfault in parser", "bad gateway"];
    for (i, name) in ["A", "B", "C"].into_iter().enumerate() {
        advance(time).await;
        let mut tool = Tool::new(&expediter, name);
        tool.fail_times(&expediter, 1, messages[i]).await;
        if i < 2 {
            for _ in 0..gaps[i] {
                assert_eq!(healthy.attempt(&expediter).await.action, Action::Call);
            }
        }
    }
    // One more decision applies the last opening.
    let _ = healthy.attempt(&expediter).await;
    Ok(expediter)
}

#[tokio::test(start_paused = true)]
async fn three_openings_exactly_the_window_in_steps_apart_are_systemic() -> TestResult {
    // A opens at step 1, B at step 2, C at step 4: C is 3 steps after A.
    let expediter = openings(3, Duration::from_secs(1), [0, 1], Duration::from_secs(60)).await?;
    let report = expediter.report();
    assert!(report.systemic.is_some(), "{report}");
    // One step further apart: not together.
    let expediter = openings(3, Duration::from_secs(1), [0, 2], Duration::from_secs(60)).await?;
    let report = expediter.report();
    assert!(report.systemic.is_none(), "{report}");
    assert_eq!(report.budget.used, 3);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn three_openings_exactly_the_window_in_time_apart_are_systemic_and_a_nanosecond_more_not(
) -> TestResult {
    let window = Duration::from_secs(30);
    // Far apart in steps (10 decisions between openings); 15 s apart: A and C 30 s.
    let expediter = openings(1, window, [10, 10], Duration::from_secs(15)).await?;
    assert!(
        expediter.report().systemic.is_some(),
        "{}",
        expediter.report()
    );
    let expediter = openings(
        1,
        window,
        [10, 10],
        Duration::from_secs(15) + Duration::from_nanos(1),
    )
    .await?;
    // A-C is 30 s + 2 ns: not together.
    assert!(
        expediter.report().systemic.is_none(),
        "{}",
        expediter.report()
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_cascade_window_of_zero_time_counts_only_steps() -> TestResult {
    // Openings 10 decisions apart, at one instant of the paused clock: a window of
    // 3 steps and no time must not see them as together.
    let expediter = openings(3, Duration::ZERO, [10, 10], Duration::ZERO).await?;
    let report = expediter.report();
    assert!(
        report.systemic.is_none(),
        "openings 10 steps apart with a 3-step, zero-time window were called systemic\n{report}"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_second_opening_on_the_signature_of_a_tool_an_operator_reset_is_not_systemic(
) -> TestResult {
    let expediter = Expediter::builder()
        .tools(["A", "B"].map(spec))
        .failure_budget(50)
        .build()?;
    let (mut a, mut b) = (Tool::new(&expediter, "A"), Tool::new(&expediter, "B"));
    a.fail_times(&expediter, 3, "connection refused").await;
    assert_eq!(expediter.handle("A")?.state(), State::Open);
    expediter.handle("A")?.reset();
    advance(Duration::from_secs(120)).await;
    let mut h = Tool::new(&expediter, "A");
    h.heal();
    for _ in 0..5 {
        assert_eq!(h.attempt(&expediter).await.action, Action::Call);
    }
    b.fail_times(&expediter, 3, "connection refused").await;
    let _ = h.attempt(&expediter).await;
    let report = expediter.report();
    assert!(report.systemic.is_none(), "{report}");
    assert_eq!(report.budget.used, 6);
    Ok(())
}

// ---------------------------------------------------------------------------------
// Bad input: typed errors, never panics.
// ---------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn unknown_and_empty_names_are_typed_errors_and_take_no_step() -> TestResult {
    let expediter = Expediter::builder().tool(spec("T")).build()?;
    for name in ["", "t", "T ", "nope", &"x".repeat(100_000)] {
        let unknown = ExpediterError::UnknownTool(name.to_string());
        assert_eq!(
            expediter.default_run().decide(name).await.unwrap_err(),
            unknown
        );
        assert_eq!(expediter.peek(name).unwrap_err(), unknown);
        assert_eq!(expediter.layer(name).unwrap_err(), unknown);
        assert_eq!(expediter.handle(name).unwrap_err(), unknown);
        assert_eq!(
            expediter
                .set_availability(name, Availability::Unavailable, "x")
                .unwrap_err(),
            unknown
        );
        assert_eq!(expediter.clear_availability(name).unwrap_err(), unknown);
        assert_eq!(
            expediter
                .default_run()
                .start_subtask(SubTask::new("s", [name]))
                .unwrap_err(),
            unknown
        );
    }
    assert_eq!(
        expediter
            .default_run()
            .complete_subtask("never planned")
            .unwrap_err(),
        ExpediterError::UnknownSubTask("never planned".into())
    );
    let report = expediter.report();
    assert_eq!((report.step, report.budget.used), (0, 0));
    assert!(report.incomplete.is_empty());
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn an_expediter_with_no_tools_builds_reports_and_refuses_every_name() -> TestResult {
    let expediter = Expediter::builder().build()?;
    assert!(expediter.tools().is_empty());
    assert!(expediter.offered_tools().offered.is_empty());
    let _ = expediter.report().to_string();
    assert!(matches!(
        expediter.default_run().decide("anything").await,
        Err(ExpediterError::UnknownTool(_))
    ));
    // A sub-task needing no tool can run.
    let plan = expediter
        .default_run()
        .start_subtask(SubTask::new("think", []))?;
    assert!(plan.can_run());
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn duplicate_registrations_and_alternatives_are_refused_at_build_and_at_runtime() -> TestResult
{
    let error = Expediter::builder()
        .tool(spec("T"))
        .tool(spec("T"))
        .build()
        .unwrap_err();
    assert_eq!(error, ExpediterError::DuplicateTool("T".into()));
    let expediter = Expediter::builder().tool(spec("T")).build()?;
    assert_eq!(
        expediter.add_tool(spec("T")).unwrap_err(),
        ExpediterError::DuplicateTool("T".into())
    );
    assert_eq!(
        expediter.add_tool(spec("")).unwrap_err(),
        ExpediterError::EmptyToolName
    );
    // A tool naming itself as its alternative.
    expediter.add_tool(spec("U").alternative(Alternative::low("T", "m", "d")))?;
    assert!(matches!(
        expediter.add_tool(spec("V").alternative(Alternative::low("V", "m", "d"))),
        Err(ExpediterError::SelfAlternative(_))
    ));
    assert_eq!(expediter.tools(), ["T".into(), "U".into()] as [Arc<str>; 2]);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn bad_breaker_settings_of_a_tool_are_typed_errors_never_panics() {
    let bad = [
        Builder::new().failure_threshold(0),
        Builder::new().cooldown(Cooldown::Calls(0)),
        Builder::new().cooldown(Cooldown::Time(Duration::ZERO)),
    ];
    for builder in bad {
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Expediter::builder()
                .tool(spec("T").breaker(builder))
                .build()
        }));
        match built.expect("no panic") {
            Err(ExpediterError::Breaker { tool, .. }) => assert_eq!(tool, "T"),
            Err(other) => panic!("{other}"),
            Ok(expediter) => {
                // Accepted settings must then work without a panic.
                let mut tool = Tool::new(&expediter, "T");
                for _ in 0..5 {
                    let _ = tool.attempt(&expediter).await;
                }
            }
        }
    }
    for (start, cap) in [(0, 0), (0, 5), (5, 4)] {
        assert_eq!(
            Expediter::builder()
                .tool(spec("T"))
                .recovery_backoff(start, cap)
                .build()
                .unwrap_err(),
            ExpediterError::InvalidRecoveryBackoff { start, cap }
        );
    }
    assert_eq!(
        Expediter::builder()
            .tool(spec("T"))
            .cascade_window(0, Duration::ZERO)
            .build()
            .unwrap_err(),
        ExpediterError::EmptyCascadeWindow
    );
}

// ---------------------------------------------------------------------------------
// Freshness labels: on stale data, and only then.
// ---------------------------------------------------------------------------------

#[test]
fn a_stale_label_carries_the_time_the_data_was_retrieved_even_before_1970() {
    let day_before = UNIX_EPOCH - Duration::from_secs(86_400);
    let label = Freshness::stale(day_before).label().unwrap();
    assert!(
        label.contains("1969-12-31T00:00:00Z"),
        "data retrieved on 1969-12-31 is labelled: {label}"
    );
}

#[test]
fn only_an_output_identical_to_the_previous_one_of_the_same_call_is_labelled_cached() {
    let mut tracker = FreshnessTracker::default();
    assert_eq!(
        tracker.observe("Grep", "k", &"a").freshness,
        Freshness::Fresh
    );
    assert!(matches!(
        tracker.observe("Grep", "k", &"a").freshness,
        Freshness::Cached { .. }
    ));
    assert_eq!(
        tracker.observe("Grep", "k", &"b").freshness,
        Freshness::Fresh
    );
    assert_eq!(
        tracker.observe("Grep", "k", &"a").freshness,
        Freshness::Fresh
    );
    // Another tool, or another call of the same tool, is not "the same call".
    assert_eq!(
        tracker.observe("Read", "k", &"a").freshness,
        Freshness::Fresh
    );
    assert_eq!(
        tracker.observe("Grep", "k2", &"a").freshness,
        Freshness::Fresh
    );
    // Keys that concatenate alike are still different calls.
    assert_eq!(tracker.observe("ab", "c", &"x").freshness, Freshness::Fresh);
    assert_eq!(tracker.observe("a", "bc", &"x").freshness, Freshness::Fresh);
    assert_eq!(Freshness::Fresh.label(), None);
}

// ---------------------------------------------------------------------------------
// RecoverLayer.
// ---------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn recover_answers_a_failed_call_once_and_never_an_open_breakers_skip() -> TestResult {
    let breaker = Builder::new().name("svc").failure_threshold(2).build()?;
    let handle = breaker.handle();
    let fallbacks = Arc::new(AtomicUsize::new(0));
    let counted = fallbacks.clone();
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let mut svc = ServiceBuilder::new()
        .layer(RecoverLayer::new(
            handle.clone(),
            service_fn(move |failed: Failed<String>| {
                counted.fetch_add(1, SeqCst);
                async move { Ok::<_, BoxError>(format!("fallback for {}", failed.request)) }
            }),
        ))
        .layer(breaker)
        .service(service_fn(move |_: String| {
            seen.fetch_add(1, SeqCst);
            async { Err::<String, _>(std::io::Error::other("boom")) }
        }));
    for _ in 0..2 {
        let answer = svc.ready().await?.call("q".into()).await?;
        assert_eq!(answer.source(), Source::FallbackAfterFailure);
    }
    assert_eq!(handle.state(), State::Open);
    // Open, no fallback on the breaker: a typed skip passes through, unanswered.
    let skipped = svc.ready().await?.call("q".into()).await;
    assert!(skipped.unwrap_err().is::<Rejected>());
    assert_eq!(calls.load(SeqCst), 2);
    assert_eq!(fallbacks.load(SeqCst), 2);
    assert_eq!(handle.snapshot().counts.failures, 2);
    Ok(())
}

// ---------------------------------------------------------------------------------
// The keyed registry under churn.
// ---------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_registry_of_capacity_one_churns_through_many_keys_and_keeps_a_key_in_use() -> TestResult
{
    let layer = KeyedCircuitBreakerLayer::builder(Builder::new().name("k"), |key: &u64| *key)
        .capacity(1)
        .build()?;
    let registry = layer.handle();
    let (release, gate) = tokio::sync::watch::channel(false);
    let mut svc = layer.layer(service_fn(move |key: u64| {
        let mut gate = gate.clone();
        async move {
            if key == 0 {
                while !*gate.borrow_and_update() {
                    let _ = gate.changed().await;
                }
            }
            Ok::<_, std::io::Error>(key)
        }
    }));
    for key in 1..=1000u64 {
        svc.ready().await?.call(key).await?;
        assert!(
            registry.len() <= 1,
            "{} keys after key {key}",
            registry.len()
        );
    }
    assert_eq!(registry.evictions(), 999);
    // Key 0's call is in flight: its breaker is not evicted by new keys.
    let in_flight = svc.ready().await?.call(0);
    let mut in_flight = tokio::spawn(in_flight);
    tokio::task::yield_now().await;
    let zero = registry.get(&0).expect("key 0's breaker");
    drop(zero);
    for key in 1001..=1010u64 {
        svc.ready().await?.call(key).await?;
        assert!(registry.get(&0).is_some(), "key 0 evicted while in use");
    }
    release.send(true)?;
    assert_eq!((&mut in_flight).await??.into_inner(), 0);
    for key in 1011..=1020u64 {
        svc.ready().await?.call(key).await?;
    }
    assert!(registry.len() <= 1, "{} keys", registry.len());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_keys_at_once_on_a_registry_of_capacity_one_come_back_within_it() -> TestResult {
    let layer = KeyedCircuitBreakerLayer::builder(Builder::new().name("k"), |key: &u64| *key)
        .capacity(1)
        .build()?;
    let registry = layer.handle();
    let svc = layer.layer(service_fn(|key: u64| async move {
        Ok::<_, std::io::Error>(key)
    }));
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let mut svc = svc.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..500u64 {
                let key = t * 1_000 + i;
                let answer = svc.ready().await.unwrap().call(key).await.unwrap();
                assert_eq!(answer.into_inner(), key);
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    assert!(registry.len() <= 2 + 8, "{} keys", registry.len());
    let mut svc = svc;
    for key in 100_000..100_004u64 {
        svc.ready().await?.call(key).await?;
    }
    assert!(registry.len() <= 1, "{} keys once quiet", registry.len());
    Ok(())
}

#[test]
fn a_registry_of_the_largest_capacity_builds_and_calls() {
    let layer = KeyedCircuitBreakerLayer::builder(Builder::new(), |key: &u8| *key)
        .capacity(usize::MAX)
        .build()
        .expect("builds");
    let mut svc = layer.layer(service_fn(
        |key: u8| async move { Ok::<_, std::io::Error>(key) },
    ));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        for key in 0..=255u8 {
            svc.ready().await.unwrap().call(key).await.unwrap();
        }
    });
    assert_eq!(layer.handle().len(), 256);
}

// ---------------------------------------------------------------------------------
// Operators and cancellations mid-run.
// ---------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_probe_whose_execute_future_is_dropped_frees_the_probe_and_spends_nothing() -> TestResult
{
    let expediter = one_tool()?;
    let mut opener = Tool::new(&expediter, "T");
    opener.fail_times(&expediter, 3, "tool exploded").await;
    let used = expediter.report().budget.used;
    let mut hanging = ServiceBuilder::new()
        .layer(expediter.layer("T")?)
        .service(service_fn(|_: String| async {
            std::future::pending::<()>().await;
            Ok::<String, std::io::Error>(String::new())
        }));
    let mut dropped = false;
    for _ in 0..10 {
        let run = expediter.default_run();
        let execute = run.execute("T", &mut hanging, "q".to_string());
        match tokio::time::timeout(Duration::from_secs(5), execute).await {
            Err(_) => {
                dropped = true;
                break;
            }
            Ok(attempt) => assert!(matches!(attempt?, Attempt::Skipped { .. })),
        }
    }
    assert!(dropped, "the probe went and hung until dropped");
    assert_eq!(
        expediter.report().budget.used,
        used,
        "a dropped call spends nothing"
    );
    // The next probe may go, and closes the breaker.
    opener.heal();
    let mut closed = false;
    for _ in 0..10 {
        let decision = opener.attempt(&expediter).await;
        if decision.action == Action::Probe {
            closed = expediter.handle("T")?.state() == State::Closed;
            break;
        }
    }
    assert!(closed, "{}", expediter.report());
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_kill_mid_run_spends_no_budget_and_the_report_does_not_call_it_a_failure() -> TestResult {
    let expediter = Expediter::builder()
        .tools(["A", "B"].map(spec))
        .failure_budget(5)
        .build()?;
    let mut a = Tool::new(&expediter, "A");
    a.fail_times(&expediter, 1, "tool exploded").await;
    expediter.kill_switch().kill();
    for _ in 0..10 {
        let decision = a.attempt(&expediter).await;
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
    assert_eq!(a.calls(), 1);
    let report = expediter.report();
    assert_eq!(report.budget.used, 1);
    let health = &report.tools[0];
    assert!(health.killed);
    assert_eq!(health.consecutive_failures, 1, "the kill changes no count");
    assert!(expediter.offered_tools().offered.is_empty());
    expediter.kill_switch().revive();
    assert_eq!(a.attempt(&expediter).await.action, Action::Call);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_tool_reset_during_its_recovery_backoff_is_called_at_once() -> TestResult {
    let expediter = Expediter::builder()
        .tools(["A", "B", "H"].map(spec))
        .failure_budget(50)
        .recovery_backoff(10, 20)
        .build()?;
    let (mut a, mut b) = (Tool::new(&expediter, "A"), Tool::new(&expediter, "B"));
    a.fail_times(&expediter, 3, "connection refused").await;
    b.fail_times(&expediter, 3, "connection refused").await;
    let _ = expediter.default_run().decide("H").await?;
    assert!(expediter.report().systemic.is_some());
    expediter.confirm_recovery();
    assert!(matches!(
        expediter.default_run().decide("A").await?.action,
        Action::Skip {
            reason: SkipReason::RecoveryBackoff,
            ..
        }
    ));
    // An operator who knows A is fixed resets it.
    expediter.handle("A")?.reset();
    a.heal();
    assert_eq!(a.attempt(&expediter).await.action, Action::Call);
    assert_eq!(a.calls(), 4);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_poll_ready_error_through_execute_is_one_failure() -> TestResult {
    let expediter = one_tool()?;
    let mut svc = ServiceBuilder::new()
        .layer(expediter.layer("T")?)
        .service(NeverReady);
    let attempt = expediter
        .default_run()
        .execute("T", &mut svc, "q".to_string())
        .await?;
    assert!(matches!(attempt, Attempt::Made { result: Err(_), .. }));
    let report = expediter.report();
    assert_eq!(report.budget.used, 1, "{report}");
    assert_eq!(expediter.handle("T")?.snapshot().consecutive_failures, 1);
    Ok(())
}

/// A service whose `poll_ready` fails: the tool is down before any call.
struct NeverReady;

impl Service<String> for NeverReady {
    type Response = String;
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<String, std::io::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), std::io::Error>> {
        std::task::Poll::Ready(Err(std::io::Error::other("connect: connection refused")))
    }

    fn call(&mut self, _: String) -> Self::Future {
        unreachable!("never ready")
    }
}

// ---------------------------------------------------------------------------------
// The report's claims against what happened.
// ---------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn every_skip_is_in_the_degradations_as_often_as_it_happened_and_no_success_is_invented(
) -> TestResult {
    let expediter = Expediter::builder()
        .tool(spec("A").alternative(Alternative::low("B", "use B", "slower")))
        .tool(spec("B"))
        .tool(
            ToolSpec::new("C")
                .provides("C's capability")
                .fallback("ask"),
        )
        .failure_budget(50)
        .build()?;
    let mut a = Tool::new(&expediter, "A");
    a.fail_times(&expediter, 3, "tool exploded").await;
    expediter.handle("C")?.force_open();
    let mut skipped_a = 0;
    let mut skipped_c = 0;
    let mut c = Tool::new(&expediter, "C");
    for _ in 0..2 {
        if matches!(a.attempt(&expediter).await.action, Action::Skip { .. }) {
            skipped_a += 1;
        }
        if matches!(c.attempt(&expediter).await.action, Action::Skip { .. }) {
            skipped_c += 1;
        }
    }
    expediter.set_user_available(false);
    if matches!(c.attempt(&expediter).await.action, Action::Skip { .. }) {
        skipped_c += 1;
    }
    let report = expediter.report();
    let times = |tool: &str| -> u32 {
        report
            .degradations
            .iter()
            .filter(|d| &*d.tool == tool)
            .map(|d| d.times)
            .sum()
    };
    assert_eq!(times("A") as usize, skipped_a, "{report}");
    assert_eq!(times("C") as usize, skipped_c, "{report}");
    assert_eq!(c.calls(), 0);
    for health in &report.tools {
        if &*health.name != "B" {
            assert_eq!(
                health.last_success_step, None,
                "{} never succeeded",
                health.name
            );
        }
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_late_failure_after_a_reset_is_not_charged_when_the_breaker_does_not_count_it(
) -> TestResult {
    let expediter = one_tool()?;
    let handle = expediter.handle("T")?;
    let mut slow = ServiceBuilder::new()
        .layer(expediter.layer("T")?)
        .service(service_fn(|_: String| async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Err::<String, _>(std::io::Error::other("tool exploded"))
        }));
    assert_eq!(
        expediter.default_run().decide("T").await?.action,
        Action::Call
    );
    let call = slow.ready().await?.call("q".to_string());
    let (result, ()) = tokio::join!(call, async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        // An operator acts while the call is in flight: it ends in another epoch.
        handle.force_open();
        handle.reset();
    });
    assert!(result.is_err());
    let snapshot = handle.snapshot();
    let report = expediter.report();
    assert_eq!(
        report.budget.used as u64, snapshot.counts.failures,
        "the budget charges what the breaker recorded (late: {})\n{report}",
        snapshot.counts.late
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_tool_in_observe_only_or_disabled_mode_is_charged_as_its_breaker_counts() -> TestResult {
    for mode in [
        tower_circuit_breaker::Mode::Disabled,
        tower_circuit_breaker::Mode::ObserveOnly,
    ] {
        let expediter = one_tool()?;
        let handle = expediter.handle("T")?;
        handle.set_mode(mode);
        let mut tool = Tool::new(&expediter, "T");
        tool.fail_times(&expediter, 5, "tool exploded").await;
        let snapshot = handle.snapshot();
        let report = expediter.report();
        assert_eq!(
            report.budget.used as u64, snapshot.counts.failures,
            "{mode:?}: {report}"
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Observers that act on the expediter and its breakers.
// ---------------------------------------------------------------------------------

#[test]
fn observers_that_add_tools_report_availability_and_reset_breakers_never_deadlock() {
    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            runtime.block_on(observers_acting())
        }));
        let _ = done.send(outcome);
    });
    match ended.recv_timeout(Duration::from_secs(60)) {
        Ok(Ok(())) => {}
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("no end within 60 s: deadlocked"),
    }
}

async fn observers_acting() {
    let cell: Arc<std::sync::OnceLock<Expediter>> = Arc::default();
    let added = Arc::new(AtomicUsize::new(0));
    let names = ["T0", "T1", "T2", "T3"];
    let specs = names.iter().enumerate().map(|(i, &name)| {
        let (seen, added) = (cell.clone(), added.clone());
        let observer = move |event: &tower_circuit_breaker::Event<'_>| {
            let Some(e) = seen.get() else { return };
            if let tower_circuit_breaker::Event::Transition(t) = event {
                let n = added.fetch_add(1, SeqCst);
                let _ = e.add_tool(spec(&format!("added-{n}")));
                let other = names[(i + 1) % names.len()];
                let _ = e.set_availability(other, Availability::Degraded, "observer");
                let _ = e.clear_availability(other);
                if t.to == State::Open {
                    if let Ok(h) = e.handle(names[(i + 2) % names.len()]) {
                        h.reset();
                    }
                }
                let _ = e.report();
                let _ = e.offered_tools();
            }
        };
        spec(name).breaker(
            Builder::new()
                .failure_threshold(2)
                .cooldown(Cooldown::Calls(2))
                .on_event(observer),
        )
    });
    let expediter = Expediter::builder()
        .tools(specs)
        .failure_budget(1_000_000)
        .build()
        .expect("a valid map");
    let _ = cell.set(expediter.clone());
    let mut agents = Vec::new();
    for agent in 0..8usize {
        let expediter = expediter.clone();
        agents.push(tokio::spawn(async move {
            let mut tool = Tool::new(&expediter, names[agent % names.len()]);
            for i in 0..60 {
                if i % 3 == 0 {
                    tool.heal();
                } else {
                    tool.fail_with("tool exploded");
                }
                let _ = tool.attempt(&expediter).await;
            }
        }));
    }
    for agent in agents {
        agent.await.expect("an agent");
    }
    assert!(added.load(SeqCst) > 0, "observers saw transitions");
    let report = expediter.report();
    assert_eq!(
        report.tools.len(),
        names.len() + added.load(SeqCst),
        "every tool an observer added is in the report"
    );
}
