//! Replays an outcome sequence through the real breaker layer, one call a step, to see
//! what a threshold and cooldown would have done.
//!
//! ```text
//! cargo run --example replay -- --threshold 3 --cooldown 4 --outcomes 11000111101100001111 --kill 9,10
//! ```
//!
//! `--outcomes` has one digit a step: 1 if the service would succeed, 0 if it would
//! fail. `--cooldown` counts calls. `--kill` (optional) lists the steps at which the
//! kill switch is on. Each line is `STEP STATE:ANSWER`: the state found when the call
//! arrived, and `model` (the service answered), `failed` (it was called and failed) or
//! `skipped` (it was not called). The last line counts the calls made.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tower::{service_fn, Layer, Service, ServiceExt};
use tower_circuit_breaker::{CircuitBreakerLayer, Cooldown, Outcome, Source};

struct Args {
    threshold: u32,
    cooldown: u64,
    outcomes: Vec<bool>,
    kill: BTreeSet<usize>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut threshold, mut cooldown, mut outcomes, mut kill) = (3, 4, None, BTreeSet::new());
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--threshold" => {
                threshold = value
                    .parse()
                    .map_err(|_| format!("--threshold: not a number: {value}"))?
            }
            "--cooldown" => {
                cooldown = value
                    .parse()
                    .map_err(|_| format!("--cooldown: not a number: {value}"))?
            }
            "--outcomes" => {
                let steps = value
                    .chars()
                    .map(|c| match c {
                        '1' => Ok(true),
                        '0' => Ok(false),
                        other => Err(format!("--outcomes: each step is 0 or 1, got {other:?}")),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                outcomes = Some(steps);
            }
            "--kill" => {
                for step in value.split(',').filter(|s| !s.is_empty()) {
                    kill.insert(
                        step.trim()
                            .parse()
                            .map_err(|_| format!("--kill: not a step number: {step}"))?,
                    );
                }
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    let outcomes =
        outcomes.ok_or("--outcomes is required, for example --outcomes 11000111101100001111")?;
    Ok(Args {
        threshold,
        cooldown,
        outcomes,
        kill,
    })
}

/// What the scripted model returns: its answer, or an error status, as a model client
/// would (an HTTP 503 is a response, and the classifier calls it a failure).
#[derive(Debug, Clone, Copy)]
enum Reply {
    Answer,
    Unavailable,
}

async fn replay(args: Args) -> Result<Vec<String>, tower::BoxError> {
    let layer = CircuitBreakerLayer::builder()
        .name("replay")
        .failure_threshold(args.threshold)
        .cooldown(Cooldown::Calls(args.cooldown))
        .build()?;
    let handle = layer.handle();
    let layer = layer
        .with_classifier(|result: &Result<Reply, Infallible>| match result {
            Ok(Reply::Answer) => Outcome::Success,
            Ok(Reply::Unavailable) | Err(_) => Outcome::failure_with("503 service unavailable"),
        })
        .with_fallback(service_fn(|_step: usize| async {
            Ok::<_, Infallible>(Reply::Unavailable)
        }));

    let script = Arc::new(args.outcomes);
    let calls = Arc::new(AtomicUsize::new(0));
    let model = {
        let (script, calls) = (script.clone(), calls.clone());
        service_fn(move |step: usize| {
            calls.fetch_add(1, Ordering::SeqCst);
            let reply = if script[step - 1] {
                Reply::Answer
            } else {
                Reply::Unavailable
            };
            async move { Ok::<_, Infallible>(reply) }
        })
    };
    let mut svc = layer.layer(model);

    let mut lines = Vec::with_capacity(script.len() + 1);
    for step in 1..=script.len() {
        if args.kill.contains(&step) {
            handle.kill_switch().kill();
        } else {
            handle.kill_switch().revive();
        }
        let answer = svc.ready().await?.call(step).await?;
        let said = match (answer.source(), answer.get_ref()) {
            (Source::Fallback(_), _) => "skipped",
            (_, Reply::Answer) => "model",
            (_, Reply::Unavailable) => "failed",
        };
        lines.push(format!("{step} {}:{said}", answer.state()));
    }
    let made = calls.load(Ordering::SeqCst);
    lines.push(format!("calls made: {made} / {}", script.len()));
    Ok(lines)
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("replay: {message}");
            eprintln!("usage: replay --threshold N --cooldown N --outcomes 0101... [--kill 9,10]");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime builds");
    match runtime.block_on(replay(args)) {
        Ok(lines) => {
            for line in lines {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("replay: {error}");
            ExitCode::from(2)
        }
    }
}
