//! The messages on the fleet's channels, version 1, and how a received one is checked
//! before it is believed.
//!
//! A kill message, on `PREFIX:kills`:
//!
//! ```json
//! {"v":1,"name":"openai","killed":true}
//! ```
//!
//! with optional `"replica"` and `"run"` (which replica sent it), `"at_ms"` (the act's
//! stamp: with the replica and run, where the act stands in the fleet's order, see
//! [`act`](super::act)) and `"by"` (who, for the logs). A message without a stamp (one
//! published by hand) counts as made when it is heard.
//!
//! A kill key, `PREFIX:kill:NAME`, holds the latest act on the switch:
//!
//! ```json
//! {"v":1,"killed":true,"at_ms":1764580000000,"replica":"api-7","run":"5f0c1a2b3c4d5e6f"}
//! ```
//!
//! or, written by hand, `1` (killed) or `0` (revived), which a replica stamps when it
//! first reads it. A revive is kept in the key (`"killed":false`), not deleted: a key that
//! is absent holds no act, and undoes none.
//!
//! A hint message, on `PREFIX:hints`:
//!
//! ```json
//! {"v":1,"replica":"api-7","run":"5f0c1a2b3c4d5e6f","seq":42,"name":"openai",
//!  "state":"open","cause":"tripped","at_ms":1764580000000,"until_ms":1764580030000}
//! ```
//!
//! `state` is `open` or `closed`; `until_ms` (Unix milliseconds, or `null` when the
//! breaker waits for calls or a person rather than a time) is when the publishing
//! breaker will next probe. Unknown fields are ignored, so later minor additions stay
//! readable; a different `v` is not.

use serde::{Deserialize, Serialize};

use super::act::{KillAct, Stored, MAX_AHEAD_MS};
use super::keys::check_name;

/// The version this crate writes and reads.
pub(crate) const VERSION: u64 = 1;

/// Why a received message was not believed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rejection {
    /// Not a message of the format: not JSON, a missing or mistyped field, a bad name.
    Malformed,
    /// Longer than the fleet's message limit; not parsed.
    Oversized,
    /// A version this crate does not read.
    UnknownVersion,
}

impl Rejection {
    /// `malformed`, `oversized` or `unknown_version`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Rejection::Malformed => "malformed",
            Rejection::Oversized => "oversized",
            Rejection::UnknownVersion => "unknown_version",
        }
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A kill switch changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KillMessage {
    pub(crate) v: u64,
    pub(crate) name: String,
    pub(crate) killed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) replica: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) run: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) by: Option<String>,
}

/// What a kill key holds when a replica wrote it: the latest act.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KillRecord {
    pub(crate) v: u64,
    pub(crate) killed: bool,
    pub(crate) at_ms: u64,
    pub(crate) replica: String,
    pub(crate) run: String,
}

/// What a hint says of the publishing replica's breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum HintState {
    /// Its own calls opened it.
    Open,
    /// It closed (a probe succeeded, or a person reset it).
    Closed,
}

/// A breaker on another replica changed state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HintMessage {
    pub(crate) v: u64,
    pub(crate) replica: String,
    pub(crate) run: String,
    pub(crate) seq: u64,
    pub(crate) name: String,
    pub(crate) state: HintState,
    pub(crate) cause: String,
    pub(crate) at_ms: u64,
    pub(crate) until_ms: Option<u64>,
}

/// Only the version, read before the rest so that a later format is told from a broken
/// one.
#[derive(Deserialize)]
struct Versioned {
    v: u64,
}

/// The longest `cause` or `by` a message may carry.
const MAX_NOTE: usize = 64;

/// Parses a received payload of at most `limit` bytes as a `T`, version first. JSON is
/// UTF-8 text (RFC 8259): a payload that is not is malformed, wherever the bad bytes are
/// (the parser alone would skip them in a field it ignores).
fn decode<T: for<'de> Deserialize<'de>>(payload: &[u8], limit: usize) -> Result<T, Rejection> {
    if payload.len() > limit {
        return Err(Rejection::Oversized);
    }
    let text = std::str::from_utf8(payload).map_err(|_| Rejection::Malformed)?;
    let version: Versioned = serde_json::from_str(text).map_err(|_| Rejection::Malformed)?;
    if version.v != VERSION {
        return Err(Rejection::UnknownVersion);
    }
    serde_json::from_str(text).map_err(|_| Rejection::Malformed)
}

