//! The reference everything server in its Streamable HTTP mode (`node dist/index.js
//! streamableHttp`, on the port in `PORT`), run by a test on a free loopback port: killed
//! with SIGKILL by its pid and started again on the same port.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::{kill_9, PATIENCE};
use crate::servers::Servers;

/// One everything server over HTTP; killed when dropped.
pub struct EverythingHttp {
    script: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl EverythingHttp {
    /// Starts it on a free loopback port and waits (bounded) until it accepts.
    pub async fn start(servers: &Servers) -> EverythingHttp {
        let port = free_port();
        let mut server = EverythingHttp {
            script: servers.script("server-everything"),
            port,
            child: None,
        };
        server.restart().await;
        server
    }

    /// Its port (its MCP endpoint is `/mcp` there).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its MCP endpoint, with `query` (`?…`, or empty) after it.
    pub fn url(&self, query: &str) -> String {
        format!("http://127.0.0.1:{}/mcp{query}", self.port)
    }

    /// `kill -9` by pid, and the process reaped.
    pub fn kill_9(&mut self) {
        let mut child = self.child.take().expect("it runs");
        kill_9(child.id());
        let _ = child.wait();
    }

    /// Starts it (again) on its port, and waits until it accepts connections.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = Command::new("node")
            .arg(&self.script)
            .arg("streamableHttp")
            .env("PORT", self.port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run node");
        self.child = Some(child);
        let port = self.port;
        let accepting = tokio::time::timeout(PATIENCE, async move {
            while tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err()
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(
            accepting.is_ok(),
            "the everything server never listened on {port}"
        );
    }
}

impl Drop for EverythingHttp {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A loopback port free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}
