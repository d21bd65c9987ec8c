//! A refusal that names no request (feature `mcp-http`): what a server's JSON-RPC error
//! without an id, answering a POST of one request, means.
//!
//! A server that cannot take a request answers its POST with an HTTP error and a JSON-RPC
//! error that names no request. The reference servers built on the TypeScript and Python
//! SDKs do so for a session they do not know (one from before they restarted): `400`,
//! "Bad Request: No valid session ID provided", where the specification says `404`. Passed
//! on as it is, such an error answers no request the transport waits for, and the call
//! waits for its timeout while its session stays in use. A POST carries one message, so
//! its own answer can only be about that one:
//!
//! - an error that says the session is unknown (it speaks of the session, or of a server
//!   not initialized) is read as a session the server forgot, as a `404` is: the call
//!   fails at once, is not sent again, and the supervisor makes a new session through the
//!   breaker's probe;
//! - any other is that request's answer: the call fails with the server's error.

use rmcp::model::{
    ClientJsonRpcMessage, JsonRpcError, JsonRpcMessage, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::streamable_http_client::{StreamableHttpError, StreamableHttpPostResponse};

/// The request a POST of `message` waits an answer for, if it is one.
pub(crate) fn request_of(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    match message {
        JsonRpcMessage::Request(request) => Some(request.id.clone()),
        _ => None,
    }
}

/// The answer to a POST of `request` ([`request_of`]), with a refusal that names no
/// request read as above; `session_attached`: the POST was sent in a session.
pub(crate) fn read<E: std::error::Error + Send + Sync + 'static>(
    request: Option<RequestId>,
    session_attached: bool,
    answer: Result<StreamableHttpPostResponse, StreamableHttpError<E>>,
) -> Result<StreamableHttpPostResponse, StreamableHttpError<E>> {
    let Some(request) = request else {
        return answer;
    };
    match answer {
        Ok(StreamableHttpPostResponse::Json(
            JsonRpcMessage::Error(JsonRpcError {
                jsonrpc,
                id: None,
                error,
            }),
            session,
        )) => {
            if session_attached && speaks_of_an_unknown_session(&error.message) {
                return Err(StreamableHttpError::SessionExpired);
            }
            let answer: ServerJsonRpcMessage = JsonRpcMessage::Error(JsonRpcError {
                jsonrpc,
                id: Some(request),
                error,
            });
            Ok(StreamableHttpPostResponse::Json(answer, session))
        }
        other => other,
    }
}

/// Whether a refusal's message says the server does not know the session: "No valid
/// session ID provided", "Session not found", "Server not initialized".
fn speaks_of_an_unknown_session(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("session") || message.contains("not initialized")
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use rmcp::model::{ClientRequest, ErrorCode, ErrorData, PingRequest};

    use super::*;

    type Answer = Result<StreamableHttpPostResponse, StreamableHttpError<std::io::Error>>;

    fn ping(id: i64) -> ClientJsonRpcMessage {
        ClientJsonRpcMessage::request(
            ClientRequest::PingRequest(PingRequest::default()),
            RequestId::Number(id),
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

    fn answered_id(answer: &Answer) -> Option<RequestId> {
        match answer {
            Ok(StreamableHttpPostResponse::Json(JsonRpcMessage::Error(error), _)) => {
                error.id.clone()
            }
            _ => None,
        }
    }

    #[test]
    fn an_unknown_session_refused_without_an_id_is_a_session_the_server_forgot() {
        for message in [
            "Bad Request: No valid session ID provided",
            "Session not found",
            "Bad Request: Server not initialized",
        ] {
            let answer = read(request_of(&ping(7)), true, refusal(message, None));
            assert!(
                matches!(answer, Err(StreamableHttpError::SessionExpired)),
                "{message}: {answer:?}"
            );
        }
    }

    #[test]
    fn another_refusal_without_an_id_answers_the_request_it_was_sent_for() {
        let answer = read(request_of(&ping(7)), true, refusal("Parse error", None));
        assert_eq!(answered_id(&answer), Some(RequestId::Number(7)));
        // Outside a session (the handshake), even one that speaks of a session.
        let answer = read(
            request_of(&ping(8)),
            false,
            refusal("No valid session ID provided", None),
        );
        assert_eq!(answered_id(&answer), Some(RequestId::Number(8)));
    }

    #[test]
    fn a_notification_s_answer_is_passed_on_as_it_is() {
        let notification = ClientJsonRpcMessage::notification(
            rmcp::model::ClientNotification::InitializedNotification(Default::default()),
        );
        let answer = read(
            request_of(&notification),
            true,
            refusal("Session not found", None),
        );
        assert_eq!(answered_id(&answer), None);
        assert!(answer.is_ok());
    }

    #[test]
    fn an_error_that_names_a_request_is_passed_on_as_it_is() {
        let named = Some(RequestId::Number(3));
        let answer = read(
            request_of(&ping(7)),
            true,
            refusal("session gone", named.clone()),
        );
        assert_eq!(answered_id(&answer), named);
    }
}
