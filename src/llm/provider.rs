//! One OpenAI-compatible endpoint, and how a caller's request is made for it:
//! [`Provider`].

use std::fmt;

use http::header::{HeaderName, HeaderValue, AUTHORIZATION};
use reqwest::Url;

use tower::BoxError;

use super::body_model::with_model;
use super::LlmConfigError;
use crate::http::BufferedResponse;
use crate::redact::REDACTED;

/// An OpenAI-compatible endpoint: its name, base URL, key, model and headers.
///
/// A caller's request is addressed to the first provider's base URL
/// ([`LlmClient::url`](super::LlmClient::url)); for each provider it is made again with
/// the part after that base URL appended to the provider's own, the provider's key as a
/// bearer token (replacing the caller's `Authorization`), its headers, and, when the
/// body is a JSON object with a `"model"`, the provider's model name.
///
/// The caller's own credentials go only to providers at the first provider's origin
/// (scheme, host and port), as an HTTP client drops them on a redirect to another host:
/// for a provider elsewhere, the request loses its `Authorization`,
/// `Proxy-Authorization`, `Cookie`, `x-api-key`, `api-key` and `x-goog-api-key` headers
/// before the provider's own key and headers are set, and its query the parameters
/// named as a key is (`key`, `api_key`, `api-key`, `apikey`, `token`, `access_token`,
/// `password`, `secret`, `sig`, `signature`, without regard to case: Google's `?key=`). A key written for the primary never
/// reaches a fallback provider with no key of its own.
///
/// ```
/// use tower_circuit_breaker::llm::Provider;
///
/// let openai = Provider::new("openai", "https://api.openai.com/v1")
///     .bearer("sk-…")
///     .model("gpt-4o-mini");
/// let anthropic = Provider::new("anthropic", "https://api.anthropic.com/v1")
///     .header("x-api-key", "…")
///     .header("anthropic-version", "2023-06-01")
///     .model("claude-3-5-haiku-latest");
/// let local = Provider::new("local", "http://127.0.0.1:11434/v1").model("llama3.2");
/// # let _ = (openai, anthropic, local);
/// ```
#[derive(Clone)]
pub struct Provider {
    pub(super) name: String,
    base: String,
    bearer: Option<String>,
    headers: Vec<(String, String)>,
    model: Option<String>,
}

impl Provider {
    /// A provider named `name` (in routes, headers, the admin service and metrics) at
    /// `base_url` (`https://api.openai.com/v1`); checked when the client is built: an
    /// `http` or `https` URL without credentials, query or fragment
    /// ([`LlmConfigError::InvalidProvider`] otherwise).
    pub fn new(name: impl Into<String>, base_url: impl Into<String>) -> Self {
        Provider {
            name: name.into(),
            base: base_url.into(),
            bearer: None,
            headers: Vec::new(),
            model: None,
        }
    }

    /// Sends `key` as `Authorization: Bearer <key>`, marked sensitive (never logged by
    /// `http`'s `Debug`).
    pub fn bearer(mut self, key: impl Into<String>) -> Self {
        self.bearer = Some(key.into());
        self
    }

    /// Sends this header with every request (set, replacing the caller's).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Writes this model name into the JSON body's `"model"`: the value of each of the body
    /// object's top-level `"model"` members is replaced, and every other byte of the body is
    /// sent as the caller wrote it (numbers past a 64-bit float's range or precision, escapes
    /// that a JSON parser refuses, the members' order and spacing).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// The provider's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Checks the settings, for a client to use.
    pub(super) fn check(&self) -> Result<Prepared, LlmConfigError> {
        let invalid = |what: &str| LlmConfigError::InvalidProvider {
            provider: self.name.clone(),
            what: what.to_owned(),
        };
        if self.name.is_empty() {
            return Err(invalid(
                "its name is empty: it names its breaker, routes and metrics",
            ));
        }
        let base = Url::parse(self.base.trim_end_matches('/'))
            .map_err(|_| invalid("its base URL is not a URL"))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(invalid("its base URL is not an http(s) URL"));
        }
        if base.query().is_some() || !base.username().is_empty() || base.password().is_some() {
            return Err(invalid(
                "its base URL has a query or credentials: give a key with `bearer` or `header`",
            ));
        }
        // A request's path is appended to the base URL: after a `#`, every one would be
        // part of the fragment, never sent, and each call would go to the base path.
        if base.fragment().is_some() {
            return Err(invalid(
                "its base URL has a fragment (`#…`), which no request's path could follow",
            ));
        }
        let mut headers = Vec::new();
        if let Some(key) = &self.bearer {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
                .map_err(|_| invalid("its bearer key is not a valid header value"))?;
            value.set_sensitive(true);
            headers.push((AUTHORIZATION, value));
        }
        for (name, value) in &self.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| invalid("a header name is not valid"))?;
            let mut value =
                HeaderValue::from_str(value).map_err(|_| invalid("a header value is not valid"))?;
            value.set_sensitive(true);
            headers.push((name, value));
        }
        Ok(Prepared {
            base: base.to_string().trim_end_matches('/').to_owned(),
            origin: base.origin().ascii_serialization(),
            callers_credentials: true,
            headers,
            model: self.model.clone(),
        })
    }
}

