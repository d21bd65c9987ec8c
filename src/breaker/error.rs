//! Error types.

// Each `#[inline(always)]` here pays in the awaited benchmark (the future, the fallbacks
// and the error constructors: docs/performance.md, "Inlining").
use std::fmt;
use std::num::NonZeroU8;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::breaker::settings::RateWindow;
use crate::breaker::state::{NextProbe, Reason, Skip, State};

/// A setting that cannot work, found when the breaker is built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The consecutive-failure threshold is 0, so the breaker would open before any call.
    #[error("failure threshold must be at least 1, got 0")]
    ZeroThreshold,
    /// The failure rate is not a number in `0.0..=1.0`, or is 0 (which would trip on a
    /// window of successes).
    #[error("failure rate must be in (0.0, 1.0], got {0}")]
    InvalidFailureRate(f64),
    /// The failure-rate window holds no calls or no time.
    #[error("failure-rate window must not be empty")]
    EmptyWindow,
    /// A count window longer than [`RateWindow::MAX_CALLS`].
    #[error(
        "failure-rate window must be at most {} calls, got {window}",
        RateWindow::MAX_CALLS
    )]
    WindowTooLong {
        /// The window's size in calls.
        window: u32,
    },
    /// A count window smaller than its minimum number of calls can never trip.
    #[error("minimum calls ({minimum_calls}) exceed the window of {window} calls, so the breaker could never trip")]
    MinimumCallsAboveWindow {
        /// The minimum number of calls.
        minimum_calls: u32,
        /// The window's size in calls.
        window: u32,
    },
    /// The cooldown is zero calls or zero time.
    #[error("cooldown must not be zero")]
    ZeroCooldown,
    /// A cooldown (or backoff cap) in calls is longer than
    /// [`Cooldown::MAX_CALLS`](crate::Cooldown::MAX_CALLS).
    #[error("cooldown in calls must be at most 2^56 - 1")]
    CooldownTooLong,
    /// Half-open must admit at least one probe.
    #[error("half-open probes must be at least 1, got 0")]
    ZeroHalfOpenProbes,
    /// The backoff multiplier is below 1 or not finite.
    #[error("backoff multiplier must be a finite number of at least 1.0, got {0}")]
    InvalidMultiplier(f64),
    /// The backoff cap is counted in another unit than the cooldown.
    #[error("backoff cap is in {cap}, but the cooldown is in {cooldown}")]
    BackoffUnitMismatch {
        /// The cooldown's unit.
        cooldown: &'static str,
        /// The cap's unit.
        cap: &'static str,
    },
    /// The backoff cap is shorter than the cooldown it grows from.
    #[error("backoff cap is below the base cooldown")]
    BackoffCapBelowBase,
    /// Jitter is a fraction in `0.0..1.0`.
    #[error("jitter must be in [0.0, 1.0), got {0}")]
    InvalidJitter(f64),
    /// A zero half-open dwell limit would re-open the breaker before any probe ends.
    #[error("maximum half-open dwell must not be zero")]
    ZeroDwell,
    /// A zero slow-call threshold would count every call as slow.
    #[error("slow-call threshold must not be zero")]
    ZeroSlowCall,
    /// A zero cap on response-given cooldowns would ignore them all; leave it unset
    /// instead.
    #[error("maximum retry-after must not be zero")]
    ZeroMaxRetryAfter,
    /// The breaker's name is empty.
    #[error("breaker name must not be empty")]
    EmptyName,
    /// A keyed registry must hold at least one breaker
    /// ([`KeyedBuilder::capacity`](crate::keyed::KeyedBuilder::capacity)).
    #[error("keyed registry capacity must be at least 1, got 0")]
    ZeroCapacity,
}