fn short(note: Option<&str>) -> Result<(), Rejection> {
    match note {
        Some(note) if note.len() > MAX_NOTE || note.chars().any(char::is_control) => {
            Err(Rejection::Malformed)
        }
        _ => Ok(()),
    }
}

/// A stamp more than a day ahead of `wall_ms` is refused: a broken clock must not pin a
/// switch for ever.
fn believable(at_ms: u64, wall_ms: u64) -> Result<(), Rejection> {
    if at_ms > wall_ms.saturating_add(MAX_AHEAD_MS) {
        return Err(Rejection::Malformed);
    }
    Ok(())
}

impl KillMessage {
    /// The message of `act` on switch `name`.
    pub(crate) fn new(name: &str, act: &KillAct) -> KillMessage {
        KillMessage {
            v: VERSION,
            name: name.into(),
            killed: act.killed,
            replica: Some(act.replica.to_string()),
            run: Some(act.run.to_string()),
            at_ms: Some(act.at_ms),
            by: None,
        }
    }

    /// The act it carries, if it is stamped (replica, run and time), checked against
    /// this replica's clock, `wall_ms`.
    pub(crate) fn act(&self, wall_ms: u64) -> Result<Option<KillAct>, Rejection> {
        let (Some(replica), Some(run), Some(at_ms)) = (&self.replica, &self.run, self.at_ms) else {
            return Ok(None);
        };
        believable(at_ms, wall_ms)?;
        Ok(Some(KillAct::new(
            self.killed,
            at_ms,
            &replica.as_str().into(),
            &run.as_str().into(),
        )))
    }

    /// Checks a received kill message.
    pub(crate) fn decode(payload: &[u8], limit: usize) -> Result<KillMessage, Rejection> {
        let message: KillMessage = decode(payload, limit)?;
        check_name("kill switch", &message.name).map_err(|_| Rejection::Malformed)?;
        if let Some(replica) = &message.replica {
            check_name("replica", replica).map_err(|_| Rejection::Malformed)?;
        }
        short(message.run.as_deref())?;
        short(message.by.as_deref())?;
        Ok(message)
    }
}

impl KillRecord {
    pub(crate) fn new(act: &KillAct) -> KillRecord {
        KillRecord {
            v: VERSION,
            killed: act.killed,
            at_ms: act.at_ms,
            replica: act.replica.to_string(),
            run: act.run.to_string(),
        }
    }

    /// Reads a kill key's string value, of at most `limit` bytes, checked against this
    /// replica's clock, `wall_ms`.
    pub(crate) fn decode(value: &[u8], limit: usize, wall_ms: u64) -> Stored {
        match value {
            b"1" => return Stored::Bare(true),
            b"0" => return Stored::Bare(false),
            _ => {}
        }
        let Ok(record) = decode::<KillRecord>(value, limit) else {
            return Stored::Unreadable;
        };
        let checked = check_name("replica", &record.replica)
            .map_err(|_| Rejection::Malformed)
            .and_then(|()| short(Some(&record.run)))
            .and_then(|()| believable(record.at_ms, wall_ms));
        match checked {
            Ok(()) => Stored::Act(KillAct::new(
                record.killed,
                record.at_ms,
                &record.replica.as_str().into(),
                &record.run.as_str().into(),
            )),
            Err(_) => Stored::Unreadable,
        }
    }
}

impl HintMessage {
    /// Checks a received hint message.
    pub(crate) fn decode(payload: &[u8], limit: usize) -> Result<HintMessage, Rejection> {
        let message: HintMessage = decode(payload, limit)?;
        check_name("breaker", &message.name).map_err(|_| Rejection::Malformed)?;
        check_name("replica", &message.replica).map_err(|_| Rejection::Malformed)?;
        short(Some(&message.run))?;
        short(Some(&message.cause))?;
        Ok(message)
    }
}

