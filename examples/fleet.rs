//! Three replicas of an agent service share a model's kill switch and its breaker's
//! state through Redis; an operator kills and revives the model for all of them.
//!
//! ```text
//! cargo run --example fleet                      # three replicas and an operator, one process
//! cargo run --example fleet -- replica api-1     # one replica as a process, 40 rounds
//! cargo run --example fleet -- kill chat-model   # the operator's command, from anywhere
//! cargo run --example fleet -- revive chat-model
//! ```
//!
//! It connects to `REDIS_URL` (default `redis://127.0.0.1:6379`), under the key prefix
//! `tcb-example`, and exits with status 2 when no Redis answers. Each replica is its own
//! [`Fleet`], with its own connections, like a separate process.
//!
//! The demo: all three call the model; the operator kills it (each replica skips it from
//! then on, within one network hop); a replica started after the kill starts killed; the
//! operator revives it. Then `api-3`'s own code stops the model (`stop.kill()` on its
//! switch, as a cost guard would): the fleet shares that too, and the operator revives it
//! again. Last, replica `api-2` finds the account's quota exhausted: its breaker opens
//! after three failures, and the other two, following its hint, hold the model open
//! until `api-2`'s next probe without spending failures of their own (their calls are
//! skipped as open).

use std::io;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_circuit_breaker::error::Rejected;
use tower_circuit_breaker::fleet::{Fleet, FleetEvent, HintPolicy};
use tower_circuit_breaker::{redact, CircuitBreakerLayer, Cooldown, KillSwitch};

const MODEL: &str = "chat-model";
const PREFIX: &str = "tcb-example";

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// One replica: its fleet link, the model's kill switch and breaker.
struct Replica {
    name: String,
    fleet: Fleet,
    stop: KillSwitch,
    model: CircuitBreakerLayer,
    events: broadcast::Receiver<FleetEvent>,
}

/// Starts a replica's link and waits for it; `None` (said on stderr) when no Redis
/// answers.
async fn connect(name: &str) -> Option<Fleet> {
    let url = redis_url();
    // The address as shown: without a password or a query.
    let shown = redact(&url);
    let started = Fleet::builder()
        .address(url.as_str())
        .prefix(PREFIX)
        .replica(name)
        .start();
    let fleet = match started {
        Ok(fleet) => fleet,
        Err(error) => {
            eprintln!(
                "REDIS_URL {shown:?} cannot be used ({error}).\n\
                 Set it to a Redis address, e.g. REDIS_URL=redis://127.0.0.1:6379."
            );
            return None;
        }
    };
    match fleet.wait_for_link(Duration::from_secs(3)).await {
        Ok(()) => Some(fleet),
        Err(error) => {
            eprintln!(
                "no Redis answers at {shown} ({error}).\n\
                 Start one (`redis-server`, Debian: `apt-get install redis-server`) or set \
                 REDIS_URL, e.g. REDIS_URL=redis://127.0.0.1:6380."
            );
            None
        }
    }
}

async fn replica(name: &str) -> Option<Replica> {
    let fleet = connect(name).await?;
    let stop = KillSwitch::new();
    let model = CircuitBreakerLayer::builder()
        .name(MODEL)
        .failure_threshold(3)
        .cooldown(Cooldown::Time(Duration::from_secs(20)))
        .kill_switch(stop.clone())
        .build()
        .expect("the example's breaker settings");
    let events = fleet.events();
    fleet.share_kill_switch(MODEL, &stop).expect("a good name");
    fleet
        .share_breaker(&model.handle(), HintPolicy::Follow)
        .expect("a good name");
    fleet.sync().await.ok()?;
    Some(Replica {
        name: name.into(),
        fleet,
        stop,
        model,
        events,
    })
}

/// One call to the model (a stand-in that fails while the account's quota is
/// exhausted); what happened, in words.
async fn call(replica: &Replica, quota_exhausted: &Arc<AtomicBool>) -> String {
    let quota = quota_exhausted.clone();
    let mut model = replica.model.layer(service_fn(move |prompt: &'static str| {
        let exhausted = quota.load(Ordering::SeqCst);
        async move {
            if exhausted {
                Err(io::Error::other("429 insufficient_quota"))
            } else {
                Ok(format!("answer to {prompt:?}"))
            }
        }
    }));
    let ready = model.ready().await.expect("the breaker is always ready");
    match ready.call("summarize the ticket").await {
        Ok(_) => "called the model".into(),
        Err(error) => match error.downcast_ref::<Rejected>() {
            Some(rejected) => format!("skipped ({})", rejected.reason()),
            None => format!("failed ({error})"),
        },
    }
}

