//! Characters that would break a line where a text is shown, written as their escapes:
//! [`escaped`], and [`one_line`] for a line a person or a model reads.

use std::borrow::Cow;

/// `text` with each character `escapes` picks written as its escape (`\n`, `\u{202e}`),
/// so that a text from outside (a key, a cell, what a server said) stays on its line;
/// borrowed when it picks none.
pub(crate) fn escaped(text: &str, escapes: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(&escapes) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escapes(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `text` as it is shown in a line a person or a model reads (a report's row, a tool
/// offered to the model, a keyed breaker's name): each character that [`breaks_a_line`] written as its escape,
/// so that what a tool said (its error text) cannot add a line of its own.
pub(crate) fn one_line(text: &str) -> Cow<'_, str> {
    escaped(text, breaks_a_line)
}

/// Control characters (a newline or a tab), the line and paragraph separators some
/// terminals break lines at, and the bidirectional embeddings, overrides and isolates
/// that would reorder the rest of the line.
fn breaks_a_line(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}'
        )
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::{escaped, one_line};

    #[test]
    fn only_the_characters_picked_are_escaped_and_nothing_else_is_copied() {
        assert_eq!(escaped("a\nb\tc", char::is_control), "a\\nb\\tc");
        assert_eq!(escaped("a\nb\tc", |c| c == '\n'), "a\\nb\tc");
        assert!(matches!(
            escaped("plain", char::is_control),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_line_break_a_separator_or_a_bidi_override_stays_on_its_line() {
        assert_eq!(
            one_line("boom\nweb_search\u{2028}x\u{202e}y"),
            "boom\\nweb_search\\u{2028}x\\u{202e}y"
        );
        assert_eq!(
            one_line("connect: Connection refused — 検索"),
            "connect: Connection refused — 検索"
        );
    }
}
