//! The fleet against a real redis-server: several replicas in one process, each a
//! `Fleet` with its own connections, sharing kill switches and breaker hints.
//!
//! Waits on Redis are bounded: a propagation within `BOUND`, a link within `LINK`. No
//! test sleeps on the wall clock: a hold's end is reached by running the call on a
//! runtime whose paused clock is moved past it.

mod adversarial;
mod attack;
#[path = "../common/mod.rs"]
mod common;
mod flips;
mod holds;
mod promises;
mod server;

use std::future::Future;
use std::io;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::broadcast;
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
use tower_circuit_breaker::error::Rejected;
use tower_circuit_breaker::expediter::{Action, Expediter, Route, SkipReason, Unusable};
use tower_circuit_breaker::fleet::{
    Fleet, FleetError, FleetEvent, HintPolicy, KillOrigin, LinkStatus,
};
use tower_circuit_breaker::{
    Answer, Cause, CircuitBreakerLayer, Cooldown, KillSwitch, NextProbe, Reason, State,
};

use server::{unique_prefix, Redis, RedisServer};

/// Every replica must apply a kill within this (the issue's "within a second").
const BOUND: Duration = Duration::from_secs(1);
/// How long a link may take to come up on loopback.
const LINK: Duration = Duration::from_secs(10);

fn replica(url: &str, prefix: &str, name: &str) -> Fleet {
    Fleet::builder()
        .address(url)
        .prefix(prefix)
        .replica(name)
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
        .max_hold(Duration::from_secs(60))
        .start()
        .expect("fleet settings")
}

async fn up(fleet: &Fleet) {
    fleet.wait_for_link(LINK).await.expect("the link comes up");
}

/// A breaker named `name` that trips after 3 failures and cools down for 20 s.
fn breaker(name: &str, kill: &KillSwitch) -> CircuitBreakerLayer {
    CircuitBreakerLayer::builder()
        .name(name)
        .failure_threshold(3)
        .cooldown(Cooldown::Time(Duration::from_secs(20)))
        .kill_switch(kill.clone())
        .build()
        .unwrap()
}

/// What a call through a breaker got.
#[derive(Debug, PartialEq, Eq)]
enum Got {
    Made,
    Failed,
    Skipped(Reason),
}

/// A service that succeeds or fails.
type Upstream = tower::util::BoxService<(), (), io::Error>;

/// One call through `layer`'s breaker (a plain one, or an expediter's tool layer) to a
/// service that succeeds or fails.
async fn call<L>(layer: &L, succeed: bool) -> Got
where
    L: Layer<Upstream>,
    L::Service: Service<(), Response = Answer<()>, Error = BoxError>,
{
    let mut svc = layer.layer(Upstream::new(service_fn(move |_: ()| async move {
        if succeed {
            Ok(())
        } else {
            Err(io::Error::other("429 insufficient_quota"))
        }
    })));
    match svc.ready().await.unwrap().call(()).await {
        Ok(_) => Got::Made,
        Err(error) => match error.downcast_ref::<Rejected>() {
            Some(rejected) => Got::Skipped(rejected.reason()),
            None => Got::Failed,
        },
    }
}

/// A call through `layer`'s breaker that must be skipped: why, and when it was told to
/// come back.
async fn skipped(layer: &CircuitBreakerLayer) -> (Reason, NextProbe) {
    let mut svc = layer.layer(service_fn(|_: ()| async { Ok::<_, io::Error>(()) }));
    let error = svc.ready().await.unwrap().call(()).await.err();
    let error = error.expect("the call is skipped");
    let rejected = error.downcast_ref::<Rejected>().expect("a skip");
    (rejected.reason(), rejected.next_probe())
}

/// Runs `work` on a runtime of its own whose paused clock is moved on to `at`: the
/// breaker's clock (`tokio::time`) jumps past a hold without the test waiting for it.
async fn at_time<F, T>(at: Instant, work: impl FnOnce() -> F + Send + 'static) -> T
where
    F: Future<Output = T>,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async move {
            let now = tokio::time::Instant::now().into_std();
            tokio::time::advance(at.saturating_duration_since(now)).await;
            work().await
        })
    })
    .await
    .unwrap()
}

