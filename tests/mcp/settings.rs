//! Extreme settings: refused with a typed error when the server is built, or taken as
//! they say (a wait that long means "not by time"), never a panic.

use std::time::Duration;

use tower_circuit_breaker::mcp::{McpServer, RestartPolicy};

use crate::common::TestResult;
use crate::servers::quick;

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
