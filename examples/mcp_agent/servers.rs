//! The reference MCP servers from the npm registry, pinned in `npm/package-lock.json`
//! next to this file, installed with `npm ci` into a cache folder: the one named in
//! `TCB_MCP_SERVERS` (`.ci/run` installs there), or `target/mcp-servers`. The example
//! and the crate's MCP tests both use it.
#![allow(dead_code)] // each user takes a part

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What the servers need, said when they cannot be had.
pub const NEEDS: &str = "node and npm (Debian: `apt-get install -y nodejs npm`): the pinned \
    reference servers are installed into target/mcp-servers with `npm ci` from the npm \
    registry (or name a folder where they are installed in TCB_MCP_SERVERS)";

/// Where the pins are.
fn pins() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/mcp_agent/npm")
}

/// The installed servers.
#[derive(Debug, Clone)]
pub struct Installed {
    pub root: PathBuf,
}

/// Whether `program --version` runs.
pub fn has(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The servers, installed here first if they are not (and `install` allows it);
/// otherwise why not.
pub fn locate(install: bool) -> Result<Installed, String> {
    if !has("node") {
        return Err("node is not on PATH".into());
    }
    let named = std::env::var_os("TCB_MCP_SERVERS").filter(|d| !d.is_empty());
    let root = match &named {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("target/mcp-servers"),
    };
    let servers = Installed { root };
    if servers.installed() {
        return Ok(servers);
    }
    if named.is_some() {
        return Err(format!(
            "TCB_MCP_SERVERS={} holds no install of the pinned servers",
            servers.root.display()
        ));
    }
    if !install {
        return Err("the pinned MCP servers are not installed".into());
    }
    if !has("npm") {
        return Err("the pinned MCP servers are not installed, and npm is not on PATH".into());
    }
    servers.install()?;
    Ok(servers)
}

impl Installed {
    fn installed(&self) -> bool {
        let ours = std::fs::read(pins().join("package-lock.json")).ok();
        let theirs = std::fs::read(self.root.join("package-lock.json")).ok();
        ours.is_some() && ours == theirs && self.script("server-everything").is_file()
    }

    fn install(&self) -> Result<(), String> {
        std::fs::create_dir_all(&self.root)
            .map_err(|e| format!("cannot make {}: {e}", self.root.display()))?;
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(pins().join(file), self.root.join(file))
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

    /// The entry point of a reference server (`server-memory`...), to run with `node`.
    pub fn script(&self, package: &str) -> PathBuf {
        self.root
            .join("node_modules/@modelcontextprotocol")
            .join(package)
            .join("dist/index.js")
    }
}
