//! A replica's fleet settings: where Redis is and how to log in, the key prefix, the
//! replica's name, and the bounds on what peers may do. Checked when the fleet starts.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use super::error::FleetError;
use super::keys::{check_name, Keys};
use super::Fleet;
use crate::redact::REDACTED;

/// TLS to Redis (needs the `fleet-tls` feature; a `rediss://` address asks for it too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tls {
    /// Verify the server's certificate and host name against the system's roots.
    Verified,
    /// Encrypt, but accept any certificate for any host name: only for a test server.
    Insecure,
}

/// The settings of a replica's fleet link, checked by [`start`](FleetBuilder::start).
///
/// ```no_run
/// use std::time::Duration;
/// use tower_circuit_breaker::fleet::Fleet;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower_circuit_breaker::fleet::FleetError> {
/// let fleet = Fleet::builder()
///     .address("redis://redis.internal:6379/0")
///     .username("agents")
///     .password(std::env::var("REDIS_PASSWORD").unwrap_or_default())
///     .prefix("prod-agents")
///     .replica("api-7")
///     .max_hold(Duration::from_secs(120))
///     .start()?;
/// # drop(fleet); Ok(()) }
/// ```
#[derive(Clone)]
pub struct FleetBuilder {
    address: String,
    username: Option<String>,
    password: Option<String>,
    database: Option<i64>,
    tls: Option<Tls>,
    prefix: String,
    replica: Option<String>,
    max_hold: Duration,
    default_hold: Duration,
    max_message_bytes: usize,
    resync_every: Duration,
    reconnect_first: Duration,
    reconnect_longest: Duration,
    timeout: Duration,
    max_peers: usize,
}

impl Default for FleetBuilder {
    fn default() -> Self {
        FleetBuilder {
            address: "redis://127.0.0.1:6379".into(),
            username: None,
            password: None,
            database: None,
            tls: None,
            prefix: "tcb".into(),
            replica: None,
            max_hold: Duration::from_secs(300),
            default_hold: Duration::from_secs(30),
            max_message_bytes: 4096,
            resync_every: Duration::from_secs(30),
            reconnect_first: Duration::from_millis(100),
            reconnect_longest: Duration::from_secs(10),
            timeout: Duration::from_secs(2),
            max_peers: 1024,
        }
    }
}

impl FleetBuilder {
    /// The defaults: Redis at `redis://127.0.0.1:6379`, prefix `tcb`, a replica name
    /// made of the process id and a random number, holds of at most 5 minutes (30 s
    /// when a peer gives no time), messages of at most 4 KiB, kill keys re-read every
    /// 30 s, reconnection after 100 ms doubling up to 10 s, 2 s timeouts, 1024 peers
    /// remembered.
    pub fn new() -> Self {
        FleetBuilder::default()
    }

    /// Where Redis is: `redis://[user[:password]@]host[:port][/db]`, or `rediss://` for
    /// TLS. Any setting given with the other methods wins over the address's.
    pub fn address(mut self, address: impl Into<String>) -> Self {
        self.address = address.into();
        self
    }

    /// The user to log in as (Redis 6 ACLs; `AUTH user password`).
    pub fn username(mut self, username: impl Into<String>) -> Self {
        self.username = Some(username.into());
        self
    }

    /// The password to log in with (`AUTH`). Never shown by `Debug`.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// The database number (`SELECT`). Pub/sub channels are shared by every database of
    /// a server; the prefix is what keeps fleets apart.
    pub fn database(mut self, database: i64) -> Self {
        self.database = Some(database);
        self
    }

