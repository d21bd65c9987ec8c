use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use crate::breaker::clock::now;
use crate::breaker::error::ConfigError;
use crate::breaker::event::Event;
use crate::breaker::kill::KillSwitch;
use crate::breaker::layer::CircuitBreakerLayer;
use crate::breaker::machine::Machine;
use crate::breaker::settings::{Backoff, Config, Cooldown, Mode, RateWindow, TripPolicy};
use crate::breaker::shared::{DeliveryGroup, Observer, Shared};
use crate::breaker::state::Transition;

/// Settings for a breaker, checked when it is built.
///
/// Setters take any value; [`build`](Self::build) checks them all and returns the first
/// bad one as a [`ConfigError`], so a breaker that exists is one that can work.
///
/// ```
/// use std::time::Duration;
/// use tower_circuit_breaker::{Backoff, Builder, Cooldown};
/// use tower_circuit_breaker::error::ConfigError;
///
/// let layer = Builder::new()
///     .name("search")
///     .failure_threshold(5)
///     .cooldown(Cooldown::Time(Duration::from_secs(5)))
///     .backoff(Backoff::exponential(2.0, Cooldown::Time(Duration::from_secs(60))))
///     .jitter(0.1)
///     .build()?;
///
/// assert_eq!(Builder::new().failure_threshold(0).build().unwrap_err(), ConfigError::ZeroThreshold);
/// # Ok::<(), ConfigError>(())
/// ```
#[derive(Clone, Default)]
pub struct Builder {
    config: Config,
    kill: Option<KillSwitch>,
    observers: Vec<Watcher>,
    /// The group of breakers whose events are counted together, if any.
    group: Option<Arc<DeliveryGroup>>,
}

impl CircuitBreakerLayer {
    /// A builder with the defaults: 3 consecutive failures trip it, 30 s
    /// cooldown, one probe.
    pub fn builder() -> Builder {
        Builder::new()
    }
}

impl Builder {
    /// The defaults: 3 consecutive failures trip the breaker, a 30 s cooldown,
    /// one probe, a 60 s half-open dwell limit.
    pub fn new() -> Self {
        Builder::default()
    }

