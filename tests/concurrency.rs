//! Many tasks on a multi-thread runtime share one breaker. Nothing here depends on
//! timing: cooldowns are counted in calls, there is no half-open dwell limit, and
//! interleavings come from `yield_now`, random drop points and kill flips.

mod common;
use common::counts::assert_counts_add_up;
use common::reply::Reply;

use common::{yields, Rng};
use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::task::{yield_now, JoinSet};
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
use tower_circuit_breaker::{
    Answer, Builder, Cause, CircuitBreakerHandle, Cooldown, Outcome, Reason, Source, State,
};

// ---------------------------------------------------------------------------------
// The wrapped service: counts its calls and its calls in flight.
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    Ok,
    Fail,
    Ignore,
    /// Succeeds while `Stats::ok_budget` lasts, then fails.
    Budget,
}

#[derive(Debug, Clone, Copy)]
struct Req {
    plan: Plan,
    /// How many times the service's future yields before it answers.
    yields: u32,
}

impl Req {
    fn new(plan: Plan, yields: u32) -> Self {
        Req { plan, yields }
    }
}

#[derive(Debug, Default)]
struct Stats {
    calls: AtomicU64,
    in_flight: AtomicI64,
    max_in_flight: AtomicI64,
    ok_budget: AtomicI64,
}

impl Stats {
    fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    fn in_flight(&self) -> i64 {
        self.in_flight.load(Ordering::SeqCst)
    }
}

/// Decrements the in-flight count when the service's future ends or is dropped.
struct InFlight(Arc<Stats>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn inner(
    stats: Arc<Stats>,
) -> impl Service<Req, Response = Reply, Error = Infallible, Future: Send + 'static>
       + Clone
       + Send
       + 'static {
    service_fn(move |req: Req| {
        // Counted when the breaker calls the service, not when the future is polled.
        stats.calls.fetch_add(1, Ordering::SeqCst);
        let now = stats.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        stats.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let guard = InFlight(stats.clone());
        let reply = match req.plan {
            Plan::Ok => Reply::Ok,
            Plan::Fail => Reply::Failed,
            Plan::Ignore => Reply::Ignored,
            Plan::Budget if stats.ok_budget.fetch_sub(1, Ordering::SeqCst) > 0 => Reply::Ok,
            Plan::Budget => Reply::Failed,
        };
        async move {
            for _ in 0..req.yields {
                yield_now().await;
            }
            drop(guard);
            Ok::<_, Infallible>(reply)
        }
    })
}

fn classify(result: &Result<Reply, Infallible>) -> Outcome {
    match result {
        Ok(Reply::Ok) => Outcome::Success,
        Ok(Reply::Ignored) => Outcome::Ignored,
        Ok(Reply::Failed | Reply::Fallback) => Outcome::failure_with("unhealthy"),
        Ok(other) => unreachable!("never scripted here: {other:?}"),
        Err(never) => match *never {},
    }
}

trait Breaker:
    Service<Req, Response = Answer<Reply>, Error = BoxError, Future: Send + 'static>
    + Clone
    + Send
    + 'static
{
}

impl<S> Breaker for S where
    S: Service<Req, Response = Answer<Reply>, Error = BoxError, Future: Send + 'static>
        + Clone
        + Send
        + 'static
{
}

/// One breaker around the counting service; every clone shares it.
fn breaker(builder: Builder, stats: &Arc<Stats>) -> (impl Breaker, CircuitBreakerHandle) {
    let layer = builder
        // Nothing may depend on time in these tests.
        .max_half_open_dwell(None)
        .build()
        .expect("valid settings");
    let handle = layer.handle();
    let layer = layer
        .with_fallback(service_fn(|_: Req| async {
            Ok::<_, Infallible>(Reply::Fallback)
        }))
        .with_classifier(classify);
    (layer.layer(inner(stats.clone())), handle)
}

async fn call<S: Breaker>(svc: &mut S, req: Req) -> Answer<Reply> {
    svc.ready()
        .await
        .expect("the breaker is always ready")
        .call(req)
        .await
        .expect("the service and the fallback never fail")
}

async fn join_all<T: 'static>(mut set: JoinSet<T>) -> Vec<T> {
    let mut out = Vec::new();
    while let Some(result) = set.join_next().await {
        out.push(result.expect("a task panicked"));
    }
    out
}

// ---------------------------------------------------------------------------------
// Never called while open; at most `half_open_probes` probes at once.
// ---------------------------------------------------------------------------------

const TASKS: u64 = 64;

