//! Credentials out of texts that leave the process: [`redact`].

use std::borrow::Cow;

/// The text with what looks like a credential replaced by `[redacted]`: a URL's user
/// information (`https://user:pass@host` becomes `https://[redacted]@host`) and query
/// string (`?key=…` becomes `?[redacted]`), a scheme-relative URL's too (`//user:pass@host`,
/// at the start of the text or after whitespace, a bracket, a quote, `=` or `,`), and the value after `Bearer `, `Basic `,
/// `api-key=`, `api_key=`, `token=`, `key=`, `password=`, `passwd=`, `secret=`,
/// `api-key: ` (`X-Api-Key: …`) or `Authorization: Token ` outside a URL, and the whole
/// value of a `Cookie: ` or `Set-Cookie: ` header, up to the end of its line; and a
/// provider's key written bare, known by its shape: a word that starts with `sk-`
/// (OpenAI, Anthropic's `sk-ant-`, OpenRouter's `sk-or-`), `AIza` (Google), `gsk_` (Groq),
/// `hf_` (Hugging Face), `ghp_`, `gho_` or `github_pat_` (GitHub), `xoxb-` or `xoxp-`
/// (Slack) or `AKIA` (AWS), followed by at least 16 letters, digits, `-` or `_`, keeps its
/// prefix and loses the rest (`sk-[redacted]`).
///
/// The crate runs every message it shows outside the process (failure messages in
/// reports, headers and route descriptions) through it; use it for your own texts too.
/// It errs towards removing too much: a query string without a secret goes as well, and
/// all of it goes up to the next whitespace, `"`, `<` or `>`, brackets, quotes and
/// backticks in it included (a URL keeps them as they are), save the `:`, `,`, `.`, `;`
/// or `!` that end it and, before them, a `)`, `'` or backtick that closes one opened
/// just before the URL. After a marker, a quoted value goes up to its closing quote
/// (`api_key="…"` becomes `api_key="[redacted]"`; a quote escaped as in JSON, `\"`, to
/// the same escaped quote), and a space in a marker stands for any run of spaces and tabs
/// (`Bearer<TAB>…`), which may be empty after a colon (`X-Api-Key:…`). A URL's user
/// information is hidden up to its last `@` before the path, a raw `?` or `#` in a
/// password included.
///
/// ```
/// use tower_circuit_breaker::redact;
///
/// let message = "error sending request for url (https://bob:hunter2@api.example.com/v1/chat?key=SECRET)";
/// assert_eq!(
///     redact(message),
///     "error sending request for url (https://[redacted]@api.example.com/v1/chat?[redacted])",
/// );
/// assert_eq!(redact("Authorization: Bearer sk-123"), "Authorization: Bearer [redacted]");
/// assert_eq!(
///     redact("failed (https://h/v1?q=(x)&sig=SECRET)"),
///     "failed (https://h/v1?[redacted])",
/// );
/// assert_eq!(redact(r#"api_key="sk-123" rejected"#), r#"api_key="[redacted]" rejected"#);
/// assert_eq!(
///     redact("invalid key sk-proj-4f9aQ2x7Lm0ZpR8sT1vB"),
///     "invalid key sk-[redacted]",
/// );
/// assert_eq!(redact("connection refused"), "connection refused"); // borrowed, unchanged
/// ```
pub fn redact(text: &str) -> Cow<'_, str> {
    if !needs_redaction(text) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    // Where the run of scheme characters last looked at, which was no URL, ends: no URL
    // starts inside it either (each would end where it ends), so none is looked for
    // there again, and a long run is read once, not once per character.
    let mut no_url_until = 0;
    while !rest.is_empty() {
        let at = text.len() - rest.len();
        let url = if at >= no_url_until {
            url_len(rest, text[..at].chars().next_back())
        } else {
            None
        };
        if url.is_none() && at >= no_url_until {
            no_url_until = at + scheme_len(rest);
        }
        if let Some(len) = url {
            let before = text[..at].chars().next_back();
            redact_url(&rest[..len], before, &mut out);
            rest = &rest[len..];
        } else if let Some(Secret { start, len }) =
            secret_after_marker(rest).or_else(|| key_shaped(rest, text[..at].chars().next_back()))
        {
            out.push_str(&rest[..start]);
            out.push_str(REDACTED);
            rest = &rest[start + len..];
        } else {
            let c = rest.chars().next().expect("not empty");
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    Cow::Owned(out)
}

/// What stands where a secret was.
pub(crate) const REDACTED: &str = "[redacted]";

/// Words after which a secret follows (compared without case). A space in one stands
/// for any run of spaces and tabs, which may be empty after a `:` (`X-Api-Key:…`).
const MARKERS: [&str; 12] = [
    "bearer ",
    "basic ",
    "api-key=",
    "api_key=",
    "token=",
    "key=",
    "password=",
    "passwd=",
    "secret=",
    "api-key: ",
    "authorization: token ",
    "cookie: ",
];

/// How a provider's key written bare starts (compared with case): what follows is
/// hidden when it is long enough to be a key ([`KEY_TAIL`]).
const KEY_PREFIXES: [&str; 11] = [
    "sk-",
    "AIza",
    "gsk_",
    "hf_",
    "ghp_",
    "gho_",
    "github_pat_",
    "xoxb-",
    "xoxp-",
    "AKIA",
    "ASIA",
];

/// The fewest characters after a prefix of [`KEY_PREFIXES`] that make a key: fewer, and
/// it is a word (`sk-learn`).
const KEY_TAIL: usize = 16;

fn needs_redaction(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("://")
        || text.contains("//")
        || MARKERS
            .iter()
            .any(|marker| lower.contains(marker.split(' ').next().unwrap_or(marker)))
        || KEY_PREFIXES.iter().any(|prefix| text.contains(prefix))
}

/// Whether `c` may be part of a key written bare.
fn in_key(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_')
}

/// A provider's key written bare at the start of `text` (`before`: the character before
/// it, which must not be part of a word): the part after its prefix.
fn key_shaped(text: &str, before: Option<char>) -> Option<Secret> {
    if before.is_some_and(in_key) {
        return None;
    }
    let prefix = KEY_PREFIXES.iter().find(|p| text.starts_with(*p))?;
    let len = text[prefix.len()..]
        .find(|c: char| !in_key(c))
        .unwrap_or(text.len() - prefix.len());
    (len >= KEY_TAIL).then_some(Secret {
        start: prefix.len(),
        len,
    })
}

/// The length of the URL that starts `text`, if one does (`scheme://…`, or `//…` after
/// what no URL holds: `before` is the character before `text`, see [`scheme_relative`]).
///
/// A URL with a query or a fragment runs to the first whitespace, `"`, `<` or `>` (which
/// a URL never holds as they are): a query may hold `)`, `'` and backticks as they are
/// (reqwest's URLs keep them), and all of it is hidden. One without ends at the first
/// whitespace, quote, bracket, angle bracket or backtick past its user information,
/// which may hold `)` and `'` as they are (`https://bob:hun)ter2@host`).
fn url_len(text: &str, before: Option<char>) -> Option<usize> {
    let start = if scheme_relative(text, before) {
        2
    } else {
        let scheme = scheme_len(text);
        if scheme == 0 || !text[scheme..].starts_with("://") {
            return None;
        }
        scheme + 3
    };
    let authority = text[start..]
        .find(|c: char| c.is_whitespace() || matches!(c, '/' | '?' | '#' | '"' | '<' | '>' | '`'))
        .map_or(text.len(), |end| start + end);
    let past_user = text[start..authority]
        .rfind('@')
        .map_or(start, |at| start + at + 1);
    let end = text[past_user..]
        .find(|c: char| c.is_whitespace() || matches!(c, '"' | '<' | '>'))
        .map_or(text.len(), |end| past_user + end);
    if text[past_user..end].contains(['?', '#']) {
        return Some(end);
    }
    let len = text[past_user..end]
        .find(['\'', ')', '`'])
        .map_or(end, |at| past_user + at);
    Some(len)
}

/// Whether `text` starts with a scheme-relative URL (`//user:pass@host/path`, as an
/// authority is written in a link): `//` at the start of the text or after whitespace, an
/// opening bracket, a quote, `=` or `,`, never inside a word or a path (`a//b`, `/x//y`).
fn scheme_relative(text: &str, before: Option<char>) -> bool {
    text.starts_with("//")
        && before.is_none_or(|c| {
            c.is_whitespace() || matches!(c, '(' | '[' | '{' | '<' | '"' | '\'' | '`' | '=' | ',')
        })
}

/// The length of the run of characters a URL's scheme is made of that starts `text`.
fn scheme_len(text: &str) -> usize {
    text.bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        .count()
}

/// The bracket or quote that closes `opening`, for a URL written inside one: `(…)`,
/// `'…'`, `` `…` ``.
fn closing(opening: Option<char>) -> Option<char> {
    match opening? {
        '(' => Some(')'),
        '\'' => Some('\''),
        '`' => Some('`'),
        _ => None,
    }
}

/// Writes `url` redacted to `out`; `before` is the character before it in the text.
fn redact_url(url: &str, before: Option<char>, out: &mut String) {
    // A scheme-relative URL starts with its `//`; any other, with its scheme's `://`.
    let past_scheme = match url.strip_prefix("//") {
        Some(_) => 2,
        None => url.find("://").expect("a URL") + 3,
    };
    let (scheme, rest) = url.split_at(past_scheme);
    out.push_str(scheme);
    // User information ends at the last `@` before any query or fragment, even where a
    // hostile or mistyped one holds a raw `/`, or before any path, even where one holds a
    // raw `?` or `#` (`redis://admin:pa#ss@host`): all of it is hidden, none taken for a
    // path, a query or a fragment.
    let before_query = rest.find(['?', '#']).unwrap_or(rest.len());
    let before_path = rest.find('/').unwrap_or(rest.len());
    let host_start = [before_query, before_path]
        .into_iter()
        .filter_map(|end| rest[..end].rfind('@'))
        .max()
        .map_or(0, |at| at + 1);
    let authority_end = rest[host_start..]
        .find(['/', '?', '#'])
        .map_or(rest.len(), |end| host_start + end);
    let (authority, rest) = rest.split_at(authority_end);
    match authority.rfind('@') {
        Some(at) => {
            out.push_str(REDACTED);
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    let path_end = rest.find(['?', '#']).unwrap_or(rest.len());
    out.push_str(&rest[..path_end]);
    // What ends a sentence after the URL (`(…?key=k): refused`) and the bracket or quote
    // that closes one opened just before it are not the query's: they are kept (all that
    // shows of the query is that it ends with them).
    let rest = &rest[path_end..];
    let mut kept = rest.len() - rest.trim_end_matches(TRAILING).len();
    if let Some(close) = closing(before) {
        let inside = &rest[..rest.len() - kept];
        if inside.len() > 1 && inside.ends_with(close) {
            kept += close.len_utf8();
        }
    }
    let (rest, tail) = rest.split_at(rest.len() - kept);
    // A query and a fragment are hidden whole: either may carry a key or a token
    // (`#access_token=...`).
    let (query, fragment) = rest.split_at(rest.find('#').unwrap_or(rest.len()));
    if query.len() > 1 {
        out.push('?');
        out.push_str(REDACTED);
    }
    if fragment.len() > 1 {
        out.push('#');
        out.push_str(REDACTED);
    }
    out.push_str(tail);
}

/// Punctuation that ends a sentence or a clause after a URL.
const TRAILING: [char; 5] = [':', ',', '.', ';', '!'];

/// Where a secret's value is, after a marker.
struct Secret {
    /// Where the value starts: past the marker, its spaces and an opening quote.
    start: usize,
    /// The value's length, up to a closing quote (left in the text) or, unquoted, to
    /// the first whitespace, quote, `,`, `;`, `&` or `)`.
    len: usize,
}

/// The length of the marker at the start of `text`, with the runs of spaces and tabs
/// its spaces stand for.
fn marker_len(text: &str) -> Option<usize> {
    MARKERS.iter().find_map(|marker| {
        let text = text.as_bytes();
        let mut at = 0;
        let mut previous = None;
        for m in marker.bytes() {
            if m == b' ' {
                let blanks = text[at..]
                    .iter()
                    .take_while(|b| matches!(b, b' ' | b'\t'))
                    .count();
                if blanks == 0 && previous != Some(b':') {
                    return None;
                }
                at += blanks;
            } else if text.get(at).is_some_and(|b| b.eq_ignore_ascii_case(&m)) {
                at += 1;
            } else {
                return None;
            }
            previous = Some(m);
        }
        Some(at)
    })
}

/// The secret after a marker at the start of `text`: a quoted value (`"…"` or `'…'`,
/// with backslash escapes) up to its closing quote, or to the end of the text when it
/// has none; else up to the first whitespace, quote, `,`, `;`, `&` or `)`.
fn secret_after_marker(text: &str) -> Option<Secret> {
    let marker = marker_len(text)?;
    let value = &text[marker..];
    // A quote escaped as in JSON (`api_key=\"…\"` inside a JSON string) opens a value
    // that the same escaped quote closes.
    if let Some(quote @ ('"' | '\'')) = value.strip_prefix('\\').and_then(|v| v.chars().next()) {
        let inside = &value[2..];
        let len = inside
            .find(format!("\\{quote}").as_str())
            .unwrap_or(inside.len());
        return (len > 0).then_some(Secret {
            start: marker + 2,
            len,
        });
    }
    let (start, len) = match value.chars().next() {
        Some(quote @ ('"' | '\'')) => {
            let inside = &value[1..];
            let mut escaped = false;
            let len = inside
                .char_indices()
                .find(|&(_, c)| {
                    let closes = !escaped && c == quote;
                    escaped = !escaped && c == '\\';
                    closes
                })
                .map_or(inside.len(), |(at, _)| at);
            (marker + 1, len)
        }
        // A cookie header's value is every cookie in it, `;` and spaces included.
        _ if text
            .get(..6)
            .is_some_and(|m| m.eq_ignore_ascii_case("cookie")) =>
        {
            let len = value.find(['\n', '\r']).unwrap_or(value.len());
            (marker, value[..len].trim_end().len())
        }
        _ => {
            let len = value
                .find(|c: char| {
                    c.is_whitespace() || matches!(c, '"' | '\'' | ',' | ';' | '&' | ')')
                })
                .unwrap_or(value.len());
            (marker, len)
        }
    };
    (len > 0).then_some(Secret { start, len })
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn urls_lose_their_user_information_and_query_but_keep_host_and_path() {
        assert_eq!(
            redact("GET http://u:p@h:8080/a/b?x=1&key=2#frag failed"),
            "GET http://[redacted]@h:8080/a/b?[redacted]#[redacted] failed"
        );
        assert_eq!(redact("http://h/a"), "http://h/a");
    }

    #[test]
    fn a_cookie_headers_whole_value_never_shows() {
        assert_eq!(
            redact("sent Cookie: session=abc123; csrf=xyz\nHost: h"),
            "sent Cookie: [redacted]\nHost: h"
        );
        assert_eq!(
            redact("set-cookie:\tid=s3cret; Path=/; HttpOnly"),
            "set-cookie:\t[redacted]"
        );
        assert_eq!(redact("cookies are off"), "cookies are off");
    }

    #[test]
    fn a_token_in_a_fragment_and_a_raw_slash_in_a_password_never_show() {
        assert_eq!(
            redact("https://h/cb#access_token=s3cret"),
            "https://h/cb#[redacted]"
        );
        let shown = redact("redis://user:pa/ss@host:6379/0 refused");
        assert!(!shown.contains("pa") && !shown.contains("ss@"), "{shown}");
        assert_eq!(shown, "redis://[redacted]@host:6379/0 refused");
    }

    #[test]
    fn a_password_holding_a_bracket_or_a_quote_never_shows() {
        // RFC 3986 allows both in user information as they are, and reqwest's URLs keep
        // them: the URL does not end there.
        assert_eq!(
            redact("error sending request for url (https://bob:hun)ter2@api.example.com/v1)"),
            "error sending request for url (https://[redacted]@api.example.com/v1)"
        );
        assert_eq!(
            redact("redis://default:p'ss)word@cache:6379 refused"),
            "redis://[redacted]@cache:6379 refused"
        );
        // A bracket after a URL without user information still ends it.
        assert_eq!(redact("(see http://h/a) then"), "(see http://h/a) then");
    }

    #[test]
    fn nothing_of_a_query_shows_past_a_bracket_a_quote_or_a_backtick_in_it() {
        // reqwest's URLs keep `)`, `'` and backticks in a query as they are.
        for (message, shown) in [
            (
                "error sending request for url (http://h/v1/chat?q=(x)&sig=SECRET)",
                "error sending request for url (http://h/v1/chat?[redacted])",
            ),
            (
                "error sending request for url (http://h/v1/chat?a=b`c&sig=SECRET)",
                "error sending request for url (http://h/v1/chat?[redacted])",
            ),
            (
                "url (http://h/v1/chat?x=)&sig=SECRET) is not under the base",
                "url (http://h/v1/chat?[redacted]) is not under the base",
            ),
            (
                "see 'http://h/a?k=it's&sig=SECRET' now",
                "see 'http://h/a?[redacted]' now",
            ),
            ("`http://h/a#t=`SECRET``", "`http://h/a#[redacted]`"),
            ("http://h/a?q=)SECRET", "http://h/a?[redacted]"),
            ("http://h/a?sig=SECRET)", "http://h/a?[redacted]"),
            // What follows the closing bracket stays.
            (
                "error sending request for url (http://h/a?q=(x)&sig=SECRET): refused",
                "error sending request for url (http://h/a?[redacted]): refused",
            ),
        ] {
            assert_eq!(redact(message), shown, "{message}");
        }
    }

    #[test]
    fn a_quoted_secret_after_a_marker_is_removed_and_its_quotes_kept() {
        assert_eq!(
            redact(r#"auth failed: api_key="sk-live-SECRET123""#),
            r#"auth failed: api_key="[redacted]""#
        );
        assert_eq!(
            redact("password='SECRET 123' rejected"),
            "password='[redacted]' rejected"
        );
        assert_eq!(redact(r#"token="SEC\"RET" x"#), r#"token="[redacted]" x"#);
        // A quote never closed: the rest of the text goes.
        assert_eq!(redact("secret=\"SECRET123 and more"), "secret=\"[redacted]");
    }

    #[test]
    fn a_bearer_token_after_several_spaces_or_a_tab_is_removed() {
        assert_eq!(redact("Bearer  SECRET123"), "Bearer  [redacted]");
        assert_eq!(redact("Bearer\tSECRET123"), "Bearer\t[redacted]");
        assert_eq!(
            redact("X-Api-Key:\t \"SECRET123\""),
            "X-Api-Key:\t \"[redacted]\""
        );
        assert_eq!(
            redact("Authorization: Token   SECRET123"),
            "Authorization: Token   [redacted]"
        );
    }

    #[test]
    fn passwords_secrets_and_api_key_headers_are_removed() {
        assert_eq!(redact("password=hunter2 x"), "password=[redacted] x");
        assert_eq!(redact("X-Api-Key: hunter2"), "X-Api-Key: [redacted]");
        assert_eq!(
            redact("Authorization: Token hunter2"),
            "Authorization: Token [redacted]"
        );
        assert_eq!(redact("client secret=abc;"), "client secret=[redacted];");
    }

    #[test]
    fn keys_after_markers_are_removed_whatever_their_case() {
        assert_eq!(redact("api_key=abc&x=1"), "api_key=[redacted]&x=1");
        assert_eq!(redact("BEARER abc.def"), "BEARER [redacted]");
        assert_eq!(redact("token=t, other"), "token=[redacted], other");
    }

    #[test]
    fn a_marker_inside_a_word_is_only_redacted_with_its_value() {
        // "monkey=1" ends with "key=": its value goes too, erring towards less.
        assert_eq!(redact("monkey=1"), "mon".to_owned() + "key=[redacted]");
    }

    #[test]
    fn a_providers_key_written_bare_loses_all_but_its_prefix() {
        for (key, shown) in [
            ("sk-proj-4f9aQ2x7Lm0ZpR8sT1vB", "sk-[redacted]"),
            ("sk-ant-api03-AbCdEfGhIjKlMnOpQr", "sk-[redacted]"),
            ("AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrS", "AIza[redacted]"),
            ("ghp_16C7e42F292c6912E7710c838347Ae178B4a", "ghp_[redacted]"),
            ("AKIAIOSFODNN7EXAMPLE", "AKIA[redacted]"),
            ("gsk_0123456789abcdefXYZ", "gsk_[redacted]"),
        ] {
            assert_eq!(
                redact(&format!("rejected ({key}), try again")),
                format!("rejected ({shown}), try again"),
            );
            assert_eq!(redact(key), shown);
        }
    }

    #[test]
    fn a_word_that_only_starts_like_a_key_is_kept() {
        for text in [
            "pip install sk-learn",
            "the task-sk-0123456789abcdefgh is done",
            "AKIA1",
            "ask-0123456789abcdefghij",
        ] {
            assert_eq!(redact(text), text);
        }
    }

    #[test]
    fn text_without_secrets_is_borrowed() {
        assert!(matches!(
            redact("503 Service Unavailable"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn unicode_around_secrets_is_kept() {
        assert_eq!(redact("é key=ü ok"), "é key=[redacted] ok");
    }

    #[test]
    fn a_marker_with_any_blanks_in_it_or_none_after_its_colon_still_hides_the_value() {
        for text in [
            "Authorization:\tToken SECRET",
            "Authorization:  Token SECRET",
            "authorization:token\tSECRET",
            "X-Api-Key:SECRET",
            "x-api-key:\t SECRET",
        ] {
            let shown = redact(text);
            assert!(!shown.contains("SECRET"), "{text:?} -> {shown:?}");
            assert!(shown.contains("[redacted]"), "{text:?} -> {shown:?}");
        }
        assert_eq!(redact("X-Api-Key:SECRET"), "X-Api-Key:[redacted]");
    }

    #[test]
    fn a_json_escaped_quoted_secret_after_a_marker_is_hidden_and_its_quotes_kept() {
        assert_eq!(
            redact(r#"{"error":"invalid api_key=\"SECRET\" given"}"#),
            r#"{"error":"invalid api_key=\"[redacted]\" given"}"#
        );
        let unclosed = redact(r#"{"error":"api_key=\"SECRET"#);
        assert!(!unclosed.contains("SECRET"), "{unclosed}");
    }

    #[test]
    fn a_raw_hash_or_question_mark_in_a_password_shows_no_user_information() {
        for text in [
            "redis://admin:pa#ssw0rd@cache:6379 refused",
            "redis://admin:pa?ssw0rd@cache:6379 refused",
        ] {
            let shown = redact(text);
            assert!(!shown.contains("admin"), "{text} -> {shown}");
            assert!(!shown.contains("ssw0rd"), "{text} -> {shown}");
        }
        assert_eq!(
            redact("redis://admin:pa#ssw0rd@cache:6379 refused"),
            "redis://[redacted]@cache:6379 refused"
        );
        // An `@` in a query past a path is not taken for user information.
        assert_eq!(
            redact("https://h/v1?email=a@b failed"),
            "https://h/v1?[redacted] failed"
        );
    }

    #[test]
    fn a_scheme_relative_urls_user_information_and_query_never_show() {
        assert_eq!(
            redact("//bob:hunter2@api.example.com/v1?key=SECRET"),
            "//[redacted]@api.example.com/v1?[redacted]"
        );
        assert_eq!(
            redact("redirect to (//bob:hunter2@h/x) refused"),
            "redirect to (//[redacted]@h/x) refused"
        );
        assert_eq!(
            redact(r#"href="//bob:hun)ter2@h/""#),
            r#"href="//[redacted]@h/""#
        );
        // Inside a word or a path, `//` starts no URL.
        for text in ["a//b@c", "/usr//lib@1", "// a comment", "x //"] {
            assert_eq!(redact(text), text);
        }
    }

    #[test]
    fn a_long_run_of_letters_is_read_once_not_once_per_letter() {
        // A text a server sends may be this long.
        let long = format!("see http://h/ and {} end", "a".repeat(400_000));
        // Read once per letter, this took over half an hour in a debug build.
        let shown = redact(&long);
        assert_eq!(shown, long);
    }
}