    /// The name in logs, events, errors and reports.
    pub fn name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.config.name = name.into();
        self
    }

    /// Trip after `threshold` consecutive failures (the default policy, with 3).
    pub fn failure_threshold(mut self, threshold: u32) -> Self {
        self.config.trip = TripPolicy::ConsecutiveFailures(threshold);
        self
    }

    /// Trip when the failure share in `window` reaches `rate`, once the window holds
    /// `minimum_calls` outcomes (resilience4j's and Polly's policy). The share is checked
    /// after every outcome, successes too.
    pub fn failure_rate(mut self, rate: f64, window: RateWindow, minimum_calls: u32) -> Self {
        self.config.trip = TripPolicy::FailureRate {
            rate,
            window,
            minimum_calls,
        };
        self
    }

    /// Sets the trip policy.
    pub fn trip_policy(mut self, policy: TripPolicy) -> Self {
        self.config.trip = policy;
        self
    }

    /// How long an open breaker waits before its probe, in calls or in time.
    pub fn cooldown(mut self, cooldown: Cooldown) -> Self {
        self.config.cooldown = cooldown;
        self
    }

    /// Grows the cooldown on each re-open in a row; reset when the breaker closes.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.config.backoff = Some(backoff);
        self
    }

    /// Spreads each cooldown by up to this fraction either way (`0.1`: ±10 %), so
    /// breakers that opened together do not probe together.
    pub fn jitter(mut self, fraction: f64) -> Self {
        self.config.jitter = fraction;
        self
    }

    /// Seeds the jitter, for reproducible runs. By default each breaker has a random
    /// seed.
    pub fn jitter_seed(mut self, seed: u64) -> Self {
        self.config.jitter_seed = Some(seed);
        self
    }

    /// How many probes half-open admits at once; that many successes close it.
    pub fn half_open_probes(mut self, probes: u32) -> Self {
        self.config.half_open_probes = probes;
        self
    }

    /// The longest the breaker stays half-open (a probe that hangs, or a reservation
    /// never used) before it re-opens on its own. `None` waits for ever, which only
    /// makes sense when every call has a timeout. Default 60 s.
    pub fn max_half_open_dwell(mut self, dwell: Option<Duration>) -> Self {
        self.config.max_half_open_dwell = dwell;
        self
    }

    /// The longest a failed response's wait
    /// ([`Failure::retry_after`](crate::Failure::retry_after): an HTTP `Retry-After`)
    /// holds the breaker open: the probe goes after at most this long, so that a
    /// misconfigured server cannot park the breaker for days. Default 5 minutes.
    ///
    /// A longer wait is not hidden: the breaker probes at the cap, and reports the time
    /// the service asked for beside it
    /// ([`Snapshot::requested_until`](crate::snapshot::Snapshot::requested_until) and
    /// `requested_wait_ms` in its JSON,
    /// [`Transition::requested_until`](crate::Transition::requested_until),
    /// [`Skip::asked_longer`](crate::Skip::asked_longer)), so that an answer can say "the
    /// provider asked to wait 3 days; next probe in 5 minutes".
    ///
    /// A wait that arrives after the breaker opened (a 429 for a call admitted before
    /// the opening, answered late) counts as no failure, but lengthens the opening when it
    /// ends later than the opening's wait, up to this cap from its arrival (and the wait
    /// asked for beyond the cap is reported): the probe does not go out early into
    /// another 429. It never shortens a wait, and never touches what a person did: a
    /// breaker forced open, held for a time, reset, or let probe
    /// ([`allow_probe`](crate::CircuitBreakerHandle::allow_probe)), or a change of mode,
    /// after the call was admitted is left as the person left it; a half-open breaker is
    /// left to its probe, whose own result decides. This holds whatever
    /// [`open_on_retry_after`](Self::open_on_retry_after) says: an opening already there
    /// waits as long as the service asked.
    pub fn max_retry_after(mut self, cap: Duration) -> Self {
        self.config.max_retry_after = cap;
        self
    }

    /// Whether a failure that says how long to wait
    /// ([`Failure::retry_after`](crate::Failure::retry_after): an HTTP `Retry-After` or
    /// `retry-after-ms`, as `http::HttpClassifier` (feature `http`) reads them) opens the
    /// breaker at once for that long, bounded by [`max_retry_after`](Self::max_retry_after)
    /// (`true`, the default; the transition's cause is
    /// [`Cause::RetryAfter`](crate::Cause::RetryAfter)), or only counts as one failure
    /// towards the trip policy (`false`; if it trips the breaker, that opening still
    /// waits as long as the service asked).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_circuit_breaker::{Builder, Failure, Outcome, State};
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower::BoxError> {
    /// let limited = |_: &Result<(), std::io::Error>| {
    ///     Outcome::Failure(Failure::new("429 Too Many Requests").retry_after(Duration::from_secs(7)))
    /// };
    /// let layer = Builder::new().failure_threshold(3).build()?.with_classifier(limited);
    /// let handle = layer.handle();
    /// let mut svc = layer.layer(service_fn(|()| async { Ok::<_, std::io::Error>(()) }));
    /// svc.ready().await?.call(()).await?;
    /// // One 429 with a Retry-After: open at once, for 7 s, not after three.
    /// assert_eq!(handle.state(), State::Open);
    /// assert_eq!(handle.snapshot().retry_after(), Some(Duration::from_secs(7)));
    /// # Ok(()) }
    /// ```
    pub fn open_on_retry_after(mut self, open: bool) -> Self {
        self.config.open_on_retry_after = open;
        self
    }

    /// A success slower than `threshold` counts as a failure.
    pub fn slow_call_threshold(mut self, threshold: Duration) -> Self {
        self.config.slow_call = Some(threshold);
        self
    }

    /// The mode to start in (default [`Mode::Enabled`]); switch later on the handle.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.config.mode = mode;
        self
    }

    /// Obey this kill switch (shared with other breakers) instead of one of its own.
    pub fn kill_switch(mut self, kill: KillSwitch) -> Self {
        self.kill = Some(kill);
        self
    }

    /// Calls `callback` on every transition, after the breaker's lock is released. Keep
    /// it quick: it runs on the task whose call caused the transition. A panic in it is
    /// logged, not passed on.
    pub fn on_transition(self, callback: impl Fn(&Transition) + Send + Sync + 'static) -> Self {
        self.on_event(move |event: &Event<'_>| {
            if let Event::Transition(transition) = event {
                callback(transition)
            }
        })
    }

    /// Calls `observer` on every [`Event`]: transitions, recorded outcomes and skipped
    /// calls (for metrics, or an orchestrator of many services). Same rules as
    /// [`on_transition`](Self::on_transition); with no observer, the breaker pays
    /// nothing for this.
    pub fn on_event(mut self, observer: impl Fn(&Event<'_>) + Send + Sync + 'static) -> Self {
        self.observers.push(Watcher::Shared(Arc::new(observer)));
        self
    }

    /// Calls `observer` on every [`Event`] at once, in the task that made it, for what
    /// belongs to the caller's context: its `tracing` span (the `opentelemetry`
    /// feature's attributes are set so), a task-local.
    ///
    /// An [`on_event`](Self::on_event) observer hears of events in the order the breaker
    /// made them, so it may hear of a call's failure from another task, the one
    /// delivering at the time. This one is told by the task whose call was skipped or
    /// recorded (where its `poll_ready` or its response future ran), or whose call or
    /// handle action caused the transition, as soon as the breaker's lock is released:
    /// never by another task, and so in no order with other tasks' events (a skip for
    /// `open` may come before the transition to open, told by another task). A success
    /// settled later, such as a streamed body's, is told by the task that ended the body.
    ///
    /// Keep it quick; a panic in it is logged, not passed on. It should not act on its
    /// breaker: what it causes there reaches it at once, inside itself.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    /// use tower_circuit_breaker::{Builder, Event};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tower::BoxError> {
    /// tokio::task_local! { static REQUEST: u32; }
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let layer = Builder::new()
    ///     .on_event_at_once({
    ///         let seen = seen.clone();
    ///         move |event: &Event<'_>| {
    ///             if let Event::Recorded { outcome, .. } = event {
    ///                 // The caller's task-local: this runs in the caller's task.
    ///                 seen.lock().unwrap().push((REQUEST.get(), outcome.is_failure()));
    ///             }
    ///         }
    ///     })
    ///     .build()?;
    /// let mut svc = layer.layer(service_fn(|fail: bool| async move {
    ///     if fail { Err(std::io::Error::other("refused")) } else { Ok(()) }
    /// }));
    /// REQUEST.scope(7, async { svc.ready().await?.call(true).await.map(|_| ()) }).await.ok();
    /// REQUEST.scope(8, async { svc.ready().await?.call(false).await.map(|_| ()) }).await?;
    /// assert_eq!(*seen.lock().unwrap(), [(7, true), (8, false)]);
    /// # Ok(()) }
    /// ```
    pub fn on_event_at_once(
        mut self,
        observer: impl Fn(&Event<'_>) + Send + Sync + 'static,
    ) -> Self {
        self.observers.push(Watcher::AtOnce(Arc::new(observer)));
        self
    }

    /// Calls `make` for each breaker built from this builder (once for a layer, once per
    /// key in a [keyed registry](crate::keyed)) with the breaker's checked settings, and
    /// calls the observer it returns on every [`Event`] of that breaker, under the rules
    /// of [`on_event`](Self::on_event): for an observer with state of its own per
    /// breaker, such as a metrics recorder's handles named after the breaker.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// use tower_circuit_breaker::{Builder, Event};
    ///
    /// let made = Arc::new(AtomicU64::new(0));
    /// let counted = made.clone();
    /// let layer = Builder::new().name("search")
    ///     .on_event_of_each(move |config| {
    ///         counted.fetch_add(1, Ordering::Relaxed);
    ///         let name = config.name().to_owned();
    ///         move |event: &Event<'_>| {
    ///             if let Event::Transition(transition) = event {
    ///                 println!("{name}: {:?} -> {:?}", transition.from, transition.to);
    ///             }
    ///         }
    ///     })
    ///     .build()
    ///     .unwrap();
    /// # drop(layer);
    /// assert_eq!(made.load(Ordering::Relaxed), 1);
    /// ```
    pub fn on_event_of_each<O>(
        mut self,
        make: impl Fn(&Config) -> O + Send + Sync + 'static,
    ) -> Self
    where
        O: Fn(&Event<'_>) + Send + Sync + 'static,
    {
        self.observers.push(Watcher::PerBreaker(Arc::new(
            move |config: &Config| -> Observer { Arc::new(make(config)) },
        )));
        self
    }

    /// Times every call, so that observers are told how long each took
    /// ([`Event::Recorded`]'s `elapsed`). Off by default: it reads the clock twice per
    /// call, which a call otherwise does not (a slow-call threshold turns it on too).
    pub fn time_calls(mut self) -> Self {
        self.config.time_calls = true;
        self
    }

    /// The checked settings, without building a breaker: to check settings read from a
    /// file, or show them. A jitter seed is drawn if none was set.
    ///
    /// # Errors
    ///
    /// The first setting that cannot work.
    pub fn build_config(&self) -> Result<Config, ConfigError> {
        validate(&self.config)?;
        let mut config = self.config.clone();
        if config.jitter_seed.is_none() {
            config.jitter_seed = Some(RandomState::new().hash_one(config.name.as_ref()));
        }
        Ok(config)
    }

    /// The layer: every service it wraps shares the one breaker built here.
    ///
    /// # Errors
    ///
    /// The first setting that cannot work.
    pub fn build(self) -> Result<CircuitBreakerLayer, ConfigError> {
        let config = self.build_config()?;
        let kill = self.kill.unwrap_or_default();
        Ok(CircuitBreakerLayer::from_shared(Arc::new(breaker(
            Machine::new(config, now()),
            kill,
            &self.observers,
            self.group,
        ))))
    }

    /// Counts the breaker's events in `group` too, with the events of every other
    /// breaker counted there: whether all of them have reached their observers is then
    /// one look ([`DeliveryGroup::all_delivered`]), for a layer above several breakers
    /// (an agent's tools) that learns of their outcomes through observers.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tower_circuit_breaker::{Builder, DeliveryGroup};
    ///
    /// let group = Arc::new(DeliveryGroup::default());
    /// let search = Builder::new().name("search").delivery_group(group.clone()).build().unwrap();
    /// let fetch = Builder::new().name("fetch").delivery_group(group.clone()).build().unwrap();
    /// # drop((search, fetch));
    /// assert!(group.all_delivered());
    /// ```
    pub fn delivery_group(mut self, group: Arc<DeliveryGroup>) -> Self {
        self.group = Some(group);
        self
    }

    /// The checked settings (the jitter seed left as set), the kill switch and the
    /// observers: the template a keyed registry makes each key's breaker from.
    pub(in crate::breaker) fn into_template(
        self,
    ) -> Result<(Config, KillSwitch, Vec<Watcher>), ConfigError> {
        validate(&self.config)?;
        Ok((self.config, self.kill.unwrap_or_default(), self.observers))
    }
}

/// What a builder holds for each observer: one observer shared by every breaker it
/// builds, or a maker of one observer per breaker, from that breaker's settings (a keyed
/// registry builds a breaker per key; an observer with state of its own, such as the
/// metrics' handles, is made for each).
#[derive(Clone)]
pub(in crate::breaker) enum Watcher {
    Shared(Observer),
    PerBreaker(Arc<dyn Fn(&Config) -> Observer + Send + Sync>),
    /// Told of each event at once, by the task that made it
    /// ([`Builder::on_event_at_once`]).
    AtOnce(Observer),
}

impl Watcher {
    /// The observer for the breaker with these settings.
    fn for_breaker(&self, config: &Config) -> Observer {
        match self {
            Watcher::Shared(observer) | Watcher::AtOnce(observer) => observer.clone(),
            Watcher::PerBreaker(make) => make(config),
        }
    }
}

/// A breaker of `machine` (closed, with checked settings), obeying `kill`, told of its
/// events by an observer made from each watcher for it, and counted in `group` if one is
/// given: a builder's layer, and each key's breaker in a keyed registry, are made so.
pub(in crate::breaker) fn breaker(
    machine: Machine,
    kill: KillSwitch,
    watchers: &[Watcher],
    group: Option<Arc<DeliveryGroup>>,
) -> Shared {
    let (at_once, in_order): (Vec<&Watcher>, Vec<&Watcher>) = watchers
        .iter()
        .partition(|watcher| matches!(watcher, Watcher::AtOnce(_)));
    let observers = |watchers: Vec<&Watcher>, config: &Config| {
        watchers
            .into_iter()
            .map(|watcher| watcher.for_breaker(config))
            .collect()
    };
    let observers = if watchers.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        // The breaker's own settings, its name included, for the observers made for it.
        let config = machine.config();
        (observers(in_order, &config), observers(at_once, &config))
    };
    Shared::new(machine, kill, observers, group)
}

/// Checks every value of `config`; the first bad one is the error. The builder's check,
/// made when a configuration is built: the machine trusts the [`Config`] it is given.
fn validate(config: &Config) -> Result<(), ConfigError> {
    if config.name.is_empty() {
        return Err(ConfigError::EmptyName);
    }
    match config.trip {
        TripPolicy::ConsecutiveFailures(0) => return Err(ConfigError::ZeroThreshold),
        TripPolicy::ConsecutiveFailures(_) => {}
        TripPolicy::FailureRate {
            rate,
            window,
            minimum_calls,
        } => {
            if !(rate > 0.0 && rate <= 1.0) {
                return Err(ConfigError::InvalidFailureRate(rate));
            }
            match window {
                RateWindow::Calls(0) => return Err(ConfigError::EmptyWindow),
                RateWindow::Calls(n) if n > RateWindow::MAX_CALLS => {
                    return Err(ConfigError::WindowTooLong { window: n })
                }
                RateWindow::Time(d) if d.is_zero() => return Err(ConfigError::EmptyWindow),
                RateWindow::Calls(n) if minimum_calls > n => {
                    return Err(ConfigError::MinimumCallsAboveWindow {
                        minimum_calls,
                        window: n,
                    })
                }
                _ => {}
            }
        }
    }
    if is_zero(config.cooldown) {
        return Err(ConfigError::ZeroCooldown);
    }
    let too_long = |c: Cooldown| matches!(c, Cooldown::Calls(n) if n > Cooldown::MAX_CALLS);
    if too_long(config.cooldown) || config.backoff.is_some_and(|b| too_long(b.cap)) {
        return Err(ConfigError::CooldownTooLong);
    }
    if let Some(backoff) = config.backoff {
        if !(backoff.multiplier.is_finite() && backoff.multiplier >= 1.0) {
            return Err(ConfigError::InvalidMultiplier(backoff.multiplier));
        }
        match (config.cooldown, backoff.cap) {
            (Cooldown::Calls(base), Cooldown::Calls(cap)) if cap < base => {
                return Err(ConfigError::BackoffCapBelowBase)
            }
            (Cooldown::Time(base), Cooldown::Time(cap)) if cap < base => {
                return Err(ConfigError::BackoffCapBelowBase)
            }
            (Cooldown::Calls(_), Cooldown::Calls(_)) | (Cooldown::Time(_), Cooldown::Time(_)) => {}
            (cooldown, cap) => {
                return Err(ConfigError::BackoffUnitMismatch {
                    cooldown: unit(cooldown),
                    cap: unit(cap),
                })
            }
        }
    }
    if !(config.jitter >= 0.0 && config.jitter < 1.0) {
        return Err(ConfigError::InvalidJitter(config.jitter));
    }
    if config.half_open_probes == 0 {
        return Err(ConfigError::ZeroHalfOpenProbes);
    }
    if config.max_half_open_dwell.is_some_and(|d| d.is_zero()) {
        return Err(ConfigError::ZeroDwell);
    }
    if config.slow_call.is_some_and(|d| d.is_zero()) {
        return Err(ConfigError::ZeroSlowCall);
    }
    if config.max_retry_after.is_zero() {
        return Err(ConfigError::ZeroMaxRetryAfter);
    }
    Ok(())
}

/// The unit a cooldown is counted in, as a [`ConfigError::BackoffUnitMismatch`] names it.
fn unit(cooldown: Cooldown) -> &'static str {
    match cooldown {
        Cooldown::Calls(_) => "calls",
        Cooldown::Time(_) => "time",
    }
}

/// Whether a cooldown is zero calls or zero time.
fn is_zero(cooldown: Cooldown) -> bool {
    match cooldown {
        Cooldown::Calls(n) => n == 0,
        Cooldown::Time(d) => d.is_zero(),
    }
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("config", &self.config)
            .field("kill", &self.kill)
            .field("observers", &self.observers.len())
            .finish()
    }
}