impl fmt::Debug for Provider {
    /// Never shows the key or header values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.name)
            .field("base_url", &crate::redact(&self.base))
            .field("bearer", &self.bearer.as_ref().map(|_| REDACTED))
            .field(
                "headers",
                &self
                    .headers
                    .iter()
                    .map(|(name, _)| name)
                    .collect::<Vec<_>>(),
            )
            .field("model", &self.model)
            .finish()
    }
}

/// A provider's answer that came from another origin (scheme, host and port) than the
/// provider's: the `reqwest::Client` given to
/// [`LlmClientBuilder::build`](super::LlmClientBuilder::build) followed a redirect there.
/// The attempt fails, counted by the provider's breaker, and the next provider is tried:
/// an answer of another server is not the provider's, and the route names the provider
/// that was asked. Build the client with
/// `reqwest::Client::builder().redirect(reqwest::redirect::Policy::none())`, so that no
/// request is sent to where a provider redirects (with the caller's headers, which
/// reqwest does not all drop, and past that server's own breaker).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "provider `{provider}` answered from another origin ({answered_from}): its client \
     followed a redirect; build the reqwest::Client with \
     `redirect(reqwest::redirect::Policy::none())`"
)]
pub struct Redirected {
    provider: String,
    answered_from: String,
}

impl Redirected {
    /// The provider asked.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The origin that answered (`https://host:port`).
    pub fn answered_from(&self) -> &str {
        &self.answered_from
    }
}

/// A checked provider: how a request is made for it. `Debug` shows header values as
/// `Sensitive`.
#[derive(Clone, Debug)]
pub(super) struct Prepared {
    /// The base URL, without a trailing `/`.
    pub(super) base: String,
    /// The base URL's scheme, host and port.
    origin: String,
    /// Whether the caller's credentials are sent to it: it is at the primary's origin.
    callers_credentials: bool,
    headers: Vec<(HeaderName, HeaderValue)>,
    model: Option<String>,
}

/// The headers that carry a caller's credentials: sent only to its primary's origin.
const CREDENTIALS: [&str; 6] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
];

/// The query parameters that carry a caller's credentials (compared without case): sent
/// only to its primary's origin.
const CREDENTIAL_PARAMS: [&str; 10] = [
    "key",
    "api_key",
    "api-key",
    "apikey",
    "token",
    "access_token",
    "password",
    "secret",
    "sig",
    "signature",
];

/// `url` without the query parameters of [`CREDENTIAL_PARAMS`]; untouched (its other
/// parameters as the caller wrote them) when it has none.
fn without_credential_params(url: &mut Url) {
    let is_credential = |name: &str| {
        CREDENTIAL_PARAMS
            .iter()
            .any(|param| name.eq_ignore_ascii_case(param))
    };
    if !url.query_pairs().any(|(name, _)| is_credential(&name)) {
        return;
    }
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(name, _)| !is_credential(name))
        .map(|(name, value)| (name.into_owned(), value.into_owned()))
        .collect();
    if kept.is_empty() {
        url.set_query(None);
    } else {
        url.query_pairs_mut().clear().extend_pairs(kept);
    }
}

