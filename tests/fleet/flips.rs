//! Kill switches flipped in code (`switch.kill()`, not through the fleet) reach the
//! fleet too, and nothing a replica hears is published again.

use super::*;

fn from(origin: KillOrigin, killed: bool) -> impl Fn(&FleetEvent) -> bool {
    move |e| matches!(e, FleetEvent::KillSwitch { killed: k, origin: o, .. } if *k == killed && *o == origin)
}

/// Waits until every replica but `except` has applied the flip to `killed` heard on the
/// channel.
async fn heard_by_all(events: &mut [broadcast::Receiver<FleetEvent>], except: usize, killed: bool) {
    let deadline = tokio::time::Instant::now() + BOUND;
    for (i, events) in events.iter_mut().enumerate() {
        if i != except {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            event(
                events,
                left,
                "the flip heard",
                from(KillOrigin::Message, killed),
            )
            .await;
        }
    }
}

#[tokio::test]
async fn a_kill_switch_flipped_in_code_reaches_every_replica() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("code-flip");
    let members = members(&redis.url, &prefix, 3).await;
    let mut events: Vec<_> = members.iter().map(|m| m.fleet.events()).collect();

    // Replica 0's own code stops the model (a cost guard, say): the switch, not the fleet.
    members[0].stop.kill();
    event(
        &mut events[0],
        BOUND,
        "the flip shared",
        from(KillOrigin::Switch, true),
    )
    .await;
    heard_by_all(&mut events, 0, true).await;
    for member in &members {
        assert_eq!(
            call(&member.model, true).await,
            Got::Skipped(Reason::Killed)
        );
    }
    // It is in the key: a replica started now starts killed.
    let late = replica(&redis.url, &prefix, "late");
    let late_stop = KillSwitch::new();
    late.share_kill_switch("model", &late_stop).unwrap();
    up(&late).await;
    late.sync().await.unwrap();
    assert!(late_stop.is_killed());

    // Revived in code on another replica, from a clone of its switch.
    members[2].stop.clone().revive();
    heard_by_all(&mut events, 2, false).await;
    for member in &members {
        assert!(!member.stop.is_killed());
    }
    let mut raw = by_hand(&redis.url).await;
    let key = key_says_killed(&mut raw, &prefix, "model").await;
    assert_eq!(key, Some(false), "the key holds the revive");
    let published: Vec<u64> = members
        .iter()
        .map(|m| m.fleet.counts().kills_published)
        .collect();
    assert_eq!(published, [1, 0, 1]);
}

#[tokio::test]
async fn flips_and_holds_are_published_once_and_never_echoed() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("echo");
    let kills = format!("{prefix}:kills");
    let hints = format!("{prefix}:hints");
    let mut listener = Listener::new(&redis.url, &[&kills, &hints]).await;
    let members = members(&redis.url, &prefix, 3).await;
    let mut events: Vec<_> = members.iter().map(|m| m.fleet.events()).collect();

    // A flip in code, one through the fleet, another in code: each heard by the others.
    members[0].stop.kill();
    heard_by_all(&mut events, 0, true).await;
    members[1].fleet.revive("model").await.unwrap();
    heard_by_all(&mut events, 1, false).await;
    members[2].stop.kill();
    heard_by_all(&mut events, 2, true).await;
    members[2].fleet.revive("model").await.unwrap();
    heard_by_all(&mut events, 2, false).await;
    // Replica 0's breaker opens on its own; the others hold theirs on its hint.
    for _ in 0..3 {
        call(&members[0].model, false).await;
    }
    for events in &mut events[1..] {
        event(events, BOUND, "a hold", is_held).await;
    }
    // Each replica's task has handled what its switch and breaker told it by now (they
    // were told before the events above); a round trip through it publishes anything
    // it still had to.
    for member in &members {
        member.fleet.sync().await.unwrap();
    }
    let mut raw = by_hand(&redis.url).await;
    publish(&mut raw, &kills, "end").await;

    let mut heard = listener.until(|(_, payload)| payload == "end").await;
    heard.pop();
    let on = |channel: &str| heard.iter().filter(|(c, _)| c == channel).count();
    assert_eq!(on(&kills), 4, "one message per flip: {heard:?}");
    assert_eq!(
        on(&hints),
        1,
        "replica 0's opening, never a hold: {heard:?}"
    );
    let counts: Vec<(u64, u64)> = members
        .iter()
        .map(|m| {
            let counts = m.fleet.counts();
            (counts.kills_published, counts.published)
        })
        .collect();
    assert_eq!(counts, [(1, 1), (1, 0), (2, 0)]);
    for member in &members[1..] {
        assert_eq!(member.model.handle().state(), State::Open);
    }
}

#[tokio::test]
async fn rapid_flips_in_code_end_with_the_last_one_everywhere() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("rapid");
    let kills = format!("{prefix}:kills");
    let mut listener = Listener::new(&redis.url, &[&kills]).await;
    let members = members(&redis.url, &prefix, 3).await;
    let mut events: Vec<_> = members.iter().map(|m| m.fleet.events()).collect();

    // Far faster than the link's task can publish: some flips are seen only as the
    // latest state. Ends killed.
    let stop = &members[0].stop;
    for _ in 0..500 {
        stop.kill();
        stop.revive();
    }
    stop.kill();
    // Let the switch's watcher tell the link's task, then a round trip through it.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    members[0].fleet.sync().await.unwrap();
    let mut raw = by_hand(&redis.url).await;
    publish(&mut raw, &kills, "end").await;
    let mut heard = listener.until(|(_, payload)| payload == "end").await;
    heard.pop();
    // At most one message per flip, the last saying killed.
    assert!(!heard.is_empty() && heard.len() <= 1001, "{}", heard.len());
    assert!(heard.last().unwrap().1.contains(r#""killed":true"#));
    // The others have read the marker (refused), so all before it: killed, and they
    // published nothing of what they heard.
    for events in &mut events[1..] {
        event(events, BOUND, "the marker refused", |e| {
            matches!(e, FleetEvent::Rejected { .. })
        })
        .await;
    }
    for member in &members {
        assert!(member.stop.is_killed());
    }
    let published: Vec<u64> = members
        .iter()
        .map(|m| m.fleet.counts().kills_published)
        .collect();
    assert_eq!(published[0], heard.len() as u64);
    assert_eq!(published[1..], [0, 0]);
    let key = key_says_killed(&mut raw, &prefix, "model").await;
    assert_eq!(key, Some(true));
}
