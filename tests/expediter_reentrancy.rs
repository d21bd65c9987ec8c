//! Observers of the tools' breakers and pre-call checks that call back into the
//! expediter never deadlock it: the expediter holds no lock while it calls out.
//!
//! Each test runs on its own thread and the test thread waits for it with a timeout,
//! which only bounds a failure (a deadlock): a passing test never waits.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::future::join_all;
mod common;

use common::tool::Tool;
use common::Rng;
use tower_circuit_breaker::expediter::{
    Action, Alternative, Availability, Degradation, Expediter, SubTask, ToolSpec,
};
use tower_circuit_breaker::{Builder, Cooldown, Event};

/// How long a test may take before it counts as deadlocked.
const DEADLOCK: Duration = Duration::from_secs(60);

/// Runs `test` on a thread of its own with a tokio runtime; fails if it does not end
/// within [`DEADLOCK`].
fn finishes<F, Fut>(name: &str, multi_thread: bool, test: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = if multi_thread {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
        } else {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
        }
        .expect("a runtime");
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runtime.block_on(test())));
        let _ = done.send(outcome);
    });
    match ended.recv_timeout(DEADLOCK) {
        Ok(Ok(())) => {}
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("{name}: no end within {DEADLOCK:?}: the expediter deadlocked"),
    }
}

/// An expediter whose tools are later reachable from their own observers.
type Cell2 = Arc<OnceLock<Expediter>>;

