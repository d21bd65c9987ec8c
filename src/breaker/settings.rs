//! What a person sets for one breaker, with its defaults: the trip policy, the cooldown
//! and its backoff, the mode, and the whole [`Config`] a builder checks and the machine
//! reads. Public as [`config`](crate::config) (the checked settings and the trip
//! policies) and at the crate's root (the cooldown, backoff and mode).

use std::time::Duration;

/// When the breaker trips from closed to open.
///
/// The default is [`TripPolicy::ConsecutiveFailures`] with a threshold of 3, which tells a
/// run of failures from an unlucky one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TripPolicy {
    /// Open after this many failures in a row; any success resets the count.
    ConsecutiveFailures(u32),
    /// Open when the share of failures in the window reaches `rate` (in `0.0..=1.0`),
    /// once at least `minimum_calls` outcomes are in the window.
    FailureRate {
        /// The failure share that trips the breaker, for example `0.5`.
        rate: f64,
        /// What the share is computed over.
        window: RateWindow,
        /// How many outcomes the window must hold before the rate is trusted.
        minimum_calls: u32,
    },
}

impl Default for TripPolicy {
    fn default() -> Self {
        TripPolicy::ConsecutiveFailures(3)
    }
}

/// The window a [`TripPolicy::FailureRate`] is computed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateWindow {
    /// The last N outcomes (a ring of bits, one per outcome), at most
    /// [`RateWindow::MAX_CALLS`].
    Calls(u32),
    /// The outcomes of the last duration, kept in ten buckets.
    Time(Duration),
}

impl RateWindow {
    /// The longest window in calls: a million outcomes (125 KiB of ring). A longer one
    /// is [`ConfigError::WindowTooLong`](crate::error::ConfigError::WindowTooLong) when
    /// the breaker is built, not an allocation of up to 512 MiB per breaker (per key, in
    /// a keyed registry).
    pub const MAX_CALLS: u32 = 1_000_000;
}

/// How long an open breaker waits before it lets one probe through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cooldown {
    /// Counted in calls: every call that reaches the breaker is a step, skipped ones
    /// too, and with `Calls(n)` the n-th call after the opening one is the probe.
    Calls(u64),
    /// Counted in time, through the clock the caller passes in (`tokio::time` in the
    /// layer, so paused-time tests run instantly).
    Time(Duration),
}

impl Default for Cooldown {
    fn default() -> Self {
        Cooldown::Time(Duration::from_secs(30))
    }
}

impl Cooldown {
    /// The longest cooldown in calls a breaker accepts (2^56 - 1, some 7 * 10^16 calls):
    /// a skipped call is told the exact number of calls until the probe, in the word it
    /// travels in.
    pub const MAX_CALLS: u64 = (1 << 56) - 1;
}

/// Exponential growth of the cooldown when a breaker re-opens without having closed
/// (a failed probe): the k-th re-open waits `base * multiplier^k`, never more than `cap`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    pub(in crate::breaker) multiplier: f64,
    pub(in crate::breaker) cap: Cooldown,
}

impl Backoff {
    /// Grow the cooldown by `multiplier` at each re-open, up to `cap` (in the same unit
    /// as the cooldown). Checked when the breaker is built.
    pub fn exponential(multiplier: f64, cap: Cooldown) -> Self {
        Backoff { multiplier, cap }
    }

    /// The growth factor.
    pub fn multiplier(&self) -> f64 {
        self.multiplier
    }

    /// The longest cooldown.
    pub fn cap(&self) -> Cooldown {
        self.cap
    }
}

/// How a breaker behaves while it is being rolled out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Mode {
    /// The breaker works: it trips, skips and probes.
    #[default]
    Enabled = 0,
    /// Records outcomes and moves through its states as if enabled, but every call is
    /// made: answers that an enabled breaker would have skipped say so
    /// ([`Source::Shadowed`](crate::Source::Shadowed)).
    ObserveOnly = 1,
    /// Pass-through: nothing is decided and nothing is recorded. The kill switch still
    /// applies, because it is a person's decision (a call it skips is not counted or
    /// reported either: nothing is). The state is kept as it was, and
    /// time alone still moves it: a half-open breaker whose dwell limit passes re-opens
    /// (and an open one's wait runs on), as the snapshot then shows.
    Disabled = 2,
}

impl Mode {
    /// `enabled`, `observe_only` or `disabled`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Mode::Enabled => "enabled",
            Mode::ObserveOnly => "observe_only",
            Mode::Disabled => "disabled",
        }
    }
}

/// The checked settings of one breaker, as [`Builder::build_config`](crate::Builder::build_config)
/// returns them: every value in it has been validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub(in crate::breaker) name: std::sync::Arc<str>,
    pub(in crate::breaker) trip: TripPolicy,
    pub(in crate::breaker) cooldown: Cooldown,
    pub(in crate::breaker) backoff: Option<Backoff>,
    pub(in crate::breaker) jitter: f64,
    pub(in crate::breaker) jitter_seed: Option<u64>,
    pub(in crate::breaker) half_open_probes: u32,
    pub(in crate::breaker) max_half_open_dwell: Option<Duration>,
    pub(in crate::breaker) max_retry_after: Duration,
    pub(in crate::breaker) open_on_retry_after: bool,
    pub(in crate::breaker) slow_call: Option<Duration>,
    pub(in crate::breaker) mode: Mode,
    /// Every call is timed, and observers are told how long it took (call-duration
    /// metrics); a slow-call rule times calls whatever this says.
    pub(in crate::breaker) time_calls: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            name: "circuit-breaker".into(),
            trip: TripPolicy::default(),
            cooldown: Cooldown::default(),
            backoff: None,
            jitter: 0.0,
            jitter_seed: None,
            half_open_probes: 1,
            max_half_open_dwell: Some(Duration::from_secs(60)),
            max_retry_after: Duration::from_secs(300),
            open_on_retry_after: true,
            slow_call: None,
            mode: Mode::Enabled,
            time_calls: false,
        }
    }
}

impl Config {
    /// The breaker's name, used in logs, events and errors.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The trip policy.
    pub fn trip_policy(&self) -> TripPolicy {
        self.trip
    }

    /// The base cooldown.
    pub fn cooldown(&self) -> Cooldown {
        self.cooldown
    }

    /// The backoff on re-opens, if any.
    pub fn backoff(&self) -> Option<Backoff> {
        self.backoff
    }

    /// How many probes half-open admits at once, and how many successes close it.
    pub fn half_open_probes(&self) -> u32 {
        self.half_open_probes
    }

    /// The longest a breaker stays half-open before it re-opens on its own.
    pub fn max_half_open_dwell(&self) -> Option<Duration> {
        self.max_half_open_dwell
    }

    /// The longest wait a failed response may impose
    /// ([`Failure::retry_after`](crate::Failure::retry_after)).
    pub fn max_retry_after(&self) -> Duration {
        self.max_retry_after
    }

    /// Whether a failure that says how long to wait opens the breaker at once for that
    /// long (`true`, the default), or only counts as a failure.
    pub fn open_on_retry_after(&self) -> bool {
        self.open_on_retry_after
    }

    /// A success slower than this counts as a failure.
    pub fn slow_call_threshold(&self) -> Option<Duration> {
        self.slow_call
    }

    /// The mode the breaker starts in.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether calls are timed: for a slow-call rule, or for call-duration metrics.
    pub(in crate::breaker) fn times_calls(&self) -> bool {
        self.slow_call.is_some() || self.time_calls
    }
}
