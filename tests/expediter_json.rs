#![cfg(feature = "serde")]
//! The expediter's status report and decisions as JSON (the `serde` feature): every
//! kind of value they hold survives serialize → deserialize unchanged, and the JSON
//! has the shape a dashboard or another agent reads.
//!
//! Run with `cargo test --features serde --test expediter_json`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::Value;
use tower::util::BoxService;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
mod common;

use common::{bash_spec, edit_spec, grep_spec, read_spec, websearch_spec};
use tower_circuit_breaker::error::BoxError;
use tower_circuit_breaker::expediter::{
    Action, Availability, Decision, Degradation, Expediter, Freshness, Labelled, PauseReason,
    Route, StatusReport, SubTask, ToolOffer, ToolSpec, WorkStatus,
};
use tower_circuit_breaker::Answer;

type TestResult = Result<(), BoxError>;
type Svc = BoxService<String, Answer<String>, BoxError>;

fn expediter() -> Expediter {
    Expediter::builder()
        .tool(grep_spec())
        .tool(bash_spec())
        .tool(read_spec().precheck(|| async { Availability::Available }))
        .tool(edit_spec())
        .tool(websearch_spec())
        .failure_budget(10)
        .build()
        .expect("a valid capability map")
}

/// A tool service that always fails with `message`, or always answers.
fn tool(expediter: &Expediter, name: &'static str, failing: Option<&'static str>) -> Svc {
    let inner = service_fn(move |request: String| async move {
        match failing {
            Some(message) => Err(std::io::Error::other(message)),
            None => Ok(format!("{name} answered {request}")),
        }
    });
    BoxService::new(
        ServiceBuilder::new()
            .layer(expediter.layer(name).expect("a known tool"))
            .service(inner),
    )
}

/// Decides and calls `n` times; returns the decisions.
async fn run(expediter: &Expediter, name: &str, svc: &mut Svc, n: usize) -> Vec<Decision> {
    let mut decisions = Vec::new();
    for i in 0..n {
        let decision = expediter
            .default_run()
            .decide(name)
            .await
            .expect("a known tool");
        if decision.should_call() {
            let _ = svc.ready().await.unwrap().call(format!("{name}-{i}")).await;
        }
        decisions.push(decision);
    }
    decisions
}

fn round_trip<T>(value: &T) -> T
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let json = serde_json::to_string(value).expect("serializes");
    serde_json::from_str(&json).expect("deserializes")
}

fn keys(value: &Value) -> BTreeSet<&str> {
    value
        .as_object()
        .expect("a JSON object")
        .keys()
        .map(String::as_str)
        .collect()
}

/// A report with something in every part: finished, failed, deferred and in-progress
/// sub-tasks, an open tool, degradations of all three kinds, budget lines.
async fn busy_report(expediter: &Expediter) -> StatusReport {
    let mut read = tool(expediter, "Read", None);
    let mut edit = tool(expediter, "Edit", Some("edit: merge conflict"));
    let mut bash = tool(expediter, "Bash", Some("bash: permission denied"));
    run(expediter, "Read", &mut read, 1).await;
    run(expediter, "Edit", &mut edit, 1).await;
    run(expediter, "Bash", &mut bash, 4).await;
    expediter.handle("Grep").unwrap().force_open();
    expediter
        .default_run()
        .plan([
            SubTask::new("Read configuration files", ["Read"]),
            SubTask::new("Search for deprecated patterns", ["Grep"]),
            SubTask::new("Run test suite", ["Bash"]),
            SubTask::new("Update documentation", ["Edit"]),
        ])
        .unwrap();
    expediter
        .default_run()
        .complete_subtask("Read configuration files")
        .unwrap();
    expediter
        .default_run()
        .fail_subtask("Update documentation", "edit: merge conflict")
        .unwrap();
    expediter.default_run().decide("Grep").await.unwrap();
    expediter.set_user_available(false);
    expediter.default_run().decide("Bash").await.unwrap();
    expediter.set_user_available(true);
    expediter.report()
}

