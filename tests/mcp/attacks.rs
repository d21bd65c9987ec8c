//! Servers that break the protocol on purpose (`hostile.js`), and calls racing
//! restarts: what a server sends is checked before it is believed, every failure is a
//! typed error, nothing panics, nothing is left running.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tower::{Service, ServiceExt};
use tower_circuit_breaker::expediter::Expediter;
use tower_circuit_breaker::mcp::{
    Down, McpError, McpServer, McpServerBuilder, McpTools, RestartPolicy, ServerState, StartError,
};
use tower_circuit_breaker::State;

use crate::common::{alive, args, eventually, kill_9, running, until, TestResult};
use crate::servers::{self, quick, shell_quote};

/// A long backoff, so that a test sees the first failure as it is.
fn slow_restarts(builder: McpServerBuilder) -> McpServerBuilder {
    builder.restart(RestartPolicy::new().backoff(Duration::from_secs(30), Duration::from_secs(30)))
}

/// The first start's failure.
async fn start_failure(server: &McpServer) -> StartError {
    let status = until(server, "down", |s| matches!(s.state, ServerState::Down(_))).await;
    match status.state {
        ServerState::Down(Down::StartFailed(error)) => error,
        other => panic!("expected a failed start, got {other:?}"),
    }
}

/// Starts the hostile server in `mode` (through `sh`, which writes its pid to a file
/// before it becomes the server) with the start timeout `timeout`; returns how its first
/// start failed, once its process is gone, and the server.
async fn start_that_never_answers(mode: &str, timeout: Duration) -> (StartError, McpServer) {
    let dir = servers::scratch(mode);
    let pid_file = dir.join("pid");
    let hostile = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/hostile.js");
    let script = format!(
        "echo $$ > {}; exec node {} {mode}",
        shell_quote(&pid_file),
        shell_quote(&hostile)
    );
    let server = slow_restarts(quick(
        McpServer::builder("hostile", "sh").args(["-c", &script]),
    ))
    .start_timeout(timeout)
    .start()
    .expect("valid settings");
    let error = start_failure(&server).await;
    let pid = || {
        std::fs::read_to_string(&pid_file)
            .ok()?
            .trim()
            .parse::<u32>()
            .ok()
    };
    eventually("its pid is written", || async { pid().is_some() }).await;
    let pid = pid().unwrap();
    eventually("the process that never answered is killed", || async move {
        !alive(pid)
    })
    .await;
    (error, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_printing_garbage_fails_its_start_in_time_and_is_killed() -> TestResult {
    if servers::get().is_none() {
        return Ok(());
    }
    let (error, server) = start_that_never_answers("garbage", Duration::from_secs(1)).await;
    assert_eq!(
        error,
        StartError::Timeout {
            step: "initialize",
            after: Duration::from_secs(1)
        }
    );
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_before_the_first_message_is_skipped() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers.hostile("hostile", "garbage-first").start()?;
    running(&server).await;
    let answer = server.tool("ping").oneshot(args(json!({}))).await?;
    assert_eq!(answer.content[0].as_text().unwrap().text, "pong");
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_hangs_on_initialize_times_out_and_is_killed() -> TestResult {
    if servers::get().is_none() {
        return Ok(());
    }
    let (error, server) = start_that_never_answers("silent", Duration::from_millis(800)).await;
    assert!(
        matches!(
            error,
            StartError::Timeout {
                step: "initialize",
                ..
            }
        ),
        "{error}"
    );
    let why = server.status().unavailable_because().unwrap();
    assert!(
        why.contains("could not start: it did not answer initialize within 800ms"),
        "{why}"
    );
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_list_too_long_or_without_end_is_refused_whole() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let many = slow_restarts(
        servers
            .hostile("many", "many-tools")
            .arg("5000")
            .max_tools(100),
    )
    .start()?;
    let endless = slow_restarts(servers.hostile("endless", "endless-pages")).start()?;
    let error = start_failure(&many).await;
    assert_eq!(
        error,
        StartError::ToolList {
            message: "more than 100 tools".into()
        }
    );
    let error = start_failure(&endless).await;
    assert_eq!(
        error,
        StartError::ToolList {
            message: "more than 64 pages".into()
        }
    );
    assert!(many.status().tools.tools().is_empty());
    many.stop().await;
    endless.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_that_break_the_rules_are_refused_with_why_and_never_offered() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers.hostile("hostile", "bad-tools").start()?;
    let status = running(&server).await;
    let names: Vec<&str> = status.tools.names().collect();
    assert_eq!(names, ["good"]);
    let refused: Vec<String> = status
        .tools
        .refused()
        .iter()
        .map(|r| r.to_string())
        .collect();
    assert_eq!(refused.len(), 8, "{refused:#?}");
    assert!(
        refused
            .iter()
            .any(|r| r.starts_with("`has space`: its name has ' '")),
        "{refused:#?}"
    );
    assert!(refused
        .iter()
        .any(|r| r.starts_with("`no_schema_type`: its input schema has no type")));
    assert!(refused
        .iter()
        .any(|r| r.starts_with("`good`: the server lists it twice")));
    assert!(refused
        .iter()
        .any(|r| r.starts_with("`wordy`: its description is 100000 characters")));
    assert!(
        refused.iter().any(|r| r.starts_with("`evil\\u{1b}[2J`")),
        "{refused:#?}"
    );

    let expediter = Expediter::builder().build()?;
    let tools = McpTools::new(&expediter);
    tools.add_server(&server)?;
    let offer = tools.offered();
    assert_eq!(offer.names(), ["hostile__good"]);
    assert_eq!(expediter.tools().len(), 1, "refused tools are not declared");
    let error = server
        .tool("array_schema")
        .oneshot(args(json!({})))
        .await
        .unwrap_err();
    assert!(matches!(error, McpError::UnknownTool { .. }), "{error}");
    assert_eq!(server.calls_sent(), 0);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_or_oversized_tool_list_fails_the_start() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let malformed = slow_restarts(servers.hostile("malformed", "malformed-list"))
        .start_timeout(Duration::from_secs(2))
        .start()?;
    let huge = slow_restarts(servers.hostile("huge", "huge-list"))
        .start_timeout(Duration::from_secs(2))
        .max_message_bytes(64 * 1024)
        .start()?;
    for server in [&malformed, &huge] {
        let error = start_failure(server).await;
        // Not believed: the answer is dropped, and the start runs out of time.
        assert!(
            matches!(
                error,
                StartError::Timeout {
                    step: "tools/list",
                    ..
                } | StartError::ToolList { .. }
            ),
            "{}: {error}",
            server.name()
        );
        server.stop().await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_removed_between_list_and_call_is_reported_gone_and_never_retried() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers.hostile("hostile", "vanish").start()?;
    running(&server).await;
    let breaker = crate::common::tool_breaker("vanishing", 1);
    let handle = breaker.handle();
    let mut vanishing = tower::Layer::layer(&breaker, server.tool("vanishing"));
    let error = vanishing
        .ready()
        .await?
        .call(args(json!({})))
        .await
        .unwrap_err();
    let mcp = error.downcast_ref::<McpError>().expect("an MCP error");
    assert!(matches!(mcp, McpError::ToolVanished { .. }), "{mcp}");
    assert_eq!(handle.state(), State::Closed, "not the tool's failure");
    let status = server.status();
    assert_eq!(
        status.vanished.iter().map(|v| &**v).collect::<Vec<_>>(),
        ["vanishing"]
    );
    assert_eq!(status.tools.names().collect::<Vec<_>>(), ["stay"]);
    // Not sent again.
    let sent = server.calls_sent();
    for _ in 0..3 {
        let error = vanishing
            .ready()
            .await?
            .call(args(json!({})))
            .await
            .unwrap_err();
        assert!(matches!(
            error.downcast_ref::<McpError>(),
            Some(McpError::ToolVanished { .. })
        ));
    }
    assert_eq!(server.calls_sent(), sent);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stops_answering_is_stopped_and_restarted_through_its_breaker() -> TestResult
{
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers
        .hostile("hostile", "hang-calls")
        .call_timeout(Duration::from_millis(300))
        .unresponsive_after(2)
        .start()?;
    let first = running(&server).await;
    for _ in 0..2 {
        let error = server
            .tool("ping")
            .oneshot(args(json!({})))
            .await
            .unwrap_err();
        assert!(matches!(error, McpError::Timeout { .. }), "{error}");
    }
    let down = until(&server, "stopped as unresponsive", |s| {
        matches!(s.state, ServerState::Down(Down::Unresponsive { .. }))
    })
    .await;
    let why = down.unavailable_because().unwrap();
    assert!(why.contains("stopped answering"), "{why}");
    assert!(why.contains("did not answer within 300ms"), "{why}");
    let pid = first.pid.unwrap();
    eventually("the hung process is stopped", || async move { !alive(pid) }).await;
    let back = running(&server).await;
    assert_eq!(back.generation, 2);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_with_another_requests_id_is_not_believed() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers
        .hostile("hostile", "wrong-id")
        .call_timeout(Duration::from_millis(500))
        .start()?;
    running(&server).await;
    let error = server
        .tool("ping")
        .oneshot(args(json!({})))
        .await
        .unwrap_err();
    assert!(matches!(error, McpError::Timeout { .. }), "{error}");
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_racing_restarts_never_reach_a_dead_process_and_every_failure_is_typed() -> TestResult
{
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers.everything("everything").start()?;
    running(&server).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (answered, lost, unavailable) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut callers = Vec::new();
    for _ in 0..4 {
        let (server, stop) = (server.clone(), stop.clone());
        let (answered, lost, unavailable) = (answered.clone(), lost.clone(), unavailable.clone());
        callers.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                match server
                    .tool("get-sum")
                    .oneshot(args(json!({"a": 1, "b": 2})))
                    .await
                {
                    Ok(_) => answered.fetch_add(1, Ordering::SeqCst),
                    Err(McpError::ConnectionLost { .. }) => lost.fetch_add(1, Ordering::SeqCst),
                    Err(McpError::Unavailable { .. }) => {
                        let n = unavailable.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        n
                    }
                    Err(other) => panic!("an unexpected failure: {other}"),
                };
            }
        }));
    }
    for round in 1..=2 {
        eventually("calls are answered", || async {
            answered.load(Ordering::SeqCst) > 10 * round
        })
        .await;
        let pid = server.status().pid.expect("running");
        kill_9(pid);
        until(&server, "down", |s| !s.is_running()).await;
        let back = running(&server).await;
        assert_eq!(back.generation, 1 + round);
    }
    eventually("calls are answered after the last restart", || async {
        answered.load(Ordering::SeqCst) > 40
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for caller in callers {
        caller.await?;
    }
    let (answered, lost, unavailable) = (
        answered.load(Ordering::SeqCst),
        lost.load(Ordering::SeqCst),
        unavailable.load(Ordering::SeqCst),
    );
    assert!(unavailable > 0, "some calls found it down");
    // Every call sent was answered or was in flight when its process died: none was sent
    // while the server was down.
    assert_eq!(
        server.calls_sent(),
        answered + lost,
        "{answered} answered, {lost} lost, {unavailable} not sent"
    );
    assert_eq!(server.calls_in_flight(), 0);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_right_after_initialize_fails_its_start_with_its_exit() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = slow_restarts(servers.hostile("brief", "exit-after-init")).start()?;
    let error = start_failure(&server).await;
    assert!(
        matches!(&error, StartError::Exited { exit } if exit.code() == Some(0)),
        "{error}"
    );
    assert_eq!(server.status().generation, 0, "it never served");
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_after_every_call_answers_each_once_and_gives_up_at_the_limit(
) -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers
        .hostile("mayfly", "one-call")
        .restart(
            RestartPolicy::new()
                .backoff(Duration::from_millis(50), Duration::from_millis(50))
                .crash_loop(3, Duration::from_secs(60)),
        )
        .start()?;
    let mut answered = 0;
    let deadline = tokio::time::Instant::now() + crate::common::PATIENCE;
    loop {
        let status = until(&server, "running or given up", |s| {
            s.is_running() || matches!(s.state, ServerState::GaveUp { .. })
        })
        .await;
        if !status.is_running() {
            break;
        }
        let generation = status.generation;
        match server.tool("ping").oneshot(args(json!({}))).await {
            Ok(_) => answered += 1,
            // Found it between its answer and its death.
            Err(McpError::Unavailable { .. } | McpError::ConnectionLost { .. }) => {}
            Err(other) => panic!("an unexpected failure: {other}"),
        }
        until(&server, "the next life", |s| {
            s.generation != generation || !s.is_running()
        })
        .await;
        assert!(tokio::time::Instant::now() < deadline, "never gave up");
    }
    let status = server.status();
    assert!(
        matches!(status.state, ServerState::GaveUp { restarts: 3, .. }),
        "{status}"
    );
    assert_eq!(status.starts, 4);
    // Every call sent was answered, or lost with the process it was sent to.
    assert!(
        answered >= 1 && server.calls_sent() <= 4,
        "{answered} answered, {} sent",
        server.calls_sent()
    );
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_sent_twice_is_taken_once() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers.hostile("echoing", "twice").start()?;
    running(&server).await;
    for _ in 0..3 {
        let answer = server.tool("ping").oneshot(args(json!({}))).await?;
        assert_eq!(answer.content[0].as_text().unwrap().text, "first");
    }
    assert_eq!(server.calls_in_flight(), 0);
    assert_eq!(server.breaker().state(), State::Closed);
    assert!(server.status().is_running());
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_line_without_a_newline_is_dropped_unread_and_the_call_times_out() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers
        .hostile("flood", "huge-line")
        .max_message_bytes(64 * 1024)
        .call_timeout(Duration::from_millis(800))
        .start()?;
    running(&server).await;
    let error = server
        .tool("ping")
        .oneshot(args(json!({})))
        .await
        .unwrap_err();
    assert!(matches!(error, McpError::Timeout { .. }), "{error}");
    assert_eq!(server.calls_in_flight(), 0);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_list_that_changes_between_lives_is_followed_by_the_offer() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let dir = servers::scratch("lives");
    let server = servers
        .hostile("shifty", "lives")
        .arg(dir.join("lives"))
        .start()?;
    let expediter = Expediter::builder().build()?;
    let tools = McpTools::new(&expediter);
    let first = running(&server).await;
    tools.add_server(&server)?;
    assert_eq!(tools.offered().names(), ["shifty__a", "shifty__b"]);
    kill_9(first.pid.unwrap());
    until(&server, "its second life", |s| {
        s.generation == 2 && s.is_running()
    })
    .await;
    let offer = tools.offered();
    assert_eq!(offer.names(), ["shifty__b", "shifty__c"], "{offer}");
    // `b`'s schema is the new one.
    let b = offer.tools.iter().find(|t| t.name == "shifty__b").unwrap();
    assert!(
        b.input_schema.get("required").is_some(),
        "{:?}",
        b.input_schema
    );
    // `a` is gone: said so, not sent, no budget.
    let line = &offer
        .withheld
        .iter()
        .find(|w| &*w.name == "shifty__a")
        .expect("a is held back")
        .line;
    assert!(line.contains("no longer lists `a`"), "{line}");
    let sent = server.calls_sent();
    let attempt = tools.execute("shifty__a", args(json!({}))).await?;
    assert!(matches!(
        attempt,
        tower_circuit_breaker::expediter::Attempt::Skipped { .. }
    ));
    assert_eq!(server.calls_sent(), sent);
    assert_eq!(expediter.report().budget.used, 0);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_closes_its_output_and_keeps_running_is_down_before_anyone_calls_it(
) -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = slow_restarts(servers.hostile("mute", "close-stdout")).start()?;
    let expediter = Expediter::builder().build()?;
    let tools = McpTools::new(&expediter);
    let pid = running(&server).await.pid.unwrap();
    tools.add_server(&server)?;
    // Nobody calls it: its supervisor finds the connection gone on its own, and stops
    // the process that is still running.
    let down = until(&server, "down", |s| !s.is_running()).await;
    assert!(down.unavailable_because().is_some(), "{down}");
    eventually("the process without an output is stopped", || async move {
        !alive(pid)
    })
    .await;
    let offer = tools.offered();
    assert!(!offer.offers("mute__ping"), "{offer}");
    let attempt = tools.execute("mute__ping", args(json!({}))).await?;
    assert!(
        matches!(
            attempt,
            tower_circuit_breaker::expediter::Attempt::Skipped { .. }
        ),
        "{:?}",
        attempt.decision()
    );
    assert_eq!(server.calls_sent(), 0);
    assert_eq!(expediter.report().budget.used, 0);
    server.stop().await;
    Ok(())
}

/// A server that closes its output and keeps running is given its stop timeout to exit,
/// once, and then killed: not a second stop timeout for a connection that is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_closes_its_output_and_keeps_running_is_killed_after_one_stop_timeout(
) -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let stop_timeout = Duration::from_secs(2);
    let server = slow_restarts(servers.hostile("mute-long", "close-stdout"))
        .stop_timeout(stop_timeout)
        .start()?;
    let pid = running(&server).await.pid.unwrap();
    until(&server, "down", |s| !s.is_running()).await;
    let out_at = tokio::time::Instant::now();
    eventually("the process without an output is stopped", || async move {
        !alive(pid)
    })
    .await;
    let took = out_at.elapsed();
    // Killed at the end of one stop timeout; two would be 4 s.
    assert!(
        took < stop_timeout + Duration::from_millis(1_500),
        "killed {took:?} after its output ended"
    );
    server.stop().await;
    Ok(())
}
