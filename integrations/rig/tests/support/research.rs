//! The story the example tells and the tests check: a rig agent researches six topics
//! with two tools over a scripted model on loopback. `web_search` breaks after two calls;
//! its breaker opens, the model is told in an honest tool result to use `docs_fetch`,
//! is no longer offered `web_search`, and finishes with `docs_fetch`.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rig_agent::tool::server::ToolServer;
use rig_agent::{Agent, AgentBuilder};
use rig_core::providers::openai::OpenAIConfig;
use rig_core::tool::{Tool, ToolContext};
use serde_json::{Value, json};
use tower_circuit_breaker::expediter::{Alternative, Expediter, ToolSpec};
use tower_circuit_breaker::{CircuitBreakerHandle, CircuitBreakerLayer};
use tower_circuit_breaker_rig::{BreakerHttpClient, ExpediterHook, supervised};

use super::scripted_model::{Reply, ScriptedModel, advertised, text, tool_calls, tool_history};

/// What the agent is asked to look up.
pub const TOPICS: [&str; 6] = [
    "acme-api 3.x",
    "acme-cli 2.0",
    "acme-sdk 1.4",
    "acme-db 5",
    "acme-ui 7",
    "acme-auth 2",
];

/// How many calls `web_search` answers before its backend goes down.
pub const SEARCH_WORKS_FOR: usize = 2;

#[derive(serde::Deserialize)]
pub struct Topic {
    topic: String,
}

/// The JSON schema of a [`Topic`], the arguments of both tools.
fn topic_parameters() -> Value {
    json!({"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]})
}

/// A web search whose backend goes down after [`SEARCH_WORKS_FOR`] calls.
pub struct WebSearch {
    pub calls: Arc<AtomicUsize>,
}

impl Tool for WebSearch {
    const NAME: &'static str = "web_search";
    type Args = Topic;
    type Output = String;
    type Error = std::io::Error;

    fn description(&self) -> String {
        "Search the web for a topic".into()
    }

    fn parameters(&self) -> Value {
        topic_parameters()
    }

    async fn call(&self, _: &mut ToolContext, args: Topic) -> Result<String, std::io::Error> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if call > SEARCH_WORKS_FOR {
            return Err(std::io::Error::other(
                "connect: Connection refused (search.example.com:443)",
            ));
        }
        Ok(format!("RESULT: 12 web pages about {}", args.topic))
    }
}

/// The project's docs, fetched page by page: it always works.
pub struct DocsFetch {
    pub calls: Arc<AtomicUsize>,
}

impl Tool for DocsFetch {
    const NAME: &'static str = "docs_fetch";
    type Args = Topic;
    type Output = String;
    type Error = std::io::Error;

    fn description(&self) -> String {
        "Fetch the project's docs page for a topic".into()
    }

    fn parameters(&self) -> Value {
        topic_parameters()
    }

    async fn call(&self, _: &mut ToolContext, args: Topic) -> Result<String, std::io::Error> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(format!("RESULT: the docs page of {}", args.topic))
    }
}

/// The scripted model: two pending topics a turn; `web_search` while it is advertised
/// and the last result for the topic did not say to use `docs_fetch`; a failed topic is
/// tried again; once every topic has a result, the answer.
pub fn researcher(request: &Value) -> Reply {
    let tools = advertised(request);
    let history = tool_history(request);
    let result_of = |topic: &str| {
        history
            .iter()
            .rev()
            .find(|(_, args, _)| args["topic"] == topic)
            .and_then(|(_, _, result)| result.clone())
    };
    let pending: Vec<&str> = TOPICS
        .iter()
        .copied()
        .filter(|topic| !result_of(topic).is_some_and(|r| r.starts_with("RESULT")))
        .collect();
    if pending.is_empty() {
        return text(&format!("Notes on all {} topics are ready.", TOPICS.len()));
    }
    let calls: Vec<(&str, Value)> = pending
        .iter()
        .take(2)
        .map(|topic| {
            let told = result_of(topic).is_some_and(|r| r.contains("use docs_fetch"));
            let tool = if tools.iter().any(|t| t == "web_search") && !told {
                "web_search"
            } else {
                "docs_fetch"
            };
            (tool, json!({"topic": topic}))
        })
        .collect();
    tool_calls(history.len(), &calls)
}

/// The expediter of the story's two tools.
pub fn expediter() -> Expediter {
    Expediter::builder()
        .tool(
            ToolSpec::new("web_search")
                .provides("web search")
                .alternative(Alternative::high(
                    "docs_fetch",
                    "fetch the project's docs page",
                    "no pages beyond the project's docs",
                ))
                .fallback("ask the user for the information"),
        )
        .tool(ToolSpec::new("docs_fetch").fallback("ask the user for the page"))
        .build()
        .expect("a valid capability map")
}

/// Everything the story runs on.
pub struct Story {
    pub model: ScriptedModel,
    pub expediter: Expediter,
    pub agent: Agent,
    pub model_breaker: CircuitBreakerHandle,
    pub search_calls: Arc<AtomicUsize>,
    pub fetch_calls: Arc<AtomicUsize>,
}

/// A rig agent over `script` on loopback, with the story's tools under the expediter
/// and the model behind a breaker that opens after `model_threshold` failures.
pub async fn agent(
    script: impl Fn(&Value) -> Reply + Send + Sync + 'static,
    model_threshold: u32,
) -> Story {
    let model = ScriptedModel::start(script).await;
    let breaker = CircuitBreakerLayer::builder()
        .name("model")
        .failure_threshold(model_threshold)
        .build()
        .expect("valid breaker settings");
    let http = BreakerHttpClient::new(rig_reqwest::ReqwestClient::default(), breaker);
    let model_breaker = http.handle();
    let completion = OpenAIConfig::new("sk-scripted")
        .with_base_url(model.base_url.clone())
        .connect(http)
        .chat("scripted");
    let expediter = expediter();
    let search_calls = Arc::new(AtomicUsize::new(0));
    let fetch_calls = Arc::new(AtomicUsize::new(0));
    let tools = ToolServer::new().run();
    let agent = AgentBuilder::new(completion)
        .tool_server_handle(tools.clone())
        .dynamic_tool(
            supervised(
                &expediter,
                WebSearch {
                    calls: search_calls.clone(),
                },
            )
            .expect("known tool"),
        )
        .dynamic_tool(
            supervised(
                &expediter,
                DocsFetch {
                    calls: fetch_calls.clone(),
                },
            )
            .expect("known tool"),
        )
        .add_hook(ExpediterHook::new(expediter.clone(), tools))
        .build();
    Story {
        model,
        expediter,
        agent,
        model_breaker,
        search_calls,
        fetch_calls,
    }
}

/// The research prompt, run with one tool call at a time (calls of a turn in order).
pub async fn research(agent: &Agent) -> Result<String, String> {
    agent
        .prompt(format!("Collect release notes on: {}", TOPICS.join(", ")))
        .max_turns(12)
        .tool_concurrency(1)
        .await
        .map(|response| response.to_string())
        .map_err(|error| error.to_string())
}
