//! A supervised tool hands the caller's rig `ToolContext` (inbound credentials, result
//! metadata, scopes) back however its call ends: done, failed, or refused by the breaker,
//! with what the tool published before it failed.

use rig_core::tool::{Tool, ToolContext};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tower_circuit_breaker::expediter::{Expediter, ToolSpec};
use tower_circuit_breaker_rig::supervised;

/// An inbound credential the application puts in the context for its tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Credential(String);

impl rig_core::tool::ContextValue for Credential {
    const KEY: &'static str = "credential";
}

/// What the tool published about its run: which backend it asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Asked(String);

impl rig_core::tool::ContextValue for Asked {
    const KEY: &'static str = "asked";
}

/// A tool that reads the credential, publishes which backend it asked, and fails when
/// asked to.
struct Lookup;

impl Tool for Lookup {
    const NAME: &'static str = "lookup";
    type Args = serde_json::Value;
    type Output = String;
    type Error = std::io::Error;

    fn description(&self) -> String {
        "Looks something up".into()
    }
    fn parameters(&self) -> serde_json::Value {
        json!({ "type": "object", "properties": { "fail": { "type": "boolean" } } })
    }
    async fn call(
        &self,
        context: &mut ToolContext,
        args: Self::Args,
    ) -> Result<String, std::io::Error> {
        let credential: Option<Credential> = context.get().map_err(std::io::Error::other)?;
        context
            .insert_result(Asked("backend-1".into()))
            .map_err(std::io::Error::other)?;
        if args["fail"] == json!(true) {
            return Err(std::io::Error::other("the backend is down"));
        }
        Ok(format!("looked up with {:?}", credential.map(|c| c.0)))
    }
}

fn caller_context() -> ToolContext {
    let mut context = ToolContext::new();
    context
        .insert(Credential("token-of-the-caller".into()))
        .expect("insert");
    context
}

#[tokio::test]
async fn a_failed_call_and_a_refused_call_hand_the_callers_context_back_with_what_the_tool_published()
 {
    let expediter = Expediter::builder()
        .tool(ToolSpec::new("lookup").fallback("ask the user"))
        .build()
        .expect("valid settings");
    let tool = supervised(&expediter, Lookup).expect("a known tool");

    // Done: the tool saw the credential, and the caller has it still.
    let mut context = caller_context();
    let output = tool.run_with(&mut context, json!({})).await.expect("done");
    let shown = serde_json::to_string(&output).expect("serializable");
    assert!(shown.contains("token-of-the-caller"), "{shown}");
    assert_eq!(asked(&context), Some(Asked("backend-1".into())));
    assert_eq!(credential(&context), caller_credential());

    // Failed: the error is the tool's, and the caller gets its context back with what
    // the tool published before it failed.
    let mut context = caller_context();
    let error = tool
        .run_with(&mut context, json!({ "fail": true }))
        .await
        .expect_err("the tool fails");
    assert!(error.to_string().contains("the backend is down"), "{error}");
    assert_eq!(asked(&context), Some(Asked("backend-1".into())));
    assert_eq!(credential(&context), caller_credential());

    // Refused by the breaker (an operator killed the tools): not run, context kept.
    expediter.kill_switch().kill();
    let mut context = caller_context();
    let error = tool
        .run_with(&mut context, json!({}))
        .await
        .expect_err("refused");
    assert!(!error.to_string().contains("looked up"), "{error}");
    assert_eq!(asked(&context), None, "the tool did not run");
    assert_eq!(context, caller_context());
}

fn caller_credential() -> Option<Credential> {
    Some(Credential("token-of-the-caller".into()))
}

fn credential(context: &ToolContext) -> Option<Credential> {
    context.get().expect("readable")
}

fn asked(context: &ToolContext) -> Option<Asked> {
    context.result().expect("readable")
}
