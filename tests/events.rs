//! Listeners see a breaker's transitions in the order the breaker made them, and may use
//! the breaker from inside an observer. Threads and channels make the interleavings
//! happen on purpose; nothing waits on the clock.

use std::future::{ready, Future, Ready};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::Duration;

use tower::{service_fn, Layer, Service};
use tower_circuit_breaker::error::BoxError;
use tower_circuit_breaker::{
    Answer, Builder, CircuitBreakerHandle, Cooldown, Event, Mode, State, Transition,
};

type Reply = Result<(), std::io::Error>;

fn failing() -> tower::util::ServiceFn<fn(()) -> Ready<Reply>> {
    service_fn(|()| ready(Err(std::io::Error::other("down"))))
}

/// One call, driven by hand: everything here is ready at once.
fn call<S>(svc: &mut S) -> Result<Answer<()>, BoxError>
where
    S: Service<(), Response = Answer<()>, Error = BoxError>,
{
    let mut cx = Context::from_waker(Waker::noop());
    assert!(svc.poll_ready(&mut cx).is_ready());
    match pin!(svc.call(())).poll(&mut cx) {
        Poll::Ready(result) => result,
        Poll::Pending => unreachable!("ready at once"),
    }
}

/// Runs `f` on a thread of its own and returns what it returns, failing if it has not
/// returned within 10 s (a deadlock: an observer waiting on itself).
fn without_deadlock<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done_tx, done_rx) = mpsc::channel();
    thread::spawn(move || done_tx.send(f()).unwrap());
    done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("no deadlock: an observer is never run inside itself")
}

fn summary(transitions: &[Transition]) -> Vec<(u64, State)> {
    transitions.iter().map(|t| (t.generation, t.to)).collect()
}

/// The task whose failure opens the breaker is held inside an observer, between the
/// outcome it reports and the transition it caused; meanwhile a person forces the
/// breaker open and resets it. Every listener still sees opened, forced open, closed, in
/// that order, and the person was not kept waiting by the held observer.
#[test]
fn transitions_reach_listeners_in_the_order_the_breaker_made_them() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (held_tx, held_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let go_rx = Mutex::new(go_rx);
    let held_once = AtomicBool::new(false);
    let layer = {
        let seen = seen.clone();
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1_000))
            .on_event(move |event| match event {
                Event::Recorded { outcome, .. }
                    if outcome.is_failure() && !held_once.swap(true, Ordering::SeqCst) =>
                {
                    held_tx.send(()).unwrap();
                    go_rx.lock().unwrap().recv().unwrap();
                }
                Event::Transition(t) => seen.lock().unwrap().push((*t).clone()),
                _ => {}
            })
            .build()
            .unwrap()
    };
    let handle = layer.handle();
    let mut subscriber = handle.subscribe();
    let mut svc = layer.layer(failing());

    let failing_call = thread::spawn(move || {
        let _ = call(&mut svc);
    });
    held_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the observer holds the failing call");
    // The breaker opened under the held call; a person acts, and is not kept waiting.
    assert_eq!(handle.state(), State::Open);
    let person = {
        let handle = handle.clone();
        thread::spawn(move || {
            handle.force_open();
            handle.reset();
        })
    };
    let (done_tx, done_rx) = mpsc::channel();
    thread::spawn(move || done_tx.send(person.join()).unwrap());
    done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("force_open and reset return while an observer is held")
        .unwrap();
    go_tx.send(()).unwrap();
    failing_call.join().unwrap();

    let want = vec![(1, State::Open), (2, State::ForcedOpen), (3, State::Closed)];
    assert_eq!(summary(&seen.lock().unwrap()), want, "the observer");
    let received: Vec<_> = std::iter::from_fn(|| subscriber.try_recv().ok()).collect();
    assert_eq!(summary(&received), want, "the subscriber");
}

/// An observer may read the breaker, and act on it, from inside: no deadlock, and its
/// own transition is delivered after the one it is handling.
#[test]
fn an_observer_that_acts_on_its_breaker_neither_deadlocks_nor_reorders() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handle_slot: Arc<Mutex<Option<CircuitBreakerHandle>>> = Arc::default();
    let layer = {
        let (seen, slot) = (seen.clone(), handle_slot.clone());
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1_000))
            .on_transition(move |t| {
                seen.lock().unwrap().push(t.clone());
                let handle = slot.lock().unwrap().clone().expect("set before any call");
                // Reads take the breaker's lock: observers never run under it.
                let snapshot = handle.snapshot();
                assert!(snapshot.generation >= t.generation);
                if t.to == State::Open {
                    // A person's rule: whatever opens is held open until a reset.
                    handle.force_open();
                }
            })
            .build()
            .unwrap()
    };
    *handle_slot.lock().unwrap() = Some(layer.handle());
    let mut svc = layer.layer(failing());
    without_deadlock(move || {
        let _ = call(&mut svc);
    });
    assert_eq!(
        summary(&seen.lock().unwrap()),
        vec![(1, State::Open), (2, State::ForcedOpen)]
    );
}

/// The events an observer with a lock of its own sees, as (kind, state) pairs.
fn kinds(events: &[String]) -> Vec<&str> {
    events.iter().map(String::as_str).collect()
}