    /// TLS to Redis. Needs the `fleet-tls` feature, and the application must install a
    /// rustls crypto provider (`rustls::crypto::ring::default_provider().install_default()`
    /// or the aws-lc-rs one) before the first connection.
    pub fn tls(mut self, tls: Tls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The prefix of every key and channel (default `tcb`): fleets with different
    /// prefixes on one server never see each other.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// This replica's name in the hints it publishes (a host or pod name). Two live
    /// replicas must not share one: a quorum counts names. Give a stable one where a
    /// breaker follows a quorum: the default (the process id and a random part) is new
    /// at every start, so a node that crash-loops would count as several replicas.
    pub fn replica(mut self, replica: impl Into<String>) -> Self {
        self.replica = Some(replica.into());
        self
    }

    /// The longest a peer's hints may hold a breaker open between two of its own probes
    /// (default 5 minutes, at most a day): a published time further off is cut to it.
    pub fn max_hold(mut self, hold: Duration) -> Self {
        self.max_hold = hold;
        self
    }

    /// How long a hint holds a breaker open when its peer gave no time (a cooldown in
    /// calls, or open until reset); default 30 s, at most the longest hold.
    pub fn default_hold(mut self, hold: Duration) -> Self {
        self.default_hold = hold;
        self
    }

    /// The longest message believed (default 4096 bytes; from 256 to 1 MiB); longer ones
    /// are refused and counted without being parsed.
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// How often the kill keys are read again while the link is up (default 30 s): a
    /// key written without a message, or a message lost, is applied within this time.
    /// The read also checks that Redis still answers. At most a day.
    pub fn resync_every(mut self, every: Duration) -> Self {
        self.resync_every = every;
        self
    }

    /// The wait before the first attempt to reconnect, doubling after each failure up
    /// to `longest`, each spread by up to half (defaults 100 ms and 10 s).
    pub fn reconnect_backoff(mut self, first: Duration, longest: Duration) -> Self {
        self.reconnect_first = first;
        self.reconnect_longest = longest;
        self
    }

    /// How long to wait for Redis to accept a connection or answer a command (default
    /// 2 s, at most a day); past it the link is down.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How many peers' sequence numbers and reports are remembered per breaker
    /// (default 1024); the peer heard from longest ago is forgotten first. A quorum
    /// ([`HintPolicy::Quorum`](super::HintPolicy::Quorum)) of more replicas is refused.
    pub fn max_peers(mut self, peers: usize) -> Self {
        self.max_peers = peers;
        self
    }

    /// Checks the settings and starts the replica's link: a task on the current tokio
    /// runtime connects, subscribes, reads the kill keys, and reconnects with backoff
    /// whenever the link is lost. It returns at once, with the link down until the
    /// first connection: wait for it with [`Fleet::wait_for_link`].
    ///
    /// # Errors
    ///
    /// The first setting that cannot work, [`FleetError::NoRuntime`], or
    /// [`FleetError::NoCryptoProvider`] for TLS without one.
    pub fn start(self) -> Result<Fleet, FleetError> {
        let settings = self.settings()?;
        #[cfg(feature = "fleet-tls")]
        if matches!(settings.connection.addr(), ConnectionAddr::TcpTls { .. })
            && rustls::crypto::CryptoProvider::get_default().is_none()
        {
            return Err(FleetError::NoCryptoProvider);
        }
        Fleet::start(settings)
    }

    pub(crate) fn settings(self) -> Result<Settings, FleetError> {
        let bad = |setting, reason| Err(FleetError::BadSetting { setting, reason });
        if self.max_hold.is_zero() || self.max_hold > Duration::from_secs(24 * 3600) {
            return bad("max_hold", "it must be longer than zero and at most a day");
        }
        if self.default_hold.is_zero() || self.default_hold > self.max_hold {
            return bad(
                "default_hold",
                "it must be longer than zero and at most max_hold",
            );
        }
        if !(256..=1 << 20).contains(&self.max_message_bytes) {
            return bad("max_message_bytes", "it must be from 256 bytes to 1 MiB");
        }
        // The link's task adds these to instants and doubles them: past a day they are
        // refused here rather than left to overflow there.
        let day = Duration::from_secs(24 * 3600);
        if self.resync_every.is_zero() || self.resync_every > day {
            return bad(
                "resync_every",
                "it must be longer than zero and at most a day",
            );
        }
        if self.reconnect_first.is_zero() || self.reconnect_longest < self.reconnect_first {
            return bad(
                "reconnect_backoff",
                "the first wait must be longer than zero and the longest at least the first",
            );
        }
        if self.timeout.is_zero() || self.timeout > day {
            return bad("timeout", "it must be longer than zero and at most a day");
        }
        if self.max_peers == 0 {
            return bad("max_peers", "at least one peer must be remembered");
        }
        let keys = Keys::new(&self.prefix)?;
        let seed = RandomState::new().hash_one(std::process::id());
        let replica: Arc<str> = match self.replica {
            Some(replica) => replica.into(),
            None => format!("replica-{}-{:08x}", std::process::id(), seed as u32).into(),
        };
        check_name("replica", &replica)?;
        let connection = connection_info(
            &self.address,
            self.username,
            self.password,
            self.database,
            self.tls,
        )?;
        Ok(Settings {
            connection,
            keys,
            replica,
            run: format!("{:016x}", RandomState::new().hash_one(seed)).into(),
            max_hold: self.max_hold,
            default_hold: self.default_hold,
            max_message_bytes: self.max_message_bytes,
            resync_every: self.resync_every,
            reconnect_first: self.reconnect_first,
            reconnect_longest: self.reconnect_longest,
            timeout: self.timeout,
            max_peers: self.max_peers,
            seed,
        })
    }
}

/// The client's connection settings: the address, with the log-in, database and TLS
/// given to the builder on top.
fn connection_info(
    address: &str,
    username: Option<String>,
    password: Option<String>,
    database: Option<i64>,
    tls: Option<Tls>,
) -> Result<ConnectionInfo, FleetError> {
    let wants_tls = tls.is_some() || address.starts_with("rediss://");
    if wants_tls && !cfg!(feature = "fleet-tls") {
        return Err(FleetError::TlsNotBuilt);
    }
    let info = address
        .into_connection_info()
        .map_err(|error| FleetError::BadAddress {
            reason: address_error(&error),
        })?;
    let mut redis = info.redis_settings().clone();
    if let Some(username) = username {
        redis = redis.set_username(username);
    }
    if let Some(password) = password {
        redis = redis.set_password(password);
    }
    if let Some(database) = database {
        redis = redis.set_db(database);
    }
    let addr = match (tls, info.addr().clone()) {
        (None, addr) => addr,
        (Some(tls), ConnectionAddr::Tcp(host, port)) => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: tls == Tls::Insecure,
            tls_params: None,
        },
        (
            Some(tls),
            ConnectionAddr::TcpTls {
                host,
                port,
                tls_params,
                ..
            },
        ) => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: tls == Tls::Insecure,
            tls_params,
        },
        // A unix socket, or a kind of address newer than this crate.
        (Some(_), _) => {
            return Err(FleetError::BadAddress {
                reason: "TLS is only for TCP addresses".into(),
            })
        }
    };
    Ok(info.set_addr(addr).set_redis_settings(redis))
}

