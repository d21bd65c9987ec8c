//! What an operator or an attacker on the network does to a fleet: extreme settings,
//! connections cut from the server side, a slow Redis, hand-made messages.

use tower_circuit_breaker::fleet::FleetBuilder;

use super::*;

/// A replica of `model` with extra settings.
pub(crate) async fn member_with(
    url: &str,
    prefix: &str,
    name: &str,
    settings: impl FnOnce(FleetBuilder) -> FleetBuilder,
) -> Result<Member, FleetError> {
    let builder = Fleet::builder()
        .address(url)
        .prefix(prefix)
        .replica(name)
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
        .max_hold(Duration::from_secs(60));
    let fleet = settings(builder).start()?;
    let stop = KillSwitch::new();
    fleet.share_kill_switch("model", &stop).unwrap();
    let model = breaker("model", &stop);
    fleet
        .share_breaker(&model.handle(), HintPolicy::Follow)
        .unwrap();
    Ok(Member { fleet, stop, model })
}

#[tokio::test]
async fn waits_too_long_for_the_links_clock_are_refused_when_built_and_a_day_works() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("long-waits");
    // Unrefused, these overflowed in the link's task: a resync from the moment the link
    // came up (the link then said "up" with nobody listening), a timeout doubled before
    // the first connection (the link never came up).
    for (setting, builder) in [
        ("resync_every", Fleet::builder().resync_every(Duration::MAX)),
        ("timeout", Fleet::builder().timeout(Duration::MAX)),
    ] {
        match builder.address(redis.url.as_str()).prefix(&prefix).start() {
            Err(FleetError::BadSetting { setting: s, .. }) => assert_eq!(s, setting),
            other => panic!("{setting}: {other:?}"),
        }
    }
    let day = Duration::from_secs(24 * 3600);
    let member = member_with(&redis.url, &prefix, "a", |b| {
        b.resync_every(day).timeout(day)
    })
    .await
    .unwrap();
    up(&member.fleet).await;
    let mut events = member.fleet.events();
    let mut raw = by_hand(&redis.url).await;
    let kill = r#"{"v":1,"name":"model","killed":true}"#;
    publish(&mut raw, &format!("{prefix}:kills"), kill).await;
    event(&mut events, BOUND, "the kill", killed(true)).await;
    assert_eq!(
        call(&member.model, true).await,
        Got::Skipped(Reason::Killed)
    );
}

