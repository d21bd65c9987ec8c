//! Characters that would break a line where a text is shown, written as their escapes:
//! [`escaped`].

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

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::escaped;

    #[test]
    fn only_the_characters_picked_are_escaped_and_nothing_else_is_copied() {
        assert_eq!(escaped("a\nb\tc", char::is_control), "a\\nb\\tc");
        assert_eq!(escaped("a\nb\tc", |c| c == '\n'), "a\\nb\tc");
        assert!(matches!(
            escaped("plain", char::is_control),
            Cow::Borrowed(_)
        ));
    }
}
