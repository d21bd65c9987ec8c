//! Extreme settings: refused with a typed error when the server is built, or taken as
//! they say (a wait that long means "not by time"), never a panic.

use std::time::Duration;

use tower_circuit_breaker::mcp::{McpConfigError, McpServer, RestartPolicy, ServerState};

use crate::common::{until, TestResult};
use crate::servers::{self, quick};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_settings_are_refused_when_built() -> TestResult {
    let bad = [
        quick(McpServer::builder("s", "true")).start_timeout(Duration::ZERO),
        quick(McpServer::builder("s", "true")).call_timeout(Duration::ZERO),
        quick(McpServer::builder("s", "true")).stop_timeout(Duration::ZERO),
        quick(McpServer::builder("s", "true")).unresponsive_after(0),
        quick(McpServer::builder("s", "true")).max_tools(0),
        quick(McpServer::builder("s", "true")).max_message_bytes(0),
        quick(McpServer::builder("s", "true"))
            .restart(RestartPolicy::new().backoff(Duration::ZERO, Duration::ZERO)),
        quick(McpServer::builder("s", "true"))
            .restart(RestartPolicy::new().crash_loop(1, Duration::ZERO)),
        quick(McpServer::builder("", "true")),
        quick(McpServer::builder("s", "")),
    ];
    for builder in bad {
        let refused = builder.clone().start();
        assert!(refused.is_err(), "{builder:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_waits_mean_never_and_nothing_panics() -> TestResult {
    if servers::get().is_none() {
        return Ok(());
    }
    // A server that cannot start, with every wait as long as a `Duration` goes.
    let server = McpServer::builder("forever", "sh")
        .args(["-c", "exit 3"])
        .start_timeout(Duration::MAX)
        .call_timeout(Duration::MAX)
        .stop_timeout(Duration::MAX)
        .restart(
            RestartPolicy::new()
                .backoff(Duration::MAX, Duration::MAX)
                .crash_loop(u32::MAX, Duration::MAX),
        )
        .start();
    let server = match server {
        Ok(server) => server,
        // Refusing them is as good as taking them.
        Err(McpConfigError::Breaker { .. }) => return Ok(()),
        Err(other) => panic!("{other}"),
    };
    let down = until(&server, "down", |s| matches!(s.state, ServerState::Down(_))).await;
    assert!(
        down.next_start.is_some() || down.restart_wait.is_some(),
        "{down}"
    );
    // Its restart is not by time: it stays down, and a stop still returns.
    tokio::time::timeout(Duration::from_secs(10), server.stop()).await?;
    assert_eq!(server.status().state, ServerState::Stopped);
    Ok(())
}
