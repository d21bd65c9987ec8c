//! The agent's five tools as tower services, each behind the expediter's breaker for
//! it and a timeout: file reads, a workspace search, a shell, and two HTTP GETs.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use tower::util::BoxService;
use tower::ServiceBuilder;
use tower_circuit_breaker::error::BoxError;
use tower_circuit_breaker::expediter::{Expediter, ExpediterError};
use tower_circuit_breaker::Answer;

use super::http::{encode_query, http_get};

/// Every tool call gets this long before it counts as a failure.
const TOOL_TIMEOUT: Duration = Duration::from_secs(3);

/// A tool as the agent holds it: the breaker layer, a timeout, the service.
pub(crate) type Tool = BoxService<String, Answer<String>, BoxError>;

/// The five tools, by name.
pub(crate) struct Toolbox {
    tools: HashMap<&'static str, Tool>,
}

impl Toolbox {
    pub(crate) fn new(
        expediter: &Expediter,
        root: &Path,
        docs_addr: SocketAddr,
        search_addr: SocketAddr,
    ) -> Result<Self, ExpediterError> {
        let root: Arc<Path> = Arc::from(root);
        let (r1, r2, r3) = (root.clone(), root.clone(), root);
        let tools = HashMap::from([
            (
                "read_file",
                tool(expediter, "read_file", move |path: String| {
                    let root = r1.clone();
                    blocking(move || read_file(&root, &path))
                })?,
            ),
            (
                "search",
                tool(expediter, "search", move |pattern: String| {
                    let root = r2.clone();
                    blocking(move || search(&root, &pattern))
                })?,
            ),
            (
                "shell",
                tool(expediter, "shell", move |command: String| {
                    let root = r3.clone();
                    blocking(move || shell(&root, &command))
                })?,
            ),
            (
                "docs_fetch",
                tool(expediter, "docs_fetch", move |path: String| async move {
                    http_get(docs_addr, &path).await
                })?,
            ),
            (
                "web_search",
                tool(expediter, "web_search", move |query: String| async move {
                    http_get(search_addr, &format!("/search?q={}", encode_query(&query))).await
                })?,
            ),
        ]);
        Ok(Toolbox { tools })
    }

    pub(crate) fn get(&mut self, name: &str) -> Result<&mut Tool, ExpediterError> {
        self.tools
            .get_mut(name)
            .ok_or_else(|| ExpediterError::UnknownTool(name.to_string()))
    }
}

/// Wraps a tool function in the expediter's breaker for `name` and a timeout.
fn tool<F, Fut>(expediter: &Expediter, name: &str, f: F) -> Result<Tool, ExpediterError>
where
    F: FnMut(String) -> Fut + Send + 'static,
    Fut: Future<Output = Result<String, BoxError>> + Send + 'static,
{
    let service = ServiceBuilder::new()
        .layer(expediter.layer(name)?)
        .timeout(TOOL_TIMEOUT)
        .service_fn(f);
    Ok(BoxService::new(service))
}

/// Runs file and process work on tokio's blocking threads.
async fn blocking(
    work: impl FnOnce() -> Result<String, BoxError> + Send + 'static,
) -> Result<String, BoxError> {
    tokio::task::spawn_blocking(work).await?
}

fn read_file(root: &Path, name: &str) -> Result<String, BoxError> {
    let path = inside(root, name)?;
    Ok(std::fs::read_to_string(path).map_err(|e| format!("read {name}: {e}"))?)
}

/// A relative path that stays inside the workspace.
fn inside(root: &Path, name: &str) -> Result<PathBuf, BoxError> {
    let relative = Path::new(name);
    let escapes = relative.is_absolute()
        || relative
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)));
    if escapes {
        return Err(format!("{name}: not a path inside the workspace").into());
    }
    Ok(root.join(relative))
}

fn search(root: &Path, pattern: &str) -> Result<String, BoxError> {
    let mut files = Vec::new();
    collect_files(root, &mut files)?;
    files.sort();
    let mut hits = Vec::new();
    for file in &files {
        // Binary or unreadable files have no lines to match.
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let shown = file.strip_prefix(root).unwrap_or(file).display();
        for (n, line) in text.lines().enumerate() {
            if line.contains(pattern) {
                hits.push(format!("{shown}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    Ok(if hits.is_empty() {
        format!("no matches for {pattern:?}")
    } else {
        hits.join("\n")
    })
}

fn collect_files(dir: &Path, files: &mut Vec<PathBuf>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_files(&path, files)?;
        } else {
            files.push(path);
        }
    }
    Ok(())
}

fn shell(root: &Path, command: &str) -> Result<String, BoxError> {
    let output = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(root)
        .output()
        .map_err(|e| format!("sh: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        Err(format!("`{command}` failed ({}): {}", output.status, stderr.trim()).into())
    }
}
