//! A label put into an OpenAI chat completion's message content without breaking its JSON:
//! see [`label_chat_completion`].

use bytes::Bytes;

use super::json_text::{self, escape_json_into};

/// Why [`label_chat_completion`] left a body as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotLabelled {
    /// The body is not JSON (nor UTF-8 text), or it nests deeper than 128 levels: a
    /// streamed body (`data: {...}` lines) is not JSON either.
    #[error("the body is not JSON")]
    NotJson,
    /// The body is JSON, but no `choices[].message.content` in it is a string: not a
    /// chat completion, or one whose messages hold only tool calls (`"content": null`).
    #[error("the body has no chat completion message content to label")]
    NoContent,
}

/// The chat completion `body` with `label` and a line break put at the start of every
/// `choices[].message.content` string: the JSON stays valid, and everything else in it
/// is kept byte for byte (key order, numbers, whitespace, the escapes of the content).
///
/// The label is written as a JSON string needs it (quotes, backslashes and control
/// characters escaped); other characters, non-ASCII ones included, are kept as they
/// are, as JSON allows. A `content` that is not a string (`null` beside tool calls, an
/// array of parts) is left as it is.
///
/// Only whole bodies: a streamed answer (server-sent events, `chat.completion.chunk`
/// objects with `delta`s) is out of its scope, and is reported as
/// [`NotLabelled::NotJson`]. The Responses API's `output` is not a chat completion
/// ([`NotLabelled::NoContent`]).
///
/// # Errors
///
/// [`NotLabelled`] when nothing was labelled; the caller keeps its body as it was.
///
/// ```
/// use tower_circuit_breaker::http::{label_chat_completion, NotLabelled};
///
/// let body = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"42"}}]}"#;
/// let labelled = label_chat_completion(body, "[STALE \"cached\"]")?;
/// assert_eq!(
///     labelled,
///     r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"[STALE \"cached\"]\n42"}}]}"#
/// );
/// let json: serde_json::Value = serde_json::from_slice(&labelled).unwrap();
/// assert_eq!(json["choices"][0]["message"]["content"], "[STALE \"cached\"]\n42");
///
/// assert_eq!(label_chat_completion(b"data: {}\n\n", "[STALE]"), Err(NotLabelled::NotJson));
/// assert_eq!(label_chat_completion(br#"{"ok":true}"#, "[STALE]"), Err(NotLabelled::NoContent));
/// # Ok::<(), NotLabelled>(())
/// ```
pub fn label_chat_completion(body: &[u8], label: &str) -> Result<Bytes, NotLabelled> {
    std::str::from_utf8(body).map_err(|_| NotLabelled::NotJson)?;
    let values = json_text::noted_values::<Place>(body).ok_or(NotLabelled::NotJson)?;
    // Where each content that is a string starts, just after its opening quote.
    let contents: Vec<usize> = values
        .into_iter()
        .filter(|value| body[value.start] == b'"')
        .map(|value| value.start + 1)
        .collect();
    if contents.is_empty() {
        return Err(NotLabelled::NoContent);
    }
    let mut prefix = String::with_capacity(label.len() + 2);
    escape_json_into(label, &mut prefix);
    prefix.push_str("\\n");
    let mut labelled = Vec::with_capacity(body.len() + prefix.len() * contents.len());
    let mut copied = 0;
    for at in contents {
        labelled.extend_from_slice(&body[copied..at]);
        labelled.extend_from_slice(prefix.as_bytes());
        copied = at;
    }
    labelled.extend_from_slice(&body[copied..]);
    Ok(Bytes::from(labelled))
}

/// Where a value sits on the way to `choices[].message.content`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The whole body.
    Root,
    /// The value of the body's `choices`.
    Choices,
    /// An element of `choices`.
    Choice,
    /// The value of a choice's `message`.
    Message,
    /// The value of a message's `content`: labelled if it is a string.
    Content,
    /// Anywhere else.
    Elsewhere,
}

impl json_text::Place for Place {
    const ROOT: Place = Place::Root;

    fn member(self, key: &str) -> Place {
        match (self, key) {
            (Place::Root, "choices") => Place::Choices,
            (Place::Choice, "message") => Place::Message,
            (Place::Message, "content") => Place::Content,
            _ => Place::Elsewhere,
        }
    }

    fn element(self) -> Place {
        match self {
            Place::Choices => Place::Choice,
            _ => Place::Elsewhere,
        }
    }

