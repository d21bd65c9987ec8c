//! Remote servers over Streamable HTTP, under the same supervision as stdio ones: the
//! reference everything server in its HTTP mode on loopback, behind a counting proxy
//! (so that each call that reached it is known), killed with SIGKILL and started again.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;
use tower::{Service, ServiceExt};
use tower_circuit_breaker::mcp::{
    Down, McpError, McpServer, McpServerBuilder, RestartPolicy, ServerState,
};
use tower_circuit_breaker::{Cause, State};

use crate::captured_logs::CapturedLogs;
use crate::common::{
    args, eventually, running, until, waiting_for_its_probe, TestResult, PATIENCE,
};
use crate::http_server::EverythingHttp;
use crate::proxy::Proxy;
use crate::servers::{self, quick};

/// A remote server at `url` with the tests' short backoffs.
fn remote(name: &str, url: &str) -> McpServerBuilder {
    quick(McpServer::remote(name, url))
}

/// Calls `echo` with `message`, and says how it ended.
async fn echo(server: &McpServer, message: &str) -> Result<String, McpError> {
    let result = server
        .tool("echo")
        .oneshot(args(json!({ "message": message })))
        .await?;
    let text = result.content[0]
        .as_text()
        .map(|t| t.text.clone())
        .unwrap_or_default();
    Ok(text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_server_serves_its_tools_and_never_shows_its_secrets() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let everything = EverythingHttp::start(servers).await;
    let proxy = Proxy::start(everything.port()).await;
    let server = remote("everything", &proxy.url("?api_key=QUERY-SECRET"))
        .bearer_token("sk-BEARER-SECRET")
        .header("X-Api-Key", "sk-HEADER-SECRET")
        .start()?;
    let status = running(&server).await;
    assert!(status.tools.get("echo").is_some(), "{status}");
    assert_eq!(status.pid, None, "no process of its own");
    assert_eq!(echo(&server, "hello").await?, "Echo: hello");
    // The token went to the server, and nowhere else.
    assert!(proxy.authorizations().contains("Bearer sk-BEARER-SECRET"));
    let shown = format!("{status} {server:?} {:?} {}", status.url, server.status());
    let url = status.url.as_deref().expect("its URL");
    assert_eq!(url, proxy.url("?[redacted]"));
    for secret in ["QUERY-SECRET", "sk-BEARER-SECRET", "sk-HEADER-SECRET"] {
        assert!(!shown.contains(secret), "{secret} shown: {shown}");
    }

    // A server that cannot be reached says so with the URL redacted.
    let nowhere = remote(
        "nowhere",
        &format!(
            "http://127.0.0.1:{}/mcp?token=QUERY-SECRET",
            crate::http_server::free_port()
        ),
    )
    .start()?;
    let error = nowhere.wait_ready(PATIENCE).await.unwrap_err().to_string();
    assert!(error.contains("could not start"), "{error}");
    assert!(!error.contains("QUERY-SECRET"), "{error}");

    // Settings of the other kind of server are refused, as typed errors.
    let misplaced = McpServer::remote("r", "http://127.0.0.1:1/mcp")
        .arg("x")
        .start();
    assert!(misplaced.unwrap_err().to_string().contains("`arg`"));
    let misplaced = McpServer::builder("s", "node").bearer_token("t").start();
    assert!(misplaced
        .unwrap_err()
        .to_string()
        .contains("`bearer_token`"));
    let bad = McpServer::remote("r", "ftp://user:pw@example.com/mcp").start();
    let bad = bad.unwrap_err().to_string();
    assert!(bad.contains("http") && !bad.contains("pw@"), "{bad}");
    server.stop().await;
    Ok(())
}

// A current-thread runtime: the server's tasks and rmcp's run on the test's thread, under
// the subscriber that captures what they log.
#[tokio::test]
async fn a_url_s_query_string_never_reaches_the_logs_when_the_server_dies_or_refuses() -> TestResult
{
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let logs = CapturedLogs::start();
    let mut everything = EverythingHttp::start(servers).await;
    let url = everything.url("?key=LOG-SECRET");
    let server = remote("everything", &url).start()?;
    running(&server).await;
    assert_eq!(echo(&server, "hello").await?, "Echo: hello");

    // Killed: its event stream breaks and is resumed against a refused port, calls
    // fail, and closing the session is refused too.
    everything.kill_9();
    for _ in 0..3 {
        assert!(echo(&server, "after the kill").await.is_err());
    }
    server.stop().await;

    // One that refuses connections from the start.
    let nowhere = remote(
        "nowhere",
        &format!(
            "http://127.0.0.1:{}/mcp?key=LOG-SECRET",
            crate::http_server::free_port()
        ),
    )
    .start()?;
    assert!(nowhere.wait_ready(PATIENCE).await.is_err());
    nowhere.stop().await;
    // rmcp logs the end of a session's worker from a task of its own: a moment for it.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let logs = logs.text();
    // The failures were logged (reqwest's refused connections among them)...
    assert!(
        logs.lines()
            .any(|l| (l.starts_with("WARN") || l.starts_with("ERROR")) && l.contains("rmcp")),
        "no warning from rmcp was captured:\n{logs}"
    );
    assert!(logs.contains("error sending request"), "{logs}");
    // ...and the key in the URL's query string is in none of them.
    assert!(
        !logs.contains("LOG-SECRET"),
        "the key reached the logs:\n{logs}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_in_a_loop_under_calls_sends_no_call_twice_and_the_session_returns_only_through_the_probe(
) -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let mut everything = EverythingHttp::start(servers).await;
    let proxy = Proxy::start(everything.port()).await;
    let server = remote("everything", &proxy.url(""))
        .restart(
            RestartPolicy::new()
                .backoff(Duration::from_millis(200), Duration::from_millis(400))
                // Failed probes while the server is down are restarts: no giving up here.
                .crash_loop(1000, Duration::from_secs(60)),
        )
        .start()?;
    running(&server).await;
    let transitions = Arc::new(Mutex::new(Vec::new()));
    let mut heard = server.breaker().subscribe();
    let kept = transitions.clone();
    let listener = tokio::spawn(async move {
        while let Ok(t) = heard.recv().await {
            kept.lock().unwrap().push(t);
        }
    });

    // A steady stream of calls, each with an argument of its own, the whole time.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered_so_far = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let caller = {
        let (server, stop) = (server.clone(), stop.clone());
        let answered_so_far = answered_so_far.clone();
        tokio::spawn(async move {
            let mut outcomes = Vec::new();
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                n += 1;
                let message = format!("steady-{n}");
                let started = Instant::now();
                let result = echo(&server, &message).await;
                if result.is_ok() {
                    answered_so_far.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                outcomes.push((message, result, started.elapsed()));
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
            outcomes
        })
    };

    const ROUNDS: u64 = 4;
    for round in 0..ROUNDS {
        let before = running(&server).await;
        // Running: the steady calls are answered again (a new session's first call can
        // take longer than the long call takes to reach the server, so the kill waits
        // for one).
        let answered = answered_so_far.load(std::sync::atomic::Ordering::SeqCst);
        eventually("a steady call answered while it runs", || async {
            answered_so_far.load(std::sync::atomic::Ordering::SeqCst) > answered
        })
        .await;
        // A long call in flight when the server is killed.
        let tag = format!("long-{round}");
        let mut long = server.tool("trigger-long-running-operation");
        let call = long
            .ready()
            .await?
            .call(args(json!({"duration": 30, "steps": 30, "tag": tag})));
        let call = tokio::spawn(call);
        eventually("the long call reached the server", || async {
            proxy.calls().iter().any(|c| c.contains(&tag))
        })
        .await;
        let killed_at = Instant::now();
        everything.kill_9();

        // It fails once, fast, and is not sent again.
        let error = tokio::time::timeout(PATIENCE, call).await??.unwrap_err();
        assert!(
            matches!(error, McpError::ConnectionLost { .. }),
            "round {round}: {error}"
        );
        assert!(
            killed_at.elapsed() < Duration::from_secs(5),
            "round {round}: failed after {:?}",
            killed_at.elapsed()
        );
        // Down: its breaker is open, and calls fail at once without reaching anything.
        waiting_for_its_probe(&server).await;
        assert_eq!(server.breaker().state(), State::Open, "round {round}");
        let sent = proxy.calls().len();
        let quick_fail = Instant::now();
        let error = echo(&server, &format!("while-down-{round}"))
            .await
            .unwrap_err();
        assert!(
            matches!(error, McpError::Unavailable { .. }),
            "round {round}: {error}"
        );
        assert!(quick_fail.elapsed() < Duration::from_millis(500));
        tokio::time::sleep(Duration::from_millis(300)).await;

        // Back on its port: a new session, made by the breaker's probe.
        everything.restart().await;
        let after = until(&server, "running again", |s| {
            s.state == ServerState::Running && s.generation > before.generation
        })
        .await;
        assert_eq!(after.generation, before.generation + 1, "round {round}");
        assert!(
            !proxy.calls()[sent..]
                .iter()
                .any(|c| c.contains("while-down")),
            "a call made while it was down reached it"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let outcomes = tokio::time::timeout(PATIENCE, caller).await??;
    listener.abort();

    // No call reached the server twice; every answered call reached it once; no call
    // refused as unavailable reached it at all.
    let calls = proxy.calls();
    let distinct: HashSet<&String> = calls.iter().collect();
    assert_eq!(
        distinct.len(),
        calls.len(),
        "a call was sent twice: {calls:?}"
    );
    let reached = |message: &str| {
        calls
            .iter()
            .filter(|c| c.contains(&format!("\"{message}\"")))
            .count()
    };
    let mut answered = 0;
    for (message, result, took) in &outcomes {
        match result {
            Ok(text) => {
                assert_eq!(text, &format!("Echo: {message}"));
                assert_eq!(reached(message), 1, "{message}");
                answered += 1;
            }
            Err(McpError::Unavailable { .. }) => {
                assert_eq!(reached(message), 0, "{message} was refused but sent");
                assert!(*took < Duration::from_millis(500), "{message}: {took:?}");
            }
            Err(other) => assert!(reached(message) <= 1, "{message}: {other}"),
        }
    }
    assert!(answered > 0, "no steady call was answered");

    // Each session came back through a probe: the breaker went open, then half-open
    // (the probe, a new session), then closed, every round.
    let transitions = transitions.lock().unwrap().clone();
    let probes = transitions
        .iter()
        .filter(|t| t.from == State::HalfOpen && t.to == State::Closed)
        .count();
    assert!(probes as u64 >= ROUNDS, "{transitions:?}");
    assert!(
        transitions
            .iter()
            .all(|t| t.to != State::Closed || t.from == State::HalfOpen || t.cause == Cause::Reset),
        "closed other than by a probe: {transitions:?}"
    );
    assert_eq!(server.status().generation, ROUNDS + 1);
    assert_eq!(proxy.initializes() as u64, server.status().starts);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_the_server_forgot_is_made_again_once_through_the_probe_and_no_call_is_replayed(
) -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let everything = EverythingHttp::start(servers).await;
    let proxy = Proxy::start(everything.port()).await;
    let server = remote("everything", &proxy.url(""))
        .restart(RestartPolicy::new().backoff(Duration::from_millis(300), Duration::from_secs(1)))
        .start()?;
    let first = running(&server).await;
    assert_eq!(echo(&server, "before").await?, "Echo: before");
    assert_eq!(proxy.initializes(), 1);

    proxy.forget_the_session();
    // Several calls find the session forgotten at once: each fails, none is sent again.
    let calls = (0..4).map(|n| {
        let server = server.clone();
        tokio::spawn(async move { echo(&server, &format!("forgotten-{n}")).await })
    });
    for call in calls {
        let error = tokio::time::timeout(PATIENCE, call).await??.unwrap_err();
        assert!(
            matches!(
                error,
                McpError::SessionExpired { .. } | McpError::Unavailable { .. }
            ),
            "{error}"
        );
        assert!(
            error.to_string().contains("not replayed")
                || matches!(error, McpError::Unavailable { .. }),
            "{error}"
        );
    }
    let down = until(&server, "down", |s| s.state != ServerState::Running).await;
    assert!(
        matches!(
            down.state,
            ServerState::Down(Down::SessionExpired) | ServerState::Restarting
        ),
        "{down}"
    );

    // One new session, made by the probe; the calls that found it forgotten never
    // reached the server.
    let after = until(&server, "running again", |s| {
        s.state == ServerState::Running && s.generation > first.generation
    })
    .await;
    assert_eq!(after.generation, first.generation + 1);
    assert_eq!(echo(&server, "after").await?, "Echo: after");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(proxy.initializes(), 2, "the session was made again once");
    assert_eq!(server.status().generation, first.generation + 1);
    assert!(proxy.refused() >= 1);
    assert!(
        !proxy.calls().iter().any(|c| c.contains("forgotten")),
        "{:?}",
        proxy.calls()
    );
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_while_idle_refuses_the_old_session_and_a_new_one_is_made_through_the_probe(
) -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    // The reference server itself, with no proxy: it answers a session from before its
    // restart with 400 and an error that names no request, where the specification says
    // 404.
    let mut everything = EverythingHttp::start(servers).await;
    let url = everything.url("");
    let server = remote("everything", &url).start()?;
    let first = running(&server).await;
    assert_eq!(echo(&server, "before").await?, "Echo: before");

    // Killed and started again between calls: nothing in flight noticed.
    everything.kill_9();
    everything.restart().await;

    // The first call fails at once as a session the server forgot, not after the call
    // timeout, and is not sent again.
    let started = Instant::now();
    let error = echo(&server, "refused").await.unwrap_err();
    assert!(
        matches!(
            error,
            McpError::SessionExpired { .. } | McpError::Unavailable { .. }
        ),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    // A new session, made by the breaker's probe, serves the calls again.
    let after = until(&server, "running again", |s| {
        s.state == ServerState::Running && s.generation > first.generation
    })
    .await;
    assert_eq!(after.generation, first.generation + 1);
    assert_eq!(echo(&server, "after").await?, "Echo: after");
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_server_down_for_long_is_tried_again_until_it_answers_never_given_up() -> TestResult
{
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let mut everything = EverythingHttp::start(servers).await;
    let url = everything.url("");
    // At most 3 restarts within a minute, 50 to 100 ms apart: a crashing process would be
    // given up on within half a second.
    let server = remote("everything", &url)
        .restart(
            RestartPolicy::new()
                .backoff(Duration::from_millis(50), Duration::from_millis(100))
                .crash_loop(3, Duration::from_secs(60)),
        )
        .start()?;
    let first = running(&server).await;
    everything.kill_9();
    // Calls find it gone, and its supervisor tries to reach it, again and again.
    eventually("calls find it gone", || async {
        let _ = echo(&server, "finding it gone").await;
        server.status().state != ServerState::Running
    })
    .await;
    let mut seen_unreachable = false;
    let watching = Instant::now();
    while watching.elapsed() < Duration::from_millis(1500) {
        let _ = echo(&server, "while down").await;
        let status = server.status();
        assert!(
            !matches!(status.state, ServerState::GaveUp { .. }),
            "an outage is not a crash loop: {status}"
        );
        seen_unreachable |= matches!(
            status.state,
            ServerState::Down(Down::StartFailed(
                tower_circuit_breaker::mcp::StartError::Unreachable { .. }
            ))
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(seen_unreachable, "{}", server.status());
    let status = server.status().to_string();
    assert!(
        status.to_lowercase().contains("connection refused"),
        "{status}"
    );
    assert!(
        server.status().starts > first.starts + 3,
        "{}",
        server.status()
    );
    // Back on its port: reached again, through the probe.
    everything.restart().await;
    until(&server, "running again", |s| {
        s.state == ServerState::Running
    })
    .await;
    assert_eq!(echo(&server, "back").await?, "Echo: back");
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_server_killed_while_idle_is_taken_as_down_by_the_first_call_that_cannot_reach_it(
) -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let mut everything = EverythingHttp::start(servers).await;
    let url = everything.url("");
    let server = remote("everything", &url).start()?;
    running(&server).await;
    everything.kill_9();
    // The first call finds it gone, and was not sent; the next ones fail at once, not
    // sent either, without each finding it out (or counting against the tool).
    let error = echo(&server, "first").await.unwrap_err();
    assert!(matches!(error, McpError::Unreachable { .. }), "{error}");
    for n in 0..3 {
        let error = echo(&server, &format!("then-{n}")).await.unwrap_err();
        assert!(
            matches!(error, McpError::Unavailable { .. }),
            "{n}: {error}"
        );
    }
    everything.restart().await;
    until(&server, "running again", |s| {
        s.state == ServerState::Running
    })
    .await;
    assert_eq!(echo(&server, "back").await?, "Echo: back");
    server.stop().await;
    Ok(())
}
