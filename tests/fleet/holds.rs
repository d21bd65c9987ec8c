//! Holds on peers' hints meet a person's acts. The breaker decides a hold under its own
//! lock, so a person's force-open wins whenever it is made: before the hint, after the
//! hold, or racing it.

use super::*;

/// A peer publishing breaker `model`'s hints by hand, on one connection (so what it
/// sends arrives in order).
struct Peer {
    conn: redis::aio::MultiplexedConnection,
    hints: String,
    kills: String,
    seq: u64,
}

impl Peer {
    async fn new(url: &str, prefix: &str) -> Peer {
        Peer {
            conn: by_hand(url).await,
            hints: format!("{prefix}:hints"),
            kills: format!("{prefix}:kills"),
            seq: 0,
        }
    }

    async fn hint(&mut self, state: &str, until_ms: Option<u64>) {
        self.seq += 1;
        let until = until_ms.map_or("null".to_string(), |ms| ms.to_string());
        let hint = format!(
            r#"{{"v":1,"replica":"peer","run":"r1","seq":{},"name":"model","state":"{state}","cause":"tripped","at_ms":{},"until_ms":{until}}}"#,
            self.seq,
            wall_ms()
        );
        publish(&mut self.conn, &self.hints, &hint).await;
    }

    /// The peer's breaker opened, until `wait` from now.
    async fn open_for(&mut self, wait: Duration) {
        self.hint("open", Some(wall_ms() + wait.as_millis() as u64))
            .await;
    }

    async fn closed(&mut self) {
        self.hint("closed", None).await;
    }

    /// Sends a message the replica refuses, and waits until it says so: it has then
    /// read and acted on everything sent before. Returns what it did meanwhile.
    async fn barrier(&mut self, events: &mut broadcast::Receiver<FleetEvent>) -> Vec<FleetEvent> {
        publish(&mut self.conn, &self.kills, "barrier").await;
        let mut seen = Vec::new();
        let wait = async {
            loop {
                match events.recv().await {
                    Ok(FleetEvent::Rejected { .. }) => return,
                    Ok(event) => seen.push(event),
                    Err(error) => panic!("events: {error}"),
                }
            }
        };
        tokio::time::timeout(BOUND, wait)
            .await
            .expect("the barrier within the bound");
        seen
    }
}

/// One replica sharing breaker `model` under `Follow`, and a peer sending its hints.
struct Scene {
    _redis: Redis,
    member: Member,
    events: broadcast::Receiver<FleetEvent>,
    peer: Peer,
}

impl Scene {
    /// `None`: no server to be had (the test is skipped).
    async fn new(test: &str) -> Option<Scene> {
        let redis = Redis::get().await?;
        let prefix = unique_prefix(test);
        let member = members(&redis.url, &prefix, 1).await.pop().unwrap();
        let events = member.fleet.events();
        let peer = Peer::new(&redis.url, &prefix).await;
        Some(Scene {
            _redis: redis,
            member,
            events,
            peer,
        })
    }

    /// What the replica did with what the peer sent: see [`Peer::barrier`].
    async fn barrier(&mut self) -> Vec<FleetEvent> {
        self.peer.barrier(&mut self.events).await
    }
}

fn held(events: &[FleetEvent]) -> bool {
    events
        .iter()
        .any(|e| matches!(e, FleetEvent::Held { .. } | FleetEvent::Released { .. }))
}

/// The breaker is the person's: forced open, until `until` (`None`: until a reset),
/// and its calls are skipped as forced open.
async fn persons(member: &Member, until: Option<Instant>) {
    let snapshot = member.model.handle().snapshot();
    assert_eq!(snapshot.state, State::ForcedOpen);
    match until {
        Some(until) => assert_eq!(snapshot.next_probe.at(), Some(until)),
        None => assert_eq!(snapshot.next_probe, NextProbe::Manual),
    }
    assert_eq!(skipped(&member.model).await.0, Reason::ForcedOpen);
}

#[tokio::test]
async fn a_hint_arriving_after_a_persons_force_open_leaves_it_alone() {
    let Some(mut scene) = Scene::new("person-first").await else {
        return;
    };
    let handle = scene.member.model.handle();

    // Forced open right before the hint arrives: the hint finds it forced.
    handle.force_open();
    scene.peer.open_for(Duration::from_secs(30)).await;
    assert!(!held(&scene.barrier().await));
    persons(&scene.member, None).await;

    // A person's short hold, shorter than the hint's: still the person's, to its end.
    handle.reset();
    handle.open_for(Duration::from_secs(5));
    let person_until = handle.snapshot().next_probe.at();
    scene.peer.open_for(Duration::from_secs(60)).await;
    assert!(!held(&scene.barrier().await));
    persons(&scene.member, person_until).await;
    assert_eq!(scene.member.fleet.counts().holds, 0);
}

#[tokio::test]
async fn a_person_forcing_a_held_breaker_open_keeps_it_through_later_hints() {
    let Some(mut scene) = Scene::new("person-after").await else {
        return;
    };
    let handle = scene.member.model.handle();

    scene.peer.open_for(Duration::from_secs(30)).await;
    assert!(held(&scene.barrier().await));
    assert_eq!(handle.state(), State::Open);

    // A person takes over: their act replaces the hold.
    handle.force_open();
    // A longer hint does not lengthen the hold it replaced...
    scene.peer.open_for(Duration::from_secs(60)).await;
    assert!(!held(&scene.barrier().await));
    persons(&scene.member, None).await;
    // ...and the peer closing releases nothing: the next call is not a probe.
    scene.peer.closed().await;
    assert!(!held(&scene.barrier().await));
    persons(&scene.member, None).await;
    let counts = scene.member.fleet.counts();
    assert_eq!((counts.holds, counts.releases), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_racing_a_hint_always_wins() {
    let Some(mut scene) = Scene::new("person-race").await else {
        return;
    };

    // The person acts a little later each round, so that the hint is applied before,
    // while or after they act; whichever comes first, the breaker is the person's.
    for round in 0..40u64 {
        let handle = scene.member.model.handle();
        handle.reset();
        let person = tokio::task::spawn_blocking(move || {
            let until = Instant::now() + Duration::from_micros(round * 20);
            while Instant::now() < until {
                std::hint::spin_loop();
            }
            handle.force_open();
        });
        scene.peer.open_for(Duration::from_secs(30)).await;
        person.await.unwrap();
        scene.barrier().await;
        persons(&scene.member, None).await;
    }
}

#[tokio::test]
async fn a_release_lets_the_next_call_probe_when_the_peers_close() {
    let Some(mut scene) = Scene::new("release").await else {
        return;
    };

    scene.peer.open_for(Duration::from_secs(30)).await;
    assert!(held(&scene.barrier().await));
    assert_eq!(skipped(&scene.member.model).await.0, Reason::Open);
    scene.peer.closed().await;
    let seen = scene.barrier().await;
    let member = &scene.member;
    assert!(seen
        .iter()
        .any(|e| matches!(e, FleetEvent::Released { .. })));
    assert_eq!(member.fleet.snapshot().breakers[0].held_until, None);
    // The next call is the probe; its success closes the breaker.
    assert_eq!(call(&member.model, true).await, Got::Made);
    let snapshot = member.model.handle().snapshot();
    assert_eq!((snapshot.state, snapshot.counts.probes), (State::Closed, 1));
    assert_eq!(member.fleet.counts().releases, 1);
}
