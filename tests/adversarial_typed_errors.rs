//! Adversarial tests of typed errors (`with_typed_errors`, `CallError`) and of what a
//! `Rejected` tells (the breaker's name at any length, the permanent failure).
//!
//! Claims attacked: a typed breaker counts and behaves exactly as the default boxed one;
//! a rejection allocates nothing (but for one naming a permanent failure); `?` into a `BoxError` keeps the message and source;
//! `name()` and `permanent_failure()` are always exact, for any UTF-8 name.
//!
//! A counting global allocator (per thread) checks allocations; time is tokio's paused
//! clock; calls are driven by hand where the exact order matters.

mod common;
use common::counts::assert_counts_add_up;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tower::{service_fn, Layer, Service};
use tower_circuit_breaker::error::{BoxError, CallError, ConfigError, Rejected};
use tower_circuit_breaker::keyed::KeyedCircuitBreakerLayer;
use tower_circuit_breaker::{
    Answer, Builder, CircuitBreakerHandle, CircuitBreakerLayer, Cooldown, Failure, Outcome, State,
};

// ---------------------------------------------------------------------------------------
// A per-thread counting allocator.

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every method hands its arguments unchanged to `System`; the counting touches a
// `const`, destructor-free thread-local only.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: as the caller guarantees.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: as the caller guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as the caller guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: as the caller guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

// ---------------------------------------------------------------------------------------
// A service whose requests say what it does.

const OK: u64 = 0;
const FAIL: u64 = 1;
const PANIC: u64 = 2;
const HANG: u64 = 3;
const PERMANENT: u64 = 4;

type Fut = Pin<Box<dyn Future<Output = Result<u64, io::Error>> + Send>>;

fn scripted(request: u64) -> Fut {
    match request {
        FAIL => Box::pin(async { Err(io::Error::other("connection refused")) }),
        PANIC => Box::pin(async { panic!("the service panicked on purpose") }),
        HANG => Box::pin(std::future::pending()),
        PERMANENT => Box::pin(async { Err(io::Error::other("quota exhausted")) }),
        n => Box::pin(async move { Ok(n) }),
    }
}

fn classify(result: &Result<u64, io::Error>) -> Outcome {
    match result {
        Ok(_) => Outcome::Success,
        Err(e) if e.to_string() == "quota exhausted" => {
            Outcome::Failure(Failure::new("quota exhausted").permanent())
        }
        Err(_) => Outcome::failure(),
    }
}

/// One call's result, described the same way for both error types.
fn describe_rejected(r: &Rejected) -> String {
    format!(
        "rejected {:?} {:?} {:?} permanent={:?} name={} text={}",
        r.reason(),
        r.state(),
        r.next_probe(),
        r.permanent_failure(),
        r.name(),
        r
    )
}

trait Describe {
    fn describe(&self) -> String;
}

impl Describe for CallError {
    fn describe(&self) -> String {
        match self {
            CallError::Rejected(r) => describe_rejected(r),
            CallError::Service(e) => format!("service {e}"),
            other => format!("unknown {other}"),
        }
    }
}

impl Describe for BoxError {
    fn describe(&self) -> String {
        match self.downcast_ref::<Rejected>() {
            Some(r) => describe_rejected(r),
            None => format!("service {self}"),
        }
    }
}

fn describe<E: Describe>(result: &Result<Answer<u64>, E>) -> String {
    match result {
        Ok(answer) => format!("ok {:?} {:?}", answer.source(), answer.state()),
        Err(e) => e.describe(),
    }
}

