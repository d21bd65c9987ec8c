//! A refusal that names no request (feature `mcp-http`): what a server's answer to a POST
//! of one request means when it is an error about no request of ours.
//!
//! A server that cannot take a request answers its POST with an HTTP error, and often a
//! JSON-RPC error that names no request (no id, `null`, or the Python SDK's
//! `"server-error"`). Passed on as it is, such an error answers nothing the transport
//! waits for, and the call waits for its timeout. A POST carries one message, so its own
//! answer can only be about that one:
//!
//! - a refusal, with a session, that says the server does not know the session is a
//!   session the server forgot, as a `404` is: the call fails at once, is not sent again,
//!   and the supervisor makes a new session through the breaker's probe. The reference
//!   servers built on the TypeScript SDK (the everything server among them) answer a
//!   session from before they restarted with `400` and "Bad Request: No valid session ID
//!   provided" as a JSON-RPC error; the Python SDK's, with the same words as plain text.
//! - any other refusal is the server's failure (its HTTP status is not passed on: often a
//!   `5xx`): the call fails at once with it, counted against the server, not the tool.

use std::borrow::Cow;

use rmcp::model::{ClientJsonRpcMessage, JsonRpcError, JsonRpcMessage, RequestId};
use rmcp::transport::streamable_http_client::{StreamableHttpError, StreamableHttpPostResponse};

use super::quote::Secrets;

/// Whether a POST of `message` waits for an answer: a request.
pub(crate) fn awaits_answer(message: &ClientJsonRpcMessage) -> bool {
    matches!(message, JsonRpcMessage::Request(_))
}

/// The answer to a POST ([`awaits_answer`]: of a request), with a refusal that names no
/// request read as above; `session_attached`: the POST was sent in a session.
pub(crate) fn read<E: std::error::Error + Send + Sync + 'static>(
    secrets: &Secrets,
    awaits_answer: bool,
    session_attached: bool,
    answer: Result<StreamableHttpPostResponse, StreamableHttpError<E>>,
) -> Result<StreamableHttpPostResponse, StreamableHttpError<E>> {
    if !awaits_answer {
        return answer;
    }
    match answer {
        Ok(StreamableHttpPostResponse::Json(
            JsonRpcMessage::Error(JsonRpcError { id, error, .. }),
            _,
        )) if names_no_request(id.as_ref()) => {
            if session_attached && speaks_of_an_unknown_session(&error.message) {
                return Err(StreamableHttpError::SessionExpired);
            }
            Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                format!(
                    "the server refused the request without naming it: error {}: {}",
                    error.code.0,
                    secrets.said(&error.message)
                ),
            )))
        }
        Err(StreamableHttpError::UnexpectedServerResponse(text))
            if session_attached
                && (text.starts_with("HTTP 400") || text.starts_with("HTTP 404"))
                && speaks_of_an_unknown_session(&text) =>
        {
            Err(StreamableHttpError::SessionExpired)
        }
        other => other,
    }
}

/// Whether an error's id names no request: none, `null`, or the Python SDK's
/// `"server-error"`.
fn names_no_request(id: Option<&RequestId>) -> bool {
    match id {
        None => true,
        Some(RequestId::String(id)) => &**id == "server-error",
        Some(RequestId::Number(_)) => false,
    }
}

/// Whether a refusal says the server does not know the session: "No valid session ID
/// provided", "Session not found", "Server not initialized"...
fn speaks_of_an_unknown_session(message: &str) -> bool {
    const SAYINGS: [&str; 8] = [
        "no valid session",
        "session not found",
        "invalid session",
        "unknown session",
        "session expired",
        "session has expired",
        "session id is not",
        "not initialized",
    ];
    let message = message.to_ascii_lowercase();
    SAYINGS.iter().any(|saying| message.contains(saying))
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ClientRequest, ErrorCode, ErrorData, PingRequest};

    use super::*;

    type Answer = Result<StreamableHttpPostResponse, StreamableHttpError<std::io::Error>>;

    fn ping() -> ClientJsonRpcMessage {
        ClientJsonRpcMessage::request(
            ClientRequest::PingRequest(PingRequest::default()),
            RequestId::Number(7),
        )
    }

    fn refusal(message: &'static str, id: Option<RequestId>) -> Answer {
        Ok(StreamableHttpPostResponse::Json(
            JsonRpcMessage::Error(JsonRpcError {
                jsonrpc: Default::default(),
                id,
                error: ErrorData::new(ErrorCode(-32000), Cow::Borrowed(message), None),
            }),
            None,
        ))
    }

    fn server_error() -> Option<RequestId> {
        Some(RequestId::String("server-error".into()))
    }

    #[test]
    fn an_unknown_session_refused_without_naming_the_request_is_a_session_the_server_forgot() {
        for message in [
            "Bad Request: No valid session ID provided",
            "Session not found",
            "Bad Request: Server not initialized",
        ] {
            for id in [None, server_error()] {
                let answer = read(
                    &Secrets::default(),
                    awaits_answer(&ping()),
                    true,
                    refusal(message, id),
                );
                assert!(
                    matches!(answer, Err(StreamableHttpError::SessionExpired)),
                    "{message}: {answer:?}"
                );
            }
        }
        // The Python SDK's, as plain text: rmcp's error for a 400 that is not JSON-RPC.
        let plain: Answer = Err(StreamableHttpError::UnexpectedServerResponse(
            Cow::Borrowed("HTTP 400 Bad Request: Bad Request: No valid session ID provided"),
        ));
        assert!(matches!(
            read(&Secrets::default(), true, true, plain),
            Err(StreamableHttpError::SessionExpired)
        ));
    }

    #[test]
    fn another_refusal_without_naming_the_request_is_the_servers_failure_at_once() {
        for (session, message) in [
            (true, "Internal server error"),
            (true, "session rate limit exceeded"),
            // Outside a session (the handshake), even one that speaks of a session.
            (false, "No valid session ID provided"),
        ] {
            let answer = read(&Secrets::default(), true, session, refusal(message, None));
            match answer {
                Err(StreamableHttpError::UnexpectedServerResponse(text)) => {
                    assert!(text.contains(message), "{text}");
                }
                other => panic!("{message}: {other:?}"),
            }
        }
        let plain: Answer = Err(StreamableHttpError::UnexpectedServerResponse(
            Cow::Borrowed("HTTP 400 Bad Request: the arguments are wrong"),
        ));
        assert!(matches!(
            read(&Secrets::default(), true, true, plain),
            Err(StreamableHttpError::UnexpectedServerResponse(_))
        ));
    }

    #[test]
    fn a_notification_s_answer_and_an_error_naming_a_request_are_passed_on_as_they_are() {
        let notification = ClientJsonRpcMessage::notification(
            rmcp::model::ClientNotification::InitializedNotification(Default::default()),
        );
        let answer = read(
            &Secrets::default(),
            awaits_answer(&notification),
            true,
            refusal("Session not found", None),
        );
        assert!(matches!(answer, Ok(StreamableHttpPostResponse::Json(..))));
        let answer = read(
            &Secrets::default(),
            true,
            true,
            refusal("session gone", Some(RequestId::Number(3))),
        );
        assert!(matches!(answer, Ok(StreamableHttpPostResponse::Json(..))));
    }
}
