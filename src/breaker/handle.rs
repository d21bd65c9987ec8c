//! The breaker's handle: look at it, flip it, listen to it, without making a call.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use crate::breaker::changed::Changed;
use crate::breaker::clock::now;
use crate::breaker::kill::KillSwitch;
use crate::breaker::settings::{Config, Mode};
use crate::breaker::shared::Shared;
use crate::breaker::snapshot::Snapshot;
use crate::breaker::state::{Advice, State, Transition};
use crate::later::later;

/// A handle on one breaker, for operators and dashboards: snapshots, the kill switch,
/// force-open and reset, the mode, and a stream of transitions.
///
/// # Clone
///
/// Clones refer to the same breaker, the one every service built from the same
/// [`CircuitBreakerLayer`](crate::CircuitBreakerLayer) shares.
///
/// ```
/// use tower_circuit_breaker::{CircuitBreakerLayer, Cooldown, State};
///
/// let layer = CircuitBreakerLayer::builder().name("model").cooldown(Cooldown::Calls(4)).build()?;
/// let handle = layer.handle();
/// handle.force_open();
/// assert_eq!(handle.state(), State::ForcedOpen);
/// handle.reset();
/// let snapshot = handle.snapshot();
/// assert_eq!((snapshot.state, snapshot.consecutive_failures), (State::Closed, 0));
/// # Ok::<(), tower_circuit_breaker::error::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct CircuitBreakerHandle {
    shared: Arc<Shared>,
}

