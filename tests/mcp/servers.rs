//! The real MCP servers these tests run: the reference servers from the npm registry,
//! pinned in `examples/mcp_agent/npm/package-lock.json`, installed in a cache folder
//! (the one `.ci/run` names in `TCB_MCP_SERVERS`, or `target/mcp-servers`, installed
//! here with `npm ci` when npm is on PATH), and started by the tests over stdio with
//! `node`.
//!
//! When they cannot be had, a test says `skipped: <why>, <how to get them>` on stderr and
//! returns, unless `TCB_REQUIRE_SERVERS=1` (`.ci/run` sets it): then it fails with that
//! message.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use tower_circuit_breaker::mcp::{McpServer, McpServerBuilder, RestartPolicy};

#[path = "../../examples/mcp_agent/servers.rs"]
mod install;

/// The installed servers.
pub struct Servers {
    installed: install::Installed,
}

/// The servers, or `None` (having said why) when the test should be skipped.
pub fn get() -> Option<&'static Servers> {
    static SERVERS: OnceLock<Result<Servers, String>> = OnceLock::new();
    let found =
        SERVERS.get_or_init(|| install::locate(true).map(|installed| Servers { installed }));
    match found {
        Ok(servers) => Some(servers),
        Err(why) => {
            let how = format!(
                "the MCP tests need {}; `bash .ci/run` installs them",
                install::NEEDS
            );
            if std::env::var("TCB_REQUIRE_SERVERS").is_ok_and(|v| v == "1") {
                panic!("{why}, {how}");
            }
            eprintln!("skipped: {why}, {how}");
            None
        }
    }
}

pub fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

impl Servers {
    /// The entry point of a reference server (`server-everything`...).
    pub fn script(&self, package: &str) -> PathBuf {
        self.installed.script(package)
    }

    /// `node <script> [args]`, as a shell word list for `sh -c` wrappers.
    pub fn command_line(&self, package: &str, args: &[&str]) -> String {
        let mut words = vec!["node".to_string(), shell_quote(&self.script(package))];
        words.extend(args.iter().map(|a| a.to_string()));
        words.join(" ")
    }

    /// The everything server (its long-running operation, `get-sum`, `echo`...).
    pub fn everything(&self, name: &str) -> McpServerBuilder {
        quick(
            McpServer::builder(name, "node")
                .arg(self.script("server-everything"))
                .arg("stdio"),
        )
    }

    /// The memory server, keeping its graph in `file`.
    pub fn memory(&self, name: &str, file: &Path) -> McpServerBuilder {
        quick(
            McpServer::builder(name, "node")
                .arg(self.script("server-memory"))
                .env("MEMORY_FILE_PATH", file),
        )
    }

    /// The filesystem server, allowed into `dir` only.
    pub fn filesystem(&self, name: &str, dir: &Path) -> McpServerBuilder {
        quick(
            McpServer::builder(name, "node")
                .arg(self.script("server-filesystem"))
                .arg(dir),
        )
    }

    /// The hostile test server (`tests/mcp/hostile.js`) in `mode`.
    pub fn hostile(&self, name: &str, mode: &str) -> McpServerBuilder {
        quick(
            McpServer::builder(name, "node")
                .arg(manifest_dir().join("tests/mcp/hostile.js"))
                .arg(mode),
        )
    }
}

/// Settings for tests: short backoffs, bounded starts and calls.
pub fn quick(builder: McpServerBuilder) -> McpServerBuilder {
    builder
        .start_timeout(Duration::from_secs(20))
        .call_timeout(Duration::from_secs(20))
        .stop_timeout(Duration::from_millis(500))
        .restart(
            RestartPolicy::new()
                .backoff(Duration::from_millis(100), Duration::from_millis(800))
                .crash_loop(5, Duration::from_secs(30)),
        )
}

pub fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// A folder of its own for a test.
pub fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tcb-mcp-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("make a scratch folder");
    dir
}
