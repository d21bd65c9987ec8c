//! Saved answers served over HTTP, labelled as such: see [`stale`].

use std::time::Duration;

use ::http::header::{HeaderName, HeaderValue, CONTENT_LENGTH, ETAG};

use super::buffer::BufferedResponse;
use super::chat_label::{label_chat_completion, NotLabelled};
use super::retry_after::RETRY_AFTER_MS;
use crate::saved::stale_label;

/// The response header that marks a saved answer served again, for machines:
/// `x-circuit-breaker-stale: age=600`, the seconds since the answer was saved (rounded
/// down, as the label in the content says them). Written by
/// [`BufferedResponse::with_stale_marker`] (and so by [`stale`]), read by
/// [`stale_from_header`].
///
/// It names the answer as stale even where the `Age` header would not: `Age` is also
/// written by caches on the way and adds any age the answer arrived with, and `Age: 0`
/// is a saved answer served at once. A fresh answer carries no marker of this process's;
/// one a server sent (a gateway on the way serving its own saved answer) is passed on as
/// it came, as `Age` is.
pub const X_CIRCUIT_BREAKER_STALE: HeaderName = HeaderName::from_static("x-circuit-breaker-stale");

/// The response header that names the provider a saved answer served again came from,
/// `x-circuit-breaker-saved-from: openai`: written by
/// [`BufferedResponse::with_stale_marker`] (and so by [`stale`]) for an answer saved with
/// the [`X_CIRCUIT_BREAKER_PROVIDER`](super::X_CIRCUIT_BREAKER_PROVIDER) of the failover
/// that gave it. That header is the call's own, and a failover's route replaces it: no
/// provider answered the call the saved answer is served to.
pub const X_CIRCUIT_BREAKER_SAVED_FROM: HeaderName =
    HeaderName::from_static("x-circuit-breaker-saved-from");

/// Headers that describe the bytes of a body, dropped when a label changes them: a
/// validator or digest of the saved bytes would be wrong for the labelled ones.
const BODY_DIGESTS: [&str; 4] = ["etag", "content-md5", "content-digest", "digest"];

/// The [`X_CIRCUIT_BREAKER_STALE`] value for an answer saved `age` ago: `age=<seconds>`,
/// rounded down.
fn stale_value(age: Duration) -> HeaderValue {
    HeaderValue::from_str(&format!("age={}", age.as_secs())).expect("ASCII digits")
}

/// How long ago the answer an [`X_CIRCUIT_BREAKER_STALE`] value marks was saved; `None`
/// for a value this crate does not write.
///
/// ```
/// use std::time::Duration;
/// use http::HeaderValue;
/// use tower_circuit_breaker::http::stale_from_header;
///
/// let value = HeaderValue::from_static("age=600");
/// assert_eq!(stale_from_header(&value), Some(Duration::from_secs(600)));
/// assert_eq!(stale_from_header(&HeaderValue::from_static("yes")), None);
/// ```
pub fn stale_from_header(value: &HeaderValue) -> Option<Duration> {
    let text = value.to_str().ok()?;
    let secs = text
        .split(';')
        .find_map(|param| param.trim().strip_prefix("age="))?;
    secs.parse().ok().map(Duration::from_secs)
}