/// Calls a service polled ready and polls the call once, describing what came of it: a
/// panic is caught; a call still pending is dropped (cancelled).
fn call_described<S, E>(svc: &mut S, cx: &mut Context<'_>, request: u64) -> String
where
    S: Service<u64, Response = Answer<u64>, Error = E>,
    E: Describe,
{
    let polled = catch_unwind(AssertUnwindSafe(|| {
        let mut future = pin!(svc.call(request));
        match future.as_mut().poll(cx) {
            Poll::Ready(result) => describe(&result),
            Poll::Pending => "pending, dropped".to_string(),
        }
    }));
    polled.unwrap_or_else(|_| "panicked".into())
}

/// Drives a call by hand: `poll_ready`, `call`, one poll. A panic is caught and described.
/// `HANG` leaves the future pending: it is dropped (the call is cancelled).
fn step<S, E>(svc: &mut S, request: u64) -> String
where
    S: Service<u64, Response = Answer<u64>, Error = E>,
    E: Describe,
{
    let mut cx = Context::from_waker(Waker::noop());
    match catch_unwind(AssertUnwindSafe(|| svc.poll_ready(&mut cx))) {
        Ok(Poll::Ready(Ok(()))) => {}
        Ok(Poll::Ready(Err(e))) => return format!("poll_ready {}", e.describe()),
        Ok(Poll::Pending) => return "poll_ready pending".into(),
        Err(_) => return "poll_ready panicked".into(),
    }
    call_described(svc, &mut cx, request)
}

fn settings(name: &str) -> Builder {
    Builder::new()
        .name(name)
        .failure_threshold(2)
        .cooldown(Cooldown::Time(Duration::from_secs(10)))
        .half_open_probes(2)
        .max_half_open_dwell(Some(Duration::from_secs(30)))
}

/// What a step does to both breakers.
#[derive(Debug, Clone, Copy)]
enum Act {
    Call(u64),
    /// `poll_ready` on a clone, which is then dropped (an abandoned reservation).
    Reserve,
    /// `poll_ready` now, the act, then `call` (the act lands between them).
    Between(u64, Person),
    Acts(Person),
    Advance(u64),
}

#[derive(Debug, Clone, Copy)]
enum Person {
    Kill,
    Revive,
    ForceOpen,
    OpenFor(u64),
    Reset,
    AllowProbe,
}

fn act(handle: &CircuitBreakerHandle, person: Person) {
    match person {
        Person::Kill => handle.kill_switch().kill(),
        Person::Revive => handle.kill_switch().revive(),
        Person::ForceOpen => handle.force_open(),
        Person::OpenFor(s) => handle.open_for(Duration::from_secs(s)),
        Person::Reset => handle.reset(),
        Person::AllowProbe => {
            handle.allow_probe();
        }
    }
}

fn between<S, E>(svc: &mut S, request: u64, handle: &CircuitBreakerHandle, person: Person) -> String
where
    S: Service<u64, Response = Answer<u64>, Error = E>,
    E: Describe,
{
    let mut cx = Context::from_waker(Waker::noop());
    match svc.poll_ready(&mut cx) {
        Poll::Ready(Ok(())) => {}
        _ => return "not ready".into(),
    }
    act(handle, person);
    call_described(svc, &mut cx, request)
}

/// The same script of calls, a person's acts between and around them, dropped futures,
/// abandoned reservations, panics, permanent failures and time, through a typed and a
/// boxed breaker: every answer, state and count the same after every step.
#[tokio::test(start_paused = true)]
async fn a_typed_breaker_answers_and_counts_exactly_as_the_boxed_one_step_by_step() {
    use self::Person::*;
    use Act::*;
    let script = [
        Call(OK),
        Call(FAIL),
        Call(OK),
        Call(FAIL),
        Call(PANIC),
        Call(OK),
        Call(OK),
        Call(OK),
        Advance(9),
        Call(OK),
        Advance(1),
        Reserve,
        Call(HANG),
        Call(OK),
        Call(OK),
        Acts(Kill),
        Call(OK),
        Between(OK, Revive),
        Between(OK, Kill),
        Acts(Revive),
        Between(OK, ForceOpen),
        Call(OK),
        Acts(Reset),
        Call(PERMANENT),
        Call(OK),
        Between(OK, Reset),
        Call(FAIL),
        Call(FAIL),
        Between(OK, AllowProbe),
        Call(OK),
        Acts(OpenFor(5)),
        Call(OK),
        Advance(5),
        Between(HANG, Kill),
        Acts(Revive),
        Call(HANG),
        Call(FAIL),
        Advance(10),
        Call(PANIC),
        Advance(10),
        Reserve,
        Reserve,
        Call(OK),
        Call(OK),
        Advance(10),
        Call(HANG),
        Advance(31),
        Call(OK),
        Advance(10),
        Call(OK),
        Call(OK),
    ];
    let typed_layer = settings("typed")
        .build()
        .expect("valid")
        .with_classifier(classify)
        .with_typed_errors();
    let boxed_layer = settings("boxed")
        .build()
        .expect("valid")
        .with_classifier(classify);
    let (typed_handle, boxed_handle) = (typed_layer.handle(), boxed_layer.handle());
    let mut typed = typed_layer.layer(service_fn(scripted));
    let mut boxed = boxed_layer.layer(service_fn(scripted));
    for (i, &a) in script.iter().enumerate() {
        let (t, b) = match a {
            Call(request) => (step(&mut typed, request), step(&mut boxed, request)),
            Reserve => {
                let mut cx = Context::from_waker(Waker::noop());
                let mut t = typed.clone();
                let mut b = boxed.clone();
                let tr = format!("{:?}", t.poll_ready(&mut cx).map(|r| r.is_ok()));
                let br = format!("{:?}", b.poll_ready(&mut cx).map(|r| r.is_ok()));
                (tr, br)
            }
            Between(request, person) => (
                between(&mut typed, request, &typed_handle, person),
                between(&mut boxed, request, &boxed_handle, person),
            ),
            Acts(person) => {
                act(&typed_handle, person);
                act(&boxed_handle, person);
                (String::new(), String::new())
            }
            Advance(s) => {
                tokio::time::advance(Duration::from_secs(s)).await;
                (String::new(), String::new())
            }
        };
        let what = format!("step {i} {a:?}");
        if std::env::var_os("REVIEW_TRACE").is_some() {
            eprintln!(
                "{what}: {t} | {:?} {:?}",
                typed_handle.state(),
                typed_handle.snapshot().counts
            );
        }
        assert_eq!(
            t.replace("typed", "NAME"),
            b.replace("boxed", "NAME"),
            "{what}"
        );
        let (ts, bs) = (typed_handle.snapshot(), boxed_handle.snapshot());
        assert_eq!(ts.state, bs.state, "{what}");
        assert_eq!(ts.counts, bs.counts, "{what}");
        assert_eq!(ts.probes_in_flight, bs.probes_in_flight, "{what}");
        assert_eq!(ts.next_probe, bs.next_probe, "{what}");
        assert_counts_add_up(&ts.counts);
    }
    let c = typed_handle.snapshot().counts;
    assert!(
        c.cancelled > 0 && c.abandoned > 0 && c.skipped_killed > 0 && c.probes > 0,
        "{c:?}"
    );
}

/// `?` boxes a `CallError` with the message and the whole source chain the default
/// boxed error has: three levels deep, and a rejection with none.
#[tokio::test(start_paused = true)]
async fn a_call_error_boxed_by_question_mark_keeps_the_whole_source_chain() {
    #[derive(Debug, thiserror::Error)]
    #[error("level one")]
    struct One(#[source] Two);
    #[derive(Debug, thiserror::Error)]
    #[error("level two")]
    struct Two(#[source] io::Error);

    fn chain(error: &(dyn std::error::Error + 'static)) -> Vec<String> {
        let mut out = vec![error.to_string()];
        let mut source = error.source();
        while let Some(s) = source {
            out.push(s.to_string());
            source = s.source();
        }
        out
    }
    async fn through<S, E>(svc: &mut S) -> Result<Answer<()>, BoxError>
    where
        S: Service<(), Response = Answer<()>, Error = E>,
        E: Into<BoxError>,
    {
        use tower::ServiceExt;
        svc.ready()
            .await
            .map_err(Into::into)?
            .call(())
            .await
            .map_err(Into::into)
    }
    let failing = || service_fn(|_: ()| async { Err::<(), _>(One(Two(io::Error::other("root")))) });
    let mut typed = Builder::new()
        .build()
        .expect("valid")
        .with_typed_errors()
        .layer(failing());
    let mut boxed = Builder::new().build().expect("valid").layer(failing());
    let (t, b) = (
        through(&mut typed).await.unwrap_err(),
        through(&mut boxed).await.unwrap_err(),
    );
    assert_eq!(chain(&*t), chain(&*b));
    assert_eq!(chain(&*t), ["level one", "level two", "root"]);

    let layer = Builder::new().build().expect("valid").with_typed_errors();
    layer.handle().force_open();
    let mut open = layer.layer(failing());
    let t = through(&mut open).await.unwrap_err();
    assert_eq!(chain(&*t).len(), 1, "a rejection has no source");
    assert!(t.to_string().contains("forced open"), "{t}");
}

// ---------------------------------------------------------------------------------------
// Names.

/// Names of every length around the 15 bytes copied, multi-byte characters straddling
/// byte 15, and bytes that a padding could be mistaken for.
fn names() -> Vec<String> {
    let mut names: Vec<String> = (1..=20).map(|n| "n".repeat(n)).collect();
    names.extend(
        [
            "circuit-breaker",  // 15, the default
            "circuit-breakers", // 16
            "abcdefghijklmné",  // 14 + 2 = 16: é straddles byte 15
            "abcdefghijklmé",   // 13 + 2 = 15
            "abcdefghijklmnoé", // 17
            "abcdefghijkl€",    // 12 + 3 = 15
            "abcdefghijklm€",   // 13 + 3 = 16
            "abcdefghijk🦀",    // 11 + 4 = 15
            "abcdefghijkl🦀",   // 12 + 4 = 16
            "\0",
            "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
            "\u{FFFF}",
            "\u{FFFF}\u{FFFF}\u{FFFF}\u{FFFF}\u{FFFF}", // 15 bytes of EF BF BF
            "\u{10FFFF}\u{10FFFF}\u{10FFFF}",           // 12 bytes F4 8F BF BF
            "\u{FEFF}x",
            "ÿÿÿÿÿÿÿ", // U+00FF: C3 BF, 14 bytes
            "a\u{7F}b",
            " ",
            "名前",
        ]
        .map(String::from),
    );
    names
}

/// Every name, through a real breaker and both error types: `name()` exact, the message
/// names it, no permanent failure; then held open by a permanent failure: the name and
/// the failure's message both exact.
#[test]
fn every_name_is_told_exactly_with_and_without_a_permanent_failure() {
    for name in names() {
        for permanent in [false, true] {
            let layer = Builder::new()
                .name(name.clone())
                .failure_threshold(1)
                .build()
                .expect("valid name")
                .with_classifier(classify);
            let handle = layer.handle();
            let mut typed = layer
                .clone()
                .with_typed_errors()
                .layer(service_fn(scripted));
            let mut boxed = layer.layer(service_fn(scripted));
            if permanent {
                let _ = step(&mut boxed, PERMANENT);
            } else {
                handle.force_open();
            }
            let mut cx = Context::from_waker(Waker::noop());
            assert!(typed.poll_ready(&mut cx).is_ready());
            let t = match pin!(typed.call(OK)).poll(&mut cx) {
                Poll::Ready(Err(CallError::Rejected(r))) => r,
                _ => panic!("{name:?}: rejected"),
            };
            assert!(boxed.poll_ready(&mut cx).is_ready());
            let b = match pin!(boxed.call(OK)).poll(&mut cx) {
                Poll::Ready(Err(e)) => *e.downcast::<Rejected>().expect("Rejected"),
                _ => panic!("{name:?}: rejected"),
            };
            for r in [&t, &b, &t.clone()] {
                assert_eq!(r.name(), name, "{name:?} ({} bytes)", name.len());
                assert!(
                    r.to_string().contains(&format!("`{name}`")),
                    "{name:?}: {r}"
                );
                let expected = permanent.then_some("quota exhausted");
                assert_eq!(r.permanent_failure(), expected, "{name:?}");
                assert!(
                    format!("{r:?}").contains(&format!("{name:?}")),
                    "{name:?}: {r:?}"
                );
            }
        }
    }
    assert_eq!(
        Builder::new().name("").build().map(|_| ()),
        Err(ConfigError::EmptyName)
    );
}

/// Keyed breakers' names (the registry's name and the key, its control characters
/// escaped) of the same lengths, with typed errors.
#[test]
fn keyed_breakers_names_are_told_exactly() {
    for key in names() {
        let layer = KeyedCircuitBreakerLayer::builder(
            Builder::new().name("k").failure_threshold(1),
            |request: &(String, u64)| request.0.clone(),
        )
        .name_keys_by_display()
        .build()
        .expect("valid")
        .with_classifier(|r: &Result<u64, io::Error>| classify(r))
        .with_typed_errors();
        let mut svc = layer.layer(service_fn(|(_, n): (String, u64)| scripted(n)));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(svc.poll_ready(&mut cx).is_ready());
        let _ = pin!(svc.call((key.clone(), FAIL))).poll(&mut cx);
        let expected = layer.handle().get(&key).expect("made").name().to_string();
        assert!(svc.poll_ready(&mut cx).is_ready());
        match pin!(svc.call((key.clone(), OK))).poll(&mut cx) {
            Poll::Ready(Err(CallError::Rejected(r))) => {
                assert_eq!(r.name(), expected, "{key:?}");
                // The key as names show it: its control characters escaped (a key from
                // the network must not break a log line).
                let shown: String = key
                    .chars()
                    .flat_map(|c| match c.is_control() {
                        true => c.escape_default().collect::<Vec<_>>(),
                        false => vec![c],
                    })
                    .collect();
                assert!(r.name().contains(shown.as_str()), "{key:?}: {}", r.name());
            }
            _ => panic!("{key:?}: rejected"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Allocation.

/// Rejections with typed errors, counted on this thread after a warm-up.
type TypedLayer = CircuitBreakerLayer<
    tower_circuit_breaker::fallback::TypedErrors,
    fn(&Result<u64, io::Error>) -> Outcome,
>;

fn typed_rejection_allocations(layer: TypedLayer) -> u64 {
    let mut svc = layer.layer(service_fn(scripted));
    let mut cx = Context::from_waker(Waker::noop());
    let mut reject = |svc: &mut _| {
        let svc: &mut tower_circuit_breaker::CircuitBreaker<_, _, _> = svc;
        assert!(svc.poll_ready(&mut cx).is_ready());
        match pin!(svc.call(OK)).poll(&mut cx) {
            Poll::Ready(Err(CallError::Rejected(r))) => std::hint::black_box(r.reason()),
            _ => panic!("rejected"),
        };
    };
    for _ in 0..100 {
        reject(&mut svc);
    }
    let start = allocations();
    for _ in 0..1_000 {
        reject(&mut svc);
    }
    allocations() - start
}

fn typed_layer(name: &str) -> (TypedLayer, CircuitBreakerHandle) {
    let layer = Builder::new()
        .name(name)
        .failure_threshold(1)
        .build()
        .expect("valid")
        .with_classifier(classify as fn(&Result<u64, io::Error>) -> Outcome)
        .with_typed_errors();
    let handle = layer.handle();
    (layer, handle)
}

/// Held: a name too long to copy is shared, and a rejection only touches its count.
#[test]
fn a_typed_rejection_of_a_breaker_with_a_long_name_allocates_nothing() {
    let (layer, handle) = typed_layer("a-breaker-whose-name-is-far-longer-than-fifteen-bytes");
    handle.force_open();
    assert_eq!(typed_rejection_allocations(layer), 0);
}

/// "A rejection allocates nothing, but for one that names a permanent failure"
/// (`CallError`'s docs): such a rejection allocates once, the label that carries the
/// breaker's name with the failure's message, which it shares rather than copies.
#[test]
fn a_typed_rejection_naming_a_permanent_failure_allocates_once_for_its_label() {
    let (layer, handle) = typed_layer("quota");
    let mut svc = layer.clone().layer(service_fn(scripted));
    let _ = step(&mut svc, PERMANENT);
    assert_eq!(handle.state(), State::Open);
    let allocations = typed_rejection_allocations(layer);
    assert_eq!(
        allocations, 1000,
        "{allocations} allocations in 1000 rejections"
    );
}

// ---------------------------------------------------------------------------------------
// The permanent failure told.

/// A call decided in `poll_ready` at a breaker held open by a permanent failure; before
/// its `call`, a person resets the breaker and an ordinary failure (not permanent,
/// cooldown ten seconds) opens it again. The rejection, decided under the permanent
/// failure, no longer knows it (it is not held by it any more), and must not name the
/// ordinary failure as a permanent one.
#[tokio::test(start_paused = true)]
async fn a_rejection_never_names_a_failure_that_did_not_hold_the_breaker_open_until_a_reset() {
    let layer = Builder::new()
        .name("quota")
        .failure_threshold(1)
        .cooldown(Cooldown::Time(Duration::from_secs(10)))
        .build()
        .expect("valid")
        .with_classifier(classify)
        .with_typed_errors();
    let handle = layer.handle();
    let mut svc = layer.layer(service_fn(scripted));
    let mut other = svc.clone();
    let _ = step(&mut svc, PERMANENT);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(svc.poll_ready(&mut cx).is_ready()); // decided: skipped, held by "quota exhausted"
    handle.reset();
    assert_eq!(step(&mut other, FAIL), "service connection refused");
    assert_eq!(handle.state(), State::Open);
    let rejected = match pin!(svc.call(OK)).poll(&mut cx) {
        Poll::Ready(Err(CallError::Rejected(r))) => r,
        _ => panic!("rejected"),
    };
    assert_eq!(rejected.permanent_failure(), None, "told: {rejected}");
    // Decided and called while the permanent failure holds: it is named.
    handle.reset();
    let _ = step(&mut other, PERMANENT);
    assert!(svc.poll_ready(&mut cx).is_ready());
    let rejected = match pin!(svc.call(OK)).poll(&mut cx) {
        Poll::Ready(Err(CallError::Rejected(r))) => r,
        _ => panic!("rejected"),
    };
    assert_eq!(rejected.permanent_failure(), Some("quota exhausted"));
}