/// The next event that matches, within `within`.
async fn event(
    events: &mut broadcast::Receiver<FleetEvent>,
    within: Duration,
    what: &str,
    matches: impl Fn(&FleetEvent) -> bool,
) -> FleetEvent {
    let wait = async {
        loop {
            match events.recv().await {
                Ok(event) if matches(&event) => return event,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => panic!("events closed"),
            }
        }
    };
    tokio::time::timeout(within, wait)
        .await
        .unwrap_or_else(|_| panic!("no {what} within {within:?}"))
}

fn is_held(event: &FleetEvent) -> bool {
    matches!(event, FleetEvent::Held { .. })
}

fn killed(killed: bool) -> impl Fn(&FleetEvent) -> bool {
    move |e| matches!(e, FleetEvent::KillSwitch { killed: k, .. } if *k == killed)
}

/// Polls `done` until it holds, at most `within` (for states no event announces).
async fn poll_until(within: Duration, what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not {what} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A plain connection, for what an operator or an attacker sends by hand.
async fn by_hand(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// Whether kill switch `name`'s key says killed: its act (`{"killed":true,...}`), or a
/// value written by hand (`1`); `None` when there is no key.
async fn key_says_killed(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    name: &str,
) -> Option<bool> {
    let value: Option<String> = redis::cmd("GET")
        .arg(format!("{prefix}:kill:{name}"))
        .query_async(conn)
        .await
        .unwrap();
    match value?.as_str() {
        "1" => Some(true),
        "0" => Some(false),
        act => {
            let act: serde_json::Value = serde_json::from_str(act).expect("an act");
            Some(act["killed"].as_bool().expect("killed"))
        }
    }
}

async fn publish(conn: &mut redis::aio::MultiplexedConnection, channel: &str, payload: &str) {
    redis::cmd("PUBLISH")
        .arg(channel)
        .arg(payload)
        .query_async::<()>(conn)
        .await
        .unwrap();
}

/// Everything published on some channels, as Redis delivers it: in the one order it
/// published them in.
struct Listener {
    pubsub: redis::aio::PubSub,
}

/// A message heard: its channel and payload.
type Heard = (String, String);

impl Listener {
    async fn new(url: &str, channels: &[&str]) -> Listener {
        let client = redis::Client::open(url).unwrap();
        let mut pubsub = client.get_async_pubsub().await.unwrap();
        for channel in channels {
            pubsub.subscribe(*channel).await.unwrap();
        }
        Listener { pubsub }
    }

    /// The messages heard until the first that `last` matches (included), within
    /// `BOUND`.
    async fn until(&mut self, last: impl Fn(&Heard) -> bool) -> Vec<Heard> {
        let mut heard = Vec::new();
        let mut stream = self.pubsub.on_message();
        let read = async {
            while let Some(message) = stream.next().await {
                let payload: String = message.get_payload().unwrap();
                heard.push((message.get_channel_name().to_string(), payload));
                if last(heard.last().unwrap()) {
                    return;
                }
            }
            panic!("the listener's connection closed");
        };
        tokio::time::timeout(BOUND, read)
            .await
            .expect("the last message within the bound");
        heard
    }
}

/// Now, in Unix milliseconds, as hints carry times.
fn wall_ms() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.unwrap().as_millis() as u64
}

struct Member {
    fleet: Fleet,
    stop: KillSwitch,
    model: CircuitBreakerLayer,
}

/// One replica under a fresh prefix named for `test`, its events, and a connection
/// that publishes on its channels by hand.
struct ByHand {
    member: Member,
    events: tokio::sync::broadcast::Receiver<tower_circuit_breaker::fleet::FleetEvent>,
    raw: redis::aio::MultiplexedConnection,
    prefix: String,
    kills: String,
    hints: String,
}

async fn one_replica_by_hand(url: &str, test: &str) -> ByHand {
    let prefix = unique_prefix(test);
    let member = members(url, &prefix, 1).await.remove(0);
    let events = member.fleet.events();
    ByHand {
        events,
        raw: by_hand(url).await,
        kills: format!("{prefix}:kills"),
        hints: format!("{prefix}:hints"),
        prefix,
        member,
    }
}

/// `n` replicas, each sharing kill switch `model` and breaker `model` (following).
async fn members(url: &str, prefix: &str, n: usize) -> Vec<Member> {
    members_with(url, prefix, n, HintPolicy::Follow).await
}

/// `n` replicas, each sharing kill switch `model` and breaker `model` under `policy`.
async fn members_with(url: &str, prefix: &str, n: usize, policy: HintPolicy) -> Vec<Member> {
    let mut members = Vec::new();
    for i in 0..n {
        let fleet = replica(url, prefix, &format!("replica-{i}"));
        let stop = KillSwitch::new();
        fleet.share_kill_switch("model", &stop).unwrap();
        let model = breaker("model", &stop);
        fleet.share_breaker(&model.handle(), policy).unwrap();
        up(&fleet).await;
        fleet.sync().await.unwrap();
        members.push(Member { fleet, stop, model });
    }
    members
}

#[tokio::test]
async fn a_kill_reaches_every_replica_within_the_propagation_bound() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("kill");
    let members = members(&redis.url, &prefix, 3).await;
    for member in &members {
        assert_eq!(call(&member.model, true).await, Got::Made);
    }
    let operator = replica(&redis.url, &prefix, "operator");
    up(&operator).await;
    let mut events: Vec<_> = members.iter().map(|m| m.fleet.events()).collect();

    operator.kill("model").await.unwrap();
    let deadline = tokio::time::Instant::now() + BOUND;
    for events in &mut events {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let got = event(events, left, "kill", killed(true)).await;
        assert!(matches!(
            got,
            FleetEvent::KillSwitch {
                origin: KillOrigin::Message,
                ..
            }
        ));
    }
    for member in &members {
        assert!(member.stop.is_killed());
        assert_eq!(
            call(&member.model, true).await,
            Got::Skipped(Reason::Killed)
        );
        // The kill switch leaves the breaker as it was.
        assert_eq!(member.model.handle().state(), State::Closed);
    }
}

