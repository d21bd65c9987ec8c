//! Waiting (bounded) for what a server does, killing it, and the breakers the tests put
//! around its tools.

use std::future::Future;
use std::time::Duration;

use tower_circuit_breaker::fallback::NoFallback;
use tower_circuit_breaker::mcp::{McpClassifier, McpServer, ServerState, ServerStatus};
use tower_circuit_breaker::{CircuitBreakerLayer, Cooldown};

pub type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// How long anything a server does may take before a test fails: generous, as two cores
/// may be starting several node processes at once.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Waits until the server's status satisfies `what` (described by `wanted`), at most
/// [`PATIENCE`]; panics saying where it stands otherwise.
pub async fn until(
    server: &McpServer,
    wanted: &str,
    what: impl Fn(&ServerStatus) -> bool,
) -> ServerStatus {
    let mut watch = server.watch();
    let found = tokio::time::timeout(PATIENCE, watch.wait_for(|s| what(s))).await;
    match found {
        Ok(Ok(status)) => status.clone(),
        _ => panic!(
            "server `{}` never became {wanted}: {}",
            server.name(),
            server.status()
        ),
    }
}

/// Down, its supervisor having held its breaker open for the restart backoff (a call
/// that found the connection lost says it is down a moment before).
pub async fn waiting_for_its_probe(server: &McpServer) -> ServerStatus {
    until(server, "down, waiting for its breaker's probe", |s| {
        matches!(s.state, ServerState::Down(_)) && s.restart_wait.is_some()
    })
    .await
}

pub async fn running(server: &McpServer) -> ServerStatus {
    until(server, "running", |s| s.state == ServerState::Running).await
}

/// Waits for `check` to hold, polling every 10 ms, at most [`PATIENCE`].
pub async fn eventually<F, Fut>(wanted: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never happened: {wanted}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `kill -9` of a process.
pub fn kill_9(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -9 {pid}");
}

/// Whether a process is alive (Linux: it has a `/proc` entry that is not a zombie).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.split_whitespace().nth(2).is_none_or(|s| s != "Z"),
        Err(_) => false,
    }
}

/// A tool's breaker as a caller without an expediter would set it: MCP-aware, opening
/// after `threshold` failures, probing after a long cooldown (so tests see it open).
pub fn tool_breaker(name: &str, threshold: u32) -> CircuitBreakerLayer<NoFallback, McpClassifier> {
    CircuitBreakerLayer::builder()
        .name(name.to_string())
        .failure_threshold(threshold)
        .cooldown(Cooldown::Time(Duration::from_secs(600)))
        .build()
        .expect("valid settings")
        .with_classifier(McpClassifier::new())
}

/// A JSON object from `json!` text.
pub fn args(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    match value {
        serde_json::Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

/// Waits (at most [`PATIENCE`]) for a process the supervisor should have killed to be
/// gone; if it lives on, kills it (so that no test leaves one behind) and fails.
pub async fn assert_gone(pid: u32, what: &str) {
    let gone = tokio::time::timeout(PATIENCE, async {
        while alive(pid) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    if gone.is_err() {
        let _ = std::process::Command::new("kill")
            .arg(pid.to_string())
            .status();
        panic!("{what} {pid} outlived it");
    }
}
