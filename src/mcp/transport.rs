//! How a server is reached: [`Transport`], a process it spawns ([`Command`]) or a remote
//! server over Streamable HTTP.

use crate::redact::REDACTED;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

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
#[derive(Debug, Clone)]
pub(crate) struct Command {
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) env: Vec<(OsString, Option<OsString>)>,
    pub(crate) current_dir: Option<PathBuf>,
}

/// Whether a command-line word is a flag whose value, the next word, is a secret:
/// `--token`, `--api-key`, `--password`, `-p`...
fn names_a_secret(word: &str) -> bool {
    // `--api-key=…` carries its own value (redacted with the line).
    let Some(flag) = word.strip_prefix('-').filter(|flag| !flag.contains('=')) else {
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

impl Transport {
    /// The command line (what looks like a credential in it redacted: `--token=…`, a
    /// URL's password), or a remote server's URL (redacted), for messages.
    pub(crate) fn command_line(&self) -> String {
        match self {
            Transport::Stdio(command) => {
                let mut words = vec![command.program.to_string_lossy()];
                for arg in &command.args {
                    // The value after `--token`, `--api-key`, `--password`...
                    let after_a_secret = words.last().is_some_and(|flag| names_a_secret(flag));
                    words.push(match after_a_secret {
                        true => REDACTED.into(),
                        false => arg.to_string_lossy(),
                    });
                }
                crate::redact(&words.join(" ")).into_owned()
            }
            #[cfg(feature = "mcp-http")]
            Transport::Remote(remote) => remote.shown(),
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
}