/// The ready-made `stale` function of a [`SavedFallback`](crate::saved::SavedFallback)
/// for [`BufferedResponse`]s: a saved answer served `age` after it was saved, labelled
/// for HTTP clients, for machines and for the person or model reading it.
///
/// - `Age`, in whole seconds, added to any `Age` the answer arrived with
///   ([`BufferedResponse::with_age`]);
/// - [`X_CIRCUIT_BREAKER_STALE`]`: age=<seconds>` ([`BufferedResponse::with_stale_marker`]);
/// - in an OpenAI chat completion, every `choices[].message.content` prefixed with
///   [`stale_label`] and a line break, the JSON kept valid and `Content-Length` right
///   ([`BufferedResponse::label_chat_completion`]); any other body is served as it was
///   saved, the headers still marking it.
///
/// [`ProvenanceLayer`](super::ProvenanceLayer), outside the breaker, adds `Retry-After`
/// when the breaker knows when it will next let a call through.
///
/// ```
/// use std::time::Duration;
/// use bytes::Bytes;
/// use tower_circuit_breaker::http::{self, BufferedResponse, X_CIRCUIT_BREAKER_STALE};
/// use tower_circuit_breaker::saved::{SaveLayer, SavedAnswers};
///
/// let completion = r#"{"choices":[{"message":{"role":"assistant","content":"42"}}]}"#;
/// let saved = BufferedResponse::from(::http::Response::new(Bytes::from(completion)));
/// let served = http::stale(saved, Duration::from_secs(90));
/// assert_eq!(served.headers()["age"], "90");
/// assert_eq!(served.headers()[X_CIRCUIT_BREAKER_STALE], "age=90");
/// let json: serde_json::Value = serde_json::from_slice(served.body()).unwrap();
/// assert_eq!(
///     json["choices"][0]["message"]["content"],
///     "[STALE DATA — saved 1m 30s ago, may not reflect current state]\n42"
/// );
///
/// // In a stack: the saved fallback's two functions, ready-made.
/// let store = SavedAnswers::<String, BufferedResponse>::new(100, Duration::from_secs(3600))?;
/// let save = SaveLayer::new(store, |prompt: &String| Some(prompt.clone()));
/// let fallback = save.fallback(http::stale, http::unavailable);
/// # let _ = fallback;
/// # Ok::<(), tower::BoxError>(())
/// ```
pub fn stale(answer: BufferedResponse, age: Duration) -> BufferedResponse {
    let mut answer = answer.with_stale_marker(age);
    // A body that is no chat completion is served as saved: the headers mark it.
    let _ = answer.label_chat_completion(&stale_label(age));
    answer
}

impl BufferedResponse {
    /// The same response marked as a saved answer served `age` after it was saved: an
    /// `Age` header ([`with_age`](Self::with_age)) and
    /// [`X_CIRCUIT_BREAKER_STALE`]`: age=<seconds>` (replacing any marker it was saved
    /// with), and for an answer saved with the provider that gave it, its name as
    /// [`X_CIRCUIT_BREAKER_SAVED_FROM`]. A `Retry-After` or `retry-after-ms` it was saved
    /// with goes: it told when to come back then, not now (a
    /// [`ProvenanceLayer`](super::ProvenanceLayer) outside says when the breaker will next
    /// let a call through). The body is not changed; see [`stale`] for the content too.
    ///
    /// ```
    /// use std::time::Duration;
    /// use bytes::Bytes;
    /// use tower_circuit_breaker::http::{stale_from_header, BufferedResponse, X_CIRCUIT_BREAKER_STALE};
    ///
    /// let saved = BufferedResponse::from(http::Response::new(Bytes::from_static(b"42")));
    /// let served = saved.with_stale_marker(Duration::from_millis(12_700));
    /// assert_eq!(served.headers()["age"], "12");
    /// let marker = &served.headers()[X_CIRCUIT_BREAKER_STALE];
    /// assert_eq!(marker, "age=12");
    /// assert_eq!(stale_from_header(marker), Some(Duration::from_secs(12)));
    /// assert_eq!(served.body(), "42");
    ///
    /// // Saved from a failover's answer: it names the provider that gave it.
    /// use tower_circuit_breaker::http::{X_CIRCUIT_BREAKER_PROVIDER, X_CIRCUIT_BREAKER_SAVED_FROM};
    /// let mut saved = BufferedResponse::from(http::Response::new(Bytes::from_static(b"42")));
    /// saved.headers_mut().insert(X_CIRCUIT_BREAKER_PROVIDER, http::HeaderValue::from_static("openai"));
    /// let served = saved.with_stale_marker(Duration::from_secs(90));
    /// assert_eq!(served.headers()[X_CIRCUIT_BREAKER_SAVED_FROM], "openai");
    ///
    /// // The wait it was saved with is no longer true.
    /// let mut saved = BufferedResponse::from(http::Response::new(Bytes::from_static(b"42")));
    /// saved.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from_static("0"));
    /// assert!(saved.with_stale_marker(Duration::from_secs(5)).headers().get("retry-after").is_none());
    /// ```
    pub fn with_stale_marker(self, age: Duration) -> Self {
        let mut response = self.with_age(age);
        let headers = response.headers_mut();
        headers.remove(::http::header::RETRY_AFTER);
        headers.remove(RETRY_AFTER_MS);
        headers.insert(X_CIRCUIT_BREAKER_STALE, stale_value(age));
        match headers.get(super::X_CIRCUIT_BREAKER_PROVIDER).cloned() {
            Some(provider) => headers.insert(X_CIRCUIT_BREAKER_SAVED_FROM, provider),
            None => headers.remove(X_CIRCUIT_BREAKER_SAVED_FROM),
        };
        response
    }

