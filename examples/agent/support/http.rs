//! A minimal HTTP/1.1 client and server on loopback: the docs site and the search API
//! the agent's two HTTP tools talk to.

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tower_circuit_breaker::error::BoxError;

/// `GET target` with `Connection: close`; the body of a 200, an error otherwise.
pub(crate) async fn http_get(addr: SocketAddr, target: &str) -> Result<String, BoxError> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let request = format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let raw = String::from_utf8_lossy(&raw);
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .ok_or("malformed HTTP response")?;
    let status = head.split(' ').nth(1).ok_or("malformed HTTP status line")?;
    if status != "200" {
        return Err(format!("GET {target}: HTTP {status}").into());
    }
    Ok(body.to_string())
}

/// A free loopback port: bind to port 0, note the port, close the listener. Nothing
/// listens there until a server is started on it, so connecting is refused.
pub(crate) async fn reserve_port() -> io::Result<SocketAddr> {
    TcpListener::bind("127.0.0.1:0").await?.local_addr()
}

/// Answers a request target with a page, or `None` for a 404.
pub(crate) type Site = fn(&str) -> Option<String>;

/// A loopback HTTP server: one task accepting connections until stopped.
pub(crate) struct Server {
    task: JoinHandle<()>,
}

impl Server {
    pub(crate) async fn start(addr: SocketAddr, site: Site) -> io::Result<Server> {
        let listener = TcpListener::bind(addr).await?;
        Ok(Server {
            task: tokio::spawn(serve(listener, site)),
        })
    }

    /// Stops accepting and closes the listening socket before returning.
    pub(crate) async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

async fn serve(listener: TcpListener, site: Site) {
    loop {
        if let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(respond(stream, site));
        }
    }
}

async fn respond(mut stream: TcpStream, site: Site) {
    // Read the request head (a GET has no body); 8 KiB is plenty for this demo.
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let target = head
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("GET "))
        .and_then(|rest| rest.split(' ').next());
    let (status, body) = match target.and_then(site) {
        Some(body) => ("200 OK", body),
        None => ("404 Not Found", "not found\n".to_string()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

pub(crate) fn encode_query(query: &str) -> String {
    query
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            b' ' => "+".to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The docs server's pages.
pub(crate) fn docs_site(target: &str) -> Option<String> {
    let page = match target {
        "/release-notes" => {
            "acme-api release notes\n\
             3.1.0 (latest): API v3; adds Client::pages() streaming\n\
             3.0.0: removes legacy_auth(), old_paginate() and v1_upload()\n"
        }
        "/changelog" => {
            "## 3.1.0\n- Client::pages() streams results\n\
             ## 3.0.0\n- legacy_auth(), old_paginate(), v1_upload() removed\n\
             ## 2.9.0\n- deprecation warnings for the v2 entry points\n"
        }
        "/migration/v2-to-v3" => {
            "legacy_auth(user, password) -> Client::with_token(token)\n\
             old_paginate(query)         -> Client::pages(query)\n\
             v1_upload(path)             -> Client::upload(path)\n"
        }
        "/api/v3/client" => {
            "Client::with_token(token) -> Client\n\
             Client::pages(query) -> Pages\n\
             Client::upload(path) -> Upload\n"
        }
        _ => return None,
    };
    Some(page.to_string())
}

/// The search API: `/search?q=...`, one result line per indexed term in the query.
pub(crate) fn search_api(target: &str) -> Option<String> {
    const INDEX: &[(&str, &str)] = &[
        ("latest", "acme-api 3.1.0 is the latest release (API v3)"),
        (
            "advisories",
            "one advisory for 3.0.x (token logging, fixed in 3.0.2); none for 3.1",
        ),
        (
            "legacy_auth",
            "legacy_auth() is gone in 3.0: use Client::with_token()",
        ),
        (
            "old_paginate",
            "old_paginate() is gone in 3.0: use Client::pages()",
        ),
        (
            "v1_upload",
            "v1_upload() is gone in 3.0: use Client::upload()",
        ),
    ];
    let query = target.strip_prefix("/search?q=")?.replace('+', " ");
    let results: Vec<&str> = INDEX
        .iter()
        .filter(|(term, _)| query.contains(term))
        .map(|(_, result)| *result)
        .collect();
    Some(if results.is_empty() {
        "no results\n".to_string()
    } else {
        results.join("\n") + "\n"
    })
}