    /// A message's content, labelled if it is a string.
    fn noted(self) -> bool {
        self == Place::Content
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LABEL: &str = "[STALE DATA — saved 1m 30s ago, may not reflect current state]";

    fn content(body: &[u8], choice: usize) -> serde_json::Value {
        let json: serde_json::Value = serde_json::from_slice(body).expect("still JSON");
        json["choices"][choice]["message"]["content"].clone()
    }

    #[test]
    fn every_choice_gets_the_label_and_the_rest_of_the_body_is_kept_byte_for_byte() {
        let body =
            br#"{ "id" : "chatcmpl-1", "created": 1712345678, "usage": {"total_tokens": 1.5e3},
            "choices": [ {"index":0, "message": {"role":"assistant","content":"one"}},
                         {"index":1, "message": {"content":"two", "role":"assistant"}} ] }"#;
        let labelled = label_chat_completion(body, LABEL).unwrap();
        assert_eq!(content(&labelled, 0), format!("{LABEL}\none"));
        assert_eq!(content(&labelled, 1), format!("{LABEL}\ntwo"));
        let expected = String::from_utf8_lossy(body)
            .replace(
                r#""content":"one""#,
                &format!(r#""content":"{LABEL}\none""#),
            )
            .replace(
                r#""content":"two""#,
                &format!(r#""content":"{LABEL}\ntwo""#),
            );
        assert_eq!(labelled, expected.as_bytes());
    }

    #[test]
    fn quotes_backslashes_and_control_characters_in_the_label_are_escaped() {
        let body = br#"{"choices":[{"message":{"content":"x"}}]}"#;
        let label = "say \"stale\" \\ path C:\\tmp\ttab\u{1}\r";
        let labelled = label_chat_completion(body, label).unwrap();
        assert_eq!(content(&labelled, 0), format!("{label}\nx"));
        assert_eq!(
            labelled,
            r#"{"choices":[{"message":{"content":"say \"stale\" \\ path C:\\tmp\ttab\u0001\r\nx"}}]}"#
                .as_bytes()
        );
    }

    #[test]
    fn escapes_and_unicode_already_in_the_content_are_kept_as_written() {
        let body = r#"{"choices":[{"message":{"content":"\"quoted\" \\ \u00e9t\u00e9 😀 naïve \ud83d\ude00\n"}}]}"#;
        let labelled = label_chat_completion(body.as_bytes(), "étiquette ✓").unwrap();
        assert_eq!(
            content(&labelled, 0),
            "étiquette ✓\n\"quoted\" \\ été 😀 naïve 😀\n"
        );
        assert!(std::str::from_utf8(&labelled)
            .unwrap()
            .contains(r#""étiquette ✓\n\"quoted\" \\ \u00e9t\u00e9"#));
    }

    #[test]
    fn an_empty_content_gets_the_label_alone() {
        let body = br#"{"choices":[{"message":{"content":""}}]}"#;
        let labelled = label_chat_completion(body, "[STALE]").unwrap();
        assert_eq!(content(&labelled, 0), "[STALE]\n");
    }

    #[test]
    fn keys_written_with_escapes_are_read_as_the_keys_they_are() {
        let body = br#"{"choic\u0065s":[{"m\u0065ssage":{"con\u0074ent":"x"}}]}"#;
        let labelled = label_chat_completion(body, "[STALE]").unwrap();
        assert_eq!(content(&labelled, 0), "[STALE]\nx");
    }

    #[test]
    fn content_elsewhere_than_choices_message_is_not_touched() {
        let body = br#"{"content":"top","message":{"content":"m"},"choices":[{"delta":{"content":"d"},"content":"c","message":{"content":"real","tool":{"content":"deep"}}}],"x":{"choices":[{"message":{"content":"nested"}}]}}"#;
        let labelled = label_chat_completion(body, "L").unwrap();
        let expected = String::from_utf8_lossy(body).replace(r#""real""#, r#""L\nreal""#);
        assert_eq!(labelled, expected.as_bytes());
    }

    #[test]
    fn non_json_bodies_are_reported_and_not_labelled() {
        for body in [
            &b""[..],
            b"plain text",
            b"data: {\"choices\":[{\"delta\":{\"content\":\"4\"}}]}\n\n",
            b"{\"choices\":[{\"message\":{\"content\":\"x\"}}]",
            b"{\"choices\":[{\"message\":{\"content\":\"x\"}}]} trailing",
            b"{\"choices\":[{\"message\":{\"content\":\"bad \\q escape\"}}]}",
            b"{\"choices\":[{\"message\":{\"content\":\"raw\nnewline\"}}]}",
            b"{\"a\":01}",
            b"{\"a\":1.}",
            b"{\"a\":-}",
            b"{\"a\":tru}",
            b"{\"a\":1,}",
            b"{'a':1}",
            b"\xff\xfe{}",
        ] {
            assert_eq!(
                label_chat_completion(body, "L"),
                Err(NotLabelled::NotJson),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert_eq!(
            label_chat_completion(deep.as_bytes(), "L"),
            Err(NotLabelled::NotJson)
        );
    }

    #[test]
    fn json_without_chat_content_is_reported_and_not_labelled() {
        for body in [
            r#"{"error":{"message":"overloaded","code":"server_error"}}"#,
            r#"{"choices":[]}"#,
            r#"{"choices":[{"message":{"content":null,"tool_calls":[]}}]}"#,
            r#"{"choices":[{"message":{"content":[{"type":"text","text":"x"}]}}]}"#,
            r#"{"choices":{"message":{"content":"not an array"}}}"#,
            r#"[{"choices":[{"message":{"content":"x"}}]}]"#,
            r#""a string""#,
            " 42 ",
        ] {
            assert_eq!(
                label_chat_completion(body.as_bytes(), "L"),
                Err(NotLabelled::NoContent),
                "{body}"
            );
            serde_json::from_str::<serde_json::Value>(body).expect("the test's body is JSON");
        }
    }

    #[test]
    fn escaped_text_is_read_back_by_serde_json_as_the_text() {
        let mut every_ascii = String::new();
        for c in (0u8..0x80).map(char::from) {
            every_ascii.push(c);
        }
        every_ascii.push_str("é—😀\u{2028}");
        let mut escaped = String::new();
        escape_json_into(&every_ascii, &mut escaped);
        let back: String = serde_json::from_str(&format!("\"{escaped}\"")).unwrap();
        assert_eq!(back, every_ascii);
    }
}
