//! The expediter on its own: a capability map, a breaker per tool, the decisions (CALL,
//! SKIP with a route, PAUSE), a caller's mistake that costs nothing, a look that counts
//! nothing, one systemic event, recovery, and a run's report.
//!
//! ```text
//! cargo run --example expediter
//! ```

use tower::util::BoxService;
use tower::{service_fn, ServiceBuilder};
use tower_circuit_breaker::error::BoxError;
use tower_circuit_breaker::expediter::{Alternative, Expediter, Run, ToolSpec};
use tower_circuit_breaker::Answer;

type Tool = BoxService<String, Answer<String>, BoxError>;

/// A tool that fails every call with `error`, or answers every call.
fn tool(expediter: &Expediter, name: &'static str, error: Option<&'static str>) -> Tool {
    let service = service_fn(move |request: String| async move {
        match error {
            Some(error) => Err(std::io::Error::other(format!("{name}: {error}"))),
            None => Ok(format!("{name} did {request}")),
        }
    });
    let layer = expediter.layer(name).expect("a tool of the map");
    BoxService::new(ServiceBuilder::new().layer(layer).service(service))
}

/// One step of an agent: the expediter decides, the call is made only on CALL or PROBE.
async fn step(run: &Run, name: &str, tool: &mut Tool) -> Result<(), BoxError> {
    let attempt = run.execute(name, tool, "the request".into()).await?;
    println!("{}", attempt.decision());
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let expediter = Expediter::builder()
        .tool(
            ToolSpec::new("Grep")
                .alternative(Alternative::low("Bash", "rg", "loses Grep's formatting"))
                .fallback("ask the user which files to examine"),
        )
        .tool(ToolSpec::new("Bash").fallback("report commands to run manually"))
        .tool(ToolSpec::new("WebSearch").fallback("ask the user for the information"))
        .failure_budget(10)
        .build()?;
    // One agent's run: its own sub-tasks and degradations, the shared budget.
    let run = expediter.run("demo");

    // A caller's mistake (a missing file) is not the tool's failure: nothing is spent.
    step(
        &run,
        "Bash",
        &mut tool(&expediter, "Bash", Some("No such file or directory")),
    )
    .await?;
    println!("budget used: {}", expediter.report().budget.used);

    // Grep fails three times and opens; the next decision routes to Bash.
    let mut grep = tool(&expediter, "Grep", Some("index corrupted"));
    for _ in 0..4 {
        step(&run, "Grep", &mut grep).await?;
    }
    // Looking counts nothing: asked twice, the same answer; no step is taken.
    println!(
        "peek: {}, {}",
        expediter.peek("Grep")?.as_str(),
        expediter.peek("Grep")?.as_str()
    );

    // WebSearch and Bash open on "connection refused": one systemic event, all paused.
    let mut search = tool(&expediter, "WebSearch", Some("Connection refused"));
    let mut bash = tool(&expediter, "Bash", Some("Connection refused"));
    for _ in 0..3 {
        step(&run, "WebSearch", &mut search).await?;
        step(&run, "Bash", &mut bash).await?;
    }
    step(&run, "Grep", &mut grep).await?;
    let budget = expediter.report().budget;
    println!(
        "budget used: {} for {} failures",
        budget.used,
        budget.failures.len()
    );

    // The user fixes the network and says so: calls resume, probes back off.
    expediter.confirm_recovery();
    let mut search = tool(&expediter, "WebSearch", None);
    for _ in 0..3 {
        step(&run, "WebSearch", &mut search).await?;
    }
    println!("\n{}", run.report());
    Ok(())
}