/// The boxed error a [`CircuitBreaker`](crate::CircuitBreaker) returns by default, as in
/// tower.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The error of a call through a breaker set to fail skipped calls with a typed error
/// ([`CircuitBreakerLayer::with_typed_errors`](crate::CircuitBreakerLayer::with_typed_errors)):
/// the call was not made, or the wrapped service failed.
///
/// Unlike the default [`BoxError`], it is matched rather than downcast, and a rejection
/// allocates nothing: the [`Rejected`] is carried by value (only one that names a
/// permanent failure, held until a person resets the breaker, allocates once, to carry
/// the failure's message with the breaker's name). Its message and source are those of
/// what it holds; `?` boxes it into a [`BoxError`] like any other error.
///
/// ```
/// use tower::{service_fn, Layer, Service, ServiceExt};
/// use tower_circuit_breaker::error::CallError;
/// use tower_circuit_breaker::{CircuitBreakerLayer, Reason};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let layer = CircuitBreakerLayer::builder().name("search").build()?.with_typed_errors();
/// layer.handle().force_open();
/// let mut svc = layer.layer(service_fn(|_: ()| async { Ok::<_, std::io::Error>(()) }));
/// match svc.ready().await?.call(()).await {
///     Err(CallError::Rejected(rejected)) => assert_eq!(rejected.reason(), Reason::ForcedOpen),
///     Err(CallError::Service(error)) => panic!("the service failed: {error}"),
///     Err(other) => panic!("{other}"),
///     Ok(_) => panic!("the breaker is open"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The breaker did not make the call.
    #[error(transparent)]
    Rejected(Rejected),
    /// The wrapped service failed, in `poll_ready` or in its call.
    #[error(transparent)]
    Service(BoxError),
}

impl CallError {
    /// The rejection, if the call was not made.
    pub fn rejected(&self) -> Option<&Rejected> {
        match self {
            CallError::Rejected(rejected) => Some(rejected),
            CallError::Service(_) => None,
        }
    }
}

/// What a breaker's calls fail with: [`BoxError`] by default, or [`CallError`] with
/// [typed errors](crate::CircuitBreakerLayer::with_typed_errors). Sealed.
pub trait BreakerError: sealed::Sealed + Sized {
    /// The wrapped service's error, as this kind of error carries it.
    #[doc(hidden)]
    fn service(error: BoxError) -> Self;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::BoxError {}
    impl Sealed for super::CallError {}
}

impl BreakerError for BoxError {
    #[inline(always)]
    fn service(error: BoxError) -> Self {
        error
    }
}

impl BreakerError for CallError {
    #[inline(always)]
    fn service(error: BoxError) -> Self {
        CallError::Service(error)
    }
}

/// The call was not made and no fallback is set.
///
/// It comes boxed in a [`BoxError`]; find it with `err.downcast_ref::<Rejected>()`. It
/// says why and when the breaker will next let a probe through.
///
/// ```
/// use tower::{service_fn, Layer, Service, ServiceExt};
/// use tower_circuit_breaker::{error::Rejected, CircuitBreakerLayer, Reason};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let layer = CircuitBreakerLayer::builder().name("search").build()?;
/// layer.handle().kill_switch().kill();
/// let mut svc = layer.layer(service_fn(|_: ()| async { Ok::<_, std::io::Error>(()) }));
/// let err = svc.ready().await?.call(()).await.unwrap_err();
/// let rejected = err.downcast_ref::<Rejected>().unwrap();
/// assert_eq!(rejected.reason(), Reason::Killed);
/// assert_eq!(err.to_string(), "circuit breaker `search` skipped the call: the kill switch is on");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Rejected {
    skip: Skip,
    label: Label,
}

/// A breaker's name as its rejections carry it, with the failure of the service's own that
/// holds it open until a reset, when one does. Two words, as a skip is, so that a
/// rejection is four words: a rejection carried by value ([`CallError`]) moves in a few
/// whole-word copies, and a boxed one is a small allocation. A short name is copied:
/// sharing it would touch its reference count twice for every rejection, from every
/// thread rejecting at once, one cache line bounced between cores for each call an open
/// breaker turns away. Made once, with the breaker or at its first rejection (see
/// [`BreakerName`]), and copied whole: copied from the string at each rejection, the
/// copy's bytes would be read back wider than they were written, a stall a call.
#[derive(Clone)]
enum Label {
    /// A name of at most [`Label::INLINE`] bytes, and no permanent failure.
    Inline(Short),
    /// A longer name, or one with a permanent failure to tell.
    Shared(Arc<Named>),
}

/// A short name, padded with `0xFF` (a byte UTF-8 never holds), and one byte more, `0xFF`
/// too, that holds the place a [`Label`]'s kinds are told apart in. In this order (`C`'s
/// layout, so that it stays so): the name's bytes start the label, and a copy of it moves
/// whole words (after a tag, they were copied in odd pieces, each read back across two
/// writes: a stall a rejection). A last byte of one value (an enum) does not do: it is
/// known without being read, and the other fifteen move in odd pieces again.
#[derive(Clone, Copy)]
#[repr(C)]
struct Short {
    bytes: [u8; Label::INLINE],
    #[allow(dead_code)] // never read: its place tells the kinds apart
    end: NonZeroU8,
}

