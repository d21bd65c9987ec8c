//! The breaker's decisions at a deadline, on the clock a production build has: this
//! member builds tokio without its `test-util` feature, so its clock cannot be paused and
//! the breaker may prove a deadline ahead from the coarse clock on every runtime,
//! current-thread ones included. The tests are those of the crate's `tests/real_clock.rs`,
//! which `cargo test` builds with `test-util`.

#[path = "../../tests/real_clock.rs"]
mod real_clock;

/// These tests mean what they say only if tokio here has no `test-util` (a build that
/// unified it in, as `cargo test --workspace` may, runs them on a clock that can be
/// paused).
#[test]
fn the_breakers_clock_here_cannot_be_paused() {
    assert!(
        !tower_circuit_breaker::clock::can_be_paused(),
        "tokio is built with test-util here (unified in from the crate's dev-dependencies, as \
         `cargo test --workspace` does): run `cargo test -p tower-circuit-breaker-benches`"
    );
}
