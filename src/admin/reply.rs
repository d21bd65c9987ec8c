//! What the admin service answers: JSON bodies ([`AdminBody`]), and the errors a bad
//! request gets ([`Problem`]).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use ::http::header::{
    HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, WWW_AUTHENTICATE,
};
use ::http::{Method, Response, StatusCode};
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// `response` as the answer to a HEAD request: the same status and headers, with the
/// length of the body it leaves out (RFC 9110 §9.3.2).
pub(super) fn head_of(response: Response<AdminBody>) -> Response<AdminBody> {
    let (mut parts, body) = response.into_parts();
    parts
        .headers
        .insert(CONTENT_LENGTH, HeaderValue::from(body.as_bytes().len()));
    Response::from_parts(parts, AdminBody::default())
}

/// The body of an admin response: one JSON document, sent in one frame.
#[derive(Debug, Clone, Default)]
pub struct AdminBody {
    bytes: Option<Bytes>,
}

impl AdminBody {
    fn new(bytes: Bytes) -> Self {
        AdminBody {
            bytes: (!bytes.is_empty()).then_some(bytes),
        }
    }

    /// The bytes not sent yet.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.as_deref().unwrap_or_default()
    }
}

impl Body for AdminBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.bytes.take().map(|bytes| Ok(Frame::data(bytes))))
    }

    fn is_end_stream(&self) -> bool {
        self.bytes.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.bytes.as_ref().map_or(0, |bytes| bytes.len() as u64))
    }
}

/// A response with `value` as its JSON body.
pub(super) fn json(status: StatusCode, value: &impl serde::Serialize) -> Response<AdminBody> {
    // Serializing the admin's own views and snapshots cannot fail: no map has a
    // non-string key, no number is a float that is not finite.
    let bytes = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    let mut response = Response::new(AdminBody::new(Bytes::from(bytes)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Why a request gets no answer but an error: a status, a code a program can match
/// on, and a message for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Problem {
    status: StatusCode,
    code: &'static str,
    message: String,
    allow: Option<String>,
    /// Whether to answer `WWW-Authenticate: Bearer`.
    challenge: bool,
}

#[derive(serde::Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(serde::Serialize)]
struct ErrorDetail<'a> {
    code: &'a str,
    message: &'a str,
}

impl Problem {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Problem {
            status,
            code,
            message: message.into(),
            allow: None,
            challenge: false,
        }
    }

    pub(super) fn not_found() -> Self {
        Problem::new(StatusCode::NOT_FOUND, "not_found", "no such admin path")
    }

    pub(super) fn unknown(what: &str, name: &str) -> Self {
        let code = if what == "breaker" {
            "unknown_breaker"
        } else {
            "unknown_kill_switch"
        };
        Problem::new(
            StatusCode::NOT_FOUND,
            code,
            format!("no {what} named {name:?}"),
        )
    }

    pub(super) fn bad_request(message: impl Into<String>) -> Self {
        Problem::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub(super) fn method_not_allowed(allowed: Method) -> Self {
        // Every path that answers GET answers HEAD too (RFC 9110 §9.1), and its `Allow`
        // says so.
        let methods = if allowed == Method::GET {
            "GET, HEAD".to_owned()
        } else {
            allowed.to_string()
        };
        let mut problem = Problem::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("this path answers {methods} only"),
        );
        problem.allow = Some(methods);
        problem
    }

    /// A request the guard refused: no credentials, or the wrong ones (the same answer
    /// for both, so it tells nothing of what was close). `bearer`: the guard takes a
    /// bearer token, and says so (`WWW-Authenticate: Bearer`, RFC 6750 §3).
    pub(super) fn unauthorized(bearer: bool) -> Self {
        let mut problem = Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this admin service needs the operator's credentials",
        );
        problem.challenge = bearer;
        problem
    }

    pub(super) fn mutations_disabled() -> Self {
        Problem::new(
            StatusCode::FORBIDDEN,
            "mutations_disabled",
            "this admin service only reads: changes are not enabled",
        )
    }

    pub(super) fn body_timed_out(wait: std::time::Duration) -> Self {
        Problem::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_timed_out",
            format!("the request body was not whole within {} s", wait.as_secs()),
        )
    }

    pub(super) fn body_too_large(limit: usize) -> Self {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the request body is larger than {limit} bytes"),
        )
    }

    #[cfg(test)]
    pub(super) fn status(&self) -> StatusCode {
        self.status
    }

    /// The JSON error response: `{"error": {"code": "...", "message": "..."}}`.
    pub(super) fn response(&self) -> Response<AdminBody> {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: &self.message,
            },
        };
        let mut response = json(self.status, &body);
        if let Some(allow) = &self.allow {
            if let Ok(value) = HeaderValue::from_str(allow) {
                response.headers_mut().insert(ALLOW, value);
            }
        }
        if self.challenge {
            response
                .headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
