//! MCP tools under an expediter: the offer follows the servers, a dead server's tools
//! are routed away from without spending the budget, and they come back.

use std::time::Duration;

use serde_json::json;
use tower_circuit_breaker::expediter::{
    Action, Alternative, Attempt, Availability, Expediter, SkipReason, ToolSpec,
};
use tower_circuit_breaker::mcp::{Down, McpServer, McpTools, RestartPolicy, ServerState};

use crate::common::{args, kill_9, running, until, TestResult, PATIENCE};
use crate::servers::{self, quick};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_servers_tools_leave_the_offer_with_why_and_return_after_its_restart() -> TestResult
{
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let dir = servers::scratch("agent");
    let memory = servers
        .memory("memory", &dir.join("memory.jsonl"))
        .restart(RestartPolicy::new().backoff(Duration::from_secs(2), Duration::from_secs(4)))
        .start()?;
    let everything = servers.everything("everything").start()?;
    let expediter = Expediter::builder().build()?;
    let tools = McpTools::builder(&expediter)
        .spec(|info| {
            // Searching the memory can fall back to echoing the question back.
            let spec = info.default_spec();
            if info.name() == "memory__search_nodes" {
                spec.alternative(Alternative::high(
                    "everything__echo",
                    "echo the query",
                    "no memory at all",
                ))
            } else {
                spec
            }
        })
        .build();
    // The alternative must be known first.
    running(&everything).await;
    tools.add_server(&everything)?;
    running(&memory).await;
    tools.add_server(&memory)?;

    let offer = tools.offered();
    assert!(offer.offers("memory__read_graph"), "{offer}");
    assert!(offer.offers("everything__get-sum"), "{offer}");
    assert!(offer.withheld.is_empty(), "{offer}");
    let definition = offer
        .tools
        .iter()
        .find(|t| t.name == "memory__create_entities")
        .unwrap();
    assert!(
        definition.input_schema.get("properties").is_some(),
        "the server's own schema"
    );

    let made = tools
        .execute(
            "memory__create_entities",
            args(json!({"entities": [{"name": "alice", "entityType": "person", "observations": ["likes tea"]}]})),
        )
        .await?;
    assert!(matches!(made, Attempt::Made { result: Ok(_), .. }));

    // The memory server dies.
    let pid = memory.status().pid.unwrap();
    kill_9(pid);
    let down = until(&memory, "down", |s| {
        matches!(s.state, ServerState::Down(Down::Exited(_)))
    })
    .await;
    let offer = tools.offered();
    assert!(!offer.offers("memory__read_graph"), "{offer}");
    assert!(
        offer.offers("everything__get-sum"),
        "the other server's tools stay"
    );
    let line = &offer
        .withheld
        .iter()
        .find(|w| &*w.name == "memory__read_graph")
        .unwrap()
        .line;
    assert!(
        line.contains("server `memory` was killed by signal 9"),
        "{line}"
    );
    assert!(
        line.contains("restarted when its breaker lets a probe through"),
        "{line}"
    );
    assert_eq!(
        down.tool_availability("read_graph").0,
        Availability::Unavailable
    );

    // Its tools are routed away from at once: no call, no budget.
    for _ in 0..3 {
        let attempt = tools
            .execute("memory__search_nodes", args(json!({"query": "alice"})))
            .await?;
        match attempt {
            Attempt::Skipped { reason, route, .. } => {
                assert_eq!(reason, SkipReason::Unavailable);
                assert!(route.to_string().contains("everything__echo"), "{route}");
            }
            other => panic!("expected a skip, got {:?}", other.decision()),
        }
    }
    let report = expediter.report();
    assert_eq!(report.budget.used, 0, "{report}");
    assert!(report.next_steps.iter().any(|s| s
        .starts_with("memory__read_graph is unavailable: server `memory` was killed by signal 9")));
    assert_eq!(memory.calls_sent(), 1);

    // It comes back: its tools are offered again, and answer (its graph was kept in its
    // file).
    running(&memory).await;
    let offer = tools.offered();
    assert!(offer.offers("memory__read_graph"), "{offer}");
    assert!(offer.withheld.is_empty(), "{offer}");
    let attempt = tools
        .execute("memory__search_nodes", args(json!({"query": "alice"})))
        .await?;
    let Attempt::Made { decision, result } = attempt else {
        panic!("not called")
    };
    assert_eq!(decision.action, Action::Call);
    let text = result?.into_inner().content[0]
        .as_text()
        .unwrap()
        .text
        .clone();
    assert!(text.contains("likes tea"), "{text}");
    memory.stop().await;
    everything.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offer_right_after_each_restart_has_every_tool_back_and_none_while_down() -> TestResult
{
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let dir = servers::scratch("offer-restarts");
    let memory = servers
        .memory("memory", &dir.join("memory.jsonl"))
        .start()?;
    let expediter = Expediter::builder().build()?;
    let tools = McpTools::new(&expediter);
    let listed = running(&memory).await.tools.tools().len();
    tools.add_server(&memory)?;
    for round in 0..3 {
        // Asked the moment the status changes, before any observer has run.
        let mut watch = memory.watch();
        kill_9(memory.status().pid.unwrap());
        tokio::time::timeout(PATIENCE, watch.wait_for(|s| !s.is_running())).await??;
        let offer = tools.offered();
        assert!(offer.tools.is_empty(), "round {round}: {offer}");
        assert_eq!(offer.withheld.len(), listed, "round {round}: {offer}");
        tokio::time::timeout(PATIENCE, watch.wait_for(|s| s.is_running())).await??;
        let offer = tools.offered();
        assert_eq!(offer.tools.len(), listed, "round {round}: {offer}");
        assert!(offer.withheld.is_empty(), "round {round}: {offer}");
    }
    assert_eq!(expediter.report().budget.used, 0);
    memory.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expected_tool_of_a_server_that_cannot_start_is_unavailable_and_spends_no_budget(
) -> TestResult {
    if servers::get().is_none() {
        return Ok(());
    }
    let server = quick(McpServer::builder("ghost", "/nonexistent/mcp-server"))
        .expect_tool("lookup")
        .restart(RestartPolicy::new().backoff(Duration::from_secs(10), Duration::from_secs(10)))
        .start()?;
    let expediter = Expediter::builder()
        .tool(ToolSpec::new("ask_user").fallback("ask the user"))
        .build()?;
    let tools = McpTools::new(&expediter);
    tools.add_server(&server)?;
    assert!(server.wait_ready(PATIENCE).await.is_err());
    let offer = tools.offered();
    assert_eq!(offer.names(), ["ask_user"]);
    let line = &offer.withheld[0].line;
    assert!(
        line.starts_with("ghost__lookup is not offered: server `ghost` could not start: cannot run `/nonexistent/mcp-server`"),
        "{line}"
    );
    for _ in 0..5 {
        let decision = expediter.default_run().decide("ghost__lookup").await?;
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
    }
    assert_eq!(expediter.report().budget.used, 0);
    assert_eq!(server.calls_sent(), 0);
    // The model is never offered a tool a server does not list.
    assert!(tools.service("ghost__nope").is_err());
    server.stop().await;
    Ok(())
}
