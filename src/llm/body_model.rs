//! A JSON request body's `"model"`, set to a provider's own without touching the rest of
//! the body.
//!
//! Only the model's value is replaced; every other byte is sent as the caller wrote it. A
//! body parsed into a JSON value and written again changes what that value cannot hold: an
//! integer past `u64` becomes a float (`"seed": 123456789012345678901234567890` goes out as
//! `1.2345678901234568e+29`), `1e400` or half of a surrogate pair (`"\ud83d"`, an emoji cut in
//! two by a client) does not parse at all, and such a body went to every provider with the
//! caller's model.

use crate::http::json_text::{self, escape_json_into};

/// `body` with the value of each of its top-level `"model"` members set to `model`, if
/// `body` is a JSON object with one; `None` (the body is left as it is) if it is not.
pub(super) fn with_model(body: &[u8], model: &str) -> Option<Vec<u8>> {
    let values = json_text::noted_values::<Place>(body)?;
    if values.is_empty() {
        return None;
    }
    let mut quoted = String::with_capacity(model.len() + 2);
    quoted.push('"');
    escape_json_into(model, &mut quoted);
    quoted.push('"');
    let mut out = Vec::with_capacity(body.len() + quoted.len());
    let mut from = 0;
    for value in values {
        out.extend_from_slice(&body[from..value.start]);
        out.extend_from_slice(quoted.as_bytes());
        from = value.end;
    }
    out.extend_from_slice(&body[from..]);
    Some(out)
}

/// Where a value sits in a request body: the value of its top-level `"model"`, or
/// anywhere else.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Root,
    Model,
    Elsewhere,
}

impl json_text::Place for Place {
    const ROOT: Place = Place::Root;

    fn member(self, key: &str) -> Place {
        match (self, key) {
            (Place::Root, "model") => Place::Model,
            _ => Place::Elsewhere,
        }
    }

    fn element(self) -> Place {
        Place::Elsewhere
    }

    fn noted(self) -> bool {
        self == Place::Model
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
    fn a_body_nested_as_deep_as_serde_json_reads_gets_the_model_and_a_deeper_one_is_left() {
        // 127 arrays inside the object: 128 levels, serde_json's limit.
        let deep = format!(
            r#"{{"x":{}{},"model":"a"}}"#,
            "[".repeat(127),
            "]".repeat(127)
        );
        assert!(set(&deep).unwrap().ends_with(r#","model":"m2"}"#));
        // A million: not read past the limit, so the stack holds, and the body goes as it is.
        let deeper = format!(
            r#"{{"x":{}{},"model":"a"}}"#,
            "[".repeat(1 << 20),
            "]".repeat(1 << 20)
        );
        assert_eq!(set(&deeper), None);
        let unclosed = format!(r#"{{"model":"a","x":{}}}"#, "[".repeat(1 << 20));
        assert_eq!(set(&unclosed), None);
    }
}
