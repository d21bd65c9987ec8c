//! [`Exit`]: how a server's process ended, and how that is told.

use std::fmt;

/// How a server's process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    code: Option<i32>,
    signal: Option<i32>,
    stderr: Option<String>,
}

impl Exit {
    pub(crate) fn new(status: Option<std::process::ExitStatus>, stderr: Option<String>) -> Exit {
        #[cfg(unix)]
        let signal = status.and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s));
        #[cfg(not(unix))]
        let signal = None;
        Exit {
            code: status.and_then(|s| s.code()),
            signal,
            stderr: stderr.filter(|s| !s.is_empty()),
        }
    }

    /// An exit told by its parts, for tests.
    #[cfg(test)]
    pub(crate) fn of(code: Option<i32>, signal: Option<i32>, stderr: Option<&str>) -> Exit {
        Exit {
            code,
            signal,
            stderr: stderr.map(String::from),
        }
    }

    /// Its exit code, if it exited.
    pub fn code(&self) -> Option<i32> {
        self.code
    }

    /// The signal that ended it, if one did (Unix).
    pub fn signal(&self) -> Option<i32> {
        self.signal
    }

    /// The last line it wrote to stderr, if any.
    pub fn stderr(&self) -> Option<&str> {
        self.stderr.as_deref()
    }
}

/// `exited with status 1 (stderr: "...")`, `was killed by signal 9`: the last line
/// of stderr is quoted when it may say why (the process exited on its own, not with
/// status 0).
impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let quote_stderr = match (self.code, self.signal) {
            (_, Some(signal)) => {
                write!(f, "was killed by signal {signal}")?;
                false
            }
            (Some(code), None) => {
                write!(f, "exited with status {code}")?;
                code != 0
            }
            (None, None) => {
                f.write_str("exited")?;
                true
            }
        };
        if let (true, Some(line)) = (quote_stderr, &self.stderr) {
            write!(f, " (stderr: {line:?})")?;
        }
        Ok(())
    }
}