/// Writes a message.
pub(crate) fn encode<T: Serialize>(message: &T) -> String {
    serde_json::to_string(message).expect("the fleet's messages are always serializable")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint() -> HintMessage {
        HintMessage {
            v: 1,
            replica: "api-7".into(),
            run: "5f0c".into(),
            seq: 42,
            name: "openai".into(),
            state: HintState::Open,
            cause: "tripped".into(),
            at_ms: 1_764_580_000_000,
            until_ms: Some(1_764_580_030_000),
        }
    }

    #[test]
    fn a_hint_reads_back_as_written() {
        let text = encode(&hint());
        assert_eq!(HintMessage::decode(text.as_bytes(), 4096), Ok(hint()));
        assert!(text.contains(r#""state":"open""#), "{text}");
    }

    #[test]
    fn an_operators_kill_message_needs_only_three_fields() {
        let message =
            KillMessage::decode(br#"{"v":1,"name":"openai","killed":true}"#, 4096).unwrap();
        assert!(message.killed && message.replica.is_none());
        let with_extra = br#"{"v":1,"name":"openai","killed":false,"by":"alice","later":[1,2]}"#;
        assert!(!KillMessage::decode(with_extra, 4096).unwrap().killed);
    }

    #[test]
    fn a_kill_key_reads_back_as_the_act_written_and_by_hand_values_are_bare() {
        let act = KillAct::new(true, 1_764_580_000_000, &"api-7".into(), &"5f0c".into());
        let value = encode(&KillRecord::new(&act));
        let wall = 1_764_580_000_000;
        assert_eq!(
            KillRecord::decode(value.as_bytes(), 4096, wall),
            Stored::Act(act.clone())
        );
        assert_eq!(KillRecord::decode(b"1", 4096, wall), Stored::Bare(true));
        assert_eq!(KillRecord::decode(b"0", 4096, wall), Stored::Bare(false));
        for bad in [&b"maybe"[..], b"", b"{\"v\":1,\"killed\":true}"] {
            assert_eq!(KillRecord::decode(bad, 4096, wall), Stored::Unreadable);
        }
        // A stamp further ahead than a day is refused, in a key or a message.
        let far = KillAct::new(true, wall + MAX_AHEAD_MS + 1, &"api-7".into(), &"r".into());
        let value = encode(&KillRecord::new(&far));
        assert_eq!(
            KillRecord::decode(value.as_bytes(), 4096, wall),
            Stored::Unreadable
        );
        let message = KillMessage::new("openai", &far);
        assert_eq!(message.act(wall), Err(Rejection::Malformed));
        let message = KillMessage::new("openai", &act);
        assert_eq!(message.act(wall), Ok(Some(act)));
        let by_hand =
            KillMessage::decode(br#"{"v":1,"name":"openai","killed":true}"#, 4096).unwrap();
        assert_eq!(by_hand.act(wall), Ok(None));
    }

    #[test]
    fn bad_messages_are_told_apart() {
        let cases: &[(&[u8], Rejection)] = &[
            (b"kill openai", Rejection::Malformed),
            (b"", Rejection::Malformed),
            (
                br#"{"v":"1","name":"openai","killed":true}"#,
                Rejection::Malformed,
            ),
            (br#"{"v":1,"name":"openai"}"#, Rejection::Malformed),
            (br#"{"v":1,"name":"","killed":true}"#, Rejection::Malformed),
            (
                br#"{"v":1,"name":"a\u0000b","killed":true}"#,
                Rejection::Malformed,
            ),
            (
                br#"{"v":2,"name":"openai","killed":true}"#,
                Rejection::UnknownVersion,
            ),
            (br#"{"v":2}"#, Rejection::UnknownVersion),
            (b"\xff\xfe", Rejection::Malformed),
            (
                b"{\"v\":1,\"name\":\"openai\",\"killed\":true,\"note\":\"\xff\"}",
                Rejection::Malformed,
            ),
            (b"{\"v\":2,\"x\":\"\xc3\x28\"}", Rejection::Malformed),
        ];
        for (payload, want) in cases {
            assert_eq!(
                KillMessage::decode(payload, 4096),
                Err(*want),
                "{}",
                String::from_utf8_lossy(payload)
            );
        }
        let big = format!(
            r#"{{"v":1,"name":"openai","killed":true,"by":"{}"}}"#,
            "x".repeat(5000)
        );
        assert_eq!(
            KillMessage::decode(big.as_bytes(), 4096),
            Err(Rejection::Oversized)
        );
        let mut long_cause = hint();
        long_cause.cause = "c".repeat(65);
        let text = encode(&long_cause);
        assert_eq!(
            HintMessage::decode(text.as_bytes(), 4096),
            Err(Rejection::Malformed)
        );
        let bad_state = encode(&hint()).replace(r#""open""#, r#""ajar""#);
        assert_eq!(
            HintMessage::decode(bad_state.as_bytes(), 4096),
            Err(Rejection::Malformed)
        );
        let negative = encode(&hint()).replace("42", "-1");
        assert_eq!(
            HintMessage::decode(negative.as_bytes(), 4096),
            Err(Rejection::Malformed)
        );
    }
}
