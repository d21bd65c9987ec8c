//! An attacker's and an unlucky operator's view of the fleet: hostile messages published
//! by hand, Redis cut, flushed and restarted under the replicas, flips racing on
//! different replicas. Every message from the network is validated before it is
//! believed; bad input is counted, never a panic; replicas agree once Redis is back.
//!
//! Tests that cut, flush or restart Redis run a server of their own, so they never
//! disturb the tests sharing `TCB_REDIS_URL`.

use super::attack::member_with;
use super::*;

/// Publishes raw bytes (bad UTF-8 included) on `channel`.
async fn publish_bytes(conn: &mut redis::aio::MultiplexedConnection, channel: &str, bytes: &[u8]) {
    redis::cmd("PUBLISH")
        .arg(channel)
        .arg(bytes)
        .query_async::<()>(conn)
        .await
        .unwrap();
}

/// Waits until `events` has told of `n` refused messages; returns everything else it
/// told of meanwhile. A replica reads its channels in order, so it has then read every
/// message published before those.
async fn refusals(events: &mut broadcast::Receiver<FleetEvent>, n: usize) -> Vec<FleetEvent> {
    let mut other = Vec::new();
    let mut refused = 0;
    let wait = async {
        while refused < n {
            match events.recv().await {
                Ok(FleetEvent::Rejected { .. }) => refused += 1,
                Ok(event) => other.push(event),
                Err(error) => panic!("events: {error}"),
            }
        }
    };
    let done = tokio::time::timeout(BOUND, wait).await.is_ok();
    assert!(
        done,
        "{n} refusals within the bound, {refused} came; other events: {other:?}"
    );
    other
}

/// A hint message, as a peer would publish it.
fn hint(replica: &str, run: &str, seq: u64, state: &str, until_ms: Option<u64>) -> String {
    let until = until_ms.map_or("null".to_string(), |ms| ms.to_string());
    format!(
        r#"{{"v":1,"replica":"{replica}","run":"{run}","seq":{seq},"name":"model","state":"{state}","cause":"tripped","at_ms":{},"until_ms":{until}}}"#,
        wall_ms()
    )
}

async fn kill_key(conn: &mut redis::aio::MultiplexedConnection, prefix: &str) -> bool {
    key_says_killed(conn, prefix, "model").await == Some(true)
}

/// Client connections the server has now.
async fn connections(conn: &mut redis::aio::MultiplexedConnection) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(conn)
        .await
        .unwrap();
    list.lines().filter(|l| !l.trim().is_empty()).count()
}

