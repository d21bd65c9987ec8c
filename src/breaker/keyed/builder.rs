//! The settings of a keyed registry, and its builder.

use std::borrow::Cow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use super::layer::KeyedCircuitBreakerLayer;
use super::registry::Registry;
use super::registry::Template;
use crate::breaker::builder::Builder;
use crate::breaker::classify::DefaultClassifier;
use crate::breaker::error::ConfigError;
use crate::breaker::fallback::NoFallback;
use crate::escape::one_line;
use crate::redact::REDACTED;

/// How many breakers a registry holds unless told otherwise.
pub(super) const DEFAULT_CAPACITY: usize = 1024;

/// Settings for a [`KeyedCircuitBreakerLayer`]: the template every key's breaker is
/// made from, the key function, and the registry's capacity.
///
/// Made by [`KeyedCircuitBreakerLayer::builder`]; [`build`](Self::build) checks the
/// template and the capacity.
///
/// ```
/// use std::sync::Arc;
/// use tower_circuit_breaker::Builder;
/// use tower_circuit_breaker::error::ConfigError;
/// use tower_circuit_breaker::keyed::KeyedCircuitBreakerLayer;
///
/// // (model, prompt) requests, one breaker per model; cloning the key is cheap.
/// let by_model = |request: &(Arc<str>, String)| request.0.clone();
/// let layer = KeyedCircuitBreakerLayer::builder(Builder::new().name("model"), by_model)
///     .capacity(64)
///     .build()?;
/// assert_eq!(layer.handle().capacity(), 64);
///
/// let error = KeyedCircuitBreakerLayer::builder(Builder::new(), by_model).capacity(0).build();
/// assert_eq!(error.unwrap_err(), ConfigError::ZeroCapacity);
/// # Ok::<(), ConfigError>(())
/// ```
pub struct KeyedBuilder<K, KF> {
    pub(super) template: Builder,
    pub(super) key: KF,
    pub(super) capacity: usize,
    pub(super) namer: fn(&str, &K) -> Arc<str>,
}

pub(super) fn debug_name<K: fmt::Debug>(name: &str, key: &K) -> Arc<str> {
    named(name, &format!("{key:?}"))
}

pub(super) fn display_name<K: fmt::Display>(name: &str, key: &K) -> Arc<str> {
    named(name, &key.to_string())
}

/// `name[key]`, with the key as it may be shown in errors, snapshots, logs and metric
/// labels: a key may come from the network, and hold a URL with a password or a line
/// break that would forge a log line. What looks like a credential is redacted
/// ([`redact`](crate::redact)), and so is the user information of an authority
/// ([`hide_user_information`]: `bob:hunter2@api.example.com`, as `Uri::authority` gives
/// it, shows as `[redacted]@api.example.com`); characters that would break the line or
/// reorder it are escaped (control characters, U+2028 and U+2029, the bidirectional
/// embeddings, overrides and isolates: `a\u{202e}b`). Wherever
/// the key shown is not the key as written (redaction took something out, or an escape
/// changed it), a short hash of the key as it was follows
/// (`fetch[https://h/x?[redacted] #1a2b3c4d]`), so that distinct keys keep distinct
/// names: keys that differ only in what was taken out, and keys that escaping makes
/// alike (a line break, shown `\n`, and a backslash followed by `n`). It is keyed for
/// the process, so that it tells nothing of what was taken out.
fn named(name: &str, key: &str) -> Arc<str> {
    let authority_hidden = hide_user_information(key);
    let redacted = crate::redact(&authority_hidden);
    // One rule with every line a person or a model reads (`one_line`): control
    // characters, the line and paragraph separators and the bidirectional overrides.
    let shown = one_line(&redacted);
    if *shown == *key {
        return format!("{name}[{shown}]").into();
    }
    static KEYS: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    let hash = KEYS.get_or_init(Default::default).hash_one(key);
    format!("{name}[{shown} #{:08x}]", hash as u32).into()
}

/// `key` with the user information of each word shaped like an authority hidden: what
/// comes before the last `@` in a word, where no `/` comes before it
/// (`bob:hunter2@api.example.com` and `Some(bob:hunter2@h)` show as
/// `[redacted]@api.example.com` and `[redacted]@h)`; an e-mail address loses its local
/// part). Words are split at whitespace, backticks and double quotes (not at one escaped
/// as `Debug` writes it, `\"`), never at the brackets, `'`, `,`, `;` or `=` user
/// information may hold. A URL with a scheme, or scheme-relative (`//user:pass@host`), has a `/`
/// before its `@`: [`redact`](crate::redact) hides its user information. Borrowed when it
/// hides nothing; reads the key once.
fn hide_user_information(key: &str) -> Cow<'_, str> {
    /// Writes `word` to `out`, its user information hidden; returns whether it had some.
    fn word(word: &str, out: &mut String) -> bool {
        let before_path = word.find('/').unwrap_or(word.len());
        match word[..before_path].rfind('@') {
            Some(at) if at > 0 => {
                out.push_str(REDACTED);
                out.push_str(&word[at..]);
                true
            }
            _ => {
                out.push_str(word);
                false
            }
        }
    }
    if !key.contains('@') {
        return Cow::Borrowed(key);
    }
    let mut out = String::with_capacity(key.len());
    let (mut hid, mut start) = (false, 0);
    for (at, c) in key.char_indices() {
        let ends_a_word = c.is_whitespace() || c == '`' || (c == '"' && !key[..at].ends_with('\\'));
        if ends_a_word {
            hid |= word(&key[start..at], &mut out);
            out.push(c);
            start = at + c.len_utf8();
        }
    }
    hid |= word(&key[start..], &mut out);
    if hid {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(key)
    }
}

