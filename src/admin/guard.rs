//! Who may use the admin service: the [`Guard`] the builder was given, checked on every
//! request's head before anything is read or done.

use std::fmt;
use std::sync::Arc;

use ::http::header::AUTHORIZATION;
use ::http::request::Parts;

/// A check of a request's head: `true` lets it through.
pub(super) type Authorize = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;

/// The guard of an admin service, chosen on its builder.
#[derive(Clone)]
pub(super) enum Guard {
    /// `Authorization: Bearer <token>` with this token, compared in constant time.
    Bearer(Arc<[u8]>),
    /// The application's own check of the request's head.
    Authorize(Authorize),
    /// No check: chosen on purpose with `open_to_anyone`.
    Open,
}

impl Guard {
    /// Whether the request whose head is `parts` may be served.
    pub(super) fn admits(&self, parts: &Parts) -> bool {
        match self {
            Guard::Bearer(token) => bearer_of(parts).is_some_and(|given| same_secret(token, given)),
            Guard::Authorize(authorize) => authorize(parts),
            Guard::Open => true,
        }
    }

    /// The builder method that chose it, for an error that names two.
    pub(super) fn name(&self) -> &'static str {
        match self {
            Guard::Bearer(_) => "bearer_token",
            Guard::Authorize(_) => "authorize",
            Guard::Open => "open_to_anyone",
        }
    }

    /// Whether a refusal should name the bearer scheme (`WWW-Authenticate: Bearer`).
    pub(super) fn is_bearer(&self) -> bool {
        matches!(self, Guard::Bearer(_))
    }

    /// A token a client can send in a header: visible ASCII, not empty.
    pub(super) fn token_is_valid(token: &str) -> bool {
        !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic())
    }
}

/// The token of the request's only `Authorization` header, if it is `Bearer <token>`
/// (the scheme in any case, RFC 9110 §11.1). Two `Authorization` headers are none.
fn bearer_of(parts: &Parts) -> Option<&[u8]> {
    let mut values = parts.headers.get_all(AUTHORIZATION).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let value = value.as_bytes();
    let scheme = b"bearer ";
    if value.len() <= scheme.len() || !value[..scheme.len()].eq_ignore_ascii_case(scheme) {
        return None;
    }
    let token = value[scheme.len()..].trim_ascii();
    (!token.is_empty()).then_some(token)
}

/// Whether `given` is `expected`, in a time that depends on `expected`'s length only:
/// every byte of the expected token is compared, whatever a wrong guess matches of it,
/// so the time of an answer tells an attacker nothing of how close a guess came.
fn same_secret(expected: &[u8], given: &[u8]) -> bool {
    let mut differ = u8::from(expected.len() != given.len());
    for (i, byte) in expected.iter().enumerate() {
        let guess = given.get(i).copied().unwrap_or(!byte);
        differ |= std::hint::black_box(byte ^ guess);
    }
    std::hint::black_box(differ) == 0
}

impl fmt::Debug for Guard {
    /// The kind of guard, never the token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Guard::Bearer(_) => "bearer token",
            Guard::Authorize(_) => "authorize",
            Guard::Open => "open to anyone",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(authorization: &[&str]) -> Parts {
        let mut request = ::http::Request::get("/").body(()).unwrap();
        for value in authorization {
            request
                .headers_mut()
                .append(AUTHORIZATION, value.parse().unwrap());
        }
        request.into_parts().0
    }

    #[test]
    fn a_bearer_guard_admits_its_token_only() {
        let guard = Guard::Bearer(Arc::from(&b"s3cret"[..]));
        assert!(guard.admits(&head(&["Bearer s3cret"])));
        assert!(guard.admits(&head(&["bearer  s3cret "])));
        for refused in [
            &[][..],
            &["Bearer"],
            &["Bearer "],
            &["Bearer s3cre"],
            &["Bearer s3cret2"],
            &["Bearer S3CRET"],
            &["Basic s3cret"],
            &["s3cret"],
            &["Bearer s3cret", "Bearer s3cret"],
        ] {
            assert!(!guard.admits(&head(refused)), "{refused:?}");
        }
    }

    #[test]
    fn secrets_compare_equal_only_when_every_byte_and_the_length_match() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"ab"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert!(!same_secret(b"abc", b""));
        // A given byte that is the complement of the expected one still differs.
        assert!(!same_secret(&[0x00], &[0xff]));
    }

    #[test]
    fn the_guard_shows_its_kind_never_its_token() {
        let guard = Guard::Bearer(Arc::from(&b"s3cret"[..]));
        assert_eq!(format!("{guard:?}"), "bearer token");
    }
}
