//! JSON text changed in place, every other byte kept as written: a reader that notes
//! where the values at chosen places are ([`noted_values`]), and a writer of a string's
//! inside ([`escape_json_into`]). A chat completion's content is labelled with them
//! ([`label_chat_completion`](super::label_chat_completion)), and the LLM client sets a
//! request's model.

use std::ops::Range;

/// How deep a text may nest before it is not read: serde_json's limit.
const MAX_DEPTH: usize = 128;

/// A place in a JSON text as the reader walks it: the place of each member's and each
/// element's value follows from the place of the object or array that holds it.
pub(crate) trait Place: Copy {
    /// The place of the whole text.
    const ROOT: Self;

    /// The place of the value of `key` in an object at this place.
    fn member(self, key: &str) -> Self;

    /// The place of an element of an array at this place.
    fn element(self) -> Self;

    /// Whether the value at this place is noted.
    fn noted(self) -> bool;
}

/// Where each value at a noted place ([`Place::noted`]) is in `text`, in the order they
/// start, each whole (a string with its quotes); `None` if `text` is not one JSON text
/// (RFC 8259), or nests deeper than 128 levels. Its strings' bytes are not read as UTF-8,
/// nor its escapes as characters, but for the keys the places follow: a key whose escape
/// stands for no character (a lone surrogate) is not JSON.
pub(crate) fn noted_values<P: Place>(text: &[u8]) -> Option<Vec<Range<usize>>> {
    let mut scan = Scan {
        bytes: text,
        pos: 0,
        depth: 0,
        noted: Vec::new(),
    };
    scan.value(P::ROOT)?;
    scan.whitespace();
    (scan.pos == text.len()).then_some(scan.noted)
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

/// The reader of [`noted_values`]. `None` from any step: not JSON.
struct Scan<'a> {
    bytes: &'a [u8],
    pos: usize,
    depth: usize,
    /// Where each noted value is, in the order they start.
    noted: Vec<Range<usize>>,
}

impl<'a> Scan<'a> {
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

    fn value<P: Place>(&mut self, place: P) -> Option<()> {
        self.whitespace();
        let start = self.pos;
        let noted = place.noted().then(|| {
            self.noted.push(start..start);
            self.noted.len() - 1
        });
        match self.peek()? {
            b'{' => self.nested(|scan| scan.object(place))?,
            b'[' => self.nested(|scan| scan.array(place))?,
            b'"' => self.string().map(drop)?,
            b't' => self.literal(b"true")?,
            b'f' => self.literal(b"false")?,
            b'n' => self.literal(b"null")?,
            _ => self.number()?,
        }
        if let Some(noted) = noted {
            self.noted[noted].end = self.pos;
        }
        Some(())
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

    fn object<P: Place>(&mut self, place: P) -> Option<()> {
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

    fn array<P: Place>(&mut self, place: P) -> Option<()> {
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
