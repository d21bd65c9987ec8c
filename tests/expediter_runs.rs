//! Several agents sharing one expediter: the tools, the budget of the cycle, cascades
//! and steps are shared; each agent's run keeps its own sub-tasks and degradations.

use futures::future::join_all;
mod common;

use common::tool::Tool;
use common::{bash_spec, grep_spec, read_spec};
use tower_circuit_breaker::error::BoxError;
use tower_circuit_breaker::expediter::{Action, Expediter, PauseReason, SubTask, WorkStatus};

type TestResult = Result<(), BoxError>;

fn expediter() -> Expediter {
    Expediter::builder()
        .tool(grep_spec())
        .tool(bash_spec())
        .tool(read_spec())
        .failure_budget(8)
        .build()
        .expect("a valid map")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_keep_their_own_sub_tasks_and_share_the_budget() -> TestResult {
    let expediter = expediter();
    let agents = (0..4).map(|agent| {
        let expediter = expediter.clone();
        tokio::spawn(async move {
            let run = expediter.run(&format!("agent-{agent}"));
            let mut read = Tool::new(&expediter, "Read");
            // The same sub-task names in every run.
            for task in ["Read configuration files", "Summarise"] {
                let plan = run.start_subtask(SubTask::new(task, ["Read"]))?;
                assert!(plan.can_run(), "{plan:?}");
                let decision = run.decide("Read").await?;
                assert_eq!(decision.action, Action::Call);
                read.call().await?;
                tokio::task::yield_now().await;
                run.complete_subtask(task)?;
            }
            // Each agent fails Bash once: the budget is everyone's.
            let mut bash = Tool::new(&expediter, "Bash");
            run.start_subtask(SubTask::new("Run test suite", ["Bash"]))?;
            bash.fail_with(&format!("bash: agent-{agent}: exit status 2"));
            if run.decide("Bash").await?.should_call() {
                assert!(bash.call().await.is_err());
            }
            run.fail_subtask("Run test suite", "exit status 2")?;
            Ok::<_, BoxError>(run)
        })
    });
    let runs: Vec<_> = join_all(agents)
        .await
        .into_iter()
        .map(|r| r.expect("an agent panicked"))
        .collect::<Result<_, _>>()?;

    let all = expediter.report();
    assert_eq!(all.completed.len(), 8, "two per run");
    assert_eq!(all.incomplete.len(), 4);
    assert_eq!(all.step, 12, "one step per decision, shared");
    // Bash opened after 3 of the 4 agents' failures; the 4th agent was skipped.
    assert_eq!(all.budget.used, 3);
    assert_eq!(all.budget.failures.len(), 3);
    let text = all.to_string();
    assert!(
        text.contains("[agent-0] Read configuration files (SUCCESS)"),
        "{text}"
    );

    for run in &runs {
        let report = run.report();
        assert_eq!(report.run.as_deref(), Some(run.name()));
        let done: Vec<&str> = report.completed.iter().map(|w| &*w.name).collect();
        assert_eq!(done, ["Read configuration files", "Summarise"]);
        assert!(report
            .completed
            .iter()
            .chain(&report.incomplete)
            .all(|w| w.run.as_deref() == Some(run.name())));
        assert_eq!(report.budget, all.budget, "the budget is shared");
        assert_eq!(report.tools, all.tools, "tool health is shared");
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn one_runs_failures_pause_every_run_and_routes_are_recorded_for_the_run_that_took_them(
) -> TestResult {
    let expediter = Expediter::builder()
        .tool(grep_spec())
        .tool(bash_spec())
        .tool(read_spec())
        .build()?;
    let (alice, bob) = (expediter.run("alice"), expediter.run("bob"));
    let mut grep = Tool::new(&expediter, "Grep");
    grep.fail_with("grep: index corrupted");
    for _ in 0..3 {
        assert!(alice.decide("Grep").await?.should_call());
        assert!(grep.call().await.is_err());
    }
    // Bob's decision about the open Grep is routed to Bash: Bob's degradation.
    let decision = bob.decide("Grep").await?;
    assert!(matches!(decision.action, Action::Skip { .. }), "{decision}");
    assert_eq!(bob.report().degradations.len(), 1);
    assert!(alice.report().degradations.is_empty());
    assert_eq!(
        expediter.report().degradations[0].run.as_deref(),
        Some("bob")
    );

    // Alice's Bash failures use up the budget: Bob pauses too.
    let mut bash = Tool::new(&expediter, "Bash");
    bash.fail_with("bash: permission denied");
    for _ in 0..2 {
        assert!(alice.decide("Bash").await?.should_call());
        assert!(bash.call().await.is_err());
    }
    let decision = bob.decide("Read").await?;
    assert!(
        matches!(
            decision.action,
            Action::Pause {
                reason: PauseReason::BudgetExhausted,
                ..
            }
        ),
        "{decision}"
    );
    let plan = bob.start_subtask(SubTask::new("Read configuration files", ["Read"]))?;
    assert!(matches!(plan.status, WorkStatus::NotAttempted { .. }));

    // Closing a run gives its last report and forgets it.
    let last = bob.close();
    assert_eq!(last.incomplete.len(), 1);
    assert!(expediter.run("bob").report().incomplete.is_empty());
    assert!(expediter
        .report()
        .incomplete
        .iter()
        .all(|w| w.run.as_deref() != Some("bob")));
    Ok(())
}

#[test]
fn the_expediters_public_types_can_be_shared_across_tasks() {
    fn shared<T: Send + Sync + 'static>() {}
    fn sent<T: Send>(_: &T) {}
    use tower_circuit_breaker::expediter::{
        Blocker, Decision, NextTry, StatusReport, ToolClassifier, ToolLayer, ToolOffer, ToolSpec,
        Unusable,
    };
    shared::<Expediter>();
    shared::<tower_circuit_breaker::expediter::Run>();
    shared::<ToolSpec>();
    shared::<ToolLayer>();
    shared::<ToolClassifier>();
    shared::<StatusReport>();
    shared::<ToolOffer>();
    shared::<Decision>();
    shared::<Blocker>();
    shared::<NextTry>();
    shared::<Unusable>();
    let expediter = expediter();
    sent(&expediter.default_run().decide("Read"));
    sent(&expediter.run("a").decide("Read"));
}