#[test]
fn an_observer_reading_the_report_does_not_deadlock_a_decision() {
    finishes("report from an observer", false, || async {
        let cell: Cell2 = Arc::default();
        let seen = cell.clone();
        let reports = Arc::new(AtomicU64::new(0));
        let counted = reports.clone();
        let expediter = Expediter::builder()
            .tool(
                ToolSpec::new("A").fallback("ask the user").breaker(
                    Builder::new()
                        .failure_threshold(3)
                        .cooldown(Cooldown::Calls(3))
                        .on_event(move |event| {
                            // Skips are reported while a decision asks the breaker.
                            if let (Event::Skipped { .. }, Some(e)) = (event, seen.get()) {
                                let _ = e.report();
                                counted.fetch_add(1, Ordering::SeqCst);
                            }
                        }),
                ),
            )
            .build()
            .unwrap();
        let _ = cell.set(expediter.clone());
        let mut a = Tool::new(&expediter, "A");
        a.fail_times(&expediter, 3, "boom").await;
        assert!(matches!(
            a.attempt(&expediter).await.action,
            Action::Skip { .. }
        ));
        assert_eq!(reports.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn a_failure_category_rule_reading_the_report_does_not_deadlock() {
    finishes("report from a categorize rule", false, || async {
        let cell: Cell2 = Arc::default();
        let seen = cell.clone();
        let expediter = Expediter::builder()
            .tool(ToolSpec::new("A").fallback("ask the user"))
            .categorize(move |message| {
                if let Some(e) = seen.get() {
                    let _ = e.report();
                }
                message.contains("quota").then(|| {
                    tower_circuit_breaker::expediter::FailureCategory::new("quota", "billing")
                })
            })
            .build()
            .unwrap();
        let _ = cell.set(expediter.clone());
        let mut a = Tool::new(&expediter, "A");
        a.fail_times(&expediter, 2, "quota exceeded").await;
        assert_eq!(expediter.report().budget.failures.len(), 2);
    });
}

thread_local! {
    /// How deep a callback is inside another callback on this thread.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Runs `f` unless callbacks are already nested twice on this thread (a decision made
/// inside an observer makes its own observer calls).
fn nested(f: impl FnOnce()) {
    let depth = DEPTH.with(|d| d.get());
    if depth >= 2 {
        return;
    }
    DEPTH.with(|d| d.set(depth + 1));
    f();
    DEPTH.with(|d| d.set(depth));
}

const TOOLS: [&str; 5] = ["T0", "T1", "T2", "T3", "T4"];

/// Five tools whose breakers' observers, and whose pre-call checks, call back into the
/// expediter: reports, offers, peeks, plans, recovery, new cycles, and decisions.
fn calling_back(cell: &Cell2, callbacks: &Arc<AtomicU64>) -> Expediter {
    let specs = TOOLS.iter().enumerate().map(|(i, &name)| {
        let seen = cell.clone();
        let count = callbacks.clone();
        let observer = move |event: &Event<'_>| {
            let Some(e) = seen.get() else { return };
            nested(|| {
                count.fetch_add(1, Ordering::SeqCst);
                let _ = e.report();
                let _ = e.offered_tools();
                let _ = e.peek(TOOLS[(i + 1) % TOOLS.len()]);
                let _ = e
                    .run("observer")
                    .start_subtask(SubTask::new("look", [TOOLS[(i + 2) % TOOLS.len()]]));
                match event {
                    Event::Transition(t) if t.to == tower_circuit_breaker::State::Open => {
                        // A decision made from inside a breaker's observer.
                        let _ = futures::executor::block_on(
                            e.default_run().decide(TOOLS[(i + 3) % TOOLS.len()]),
                        );
                        e.confirm_recovery();
                    }
                    Event::Transition(_) => e.new_cycle(),
                    _ => {}
                }
            });
        };
        let mut spec = ToolSpec::new(name)
            .provides(name)
            .fallback("ask the user")
            .breaker(
                Builder::new()
                    .failure_threshold(2)
                    .cooldown(Cooldown::Calls(2))
                    .on_event(observer),
            );
        if i > 0 {
            spec = spec.alternative(Alternative::low(TOOLS[i - 1], "instead", "a little"));
        }
        if i >= 3 {
            let seen = cell.clone();
            let count = callbacks.clone();
            spec = spec.precheck(move || {
                let seen = seen.clone();
                let count = count.clone();
                async move {
                    if let Some(e) = seen.get() {
                        count.fetch_add(1, Ordering::SeqCst);
                        let _ = e.report();
                        let _ = e.peek(name);
                        // Its own decision, from inside its own check, and another's.
                        let _ = e.default_run().decide(name).await;
                        let _ = e.default_run().decide_within("T0", Degradation::Low).await;
                    }
                    if i == 3 {
                        Availability::Degraded
                    } else {
                        Availability::Available
                    }
                }
            });
        }
        spec
    });
    let seen = cell.clone();
    let count = callbacks.clone();
    Expediter::builder()
        .tools(specs)
        .categorize(move |_| {
            if let Some(e) = seen.get() {
                nested(|| {
                    count.fetch_add(1, Ordering::SeqCst);
                    let _ = e.report();
                });
            }
            None
        })
        .failure_budget(6)
        .build()
        .expect("a valid map")
}

#[test]
fn observers_and_prechecks_that_call_back_in_never_deadlock_concurrent_agents() {
    finishes("callbacks calling back in", true, || async {
        let cell: Cell2 = Arc::default();
        let callbacks = Arc::new(AtomicU64::new(0));
        let expediter = calling_back(&cell, &callbacks);
        let _ = cell.set(expediter.clone());
        let agents = (0..8u64).map(|agent| {
            let expediter = expediter.clone();
            tokio::spawn(async move {
                let run = expediter.run(&format!("agent-{agent}"));
                let mut rng = Rng::new(agent + 1);
                let mut tools: Vec<Tool> = TOOLS.iter().map(|n| Tool::new(&expediter, n)).collect();
                for round in 0..60 {
                    let i = rng.below(TOOLS.len() as u64) as usize;
                    let tool = &mut tools[i];
                    if rng.chance(40) {
                        tool.fail_with("connection refused");
                    } else {
                        tool.heal();
                    }
                    run.start_subtask(SubTask::new(&format!("step {round}"), [TOOLS[i]]))
                        .expect("known tools");
                    let decision = run.decide(TOOLS[i]).await.expect("a known tool");
                    if decision.should_call() {
                        let _ = tool.call().await;
                    }
                    if rng.chance(20) {
                        tokio::task::yield_now().await;
                    }
                }
            })
        });
        for agent in join_all(agents).await {
            agent.expect("an agent panicked");
        }
        let report = expediter.report();
        assert_eq!(
            report.budget.used as usize,
            report.budget.ordinary() + report.budget.systemic_events as usize
        );
        assert!(callbacks.load(Ordering::SeqCst) > 0, "no callback ran");
    });
}