#[tokio::test]
async fn a_replica_started_after_the_kill_starts_killed() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("late");
    let operator = replica(&redis.url, &prefix, "operator");
    up(&operator).await;
    operator.kill("model").await.unwrap();

    let late = replica(&redis.url, &prefix, "late");
    let stop = KillSwitch::new();
    let mut events = late.events();
    late.share_kill_switch("model", &stop).unwrap();
    let got = event(&mut events, LINK, "the kill key read", killed(true)).await;
    assert!(matches!(
        got,
        FleetEvent::KillSwitch {
            origin: KillOrigin::Key,
            ..
        }
    ));
    assert!(stop.is_killed());
    let model = breaker("model", &stop);
    assert_eq!(call(&model, true).await, Got::Skipped(Reason::Killed));
}

#[tokio::test]
async fn revive_reaches_every_replica() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("revive");
    let members = members(&redis.url, &prefix, 3).await;
    let mut events: Vec<_> = members.iter().map(|m| m.fleet.events()).collect();
    // One replica kills for all, then revives for all.
    members[0].fleet.kill("model").await.unwrap();
    for events in &mut events[1..] {
        event(events, BOUND, "kill", killed(true)).await;
    }
    members[0].fleet.revive("model").await.unwrap();
    assert!(
        !members[0].stop.is_killed(),
        "applied at once where it was made"
    );
    for events in &mut events[1..] {
        event(events, BOUND, "revive", killed(false)).await;
    }
    for member in &members {
        assert!(!member.stop.is_killed());
        assert_eq!(call(&member.model, true).await, Got::Made);
    }
    // The key is gone: a replica starting now is not killed.
    let late = members_late(&redis.url, &prefix).await;
    assert!(!late.1.is_killed());
}