impl Short {
    /// `name`, if it is short.
    fn of(name: &str) -> Option<Short> {
        if name.len() > Label::INLINE {
            return None;
        }
        let mut bytes = [0xFF; Label::INLINE];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        Some(Short {
            bytes,
            end: NonZeroU8::MAX,
        })
    }
}

/// What a [`Label::Shared`] holds.
struct Named {
    name: Arc<str>,
    permanent: Option<Arc<str>>,
}

impl Label {
    /// The default name, `circuit-breaker`, fits.
    const INLINE: usize = 15;

    fn new(name: &Arc<str>) -> Label {
        Short::of(name).map_or_else(|| Label::shared(name, None), Label::Inline)
    }

    fn shared(name: &Arc<str>, permanent: Option<Arc<str>>) -> Label {
        Label::Shared(Arc::new(Named {
            name: name.clone(),
            permanent,
        }))
    }

    fn name(&self) -> &str {
        match self {
            // Copied whole from a `str`: always UTF-8, up to its padding.
            Label::Inline(Short { bytes, .. }) => {
                let len = bytes.iter().position(|&b| b == 0xFF).unwrap_or(bytes.len());
                std::str::from_utf8(&bytes[..len]).unwrap_or_default()
            }
            Label::Shared(named) => &named.name,
        }
    }

    fn permanent(&self) -> Option<&str> {
        match self {
            Label::Inline(_) => None,
            Label::Shared(named) => named.permanent.as_deref(),
        }
    }
}

pub(in crate::breaker) use self::label::BreakerName;

/// In a module of its own, so that only a rejection reads the copy.
mod label {
    use std::fmt;
    use std::sync::Arc;

    use once_cell::race::OnceBox;

    use super::{Label, Short};

    /// A breaker's name, and the copy of it its rejections carry.
    pub(in crate::breaker) struct BreakerName {
        full: Arc<str>,
        /// The copy of a short name (an `Option` of it is no bigger than it: its last
        /// byte has a value to spare).
        short: Option<Short>,
        /// A longer name's copy, a small allocation: made with the name, or, for a keyed
        /// registry's breakers (most of which never turn a call away), at its first
        /// rejection.
        long: OnceBox<Label>,
    }

    impl BreakerName {
        /// The name `full`, with its copy made now.
        pub(in crate::breaker) fn new(full: Arc<str>) -> Self {
            let name = Self::copied_when_rejected(full);
            if name.short.is_none() {
                name.long();
            }
            name
        }

        /// The name `full`; if it is longer than a short name, its copy is made at its
        /// first rejection (for a keyed registry's breakers, most of which never reject).
        pub(in crate::breaker) fn copied_when_rejected(full: Arc<str>) -> Self {
            BreakerName {
                short: Short::of(&full),
                long: OnceBox::new(),
                full,
            }
        }

        pub(in crate::breaker) fn full(&self) -> &Arc<str> {
            &self.full
        }

        /// The copy a rejection carries.
        #[inline]
        pub(super) fn rejected(&self) -> Label {
            match self.short {
                Some(short) => Label::Inline(short),
                None => self.long().clone(),
            }
        }

        #[cold]
        #[inline(never)]
        fn long(&self) -> &Label {
            self.long.get_or_init(|| Box::new(Label::new(&self.full)))
        }
    }

    impl std::ops::Deref for BreakerName {
        type Target = str;

        fn deref(&self) -> &str {
            &self.full
        }
    }

    impl fmt::Debug for BreakerName {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            fmt::Debug::fmt(&*self.full, f)
        }
    }
}

impl Rejected {
    /// A rejection of a call skipped as `skip`; `permanent`: the message of the failure
    /// that holds the breaker open until a reset, when one does.
    #[inline]
    pub(in crate::breaker) fn new(
        name: &BreakerName,
        skip: Skip,
        permanent: Option<&Arc<str>>,
    ) -> Self {
        let label = match permanent {
            None => name.rejected(),
            Some(failure) => Label::shared(name.full(), Some(failure.clone())),
        };
        Rejected { skip, label }
    }