async fn client_kill(conn: &mut redis::aio::MultiplexedConnection, kind: &str) -> u64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg(kind)
        .query_async(conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn hostile_values_in_every_field_are_refused_counted_and_the_replica_works_on() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let ByHand {
        member,
        mut events,
        mut raw,
        kills,
        hints,
        ..
    } = one_replica_by_hand(&redis.url, "hostile").await;
    let member = &member;
    let deep = format!(
        r#"{{"v":1,"name":"model","killed":true,"x":{}{}}}"#,
        "[".repeat(1500),
        "]".repeat(1500)
    );
    let long_name = format!(r#"{{"v":1,"name":"{}","killed":true}}"#, "m".repeat(201));
    let long_by = format!(
        r#"{{"v":1,"name":"model","killed":true,"by":"{}"}}"#,
        "b".repeat(65)
    );
    let good = hint("peer", "r1", 1, "open", None);
    let malformed_kills: Vec<String> = vec![
        r#"{"v":1,"name":"model","killed":"true"}"#.into(),
        r#"{"v":1,"name":"model","killed":1}"#.into(),
        r#"{"v":1,"name":123,"killed":true}"#.into(),
        r#"{"v":1.0,"name":"model","killed":true}"#.into(),
        r#"{"v":-1,"name":"model","killed":true}"#.into(),
        r#"{"v":18446744073709551616,"name":"model","killed":true}"#.into(),
        r#"{"v":null,"name":"model","killed":true}"#.into(),
        r#"{"v":1,"name":"model","killed":false,"killed":true}"#.into(),
        "null".into(),
        "\"v\"".into(),
        r#"{"v":1,"name":"model","killed":true,"replica":"","run":"x"}"#.into(),
        r#"{"v":1,"name":" model","killed":true}"#.into(),
        r#"{"v":1,"name":"model\u0000","killed":true}"#.into(),
        long_name,
        long_by,
    ];
    let unknown_versions: Vec<String> = vec![
        r#"{"v":0,"name":"model","killed":true}"#.into(),
        r#"{"v":18446744073709551615,"name":"model","killed":true}"#.into(),
        r#"{"v":2}"#.into(),
    ];
    let malformed_hints: Vec<String> = vec![
        good.replace(r#""seq":1"#, r#""seq":-1"#),
        good.replace(r#""seq":1"#, r#""seq":"1""#),
        good.replace(r#""seq":1"#, r#""seq":1e3"#),
        good.replace(r#""seq":1"#, r#""seq":18446744073709551616"#),
        good.replace(r#""until_ms":null"#, r#""until_ms":-5"#),
        good.replace(r#""until_ms":null"#, r#""until_ms":"soon""#),
        good.replace(r#""state":"open""#, r#""state":"Open""#),
        good.replace(r#""state":"open""#, r#""state":null"#),
        good.replace(r#""cause":"tripped","#, ""),
        good.replace(r#""run":"r1""#, r#""run":"r\u0007""#),
        good.replace(r#""name":"model""#, r#""name":"""#),
        good.replace(r#""replica":"peer""#, r#""replica":"peer\n""#),
        good.replace(r#""at_ms":"#, r#""at_ms":1.5,"x":"#),
    ];
    for payload in &malformed_kills {
        publish(&mut raw, &kills, payload).await;
    }
    for payload in &unknown_versions {
        publish(&mut raw, &kills, payload).await;
    }
    for payload in &malformed_hints {
        publish(&mut raw, &hints, payload).await;
    }
    let total = malformed_kills.len() + unknown_versions.len() + malformed_hints.len();
    let other = refusals(&mut events, total).await;
    assert!(other.is_empty(), "believed: {other:?}");
    let counts = member.fleet.counts();
    assert_eq!(
        (counts.malformed, counts.unknown_version, counts.oversized),
        (
            (malformed_kills.len() + malformed_hints.len()) as u64,
            unknown_versions.len() as u64,
            0
        )
    );
    assert_eq!(
        (counts.kill_messages, counts.hints, counts.holds),
        (0, 0, 0)
    );
    assert!(member.fleet.link().is_up());
    assert!(!member.stop.is_killed());
    assert_eq!(call(&member.model, true).await, Got::Made);
    // The replica still believes what is well formed, an unknown field nested 1500
    // deep included (unknown fields are ignored, and skipping them never overflows).
    publish(&mut raw, &kills, &deep).await;
    event(&mut events, BOUND, "the kill", killed(true)).await;
}

#[tokio::test]
async fn a_message_that_is_a_json_array_is_refused_as_malformed() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let ByHand {
        kills,
        member,
        mut events,
        mut raw,
        hints,
        ..
    } = one_replica_by_hand(&redis.url, "array-form").await;
    let member = &member;
    let until = wall_ms() + 30_000;
    // Neither is the documented object: `{"v":1,"name":...,"killed":...}`.
    let array_hint = format!(
        r#"[1,"peer","r1",1,"model","open","tripped",{},{until}]"#,
        wall_ms()
    );
    publish(&mut raw, &hints, &array_hint).await;
    publish(&mut raw, &kills, r#"[1,"model",true]"#).await;
    let other = refusals(&mut events, 2).await;
    assert!(other.is_empty(), "believed: {other:?}");
    assert!(!member.stop.is_killed());
    assert_eq!(member.model.handle().state(), State::Closed);
    assert_eq!(member.fleet.counts().malformed, 2);
}

#[tokio::test]
async fn a_payload_that_is_not_utf8_is_refused_as_malformed() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let ByHand {
        member,
        mut events,
        mut raw,
        kills,
        ..
    } = one_replica_by_hand(&redis.url, "bad-utf8").await;
    let member = &member;
    // In a field the format reads, and in one it ignores: neither is JSON (RFC 8259 text
    // is UTF-8).
    publish_bytes(
        &mut raw,
        &kills,
        b"{\"v\":1,\"name\":\"mo\xffdel\",\"killed\":true}",
    )
    .await;
    publish_bytes(
        &mut raw,
        &kills,
        b"{\"v\":1,\"name\":\"model\",\"killed\":true,\"by\":\"\xc3\x28\"}",
    )
    .await;
    publish_bytes(
        &mut raw,
        &kills,
        b"{\"v\":1,\"name\":\"model\",\"killed\":true,\"note\":\"\xff\xfe\"}",
    )
    .await;
    let other = refusals(&mut events, 3).await;
    assert!(other.is_empty(), "believed: {other:?}");
    assert!(!member.stop.is_killed());
    assert_eq!(member.fleet.counts().malformed, 3);
}

#[tokio::test]
async fn extreme_numbers_in_a_believed_hint_never_panic_and_hold_within_the_longest_hold() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let ByHand {
        member,
        mut events,
        mut raw,
        hints,
        ..
    } = one_replica_by_hand(&redis.url, "extreme").await;
    let member = &member;
    let sent = [
        // The farthest time there is, from a replica starting at sequence 0.
        hint("edge", "r1", 0, "open", Some(u64::MAX)),
        // A time already past: the report no longer holds.
        hint("edge", "r1", 1, "open", Some(0)),
        // A peer stamping the end of time, with no time to follow: the default hold.
        hint("edge2", "r1", u64::MAX - 1, "open", None).replace(
            &format!(r#""at_ms":{}"#, wall_ms()),
            &format!(r#""at_ms":{}"#, u64::MAX),
        ),
        // Unknown breakers, a big sequence gap.
        hint("edge3", "r1", 1, "open", Some(u64::MAX)).replace(r#""model""#, r#""nobody""#),
        hint("edge3", "r1", u64::MAX, "closed", None).replace(r#""model""#, r#""nobody""#),
    ];
    for payload in &sent {
        publish(&mut raw, &hints, payload).await;
    }
    publish(&mut raw, &hints, "barrier").await;
    refusals(&mut events, 1).await;
    let counts = member.fleet.counts();
    assert_eq!((counts.hints, counts.stale), (5, 0));
    assert!(member.fleet.link().is_up());
    let view = &member.fleet.snapshot().breakers[0];
    let held = view.held_until.expect("held on edge2's report");
    // The fleet's longest hold here is 60 s.
    assert!(held <= Instant::now() + Duration::from_secs(60), "{held:?}");
    assert_eq!(skipped(&member.model).await.0, Reason::Open);
}

#[tokio::test]
async fn a_replayed_hint_from_a_replicas_earlier_run_is_stale() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let ByHand {
        member,
        mut events,
        mut raw,
        hints,
        ..
    } = one_replica_by_hand(&redis.url, "replay-run").await;
    let member = &member;
    // Replica p's first run opens (a cooldown in calls: no time given).
    let old_open = hint("p", "run-1", 7, "open", None);
    publish(&mut raw, &hints, &old_open).await;
    event(&mut events, BOUND, "p's hold", is_held).await;
    // p restarts and reports closed: the hold ends.
    publish(&mut raw, &hints, &hint("p", "run-2", 1, "closed", None)).await;
    let released = |e: &FleetEvent| matches!(e, FleetEvent::Released { .. });
    event(&mut events, BOUND, "the release", released).await;
    // Someone replays the message of p's first run, word for word.
    publish(&mut raw, &hints, &old_open).await;
    publish(&mut raw, &hints, "barrier").await;
    let other = refusals(&mut events, 1).await;
    assert!(
        !other.iter().any(is_held),
        "a replayed hint held the breaker again: {other:?}"
    );
    assert_eq!(member.fleet.counts().stale, 1);
    assert_eq!(call(&member.model, true).await, Got::Made);
}

#[tokio::test]
async fn a_fresh_open_report_never_ends_a_quorum_hold() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("quorum-fresh");
    let window = Duration::from_millis(300);
    let judge = member_with(&redis.url, &prefix, "judge", |b| b)
        .await
        .unwrap();
    judge
        .fleet
        .share_breaker(&judge.model.handle(), HintPolicy::quorum(2, window))
        .unwrap();
    up(&judge.fleet).await;
    let mut events = judge.fleet.events();
    let mut raw = by_hand(&redis.url).await;
    let hints = format!("{prefix}:hints");
    let until = wall_ms() + 30_000;
    // p and q report open in one transaction: delivered together, within the window.
    let mut both = redis::pipe();
    both.atomic()
        .publish(&hints, hint("p", "r", 1, "open", Some(until)))
        .ignore()
        .publish(&hints, hint("q", "r", 1, "open", Some(until)))
        .ignore();
    both.query_async::<()>(&mut raw).await.unwrap();
    let FleetEvent::Held { until: held, .. } =
        event(&mut events, BOUND, "the quorum's hold", is_held).await
    else {
        unreachable!()
    };
    // The reports that started the hold age past the window: the only wait here is
    // for the window itself, measured on the fleet's own clock, so it is exact.
    tokio::time::sleep(window + Duration::from_millis(20)).await;
    // A third peer reports open too, until as long: more evidence, not less.
    publish(&mut raw, &hints, &hint("r", "r", 1, "open", Some(until))).await;
    publish(&mut raw, &hints, "barrier").await;
    let other = refusals(&mut events, 1).await;
    assert!(
        !other
            .iter()
            .any(|e| matches!(e, FleetEvent::Released { .. })),
        "a fresh open report ended the hold: {other:?}"
    );
    assert_eq!(judge.fleet.snapshot().breakers[0].held_until, Some(held));
    assert_eq!(skipped(&judge.model).await.0, Reason::Open);
}

/// The kill switch's flips a replica told of, as far as it has made them.
fn flips(events: &mut broadcast::Receiver<FleetEvent>) -> Vec<bool> {
    let mut flips = Vec::new();
    loop {
        match events.try_recv() {
            Ok(FleetEvent::KillSwitch { killed, .. }) => flips.push(killed),
            Ok(_) => {}
            Err(broadcast::error::TryRecvError::Empty) => return flips,
            Err(error) => panic!("events: {error}"),
        }
    }
}

#[tokio::test]
async fn a_kill_and_a_revive_racing_on_two_replicas_end_agreed_with_the_key() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("race-flip");
    let members = members(&redis.url, &prefix, 3).await;
    let mut events: Vec<_> = members.iter().map(|m| m.fleet.events()).collect();
    let mut raw = by_hand(&redis.url).await;
    for round in 0..50 {
        let (a, b) = if round % 2 == 0 { (0, 1) } else { (1, 0) };
        let (killed, revived) = tokio::join!(
            members[a].fleet.kill("model"),
            members[b].fleet.revive("model"),
        );
        // Each is written, or finds the other already in the key and later (by the
        // order of acts), and says so.
        for result in [killed, revived] {
            assert!(
                matches!(result, Ok(()) | Err(FleetError::Superseded { .. })),
                "{result:?}"
            );
        }
        let key = kill_key(&mut raw, &prefix).await;
        let states = || -> Vec<bool> { members.iter().map(|m| m.stop.is_killed()).collect() };
        let agreed = tokio::time::timeout(BOUND, async {
            while states().iter().any(|&k| k != key) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(
            agreed.is_ok(),
            "round {round}: key says killed={key}, replicas {:?}",
            states()
        );
        // A round trip through each replica's task: what it heard is applied.
        for member in &members {
            member.fleet.sync().await.unwrap();
        }
        for (i, events) in events.iter_mut().enumerate() {
            let flips = flips(events);
            // Two changes: never more flips than two, never back to a value left.
            assert!(
                flips.len() <= 2 && flips.last().is_none_or(|&k| k == key),
                "round {round}, replica {i}: flipped {flips:?}, the key says killed={key}"
            );
        }
    }
}

#[tokio::test]
async fn a_flip_in_code_racing_a_peers_revive_ends_agreed_with_the_key() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("race-code");
    let members = members(&redis.url, &prefix, 2).await;
    let mut raw = by_hand(&redis.url).await;
    for round in 0..50 {
        let (_, revived) = tokio::join!(
            async {
                members[0].stop.kill();
                // A round trip through replica 0's task: its flip has been written.
                members[0].fleet.sync().await.unwrap();
            },
            members[1].fleet.revive("model"),
        );
        revived.unwrap();
        let key = kill_key(&mut raw, &prefix).await;
        let states = || -> Vec<bool> { members.iter().map(|m| m.stop.is_killed()).collect() };
        let agreed = tokio::time::timeout(BOUND, async {
            while states().iter().any(|&k| k != key) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(
            agreed.is_ok(),
            "round {round}: key says killed={key}, replicas {:?}",
            states()
        );
        members[1].fleet.revive("model").await.unwrap();
        poll_until(BOUND, "all revived", || {
            members.iter().all(|m| !m.stop.is_killed())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subscriber_cut_by_the_server_is_noticed_and_kills_reach_the_replica_again() {
    let Some(server) = RedisServer::start(&[]).await else {
        return;
    };
    let url = server.url();
    let prefix = unique_prefix("cut-pubsub");
    let members = members(&url, &prefix, 3).await;
    let mut raw = by_hand(&url).await;
    assert_eq!(client_kill(&mut raw, "pubsub").await, 3);
    for member in &members {
        poll_until(LINK, "the link back", || {
            member.fleet.counts().reconnects >= 1 && member.fleet.link().is_up()
        })
        .await;
    }
    members[2].fleet.kill("model").await.unwrap();
    poll_until(BOUND, "the kill everywhere", || {
        members.iter().all(|m| m.stop.is_killed())
    })
    .await;
    members[0].stop.revive();
    poll_until(BOUND, "the revive everywhere", || {
        members.iter().all(|m| !m.stop.is_killed())
    })
    .await;
}

/// Two replicas on a server of their own whose plain connections (the replicas' command
/// connections among them) the server has just cut; the subscribers stay, so the
/// replicas see nothing wrong yet.
struct CommandsCut {
    /// Kept: the server stops when this is dropped (bind it whole, not with `..`).
    _server: RedisServer,
    url: String,
    prefix: String,
    members: Vec<Member>,
}

async fn two_replicas_with_commands_cut(test: &str) -> Option<CommandsCut> {
    let server = RedisServer::start(&[]).await?;
    let url = server.url();
    let prefix = unique_prefix(test);
    let members = members(&url, &prefix, 2).await;
    client_kill(&mut by_hand(&url).await, "normal").await;
    Some(CommandsCut {
        _server: server,
        url,
        prefix,
        members,
    })
}

/// Repeats an operator's `flip` every 20 ms until it succeeds, as a person told it
/// failed would.
async fn until_it_succeeds<F: std::future::Future<Output = Result<(), FleetError>>>(
    what: &str,
    mut flip: impl FnMut() -> F,
) {
    let deadline = tokio::time::Instant::now() + LINK;
    while flip().await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} never succeeds"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flip_in_code_whose_write_fails_is_not_lost() {
    let Some(cut) = two_replicas_with_commands_cut("cut-commands").await else {
        return;
    };
    let members = &cut.members;
    members[0].stop.kill();
    poll_until(LINK, "replica 0 relinked", || {
        members[0].fleet.counts().reconnects >= 1 && members[0].fleet.link().is_up()
    })
    .await;
    members[0].fleet.sync().await.unwrap();
    // The flip was made in code, while the link was up: it is the newest word. At the
    // least it stays here; it should reach the fleet.
    assert!(members[0].stop.is_killed(), "the flip was undone");
    poll_until(BOUND, "the kill everywhere", || {
        members.iter().all(|m| m.stop.is_killed())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_revive_after_a_flip_whose_write_failed_is_the_last_word() {
    let Some(cut) = two_replicas_with_commands_cut("owed-then-revived").await else {
        return;
    };
    let members = &cut.members;
    // Killed in code (its write fails), then revived by a person, link back or not.
    members[0].stop.kill();
    until_it_succeeds("revive", || members[0].fleet.revive("model")).await;
    members[0].fleet.sync().await.unwrap();
    poll_until(BOUND, "the revive is the last word everywhere", || {
        members.iter().all(|m| !m.stop.is_killed())
    })
    .await;
    let mut raw = by_hand(&cut.url).await;
    assert!(
        !kill_key(&mut raw, &cut.prefix).await,
        "the key says revived"
    );
}

#[tokio::test]
async fn a_kill_made_after_the_command_connection_was_cut_is_an_error_or_reaches_everyone() {
    let Some(cut) = two_replicas_with_commands_cut("cut-kill").await else {
        return;
    };
    let members = &cut.members;
    let first = members[0].fleet.kill("model").await;
    if first.is_err() {
        assert!(matches!(first, Err(FleetError::Redis(_))), "{first:?}");
        // Told it failed, the operator kills again once the link is back.
        poll_until(LINK, "replica 0 relinked", || {
            members[0].fleet.link().is_up()
        })
        .await;
        until_it_succeeds("kill", || members[0].fleet.kill("model")).await;
    }
    poll_until(BOUND, "the kill everywhere", || {
        members.iter().all(|m| m.stop.is_killed())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushall_mid_run_undoes_no_kill_and_the_kill_is_written_back_within_a_resync() {
    let Some(server) = RedisServer::start(&[]).await else {
        return;
    };
    let url = server.url();
    let prefix = unique_prefix("flushall");
    let mut members = Vec::new();
    for i in 0..3 {
        let member = member_with(&url, &prefix, &format!("r{i}"), |b| {
            b.resync_every(Duration::from_millis(100))
        })
        .await
        .unwrap();
        up(&member.fleet).await;
        members.push(member);
    }
    members[0].fleet.kill("model").await.unwrap();
    poll_until(BOUND, "killed everywhere", || {
        members.iter().all(|m| m.stop.is_killed())
    })
    .await;
    let mut raw = by_hand(&url).await;
    redis::cmd("FLUSHALL")
        .query_async::<()>(&mut raw)
        .await
        .unwrap();
    // The key is gone, the kill is not: the replicas write it back at their next resync.
    let deadline = tokio::time::Instant::now() + LINK;
    while key_says_killed(&mut raw, &prefix, "model").await != Some(true) {
        assert!(tokio::time::Instant::now() < deadline, "not written back");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(members.iter().all(|m| m.stop.is_killed()));
    // And the fleet goes on: a revive after the flush reaches everyone.
    members[2].fleet.revive("model").await.unwrap();
    poll_until(BOUND, "revived everywhere", || {
        members.iter().all(|m| !m.stop.is_killed())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_replicas_come_back_in_step_after_a_redis_restart() {
    let Some(mut server) = RedisServer::start(&[]).await else {
        return;
    };
    let url = server.url();
    let prefix = unique_prefix("restart-many");
    let members = members(&url, &prefix, 6).await;
    members[0].fleet.kill("model").await.unwrap();
    poll_until(BOUND, "killed everywhere", || {
        members.iter().all(|m| m.stop.is_killed())
    })
    .await;
    server.stop(None).await;
    for member in &members {
        poll_until(LINK, "the link down", || !member.fleet.link().is_up()).await;
    }
    // Alone: one replica revives, another flips in code; both are kept.
    let alone = members[1].fleet.revive("model").await;
    assert!(
        matches!(alone, Err(FleetError::LinkDown { .. })),
        "{alone:?}"
    );
    members[2].stop.revive();
    server.restart().await;
    for member in &members {
        poll_until(LINK, "the link back", || {
            member.fleet.link().is_up() && member.fleet.counts().reconnects >= 1
        })
        .await;
    }
    // The revives made alone are later than the saved kill: they win everywhere.
    poll_until(LINK, "revived everywhere", || {
        members.iter().all(|m| !m.stop.is_killed())
    })
    .await;
    for member in &members {
        member.fleet.sync().await.unwrap();
    }
    assert!(members.iter().all(|m| !m.stop.is_killed()));
    assert!(!kill_key(&mut by_hand(&url).await, &prefix).await);
    members[4].fleet.kill("model").await.unwrap();
    poll_until(BOUND, "killed everywhere", || {
        members.iter().all(|m| m.stop.is_killed())
    })
    .await;
    members[5].fleet.revive("model").await.unwrap();
    poll_until(BOUND, "revived everywhere", || {
        members.iter().all(|m| !m.stop.is_killed())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_so_big_that_redis_drops_the_subscriber_is_survived() {
    let Some(server) = RedisServer::start(&[]).await else {
        return;
    };
    let url = server.url();
    let prefix = unique_prefix("huge");
    let members = members(&url, &prefix, 2).await;
    let mut raw = by_hand(&url).await;
    let hints = format!("{prefix}:hints");
    // Over the limit but under Redis's: read, refused unparsed, counted.
    let big = "x".repeat(1 << 20);
    publish(&mut raw, &hints, &big).await;
    poll_until(BOUND, "the big one counted", || {
        members.iter().all(|m| m.fleet.counts().oversized == 1)
    })
    .await;
    // Past Redis's own limit for a subscriber (32 MiB): the server drops the link.
    let huge = "x".repeat(40 << 20);
    publish(&mut raw, &hints, &huge).await;
    drop(huge);
    for member in &members {
        poll_until(LINK, "the link back", || {
            member.fleet.link().is_up() && member.fleet.counts().reconnects >= 1
        })
        .await;
    }
    members[0].fleet.kill("model").await.unwrap();
    poll_until(BOUND, "the kill everywhere", || {
        members.iter().all(|m| m.stop.is_killed())
    })
    .await;
}

#[tokio::test]
async fn dropping_every_handle_of_a_replica_closes_its_connections() {
    let Some(server) = RedisServer::start(&[]).await else {
        return;
    };
    let url = server.url();
    let prefix = unique_prefix("drop-conns");
    let mut raw = by_hand(&url).await;
    let alone = connections(&mut raw).await;
    let mut members = members(&url, &prefix, 1).await;
    assert_eq!(connections(&mut raw).await, alone + 2);
    let member = members.pop().unwrap();
    let clone = member.fleet.clone();
    drop(member.fleet);
    assert_eq!(
        connections(&mut raw).await,
        alone + 2,
        "a clone keeps the link"
    );
    drop(clone);
    let deadline = tokio::time::Instant::now() + BOUND;
    while connections(&mut raw).await != alone {
        assert!(
            tokio::time::Instant::now() < deadline,
            "connections left open: {}",
            connections(&mut raw).await - alone
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // What was shared goes on alone.
    member.stop.kill();
    assert_eq!(
        call(&member.model, true).await,
        Got::Skipped(Reason::Killed)
    );
}

#[tokio::test]
async fn a_quorum_larger_than_the_peers_remembered_is_refused() {
    let fleet = Fleet::builder()
        .address("redis://127.0.0.1:1")
        .max_peers(2)
        .start();
    let Ok(fleet) = fleet else {
        // Needs a runtime: this test has one.
        unreachable!()
    };
    let model = breaker("model", &KillSwitch::new());
    let shared = fleet.share_breaker(
        &model.handle(),
        HintPolicy::quorum(3, Duration::from_secs(30)),
    );
    assert!(
        matches!(shared, Err(FleetError::BadSetting { .. })),
        "{shared:?}"
    );
}

/// A kill switch whose messages (its name with this replica's) could not fit the fleet's
/// message limit is refused when shared: every replica, this one included, would refuse
/// its messages, and this one would then wait for its own for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_switch_whose_messages_cannot_fit_the_limit_is_refused_when_shared() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let fleet = Fleet::builder()
        .address(&redis.url)
        .prefix(unique_prefix("too-long"))
        .replica("r1")
        .max_message_bytes(256)
        .start()
        .expect("fleet settings");
    let long = "m".repeat(200);
    match fleet.share_kill_switch(&long, &KillSwitch::new()) {
        Err(FleetError::BadName { what, .. }) => assert_eq!(what, "kill switch"),
        other => panic!("refused as a bad name: {other:?}"),
    }
    fleet
        .share_kill_switch("model", &KillSwitch::new())
        .expect("a short name fits");
}
