//! Calls to real servers: answered, a tool's own failure, the caller's mistakes.

use serde_json::json;
use tower::{Layer, Service, ServiceExt};
use tower_circuit_breaker::expediter::Blame;
use tower_circuit_breaker::mcp::{Fault, McpClassifier, McpError, ServerState, ToolCall};
use tower_circuit_breaker::{CircuitBreakerLayer, Cooldown, Source, State};

use crate::common::{args, running, tool_breaker, TestResult};
use crate::servers;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_to_a_real_server_is_answered_through_both_breakers() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers.everything("everything").start()?;
    let status = running(&server).await;
    assert_eq!((status.starts, status.generation), (1, 1));
    assert!(status.pid.is_some());
    assert!(status.tools.get("get-sum").is_some(), "{:?}", status.tools);
    assert!(status.tools.get("trigger-long-running-operation").is_some());
    assert!(
        status.tools.refused().is_empty(),
        "{:?}",
        status.tools.refused()
    );

    let breaker = tool_breaker("get-sum", 3);
    let handle = breaker.handle();
    let mut sum = breaker.layer(server.tool("get-sum"));
    let answer = sum
        .ready()
        .await?
        .call(args(json!({"a": 2, "b": 3})))
        .await?;
    assert_eq!(answer.source(), Source::Service);
    let text = answer.get_ref().content[0].as_text().unwrap().text.clone();
    assert_eq!(text, "The sum of 2 and 3 is 5.");

    // The same through the service for any tool of the server.
    let mut any = server.service();
    let echo = any
        .ready()
        .await?
        .call(ToolCall::new("echo", args(json!({"message": "hi"}))))
        .await?;
    assert!(echo.content[0].as_text().unwrap().text.contains("hi"));

    assert_eq!(server.calls_sent(), 2);
    assert_eq!(handle.snapshot().counts.successes, 1);
    assert_eq!(server.breaker().state(), State::Closed);
    server.stop().await;
    assert_eq!(server.status().state, ServerState::Stopped);
    assert!(
        !crate::common::alive(status.pid.unwrap()),
        "stopped means gone"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_arguments_are_the_callers_mistake_and_never_trip_a_breaker() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers
        .everything("everything")
        .unresponsive_after(1)
        .start()?;
    running(&server).await;
    let breaker = tool_breaker("get-sum", 1);
    let handle = breaker.handle();
    let mut sum = breaker.layer(server.tool("get-sum"));
    for bad in [json!({"a": "two"}), json!({}), json!({"a": 1, "b": [2]})] {
        let error = sum.ready().await?.call(args(bad)).await.unwrap_err();
        let error = error.downcast_ref::<McpError>().expect("an MCP error");
        assert!(
            matches!(error, McpError::InvalidArguments { message, .. } if message.contains("Input validation error")),
            "{error}"
        );
        assert_eq!(error.fault(), Fault::Caller);
    }
    // Thresholds of one, and neither breaker moved.
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().counts.failures, 0);
    assert_eq!(server.breaker().state(), State::Closed);
    assert_eq!(server.breaker().snapshot().consecutive_failures, 0);
    let answer = sum
        .ready()
        .await?
        .call(args(json!({"a": 1, "b": 1})))
        .await?;
    assert_eq!(answer.source(), Source::Service);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_answering_is_error_is_the_tools_failure_and_not_the_servers() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let dir = servers::scratch("is-error");
    std::fs::write(dir.join("notes.txt"), "hello")?;
    let server = servers.filesystem("files", &dir).start()?;
    running(&server).await;

    let breaker = tool_breaker("read_text_file", 2);
    let handle = breaker.handle();
    let mut read = breaker.layer(server.tool("read_text_file"));
    let path = dir.join("notes.txt").display().to_string();
    let answer = read
        .ready()
        .await?
        .call(args(json!({ "path": path })))
        .await?;
    assert_eq!(answer.get_ref().content[0].as_text().unwrap().text, "hello");

    // Outside the allowed folder: the tool runs and answers `isError: true`.
    for _ in 0..2 {
        let error = read
            .ready()
            .await?
            .call(args(json!({"path": "/etc/hostname"})))
            .await
            .unwrap_err();
        let error = error.downcast_ref::<McpError>().expect("an MCP error");
        match error {
            McpError::Tool {
                message, result, ..
            } => {
                assert!(message.contains("Access denied"), "{message}");
                assert_eq!(result.is_error, Some(true));
            }
            other => panic!("expected the tool's failure, got {other}"),
        }
    }
    assert_eq!(
        handle.state(),
        State::Open,
        "two tool failures open its breaker"
    );
    // The server answered every time: its breaker saw successes.
    assert_eq!(server.breaker().state(), State::Closed);
    assert_eq!(server.breaker().snapshot().counts.failures, 0);

    // With a rule that a missing file is the caller's, it is not counted.
    let lenient = CircuitBreakerLayer::builder()
        .failure_threshold(1)
        .cooldown(Cooldown::Time(std::time::Duration::from_secs(600)))
        .build()?
        .with_classifier(McpClassifier::new().tool_errors(Blame::of));
    let lenient_handle = lenient.handle();
    let mut read = lenient.layer(server.tool("read_text_file"));
    let missing = dir.join("missing.txt").display().to_string();
    let error = read
        .ready()
        .await?
        .call(args(json!({ "path": missing })))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("ENOENT"), "{error}");
    assert_eq!(lenient_handle.state(), State::Closed);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_the_server_does_not_list_is_never_sent() -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers.everything("everything").start()?;
    running(&server).await;
    let breaker = tool_breaker("nope", 1);
    let mut nope = breaker.layer(server.tool("no-such-tool"));
    for _ in 0..3 {
        let error = nope.ready().await?.call(args(json!({}))).await.unwrap_err();
        assert!(matches!(
            error.downcast_ref::<McpError>(),
            Some(McpError::UnknownTool { .. })
        ));
    }
    assert_eq!(server.calls_sent(), 0, "nothing reached the server");
    assert_eq!(breaker.handle().state(), State::Closed);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_timeout_shorter_than_the_answer_fails_it_and_the_late_answer_is_dropped(
) -> TestResult {
    let Some(servers) = servers::get() else {
        return Ok(());
    };
    let server = servers
        .everything("everything")
        .call_timeout(std::time::Duration::from_millis(300))
        .start()?;
    running(&server).await;
    let error = server
        .tool("trigger-long-running-operation")
        .oneshot(args(json!({"duration": 1, "steps": 1})))
        .await
        .unwrap_err();
    assert!(matches!(error, McpError::Timeout { .. }), "{error}");
    assert_eq!(server.calls_in_flight(), 0);
    // The answer that comes after (the operation takes 1 s) is no one's: whenever it
    // comes, the next call gets its own.
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let answer = server
        .tool("get-sum")
        .oneshot(args(json!({"a": 1, "b": 2})))
        .await?;
    assert!(answer.content[0].as_text().unwrap().text.contains('3'));
    assert_eq!(
        server.status().generation,
        1,
        "one timeout does not restart it"
    );
    server.stop().await;
    Ok(())
}
