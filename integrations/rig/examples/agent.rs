//! A rig agent whose tool breaks mid-run, under the expediter.
//!
//! ```sh
//! cargo +1.97.1 run -p tower-circuit-breaker-rig --example agent
//! ```
//!
//! A scripted OpenAI-compatible model on loopback (its tool calls are scripted in its
//! answers) drives a real rig agent over HTTP with two tools. `web_search` breaks after
//! two calls; after three failures its breaker opens; the next call of it is not made,
//! and the model gets an honest tool result saying why, what to use instead and when it
//! is tried again; from the next turn on it is not offered `web_search` at all, and it
//! finishes with `docs_fetch`. The run ends with the expediter's status report. The
//! example checks its own story and exits non-zero if it did not happen.

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::ExitCode;
use std::sync::atomic::Ordering;

use support::research::{SEARCH_WORKS_FOR, TOPICS, agent, research, researcher};
use support::scripted_model::{advertised, tool_history};

#[tokio::main]
async fn main() -> ExitCode {
    let story = agent(researcher, 3).await;
    println!("scripted model on {}", story.model.base_url);
    let answer = research(&story.agent).await;

    let requests = story.model.requests();
    for (turn, request) in requests.iter().enumerate() {
        println!(
            "turn {}: tools offered: {}",
            turn + 1,
            advertised(request).join(", ")
        );
    }
    // Every call and its result, as the model saw them in the last request.
    let last = requests.last().cloned().unwrap_or_default();
    let history = tool_history(&last);
    println!("\ntool calls, as the model saw their results:");
    for (tool, args, result) in &history {
        println!(
            "  {tool}({}) -> {}",
            args["topic"].as_str().unwrap_or_default(),
            result.as_deref().unwrap_or("(no result)")
        );
    }
    println!("\nthe agent's answer: {answer:?}");
    println!("the model's breaker: {:?}", story.model_breaker.state());
    println!("\n{}", story.expediter.report());

    // The story, checked.
    let mut wrong = Vec::new();
    let searches = story.search_calls.load(Ordering::SeqCst);
    if searches != SEARCH_WORKS_FOR + 3 {
        wrong.push(format!(
            "web_search ran {searches} times, not {} (2 answers, 3 failures, then never again)",
            SEARCH_WORKS_FOR + 3
        ));
    }
    if !history.iter().any(|(tool, _, result)| {
        tool == "web_search"
            && result.as_deref().is_some_and(|r| {
                r.starts_with("not called:")
                    && r.contains("use docs_fetch")
                    && r.contains("tried again")
            })
    }) {
        wrong.push("no call of web_search was answered with the honest skip text".to_string());
    }
    let first_open = requests
        .iter()
        .position(|r| !advertised(r).iter().any(|t| t == "web_search"));
    match first_open {
        Some(turn)
            if requests[turn..]
                .iter()
                .all(|r| !advertised(r).iter().any(|t| t == "web_search")) => {}
        _ => wrong
            .push("web_search was still offered to the model after its breaker opened".to_string()),
    }
    let fetched = story.fetch_calls.load(Ordering::SeqCst);
    if fetched != TOPICS.len() - SEARCH_WORKS_FOR {
        wrong.push(format!(
            "docs_fetch ran {fetched} times, not {}",
            TOPICS.len() - SEARCH_WORKS_FOR
        ));
    }
    if answer.is_err() {
        wrong.push("the run did not finish with an answer".to_string());
    }
    if wrong.is_empty() {
        println!(
            "the story happened: web_search broke, the model was told, docs_fetch finished the work"
        );
        ExitCode::SUCCESS
    } else {
        for line in wrong {
            eprintln!("story not told: {line}");
        }
        ExitCode::FAILURE
    }
}