impl Prepared {
    /// `response`, an answer of this provider's, if it came from its origin; else the
    /// client followed a redirect elsewhere ([`Redirected`]).
    pub(super) fn answered_here(
        &self,
        name: &str,
        response: BufferedResponse,
    ) -> Result<BufferedResponse, BoxError> {
        match response.url().map(|url| url.origin().ascii_serialization()) {
            Some(from) if from != self.origin => Err(Redirected {
                provider: name.to_owned(),
                answered_from: crate::redact(&from).into_owned(),
            }
            .into()),
            _ => Ok(response),
        }
    }

    /// Sends the caller's credentials only if it is at `primary`'s origin.
    pub(super) fn for_primary(mut self, primary: &Prepared) -> Prepared {
        self.callers_credentials = self.origin == primary.origin;
        self
    }

    /// The caller's request, addressed to `primary` (a base URL without a trailing
    /// `/`), made for this provider; `None` if it is not addressed under `primary` or its
    /// body cannot be copied (a stream).
    pub(super) fn prepare(
        &self,
        primary: &str,
        request: &reqwest::Request,
    ) -> Option<reqwest::Request> {
        let rest = under(primary, request.url().as_str())?;
        let mut prepared = request.try_clone()?;
        *prepared.url_mut() = Url::parse(&format!("{}{rest}", self.base)).ok()?;
        if !self.callers_credentials {
            for name in CREDENTIALS {
                prepared.headers_mut().remove(name);
            }
            without_credential_params(prepared.url_mut());
        }
        for (name, value) in &self.headers {
            prepared.headers_mut().insert(name.clone(), value.clone());
        }
        if let Some(model) = &self.model {
            let body = prepared.body().and_then(reqwest::Body::as_bytes);
            if let Some(body) = body.and_then(|body| with_model(body, model)) {
                prepared
                    .headers_mut()
                    .insert(http::header::CONTENT_LENGTH, HeaderValue::from(body.len()));
                *prepared.body_mut() = Some(body.into());
            }
        }
        Some(prepared)
    }
}