/// What the client says is wrong with an address, without the piece of the address it
/// quotes (`Invalid protocol version - InvalidClientConfig: <a query parameter's value>`),
/// which may be a secret, and without credentials.
fn address_error(error: &redis::RedisError) -> String {
    let text = error.to_string();
    let quoted = error
        .detail()
        .and_then(|detail| text.strip_suffix(detail))
        .and_then(|text| text.strip_suffix(": "));
    match quoted {
        Some(text) => format!("{}: [redacted]", crate::redact(text)),
        None => crate::redact(&text).into_owned(),
    }
}

/// The checked settings.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) connection: ConnectionInfo,
    pub(crate) keys: Keys,
    pub(crate) replica: Arc<str>,
    /// This run of the process: peers tell a restarted replica's new sequence from a
    /// replay of the old one.
    pub(crate) run: Arc<str>,
    pub(crate) max_hold: Duration,
    pub(crate) default_hold: Duration,
    pub(crate) max_message_bytes: usize,
    pub(crate) resync_every: Duration,
    pub(crate) reconnect_first: Duration,
    pub(crate) reconnect_longest: Duration,
    pub(crate) timeout: Duration,
    pub(crate) max_peers: usize,
    pub(crate) seed: u64,
}

impl Settings {
    /// `text` with credentials removed: the crate's [`redact`](crate::redact) (a URL's
    /// user information and query, tokens), and the password to Redis wherever it
    /// shows. What the client says of a connection may be shown anywhere (events,
    /// errors, logs).
    pub(crate) fn redact(&self, text: &str) -> Arc<str> {
        let text = crate::redact(text);
        match self.connection.redis_settings().password() {
            Some(password) if !password.is_empty() && text.contains(password) => {
                text.replace(password, REDACTED).into()
            }
            _ => text.into(),
        }
    }
}

