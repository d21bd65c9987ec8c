//! A scripted OpenAI-compatible tool-calling model on loopback: `POST
//! /v1/chat/completions`, answered from a plan and the conversation so far. It calls
//! only tools it is offered: a step whose tool is not offered is left for later, and its
//! final answer says what it could not do and why (from the lines the agent passed on).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;

/// One step of the model's plan: a tool and its arguments.
#[derive(Debug, Clone)]
pub struct Step {
    pub tool: String,
    pub arguments: Value,
}

/// The model server.
pub struct Model {
    pub addr: SocketAddr,
    requests: Arc<AtomicUsize>,
}

impl Model {
    /// Serves the model, which works through `plan`.
    pub async fn start(plan: Vec<Step>) -> std::io::Result<Model> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(AtomicUsize::new(0));
        let (plan, counted) = (Arc::new(plan), requests.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (plan, counted) = (plan.clone(), counted.clone());
                tokio::spawn(async move {
                    let answer = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let (plan, counted) = (plan.clone(), counted.clone());
                        async move { Ok::<_, Infallible>(answer(request, &plan, &counted).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), answer)
                        .await;
                });
            }
        });
        Ok(Model { addr, requests })
    }

    /// The completions it was asked for.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

async fn answer(
    request: Request<Incoming>,
    plan: &[Step],
    counted: &AtomicUsize,
) -> Response<Full<Bytes>> {
    let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return reply(400, json!({"error": {"message": "unreadable body"}})),
    };
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return reply(400, json!({"error": {"message": "not JSON"}}));
    };
    let message = next(&request, plan, n);
    reply(
        200,
        json!({
            "id": format!("chatcmpl-{n}"),
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "scripted",
            "choices": [{
                "index": 0,
                "finish_reason": if message.get("tool_calls").is_some() { "tool_calls" } else { "stop" },
                "message": message,
            }],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }),
    )
}

fn reply(status: u16, body: Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::from(body.to_string()))
        .expect("a valid response")
}

/// The model's next message: the first step of its plan not yet done whose tool is
/// offered, or, when there is none, its answer.
fn next(request: &Value, plan: &[Step], n: usize) -> Value {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let offered: Vec<&str> = request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    // What it asked for before: each tool with its arguments.
    let done: Vec<(String, Value)> = messages
        .iter()
        .filter_map(|m| m["tool_calls"].as_array())
        .flatten()
        .filter_map(|c| {
            let name = c["function"]["name"].as_str()?.to_string();
            let arguments = serde_json::from_str(c["function"]["arguments"].as_str()?).ok()?;
            Some((name, arguments))
        })
        .collect();
    let pending: Vec<&Step> = plan
        .iter()
        .filter(|s| {
            !done
                .iter()
                .any(|(tool, args)| *tool == s.tool && *args == s.arguments)
        })
        .collect();
    if let Some(step) = pending.iter().find(|s| offered.contains(&s.tool.as_str())) {
        return json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{
                "id": format!("call_{n}"),
                "type": "function",
                "function": {"name": step.tool, "arguments": step.arguments.to_string()},
            }],
        });
    }
    // Nothing left it can do: say what was done, and what was not and why.
    let mut answer = format!("Done: {} tool calls.", done.len());
    if !pending.is_empty() {
        let not_offered: Vec<&str> = messages
            .iter()
            .filter(|m| m["role"] == "system")
            .filter_map(|m| m["content"].as_str())
            .flat_map(|c| c.lines())
            .filter(|l| l.contains(" is not offered: "))
            .collect();
        let steps: Vec<&str> = pending.iter().map(|s| s.tool.as_str()).collect();
        answer.push_str(&format!(" Not done: {} (not offered", steps.join(", ")));
        if let Some(line) = not_offered
            .iter()
            .find(|l| steps.iter().any(|s| l.starts_with(s)))
        {
            let why = line.split(" is not offered: ").nth(1).unwrap_or(line);
            let why = why.split("; ").next().unwrap_or(why);
            answer.push_str(&format!(": {why}"));
        }
        answer.push_str(").");
    }
    json!({"role": "assistant", "content": answer})
}