/// What follows `base` (a base URL without a trailing `/`) in `url`, if `url` is under
/// it: nothing, a path from `/`, or a query from `?`.
pub(super) fn under<'a>(base: &str, url: &'a str) -> Option<&'a str> {
    let rest = url.strip_prefix(base)?;
    (rest.is_empty() || rest.starts_with(['/', '?'])).then_some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(url: &str, body: &str) -> reqwest::Request {
        let mut request = reqwest::Request::new(reqwest::Method::POST, Url::parse(url).unwrap());
        *request.body_mut() = Some(body.to_owned().into());
        request
    }

    #[test]
    fn a_request_is_readdressed_with_the_providers_model_and_key() {
        let prepared = Provider::new("b", "http://b.test/api/v1/")
            .bearer("k")
            .model("m2")
            .check()
            .unwrap();
        let out = prepared
            .prepare(
                "http://a.test/v1",
                &request(
                    "http://a.test/v1/chat/completions",
                    r#"{"model":"m1","n":1}"#,
                ),
            )
            .unwrap();
        assert_eq!(out.url().as_str(), "http://b.test/api/v1/chat/completions");
        assert_eq!(out.headers()[AUTHORIZATION], "Bearer k");
        let body: serde_json::Value =
            serde_json::from_slice(out.body().unwrap().as_bytes().unwrap()).unwrap();
        assert_eq!(body, serde_json::json!({"model": "m2", "n": 1}));
    }

    #[test]
    fn the_callers_credentials_reach_only_providers_at_the_primarys_origin() {
        let primary = Provider::new("a", "http://a.test/v1").check().unwrap();
        let mut sent = request("http://a.test/v1/chat/completions", "{}");
        for (name, value) in [
            ("authorization", "Bearer sk-CALLER"),
            ("x-api-key", "CALLER-KEY"),
            ("cookie", "session=CALLER"),
            ("x-request-id", "42"),
        ] {
            sent.headers_mut()
                .insert(name, HeaderValue::from_static(value));
        }
        let at = |base: &str| {
            Provider::new("b", base)
                .check()
                .unwrap()
                .for_primary(&primary)
                .prepare("http://a.test/v1", &sent)
                .unwrap()
        };
        let elsewhere = at("http://b.test/v1");
        for name in ["authorization", "x-api-key", "cookie"] {
            assert!(
                elsewhere.headers().get(name).is_none(),
                "{name} sent elsewhere"
            );
        }
        assert_eq!(elsewhere.headers()["x-request-id"], "42");
        let same_origin = at("http://a.test/other/v1");
        assert_eq!(same_origin.headers()[AUTHORIZATION], "Bearer sk-CALLER");
        // Another port is another origin.
        assert!(at("http://a.test:8080/v1")
            .headers()
            .get(AUTHORIZATION)
            .is_none());
    }

    #[test]
    fn a_key_in_the_callers_query_reaches_only_providers_at_the_primarys_origin() {
        let primary = Provider::new("a", "http://a.test/v1").check().unwrap();
        let at = |base: &str, url: &str| {
            Provider::new("b", base)
                .check()
                .unwrap()
                .for_primary(&primary)
                .prepare("http://a.test/v1", &request(url, "{}"))
                .unwrap()
                .url()
                .to_string()
        };
        let url = "http://a.test/v1/chat?alt=sse&KEY=AIzaSECRET&api-key=S2&n=1%202";
        assert_eq!(
            at("http://b.test/v1", url),
            "http://b.test/v1/chat?alt=sse&n=1+2"
        );
        assert_eq!(
            at("http://b.test/v1", "http://a.test/v1/chat?key=AIzaSECRET"),
            "http://b.test/v1/chat"
        );
        // Without one, the query is left as written; at the primary's origin, kept.
        let plain = "http://a.test/v1/chat?n=1%202";
        assert_eq!(
            at("http://b.test/v1", plain),
            "http://b.test/v1/chat?n=1%202"
        );
        assert!(at("http://a.test/other", url).contains("KEY=AIzaSECRET"));
    }

    #[test]
    fn a_request_elsewhere_or_a_lookalike_prefix_is_not_prepared() {
        let prepared = Provider::new("b", "http://b.test/v1").check().unwrap();
        let primary = "http://a.test/v1";
        assert!(prepared
            .prepare(primary, &request("http://c.test/v1/x", "{}"))
            .is_none());
        assert!(prepared
            .prepare(primary, &request("http://a.test/v10/x", "{}"))
            .is_none());
    }

    #[test]
    fn a_body_that_is_not_json_is_sent_as_it_is() {
        let prepared = Provider::new("b", "http://b.test/v1")
            .model("m")
            .check()
            .unwrap();
        let out = prepared
            .prepare(
                "http://a.test/v1",
                &request("http://a.test/v1/x", "not json"),
            )
            .unwrap();
        assert_eq!(out.body().unwrap().as_bytes().unwrap(), b"not json");
    }

    #[test]
    fn a_body_a_json_parser_refuses_is_sent_with_the_providers_model_and_its_own_bytes() {
        let prepared = Provider::new("b", "http://b.test/v1")
            .model("m2")
            .check()
            .unwrap();
        let body = r#"{"model":"m1","messages":[{"content":"half \ud83d"}],"seed":123456789012345678901234567890}"#;
        let out = prepared
            .prepare("http://a.test/v1", &request("http://a.test/v1/x", body))
            .unwrap();
        let sent = r#"{"model":"m2","messages":[{"content":"half \ud83d"}],"seed":123456789012345678901234567890}"#;
        assert_eq!(out.body().unwrap().as_bytes().unwrap(), sent.as_bytes());
        let length = out.headers().get(http::header::CONTENT_LENGTH).unwrap();
        assert_eq!(length, &sent.len().to_string());
    }

    #[test]
    fn a_base_url_with_credentials_or_a_query_is_refused_without_showing_them() {
        for base in [
            "http://u:secret@b.test/v1",
            "http://b.test/v1?key=secret",
            "not a url",
            "ftp://b.test",
        ] {
            let error = Provider::new("b", base).check().unwrap_err();
            assert!(!error.to_string().contains("secret"), "{error}");
        }
    }

    #[test]
    fn a_provider_without_a_name_is_refused_as_such() {
        let error = Provider::new("", "http://a.test/v1").check().unwrap_err();
        assert_eq!(
            error.to_string(),
            "provider ``: its name is empty: it names its breaker, routes and metrics"
        );
    }

    #[test]
    fn debug_never_shows_keys() {
        let provider = Provider::new("b", "http://b.test/v1")
            .bearer("sk-secret")
            .header("x-api-key", "secret2");
        let text = format!("{provider:?}");
        assert!(!text.contains("secret"), "{text}");
    }
}