/// Where a connection goes, with the password hidden.
struct Redacted<'a>(&'a ConnectionInfo);

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (addr, tls) = match self.0.addr() {
            ConnectionAddr::Tcp(host, port) => (format!("{host}:{port}"), false),
            ConnectionAddr::TcpTls { host, port, .. } => (format!("{host}:{port}"), true),
            ConnectionAddr::Unix(path) => (path.display().to_string(), false),
            // A kind of address newer than this crate: its kind only, never its text.
            _ => ("(another kind of address)".to_string(), false),
        };
        let redis = self.0.redis_settings();
        f.debug_struct("Redis")
            .field("addr", &addr)
            .field("tls", &tls)
            .field("db", &redis.db())
            .field("username", &redis.username())
            .field("password", &redis.password().map(|_| "<hidden>"))
            .finish()
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("redis", &Redacted(&self.connection))
            .field("keys", &self.keys)
            .field("replica", &self.replica)
            .field("max_hold", &self.max_hold)
            .field("default_hold", &self.default_hold)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for FleetBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetBuilder")
            .field("prefix", &self.prefix)
            .field("replica", &self.replica)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("tls", &self.tls)
            .field("max_hold", &self.max_hold)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_in_settings_pass_through_to_the_client_and_stay_hidden() {
        let settings = FleetBuilder::new()
            .address("redis://olduser:oldpass@10.1.2.3:6380/2")
            .username("agents")
            .password("s3cret")
            .database(5)
            .settings()
            .unwrap();
        let info = &settings.connection;
        assert_eq!(*info.addr(), ConnectionAddr::Tcp("10.1.2.3".into(), 6380));
        assert_eq!(info.redis_settings().username(), Some("agents"));
        assert_eq!(info.redis_settings().password(), Some("s3cret"));
        assert_eq!(info.redis_settings().db(), 5);
        let shown = format!("{settings:?}");
        assert!(
            !shown.contains("s3cret") && shown.contains("<hidden>"),
            "{shown}"
        );
        let builder = FleetBuilder::new().password("s3cret");
        assert!(!format!("{builder:?}").contains("s3cret"));
    }

    #[test]
    fn tls_is_asked_of_the_client_or_refused_when_not_built() {
        let built = FleetBuilder::new().tls(Tls::Insecure).settings();
        let from_url = FleetBuilder::new()
            .address("rediss://cache:6380")
            .settings();
        if cfg!(feature = "fleet-tls") {
            let info = built.unwrap().connection;
            assert!(matches!(
                info.addr(),
                ConnectionAddr::TcpTls { insecure: true, .. }
            ));
            let info = from_url.unwrap().connection;
            assert!(matches!(
                info.addr(),
                ConnectionAddr::TcpTls {
                    insecure: false,
                    ..
                }
            ));
        } else {
            assert_eq!(built.unwrap_err(), FleetError::TlsNotBuilt);
            assert_eq!(from_url.unwrap_err(), FleetError::TlsNotBuilt);
        }
    }

    #[cfg(feature = "fleet-tls")]
    #[test]
    fn tls_without_a_crypto_provider_is_refused_at_start() {
        let error = FleetBuilder::new().tls(Tls::Verified).start().unwrap_err();
        assert_eq!(error, FleetError::NoCryptoProvider);
    }

    #[test]
    fn settings_that_cannot_work_are_refused() {
        let s = Duration::from_secs;
        let cases = [
            FleetBuilder::new().max_hold(Duration::ZERO),
            FleetBuilder::new().max_hold(s(2 * 24 * 3600)),
            FleetBuilder::new().default_hold(s(600)),
            FleetBuilder::new().max_message_bytes(10),
            FleetBuilder::new().resync_every(Duration::ZERO),
            FleetBuilder::new().resync_every(Duration::MAX),
            FleetBuilder::new().reconnect_backoff(s(5), s(1)),
            FleetBuilder::new().timeout(Duration::ZERO),
            FleetBuilder::new().timeout(s(24 * 3600 + 1)),
            FleetBuilder::new().max_peers(0),
        ];
        for builder in cases {
            let shown = format!("{builder:?}");
            assert!(
                matches!(builder.settings(), Err(FleetError::BadSetting { .. })),
                "{shown}"
            );
        }
        assert!(matches!(
            FleetBuilder::new().address("http://x").settings(),
            Err(FleetError::BadAddress { .. })
        ));
        assert!(matches!(
            FleetBuilder::new().prefix("").settings(),
            Err(FleetError::BadName { what: "prefix", .. })
        ));
        assert!(matches!(
            FleetBuilder::new().replica("a\nb").settings(),
            Err(FleetError::BadName {
                what: "replica",
                ..
            })
        ));
    }

    #[test]
    fn an_address_the_client_refuses_is_reported_without_what_it_quotes_from_it() {
        // The client quotes the bad parameter's value, which may be a secret.
        let quoted = FleetBuilder::new()
            .address("redis://:s3cret@cache:6379/0?protocol=s3cret")
            .settings()
            .unwrap_err();
        let FleetError::BadAddress { reason } = &quoted else {
            panic!("{quoted:?}");
        };
        assert!(
            reason.starts_with("Invalid protocol version") && reason.ends_with(": [redacted]"),
            "{reason}"
        );
        assert!(!quoted.to_string().contains("s3cret"), "{quoted}");
    }
}