    /// Puts `label` and a line break at the start of every `choices[].message.content`
    /// string of the OpenAI chat completion in its body, the JSON kept valid
    /// ([`label_chat_completion`](super::label_chat_completion())); then sets a
    /// `Content-Length` it has to the new length and drops the headers that describe the
    /// old bytes (`ETag`, `Content-MD5`, `Content-Digest`, `Digest`).
    ///
    /// # Errors
    ///
    /// [`NotLabelled`] for a body that is not JSON (a compressed or streamed one
    /// included) or holds no message content: the response is left as it was.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use tower_circuit_breaker::http::{BufferedResponse, NotLabelled};
    ///
    /// let body = r#"{"choices":[{"message":{"content":"the answer is \"42\""}}]}"#;
    /// let response = http::Response::builder()
    ///     .header("content-length", body.len())
    ///     .header("etag", "\"abc\"")
    ///     .body(Bytes::from(body))
    ///     .unwrap();
    /// let mut response = BufferedResponse::from(response);
    /// response.label_chat_completion("[cached]")?;
    /// assert_eq!(
    ///     response.body(),
    ///     r#"{"choices":[{"message":{"content":"[cached]\nthe answer is \"42\""}}]}"#
    /// );
    /// assert_eq!(response.headers()["content-length"], response.body().len().to_string());
    /// assert!(response.headers().get("etag").is_none());
    ///
    /// let mut text = BufferedResponse::from(http::Response::new(Bytes::from("It is 42.")));
    /// assert_eq!(text.label_chat_completion("[cached]"), Err(NotLabelled::NotJson));
    /// assert_eq!(text.body(), "It is 42.");
    /// # Ok::<(), NotLabelled>(())
    /// ```
    pub fn label_chat_completion(&mut self, label: &str) -> Result<(), NotLabelled> {
        let labelled = label_chat_completion(self.body(), label)?;
        let headers = self.headers_mut();
        if headers.contains_key(CONTENT_LENGTH) {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(labelled.len()));
        }
        headers.remove(ETAG);
        for name in BODY_DIGESTS {
            headers.remove(name);
        }
        *self.body_mut() = labelled;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn a_marker_is_read_back_with_other_parameters_around_it() {
        let value = stale_value(Duration::from_millis(5_999));
        assert_eq!(value, "age=5");
        assert_eq!(stale_from_header(&value), Some(Duration::from_secs(5)));
        let value = HeaderValue::from_static("saved; age=7 ; by=x");
        assert_eq!(stale_from_header(&value), Some(Duration::from_secs(7)));
        for bad in ["", "age=", "age=-1", "age=1.5", "stale"] {
            assert_eq!(stale_from_header(&HeaderValue::from_static(bad)), None);
        }
    }

    #[test]
    fn a_body_that_is_not_a_chat_completion_keeps_its_bytes_and_headers_but_is_marked() {
        let response = ::http::Response::builder()
            .header(CONTENT_LENGTH, "2")
            .header(ETAG, "\"v1\"")
            .body(Bytes::from_static(b"42"))
            .unwrap();
        let served = stale(BufferedResponse::from(response), Duration::from_secs(3));
        assert_eq!(served.body(), "42");
        assert_eq!(served.headers()[CONTENT_LENGTH], "2");
        assert_eq!(served.headers()[ETAG], "\"v1\"");
        assert_eq!(served.headers()[X_CIRCUIT_BREAKER_STALE], "age=3");
        assert_eq!(served.headers()["age"], "3");
    }

    #[test]
    fn a_marker_it_was_saved_with_is_replaced_not_repeated() {
        let response = ::http::Response::builder()
            .header(X_CIRCUIT_BREAKER_STALE, "age=100")
            .body(Bytes::new())
            .unwrap();
        let served = BufferedResponse::from(response).with_stale_marker(Duration::from_secs(2));
        let markers: Vec<_> = served
            .headers()
            .get_all(X_CIRCUIT_BREAKER_STALE)
            .iter()
            .collect();
        assert_eq!(markers, ["age=2"]);
    }
}