impl<K, KF> KeyedBuilder<K, KF> {
    /// The most breakers the registry holds while it can evict idle closed ones
    /// (default 1,024). See the [module docs](crate::keyed) for what happens when it cannot.
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// Names each key's breaker with the key's `Display` (`fetch[api.example.com]`)
    /// rather than its `Debug` (`fetch["api.example.com"]`, the default).
    ///
    /// Either way the key shows as it may outside the process: what looks like a
    /// credential is redacted ([`redact`](crate::redact): a URL's password and query,
    /// `key=…`), and so is the user information of an authority
    /// (`bob:hunter2@api.example.com`, as `Uri::authority` gives it, shows as
    /// `[redacted]@api.example.com`); characters that would break the line or reorder it
    /// (control characters, U+2028 and U+2029, bidirectional overrides) are escaped; and
    /// wherever that
    /// changed the key a short hash of it follows, so that distinct keys keep distinct
    /// names (`a\nb` with a line break, and with a backslash and an `n`).
    pub fn name_keys_by_display(mut self) -> Self
    where
        K: fmt::Display,
    {
        self.namer = display_name::<K>;
        self
    }

    /// The layer.
    ///
    /// # Errors
    ///
    /// The first setting of the template that cannot work, then
    /// [`ConfigError::ZeroCapacity`] for a capacity of 0.
    pub fn build(self) -> Result<KeyedCircuitBreakerLayer<K, KF>, ConfigError> {
        let (config, kill, observers) = self.template.into_template()?;
        if self.capacity == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        let template = Template {
            config: Arc::new(config),
            kill,
            observers,
            namer: self.namer,
        };
        Ok(KeyedCircuitBreakerLayer {
            registry: Arc::new(Registry::new(template, self.capacity)),
            key: self.key,
            fallback: NoFallback,
            classifier: DefaultClassifier,
        })
    }
}

impl<K, KF> fmt::Debug for KeyedBuilder<K, KF> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBuilder")
            .field("template", &self.template)
            .field("key", &std::any::type_name::<KF>())
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl<K, KF> KeyedCircuitBreakerLayer<K, KF> {
    /// Settings for a layer whose breakers are made from `template`, one for each key
    /// `key` returns for a request. The template's name prefixes every key's breaker's
    /// name, and its kill switch (or a new one) is shared by every key.
    ///
    /// The key function runs on every call: keep it cheap, and make keys that are cheap
    /// to hash and compare (a `&'static str`, an integer, an `Arc<str>`, a small enum).
    pub fn builder<Request>(template: Builder, key: KF) -> KeyedBuilder<K, KF>
    where
        KF: Fn(&Request) -> K,
        K: Hash + Eq + Clone + fmt::Debug,
    {
        KeyedBuilder {
            template,
            key,
            capacity: DEFAULT_CAPACITY,
            namer: debug_name::<K>,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::hide_user_information;

    #[test]
    fn an_authoritys_user_information_is_hidden_wherever_the_key_shows_it() {
        for (key, shown) in [
            ("bob:hunter2@api.example.com", "[redacted]@api.example.com"),
            ("\"bob:hunter2@h:8080\"", "\"[redacted]@h:8080\""),
            ("Some(bob:hunter2@h)", "[redacted]@h)"),
            ("(GET, bob:p@ss'(w)@h)", "(GET, [redacted]@h)"),
            (r#""bob:hun\"ter2@h""#, r#""[redacted]@h""#),
            ("bob@example.com", "[redacted]@example.com"),
            ("bob:hunter2@h/x@y", "[redacted]@h/x@y"),
        ] {
            assert_eq!(hide_user_information(key), shown, "{key}");
        }
        // A URL's `@` comes after a `/` (redact hides its user information); a path's
        // too; a word starting with `@` has none.
        for key in [
            "https://bob:pw@h",
            "//bob:pw@h",
            "repo/x@v1",
            "@handle",
            "h.example",
        ] {
            assert!(
                matches!(hide_user_information(key), std::borrow::Cow::Borrowed(_)),
                "{key}"
            );
        }
    }
}
