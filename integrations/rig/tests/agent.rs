//! A real rig agent over real HTTP on loopback (a scripted OpenAI-compatible model), its
//! tools under the expediter and its model behind a breaker.

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;
use support::research::{SEARCH_WORKS_FOR, TOPICS, agent, research, researcher};
use support::scripted_model::{Reply, advertised, text, tool_calls, tool_history};
use tower_circuit_breaker::State;
use tower_circuit_breaker::expediter::Action;

/// Every wait in these tests is bounded.
const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_tool_that_breaks_mid_run_is_skipped_withheld_and_routed_around() {
    let story = agent(researcher, 3).await;
    let answer = tokio::time::timeout(LIMIT, research(&story.agent))
        .await
        .expect("bounded");
    assert_eq!(answer.as_deref(), Ok("Notes on all 6 topics are ready."));

    // web_search: two answers, three failures, then never called again.
    assert_eq!(
        story.search_calls.load(Ordering::SeqCst),
        SEARCH_WORKS_FOR + 3
    );
    assert_eq!(
        story.fetch_calls.load(Ordering::SeqCst),
        TOPICS.len() - SEARCH_WORKS_FOR
    );
    assert_eq!(
        story.expediter.handle("web_search").unwrap().state(),
        State::Open
    );

    let requests = story.model.requests();
    let offered: Vec<bool> = requests
        .iter()
        .map(|r| advertised(r).iter().any(|t| t == "web_search"))
        .collect();
    // Offered on the first three turns, withheld from the turn after it opened on.
    assert_eq!(offered, [true, true, true, false, false, false]);
    assert!(
        requests
            .iter()
            .all(|r| advertised(r).iter().any(|t| t == "docs_fetch"))
    );

    // The call decided after the breaker opened was not made: the model was told.
    let history = tool_history(requests.last().unwrap());
    let skipped: Vec<&String> = history
        .iter()
        .filter_map(|(_, _, result)| result.as_ref())
        .filter(|r| r.starts_with("not called:"))
        .collect();
    assert_eq!(skipped.len(), 1, "{history:#?}");
    // The tool it was about, and each topic answered once with a result.
    for topic in TOPICS {
        let answered = history
            .iter()
            .filter(|(_, args, result)| {
                args["topic"] == topic && result.as_deref().is_some_and(|r| r.starts_with("RESULT"))
            })
            .count();
        assert_eq!(answered, 1, "{topic}: {history:#?}");
    }

    let report = story.expediter.report().to_string();
    assert!(report.contains("web_search"), "{report}");
    assert!(report.contains("docs_fetch"), "{report}");
    assert_eq!(story.model_breaker.state(), State::Closed);
}

#[tokio::test]
async fn a_skipped_call_tells_the_model_why_what_instead_and_when_it_is_tried_again() {
    let story = agent(researcher, 3).await;
    tokio::time::timeout(LIMIT, research(&story.agent))
        .await
        .expect("bounded")
        .expect("an answer");
    let history = tool_history(story.model.requests().last().unwrap());
    let (tool, args, result) = history
        .iter()
        .find(|(_, _, result)| {
            result
                .as_deref()
                .is_some_and(|r| r.starts_with("not called:"))
        })
        .expect("a skipped call");
    assert_eq!(tool, "web_search");
    assert_eq!(args["topic"], TOPICS[3]);
    let text = result.as_deref().unwrap();
    // Why (the failures and the last error), what to use instead, when it is tried again.
    assert!(
        text.contains("web_search is not offered: it failed 3 times in a row"),
        "{text}"
    );
    assert!(text.contains("Connection refused"), "{text}");
    assert!(
        text.contains("use docs_fetch (fetch the project's docs page) instead"),
        "{text}"
    );
    assert!(text.contains("it is tried again in"), "{text}");
    // web_search is still withheld, with the same reason.
    let offer = story.expediter.offered_tools();
    assert_eq!(offer.offered, ["docs_fetch".into()]);
    assert!(
        offer.withheld[0]
            .line
            .starts_with("web_search is not offered: it failed 3 times in a row")
    );
}