async fn members_late(url: &str, prefix: &str) -> (Fleet, KillSwitch) {
    let fleet = replica(url, prefix, "late");
    let stop = KillSwitch::new();
    stop.kill(); // what it remembers; the key says otherwise
    fleet.share_kill_switch("model", &stop).unwrap();
    up(&fleet).await;
    fleet.sync().await.unwrap();
    (fleet, stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_open_reaches_peers_and_expires() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("follow");
    let members = members(&redis.url, &prefix, 2).await;
    let (a, b) = (&members[0], &members[1]);
    let mut events = b.fleet.events();
    let mut b_transitions = b.model.handle().subscribe();
    let mut hints = Listener::new(&redis.url, &[&format!("{prefix}:hints")]).await;

    // Replica 0 learns the quota is exhausted: three failures open its breaker.
    for _ in 0..3 {
        assert_eq!(call(&a.model, false).await, Got::Failed);
    }
    let a_snapshot = a.model.handle().snapshot();
    assert_eq!(a_snapshot.state, State::Open);
    let a_probe_at = a_snapshot.next_probe.at().unwrap();

    let FleetEvent::Held {
        until,
        replica,
        capped,
        ..
    } = event(&mut events, BOUND, "a hold", is_held).await
    else {
        unreachable!()
    };
    assert_eq!((&*replica, capped), ("replica-0", false));
    // Held until replica 0's own next probe (published in milliseconds).
    let gap = if until > a_probe_at {
        until - a_probe_at
    } else {
        a_probe_at - until
    };
    assert!(
        gap < Duration::from_millis(50),
        "held until {until:?}, probe at {a_probe_at:?}"
    );
    // Replica 1 spends none of its own failures: its breaker opens on the hint, as its
    // own kind of opening (no person forced it), until the hold's end.
    let opened = tokio::time::timeout(BOUND, b_transitions.recv())
        .await
        .expect("the hold's transition")
        .unwrap();
    assert_eq!(
        (opened.from, opened.to, opened.cause),
        (State::Closed, State::Open, Cause::Hint)
    );
    assert_eq!(opened.next_probe.at(), Some(until));
    assert_eq!(b.model.handle().state(), State::Open);
    // Its calls are skipped at once, told the hold's end as when to come back.
    let (reason, next_probe) = skipped(&b.model).await;
    assert_eq!((reason, next_probe.at()), (Reason::Open, Some(until)));
    let snapshot = b.model.handle().snapshot();
    assert_eq!(snapshot.counts.failures, 0);
    assert_eq!(
        (
            snapshot.counts.skipped_open,
            snapshot.counts.skipped_forced_open
        ),
        (1, 0)
    );
    let view = &b.fleet.snapshot().breakers[0];
    assert_eq!((view.held_until, view.peers_open), (Some(until), 1));

    // Just before the hold ends, still skipped; just after, replica 1's own probe.
    let model = b.model.clone();
    let early = at_time(until - Duration::from_millis(1), move || async move {
        call(&model, true).await
    })
    .await;
    assert_eq!(early, Got::Skipped(Reason::Open));
    let model = b.model.clone();
    let late = at_time(until + Duration::from_millis(1), move || async move {
        call(&model, true).await
    })
    .await;
    assert_eq!(late, Got::Made);
    let snapshot = b.model.handle().snapshot();
    assert_eq!((snapshot.state, snapshot.counts.probes), (State::Closed, 1));
    // Replica 0 stays open on its own: nothing it heard closes it.
    assert_eq!(a.model.handle().state(), State::Open);
    // Replica 1 published its probe's success, never its hold (which would have come
    // before it): the channel carried replica 0's opening, then replica 1's closing.
    let heard = hints
        .until(|(_, hint)| hint.contains(r#""replica":"replica-1""#))
        .await;
    let said: Vec<(bool, bool)> = heard
        .iter()
        .map(|(_, hint)| {
            (
                hint.contains(r#""replica":"replica-0""#),
                hint.contains(r#""state":"open""#),
            )
        })
        .collect();
    assert_eq!(said, [(true, true), (false, false)], "{heard:?}");
    poll_until(BOUND, "the closing heard", || a.fleet.counts().hints >= 1).await;
    assert_eq!(a.fleet.counts().hints, 1);
    poll_until(BOUND, "the closing counted", || {
        b.fleet.counts().published >= 1
    })
    .await;
    assert_eq!(b.fleet.counts().published, 1);
}

/// `next_probe`'s time, for the tests.
trait ProbeAt {
    fn at(&self) -> Option<Instant>;
}

impl ProbeAt for NextProbe {
    fn at(&self) -> Option<Instant> {
        match *self {
            NextProbe::After { at, .. } => at,
            _ => None,
        }
    }
}

#[tokio::test]
async fn a_quorum_needs_n_replicas() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("quorum");
    // The two that fail see for themselves: they ignore each other.
    let members = members_with(&redis.url, &prefix, 2, HintPolicy::Ignore).await;
    let judge = replica(&redis.url, &prefix, "judge");
    let stop = KillSwitch::new();
    let model = breaker("model", &stop);
    judge
        .share_breaker(
            &model.handle(),
            HintPolicy::quorum(2, Duration::from_secs(30)),
        )
        .unwrap();
    up(&judge).await;
    let mut events = judge.events();

    for _ in 0..3 {
        call(&members[0].model, false).await;
    }
    poll_until(BOUND, "one peer reported", || {
        judge.snapshot().breakers[0].peers_open == 1
    })
    .await;
    // One replica is not a quorum: the judge goes on calling.
    assert_eq!(model.handle().state(), State::Closed);
    assert_eq!(call(&model, true).await, Got::Made);

    for _ in 0..3 {
        call(&members[1].model, false).await;
    }
    event(&mut events, BOUND, "a quorum hold", is_held).await;
    assert_eq!(model.handle().state(), State::Open);
    assert_eq!(call(&model, true).await, Got::Skipped(Reason::Open));
    assert_eq!(judge.snapshot().breakers[0].peers_open, 2);
}

#[tokio::test]
async fn redis_stopped_mid_run_leaves_replicas_alone_and_what_they_did_alone_is_written_on_its_return(
) {
    let Some(mut server) = RedisServer::start(&[]).await else {
        return;
    };
    let url = server.url();
    let prefix = unique_prefix("restart");
    let fleet = replica(&url, &prefix, "alone");
    let stop = KillSwitch::new();
    fleet.share_kill_switch("model", &stop).unwrap();
    let model = breaker("model", &stop);
    fleet
        .share_breaker(&model.handle(), HintPolicy::Follow)
        .unwrap();
    let search_stop = KillSwitch::new();
    fleet.share_kill_switch("search", &search_stop).unwrap();
    let search = breaker("search", &search_stop);
    fleet
        .share_breaker(&search.handle(), HintPolicy::Follow)
        .unwrap();
    up(&fleet).await;
    fleet.kill("model").await.unwrap();
    let mut link = fleet.watch_link();

    server.stop(None).await;
    tokio::time::timeout(LINK, link.wait_for(|l| !l.is_up()))
        .await
        .expect("the link is reported down")
        .unwrap();
    let LinkStatus::Down { since, .. } = fleet.link() else {
        unreachable!()
    };
    assert_eq!(fleet.snapshot().link.since(), since);

    // Calls go on, decided here: killed, then revived here at once (and kept).
    assert_eq!(call(&model, true).await, Got::Skipped(Reason::Killed));
    let revived = fleet.revive("model").await;
    assert!(matches!(revived, Err(FleetError::LinkDown { since: s, .. }) if s == since));
    assert!(!stop.is_killed());
    assert_eq!(call(&model, true).await, Got::Made);
    // A switch flipped in code while alone holds on this replica (and is kept).
    search_stop.kill();
    assert_eq!(call(&search, true).await, Got::Skipped(Reason::Killed));
    search_stop.revive();
    // A breaker opens while alone: it works as ever, and is told to the fleet later.
    for _ in 0..3 {
        call(&search, false).await;
    }
    assert_eq!(search.handle().state(), State::Open);
    assert_eq!(fleet.counts().published, 0);
    search_stop.kill(); // no key says so: written when the link is back

    server.restart().await;
    tokio::time::timeout(LINK, link.wait_for(LinkStatus::is_up))
        .await
        .expect("the link comes back")
        .unwrap();
    // What the replica did alone is later than the key saved before the stop, and than
    // no key: it holds, and is written once the link is up (before it says so).
    assert!(!stop.is_killed());
    assert_eq!(call(&model, true).await, Got::Made);
    assert!(search_stop.is_killed());
    let mut raw = by_hand(&url).await;
    assert_eq!(
        key_says_killed(&mut raw, &prefix, "model").await,
        Some(false)
    );
    assert_eq!(
        key_says_killed(&mut raw, &prefix, "search").await,
        Some(true)
    );
    let counts = fleet.counts();
    assert_eq!((counts.reconnects, counts.published), (1, 1));
    // The kill before the stop, then the latest act of each switch made alone.
    fleet.sync().await.unwrap();
    assert_eq!(fleet.counts().kills_published, 3);
}

#[tokio::test]
async fn malformed_messages_published_by_hand_are_ignored_and_counted() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let ByHand {
        prefix,
        member,
        mut events,
        mut raw,
        kills,
        hints,
        ..
    } = one_replica_by_hand(&redis.url, "malformed").await;
    let member = &member;
    let oversized = format!(
        r#"{{"v":1,"name":"model","killed":true,"by":"{}"}}"#,
        "x".repeat(10_000)
    );
    let now_ms = wall_ms();
    let hint = |seq: u64| {
        format!(
            r#"{{"v":1,"replica":"peer","run":"r1","seq":{seq},"name":"other","state":"closed","cause":"reset","at_ms":{now_ms},"until_ms":null}}"#
        )
    };
    let sent: Vec<(&str, String)> = vec![
        (&kills, "kill model".into()),                              // malformed
        (&kills, r#"{"v":1,"name":"model"}"#.into()),               // malformed
        (&kills, r#"{"v":1,"name":"","killed":true}"#.into()),      // malformed
        (&kills, oversized),                                        // oversized
        (&kills, r#"{"v":2,"name":"model","killed":true}"#.into()), // unknown version
        (&hints, "[1,2,3]".into()),                                 // malformed
        (&hints, hint(5).replace(r#""closed""#, r#""ajar""#)),      // malformed
        (&hints, r#"{"v":9}"#.into()),                              // unknown version
        (&hints, hint(5)),                                          // believed
        (&hints, hint(5)),                                          // stale (replayed)
        (&hints, hint(9)),                                          // believed, 3 missed
        (&kills, r#"{"v":1,"name":"model","killed":true}"#.into()), // the barrier
    ];
    for (channel, payload) in &sent {
        publish(&mut raw, channel, payload).await;
    }
    // Delivered in order: once the barrier is applied, all before it were read.
    event(&mut events, BOUND, "the barrier kill", killed(true)).await;
    let counts = member.fleet.counts();
    assert_eq!(
        (counts.malformed, counts.oversized, counts.unknown_version),
        (5, 1, 2)
    );
    assert_eq!((counts.hints, counts.stale, counts.missed), (2, 1, 3));
    assert_eq!(counts.kill_messages, 1);
    // A kill key holding something else is refused too, and changes nothing.
    redis::cmd("SET")
        .arg(format!("{prefix}:kill:model"))
        .arg("maybe")
        .query_async::<()>(&mut raw)
        .await
        .unwrap();
    member.fleet.sync().await.unwrap();
    assert!(member.stop.is_killed());
    assert_eq!(member.fleet.counts().malformed, 6);
    // The replica works on: its breaker still calls the service once revived.
    member.fleet.revive("model").await.unwrap();
    assert_eq!(call(&member.model, true).await, Got::Made);
}

#[tokio::test]
async fn a_published_open_until_far_off_is_capped() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let ByHand {
        prefix,
        member,
        mut events,
        mut raw,
        ..
    } = one_replica_by_hand(&redis.url, "cap").await;
    let member = &member;
    let ten_days = wall_ms() + 10 * 24 * 3600 * 1000;
    let hint = format!(
        r#"{{"v":1,"replica":"liar","run":"r","seq":1,"name":"model","state":"open","cause":"tripped","at_ms":0,"until_ms":{ten_days}}}"#
    );
    let before = Instant::now();
    publish(&mut raw, &format!("{prefix}:hints"), &hint).await;
    let FleetEvent::Held { until, capped, .. } = event(&mut events, BOUND, "a hold", is_held).await
    else {
        unreachable!()
    };
    assert!(capped);
    // The fleet's longest hold here is 60 s.
    assert!(until <= Instant::now() + Duration::from_secs(60) && until >= before);
    assert_eq!(member.fleet.counts().capped, 1);
}

/// Two agents, each an expediter with Grep, Bash and Read shared with its own fleet link.
async fn agents(url: &str, prefix: &str) -> [(Fleet, Expediter); 2] {
    let mut agents = Vec::new();
    for name in ["agent-a", "agent-b"] {
        let expediter = Expediter::builder()
            .tools([
                common::grep_spec(),
                common::bash_spec(),
                common::read_spec(),
            ])
            .build()
            .unwrap();
        let fleet = replica(url, prefix, name);
        fleet
            .share_expediter(&expediter, HintPolicy::Follow)
            .unwrap();
        up(&fleet).await;
        agents.push((fleet, expediter));
    }
    agents.try_into().ok().unwrap()
}

/// The expediter's decision for `tool`, which must skip it as open (held on a hint);
/// where it routes.
async fn skipped_as_open(expediter: &Expediter, tool: &str) -> Route {
    let decision = expediter.default_run().decide(tool).await.unwrap();
    match decision.action {
        Action::Skip {
            reason: SkipReason::Breaker(Reason::Open),
            route,
        } => route,
        _ => panic!("{decision:?}"),
    }
}

#[tokio::test]
async fn tool_health_learned_by_one_replica_reaches_the_others() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("expediter");
    let replicas = agents(&redis.url, &prefix).await;
    let (a, b) = (&replicas[0], &replicas[1]);
    let mut events = b.0.events();

    // Agent A's Grep fails three times: its breaker opens.
    let grep = a.1.layer("Grep").unwrap();
    for _ in 0..3 {
        assert_eq!(
            a.1.default_run().decide("Grep").await.unwrap().action,
            Action::Call
        );
        assert_eq!(call(&grep, false).await, Got::Failed);
    }
    event(&mut events, BOUND, "a hold", is_held).await;

    // Agent B routes around Grep without spending a failure of its own.
    let route = skipped_as_open(&b.1, "Grep").await;
    assert!(matches!(route, Route::Alternative { .. }), "{route:?}");
    assert_eq!(b.1.report().budget.used, 0);
}

#[tokio::test]
async fn tools_held_on_a_peers_hints_are_no_systemic_event_here() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("expediter-cascade");
    let replicas = agents(&redis.url, &prefix).await;
    let (a, b) = (&replicas[0], &replicas[1]);
    let mut events = b.0.events();

    // Agent A's three tools fail together: a systemic event there, rightly.
    for tool in ["Grep", "Bash", "Read"] {
        let layer = a.1.layer(tool).unwrap();
        for _ in 0..3 {
            call(&layer, false).await;
        }
    }
    for _ in 0..3 {
        event(&mut events, BOUND, "a hold", is_held).await;
    }
    // Agent B saw no failure: one bad node must not pause the others, nor spend their
    // budgets. Its tools are skipped as open until the holds end.
    skipped_as_open(&b.1, "Grep").await;
    assert_eq!(b.1.report().budget.used, 0);
    assert!(b.1.report().systemic.is_none());
    // Its report says why honestly: held on a hint, not failed here.
    let offer = b.1.offered_tools();
    let grep = offer
        .withheld
        .iter()
        .find(|w| &*w.name == "Grep")
        .expect("withheld");
    assert_eq!(grep.unusable, Unusable::Held);
    assert!(grep.line.contains("held open on a hint"), "{}", grep.line);
}

#[tokio::test]
async fn a_password_protected_redis_is_reached_with_the_password_only() {
    let Some(server) = RedisServer::start(&["--requirepass", "s3cret"]).await else {
        return;
    };
    let prefix = unique_prefix("auth");
    let refused = replica(&server.url(), &prefix, "no-password");
    let error = refused
        .wait_for_link(Duration::from_millis(500))
        .await
        .unwrap_err();
    assert!(matches!(error, FleetError::NotConnected { .. }), "{error}");
    assert!(error.to_string().to_lowercase().contains("auth"), "{error}");

    let admitted = Fleet::builder()
        .address(server.url())
        .password("s3cret")
        .prefix(&prefix)
        .start()
        .unwrap();
    up(&admitted).await;
    admitted.kill("model").await.unwrap();
}

#[tokio::test]
async fn prefixes_keep_fleets_apart() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let ours = members(&redis.url, &unique_prefix("ours"), 1).await;
    let theirs = members(&redis.url, &unique_prefix("theirs"), 1).await;
    let mut events = ours[0].fleet.events();
    theirs[0].fleet.kill("model").await.unwrap();
    // Ours hears nothing of it: a kill of its own arrives first.
    ours[0].fleet.kill("model").await.unwrap();
    let got = event(&mut events, BOUND, "our kill", killed(true)).await;
    assert!(matches!(
        got,
        FleetEvent::KillSwitch {
            origin: KillOrigin::Command,
            ..
        }
    ));
    // Its own kill's message comes back to it (after `kill` returned: the reply is sent
    // once the key is written), and theirs never does.
    poll_until(BOUND, "our kill's message heard", || {
        ours[0].fleet.counts().kill_messages >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(ours[0].fleet.counts().kill_messages, 1);
}

#[test]
fn a_fleet_needs_a_runtime_but_shares_from_any_thread() {
    let outside = Fleet::builder().address("redis://127.0.0.1:1").start();
    assert_eq!(outside.unwrap_err(), FleetError::NoRuntime);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let fleet = runtime.block_on(async { Fleet::builder().address("redis://127.0.0.1:1").start() });
    let fleet = fleet.unwrap();
    // From a thread with no runtime: the listener runs on the fleet's.
    std::thread::spawn(move || {
        let stop = KillSwitch::new();
        fleet.share_kill_switch("model", &stop).unwrap();
        fleet
            .share_breaker(&breaker("model", &stop).handle(), HintPolicy::Follow)
            .unwrap();
        let other = breaker("model", &KillSwitch::new());
        let taken = fleet.share_breaker(&other.handle(), HintPolicy::Follow);
        assert!(matches!(taken, Err(FleetError::NameTaken { .. })));
        let taken = fleet.share_kill_switch("model", &KillSwitch::new());
        assert!(matches!(taken, Err(FleetError::NameTaken { .. })));
        let bad = fleet.share_breaker(
            &breaker("search", &stop).handle(),
            HintPolicy::quorum(0, Duration::from_secs(1)),
        );
        assert!(matches!(bad, Err(FleetError::BadSetting { .. })));
    })
    .join()
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_calling_the_fleet_while_a_hold_is_applied_does_not_deadlock() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("observer");
    let source = members_with(&redis.url, &prefix, 1, HintPolicy::Ignore).await;
    let fleet = replica(&redis.url, &prefix, "observed");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (fleet_for_observer, seen_by_observer) = (fleet.clone(), seen.clone());
    let model = CircuitBreakerLayer::builder()
        .name("model")
        .on_transition(move |t| {
            // Runs on the task that applied the hold: the fleet's own.
            let snapshot = fleet_for_observer.snapshot();
            seen_by_observer
                .lock()
                .unwrap()
                .push((t.to, snapshot.counts.hints));
        })
        .build()
        .unwrap();
    fleet
        .share_breaker(&model.handle(), HintPolicy::Follow)
        .unwrap();
    up(&fleet).await;
    let mut events = fleet.events();
    for _ in 0..3 {
        call(&source[0].model, false).await;
    }
    event(&mut events, BOUND, "a hold", is_held).await;
    assert_eq!(*seen.lock().unwrap(), vec![(State::Open, 1)]);
}

#[tokio::test]
async fn breakers_and_switches_go_on_alone_when_the_fleet_is_dropped() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("dropped");
    let mut members = members(&redis.url, &prefix, 1).await;
    let member = members.pop().unwrap();
    member.fleet.kill("model").await.unwrap();
    let mut link = member.fleet.watch_link();
    drop(member.fleet);
    // The link's task stops: its status channel closes.
    tokio::time::timeout(LINK, async { while link.changed().await.is_ok() {} })
        .await
        .expect("the task stops");
    assert!(member.stop.is_killed());
    member.stop.revive();
    assert_eq!(call(&member.model, true).await, Got::Made);
}
