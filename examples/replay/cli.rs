//! The replay's command line: flags in, a checked [`ReplayInput`] (or a request for help)
//! out, every mistake a typed error that says what to fix.

use std::ffi::OsString;
use std::fmt;

use tower_circuit_breaker::replay::{ReplayError, ReplayInput};

/// The consecutive-failure threshold when none is given.
pub const DEFAULT_THRESHOLD: u32 = 3;
/// The cooldown, in calls, when none is given.
pub const DEFAULT_COOLDOWN: u64 = 4;

pub const USAGE: &str = "\
usage: replay --outcomes BITS [--threshold N] [--cooldown N] [--kill STEPS]

Replays one call a step through a real circuit breaker and prints what each got:
`STEP STATE:ANSWER` (the state the call found; model, failed or skipped), then the
calls made.

  --outcomes BITS  one digit a step: 1 the service succeeds, 0 it fails (required)
  --threshold N    consecutive failures that open the breaker (default 3)
  --cooldown N     calls an open breaker waits before its probe (default 4)
  --kill STEPS     steps at which the kill switch is on, comma-separated, from 1
                   (may be given more than once)
  -h, --help       print this help

A flag's value may follow it (--threshold 3) or be joined to it (--threshold=3).";

/// What the command line asks for.
#[derive(Debug, PartialEq)]
pub enum Command {
    Help,
    Run(ReplayInput),
}

/// What is wrong with a command line.
#[derive(Debug, Clone, PartialEq)]
pub enum CliError {
    /// An argument is not valid UTF-8.
    NotUtf8(String),
    /// A flag needs a value and has none.
    MissingValue(&'static str),
    /// A flag that takes one value was given twice.
    Repeated(&'static str),
    /// A flag the replay does not know.
    UnknownFlag(String),
    /// An argument that is not a flag.
    Unexpected(String),
    /// A number is not one.
    NotANumber { flag: &'static str, value: String },
    /// A `--kill` item is not a step number.
    BadKillStep(String),
    /// No `--outcomes`.
    MissingOutcomes,
    /// The flags parse, but the input is not one a replay can run.
    Input(ReplayError),
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::NotUtf8(arg) => write!(f, "argument is not valid UTF-8: {arg}"),
            CliError::MissingValue(flag) => write!(f, "{flag} needs a value"),
            CliError::Repeated(flag) => write!(f, "{flag} is given more than once"),
            CliError::UnknownFlag(flag) => write!(f, "unknown flag {flag}"),
            CliError::Unexpected(arg) => write!(f, "unexpected argument {arg:?}"),
            CliError::NotANumber { flag, value } => write!(f, "{flag}: not a number: {value:?}"),
            CliError::BadKillStep(item) => write!(f, "--kill: not a step number: {item:?}"),
            CliError::MissingOutcomes => {
                f.write_str("--outcomes is required, for example --outcomes 11000111101100001111")
            }
            CliError::Input(error) => error.fmt(f),
        }
    }
}

impl CliError {
    /// Whether the usage helps: a mistake in the flags, not in the values' meaning.
    pub fn shows_usage(&self) -> bool {
        !matches!(self, CliError::Input(_) | CliError::NotANumber { .. })
    }
}

/// Parses the arguments after the program's name.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, CliError> {
    let mut args = args.into_iter();
    let (mut threshold, mut cooldown, mut outcomes) = (None, None, None);
    let mut kill = Vec::new();
    while let Some(arg) = args.next() {
        let arg = utf8(arg)?;
        if arg == "-h" || arg == "--help" {
            return Ok(Command::Help);
        }
        let Some(flag) = arg.strip_prefix("--") else {
            return Err(CliError::Unexpected(arg));
        };
        let (name, joined) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (flag, None),
        };
        let flag: &'static str = match name {
            "threshold" => "--threshold",
            "cooldown" => "--cooldown",
            "outcomes" => "--outcomes",
            "kill" => "--kill",
            _ => return Err(CliError::UnknownFlag(format!("--{name}"))),
        };
        let value = match joined {
            Some(value) => value,
            None => match args.next() {
                Some(value) => utf8(value)?,
                None => return Err(CliError::MissingValue(flag)),
            },
        };
        match flag {
            "--threshold" => once(&mut threshold, flag, number(flag, &value)?)?,
            "--cooldown" => once(&mut cooldown, flag, number(flag, &value)?)?,
            "--outcomes" => once(&mut outcomes, flag, value)?,
            _ => {
                for item in value.split(',').filter(|s| !s.trim().is_empty()) {
                    let step = item.trim().parse();
                    kill.push(step.map_err(|_| CliError::BadKillStep(item.to_string()))?);
                }
            }
        }
    }
    let outcomes = outcomes.ok_or(CliError::MissingOutcomes)?;
    ReplayInput::new(
        threshold.unwrap_or(DEFAULT_THRESHOLD),
        cooldown.unwrap_or(DEFAULT_COOLDOWN),
        &outcomes,
        kill,
    )
    .map(Command::Run)
    .map_err(CliError::Input)
}

fn utf8(arg: OsString) -> Result<String, CliError> {
    arg.into_string()
        .map_err(|arg| CliError::NotUtf8(arg.to_string_lossy().into_owned()))
}

fn once<T>(slot: &mut Option<T>, flag: &'static str, value: T) -> Result<(), CliError> {
    match slot {
        Some(_) => Err(CliError::Repeated(flag)),
        None => {
            *slot = Some(value);
            Ok(())
        }
    }
}