#[tokio::test]
async fn the_tools_offered_each_turn_follow_the_expediters_offer() {
    // A model that only lists the tools it is offered and answers.
    let story = agent(|_: &serde_json::Value| text("ok"), 3).await;
    let ask = |agent: &rig_agent::Agent| {
        let agent = agent.clone();
        async move {
            agent
                .prompt("which tools?")
                .max_turns(2)
                .await
                .map(|r| r.to_string())
        }
    };
    tokio::time::timeout(LIMIT, ask(&story.agent))
        .await
        .expect("bounded")
        .expect("an answer");
    story.expediter.handle("web_search").unwrap().force_open();
    tokio::time::timeout(LIMIT, ask(&story.agent))
        .await
        .expect("bounded")
        .expect("an answer");
    story.expediter.handle("web_search").unwrap().reset();
    story.expediter.kill_switch().kill();
    tokio::time::timeout(LIMIT, ask(&story.agent))
        .await
        .expect("bounded")
        .expect("an answer");

    let offered: Vec<Vec<String>> = story.model.requests().iter().map(advertised).collect();
    assert_eq!(
        offered,
        [
            vec!["web_search".to_string(), "docs_fetch".to_string()],
            vec!["docs_fetch".to_string()],
            vec![],
        ]
    );
    assert!(matches!(
        story.expediter.peek("docs_fetch").unwrap(),
        Action::Skip { .. }
    ));
}

#[tokio::test]
async fn a_withheld_tool_the_model_calls_anyway_is_answered_honestly_not_run() {
    // The model calls web_search although it is not offered, then answers.
    let story = agent(
        |request: &serde_json::Value| {
            if tool_history(request).is_empty() {
                tool_calls(0, &[("web_search", json!({"topic": "acme-api 3.x"}))])
            } else {
                text("done")
            }
        },
        3,
    )
    .await;
    story.expediter.handle("web_search").unwrap().force_open();
    let answer = tokio::time::timeout(LIMIT, research(&story.agent))
        .await
        .expect("bounded");
    assert_eq!(answer.as_deref(), Ok("done"));
    assert_eq!(story.search_calls.load(Ordering::SeqCst), 0);
    let history = tool_history(story.model.requests().last().unwrap());
    let result = history[0].2.as_deref().unwrap_or_default();
    assert!(
        result.starts_with("not called: web_search is not offered: an operator forced it open"),
        "{result}"
    );
}

#[tokio::test]
async fn the_models_breaker_opens_when_the_model_endpoint_fails_and_then_fails_fast() {
    let story = agent(|_: &serde_json::Value| Reply::Status(503), 2).await;
    for _ in 0..2 {
        let answer = tokio::time::timeout(LIMIT, research(&story.agent))
            .await
            .expect("bounded");
        assert!(answer.is_err());
    }
    assert_eq!(story.model_breaker.state(), State::Open);
    let sent = story.model.requests().len();
    assert!(sent >= 2, "{sent} requests");

    // Open: the next run fails at once, with nothing sent, and says why.
    let error = tokio::time::timeout(LIMIT, research(&story.agent))
        .await
        .expect("bounded")
        .expect_err("the model's breaker is open");
    assert_eq!(story.model.requests().len(), sent);
    assert!(
        error.contains("circuit breaker `model` skipped the call"),
        "{error}"
    );
    // No tool was called.
    assert_eq!(story.search_calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_refused_request_does_not_count_against_the_model() {
    let story = agent(|_: &serde_json::Value| Reply::Status(400), 2).await;
    for _ in 0..3 {
        let answer = tokio::time::timeout(LIMIT, research(&story.agent))
            .await
            .expect("bounded");
        assert!(answer.is_err());
    }
    assert_eq!(story.model_breaker.state(), State::Closed);
    assert!(story.model.requests().len() >= 3);
}
