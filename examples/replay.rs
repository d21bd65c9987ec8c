//! Replays an outcome sequence through the real breaker layer, one call a step, to see
//! what a threshold and cooldown would have done.
//!
//! ```text
//! cargo run --example replay -- --threshold 3 --cooldown 4 --outcomes 11000111101100001111 --kill 9,10
//! ```
//!
//! `--outcomes` has one digit a step: 1 if the service would succeed, 0 if it would
//! fail. `--cooldown` counts calls. `--kill` (optional) lists the steps at which the
//! kill switch is on. Each line is `STEP STATE:ANSWER`: the state found when the call
//! arrived, and `model` (the service answered), `failed` (it was called and failed) or
//! `skipped` (it was not called). The last line counts the calls made. Bad input exits
//! with status 2 and a message.
//!
//! The work is done by [`tower_circuit_breaker::replay`]; this is its command line.

use std::process::ExitCode;

use tower_circuit_breaker::replay::{self, ReplayError, ReplayInput};

fn main() -> ExitCode {
    let input = match ReplayInput::from_args(std::env::args().skip(1)) {
        Ok(input) => input,
        // The breaker refused the settings: its own message says which and why.
        Err(error @ ReplayError::Config(_)) => {
            eprintln!("replay: {error}");
            return ExitCode::from(2);
        }
        Err(error) => {
            eprintln!("replay: {error}");
            eprintln!("usage: replay --threshold N --cooldown N --outcomes 0101... [--kill 9,10]");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime builds");
    match runtime.block_on(replay::run(&input)) {
        Ok(trace) => {
            print!("{trace}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("replay: {error}");
            ExitCode::from(2)
        }
    }
}
