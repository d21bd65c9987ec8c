//! The admin service on a free loopback port, each connection served by hyper; shared
//! by the tests that reach it over real TCP (`tests/admin.rs`, `tests/adversarial_http.rs`),
//! each of which includes it with `#[path = "common/admin_server.rs"] mod admin_server;`.

use std::net::SocketAddr;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tower::ServiceExt;
use tower_circuit_breaker::admin::Admin;

/// How long a raw exchange may take before the test fails.
const BOUND: Duration = Duration::from_secs(5);

/// The admin service on a loopback port; stopped when dropped.
pub(crate) struct AdminServer {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl AdminServer {
    pub(crate) async fn start(admin: Admin) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("an address");
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let admin = admin.clone();
                let service =
                    hyper::service::service_fn(move |request| admin.clone().oneshot(request));
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        AdminServer { addr, task }
    }

    #[allow(dead_code)] // not every including file asks for a URL
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Sends `request` as raw bytes (it should ask `connection: close`); the status and
    /// the body.
    #[allow(dead_code)] // not every including file sends raw bytes
    pub(crate) async fn raw(&self, request: &[u8]) -> (u16, String) {
        let mut stream = tokio::time::timeout(BOUND, tokio::net::TcpStream::connect(self.addr))
            .await
            .expect("connected within its bound")
            .expect("connected");
        let _ = tokio::time::timeout(BOUND, stream.write_all(request)).await;
        let mut reply = Vec::new();
        let _ = tokio::time::timeout(BOUND, stream.read_to_end(&mut reply)).await;
        let text = String::from_utf8_lossy(&reply).into_owned();
        let status = text
            .get(9..12)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("a status line: {text:?}"));
        let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
        (status, body)
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
