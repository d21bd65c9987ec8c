//! A JSON request body's `"model"`, set to a provider's own without touching the rest of
//! the body.
//!
//! Only the model's value is replaced; every other byte is sent as the caller wrote it. A
//! body parsed into a JSON value and written again changes what that value cannot hold: an
//! integer past `u64` becomes a float (`"seed": 123456789012345678901234567890` goes out as
//! `1.2345678901234568e+29`), `1e400` or half of a surrogate pair (`"\ud83d"`, an emoji cut in
//! two by a client) does not parse at all, and such a body went to every provider with the
//! caller's model.

use std::ops::Range;

/// `body` with the value of each of its top-level `"model"` members set to `model`, if
/// `body` is a JSON object with one; `None` (the body is left as it is) if it is not.
pub(super) fn with_model(body: &[u8], model: &str) -> Option<Vec<u8>> {
    let values = model_values(body)?;
    let model = serde_json::to_string(model).ok()?;
    let mut out = Vec::with_capacity(body.len() + model.len());
    let mut from = 0;
    for value in values {
        out.extend_from_slice(&body[from..value.start]);
        out.extend_from_slice(model.as_bytes());
        from = value.end;
    }
    out.extend_from_slice(&body[from..]);
    Some(out)
}

/// Where the values of a JSON object's top-level `"model"` members are in `body`; `None`
/// if `body` is not a JSON object, or has no such member.
fn model_values(body: &[u8]) -> Option<Vec<Range<usize>>> {
    let mut scan = Scan { body, at: 0 };
    let mut values = Vec::new();
    scan.blank();
    scan.expect(b'{')?;
    scan.blank();
    if scan.peek() == Some(b'}') {
        scan.at += 1;
    } else {
        loop {
            let key = scan.string()?;
            scan.blank();
            scan.expect(b':')?;
            scan.blank();
            let start = scan.at;
            scan.value()?;
            if is_model(&body[key]) {
                values.push(start..scan.at);
            }
            scan.blank();
            match scan.next()? {
                b',' => scan.blank(),
                b'}' => break,
                _ => return None,
            }
        }
    }
    scan.blank();
    (scan.at == body.len() && !values.is_empty()).then_some(values)
}

/// Whether a member's key, quotes included, is `"model"`, however it is escaped.
fn is_model(key: &[u8]) -> bool {
    if key == b"\"model\"" {
        return true;
    }
    key.contains(&b'\\') && serde_json::from_slice::<String>(key).is_ok_and(|key| key == "model")
}

/// A reading position in a JSON text. It checks the structure (objects, arrays, strings)
/// and takes any other run of characters for a number or a literal: what it does not
/// check, the provider does.
struct Scan<'a> {
    body: &'a [u8],
    at: usize,
}

impl Scan<'_> {
    fn peek(&self) -> Option<u8> {
        self.body.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        Some(byte)
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.next()? == byte).then_some(())
    }

    /// Skips blanks.
    fn blank(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// A string, its quotes included.
    fn string(&mut self) -> Option<Range<usize>> {
        let start = self.at;
        self.expect(b'"')?;
        loop {
            match self.next()? {
                b'"' => return Some(start..self.at),
                b'\\' => {
                    self.next()?;
                }
                _ => {}
            }
        }
    }

    /// Skips a value. Nested objects and arrays are followed with a stack of their closing
    /// brackets, not by recursion: a hostile body nested a million deep costs memory in
    /// proportion to its size, not the stack.
    fn value(&mut self) -> Option<()> {
        let mut open = Vec::new();
        loop {
            match self.peek()? {
                b'"' => {
                    self.string()?;
                }
                b'{' => {
                    self.at += 1;
                    open.push(b'}');
                }
                b'[' => {
                    self.at += 1;
                    open.push(b']');
                }
                close @ (b'}' | b']') => {
                    if open.pop()? != close {
                        return None;
                    }
                    self.at += 1;
                }
                b',' | b':' if !open.is_empty() => self.at += 1,
                b' ' | b'\t' | b'\n' | b'\r' => self.blank(),
                _ => self.scalar()?,
            }
            if open.is_empty() {
                return Some(());
            }
        }
    }

    /// Skips a number or a literal: the characters up to the next blank or punctuation.
    fn scalar(&mut self) -> Option<()> {
        let start = self.at;
        while let Some(byte) = self.peek() {
            if matches!(
                byte,
                b' ' | b'\t' | b'\n' | b'\r' | b',' | b':' | b'}' | b']' | b'{' | b'[' | b'"'
            ) {
                break;
            }
            self.at += 1;
        }
        (self.at > start).then_some(())
    }
}

