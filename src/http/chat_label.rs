//! A label put into an OpenAI chat completion's message content without breaking its JSON:
//! see [`label_chat_completion`].

use bytes::Bytes;

/// How deep a body may nest before it is not read: serde_json's limit.
const MAX_DEPTH: usize = 128;

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
    let text = std::str::from_utf8(body).map_err(|_| NotLabelled::NotJson)?;
    let mut scan = Scan {
        bytes: text.as_bytes(),
        pos: 0,
        depth: 0,
        contents: Vec::new(),
    };
    scan.document().ok_or(NotLabelled::NotJson)?;
    if scan.contents.is_empty() {
        return Err(NotLabelled::NoContent);
    }
    let mut prefix = String::with_capacity(label.len() + 2);
    escape_json_into(label, &mut prefix);
    prefix.push_str("\\n");
    let mut labelled = Vec::with_capacity(body.len() + prefix.len() * scan.contents.len());
    let mut copied = 0;
    for at in scan.contents {
        labelled.extend_from_slice(&body[copied..at]);
        labelled.extend_from_slice(prefix.as_bytes());
        copied = at;
    }
    labelled.extend_from_slice(&body[copied..]);
    Ok(Bytes::from(labelled))
}

/// Appends `text` to `out` as the inside of a JSON string: `"` and `\` escaped, control
/// characters as `\n`, `\t`, ... or `\u00XX`; everything else as it is (JSON text is
/// UTF-8, so non-ASCII characters need no escape).
pub(crate) fn escape_json_into(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
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

impl Place {
    /// The place of the value of `key` in an object at this place.
    fn member(self, key: &str) -> Place {
        match (self, key) {
            (Place::Root, "choices") => Place::Choices,
            (Place::Choice, "message") => Place::Message,
            (Place::Message, "content") => Place::Content,
            _ => Place::Elsewhere,
        }
    }

    /// The place of an element of an array at this place.
    fn element(self) -> Place {
        match self {
            Place::Choices => Place::Choice,
            _ => Place::Elsewhere,
        }
    }
}

/// A validating reader of one JSON text (RFC 8259) that notes where each
/// `choices[].message.content` string starts. `None` from any step: not JSON.
struct Scan<'a> {
    bytes: &'a [u8],
    pos: usize,
    depth: usize,
    /// The offset just after the opening quote of each content string, in order.
    contents: Vec<usize>,
}

impl<'a> Scan<'a> {
    fn document(&mut self) -> Option<()> {
        self.value(Place::Root)?;
        self.whitespace();
        (self.pos == self.bytes.len()).then_some(())
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek() == Some(byte)).then(|| self.pos += 1)
    }

    fn value(&mut self, place: Place) -> Option<()> {
        self.whitespace();
        match self.peek()? {
            b'{' => self.nested(|scan| scan.object(place)),
            b'[' => self.nested(|scan| scan.array(place)),
            b'"' => {
                if place == Place::Content {
                    self.contents.push(self.pos + 1);
                }
                self.string().map(drop)
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number(),
        }
    }

    fn nested(&mut self, read: impl FnOnce(&mut Self) -> Option<()>) -> Option<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        read(self)?;
        self.depth -= 1;
        Some(())
    }

    fn object(&mut self, place: Place) -> Option<()> {
        self.eat(b'{')?;
        self.whitespace();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            self.whitespace();
            let key = self.string()?;
            let member = place.member(&key.decoded()?);
            self.whitespace();
            self.eat(b':')?;
            self.value(member)?;
            self.whitespace();
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self, place: Place) -> Option<()> {
        self.eat(b'[')?;
        self.whitespace();
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            self.value(place.element())?;
            self.whitespace();
            match self.peek()? {
                b',' => self.pos += 1,
                b']' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A string, validated; what is between its quotes.
    fn string(&mut self) -> Option<Raw<'a>> {
        self.eat(b'"')?;
        let start = self.pos;
        let mut escaped = false;
        loop {
            match self.peek()? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    self.pos += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.pos += 1,
                        b'u' => {
                            let hex = self.bytes.get(self.pos + 1..self.pos + 5)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.pos += 5;
                        }
                        _ => return None,
                    }
                }
                byte if byte < 0x20 => return None,
                _ => self.pos += 1,
            }
        }
        let bytes = self.bytes;
        let raw = &bytes[start..self.pos];
        self.pos += 1;
        Some(Raw { raw, escaped })
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.pos + word.len();
        (self.bytes.get(self.pos..end)? == word).then(|| self.pos = end)
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    fn number(&mut self) -> Option<()> {
        let _ = self.eat(b'-');
        match self.peek()? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat(b'.').is_some() {
            self.peek().filter(u8::is_ascii_digit)?;
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            self.peek().filter(u8::is_ascii_digit)?;
            self.digits();
        }
        Some(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
    }
}

/// A string as it is written between its quotes (valid UTF-8: the whole body is).
struct Raw<'a> {
    raw: &'a [u8],
    escaped: bool,
}

impl Raw<'_> {
    /// The string it stands for, its escapes decoded; `None` for an escape that stands
    /// for no character (a lone surrogate), which no key of a chat completion is.
    fn decoded(&self) -> Option<std::borrow::Cow<'_, str>> {
        let text = std::str::from_utf8(self.raw).ok()?;
        if !self.escaped {
            return Some(text.into());
        }
        let mut out = String::with_capacity(text.len());
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            let decoded = match chars.next()? {
                'b' => '\u{8}',
                'f' => '\u{c}',
                'n' => '\n',
                'r' => '\r',
                't' => '\t',
                'u' => {
                    let high = hex4(&mut chars)?;
                    if (0xD800..0xDC00).contains(&high) {
                        if (chars.next()?, chars.next()?) != ('\\', 'u') {
                            return None;
                        }
                        let low = hex4(&mut chars)?;
                        if !(0xDC00..0xE000).contains(&low) {
                            return None;
                        }
                        char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))?
                    } else {
                        char::from_u32(high)?
                    }
                }
                other => other, // `"`, `\`, `/`
            };
            out.push(decoded);
        }
        Some(out.into())
    }
}

fn hex4(chars: &mut std::str::Chars<'_>) -> Option<u32> {
    let mut value = 0;
    for _ in 0..4 {
        value = value * 16 + chars.next()?.to_digit(16)?;
    }
    Some(value)
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
