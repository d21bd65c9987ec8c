//! What an admin request asks for: its [`Target`], read from the path, and the method it needs.

use ::http::Method;

use super::reply::Problem;

/// What a breaker or a kill switch is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Act {
    /// Turn the kill switch on.
    Kill,
    /// Turn the kill switch off.
    Revive,
    /// Open the breaker until a reset.
    ForceOpen,
    /// Open the breaker for the duration in the request's body.
    OpenFor,
    /// Close the breaker and clear its counts.
    Reset,
}

impl Act {
    fn parse(segment: &str) -> Option<Act> {
        Some(match segment {
            "kill" => Act::Kill,
            "revive" => Act::Revive,
            "force_open" => Act::ForceOpen,
            "open_for" => Act::OpenFor,
            "reset" => Act::Reset,
            _ => return None,
        })
    }

    /// `kill`, `revive`, `force_open`, `open_for` or `reset`.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Act::Kill => "kill",
            Act::Revive => "revive",
            Act::ForceOpen => "force_open",
            Act::OpenFor => "open_for",
            Act::Reset => "reset",
        }
    }
}

/// A request the admin service understands, before its method is checked against it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    /// `/`: every breaker and kill switch.
    Index,
    /// `/health`: `200` or `503`, by the health rule.
    Health,
    /// `/breakers`.
    Breakers,
    /// `/breakers/{name}`.
    Breaker(String),
    /// `/breakers/{name}/{act}`.
    BreakerAct(String, Act),
    /// `/kill_switches`.
    KillSwitches,
    /// `/kill_switches/{name}`.
    KillSwitch(String),
    /// `/kill_switches/{name}/{kill|revive}`.
    KillSwitchAct(String, Act),
}

impl Target {
    /// The method this target answers: `GET` to read, `POST` to act.
    pub(super) fn method(&self) -> Method {
        match self {
            Target::BreakerAct(..) | Target::KillSwitchAct(..) => Method::POST,
            _ => Method::GET,
        }
    }

    /// The target of `path` under `prefix` (`""`, or `/admin` with no trailing slash).
    pub(super) fn parse(prefix: &str, path: &str) -> Result<Target, Problem> {
        let rest = path.strip_prefix(prefix).ok_or_else(Problem::not_found)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return Err(Problem::not_found());
        }
        let rest = rest.trim_start_matches('/');
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.is_empty() {
            return Ok(Target::Index);
        }
        let segments: Vec<String> = rest
            .split('/')
            .map(percent_decode)
            .collect::<Result<_, _>>()?;
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        let named = |name: &str| -> Result<String, Problem> {
            if name.is_empty() {
                return Err(Problem::not_found());
            }
            Ok(name.to_string())
        };
        match segments[..] {
            ["health"] => Ok(Target::Health),
            ["breakers"] => Ok(Target::Breakers),
            ["breakers", name] => Ok(Target::Breaker(named(name)?)),
            ["breakers", name, act] => match Act::parse(act) {
                Some(act) => Ok(Target::BreakerAct(named(name)?, act)),
                None => Err(Problem::not_found()),
            },
            ["kill_switches"] => Ok(Target::KillSwitches),
            ["kill_switches", name] => Ok(Target::KillSwitch(named(name)?)),
            ["kill_switches", name, act] => match Act::parse(act) {
                Some(act @ (Act::Kill | Act::Revive)) => {
                    Ok(Target::KillSwitchAct(named(name)?, act))
                }
                _ => Err(Problem::not_found()),
            },
            _ => Err(Problem::not_found()),
        }
    }
}

/// A path segment with its `%XX` escapes decoded; a bad escape or a segment that is not
/// UTF-8 once decoded is a bad request.
fn percent_decode(segment: &str) -> Result<String, Problem> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let hex = bytes
            .get(i + 1..i + 3)
            .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok())
            .ok_or_else(|| Problem::bad_request("a bad percent-escape in the path"))?;
        out.push(hex);
        i += 3;
    }
    String::from_utf8(out).map_err(|_| Problem::bad_request("the path is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_targets_under_the_prefix() {
        let parse = |path| Target::parse("/admin", path);
        assert_eq!(parse("/admin"), Ok(Target::Index));
        assert_eq!(parse("/admin/"), Ok(Target::Index));
        assert_eq!(parse("/admin/breakers/"), Ok(Target::Breakers));
        assert_eq!(parse("/admin/health"), Ok(Target::Health));
        assert_eq!(
            parse("/admin/breakers/chat%20model"),
            Ok(Target::Breaker("chat model".into()))
        );
        assert_eq!(
            parse("/admin/breakers/chat/open_for"),
            Ok(Target::BreakerAct("chat".into(), Act::OpenFor))
        );
        assert_eq!(
            parse("/admin/kill_switches/all/kill"),
            Ok(Target::KillSwitchAct("all".into(), Act::Kill))
        );
        for missing in [
            "/",
            "/adminx",
            "/admin/breaker",
            "/admin/breakers//reset",
            "/admin/breakers/chat/explode",
            "/admin/kill_switches/all/reset",
            "/admin/breakers/chat/reset/now",
        ] {
            assert_eq!(parse(missing).unwrap_err().status(), 404, "{missing}");
        }
        for bad in [
            "/admin/breakers/%zz",
            "/admin/breakers/%",
            "/admin/breakers/%ff",
        ] {
            assert_eq!(parse(bad).unwrap_err().status(), 400, "{bad}");
        }
    }
}
