//! The breaker's decisions at a deadline, on the clock a production build has: this
//! member builds tokio without its `test-util` feature, so its clock cannot be paused and
//! the breaker may prove a deadline ahead from the coarse clock on every runtime,
//! current-thread ones included. The tests are those of the crate's `tests/real_clock.rs`,
//! which `cargo test` builds with `test-util`.

#[path = "../../tests/real_clock.rs"]
mod real_clock;

/// Stands in for `tokio::time::pause`, which tokio has only with `test-util`.
#[allow(non_upper_case_globals, dead_code)]
const pause: NoPause = NoPause;

struct NoPause;

trait Function {
    const IS: bool;
}

impl Function for NoPause {
    const IS: bool = false;
}

impl<F: Fn()> Function for F {
    const IS: bool = true;
}

const fn is_a_function<T: Function>(_: &T) -> bool {
    T::IS
}

/// These tests mean what they say only if tokio here has no `test-util` (a build that
/// unified it in, as `cargo test --workspace` might, would run them on a clock that can
/// be paused): tokio has no `pause` here.
#[test]
fn tokio_here_is_built_without_test_util() {
    #[allow(unused_imports)]
    use tokio::time::*;
    assert!(
        !is_a_function(&pause),
        "tokio is built with test-util here (unified in from the crate's dev-dependencies, as \
         `cargo test --workspace` does): run `cargo test -p tower-circuit-breaker-benches`"
    );
}
