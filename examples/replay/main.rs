//! Replays an outcome sequence through the real breaker layer, one call a step, to see
//! what a threshold and cooldown would have done.
//!
//! ```text
//! cargo run --example replay -- --threshold 3 --cooldown 4 --outcomes 11000111101100001111 --kill 9,10
//! cargo run --example replay -- --help
//! ```
//!
//! Each line is `STEP STATE:ANSWER`: the state found when the call arrived, and `model`
//! (the service answered), `failed` (it was called and failed) or `skipped` (it was not
//! called). The last line counts the calls made. `--help` prints the flags and exits 0;
//! a bad command line exits 2 with a message saying what to fix.
//!
//! The replay itself is [`tower_circuit_breaker::replay`]; this is its command line.

use std::process::ExitCode;

mod cli;

fn main() -> ExitCode {
    let input = match cli::parse(std::env::args_os().skip(1)) {
        Ok(cli::Command::Help) => {
            println!("{}", cli::USAGE);
            return ExitCode::SUCCESS;
        }
        Ok(cli::Command::Run(input)) => input,
        Err(error) => {
            eprintln!("replay: {error}");
            if error.shows_usage() {
                eprintln!("\n{}", cli::USAGE);
            }
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime builds");
    match runtime.block_on(tower_circuit_breaker::replay::run(&input)) {
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
