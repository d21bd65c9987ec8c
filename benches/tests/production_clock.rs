//! The breaker's decisions at a deadline, on the clock a production build has: this
//! member builds tokio without its `test-util` feature, so its clock cannot be paused and
//! the breaker may prove a deadline ahead from the coarse clock on every runtime,
//! current-thread ones included. The tests are those of the crate's `tests/real_clock.rs`,
//! which `cargo test` builds with `test-util`.

#[path = "../../tests/real_clock.rs"]
mod real_clock;
