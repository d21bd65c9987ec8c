//! The real MCP servers these tests run: the reference servers from the npm registry,
//! pinned in `tests/mcp/npm/package-lock.json`, installed in a cache folder (the one
//! `.ci/run` names in `TCB_MCP_SERVERS`, or `target/mcp-servers`, installed here with
//! `npm ci` when npm is on PATH), and started by the tests over stdio with `node`.
//!
//! When they cannot be had, a test says `skipped: <why>, <how to get them>` on stderr and
//! returns, unless `TCB_REQUIRE_SERVERS=1` (`.ci/run` sets it): then it fails with that
//! message.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use tower_circuit_breaker::mcp::{McpServer, McpServerBuilder, RestartPolicy};

const HOW: &str = "the MCP tests need node and npm (Debian: `apt-get install -y nodejs npm`); \
    they install the pinned reference servers into target/mcp-servers with `npm ci` \
    (or point TCB_MCP_SERVERS at a folder where they are installed); `bash .ci/run` does it";

/// The installed servers.
pub struct Servers {
    root: PathBuf,
}

/// The servers, or `None` (having said why) when the test should be skipped.
pub fn get() -> Option<&'static Servers> {
    static SERVERS: OnceLock<Result<Servers, String>> = OnceLock::new();
    match SERVERS.get_or_init(find) {
        Ok(servers) => Some(servers),
        Err(why) => {
            if std::env::var("TCB_REQUIRE_SERVERS").is_ok_and(|v| v == "1") {
                panic!("{why}, {HOW}");
            }
            eprintln!("skipped: {why}, {HOW}");
            None
        }
    }
}

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn has(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn find() -> Result<Servers, String> {
    if !has("node") {
        return Err("node is not on PATH".into());
    }
    let root = match std::env::var_os("TCB_MCP_SERVERS") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => manifest_dir().join("target/mcp-servers"),
    };
    let servers = Servers { root };
    if servers.installed() {
        return Ok(servers);
    }
    if std::env::var_os("TCB_MCP_SERVERS").is_some_and(|d| !d.is_empty()) {
        return Err(format!(
            "TCB_MCP_SERVERS={} has no installed servers of the pinned versions",
            servers.root.display()
        ));
    }
    if !has("npm") {
        return Err("the pinned MCP servers are not installed and npm is not on PATH".into());
    }
    servers.install()?;
    Ok(servers)
}

impl Servers {
    fn lock_file() -> PathBuf {
        manifest_dir().join("tests/mcp/npm/package-lock.json")
    }

    fn installed(&self) -> bool {
        let ours = std::fs::read(Self::lock_file()).ok();
        let theirs = std::fs::read(self.root.join("package-lock.json")).ok();
        ours.is_some() && ours == theirs && self.script("server-everything").is_file()
    }

    fn install(&self) -> Result<(), String> {
        std::fs::create_dir_all(&self.root)
            .map_err(|e| format!("cannot make {}: {e}", self.root.display()))?;
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(
                manifest_dir().join("tests/mcp/npm").join(file),
                self.root.join(file),
            )
            .map_err(|e| format!("cannot copy {file}: {e}"))?;
        }
        let output = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--prefix"])
            .arg(&self.root)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run npm: {e}"))?;
        if !output.status.success() || !self.script("server-everything").is_file() {
            return Err(format!(
                "`npm ci` of the pinned MCP servers failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(())
    }

    /// The entry point of a reference server (`server-everything`...).
    pub fn script(&self, package: &str) -> PathBuf {
        self.root
            .join("node_modules/@modelcontextprotocol")
            .join(package)
            .join("dist/index.js")
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