/// An observer that holds a lock of its own across its body and acts on its breaker
/// when told of a skip (a person's rule: a call refused while open resets it). The skip
/// is reported at once by the skipped call, outside any delivery: the reset's transition
/// must still wait until the observer returns, never run it again inside itself (which,
/// with its lock held, deadlocks).
#[test]
fn an_observer_acting_on_a_skip_it_is_told_of_is_not_run_inside_itself() {
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let handle_slot: Arc<Mutex<Option<CircuitBreakerHandle>>> = Arc::default();
    let layer = {
        let (seen, slot) = (seen.clone(), handle_slot.clone());
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1_000))
            .on_event(move |event| {
                let mut seen = seen.lock().unwrap();
                match event {
                    Event::Skipped { .. } => {
                        seen.push("skipped".to_owned());
                        let handle = slot.lock().unwrap().clone().expect("set before any call");
                        handle.reset();
                    }
                    Event::Transition(t) => seen.push(format!("to {}", t.to)),
                    _ => {}
                }
            })
            .build()
            .unwrap()
    };
    *handle_slot.lock().unwrap() = Some(layer.handle());
    let mut svc = layer.layer(failing());
    let rejected = without_deadlock(move || {
        let _ = call(&mut svc); // fails: open
        call(&mut svc).is_err() // skipped: the observer resets
    });
    assert!(rejected, "the second call was skipped");
    assert_eq!(
        kinds(&seen.lock().unwrap()),
        vec!["to open", "skipped", "to closed"]
    );
}

/// An observer told of a transition calls the service, whose call is skipped (the
/// breaker just opened): the skip is reported after the observer returns, not inside it.
#[test]
fn an_observer_whose_own_call_is_skipped_is_told_after_it_returns() {
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    type Svc =
        tower_circuit_breaker::CircuitBreaker<tower::util::ServiceFn<fn(()) -> Ready<Reply>>>;
    let svc_slot: Arc<Mutex<Option<Svc>>> = Arc::default();
    let layer = {
        let (seen, slot) = (seen.clone(), svc_slot.clone());
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1_000))
            .on_event(move |event| {
                let mut seen = seen.lock().unwrap();
                match event {
                    Event::Skipped { .. } => seen.push("skipped".to_owned()),
                    Event::Transition(t) => {
                        seen.push(format!("to {}", t.to));
                        if t.to == State::Open {
                            let mut svc =
                                slot.lock().unwrap().clone().expect("set before any call");
                            assert!(call(&mut svc).is_err(), "skipped while open");
                        }
                    }
                    _ => {}
                }
            })
            .build()
            .unwrap()
    };
    let mut svc = layer.layer(failing());
    *svc_slot.lock().unwrap() = Some(svc.clone());
    without_deadlock(move || {
        let _ = call(&mut svc); // fails: open; the observer's own call is skipped
    });
    assert_eq!(kinds(&seen.lock().unwrap()), vec!["to open", "skipped"]);
}

/// Many threads trip, force open and reset one breaker at once: every listener sees the
/// generations in increasing order, and the last transition it sees is the state the
/// breaker is left in.
#[test]
fn racing_transitions_reach_every_listener_in_order() {
    let seen = Arc::new(Mutex::new(Vec::<u64>::new()));
    let layer = {
        let seen = seen.clone();
        Builder::new()
            .failure_threshold(1)
            .cooldown(Cooldown::Calls(1))
            .on_transition(move |t| seen.lock().unwrap().push(t.generation))
            .build()
            .unwrap()
    };
    let handle = layer.handle();
    let mut subscriber = handle.subscribe();
    let svc = layer.layer(service_fn(|fail: bool| {
        ready(if fail {
            Err(std::io::Error::other("down"))
        } else {
            Ok(())
        })
    }));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let (mut svc, handle) = (svc.clone(), handle.clone());
            thread::spawn(move || {
                let mut cx = Context::from_waker(Waker::noop());
                for j in 0..200u32 {
                    match (i + j) % 5 {
                        0 => handle.reset(),
                        1 => handle.force_open(),
                        _ => {
                            assert!(svc.poll_ready(&mut cx).is_ready());
                            let _ = pin!(svc.call(j % 3 == 0)).poll(&mut cx);
                        }
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let observed = seen.lock().unwrap().clone();
    assert!(observed.len() > 10, "{} transitions", observed.len());
    assert!(
        observed.windows(2).all(|w| w[0] < w[1]),
        "the observer saw generations out of order: {observed:?}"
    );
    // The channel keeps the last 64: a receiver that fell behind is told, then reads on.
    let mut received = Vec::new();
    loop {
        match subscriber.try_recv() {
            Ok(t) => received.push(t),
            Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => continue,
            Err(_) => break,
        }
    }
    let last = received.last().expect("transitions were sent");
    assert!(received
        .windows(2)
        .all(|w| w[0].generation < w[1].generation));
    assert_eq!(
        last.to,
        handle.state(),
        "the last transition is the state left"
    );
}

/// A change of mode reaches observers once, with the state it left as it was; setting the
/// mode a breaker already has is no change.
#[test]
fn observers_are_told_of_each_change_of_mode_once() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let layer = {
        let seen = seen.clone();
        Builder::new()
            .on_event(move |event| {
                if let Event::ModeChanged {
                    from, to, state, ..
                } = *event
                {
                    seen.lock().unwrap().push((from, to, state));
                }
            })
            .build()
            .unwrap()
    };
    let handle = layer.handle();
    let mut subscriber = handle.subscribe();
    handle.set_mode(Mode::ObserveOnly);
    handle.set_mode(Mode::ObserveOnly);
    handle.force_open();
    handle.set_mode(Mode::Enabled);
    assert_eq!(
        *seen.lock().unwrap(),
        [
            (Mode::Enabled, Mode::ObserveOnly, State::Closed),
            (Mode::ObserveOnly, Mode::Enabled, State::ForcedOpen),
        ]
    );
    // Subscribers hear of transitions only.
    assert_eq!(subscriber.try_recv().map(|t| t.to), Ok(State::ForcedOpen));
    assert!(subscriber.try_recv().is_err());
}