/// Prints what the fleet did to each replica until each has seen `what` (at most a
/// second).
async fn settle(replicas: &mut [Replica], what: &str, done: impl Fn(&FleetEvent) -> bool) {
    for replica in replicas {
        let wait = tokio::time::timeout(Duration::from_secs(1), async {
            loop {
                match replica.events.recv().await {
                    Ok(event) => {
                        println!("  {}: {}", replica.name, describe(&event));
                        if done(&event) {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        if wait.await.is_err() {
            println!("  {}: no {what} within a second", replica.name);
        }
    }
}

fn describe(event: &FleetEvent) -> String {
    match event {
        FleetEvent::KillSwitch {
            name,
            killed,
            origin,
        } => format!(
            "kill switch `{name}` {} ({origin:?})",
            if *killed { "on" } else { "off" }
        ),
        FleetEvent::Held {
            breaker,
            until,
            replica,
            capped,
        } => format!(
            "`{breaker}` held open for {:.1} s by {replica}'s hint{}",
            until
                .saturating_duration_since(tokio::time::Instant::now().into_std())
                .as_secs_f64(),
            if *capped { " (capped)" } else { "" }
        ),
        FleetEvent::Released { breaker } => format!("`{breaker}` released"),
        FleetEvent::Rejected { channel, why } => format!("refused a message on {channel}: {why}"),
        FleetEvent::Link(link) => format!("link {link}"),
        other => format!("{other:?}"),
    }
}

async fn round(n: u32, replicas: &[Replica], quota: &Arc<AtomicBool>) {
    let mut line = format!("round {n}:");
    for replica in replicas {
        line += &format!("  {} {}", replica.name, call(replica, quota).await);
    }
    println!("{line}");
}

async fn demo() -> ExitCode {
    let quota = Arc::new(AtomicBool::new(false));
    let mut replicas = Vec::new();
    for name in ["api-1", "api-2", "api-3"] {
        match replica(name).await {
            Some(replica) => replicas.push(replica),
            None => return ExitCode::from(2),
        }
    }
    let Some(operator) = connect("operator").await else {
        return ExitCode::from(2);
    };
    // Start from a revived model, whatever an earlier run left.
    let left_killed = replicas.iter().any(|r| r.stop.is_killed());
    let _ = operator.revive(MODEL).await;
    if left_killed {
        let revived = |e: &FleetEvent| matches!(e, FleetEvent::KillSwitch { killed: false, .. });
        settle(&mut replicas, "revive", revived).await;
    }
    println!(
        "three replicas up, sharing `{MODEL}` through {}",
        redact(&redis_url())
    );

    round(1, &replicas, &quota).await;
    println!("operator: kill {MODEL}");
    operator.kill(MODEL).await.expect("Redis answers");
    let killed = |e: &FleetEvent| matches!(e, FleetEvent::KillSwitch { killed: true, .. });
    settle(&mut replicas, "kill", killed).await;
    round(2, &replicas, &quota).await;

    println!("a fourth replica starts while the model is killed");
    let Some(mut late) = replica("api-4").await else {
        return ExitCode::from(2);
    };
    println!(
        "  api-4: kill switch `{MODEL}` {} from the start",
        if late.stop.is_killed() { "on" } else { "off" }
    );
    while late.events.try_recv().is_ok() {}

    println!("operator: revive {MODEL}");
    operator.revive(MODEL).await.expect("Redis answers");
    let revived = |e: &FleetEvent| matches!(e, FleetEvent::KillSwitch { killed: false, .. });
    settle(&mut replicas, "revive", revived).await;
    round(3, &replicas, &quota).await;

    println!("api-3's cost guard stops the model in its own code: stop.kill() on its switch");
    replicas[2].stop.kill();
    settle(&mut replicas, "kill", killed).await;
    round(4, &replicas, &quota).await;
    println!("operator: revive {MODEL}");
    operator.revive(MODEL).await.expect("Redis answers");
    settle(&mut replicas, "revive", revived).await;

    println!("the account's quota runs out; api-2 is the first to call");
    quota.store(true, Ordering::SeqCst);
    for _ in 0..3 {
        println!("  api-2 {}", call(&replicas[1], &quota).await);
    }
    let held = |e: &FleetEvent| matches!(e, FleetEvent::Held { .. });
    let (first, rest) = replicas.split_at_mut(1);
    settle(first, "hold", held).await;
    settle(&mut rest[1..], "hold", held).await;
    round(5, &replicas, &quota).await;
    for replica in &replicas {
        let snapshot = replica.fleet.snapshot();
        let counts = snapshot.counts;
        println!(
            "{}: link {}, model {}, kill messages {} heard {} published, hints {} heard {} published, {} holds",
            replica.name,
            snapshot.link,
            replica.model.handle().state(),
            counts.kill_messages,
            counts.kills_published,
            counts.hints,
            counts.published,
            counts.holds
        );
    }
    ExitCode::SUCCESS
}

/// One replica as a process: a call every half second, 40 rounds.
async fn one_replica(name: &str) -> ExitCode {
    let Some(mut replica) = replica(name).await else {
        return ExitCode::from(2);
    };
    let quota = Arc::new(AtomicBool::new(false));
    println!("{name} up, sharing `{MODEL}` through {}", redis_url());
    for n in 1..=40 {
        while let Ok(event) = replica.events.try_recv() {
            println!("  {}", describe(&event));
        }
        println!("round {n}: {}", call(&replica, &quota).await);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    ExitCode::SUCCESS
}

/// The operator's command: kill or revive the model for every replica.
async fn operator(killed: bool, name: &str) -> ExitCode {
    let Some(fleet) = connect("operator").await else {
        return ExitCode::from(2);
    };
    let result = if killed {
        fleet.kill(name).await
    } else {
        fleet.revive(name).await
    };
    match result {
        Ok(()) => {
            let key = format!("{PREFIX}:kill:{name}");
            let word = if killed { "killed" } else { "revived" };
            println!("{name} {word} for the fleet (key {key})");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("could not change {name}: {error}");
            ExitCode::FAILURE
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [] => demo().await,
        ["replica", name] => one_replica(name).await,
        ["kill", name] => operator(true, name).await,
        ["revive", name] => operator(false, name).await,
        _ => {
            eprintln!("usage: fleet [replica NAME | kill MODEL | revive MODEL]");
            ExitCode::FAILURE
        }
    }
}