#[cfg(test)]
mod tests {
    use super::with_model;

    fn set(body: &str) -> Option<String> {
        with_model(body.as_bytes(), "m2").map(|out| String::from_utf8(out).unwrap())
    }

    #[test]
    fn only_the_models_value_changes() {
        let body =
            "{ \"model\" : \"m1\",\n  \"seed\": 123456789012345678901234567890, \"t\": 1e3 }";
        assert_eq!(
            set(body).unwrap(),
            "{ \"model\" : \"m2\",\n  \"seed\": 123456789012345678901234567890, \"t\": 1e3 }"
        );
    }

    #[test]
    fn a_body_a_json_parser_refuses_gets_the_model_all_the_same() {
        let half_an_emoji = r#"{"model":"gpt-4o-mini","messages":[{"content":"half \ud83d"}]}"#;
        assert_eq!(
            set(half_an_emoji).unwrap(),
            r#"{"model":"m2","messages":[{"content":"half \ud83d"}]}"#
        );
        assert_eq!(
            set(r#"{"x":1e400,"model":"a"}"#).unwrap(),
            r#"{"x":1e400,"model":"m2"}"#
        );
    }

    #[test]
    fn a_model_inside_the_messages_is_left_alone() {
        let body = r#"{"messages":[{"model":"keep","content":"a \"model\": {x}"}],"model":null}"#;
        assert_eq!(
            set(body).unwrap(),
            r#"{"messages":[{"model":"keep","content":"a \"model\": {x}"}],"model":"m2"}"#
        );
    }

    #[test]
    fn every_top_level_model_is_set_and_an_escaped_key_counts() {
        assert_eq!(
            set(r#"{"model":"a","\u006dodel":{"x":[1,2]}}"#).unwrap(),
            r#"{"model":"m2","\u006dodel":"m2"}"#
        );
    }

    #[test]
    fn a_model_name_is_written_as_a_json_string() {
        let out = with_model(br#"{"model":"a"}"#, "we\"ird\n").unwrap();
        assert_eq!(out, br#"{"model":"we\"ird\n"}"#.to_vec());
    }

    #[test]
    fn what_is_not_a_json_object_with_a_model_is_left_as_it_is() {
        for body in [
            "",
            "[]",
            "{}",
            r#"{"models":"a"}"#,
            r#"{"model":"a""#,
            r#"{"model":"a"} trailing"#,
            r#"{"model":[1,2}"#,
            r#"{"model":}"#,
            r#"{"model" "a"}"#,
            "\u{feff}{\"model\":\"a\"}",
            r#""model""#,
        ] {
            assert_eq!(set(body), None, "{body}");
        }
    }

    #[test]
    fn a_body_nested_a_million_deep_is_read_without_recursion() {
        let deep = format!(
            r#"{{"x":{}{},"model":"a"}}"#,
            "[".repeat(1 << 20),
            "]".repeat(1 << 20)
        );
        let out = set(&deep).unwrap();
        assert!(out.ends_with(r#","model":"m2"}"#));
        let unclosed = format!(r#"{{"model":"a","x":{}}}"#, "[".repeat(1 << 20));
        assert_eq!(set(&unclosed), None);
    }
}
