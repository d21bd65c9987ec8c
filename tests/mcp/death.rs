//! Servers that die and come back: a kill under a call, restarts only through the
//! server's breaker's probe, a command that cannot start, a crash loop.

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};
use tower_circuit_breaker::error::Rejected;
use tower_circuit_breaker::mcp::{
    Down, McpError, McpServer, RestartPolicy, ServerState, StartError,
};
use tower_circuit_breaker::{Cause, State};

use crate::common::{
    alive, args, eventually, kill_9, running, tool_breaker, until, TestResult, PATIENCE,
};
use crate::servers::{self, quick, shell_quote};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_when_the_server_is_killed_fails_once_and_is_never_replayed() -> TestResult
{
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers
        .everything("everything")
        // Long enough for the calls below to find it down.
        .restart(RestartPolicy::new().backoff(Duration::from_secs(2), Duration::from_secs(4)))
        .start()?;
    let pid = running(&server).await.pid.expect("a pid");

    // The tool's breaker opens after two failures.
    let breaker = tool_breaker("long", 2);
    let handle = breaker.handle();
    let mut long = breaker.layer(server.tool("trigger-long-running-operation"));
    let call = long
        .ready()
        .await?
        .call(args(json!({"duration": 60, "steps": 60})));
    let call = tokio::spawn(call);
    eventually("the call is in flight", || async {
        server.calls_in_flight() == 1
    })
    .await;
    let killed_at = Instant::now();
    kill_9(pid);

    // It fails once, at once, saying it was not replayed.
    let error = tokio::time::timeout(PATIENCE, call).await??.unwrap_err();
    assert!(killed_at.elapsed() < Duration::from_secs(5), "failed fast");
    let mcp = error.downcast_ref::<McpError>().expect("an MCP error");
    assert!(matches!(mcp, McpError::ConnectionLost { .. }), "{mcp}");
    assert!(mcp.to_string().contains("not replayed"), "{mcp}");
    assert_eq!(handle.snapshot().consecutive_failures, 1);
    let down = until(&server, "down", |s| {
        matches!(s.state, ServerState::Down(Down::Exited(_)))
    })
    .await;
    assert_eq!(down.pid, None);
    assert!(!alive(pid), "reaped");

    // The next call reaches no process: it fails fast as unavailable, and the second
    // failure opens the tool's breaker.
    let error = long
        .ready()
        .await?
        .call(args(json!({"duration": 1})))
        .await
        .unwrap_err();
    let mcp = error.downcast_ref::<McpError>().expect("an MCP error");
    assert!(matches!(mcp, McpError::Unavailable { .. }), "{mcp}");
    assert_eq!(handle.state(), State::Open);

    // While it is open, no call goes anywhere.
    for _ in 0..5 {
        let error = long
            .ready()
            .await?
            .call(args(json!({"duration": 1})))
            .await
            .unwrap_err();
        assert!(error.is::<Rejected>(), "{error}");
    }
    assert_eq!(
        server.calls_sent(),
        1,
        "only the call that was in flight was ever sent"
    );

    // The server comes back on its own (its breaker's probe); the call that was in
    // flight is not sent again to the new process.
    let back = running(&server).await;
    assert_eq!(back.generation, 2);
    assert_ne!(back.pid, Some(pid));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server.calls_sent(), 1, "nothing replayed after the restart");
    assert_eq!(server.calls_in_flight(), 0);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_comes_back_only_through_its_breakers_probe_with_its_tool_list_read_again(
) -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let dir = servers::scratch("restart");
    // Its first life is the everything server, every later one the memory server: the
    // restart must read the tool list again.
    let flag = dir.join("second-life");
    let script = format!(
        "if [ -e {flag} ]; then exec {memory}; else touch {flag}; exec {everything}; fi",
        flag = shell_quote(&flag),
        memory = servers.command_line("server-memory", &[]),
        everything = servers.command_line("server-everything", &["stdio"]),
    );
    let backoff = Duration::from_millis(400);
    let server = quick(McpServer::builder("shifty", "sh").args(["-c", &script]))
        .env("MEMORY_FILE_PATH", dir.join("memory.jsonl"))
        .restart(RestartPolicy::new().backoff(backoff, Duration::from_secs(2)))
        .start()?;
    let first = running(&server).await;
    assert!(first.tools.get("get-sum").is_some());
    let mut transitions = server.breaker().subscribe();

    let killed_at = Instant::now();
    kill_9(first.pid.unwrap());
    let down = until(&server, "down", |s| {
        matches!(s.state, ServerState::Down(Down::Exited(_)))
    })
    .await;
    match &down.state {
        ServerState::Down(Down::Exited(exit)) => assert_eq!(exit.signal(), Some(9), "{exit}"),
        other => panic!("expected an exit, got {other:?}"),
    }
    assert_eq!(down.restart_wait, Some(backoff));
    let why = down.unavailable_because().unwrap();
    assert!(why.contains("was killed by signal 9"), "{why}");
    assert!(
        why.contains("when its breaker lets a probe through"),
        "{why}"
    );

    let second = running(&server).await;
    assert!(
        killed_at.elapsed() >= backoff,
        "no restart before the backoff"
    );
    assert_eq!((second.starts, second.generation), (2, 2));
    // The breaker: held open at the death, half-open for the restart (its probe),
    // closed by the restart's success.
    let mut seen = Vec::new();
    while let Ok(t) = transitions.try_recv() {
        seen.push((t.from, t.to, t.cause));
    }
    assert_eq!(
        seen,
        [
            (State::Closed, State::Open, Cause::Hint),
            (State::Open, State::HalfOpen, Cause::CooldownElapsed),
            (State::HalfOpen, State::Closed, Cause::ProbeSucceeded),
        ]
    );
    // The tool list was read again: get-sum is gone and is not sent; the memory
    // server's tools are there.
    assert!(second.tools.get("read_graph").is_some());
    assert_eq!(
        &*second
            .vanished
            .iter()
            .find(|v| &***v == "get-sum")
            .unwrap()
            .to_string(),
        "get-sum"
    );
    let sent = server.calls_sent();
    let error = server
        .tool("get-sum")
        .oneshot(args(json!({"a": 1, "b": 2})))
        .await
        .unwrap_err();
    assert!(matches!(error, McpError::ToolVanished { .. }), "{error}");
    assert!(second
        .tool_availability("get-sum")
        .1
        .contains("no longer lists"));
    assert_eq!(server.calls_sent(), sent);
    let graph = server.tool("read_graph").oneshot(args(json!({}))).await?;
    assert_eq!(graph.is_error, None);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_cannot_start_says_why_and_sends_nothing() -> TestResult {
    if servers::get().is_none() {
        return Ok(());
    }
    let server = quick(McpServer::builder("ghost", "/nonexistent/mcp-server"))
        .restart(RestartPolicy::new().backoff(Duration::from_secs(10), Duration::from_secs(10)))
        .start()?;
    let error = server.wait_ready(PATIENCE).await.unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("cannot run `/nonexistent/mcp-server`"),
        "{text}"
    );
    assert!(text.contains("No such file or directory"), "{text}");
    let status = server.status();
    assert!(
        matches!(
            &status.state,
            ServerState::Down(Down::StartFailed(StartError::Spawn { .. }))
        ),
        "{status}"
    );
    let error = server
        .tool("read")
        .oneshot(args(json!({})))
        .await
        .unwrap_err();
    assert!(matches!(error, McpError::Unavailable { .. }), "{error}");
    assert_eq!(server.calls_sent(), 0);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_in_a_servers_command_line_or_stderr_never_show_in_errors_or_status() -> TestResult
{
    if servers::get().is_none() {
        return Ok(());
    }
    // A server given a token on its command line, which prints a URL with a password, a
    // key and a bearer token to stderr, and dies.
    let script = "echo 'fatal: GET https://bob:hunter2@db.example/x?api_key=sk-QS failed; \
                  Authorization: Bearer sk-BEARERSTDERR' >&2; exit 3";
    let server = quick(McpServer::builder("leaky", "sh").args(["-c", script, "--token=ARGSECRET"]))
        .restart(RestartPolicy::new().backoff(Duration::from_secs(10), Duration::from_secs(10)))
        .start()?;
    let error = server.wait_ready(PATIENCE).await.unwrap_err();
    let status = server.status();
    let shown = format!("{error} | {error:?} | {status} | {server:?}");
    assert!(
        shown.contains("fatal: GET https://[redacted]@db.example/x"),
        "{shown}"
    );
    for secret in ["hunter2", "sk-QS", "sk-BEARERSTDERR", "ARGSECRET"] {
        assert!(!shown.contains(secret), "{secret} shown: {shown}");
    }
    let spawn =
        quick(McpServer::builder("ghost", "/nonexistent/mcp-server").arg("--api-key=sk-ARG"))
            .restart(RestartPolicy::new().backoff(Duration::from_secs(10), Duration::from_secs(10)))
            .start()?;
    let error = spawn.wait_ready(PATIENCE).await.unwrap_err().to_string();
    assert!(!error.contains("sk-ARG"), "{error}");
    server.stop().await;
    spawn.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_flags_value_never_shows_in_either_form_nor_the_builders_debug() -> TestResult {
    if servers::get().is_none() {
        return Ok(());
    }
    let builder = quick(McpServer::builder("ghost", "/nonexistent/mcp-server"))
        .args([
            "--token",
            "TOKSECRET",
            "--auth=AUTHSECRET",
            "--credential=CREDSECRET",
        ])
        .args(["--auth", "AUTH2SECRET", "--mode=fast"])
        .env("API_KEY", "ENVSECRET")
        .restart(RestartPolicy::new().backoff(Duration::from_secs(10), Duration::from_secs(10)));
    let builder_debug = format!("{builder:?}");
    // The builder shows what it will run: the environment's names, not their values.
    assert!(builder_debug.contains("API_KEY"), "{builder_debug}");
    assert!(builder_debug.contains("--mode=fast"), "{builder_debug}");
    let server = builder.start()?;
    let error = server.wait_ready(PATIENCE).await.unwrap_err();
    let status = server.status();
    let shown = format!("{error} | {error:?} | {status} | {status:?} | {server:?}");
    assert!(
        shown.contains(
            "--token [redacted] --auth=[redacted] --credential=[redacted] --auth [redacted] --mode=fast"
        ),
        "{shown}"
    );
    for secret in [
        "TOKSECRET",
        "AUTHSECRET",
        "CREDSECRET",
        "AUTH2SECRET",
        "ENVSECRET",
    ] {
        assert!(!shown.contains(secret), "{secret} shown: {shown}");
        assert!(
            !builder_debug.contains(secret),
            "{secret} in the builder's Debug: {builder_debug}"
        );
    }
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_dying_on_every_start_backs_off_and_gives_up_at_the_crash_loop_limit() -> TestResult
{
    if servers::get().is_none() {
        return Ok(());
    }
    let dir = servers::scratch("crash-loop");
    let log = dir.join("starts");
    // Each start writes the time (ns) and dies at once.
    let script = format!("date +%s%N >> {}; exit 3", shell_quote(&log));
    let (initial, max) = (Duration::from_millis(100), Duration::from_millis(400));
    let server = quick(McpServer::builder("crashy", "sh").args(["-c", &script]))
        .restart(
            RestartPolicy::new()
                .backoff(initial, max)
                .crash_loop(3, Duration::from_secs(60)),
        )
        .start()?;
    let gave_up = until(&server, "given up", |s| {
        matches!(s.state, ServerState::GaveUp { .. })
    })
    .await;
    let ServerState::GaveUp { last, restarts, .. } = &gave_up.state else {
        unreachable!()
    };
    assert_eq!(*restarts, 3);
    match last {
        Down::StartFailed(StartError::Exited { exit }) => assert_eq!(exit.code(), Some(3)),
        other => panic!("expected an exit before ready, got {other:?}"),
    }
    let why = gave_up.unavailable_because().unwrap();
    assert!(why.contains("after 3 restarts within 60 s"), "{why}");
    assert!(why.contains("until an operator restarts it"), "{why}");
    assert_eq!(gave_up.starts, 4, "the first start and three restarts");

    let starts = |log: &std::path::Path| -> Vec<u128> {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .map(|l| l.trim().parse().expect("a time"))
            .collect()
    };
    let times = starts(&log);
    assert_eq!(times.len(), 4);
    // Each restart waited at least its backoff: 100, 200, 400 ms.
    let gaps: Vec<u128> = times
        .windows(2)
        .map(|w| (w[1] - w[0]) / 1_000_000)
        .collect();
    for (gap, wait) in gaps.iter().zip([100, 200, 400]) {
        assert!(
            *gap >= wait,
            "restart after {gap} ms, before its {wait} ms backoff: {gaps:?}"
        );
    }
    // Given up: its breaker is held open for an operator, and no start comes, however
    // long one waits (here twice the longest backoff).
    assert_eq!(server.breaker().state(), State::ForcedOpen);
    tokio::time::sleep(max * 2).await;
    assert_eq!(starts(&log).len(), 4);

    // An operator's restart is a fresh start: the record is cleared, it backs off again.
    server.restart();
    until(&server, "down again", |s| {
        s.starts == 5 && matches!(s.state, ServerState::Down(_))
    })
    .await;
    assert_eq!(starts(&log).len(), 5);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crash_loop_limit_holds_with_a_backoff_of_a_nanosecond() -> TestResult {
    if servers::get().is_none() {
        return Ok(());
    }
    let dir = servers::scratch("crash-loop-nanosecond");
    let log = dir.join("starts");
    // Each start notes itself and dies at once; each restart waits a nanosecond (over
    // before the breaker can be held open for it).
    let script = format!("echo start >> {}; exit 3", shell_quote(&log));
    let starts = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
    };
    for _ in 0..3 {
        let _ = std::fs::remove_file(&log);
        let server = quick(McpServer::builder("storm", "sh").args(["-c", &script]))
            .restart(
                RestartPolicy::new()
                    .backoff(Duration::from_nanos(1), Duration::from_millis(1))
                    .crash_loop(5, Duration::from_secs(60)),
            )
            .start()?;
        let gave_up = until(&server, "given up", |s| {
            matches!(s.state, ServerState::GaveUp { .. })
        })
        .await;
        assert!(
            matches!(gave_up.state, ServerState::GaveUp { restarts: 5, .. }),
            "{gave_up}"
        );
        // The first start and five restarts, and no process more.
        assert_eq!(gave_up.starts, 6, "{gave_up}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(starts(), 6, "processes spawned: {}", server.status());
        server.stop().await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_while_it_restarts_backs_off_and_comes_back() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let dir = servers::scratch("kill-restart");
    let pid_file = dir.join("pid");
    // It writes its pid, and takes a while before it becomes the server.
    let script = format!(
        "echo $$ > {pid}; sleep 0.5; exec {everything}",
        pid = shell_quote(&pid_file),
        everything = servers.command_line("server-everything", &["stdio"]),
    );
    let server = quick(McpServer::builder("fragile", "sh").args(["-c", &script])).start()?;
    let first = running(&server).await;
    kill_9(first.pid.unwrap());
    until(&server, "restarting", |s| {
        s.state == ServerState::Restarting
    })
    .await;
    // The restart's process, before it is ready.
    let fresh_pid = || {
        std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
            .filter(|p| Some(*p) != first.pid)
    };
    eventually("the restart wrote its pid", || async {
        fresh_pid().is_some()
    })
    .await;
    let restarting = fresh_pid().unwrap();
    kill_9(restarting);
    let failed = until(&server, "down after a failed restart", |s| {
        matches!(s.state, ServerState::Down(Down::StartFailed(_)))
    })
    .await;
    assert_eq!(
        failed.restart_wait,
        Some(Duration::from_millis(200)),
        "the backoff doubled"
    );
    let back = running(&server).await;
    assert_eq!(back.starts, 3);
    let answer = server
        .tool("get-sum")
        .oneshot(args(json!({"a": 20, "b": 22})))
        .await?;
    assert!(answer.content[0].as_text().unwrap().text.contains("42"));
    server.stop().await;
    Ok(())
}

/// Killed with more calls in flight than make it "unresponsive": each call fails once as
/// a lost connection, and the server is reported killed (what happened), never as having
/// stopped answering, whichever the supervisor hears of first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_under_many_calls_is_reported_killed_not_unresponsive() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers
        .everything("crowded")
        .unresponsive_after(2)
        .restart(RestartPolicy::new().backoff(Duration::from_secs(2), Duration::from_secs(4)))
        .start()?;
    let pid = running(&server).await.pid.expect("a pid");
    let calls: Vec<_> = (0..6)
        .map(|_| {
            let mut long = server.tool("trigger-long-running-operation");
            tokio::spawn(async move {
                long.ready()
                    .await?
                    .call(args(json!({"duration": 60, "steps": 60})))
                    .await
            })
        })
        .collect();
    eventually("the calls are in flight", || async {
        server.calls_in_flight() == 6
    })
    .await;
    kill_9(pid);
    for call in calls {
        let error = tokio::time::timeout(PATIENCE, call).await??.unwrap_err();
        assert!(matches!(error, McpError::ConnectionLost { .. }), "{error}");
    }
    let down = until(&server, "down for good", |s| {
        matches!(
            s.state,
            ServerState::Down(Down::Exited(_) | Down::Unresponsive { .. })
        )
    })
    .await;
    match &down.state {
        ServerState::Down(Down::Exited(exit)) => assert_eq!(exit.signal(), Some(9), "{exit}"),
        other => panic!("reported as {other:?}, not as killed"),
    }
    assert_eq!(server.calls_sent(), 6, "nothing replayed");
    server.stop().await;
    Ok(())
}
