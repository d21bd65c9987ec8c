//! An attacker's suite: servers (`hostile.js`) that flood, lie, rename, answer the wrong
//! thing or go quiet at the worst moment, and callers that give up mid-call. Each test
//! says the behaviour it checks; tests that expose a defect are ignored with why.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use tower::{Layer, Service, ServiceExt};
use tower_circuit_breaker::expediter::Expediter;
use tower_circuit_breaker::mcp::{
    Down, Fault, McpError, McpServerBuilder, McpTools, RestartPolicy, ServerState, StartError,
};
use tower_circuit_breaker::State;

use crate::common::{
    alive, args, assert_gone, eventually, running, tool_breaker, until, TestResult, PATIENCE,
};
use crate::servers::{self, Servers};

/// A long backoff, so that a test sees the first failure as it is.
fn slow_restarts(builder: McpServerBuilder) -> McpServerBuilder {
    builder.restart(RestartPolicy::new().backoff(Duration::from_secs(30), Duration::from_secs(30)))
}

/// Every line a `record` server read, as JSON.
fn recorded(file: &Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The id of the `tools/call` of `tool` a `record` server read, if it did.
fn call_id(file: &Path, tool: &str) -> Option<Value> {
    recorded(file).into_iter().find_map(|m| {
        (m["method"] == "tools/call" && m["params"]["name"] == tool).then(|| m["id"].clone())
    })
}

/// Whether a `record` server was told that the request `id` is cancelled.
fn told_cancelled(file: &Path, id: &Value) -> bool {
    recorded(file)
        .iter()
        .any(|m| m["method"] == "notifications/cancelled" && m["params"]["requestId"] == *id)
}

fn record_server(servers: &Servers, name: &str, file: &Path) -> McpServerBuilder {
    servers.hostile(name, "record").arg(file)
}

/// This process's resident memory, in bytes (Linux).
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status");
    kb * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_timeout_tells_the_server_the_call_is_cancelled() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let file = servers::scratch("adv-timeout-cancel").join("log");
    let server = record_server(servers, "recorder", &file)
        .call_timeout(Duration::from_millis(300))
        .start()?;
    running(&server).await;
    let error = server
        .tool("hang")
        .oneshot(args(json!({})))
        .await
        .unwrap_err();
    assert!(matches!(error, McpError::Timeout { .. }), "{error}");
    let id = call_id(&file, "hang").expect("the call reached the server");
    eventually("the server is told the call is cancelled", || async {
        told_cancelled(&file, &id)
    })
    .await;
    assert_eq!(server.calls_in_flight(), 0);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_dropped_by_its_caller_mid_flight_is_cancelled_counted_once_and_blames_nobody(
) -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let file = servers::scratch("adv-dropped-call").join("log");
    let server = record_server(servers, "recorder", &file).start()?;
    running(&server).await;
    let breaker = tool_breaker("hang", 1);
    let handle = breaker.handle();
    let mut hang = breaker.layer(server.tool("hang"));
    let mut call = Box::pin(hang.ready().await?.call(args(json!({}))));
    tokio::select! {
        answer = &mut call => panic!("`hang` answered: {:?}", answer.map(|a| a.into_inner())),
        () = eventually("the call reaches the server", || async {
            call_id(&file, "hang").is_some()
        }) => {}
    }
    assert_eq!(server.calls_in_flight(), 1);
    drop(call);
    assert_eq!(server.calls_in_flight(), 0, "dropped, it is out of flight");
    assert_eq!(server.calls_sent(), 1);
    let id = call_id(&file, "hang").unwrap();
    eventually(
        "the server is told the dropped call is cancelled",
        || async { told_cancelled(&file, &id) },
    )
    .await;
    // Neither the tool's breaker nor the server's counts a call its caller gave up on.
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().counts.failures, 0);
    assert_eq!(server.breaker().snapshot().counts.failures, 0);
    // The server is as it was: the next call is answered, and sent once.
    let answer = server.tool("ping").oneshot(args(json!({}))).await?;
    assert_eq!(answer.content[0].as_text().unwrap().text, "pong");
    assert_eq!(server.calls_sent(), 2);
    assert!(server.status().is_running());
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_of_notifications_requests_to_the_client_and_answers_for_other_ids_leave_the_call_its_own_answer(
) -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers
        .hostile("chatty", "chatty")
        .call_timeout(Duration::from_secs(20))
        .start()?;
    let first = running(&server).await;
    for _ in 0..3 {
        let answer = server.tool("ping").oneshot(args(json!({}))).await?;
        assert_eq!(answer.content[0].as_text().unwrap().text, "pong");
    }
    assert_eq!(server.calls_in_flight(), 0);
    assert_eq!(server.calls_sent(), 3);
    assert_eq!(server.breaker().state(), State::Closed);
    assert_eq!(server.breaker().snapshot().counts.failures, 0);
    let status = server.status();
    assert!(status.is_running(), "{status}");
    assert_eq!(status.generation, first.generation);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_that_are_not_tool_results_are_typed_server_faults_never_successes() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers
        .hostile("liar", "bad-results")
        .call_timeout(Duration::from_secs(2))
        .unresponsive_after(100)
        .start()?;
    running(&server).await;
    for tool in [
        "list_shaped",
        "content_string",
        "content_bogus",
        "null_result",
        "error_string",
    ] {
        match server.tool(tool).oneshot(args(json!({}))).await {
            Ok(answer) => panic!("`{tool}`'s answer was believed: {answer:?}"),
            Err(error) => {
                assert!(
                    matches!(error, McpError::Protocol { .. } | McpError::Timeout { .. }),
                    "{tool}: {error}"
                );
                assert_eq!(error.fault(), Fault::Server, "{tool}: {error}");
            }
        }
    }
    assert_eq!(server.calls_in_flight(), 0);
    assert!(server.status().is_running(), "{}", server.status());
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_rpc_error_is_the_tools_failure_and_invalid_params_the_callers_and_neither_the_servers(
) -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers.hostile("errors", "rpc-errors").start()?;
    running(&server).await;

    let internal = tool_breaker("internal", 1);
    let internal_handle = internal.handle();
    let error = internal
        .layer(server.tool("internal"))
        .oneshot(args(json!({})))
        .await
        .unwrap_err();
    let mcp = error.downcast_ref::<McpError>().expect("an MCP error");
    assert!(
        matches!(mcp, McpError::Server { code: -32603, message, .. } if message == "the internal error"),
        "{mcp}"
    );
    assert_eq!(mcp.fault(), Fault::Tool);
    assert_eq!(internal_handle.state(), State::Open, "the tool's failure");

    let invalid = tool_breaker("invalid", 1);
    let invalid_handle = invalid.handle();
    let mut invalid_service = invalid.layer(server.tool("invalid"));
    for _ in 0..3 {
        let error = invalid_service
            .ready()
            .await?
            .call(args(json!({})))
            .await
            .unwrap_err();
        let mcp = error.downcast_ref::<McpError>().expect("an MCP error");
        assert!(matches!(mcp, McpError::InvalidArguments { .. }), "{mcp}");
    }
    assert_eq!(
        invalid_handle.state(),
        State::Closed,
        "the caller's mistake"
    );
    // The server answered every time.
    assert_eq!(server.breaker().state(), State::Closed);
    assert_eq!(server.breaker().snapshot().counts.failures, 0);
    assert!(server.status().is_running());
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_in_the_middle_of_its_tool_list_fails_its_start_with_its_exit(
) -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = slow_restarts(servers.hostile("halfway", "exit-mid-list")).start()?;
    let status = until(&server, "down", |s| matches!(s.state, ServerState::Down(_))).await;
    match &status.state {
        ServerState::Down(Down::StartFailed(StartError::Exited { exit })) => {
            assert_eq!(exit.code(), Some(4), "{exit}");
        }
        other => panic!("expected a start that failed with its exit, got {other:?}"),
    }
    assert_eq!(status.generation, 0, "it never served");
    assert!(status.tools.tools().is_empty(), "half a list is not kept");
    assert_eq!(server.calls_sent(), 0);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crash_loop_limit_at_one_and_at_zero_allows_exactly_that_many_restarts() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    for allowed in [1u32, 0] {
        let server = servers
            .hostile(&format!("brief{allowed}"), "exit-after-init")
            .restart(
                RestartPolicy::new()
                    .backoff(Duration::from_millis(50), Duration::from_millis(50))
                    .crash_loop(allowed, Duration::from_secs(60)),
            )
            .start()?;
        let status = until(&server, "given up", |s| {
            matches!(s.state, ServerState::GaveUp { .. })
        })
        .await;
        assert!(
            matches!(status.state, ServerState::GaveUp { restarts, .. } if restarts == allowed),
            "{status}"
        );
        assert_eq!(status.starts, u64::from(allowed) + 1, "{status}");
        assert_eq!(server.breaker().state(), State::ForcedOpen);
        assert_eq!(server.calls_sent(), 0);
        server.stop().await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_at_a_stop_fail_at_once_typed_and_nothing_is_left_running() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers
        .hostile("hung", "hang-calls")
        .call_timeout(Duration::from_secs(60))
        .start()?;
    let pid = running(&server).await.pid.unwrap();
    let calls: Vec<_> = (0..8)
        .map(|_| tokio::spawn(server.tool("ping").oneshot(args(json!({})))))
        .collect();
    eventually("the calls are in flight", || async {
        server.calls_in_flight() == 8
    })
    .await;
    let stopped_at = tokio::time::Instant::now();
    server.stop().await;
    assert!(!alive(pid), "the process outlived its stop");
    for call in calls {
        let error = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("a call in flight at a stop ends with it")?
            .unwrap_err();
        assert!(matches!(error, McpError::ConnectionLost { .. }), "{error}");
    }
    assert!(stopped_at.elapsed() < Duration::from_secs(10));
    assert_eq!(server.calls_in_flight(), 0);
    assert_eq!(server.calls_sent(), 8);
    let after = server
        .tool("ping")
        .oneshot(args(json!({})))
        .await
        .unwrap_err();
    assert!(matches!(after, McpError::Unavailable { .. }), "{after}");
    assert_eq!(
        server.calls_sent(),
        8,
        "nothing is sent to a stopped server"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_while_the_server_never_answers_its_changed_tool_list_still_stops_it() -> TestResult
{
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let asked = servers::scratch("adv-relist-hang").join("asked");
    let server = servers
        .hostile("relist", "list-changed-hang")
        .arg(&asked)
        .call_timeout(Duration::from_secs(20))
        .stop_timeout(Duration::from_millis(500))
        .start()?;
    let pid = running(&server).await.pid.unwrap();
    eventually("the changed tool list is asked for", || async {
        asked.exists()
    })
    .await;
    let stopping = tokio::time::Instant::now();
    server.stop().await;
    let took = stopping.elapsed();
    let alive_after_stop = alive(pid);
    let state = server.status().state;
    assert_gone(pid, "the server being stopped").await;
    assert!(
        !alive_after_stop,
        "stop() returned after {took:?} with the process {pid} alive (state {state:?})"
    );
    assert_eq!(state, ServerState::Stopped);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_byte_on_stderr_that_is_not_utf8_loses_no_later_line_and_breaks_nothing() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = slow_restarts(servers.hostile("binary", "stderr-binary")).start()?;
    running(&server).await;
    for n in 1..=3 {
        let answer = server.tool("ping").oneshot(args(json!({}))).await;
        let status = server.status();
        assert!(
            answer.is_ok(),
            "call {n} after a stderr byte that is not UTF-8: {:?}; {status}",
            answer.err()
        );
    }
    let error = server
        .tool("die")
        .oneshot(args(json!({})))
        .await
        .unwrap_err();
    assert!(matches!(error, McpError::ConnectionLost { .. }), "{error}");
    // Out of service at once (its connection lost under the call), then down as it died.
    let down = until(&server, "down with its exit", |s| {
        matches!(s.state, ServerState::Down(Down::Exited(_)))
    })
    .await;
    match &down.state {
        ServerState::Down(Down::Exited(exit)) => {
            assert_eq!(exit.code(), Some(3), "{exit}");
            assert_eq!(exit.stderr(), Some("fatal: the reason"), "{exit}");
        }
        other => panic!("expected its exit, got {other:?}"),
    }
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_stderr_line_is_read_within_bounded_memory() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    const FLOOD: u64 = 256 * 1024 * 1024;
    let server = servers
        .hostile("stderr-flood", "stderr-flood")
        .arg(FLOOD.to_string())
        .call_timeout(Duration::from_secs(120))
        .start()?;
    running(&server).await;
    let before = resident_bytes();
    // Answered once (nearly) all of it has been read from the pipe.
    let answer = server.tool("ping").oneshot(args(json!({}))).await?;
    assert_eq!(answer.content[0].as_text().unwrap().text, "pong");
    let grew = resident_bytes().saturating_sub(before);
    server.stop().await;
    assert!(
        grew < 64 * 1024 * 1024,
        "{} MiB of stderr without a newline grew this process by {} MiB",
        FLOOD >> 20,
        grew >> 20
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_part_of_a_tool_definition_the_model_sees_is_held_to_a_size() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers.hostile("fat", "fat-tool").start()?;
    running(&server).await;
    let expediter = Expediter::builder().build()?;
    let tools = McpTools::new(&expediter);
    tools.add_server(&server)?;
    let offer = tools.offered();
    // The checks bound a description to 16 Ki characters and an input schema to 256 KiB:
    // a whole definition offered to the model should stay within about that.
    for tool in &offer.tools {
        let bytes = serde_json::to_vec(tool)?.len();
        assert!(
            bytes <= 300 * 1024,
            "`{}` is offered with a definition of {bytes} bytes (title {:?} bytes, output schema {:?} bytes)",
            tool.name,
            tool.title.as_ref().map(String::len),
            tool.output_schema
                .as_ref()
                .map(|s| serde_json::to_vec(&**s).map_or(0, |v| v.len())),
        );
    }
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_whose_tools_meet_at_one_name_are_refused_not_merged() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let a = servers.hostile("a", "tool-named").arg("b__c").start()?;
    let ab = servers.hostile("a__b", "tool-named").arg("c").start()?;
    running(&a).await;
    running(&ab).await;
    let expediter = Expediter::builder().build()?;
    let tools = McpTools::new(&expediter);
    tools.add_server(&a)?;
    let added = tools.add_server(&ab);
    let offer = tools.offered();
    let routed = tools
        .lookup("a__b__c")
        .map(|(server, tool)| format!("server `{}` tool `{tool}`", server.name()));
    let said = offer
        .withheld
        .iter()
        .any(|w| w.line.contains("a__b") && w.line.contains('c'));
    a.stop().await;
    ab.stop().await;
    assert!(
        added.is_err() || said,
        "both servers' tools are `a__b__c`; add_server said {added:?}, the name calls {routed:?}, and the offer is: {offer}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_renaming_its_tools_on_every_list_cannot_grow_the_tool_set_without_bound(
) -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    const MAX_TOOLS: usize = 8;
    let server = servers
        .hostile("shifting", "renaming")
        .max_tools(MAX_TOOLS)
        .start()?;
    running(&server).await;
    let expediter = Expediter::builder().build()?;
    let tools = McpTools::new(&expediter);
    tools.add_server(&server)?;
    let status = until(&server, "renamed 100 times", |s| {
        s.tools.names().any(|n| {
            n.strip_prefix("t_")
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|n| n >= 100)
        })
    })
    .await;
    let (declared, vanished) = (expediter.tools().len(), status.vanished.len());
    server.stop().await;
    assert!(
        declared <= 2 * MAX_TOOLS && vanished <= 2 * MAX_TOOLS,
        "with max_tools {MAX_TOOLS}: {declared} tools declared in the expediter, {vanished} kept as vanished"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_server_or_tool_says_in_an_error_never_shows_a_secret_in_its_message_debug_or_report(
) -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    // It says back a URL's password, a key, a bearer token, and its own command line:
    // the value of `--token` and of `--auth=`.
    let server = servers
        .hostile("leaky", "secret-errors")
        .args(["--token", "ARGSECRET1", "--auth=ARGSECRET2"])
        .start()?;
    running(&server).await;
    let secrets = [
        "hunter2",
        "QUERYSECRET",
        "sk-TOKENSECRET",
        "ARGSECRET1",
        "ARGSECRET2",
    ];
    for tool in ["rpc_secret", "tool_secret", "invalid_secret"] {
        let error = tokio::time::timeout(PATIENCE, server.tool(tool).oneshot(args(json!({}))))
            .await?
            .expect_err("every tool of it fails");
        match (tool, &error) {
            ("rpc_secret", McpError::Server { .. })
            | ("tool_secret", McpError::Tool { .. })
            | ("invalid_secret", McpError::InvalidArguments { .. }) => {}
            _ => panic!("{tool}: {error:?}"),
        }
        let shown = format!("{error} | {error:?}");
        // What it said is still there to read, its secrets out.
        assert!(
            shown.contains("https://[redacted]@api.example.com/v1"),
            "{shown}"
        );
        assert!(
            shown.contains("--token [redacted] --auth=[redacted]"),
            "{shown}"
        );
        for secret in secrets {
            assert!(!shown.contains(secret), "{tool}: {secret} shown: {shown}");
        }
    }
    // The tool's own answer stays whole for the caller.
    let error = tokio::time::timeout(
        PATIENCE,
        server.tool("tool_secret").oneshot(args(json!({}))),
    )
    .await?
    .expect_err("the tool fails");
    let McpError::Tool { result, .. } = &error else {
        panic!("{error:?}")
    };
    let text = &result.content[0].as_text().expect("a text").text;
    assert!(
        text.contains("hunter2"),
        "the result is the caller's, as it came: {text}"
    );

    // Through an expediter: the failure it records and reports.
    let expediter = Expediter::builder().build()?;
    let tools = McpTools::new(&expediter);
    tools.add_server(&server)?;
    for tool in ["leaky__rpc_secret", "leaky__tool_secret"] {
        tokio::time::timeout(PATIENCE, tools.execute(tool, args(json!({})))).await??;
    }
    let report = format!("{} | {:?}", expediter.report(), expediter.report());
    assert!(report.contains("[redacted]"), "{report}");
    for secret in secrets {
        assert!(!report.contains(secret), "{secret} in the report: {report}");
    }
    server.stop().await;
    Ok(())
}