    /// The breaker's rejection in `error`, if the call was not made: the error itself, a
    /// [`CallError::Rejected`], or either among its sources (a rejection boxed into a
    /// [`BoxError`], or wrapped by a layer outside the breaker). Layers and products that
    /// must tell a skipped call from a failed one (a retry, a failover) ask this.
    ///
    /// ```
    /// use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
    /// use tower_circuit_breaker::error::Rejected;
    /// use tower_circuit_breaker::{CircuitBreakerLayer, Reason};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), BoxError> {
    /// let layer = CircuitBreakerLayer::builder().name("search").build()?;
    /// layer.handle().force_open();
    /// let mut svc = layer.layer(service_fn(|_: ()| async { Ok::<_, BoxError>(()) }));
    /// let error = svc.ready().await?.call(()).await.unwrap_err();
    /// assert_eq!(Rejected::find(&*error).map(Rejected::reason), Some(Reason::ForcedOpen));
    /// assert!(Rejected::find(&std::io::Error::other("refused")).is_none());
    /// # Ok(()) }
    /// ```
    pub fn find<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a Rejected> {
        std::iter::successors(Some(error), |error| error.source()).find_map(|error| {
            error
                .downcast_ref::<Rejected>()
                .or_else(|| error.downcast_ref::<CallError>()?.rejected())
        })
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        self.label.name()
    }

    /// Why the call was not made.
    pub fn reason(&self) -> Reason {
        self.skip.reason()
    }

    /// The breaker's state when the call arrived.
    pub fn state(&self) -> State {
        self.skip.state()
    }

    /// When the next probe may go.
    pub fn next_probe(&self) -> NextProbe {
        self.skip.next_probe()
    }

    /// The skip itself: its reason, state and next probe, and whether the service asked
    /// to wait longer than the breaker waits ([`Skip::asked_longer`]), as a fallback
    /// would have been told it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower::{service_fn, Service, ServiceExt};
    /// use tower_circuit_breaker::error::Rejected;
    /// use tower_circuit_breaker::{CircuitBreakerLayer, Reason};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower::BoxError> {
    /// let layer = CircuitBreakerLayer::builder().build()?;
    /// layer.handle().open_for(Duration::from_secs(30));
    /// let mut svc = tower::Layer::layer(&layer, service_fn(|_: ()| async { Ok::<_, tower::BoxError>(()) }));
    /// let error = svc.ready().await?.call(()).await.unwrap_err();
    /// let skip = Rejected::find(&*error).expect("skipped").skip();
    /// assert_eq!(skip.reason(), Reason::ForcedOpen);
    /// assert!(!skip.asked_longer());
    /// # Ok(()) }
    /// ```
    pub fn skip(&self) -> Skip {
        self.skip
    }

    /// How long from `now` until a probe may go, when the wait is known in time. `now`
    /// is on the breaker's clock: `tokio::time::Instant::now().into_std()` (see
    /// [`NextProbe`]).
    pub fn retry_after_from(&self, now: Instant) -> Option<Duration> {
        self.skip.next_probe().retry_after(now)
    }