fn number<T: std::str::FromStr>(flag: &'static str, value: &str) -> Result<T, CliError> {
    value.parse().map_err(|_| CliError::NotANumber {
        flag,
        value: value.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use std::panic::{catch_unwind, AssertUnwindSafe};

    use proptest::prelude::*;

    use super::*;

    fn parsed(args: &[&str]) -> Result<Command, CliError> {
        parse(args.iter().map(OsString::from))
    }

    fn run(threshold: u32, cooldown: u64, outcomes: &str, kill: &[usize]) -> Command {
        Command::Run(ReplayInput::new(threshold, cooldown, outcomes, kill.iter().copied()).unwrap())
    }

    #[test]
    fn help_is_asked_for_with_either_spelling_anywhere() {
        assert_eq!(parsed(&["--help"]), Ok(Command::Help));
        assert_eq!(parsed(&["-h"]), Ok(Command::Help));
        assert_eq!(parsed(&["--outcomes", "1", "-h"]), Ok(Command::Help));
    }

    #[test]
    fn values_may_follow_their_flag_or_be_joined_to_it() {
        let want = run(2, 5, "1101", &[2, 3]);
        assert_eq!(
            parsed(&[
                "--threshold",
                "2",
                "--cooldown=5",
                "--outcomes=1101",
                "--kill",
                "2",
                "--kill=3"
            ]),
            Ok(want)
        );
        assert_eq!(parsed(&["--outcomes", "10"]), Ok(run(3, 4, "10", &[])));
    }

    #[test]
    fn mistakes_in_the_flags_say_what_to_fix() {
        assert_eq!(
            parsed(&["extra"]),
            Err(CliError::Unexpected("extra".into()))
        );
        assert_eq!(
            parsed(&["--verbose", "--outcomes", "1"]),
            Err(CliError::UnknownFlag("--verbose".into()))
        );
        assert_eq!(
            parsed(&["--threshold"]),
            Err(CliError::MissingValue("--threshold"))
        );
        assert_eq!(
            parsed(&["--threshold", "2", "--threshold=3", "--outcomes", "1"]),
            Err(CliError::Repeated("--threshold"))
        );
        assert_eq!(
            parsed(&["--threshold=", "--outcomes", "1"]),
            Err(CliError::NotANumber {
                flag: "--threshold",
                value: String::new()
            })
        );
        assert_eq!(parsed(&["--kill", "9"]), Err(CliError::MissingOutcomes));
        assert_eq!(
            parsed(&["--outcomes", "10x"]),
            Err(CliError::Input(ReplayError::BadOutcome {
                step: 3,
                found: 'x'
            }))
        );
        assert!(CliError::Unexpected("extra".into()).shows_usage());
    }

    #[cfg(unix)]
    #[test]
    fn an_argument_that_is_not_utf8_is_an_error_not_a_panic() {
        use std::os::unix::ffi::OsStringExt;
        let bad = OsString::from_vec(vec![b'-', b'-', 0xff]);
        assert!(matches!(parse([bad]), Err(CliError::NotUtf8(_))));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn a_clean_command_line_parses_as_given_in_any_order(
            threshold in proptest::option::of(1u32..6),
            cooldown in proptest::option::of(1u64..8),
            outcomes in "[01]{1,40}",
            kill in proptest::collection::vec(1usize..40, 0..4),
            joined in any::<bool>(),
            order in any::<u64>(),
        ) {
            let mut pairs: Vec<(&str, String)> = vec![("--outcomes", outcomes.clone())];
            if let Some(t) = threshold { pairs.push(("--threshold", t.to_string())); }
            if let Some(c) = cooldown { pairs.push(("--cooldown", c.to_string())); }
            let kill: Vec<usize> = kill.into_iter().filter(|&k| k <= outcomes.len()).collect();
            if !kill.is_empty() {
                let items: Vec<String> = kill.iter().map(|k| k.to_string()).collect();
                pairs.push(("--kill", items.join(",")));
            }
            let n = pairs.len() as u64;
            pairs.rotate_left((order % n) as usize);
            let args: Vec<OsString> = pairs
                .into_iter()
                .flat_map(|(flag, value)| {
                    if joined { vec![format!("{flag}={value}")] } else { vec![flag.to_string(), value] }
                })
                .map(OsString::from)
                .collect();
            let want = ReplayInput::new(
                threshold.unwrap_or(DEFAULT_THRESHOLD),
                cooldown.unwrap_or(DEFAULT_COOLDOWN),
                &outcomes,
                kill,
            )
            .map(Command::Run)
            .map_err(CliError::Input);
            prop_assert_eq!(parse(args), want);
        }

        #[test]
        fn any_command_line_at_all_parses_or_returns_an_error_without_panicking(
            args in proptest::collection::vec(
                prop_oneof![
                    Just("--threshold".to_string()),
                    Just("--cooldown=2".to_string()),
                    Just("--outcomes".to_string()),
                    Just("--kill".to_string()),
                    Just("-h".to_string()),
                    "[01]{0,12}",
                    "[0-9,]{0,8}",
                    any::<String>(),
                ],
                0..10,
            ),
        ) {
            let args: Vec<OsString> = args.into_iter().map(OsString::from).collect();
            let parsed = catch_unwind(AssertUnwindSafe(|| parse(args.clone())));
            let Ok(parsed) = parsed else {
                return Err(TestCaseError::fail(format!("parse panicked on {args:?}")));
            };
            if let Err(error) = parsed {
                prop_assert!(!error.to_string().is_empty());
            }
        }
    }
}