/// Phase 1: 64 tasks call a service that succeeds 20 times and then fails for good,
/// until each sees the breaker open. Phase 2 (nothing from phase 1 in flight): 64
/// tasks hammer the open breaker. The service never recovers, so every call it gets in
/// phase 2 must be a probe, and no more than `probes` may run at once.
async fn only_probes_reach_the_service_once_open(probes: u32) {
    let stats = Arc::new(Stats::default());
    stats.ok_budget.store(20, Ordering::SeqCst);
    let trips = Arc::new(AtomicU64::new(0));
    let builder = Builder::new()
        .name("always-failing")
        .failure_threshold(3)
        .cooldown(Cooldown::Calls(8))
        .half_open_probes(probes)
        .on_transition({
            let trips = trips.clone();
            move |t| {
                if t.cause == Cause::Tripped {
                    trips.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
    let (svc, handle) = breaker(builder, &stats);

    // Phase 1: trip it under concurrency.
    let mut set = JoinSet::new();
    for task in 0..TASKS {
        let mut svc = svc.clone();
        set.spawn(async move {
            let mut rng = Rng::new(task);
            let mut answers = Vec::new();
            for _ in 0..50 {
                let answer = call(&mut svc, Req::new(Plan::Budget, rng.below(4) as u32)).await;
                let source = answer.source();
                answers.push((source, answer.state()));
                if source != Source::Service {
                    break;
                }
            }
            answers
        });
    }
    for (source, state) in join_all(set).await.into_iter().flatten() {
        if source == Source::Service {
            assert_eq!(state, State::Closed, "a normal call admitted in {state}");
        }
    }
    assert_eq!(
        trips.load(Ordering::SeqCst),
        1,
        "it trips once, and never closes"
    );
    assert_eq!(stats.in_flight(), 0);
    let before = handle.snapshot();
    assert_eq!(before.state, State::Open);
    assert_eq!(before.probes_in_flight, 0);
    assert_eq!(stats.calls(), before.counts.made);
    assert_counts_add_up(&before.counts);

    // Phase 2: only probes reach the service.
    let calls_before = stats.calls();
    stats.max_in_flight.store(0, Ordering::SeqCst);
    let mut set = JoinSet::new();
    for task in 0..TASKS {
        let mut svc = svc.clone();
        set.spawn(async move {
            let mut rng = Rng::new(1_000 + task);
            let (mut probes, mut others) = (0u64, Vec::new());
            for _ in 0..100 {
                let answer = call(&mut svc, Req::new(Plan::Budget, rng.below(8) as u32)).await;
                match answer.source() {
                    Source::Probe => probes += 1,
                    Source::Fallback(Reason::Open | Reason::HalfOpenFull) => {}
                    other => others.push(other),
                }
                if rng.chance(30) {
                    yield_now().await;
                }
            }
            (probes, others)
        });
    }
    let results = join_all(set).await;
    let probe_answers: u64 = results.iter().map(|(p, _)| p).sum();
    let others: Vec<Source> = results.into_iter().flat_map(|(_, o)| o).collect();
    assert!(
        others.is_empty(),
        "answers from an open breaker: {others:?}"
    );

    let after = handle.snapshot();
    let inner_calls = stats.calls() - calls_before;
    assert!(probe_answers > 0, "no probe was ever sent");
    assert_eq!(
        inner_calls, probe_answers,
        "every call of the service was a probe"
    );
    assert_eq!(after.counts.probes - before.counts.probes, inner_calls);
    assert_eq!(after.counts.made - before.counts.made, inner_calls);
    assert_eq!(after.probes_in_flight, 0);
    assert_eq!(stats.in_flight(), 0);
    assert_counts_add_up(&after.counts);
    let max = stats.max_in_flight.load(Ordering::SeqCst);
    assert!(
        max <= i64::from(probes),
        "{max} calls ran at once in an open breaker allowing {probes} probes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_one_probe_at_a_time_reaches_the_service_once_open() {
    only_probes_reach_the_service_once_open(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_three_probes_at_a_time_reach_the_service_once_open() {
    only_probes_reach_the_service_once_open(3).await;
}

/// The deterministic case behind the bound: probes of an earlier half-open phase that
/// are still running when a later phase admits its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_still_running_from_an_earlier_half_open_count_against_the_limit() {
    use tokio::sync::oneshot;

    let running = Arc::new(AtomicI64::new(0));
    let max_running = Arc::new(AtomicI64::new(0));
    let service = {
        let (running, max_running) = (running.clone(), max_running.clone());
        service_fn(move |done: oneshot::Receiver<bool>| {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            max_running.fetch_max(now, Ordering::SeqCst);
            let running = running.clone();
            async move {
                let ok = done.await.unwrap_or(false);
                running.fetch_sub(1, Ordering::SeqCst);
                if ok {
                    Ok(())
                } else {
                    Err(std::io::Error::other("down"))
                }
            }
        })
    };
    let layer = Builder::new()
        .failure_threshold(1)
        .cooldown(Cooldown::Calls(1))
        .half_open_probes(2)
        .max_half_open_dwell(None)
        .build()
        .unwrap();
    let handle = layer.handle();
    let mut svc = layer.layer(service);

    // Trip it.
    let (tx, rx) = oneshot::channel();
    tx.send(false).unwrap();
    assert!(svc.ready().await.unwrap().call(rx).await.is_err());
    assert_eq!(handle.state(), State::Open);

    // Two probes, A and B, go out.
    let (a_tx, a_rx) = oneshot::channel();
    let a = tokio::spawn(svc.ready().await.unwrap().call(a_rx));
    let (b_tx, b_rx) = oneshot::channel();
    let b = tokio::spawn(svc.ready().await.unwrap().call(b_rx));
    assert_eq!(handle.snapshot().probes_in_flight, 2);

    // A fails: the breaker re-opens while B is still running.
    a_tx.send(false).unwrap();
    assert!(a.await.unwrap().is_err());
    assert_eq!(handle.state(), State::Open);
    assert_eq!(running.load(Ordering::SeqCst), 1, "B is still running");

    // The cooldown (one call) passes and half-open admits two new probes, C and D.
    let mut pending = Vec::new();
    for _ in 0..2 {
        let (tx, rx) = oneshot::channel();
        let ready = svc.ready().await.unwrap();
        pending.push((tx, tokio::spawn(ready.call(rx))));
    }
    let running_now = running.load(Ordering::SeqCst);
    for (tx, task) in pending {
        let _ = tx.send(true);
        let _ = task.await.unwrap();
    }
    let _ = b_tx.send(true);
    let _ = b.await.unwrap();
    assert!(
        running_now <= 2 && max_running.load(Ordering::SeqCst) <= 2,
        "{running_now} probes ran at once with half_open_probes(2)"
    );
}

// ---------------------------------------------------------------------------------
// Never called while killed.
// ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_is_never_called_while_killed_and_calls_flow_again_after_revive() {
    let stats = Arc::new(Stats::default());
    let (svc, handle) = breaker(Builder::new().name("killable"), &stats);
    let kill = handle.kill_switch().clone();
    let stop = Arc::new(AtomicBool::new(false));

    // Background callers that keep going through the whole test.
    const LOOPERS: usize = 16;
    let laps: Arc<Vec<AtomicU64>> = Arc::new((0..LOOPERS).map(|_| AtomicU64::new(0)).collect());
    let mut loopers = JoinSet::new();
    for i in 0..LOOPERS {
        let (mut svc, stop, laps) = (svc.clone(), stop.clone(), laps.clone());
        loopers.spawn(async move {
            let mut rng = Rng::new(i as u64);
            while !stop.load(Ordering::SeqCst) {
                // Reserve, maybe let the kill switch flip, then call.
                let ready = svc.ready().await.unwrap();
                if rng.chance(50) {
                    yield_now().await;
                }
                let _ = ready.call(Req::new(Plan::Ok, rng.below(4) as u32)).await;
                laps[i].fetch_add(1, Ordering::SeqCst);
            }
        });
    }
    while stats.calls() < 500 {
        yield_now().await;
    }
    // Services that reserved a call before the kill and call after it.
    let mut reserved = Vec::new();
    for _ in 0..TASKS {
        let mut svc = svc.clone();
        svc.ready().await.unwrap();
        reserved.push(svc);
    }

    kill.kill();
    // Wait until every looper has finished two laps begun after the kill: whatever it
    // had in flight then has ended.
    let at_kill: Vec<u64> = laps.iter().map(|l| l.load(Ordering::SeqCst)).collect();
    while laps
        .iter()
        .zip(&at_kill)
        .any(|(l, at)| l.load(Ordering::SeqCst) < at + 2)
    {
        yield_now().await;
    }
    assert_eq!(stats.in_flight(), 0, "calls in flight while killed");
    let baseline = stats.calls();

    // Many concurrent calls while killed (the loopers still run too), half of them
    // reserved before the kill.
    let mut set = JoinSet::new();
    for mut svc in reserved {
        set.spawn(async move {
            let answer = svc.call(Req::new(Plan::Ok, 1)).await.unwrap();
            vec![answer.source()]
        });
    }
    for task in 0..TASKS {
        let mut svc = svc.clone();
        set.spawn(async move {
            let mut rng = Rng::new(100 + task);
            let mut sources = Vec::new();
            for _ in 0..50 {
                let answer = call(&mut svc, Req::new(Plan::Ok, 1)).await;
                sources.push(answer.source());
                if rng.chance(30) {
                    yield_now().await;
                }
            }
            sources
        });
    }
    let sources = join_all(set).await;
    // Let the loopers run some more laps while still killed.
    let now: Vec<u64> = laps.iter().map(|l| l.load(Ordering::SeqCst)).collect();
    while laps
        .iter()
        .zip(&now)
        .any(|(l, at)| l.load(Ordering::SeqCst) < at + 3)
    {
        yield_now().await;
    }
    assert_eq!(
        stats.calls(),
        baseline,
        "the service was called while killed"
    );
    assert_eq!(stats.in_flight(), 0);
    for source in sources.into_iter().flatten() {
        assert_eq!(source, Source::Fallback(Reason::Killed));
    }
    let snapshot = handle.snapshot();
    assert!(snapshot.killed);
    assert!(snapshot.counts.skipped_killed >= TASKS * 51);
    assert_eq!(
        snapshot.state,
        State::Closed,
        "the kill switch does not trip it"
    );

    // Revive: calls reach the service again.
    kill.revive();
    let mut svc2 = svc.clone();
    let answer = call(&mut svc2, Req::new(Plan::Ok, 0)).await;
    assert_eq!(answer.source(), Source::Service);
    while stats.calls() < baseline + 200 {
        yield_now().await;
    }
    stop.store(true, Ordering::SeqCst);
    join_all(loopers).await;
    assert_eq!(stats.in_flight(), 0);
    let snapshot = handle.snapshot();
    assert_eq!(stats.calls(), snapshot.counts.made);
    assert_counts_add_up(&snapshot.counts);
}

// ---------------------------------------------------------------------------------
// Dropped probes never leave the breaker stuck.
// ---------------------------------------------------------------------------------

/// Runs `future` but gives up (dropping it) at a random point.
async fn maybe_drop<F: Future>(rng: &mut Rng, future: F) -> Option<F::Output> {
    match rng.below(3) {
        0 => {
            let give_up = rng.below(6);
            tokio::select! {
                out = future => Some(out),
                _ = yields(give_up) => None,
            }
        }
        1 => {
            // One poll, then dropped unless it was already done.
            let future = std::pin::pin!(future);
            match futures::future::select(future, std::future::ready(())).await {
                futures::future::Either::Left((out, _)) => Some(out),
                futures::future::Either::Right(((), _dropped)) => None,
            }
        }
        _ => Some(future.await),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_probes_never_leave_the_breaker_stuck() {
    let stats = Arc::new(Stats::default());
    let (svc, handle) = breaker(
        Builder::new()
            .name("flaky")
            .failure_threshold(2)
            .cooldown(Cooldown::Calls(4))
            .half_open_probes(2),
        &stats,
    );

    let mut set = JoinSet::new();
    for task in 0..TASKS {
        let mut svc = svc.clone();
        set.spawn(async move {
            let mut rng = Rng::new(5_000 + task);
            for _ in 0..100 {
                // Mostly failing, so the breaker keeps opening and probing.
                let plan = if rng.chance(25) { Plan::Ok } else { Plan::Fail };
                let req = Req::new(plan, rng.below(6) as u32);
                match rng.below(10) {
                    // Reserve a call (maybe a probe slot), then drop the service.
                    0 => {
                        let mut reserved = svc.clone();
                        let _ = reserved.ready().await.unwrap();
                        if rng.chance(50) {
                            yield_now().await;
                        }
                        drop(reserved);
                    }
                    // A spawned call, aborted at a random point.
                    1 => {
                        let future = svc.ready().await.unwrap().call(req);
                        let spawned = tokio::spawn(future);
                        yields(rng.below(4)).await;
                        spawned.abort();
                        let _ = spawned.await;
                    }
                    _ => {
                        let future = svc.ready().await.unwrap().call(req);
                        let _ = maybe_drop(&mut rng, future).await;
                    }
                }
            }
        });
    }
    join_all(set).await;

    assert_eq!(stats.in_flight(), 0);
    let snapshot = handle.snapshot();
    assert_eq!(
        snapshot.probes_in_flight, 0,
        "nothing is in flight, yet a probe slot is taken: {snapshot:?}"
    );
    assert!(
        snapshot.counts.cancelled > 0,
        "no call was cancelled: {snapshot:?}"
    );
    assert!(
        snapshot.counts.abandoned > 0,
        "no call was abandoned: {snapshot:?}"
    );
    assert!(
        snapshot.counts.probes > 0,
        "no probe was sent: {snapshot:?}"
    );
    assert_counts_add_up(&snapshot.counts);
    assert_eq!(stats.calls(), snapshot.counts.made);

    // The service is healthy again: successful probes close the breaker within a
    // cooldown and two probes.
    let mut svc = svc.clone();
    let mut answers = Vec::new();
    for _ in 0..16 {
        if handle.state() == State::Closed {
            break;
        }
        answers.push(call(&mut svc, Req::new(Plan::Ok, 0)).await.source());
    }
    assert_eq!(handle.state(), State::Closed, "stuck: {answers:?}");
    assert_eq!(
        call(&mut svc, Req::new(Plan::Ok, 0)).await.source(),
        Source::Service
    );
}

// ---------------------------------------------------------------------------------
// Counters add up.
// ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_add_up_across_random_outcomes_drops_and_kill_flips() {
    let stats = Arc::new(Stats::default());
    let (svc, handle) = breaker(
        Builder::new()
            .name("busy")
            .failure_threshold(3)
            .cooldown(Cooldown::Calls(5))
            .half_open_probes(2),
        &stats,
    );
    let kill = handle.kill_switch().clone();
    let sources: Arc<Mutex<std::collections::HashMap<&'static str, u64>>> = Arc::default();

    let mut set = JoinSet::new();
    for task in 0..TASKS {
        let (mut svc, kill, sources) = (svc.clone(), kill.clone(), sources.clone());
        set.spawn(async move {
            let mut rng = Rng::new(9_000 + task);
            for _ in 0..200 {
                if rng.chance(2) {
                    if rng.chance(50) {
                        kill.kill();
                    } else {
                        kill.revive();
                    }
                }
                let plan = match rng.below(10) {
                    0..=5 => Plan::Ok,
                    6..=8 => Plan::Fail,
                    _ => Plan::Ignore,
                };
                let req = Req::new(plan, rng.below(3) as u32);
                match rng.below(20) {
                    0 => {
                        // Abandoned: reserved, never called.
                        let mut reserved = svc.clone();
                        let _ = reserved.ready().await.unwrap();
                        drop(reserved);
                    }
                    1..=3 => {
                        let future = svc.ready().await.unwrap().call(req);
                        if let Some(answer) = maybe_drop(&mut rng, future).await {
                            let answer = answer.unwrap();
                            *sources
                                .lock()
                                .unwrap()
                                .entry(answer.source().as_str())
                                .or_default() += 1;
                        }
                    }
                    _ => {
                        // Reserve, maybe let others flip the switch or the state, call.
                        let ready = svc.ready().await.unwrap();
                        if rng.chance(25) {
                            yield_now().await;
                        }
                        let answer = ready.call(req).await.unwrap();
                        *sources
                            .lock()
                            .unwrap()
                            .entry(answer.source().as_str())
                            .or_default() += 1;
                    }
                }
            }
        });
    }
    join_all(set).await;
    kill.revive();

    assert_eq!(stats.in_flight(), 0);
    let snapshot = handle.snapshot();
    let counts = snapshot.counts;
    assert_counts_add_up(&counts);
    assert_eq!(
        stats.calls(),
        counts.made,
        "made counts every call of the service"
    );
    assert_eq!(snapshot.probes_in_flight, 0);
    assert!(counts.arrived >= TASKS * 200, "{counts:?}");
    // Every kind of ending happened, so each term of the sums was exercised.
    assert!(counts.successes > 0 && counts.failures > 0 && counts.ignored > 0);
    assert!(counts.cancelled > 0 && counts.abandoned > 0, "{counts:?}");
    assert!(counts.skipped_killed > 0, "{counts:?}");
    assert!(
        counts.skipped_open + counts.skipped_half_open_full > 0,
        "{counts:?}"
    );
    let sources = sources.lock().unwrap();
    assert!(
        sources.get("service").copied().unwrap_or(0) > 0,
        "{sources:?}"
    );
    assert!(
        sources.get("fallback").copied().unwrap_or(0) > 0,
        "{sources:?}"
    );
}