#[tokio::test]
async fn a_kill_key_of_another_type_is_refused_and_counted_not_read_as_absent() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("key-type");
    let member = member_with(&redis.url, &prefix, "a", |b| b).await.unwrap();
    up(&member.fleet).await;
    member.fleet.kill("model").await.unwrap();
    let mut raw = by_hand(&redis.url).await;
    let key = format!("{prefix}:kill:model");
    let mut replace = redis::pipe();
    replace
        .atomic()
        .del(&key)
        .ignore()
        .rpush(&key, "1")
        .ignore();
    replace.query_async::<()>(&mut raw).await.unwrap();
    member.fleet.sync().await.unwrap();
    // A key that is not a string says nothing: refused as a string of garbage is.
    assert!(member.stop.is_killed());
    assert_eq!(member.fleet.counts().malformed, 1);
    // A key that is gone undoes nothing: the kill is written back.
    redis::cmd("DEL")
        .arg(&key)
        .query_async::<()>(&mut raw)
        .await
        .unwrap();
    member.fleet.sync().await.unwrap();
    assert!(member.stop.is_killed());
    assert_eq!(
        key_says_killed(&mut raw, &prefix, "model").await,
        Some(true)
    );
    // A revive written by hand (`0`, no stamp) counts as made when read: it wins.
    redis::cmd("SET")
        .arg(&key)
        .arg("0")
        .query_async::<()>(&mut raw)
        .await
        .unwrap();
    member.fleet.sync().await.unwrap();
    assert!(!member.stop.is_killed());
    assert_eq!(member.fleet.counts().malformed, 1);
    assert_eq!(call(&member.model, true).await, Got::Made);
    // Stamped in the key by the replica that read it.
    let value: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(value.contains(r#""killed":false"#), "{value}");
}

#[tokio::test]
async fn one_kill_switch_is_shared_under_one_name_so_names_never_cross() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("two-names");
    let fleet = replica(&redis.url, &prefix, "a");
    let stop = KillSwitch::new();
    fleet.share_kill_switch("openai", &stop).unwrap();
    fleet.share_kill_switch("openai", &stop.clone()).unwrap();
    // Under a second name, a kill heard for one was published for the other: a kill of
    // "openai" wrote the key of "all-models", and killed it on every replica.
    match fleet.share_kill_switch("all-models", &stop.clone()) {
        Err(FleetError::SharedAs { name, shared_as }) => {
            assert_eq!(
                (name.as_str(), shared_as.as_str()),
                ("all-models", "openai")
            )
        }
        other => panic!("{other:?}"),
    }
    up(&fleet).await;
    fleet.sync().await.unwrap();
    let mut raw = by_hand(&redis.url).await;
    let kill = r#"{"v":1,"name":"openai","killed":true}"#;
    publish(&mut raw, &format!("{prefix}:kills"), kill).await;
    poll_until(BOUND, "the kill applied", || stop.is_killed()).await;
    // Whatever the replica writes on the kill's account, it writes within the bound.
    let deadline = tokio::time::Instant::now() + BOUND;
    while tokio::time::Instant::now() < deadline {
        let all_models: Option<String> = redis::cmd("GET")
            .arg(format!("{prefix}:kill:all-models"))
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(all_models, None, "a kill of openai killed all-models");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(fleet.counts().kills_published, 0);
}

#[tokio::test]
async fn a_peer_reporting_closed_never_holds_a_breaker_a_person_just_reset() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("reset-then-closed");
    let member = member_with(&redis.url, &prefix, "a", |b| b).await.unwrap();
    up(&member.fleet).await;
    let mut events = member.fleet.events();
    let mut raw = by_hand(&redis.url).await;
    let hints = format!("{prefix}:hints");
    let hint = |replica: &str, state: &str, until: &str| {
        format!(
            r#"{{"v":1,"replica":"{replica}","run":"r","seq":1,"name":"model","state":"{state}","cause":"tripped","at_ms":0,"until_ms":{until}}}"#
        )
    };
    let until = (wall_ms() + 30_000).to_string();
    publish(&mut raw, &hints, &hint("p", "open", &until)).await;
    event(&mut events, BOUND, "p's hold", is_held).await;
    // A person resets it: p's report stays, its episode is over.
    member.model.handle().reset();
    // q reports closed, then, as a barrier, r reports on a breaker not shared here.
    publish(&mut raw, &hints, &hint("q", "closed", "null")).await;
    let barrier = hint("r", "closed", "null").replace(r#""model""#, r#""other""#);
    publish(&mut raw, &hints, &barrier).await;
    poll_until(BOUND, "both hints read", || {
        member.fleet.counts().hints == 3
    })
    .await;
    assert_eq!(member.model.handle().state(), State::Closed);
    assert_eq!(member.fleet.counts().holds, 1, "q's closing held it again");
    assert_eq!(call(&member.model, true).await, Got::Made);
    // A peer reporting open after the reset still holds it.
    publish(&mut raw, &hints, &hint("s", "open", &until)).await;
    event(&mut events, BOUND, "s's hold", is_held).await;
    assert_eq!(skipped(&member.model).await.0, Reason::Open);
}
#[tokio::test]
#[ignore = "open defect: a hint forged with a replica's run and seq u64::MAX silences that run; the fix (bounding a sequence jump, or signing hints) is a design decision"]
async fn a_forged_sequence_number_does_not_silence_a_replica() {
    let Some(redis) = Redis::get().await else {
        return;
    };
    let prefix = unique_prefix("forged-seq");
    let members = members(&redis.url, &prefix, 2).await;
    let mut events = members[1].fleet.events();
    let hints = format!("{prefix}:hints");
    let mut listener = Listener::new(&redis.url, &[&hints]).await;
    for _ in 0..3 {
        call(&members[0].model, false).await;
    }
    let heard = listener.until(|_| true).await;
    event(&mut events, BOUND, "a hold", is_held).await;
    // Anyone who can publish copies replica-0's run from the channel, with the last
    // sequence number there is.
    let mut forged: serde_json::Value = serde_json::from_str(&heard[0].1).unwrap();
    forged["seq"] = serde_json::json!(u64::MAX);
    let mut raw = by_hand(&redis.url).await;
    publish(&mut raw, &hints, &forged.to_string()).await;
    // replica-0 closes: its peers release their holds.
    members[0].model.handle().reset();
    let is_released = |e: &FleetEvent| matches!(e, FleetEvent::Released { .. });
    event(&mut events, BOUND, "the release", is_released).await;
    assert!(members[1].fleet.counts().missed < 1_000_000);
}