impl CircuitBreakerHandle {
    pub(in crate::breaker) fn new(shared: Arc<Shared>) -> Self {
        CircuitBreakerHandle { shared }
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The whole state: counts, last failure and success, and when the next probe may
    /// go. Taking it applies the half-open dwell limit, so a breaker whose probe hung
    /// reports open, not half-open.
    pub fn snapshot(&self) -> Snapshot {
        self.shared.snapshot()
    }

    /// Tells a caller that decides for itself (an orchestrator) what a call now would
    /// get, and counts an attempt it turns away: [`Advice::Call`] or [`Advice::Probe`]
    /// change nothing (the call is decided when it comes through the layer), while
    /// [`Advice::Skip`] counts the attempt as a skipped call, so a cooldown in calls
    /// keeps running while the caller routes elsewhere.
    pub fn advise(&self) -> Advice {
        self.shared.advise(true)
    }

    /// What a call now would get, with nothing counted: looking does not move a
    /// cooldown in calls on. The same decision a call now would get.
    ///
    /// ```
    /// use tower_circuit_breaker::{Advice, CircuitBreakerLayer, Reason};
    ///
    /// let layer = CircuitBreakerLayer::builder().build()?;
    /// let handle = layer.handle();
    /// assert_eq!(handle.peek(), Advice::Call);
    /// handle.force_open();
    /// assert!(matches!(handle.peek(), Advice::Skip(skip) if skip.reason() == Reason::ForcedOpen));
    /// assert_eq!(handle.snapshot().counts.skipped(), 0);
    /// # Ok::<(), tower_circuit_breaker::error::ConfigError>(())
    /// ```
    pub fn peek(&self) -> Advice {
        self.shared.advise(false)
    }

    /// Whether the breaker is closed, read without taking its lock: a closed breaker
    /// leaves that state only through a call's outcome or a person's act, never by
    /// time alone, so this is exact. Cheap enough for every routing decision.
    pub fn is_closed(&self) -> bool {
        self.shared.published_state() == State::Closed
    }

    /// The state.
    pub fn state(&self) -> State {
        self.snapshot().state
    }

    /// The kill switch this breaker obeys (maybe shared with others).
    pub fn kill_switch(&self) -> &KillSwitch {
        &self.shared.kill
    }

    /// Opens the breaker until [`reset`](Self::reset): no call and no probe reaches the
    /// service. Unlike the kill switch, this is a state of this breaker
    /// ([`State::ForcedOpen`]); calls are skipped with
    /// [`Reason::ForcedOpen`](crate::Reason::ForcedOpen). Calls in flight are not
    /// counted when they end.
    pub fn force_open(&self) {
        self.shared.force_open(None);
    }

    /// Opens the breaker for `duration` (a provider's announced maintenance, a quota
    /// that resets at a known time): calls are skipped with
    /// [`Reason::ForcedOpen`](crate::Reason::ForcedOpen) and told when the hold ends;
    /// after it, the next call is a probe, as after a cooldown. A [`reset`](Self::reset)
    /// ends it early. It replaces whatever held the breaker open before.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_circuit_breaker::{CircuitBreakerLayer, NextProbe, State};
    ///
    /// let layer = CircuitBreakerLayer::builder().build()?;
    /// let handle = layer.handle();
    /// handle.open_for(Duration::from_secs(600));
    /// let snapshot = handle.snapshot();
    /// assert_eq!(snapshot.state, State::ForcedOpen);
    /// assert!(matches!(snapshot.next_probe, NextProbe::After { at: Some(_), .. }));
    /// assert!(snapshot.retry_after().unwrap() <= Duration::from_secs(600));
    /// # Ok::<(), tower_circuit_breaker::error::ConfigError>(())
    /// ```
    pub fn open_for(&self, duration: Duration) {
        self.shared.force_open(Some(later(now(), duration)));
    }

    /// Opens the breaker until `until` (on the breaker's clock, `tokio::time`), as
    /// [`open_for`](Self::open_for) does. An instant already past opens it for no time:
    /// the next call is a probe.
    pub fn open_until(&self, until: Instant) {
        self.shared.force_open(Some(until));
    }

    /// Opens the breaker until `until` on a hint from outside it: another replica saw the
    /// service fail (see the `fleet` feature), a provider's status page announced an
    /// outage. Unlike [`open_until`](Self::open_until), a person's act, it is the
    /// breaker's own kind of opening: calls are skipped as open
    /// ([`Reason::Open`](crate::Reason::Open)) and told when the wait ends, the
    /// transition's cause is [`Cause::Hint`](crate::Cause::Hint), and the next call after
    /// `until` is the probe, whose outcome decides. [`release_hold`](Self::release_hold)
    /// ends it early.
    ///
    /// A hint never overrides what knows better, and is decided under the breaker's lock,
    /// so no act slips in between: a breaker a person forced open, one half-open (its
    /// probe decides), one open until a reset, or one already open until `until` or later
    /// is left as it is, and a closed one is not opened for a time that has passed (a
    /// late or stale hint). Returns whether the hint applied.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_circuit_breaker::{CircuitBreakerLayer, State};
    ///
    /// let layer = CircuitBreakerLayer::builder().build()?;
    /// let handle = layer.handle();
    /// let in_a_minute = tokio::time::Instant::now().into_std() + Duration::from_secs(60);
    /// assert!(handle.hold_open_until(in_a_minute));
    /// assert_eq!(handle.state(), State::Open);
    /// handle.force_open();
    /// assert!(!handle.hold_open_until(in_a_minute + Duration::from_secs(60)), "a person's act wins");
    /// # Ok::<(), tower_circuit_breaker::error::ConfigError>(())
    /// ```
    pub fn hold_open_until(&self, until: Instant) -> bool {
        self.shared.hold_open(until)
    }

    /// Ends a hold made by [`hold_open_until`](Self::hold_open_until) (the hint was
    /// withdrawn: the peers report the service back). The breaker's own wait underneath
    /// is back in force: if the hint lengthened a cooldown of its own, the rest of that
    /// cooldown; if the hint opened a closed breaker, none, so the next call is the probe.
    /// Nothing else is touched, so a release that races the breaker's own calls is safe: a
    /// breaker that opened again on its own since (a failed probe), one a person forced
    /// open, one closed or half-open is left as it is. Returns whether a hold was ended.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_circuit_breaker::{Advice, CircuitBreakerLayer};
    ///
    /// let layer = CircuitBreakerLayer::builder().build()?;
    /// let handle = layer.handle();
    /// let in_a_minute = tokio::time::Instant::now().into_std() + Duration::from_secs(60);
    /// assert!(handle.hold_open_until(in_a_minute));
    /// assert!(handle.release_hold());
    /// assert_eq!(handle.peek(), Advice::Probe, "the next call probes");
    /// assert!(!handle.release_hold(), "nothing left to release");
    /// # Ok::<(), tower_circuit_breaker::error::ConfigError>(())
    /// ```
    pub fn release_hold(&self) -> bool {
        self.shared.release_hold()
    }

    /// Lets the next call through as the probe, whatever is left of the cooldown (an
    /// operator who knows the service is back, or an orchestrator with a schedule of its
    /// own). Only an open breaker is affected: forced open and permanent failures wait
    /// for [`reset`](Self::reset). Returns whether it applied.
    pub fn allow_probe(&self) -> bool {
        self.shared.allow_probe()
    }

    /// Closes the breaker and clears its failure count and backoff. The only way out of
    /// forced open and of a permanent failure.
    pub fn reset(&self) {
        self.shared.reset();
    }

    /// Switches between enabled, observe-only and disabled at runtime. Calls in flight
    /// under the old mode are not counted when they end, and probes of a half-open
    /// breaker give up their slots. A change is logged and reported to observers
    /// ([`Event::ModeChanged`](crate::Event::ModeChanged)) in order with the
    /// transitions; the state stays as it was, so subscribers of transitions hear
    /// nothing.
    pub fn set_mode(&self, mode: Mode) {
        self.shared.set_mode(mode);
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.shared.mode()
    }

    /// Lowers the consecutive-failure threshold by `relief` (never below 1); 0 restores
    /// it: for a service a health check found degraded, so that fewer failures open it.
    pub fn set_threshold_relief(&self, relief: u32) {
        self.shared.set_threshold_relief(relief);
    }

    /// Waits until every event the breaker made before this call (its transitions,
    /// the outcomes it recorded) has reached its observers, whichever task delivers
    /// them: for a layer above that learns of outcomes through an observer and must not
    /// decide before it has.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use tower_circuit_breaker::CircuitBreakerLayer;
    ///
    /// let layer = CircuitBreakerLayer::builder()
    ///     .name("search")
    ///     .on_event(|event| println!("{event:?}"))
    ///     .build()
    ///     .unwrap();
    /// layer.handle().events_delivered().await;
    /// # }
    /// ```
    pub async fn events_delivered(&self) {
        self.shared.events_delivered().await;
    }

    /// Every transition from now on. The channel never makes the breaker wait: a
    /// receiver that falls more than 64 events behind loses the oldest and is told how
    /// many (`RecvError::Lagged`). The kill switch is not a transition (the state is
    /// kept underneath it): watch it with [`KillSwitch::watch`].
    pub fn subscribe(&self) -> broadcast::Receiver<Transition> {
        self.shared.subscribe()
    }

    /// A future that completes at the breaker's next change: of state or mode, a hold
    /// set or released, a probe allowed, the half-open's last free probe slot taken or a
    /// slot freed when none was free (what decides whether the next call may probe; with
    /// several slots, one taken while others stay free changes nothing a call is decided
    /// on), or a flip of its kill switch. For what must act at once on a person's act or a probe's end (a service
    /// that is not ready while the breaker is open, as [`readiness`](crate::readiness)
    /// does; a dashboard): look at the breaker after making it, and wait for it if
    /// nothing there is what you wait for. No change made after this call is missed, even
    /// one made before the future is first polled. See [`Changed`].
    ///
    /// Nothing is told until something waits: the first call makes the channel (under
    /// the breaker's lock), and until then changes cost nothing more.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_circuit_breaker::{Advice, CircuitBreakerLayer, Cooldown};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower::BoxError> {
    /// let layer = CircuitBreakerLayer::builder()
    ///     .cooldown(Cooldown::Time(Duration::from_secs(30)))
    ///     .build()?;
    /// let handle = layer.handle();
    /// handle.force_open();
    /// // Made before the look: an act between the two is not missed.
    /// let changed = handle.changed();
    /// assert!(matches!(handle.peek(), Advice::Skip(_)));
    /// handle.kill_switch().kill();
    /// changed.await; // at once: the switch flipped
    /// assert!(handle.snapshot().killed);
    /// # Ok(()) }
    /// ```
    pub fn changed(&self) -> Changed {
        self.shared.changed()
    }

    /// The settings the breaker was built with (its cooldown, half-open probes and dwell
    /// limit...): for a layer above that must know how the breaker waits.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_circuit_breaker::{CircuitBreakerLayer, Cooldown};
    ///
    /// let layer = CircuitBreakerLayer::builder()
    ///     .name("chat")
    ///     .cooldown(Cooldown::Time(Duration::from_secs(30)))
    ///     .build()?;
    /// let config = layer.handle().config();
    /// assert_eq!(config.cooldown(), Cooldown::Time(Duration::from_secs(30)));
    /// assert_eq!(config.name(), "chat");
    /// # Ok::<(), tower_circuit_breaker::error::ConfigError>(())
    /// ```
    pub fn config(&self) -> Config {
        self.shared.config()
    }
}

/// Two handles are equal when they are handles on the same breaker (from one layer, its
/// services and their clones), whatever its state: breakers built apart are never
/// equal, even with the same name. Hashed the same way, so handles can key a map or a
/// set.
///
/// ```
/// use tower_circuit_breaker::CircuitBreakerLayer;
///
/// let layer = CircuitBreakerLayer::builder().name("search").build()?;
/// let other = CircuitBreakerLayer::builder().name("search").build()?;
/// assert_eq!(layer.handle(), layer.clone().handle());
/// assert_ne!(layer.handle(), other.handle());
/// # Ok::<(), tower_circuit_breaker::error::ConfigError>(())
/// ```
impl PartialEq for CircuitBreakerHandle {
    fn eq(&self, other: &CircuitBreakerHandle) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl Eq for CircuitBreakerHandle {}

impl Hash for CircuitBreakerHandle {
    fn hash<H: Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.shared).hash(state);
    }
}

impl fmt::Debug for CircuitBreakerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreakerHandle")
            .field("name", &self.shared.name)
            .finish_non_exhaustive()
    }
}