    /// How long from now until a probe may go, when the wait is known in time, as
    /// [`Snapshot::retry_after`](crate::snapshot::Snapshot::retry_after) and
    /// [`Unavailable::retry_after`](crate::saved::Unavailable::retry_after) say it: the
    /// time left of a cooldown in time, of a wait the service asked for or of a hold
    /// (zero once it has passed); zero when the next call will be the probe; `None` when
    /// only calls, a probe under way or a person decide ([`next_probe`](Self::next_probe)
    /// says which). Measured on the breaker's clock, `tokio::time`, so it is exact in
    /// paused-time tests; for an HTTP `Retry-After`, round it up to whole seconds.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_circuit_breaker::{error::Rejected, CircuitBreakerLayer, Cooldown};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower::BoxError> {
    /// let layer = CircuitBreakerLayer::builder()
    ///     .failure_threshold(1)
    ///     .cooldown(Cooldown::Time(Duration::from_secs(30)))
    ///     .build()?;
    /// let mut svc = layer.layer(service_fn(|_: ()| async {
    ///     Err::<(), _>(std::io::Error::other("connection refused"))
    /// }));
    /// assert!(svc.ready().await?.call(()).await.is_err()); // opens it for 30 s
    ///
    /// tokio::time::advance(Duration::from_secs(12)).await;
    /// let err = svc.ready().await?.call(()).await.unwrap_err();
    /// let rejected = err.downcast_ref::<Rejected>().unwrap();
    /// assert_eq!(rejected.retry_after(), Some(Duration::from_secs(18)));
    ///
    /// // Counted in calls, the wait is known in time only when the next call probes.
    /// let layer = CircuitBreakerLayer::builder()
    ///     .failure_threshold(1)
    ///     .cooldown(Cooldown::Calls(3))
    ///     .build()?;
    /// let mut svc = layer.layer(service_fn(|_: ()| async {
    ///     Err::<(), _>(std::io::Error::other("connection refused"))
    /// }));
    /// assert!(svc.ready().await?.call(()).await.is_err());
    /// let err = svc.ready().await?.call(()).await.unwrap_err();
    /// let rejected = err.downcast_ref::<Rejected>().unwrap();
    /// assert_eq!((rejected.retry_after(), rejected.calls_until_probe()), (None, Some(2)));
    /// # Ok(()) }
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after_from(crate::breaker::clock::now())
    }

    /// When the breaker is held open until a reset by a failure of the service's own (a
    /// permanent one: an exhausted quota, a revoked key), what that failure said; a person
    /// must act before any call is made again.
    pub fn permanent_failure(&self) -> Option<&str> {
        self.label.permanent()
    }

    /// How many calls until the probe (1: the next call), when one is scheduled. With a
    /// wait in time (a cooldown in time, a `Retry-After`, a hold) it is usually 1: the first
    /// call once [`retry_after_from`](Self::retry_after_from) has passed.
    pub fn calls_until_probe(&self) -> Option<u64> {
        self.skip.next_probe().calls()
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "circuit breaker `{}` skipped the call: ", self.name())?;
        match self.skip.reason() {
            Reason::Killed => return f.write_str("the kill switch is on"),
            Reason::HalfOpenFull => return f.write_str("a probe is under way"),
            // Until a reset: nothing more to say.
            Reason::ForcedOpen if self.skip.next_probe() == NextProbe::Manual => {
                return f.write_str("it was forced open")
            }
            Reason::ForcedOpen => f.write_str("it was forced open")?,
            Reason::Open => match self.permanent_failure() {
                Some(failure) => write!(f, "it is open after a permanent failure ({failure})")?,
                None => f.write_str("it is open")?,
            },
        }
        self.skip.next_probe().tell(f, crate::breaker::clock::now())
    }
}

impl fmt::Debug for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rejected")
            .field("name", &self.name())
            .field("skip", &self.skip)
            .field("permanent_failure", &self.permanent_failure())
            .finish()
    }
}

impl std::error::Error for Rejected {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::state::{NextProbe, Reason, Skip, State};

    #[test]
    fn a_transport_errors_message_carries_no_url_secret() {
        #[derive(Debug)]
        struct Transport;
        impl fmt::Display for Transport {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("error sending request for url (https://u:pw@api.example/v1?key=k)")
            }
        }
        impl std::error::Error for Transport {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&Refused)
            }
        }
        #[derive(Debug)]
        struct Refused;
        impl fmt::Display for Refused {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("Connection refused (os error 111)")
            }
        }
        impl std::error::Error for Refused {}
        let failure = crate::Failure::new(crate::error_text::text_with_sources(&Transport));
        assert_eq!(
            failure.message().unwrap(),
            "error sending request for url (https://[redacted]@api.example/v1?[redacted]): \
             Connection refused (os error 111)"
        );
    }

    #[test]
    fn a_rejection_is_four_words_and_names_its_breaker_whole_at_any_length() {
        assert_eq!(std::mem::size_of::<Rejected>(), 32);
        let skip = Skip::new(Reason::Open, State::Open, NextProbe::Manual);
        for name in [
            "",
            "a",
            "ünï",
            "circuit-breaker",
            "sixteen-bytes-ok",
            "é-ünïcödé-näme",
            "\0",
        ] {
            let rejected = Rejected::new(&BreakerName::new(name.into()), skip, None);
            assert_eq!(rejected.name(), name);
            assert_eq!(rejected.permanent_failure(), None);
        }
        let rejected = Rejected::new(
            &BreakerName::new("quota".into()),
            skip,
            Some(&"exhausted".into()),
        );
        assert_eq!(
            (rejected.name(), rejected.permanent_failure()),
            ("quota", Some("exhausted"))
        );
    }
}
