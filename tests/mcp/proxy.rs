//! A counting proxy on loopback in front of a real MCP server over HTTP: it forwards
//! every request as it is (answers streamed back as they come), and notes each
//! `tools/call` that reached it, each `initialize`, the sessions the server gave and the
//! `Authorization` headers it was sent. A request the server breaks off (it died under it)
//! has its connection closed; one it refuses is answered 502. Told to, it answers 404 for a session, as a
//! server that forgot it does (the request then goes no further).

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};

type Body = BoxBody<Bytes, hyper::Error>;

#[derive(Default)]
struct Seen {
    /// The arguments of every `tools/call` forwarded, as JSON text.
    calls: Vec<String>,
    initializes: usize,
    sessions: Vec<String>,
    authorizations: HashSet<String>,
    forgotten: HashSet<String>,
    /// Requests answered 404 for a forgotten session.
    refused: usize,
}

/// The proxy; it stops when dropped.
pub struct Proxy {
    port: u16,
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy to `upstream_port` on loopback.
    pub async fn start(upstream_port: u16) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("address").port();
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let client: Client<HttpConnector, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build_http();
        let shared = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (seen, client) = (shared.clone(), client.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        forward(request, upstream_port, seen.clone(), client.clone())
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Proxy { port, seen, task }
    }

    /// Its MCP endpoint, with `query` (`?…`, or empty) after it.
    pub fn url(&self, query: &str) -> String {
        format!("http://127.0.0.1:{}/mcp{query}", self.port)
    }

    /// The arguments of each `tools/call` forwarded, in order.
    pub fn calls(&self) -> Vec<String> {
        self.seen.lock().unwrap().calls.clone()
    }

    pub fn initializes(&self) -> usize {
        self.seen.lock().unwrap().initializes
    }

    /// The `Authorization` headers sent.
    pub fn authorizations(&self) -> HashSet<String> {
        self.seen.lock().unwrap().authorizations.clone()
    }

    /// Requests answered 404 for a forgotten session.
    pub fn refused(&self) -> usize {
        self.seen.lock().unwrap().refused
    }

    /// From now, requests in the last session the server gave are answered 404.
    pub fn forget_the_session(&self) {
        let mut seen = self.seen.lock().unwrap();
        let last = seen.sessions.last().cloned().expect("a session");
        seen.forgotten.insert(last);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn answer(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::new())
            .map_err(|never: Infallible| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response
}

async fn forward(
    request: Request<Incoming>,
    upstream_port: u16,
    seen: Arc<Mutex<Seen>>,
    client: Client<HttpConnector, Full<Bytes>>,
) -> Result<Response<Body>, hyper_util::client::legacy::Error> {
    let (mut parts, body) = request.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return Ok(answer(StatusCode::BAD_REQUEST));
    };
    let session = parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    {
        let mut seen = seen.lock().unwrap();
        if let Some(auth) = parts.headers.get("authorization") {
            seen.authorizations
                .insert(auth.to_str().unwrap_or("?").to_string());
        }
        if session.as_ref().is_some_and(|s| seen.forgotten.contains(s)) {
            seen.refused += 1;
            return Ok(answer(StatusCode::NOT_FOUND));
        }
        if let Ok(message) = serde_json::from_slice::<serde_json::Value>(&body) {
            match message["method"].as_str() {
                Some("tools/call") => seen.calls.push(message["params"]["arguments"].to_string()),
                Some("initialize") => seen.initializes += 1,
                _ => {}
            }
        }
    }
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = format!("http://127.0.0.1:{upstream_port}{path}")
        .parse()
        .expect("a URI");
    parts.headers.remove("host");
    match client
        .request(Request::from_parts(parts, Full::new(body)))
        .await
    {
        Ok(response) => {
            if let Some(id) = response
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
            {
                let mut seen = seen.lock().unwrap();
                if seen.sessions.last().is_none_or(|last| last != id) {
                    seen.sessions.push(id.to_string());
                }
            }
            Ok(response.map(|body| body.boxed()))
        }
        // Refused: a gateway's answer. Broken under the request (the server died): the
        // connection is closed, as the server's own would have been.
        Err(error) if error.is_connect() => Ok(answer(StatusCode::BAD_GATEWAY)),
        Err(error) => Err(error),
    }
}
