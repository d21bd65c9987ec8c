//! A scripted OpenAI-compatible chat-completions server on loopback: each request is
//! answered by a function of the request (its messages and advertised tools), so a test
//! or an example drives a real rig agent over real HTTP with no network and no key.
//! Shared by the tests and the example (`#[path]`).

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the scripted model answers.
pub enum Reply {
    /// 200 with this chat-completion body.
    Json(Value),
    /// This status, with an OpenAI-shaped error body.
    Status(u16),
}

type Script = dyn Fn(&Value) -> Reply + Send + Sync;

/// The running server.
pub struct ScriptedModel {
    /// `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    requests: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScriptedModel {
    /// Starts the server on a free loopback port.
    pub async fn start(script: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let base_url = format!("http://{}/v1", listener.local_addr().expect("local addr"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let seen = requests.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, script.clone(), seen.clone()));
            }
        });
        ScriptedModel {
            base_url,
            requests,
            task,
        }
    }

    /// Every request body received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

/// One keep-alive connection: requests read by Content-Length, answered in order.
async fn serve(mut stream: TcpStream, script: Arc<Script>, seen: Arc<Mutex<Vec<Value>>>) {
    let mut buffer = Vec::new();
    loop {
        let Some(head_end) = read_until_head(&mut stream, &mut buffer).await else {
            return;
        };
        let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|value| value.trim().parse::<usize>().ok())
            .unwrap_or(0);
        let body_start = head_end + 4;
        while buffer.len() < body_start + length {
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
        let body: Value =
            serde_json::from_slice(&buffer[body_start..body_start + length]).unwrap_or(Value::Null);
        buffer.drain(..body_start + length);
        seen.lock().unwrap().push(body.clone());
        let (status, reason, payload) = match script(&body) {
            Reply::Json(value) => (200, "OK", value),
            Reply::Status(code) => (
                code,
                "Error",
                json!({"error": {"message": "the scripted model is down", "type": "server_error", "param": null, "code": null}}),
            ),
        };
        let payload = payload.to_string();
        let response = format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{payload}",
            payload.len()
        );
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

async fn read_until_head(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(at);
        }
        let mut chunk = [0u8; 8192];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A chat completion that calls `calls` (tool name, arguments), ids numbered from `turn`.
pub fn tool_calls(turn: usize, calls: &[(&str, Value)]) -> Reply {
    let calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({
                "id": format!("call_{turn}_{i}"),
                "type": "function",
                "function": {"name": name, "arguments": args.to_string()},
            })
        })
        .collect();
    completion(
        json!({"role": "assistant", "content": null, "tool_calls": calls}),
        "tool_calls",
    )
}

/// A chat completion that answers `text`.
pub fn text(text: &str) -> Reply {
    completion(json!({"role": "assistant", "content": text}), "stop")
}

fn completion(message: Value, finish_reason: &str) -> Reply {
    Reply::Json(json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }))
}

/// The tool names a request advertises.
pub fn advertised(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|tool| tool["function"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Every tool call of a request's history, with the content of its result (if any):
/// `(tool, arguments, result)`.
pub fn tool_history(request: &Value) -> Vec<(String, Value, Option<String>)> {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let mut calls = Vec::new();
    for message in &messages {
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            let id = call["id"].as_str().unwrap_or_default();
            let args = call["function"]["arguments"]
                .as_str()
                .and_then(|args| serde_json::from_str(args).ok())
                .unwrap_or(Value::Null);
            let result = messages
                .iter()
                .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
                .map(content_text);
            calls.push((
                call["function"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                args,
                result,
            ));
        }
    }
    calls
}

/// A message's content as text (a string, or the text of its parts).
fn content_text(message: &Value) -> String {
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        other => other.to_string(),
    }
}