#[tokio::test(start_paused = true)]
async fn status_report_round_trips_through_json() -> TestResult {
    let expediter = expediter();
    let report = busy_report(&expediter).await;
    // The report really holds every kind of value.
    assert!(report
        .incomplete
        .iter()
        .any(|w| matches!(w.status, WorkStatus::Deferred { .. })));
    assert!(report
        .incomplete
        .iter()
        .any(|w| matches!(w.status, WorkStatus::Failed { .. })));
    assert!(report
        .incomplete
        .iter()
        .any(|w| w.status == WorkStatus::InProgress));
    assert!(!report.completed.is_empty());
    assert!(report
        .degradations
        .iter()
        .any(|d| matches!(d.route, Route::Alternative { .. })));
    assert!(report
        .degradations
        .iter()
        .any(|d| matches!(d.route, Route::Manual { .. })));
    assert!(report
        .degradations
        .iter()
        .any(|d| matches!(d.route, Route::ReduceScope { .. })));
    assert!(report.tools.iter().any(|t| t.availability.is_some()));
    assert!(!report.budget.failures.is_empty());

    assert_eq!(round_trip(&report), report);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn paused_reports_round_trip_through_json() -> TestResult {
    // A systemic pause: the report carries the systemic part.
    let expediter = expediter();
    let mut grep = tool(&expediter, "Grep", Some("connection refused"));
    let mut bash = tool(&expediter, "Bash", Some("connection refused"));
    run(&expediter, "Grep", &mut grep, 3).await;
    run(&expediter, "Bash", &mut bash, 3).await;
    let report = expediter.report();
    assert!(report.systemic.is_some());
    assert_eq!(round_trip(&report), report);
    let json = serde_json::to_value(&report)?;
    assert_eq!(json["systemic"]["signature"], "connection refused");
    assert_eq!(json["systemic"]["resolved"], false);
    assert_eq!(
        json["systemic"]["tools"],
        serde_json::json!(["Grep", "Bash"])
    );

    // A budget pause: work not attempted, and the headline.
    let expediter = Expediter::builder()
        .tool(
            ToolSpec::new("Bash")
                .provides("command execution")
                .fallback("report commands that need to be run manually"),
        )
        .failure_budget(1)
        .build()?;
    let mut bash = tool(&expediter, "Bash", Some("bash: exit status 2"));
    run(&expediter, "Bash", &mut bash, 1).await;
    expediter
        .default_run()
        .start_subtask(SubTask::new("Deploy to staging", ["Bash"]))?;
    let report = expediter.report();
    assert_eq!(report.headline, "FAILURE BUDGET EXHAUSTED — PAUSING");
    assert_eq!(round_trip(&report), report);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn status_report_json_has_the_expected_keys() -> TestResult {
    let expediter = expediter();
    let report = busy_report(&expediter).await;
    let json = serde_json::to_value(&report)?;
    assert_eq!(
        keys(&json),
        BTreeSet::from([
            "headline",
            "run",
            "step",
            "completed",
            "incomplete",
            "tools",
            "budget",
            "degradations",
            "systemic",
            "next_steps",
        ])
    );
    assert_eq!(json["headline"], report.headline.as_str());
    assert_eq!(json["step"], report.step);
    assert!(json["systemic"].is_null());
    assert_eq!(
        keys(&json["budget"]),
        BTreeSet::from([
            "used",
            "limit",
            "cycle",
            "systemic_events",
            "probe_allowance",
            "failures"
        ])
    );
    assert_eq!(json["budget"]["limit"], 10);
    assert_eq!(
        keys(&json["budget"]["failures"][0]),
        BTreeSet::from(["tool", "message", "step", "systemic"])
    );
    assert_eq!(
        keys(&json["tools"][0]),
        BTreeSet::from([
            "name",
            "state",
            "killed",
            "consecutive_failures",
            "last_failure_step",
            "last_failure",
            "last_success_step",
            "failed_probes",
            "availability",
            "unusable",
            "next_try",
        ])
    );
    let bash = json["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "Bash")
        .unwrap();
    assert_eq!(bash["state"], "open");
    assert_eq!(bash["last_failure"], "bash: permission denied");
    assert_eq!(bash["unusable"], serde_json::json!({ "why": "open" }));
    assert_eq!(bash["next_try"]["next"], "probe");
    let grep = json["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "Grep")
        .unwrap();
    assert_eq!(grep["state"], "forced_open");
    let read = json["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "Read")
        .unwrap();
    assert_eq!(read["availability"], "available");

    let deferred = json["incomplete"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "Run test suite")
        .unwrap();
    assert_eq!(
        keys(deferred),
        BTreeSet::from(["run", "name", "tools", "status", "step", "degradations"])
    );
    assert_eq!(deferred["status"]["status"], "deferred");
    let blocker = &deferred["status"]["blocked_by"][0];
    assert_eq!(
        keys(blocker),
        BTreeSet::from(["tool", "unusable", "alternatives", "next_try", "fallback"])
    );
    assert_eq!(blocker["tool"], "Bash");
    assert_eq!(blocker["unusable"]["why"], "open");
    assert_eq!(
        blocker["fallback"],
        "report commands that need to be run manually"
    );
    assert_eq!(json["completed"][0]["status"]["status"], "done");
    assert_eq!(
        keys(&json["degradations"][0]),
        BTreeSet::from(["run", "tool", "route", "first_step", "last_step", "times"])
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn decisions_round_trip_through_json() -> TestResult {
    let expediter = expediter();
    let mut bash = tool(&expediter, "Bash", Some("bash: exit status 2"));
    let mut decisions = run(&expediter, "Bash", &mut bash, 6).await;
    expediter.handle("Grep")?.force_open();
    decisions.push(expediter.default_run().decide("Grep").await?);
    expediter.set_user_available(false);
    decisions.push(expediter.default_run().decide("Bash").await?);
    let actions: Vec<&str> = decisions.iter().map(|d| d.action.as_str()).collect();
    assert_eq!(
        actions,
        ["CALL", "CALL", "CALL", "SKIP", "SKIP", "PROBE", "SKIP", "SKIP"]
    );
    decisions.push(Decision {
        tool: Arc::from("Read"),
        step: 99,
        action: Action::Pause {
            reason: PauseReason::SystemicPause,
            detail: "multiple tools failed with connection refused".into(),
        },
    });
    for decision in &decisions {
        assert_eq!(&round_trip(decision), decision);
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn decision_json_names_its_action_reason_and_route() -> TestResult {
    let expediter = expediter();
    expediter.handle("Grep")?.force_open();
    let decision = expediter.default_run().decide("Grep").await?;
    let json = serde_json::to_value(&decision)?;
    assert_eq!(keys(&json), BTreeSet::from(["tool", "step", "action"]));
    assert_eq!(json["tool"], "Grep");
    assert_eq!(json["step"], decision.step);
    assert_eq!(json["action"]["action"], "skip");
    assert_eq!(json["action"]["reason"], "forced_open");
    assert_eq!(
        json["action"]["route"],
        serde_json::json!({
            "route": "alternative",
            "tool": "Bash",
            "method": "rg or grep command",
            "degradation": "loses Grep's built-in output formatting",
            "level": "low",
        })
    );
    let call = serde_json::to_value(expediter.default_run().decide("Read").await?)?;
    assert_eq!(call["action"], serde_json::json!({ "action": "call" }));

    let pause = Decision {
        tool: Arc::from("Bash"),
        step: 7,
        action: Action::Pause {
            reason: PauseReason::BudgetExhausted,
            detail: "failure budget exhausted (5 / 5)".into(),
        },
    };
    let json = serde_json::to_value(&pause)?;
    assert_eq!(json["action"]["action"], "pause");
    assert_eq!(json["action"]["reason"], "budget_exhausted");
    let manual = serde_json::to_value(Route::Manual {
        ask: Arc::from("ask the user which files to examine"),
    })?;
    assert_eq!(manual["route"], "manual");
    let reduce = serde_json::to_value(Route::ReduceScope {
        note: "SKIPPED: content search across files — no tools available".into(),
    })?;
    assert_eq!(reduce["route"], "reduce_scope");
    assert_eq!(serde_json::to_value(Degradation::High)?, "high");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn tool_offer_round_trips_through_json() -> TestResult {
    let expediter = expediter();
    expediter.handle("Bash")?.force_open();
    let offer = expediter.offered_tools();
    assert_eq!(offer.withheld.len(), 1);
    assert_eq!(round_trip(&offer), offer);
    let json = serde_json::to_value(&offer)?;
    assert_eq!(keys(&json), BTreeSet::from(["offered", "withheld"]));
    assert_eq!(json["withheld"][0]["name"], "Bash");
    let _: ToolOffer = serde_json::from_value(json)?;
    Ok(())
}

#[test]
fn freshness_labels_round_trip_through_json() {
    let values = [
        Labelled::new("port = 8080".to_string(), Freshness::Fresh),
        Labelled::new(
            "port = 8080".to_string(),
            Freshness::stale(UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
        ),
        Labelled::new(
            "config.rs:3".to_string(),
            Freshness::Cached {
                tool: "Grep".into(),
            },
        ),
        Labelled::new(
            "release notes".to_string(),
            Freshness::Unverified {
                tool: "WebSearch".into(),
                date: "2026-11-01".into(),
            },
        ),
        Labelled::new("?".to_string(), Freshness::Unknown),
    ];
    for value in &values {
        assert_eq!(&round_trip(value), value);
    }
    let json = serde_json::to_value(&values[1]).unwrap();
    assert_eq!(json["freshness"]["freshness"], "stale");
    assert_eq!(json["freshness"]["retrieved_at"], "2023-11-14T22:13:20Z");
}
