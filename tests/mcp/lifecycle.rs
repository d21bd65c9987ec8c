//! A server's life as its operator and its callers race it: stop and restart during a
//! start, a call or each other; the kill switch during a restart; the last handle dropped
//! with calls in flight; and the status (so the offer and the expediter's decisions)
//! while a process is being stopped.

use std::time::Duration;

use serde_json::json;
use tower::ServiceExt;
use tower_circuit_breaker::expediter::{Attempt, Expediter, SkipReason};
use tower_circuit_breaker::mcp::{Down, McpError, McpServer, McpTools, RestartPolicy, ServerState};

use crate::common::{
    alive, args, assert_gone, eventually, kill_9, running, until, TestResult, PATIENCE,
};
use crate::servers::{self, quick, shell_quote};

/// Asserts that a status without a process is not offered as serving, and that the tool
/// set routes away from `tool` without a call and without spending its budget.
async fn not_offered_while_out_of_service(tools: &McpTools, server: &McpServer, tool: &str) {
    let out = until(server, "out of service", |s| s.pid.is_none()).await;
    assert!(
        !out.is_running() && out.unavailable_because().is_some(),
        "a server without a process says it serves: {out}"
    );
    routed_away_without_budget(tools, server, tool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_and_restart_during_a_start_during_a_call_twice_and_at_once_never_hang() -> TestResult
{
    if servers::get().is_none() {
        return Ok(());
    }
    let dir = servers::scratch("lifecycle-races");
    let pid_file = dir.join("pid");
    let hostile = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/hostile.js");
    // Each start writes its pid and takes a while before it serves.
    let script = format!(
        "echo $$ > {}; sleep 0.5; exec node {} hang-calls",
        shell_quote(&pid_file),
        shell_quote(&hostile)
    );
    let server = quick(McpServer::builder("racy", "sh").args(["-c", &script]))
        .call_timeout(Duration::from_secs(20))
        .start()?;
    // A restart asked during the first start: that start is the restart.
    server.restart();
    server.restart();
    let first = running(&server).await;
    assert_eq!(first.starts, 1, "{first}");

    // A call in flight, then restarts and a stop at once: the call fails once, typed.
    let call = tokio::spawn(server.tool("ping").oneshot(args(json!({}))));
    eventually("the call is in flight", || async {
        server.calls_in_flight() == 1
    })
    .await;
    server.restart();
    let (a, b) = (server.clone(), server.clone());
    let stops = tokio::spawn(async move {
        tokio::join!(a.stop(), b.stop());
    });
    tokio::time::timeout(PATIENCE, stops).await??;
    let error = tokio::time::timeout(PATIENCE, call).await??.unwrap_err();
    assert!(
        matches!(
            error,
            McpError::ConnectionLost { .. } | McpError::Unavailable { .. }
        ),
        "{error}"
    );
    assert_eq!(server.status().state, ServerState::Stopped);
    assert_eq!(server.calls_in_flight(), 0);
    // Stopped twice, restarted after the stop: nothing happens, nothing hangs.
    tokio::time::timeout(PATIENCE, server.stop()).await?;
    server.restart();
    let pid: u32 = std::fs::read_to_string(&pid_file)?.trim().parse()?;
    eventually("its process is gone", || async move { !alive(pid) }).await;
    assert_eq!(server.status().state, ServerState::Stopped);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_a_start_kills_the_process_being_started() -> TestResult {
    if servers::get().is_none() {
        return Ok(());
    }
    let dir = servers::scratch("stop-starting");
    let pid_file = dir.join("pid");
    // It never gets to serve: its start is stopped while it is under way.
    let slow = format!("echo $$ > {}; exec sleep 30", shell_quote(&pid_file));
    let server = quick(McpServer::builder("slow", "sh").args(["-c", &slow])).start()?;
    eventually("its pid is written", || async {
        std::fs::read_to_string(&pid_file).is_ok_and(|p| p.trim().parse::<u32>().is_ok())
    })
    .await;
    let pid: u32 = std::fs::read_to_string(&pid_file)?.trim().parse()?;
    assert_eq!(server.status().state, ServerState::Starting);
    tokio::time::timeout(PATIENCE, server.stop()).await?;
    assert_eq!(server.status().state, ServerState::Stopped);
    eventually("the process being started is killed", || async move {
        !alive(pid)
    })
    .await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kill_switch_flipped_during_a_restart_holds_the_next_one_until_revived() -> TestResult {
    if servers::get().is_none() {
        return Ok(());
    }
    let dir = servers::scratch("kill-restart-switch");
    let pid_file = dir.join("pid");
    let script = format!("echo $$ > {}; sleep 0.3; exit 1", shell_quote(&pid_file));
    let server = quick(McpServer::builder("killed", "sh").args(["-c", &script]))
        .restart(
            RestartPolicy::new().backoff(Duration::from_millis(100), Duration::from_millis(100)),
        )
        .start()?;
    until(&server, "restarting", |s| {
        s.state == ServerState::Restarting
    })
    .await;
    server.kill_switch().kill();
    let held = until(&server, "down and killed", |s| {
        s.killed && matches!(s.state, ServerState::Down(_))
    })
    .await;
    let starts = held.starts;
    assert!(held.unavailable_because().unwrap().contains("kill switch"));
    // However long one waits (several backoffs), no start comes while it is on.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(server.status().starts, starts, "{}", server.status());
    server.kill_switch().revive();
    until(&server, "started again", |s| s.starts > starts).await;
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_restart_after_a_crash_loop_gets_the_whole_allowance_again() -> TestResult {
    if servers::get().is_none() {
        return Ok(());
    }
    // One restart allowed: the first start and one restart, then it gives up.
    let server = quick(McpServer::builder("crashy", "sh").args(["-c", "exit 3"]))
        .restart(
            RestartPolicy::new()
                .backoff(Duration::from_millis(100), Duration::from_millis(100))
                .crash_loop(1, Duration::from_secs(60)),
        )
        .start()?;
    let gave_up = until(&server, "given up", |s| {
        matches!(s.state, ServerState::GaveUp { .. })
    })
    .await;
    assert_eq!(gave_up.starts, 2);
    // An operator's restart is a fresh start, as the first one was: not one of the
    // restarts the limit counts, so one restart follows it before it gives up again.
    server.restart();
    let again = until(&server, "given up again", |s| {
        s.starts > 2 && matches!(s.state, ServerState::GaveUp { .. })
    })
    .await;
    assert_eq!(again.starts, 4, "{again}");
    // So is a reset of its breaker.
    server.breaker().reset();
    let reset = until(&server, "given up after the reset", |s| {
        s.starts > 4 && matches!(s.state, ServerState::GaveUp { .. })
    })
    .await;
    assert_eq!(reset.starts, 6, "{reset}");
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_being_stopped_is_never_offered_and_spends_no_budget() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    // It never answers a call and does not exit when its input is closed: each stop
    // takes the whole stop timeout before the process is killed.
    let server = servers
        .hostile("stubborn", "stubborn-hang")
        .call_timeout(Duration::from_millis(300))
        .stop_timeout(Duration::from_secs(2))
        .unresponsive_after(1)
        .restart(RestartPolicy::new().backoff(Duration::from_millis(200), Duration::from_secs(1)))
        .start()?;
    let expediter = Expediter::builder().build()?;
    let tools = McpTools::new(&expediter);
    running(&server).await;
    tools.add_server(&server)?;

    // Stopped as unresponsive after one timeout.
    let attempt = tools.execute("stubborn__ping", args(json!({}))).await?;
    assert!(matches!(attempt, Attempt::Made { result: Err(_), .. }));
    not_offered_while_out_of_service(&tools, &server, "stubborn__ping").await;
    let back = running(&server).await;
    assert_eq!(back.generation, 2);

    // Restarted by an operator.
    server.restart();
    not_offered_while_out_of_service(&tools, &server, "stubborn__ping").await;
    let back = running(&server).await;
    assert_eq!(back.generation, 3);

    // Stopped for good.
    let stopping = {
        let server = server.clone();
        tokio::spawn(async move { server.stop().await })
    };
    not_offered_while_out_of_service(&tools, &server, "stubborn__ping").await;
    tokio::time::timeout(PATIENCE, stopping).await??;
    assert_eq!(server.status().state, ServerState::Stopped);
    assert!(!alive(back.pid.unwrap()), "killed after its stop timeout");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_last_handle_with_calls_in_flight_leaves_no_process() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers.hostile("dropped", "stubborn-hang").start()?;
    let expediter = Expediter::builder().build()?;
    let tools = McpTools::new(&expediter);
    let pid = running(&server).await.pid.unwrap();
    tools.add_server(&server)?;
    let service = server.tool("ping");
    // Calls through the server's service and through the tool set's: neither holds the
    // server up once its last handle is gone.
    let mut calls = Vec::new();
    for _ in 0..2 {
        calls.push(tokio::spawn(service.clone().oneshot(args(json!({})))));
    }
    let mut guarded = Vec::new();
    for _ in 0..2 {
        let service = tools.service("dropped__ping")?;
        guarded.push(tokio::spawn(service.oneshot(args(json!({})))));
    }
    eventually("the calls are in flight", || async {
        server.calls_in_flight() == 4
    })
    .await;
    let watch = server.watch();
    drop(server);
    drop(tools);
    for call in calls {
        let error = tokio::time::timeout(PATIENCE, call).await??.unwrap_err();
        assert!(matches!(error, McpError::ConnectionLost { .. }), "{error}");
    }
    for call in guarded {
        let error = tokio::time::timeout(PATIENCE, call).await??.unwrap_err();
        let error = error.downcast_ref::<McpError>().expect("an MCP error");
        assert!(matches!(error, McpError::ConnectionLost { .. }), "{error}");
    }
    eventually("its process is gone", || async move { !alive(pid) }).await;
    // A service that outlives every handle says the server was stopped, and sends nothing.
    let error = service.oneshot(args(json!({}))).await.unwrap_err();
    assert!(matches!(error, McpError::Unavailable { .. }), "{error}");
    let last = watch.borrow().clone();
    assert_eq!(last.state, ServerState::Stopped, "{last}");
    Ok(())
}

/// A server started through a launcher (`npx`, `sh -c`, a wrapper script) runs as a child
/// of the process the supervisor spawned: when that process is killed (a start that timed
/// out, a stop past its timeout), what it launched is killed with it (its process group).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_launcher_takes_the_server_it_launched_with_it() -> TestResult {
    if servers::get().is_none() {
        return Ok(());
    }
    let dir = servers::scratch("launcher");
    let child_file = dir.join("child");
    // A launcher whose server never answers and does not read its input.
    let script = format!("sleep 60 & echo $! > {}; wait", shell_quote(&child_file));
    let server = quick(McpServer::builder("launched", "sh").args(["-c", &script]))
        .start_timeout(Duration::from_millis(500))
        .restart(RestartPolicy::new().backoff(Duration::from_secs(30), Duration::from_secs(30)))
        .start()?;
    until(&server, "down", |s| matches!(s.state, ServerState::Down(_))).await;
    let child: u32 = std::fs::read_to_string(&child_file)?.trim().parse()?;
    server.stop().await;
    assert_gone(child, "the server its launcher launched").await;
    Ok(())
}

/// A launcher killed while its server serves: its supervisor sees the launcher exit
/// (the server still holds the connection) and takes the server it launched with it,
/// rather than leave it running beside the next start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launcher_killed_under_its_server_takes_the_server_with_it() -> TestResult {
    if servers::get().is_none() {
        return Ok(());
    }
    let dir = servers::scratch("killed-launcher");
    let child_file = dir.join("child");
    // The server keeps the launcher's input (through fd 3: an asynchronous command's
    // input is /dev/null before its own redirections) and output, and does not exit when
    // its input ends; the launcher waits for it.
    let hostile = servers::manifest_dir().join("tests/mcp/hostile.js");
    let script = format!(
        "exec 3<&0; node {} stubborn-hang <&3 3<&- & echo $! > {}; wait",
        shell_quote(&hostile),
        shell_quote(&child_file)
    );
    let server = quick(McpServer::builder("wrapped", "sh").args(["-c", &script]))
        .restart(RestartPolicy::new().backoff(Duration::from_secs(30), Duration::from_secs(30)))
        .start()?;
    let launcher = running(&server).await.pid.expect("a pid");
    let child: u32 = std::fs::read_to_string(&child_file)?.trim().parse()?;
    assert!(alive(child));
    kill_9(launcher);
    until(&server, "down", |s| {
        matches!(s.state, ServerState::Down(Down::Exited(_)))
    })
    .await;
    assert_gone(child, "the server its killed launcher launched").await;
    server.stop().await;
    Ok(())
}

/// Asserts that the tool set routes away from `tool` without a call and without spending
/// its budget, and does not offer it.
async fn routed_away_without_budget(tools: &McpTools, server: &McpServer, tool: &str) {
    let used = tools.expediter().report().budget.used;
    let sent = server.calls_sent();
    let offer = tools.offered();
    assert!(!offer.offers(tool), "{offer}");
    let attempt = tokio::time::timeout(PATIENCE, tools.execute(tool, args(json!({}))))
        .await
        .expect("a decision in time")
        .expect("a known tool");
    assert!(
        matches!(
            attempt,
            Attempt::Skipped {
                reason: SkipReason::Unavailable,
                ..
            }
        ),
        "{:?}",
        attempt.decision()
    );
    assert_eq!(tools.expediter().report().budget.used, used, "budget spent");
    assert_eq!(server.calls_sent(), sent, "a call was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_a_person_forces_open_takes_a_running_server_out_of_the_offer_until_reset(
) -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers.hostile("forced", "ping").start()?;
    let expediter = Expediter::builder().build()?;
    let tools = McpTools::new(&expediter);
    running(&server).await;
    tools.add_server(&server)?;
    assert!(tools.offered().offers("forced__ping"));

    server.breaker().force_open();
    let forced = until(&server, "shown forced open", |s| s.forced_open).await;
    let why = forced.unavailable_because().expect("it cannot serve calls");
    assert!(why.contains("breaker is forced open"), "{why}");
    assert!(!forced.is_running(), "{forced}");
    assert!(forced.to_string().contains("forced open"), "{forced}");
    // Its process still runs: the person's hold is on calls, not on the server.
    assert!(forced.pid.is_some_and(alive), "{forced}");
    routed_away_without_budget(&tools, &server, "forced__ping").await;
    let error = tokio::time::timeout(PATIENCE, server.tool("ping").oneshot(args(json!({}))))
        .await?
        .unwrap_err();
    assert!(
        matches!(&error, McpError::Unavailable { why, .. } if why.contains("forced open")),
        "{error}"
    );

    // The reset brings it back, the same process, with nothing restarted.
    server.breaker().reset();
    let back = until(&server, "serving again", |s| s.is_running()).await;
    assert_eq!((back.pid, back.starts), (forced.pid, forced.starts));
    assert!(tools.offered().offers("forced__ping"));
    let attempt =
        tokio::time::timeout(PATIENCE, tools.execute("forced__ping", args(json!({})))).await??;
    assert!(
        matches!(attempt, Attempt::Made { result: Ok(_), .. }),
        "{:?}",
        attempt.decision()
    );

    // Opened for a time: back on its own when the time is up.
    server.breaker().open_for(Duration::from_millis(300));
    until(&server, "shown forced open for a time", |s| s.forced_open).await;
    routed_away_without_budget(&tools, &server, "forced__ping").await;
    until(&server, "serving once the time is up", |s| s.is_running()).await;
    let attempt =
        tokio::time::timeout(PATIENCE, tools.execute("forced__ping", args(json!({})))).await??;
    assert!(
        matches!(attempt, Attempt::Made { result: Ok(_), .. }),
        "{:?}",
        attempt.decision()
    );
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_forced_open_during_a_restart_holds_the_restarted_server_until_reset(
) -> TestResult {
    if servers::get().is_none() {
        return Ok(());
    }
    // It takes a second to start, so that the person's act lands while it restarts.
    let hostile = servers::manifest_dir().join("tests/mcp/hostile.js");
    let script = format!("sleep 1; exec node {} ping", shell_quote(&hostile));
    let server = quick(McpServer::builder("slowstart", "sh").args(["-c", &script]))
        .restart(
            RestartPolicy::new().backoff(Duration::from_millis(100), Duration::from_millis(100)),
        )
        .start()?;
    let expediter = Expediter::builder().build()?;
    let tools = McpTools::new(&expediter);
    let first = running(&server).await;
    tools.add_server(&server)?;
    kill_9(first.pid.expect("a process"));
    until(&server, "restarting", |s| {
        s.state == ServerState::Restarting
    })
    .await;
    server.breaker().force_open();
    // The restart under way ends (it serves, or it does not): either way the server is
    // held, shown forced open, and no call goes.
    let held = until(&server, "restarted and held", |s| {
        s.forced_open && s.state != ServerState::Restarting
    })
    .await;
    assert!(
        held.unavailable_because().unwrap().contains("forced open"),
        "{held}"
    );
    routed_away_without_budget(&tools, &server, "slowstart__ping").await;
    // However long one waits (several backoffs), no restart comes while it is held.
    let starts = held.starts;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(server.status().starts, starts, "{}", server.status());
    assert!(!server.status().is_running());

    server.breaker().reset();
    until(&server, "serving after the reset", |s| s.is_running()).await;
    let ok = tokio::time::timeout(PATIENCE, server.tool("ping").oneshot(args(json!({})))).await?;
    assert!(ok.is_ok(), "{ok:?}");
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_restart_during_a_restart_is_made_as_asked_with_the_record_cleared(
) -> TestResult {
    if servers::get().is_none() {
        return Ok(());
    }
    let dir = servers::scratch("restart-during-restart");
    let pids = dir.join("pids");
    // Every start takes a second, then fails.
    let script = format!("echo $$ >> {}; sleep 1; exit 1", shell_quote(&pids));
    let started = |n: usize| {
        let pids = pids.clone();
        async move {
            eventually("the start's process wrote its pid", || async {
                std::fs::read_to_string(&pids)
                    .unwrap_or_default()
                    .lines()
                    .count()
                    >= n
            })
            .await;
            let all = std::fs::read_to_string(&pids).unwrap_or_default();
            all.lines()
                .nth(n - 1)
                .expect("a pid")
                .trim()
                .parse::<u32>()
                .expect("a pid")
        }
    };
    // One restart allowed within a minute.
    let server = quick(McpServer::builder("slowfail", "sh").args(["-c", &script]))
        .restart(
            RestartPolicy::new()
                .backoff(Duration::from_millis(100), Duration::from_millis(100))
                .crash_loop(1, Duration::from_secs(60)),
        )
        .start()?;
    // The first start fails; its one allowed restart is under way.
    until(&server, "restarting", |s| {
        s.state == ServerState::Restarting
    })
    .await;
    let restarting = started(2).await;
    // The operator asks for a fresh start meanwhile: it is not lost in the restart.
    server.restart();
    let fresh = until(&server, "started afresh", |s| s.starts == 3).await;
    assert_gone(restarting, "the restart the operator's replaced").await;
    assert_ne!(started(3).await, restarting);
    // That start fails too: with the record cleared it has its one restart again, and is
    // not given up.
    let after = until(&server, "down after the operator's start", |s| {
        s.starts == 3 && !matches!(s.state, ServerState::Restarting | ServerState::Starting)
    })
    .await;
    assert!(
        matches!(after.state, ServerState::Down(_)),
        "given up right after an operator's restart: {after} (fresh: {fresh})"
    );
    let gave_up = until(&server, "given up after its one restart", |s| {
        matches!(s.state, ServerState::GaveUp { .. })
    })
    .await;
    assert_eq!(gave_up.starts, 4, "{gave_up}");
    server.stop().await;
    Ok(())
}
