//! How a server is reached: [`Transport`], a process it spawns ([`Command`]) or a remote
//! server over Streamable HTTP.

use std::borrow::Cow;
use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::redact::REDACTED;

use super::quote::Secrets;

/// How the server is reached.
#[derive(Debug, Clone)]
pub(crate) enum Transport {
    /// A process it spawns, talked to over its stdin and stdout.
    Stdio(Command),
    /// A remote server, over Streamable HTTP.
    #[cfg(feature = "mcp-http")]
    Remote(super::remote::Remote),
}

/// The command of a stdio server.
#[derive(Clone)]
pub(crate) struct Command {
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) env: Vec<(OsString, Option<OsString>)>,
    pub(crate) current_dir: Option<PathBuf>,
}

/// Its arguments as the command line shows them, its environment's names (never their
/// values).
impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env: Vec<String> = self
            .env
            .iter()
            .map(|(name, value)| match value {
                Some(_) => format!("{}={REDACTED}", name.to_string_lossy()),
                None => format!("-{}", name.to_string_lossy()),
            })
            .collect();
        f.debug_struct("Command")
            .field("command_line", &self.line())
            .field("env", &env)
            .field("current_dir", &self.current_dir)
            .finish()
    }
}

/// Whether a flag (a command-line word before any `=`) names a secret: `--token`,
/// `--api-key`, `--password`, `--auth`, `-p`...
fn names_a_secret(flag: &str) -> bool {
    let Some(flag) = flag.strip_prefix('-') else {
        return false;
    };
    let flag = flag.trim_start_matches('-').to_ascii_lowercase();
    flag == "p"
        || [
            "token",
            "key",
            "password",
            "passwd",
            "secret",
            "auth",
            "bearer",
            "credential",
        ]
        .iter()
        .any(|secret| flag.contains(secret))
}

/// The one rule for a secret on a command line: the word after a flag that names a
/// secret (`--token T0P`), and the value a flag that names one carries (`--token=T0P`).
/// Returns where the secret starts in `word` (`after`: the word before it), if it is one.
fn secret_at(after: Option<&str>, word: &str) -> Option<usize> {
    if after.is_some_and(|flag| !flag.contains('=') && names_a_secret(flag)) {
        return Some(0);
    }
    let (flag, _) = word.split_once('=')?;
    names_a_secret(flag).then_some(flag.len() + 1)
}

impl Command {
    /// Each argument, with where the secret in it starts, if it holds one ([`secret_at`]).
    fn args_and_secrets(&self) -> Vec<(Cow<'_, str>, Option<usize>)> {
        let mut before: Option<Cow<'_, str>> = None;
        self.args
            .iter()
            .map(|arg| {
                let arg = arg.to_string_lossy();
                let at = secret_at(before.as_deref(), &arg);
                before = Some(arg.clone());
                (arg, at)
            })
            .collect()
    }

    /// The command line, each secret redacted ([`secret_at`]), and then what looks like
    /// a credential in it (a URL's password).
    fn line(&self) -> String {
        let mut words = vec![self.program.to_string_lossy()];
        words.extend(
            self.args_and_secrets()
                .into_iter()
                .map(|(arg, at)| match at {
                    Some(at) => format!("{}{REDACTED}", &arg[..at]).into(),
                    None => arg,
                }),
        );
        crate::redact(&words.join(" ")).into_owned()
    }

    /// The secrets on its command line ([`secret_at`]).
    fn secrets(&self) -> Vec<String> {
        self.args_and_secrets()
            .into_iter()
            .filter_map(|(arg, at)| Some(arg[at?..].to_string()))
            .collect()
    }
}

impl Transport {
    /// The command line (what looks like a credential in it redacted: `--token=…`, a
    /// URL's password), or a remote server's URL (redacted), for messages.
    pub(crate) fn command_line(&self) -> String {
        match self {
            Transport::Stdio(command) => command.line(),
            #[cfg(feature = "mcp-http")]
            Transport::Remote(remote) => remote.shown(),
        }
    }

    /// What the server is given that must never show, and that it may say back: a
    /// remote server's header values and bearer token, the secrets on a stdio server's
    /// command line.
    pub(crate) fn secrets(&self) -> Secrets {
        match self {
            Transport::Stdio(command) => Secrets::new(command.secrets()),
            #[cfg(feature = "mcp-http")]
            Transport::Remote(remote) => Secrets::new(remote.secrets()),
        }
    }

    /// A remote server's URL, redacted (`None` for a stdio server).
    pub(crate) fn url(&self) -> Option<Arc<str>> {
        match self {
            Transport::Stdio(_) => None,
            #[cfg(feature = "mcp-http")]
            Transport::Remote(remote) => Some(remote.shown().into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_on_the_command_line_never_shows_in_its_line() {
        let command = Command {
            program: "mcp-server".into(),
            args: [
                "--token",
                "T0P",
                "--api-key=sk-K",
                "--port",
                "80",
                "-p",
                "pw",
            ]
            .map(OsString::from)
            .into(),
            env: Vec::new(),
            current_dir: None,
        };
        assert_eq!(
            Transport::Stdio(command).command_line(),
            "mcp-server --token [redacted] --api-key=[redacted] --port 80 -p [redacted]"
        );
    }

    #[test]
    fn a_secret_flags_value_is_redacted_in_either_form_and_kept_out_of_debug() {
        let command = Command {
            program: "mcp-server".into(),
            args: [
                "--auth=AUTHSECRET",
                "--credential=CREDSECRET",
                "--auth",
                "AUTH2SECRET",
                "--mode=fast",
                "-p=PWSECRET",
            ]
            .map(OsString::from)
            .into(),
            env: vec![
                ("API_KEY".into(), Some("ENVSECRET".into())),
                ("HOME".into(), None),
            ],
            current_dir: None,
        };
        let transport = Transport::Stdio(command.clone());
        assert_eq!(
            transport.command_line(),
            "mcp-server --auth=[redacted] --credential=[redacted] --auth [redacted] --mode=fast -p=[redacted]"
        );
        assert_eq!(
            command.secrets(),
            ["AUTHSECRET", "CREDSECRET", "AUTH2SECRET", "PWSECRET"]
        );
        let debug = format!("{command:?}");
        for secret in [
            "AUTHSECRET",
            "CREDSECRET",
            "AUTH2SECRET",
            "PWSECRET",
            "ENVSECRET",
        ] {
            assert!(!debug.contains(secret), "{debug}");
        }
        assert!(
            debug.contains("API_KEY") && debug.contains("--mode=fast"),
            "{debug}"
        );
    }
}
