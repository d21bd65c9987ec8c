//! How a server is reached: [`Transport`], a process it spawns ([`Command`]) or a remote
//! server over Streamable HTTP.

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

impl Transport {
    /// The command line (what looks like a credential in it redacted: `--token=…`, a
    /// URL's password), or a remote server's URL (redacted), for messages.
    pub(crate) fn command_line(&self) -> String {
        match self {
            Transport::Stdio(command) => {
                let line = std::iter::once(&command.program)
                    .chain(&command.args)
                    .map(|a| a.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(" ");
                crate::redact(&line).into_owned()
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
