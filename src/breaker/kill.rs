//! The kill switch: a person's emergency stop, shared by as many breakers as you like.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use tokio::sync::watch;

use crate::breaker::sync::AtomicBool;

/// An emergency stop that a person flips at runtime.
///
/// A breaker reacts to failures; the kill switch is for when the service works but must
/// not be used (it gives wrong answers, or costs too much). While it is on, every call
/// to every breaker that shares it skips to the fallback. It does not touch the
/// breakers: their states and counts stay as they were, and their steps and time keep
/// running, so a breaker whose cooldown passed while killed probes on the first call
/// after [`revive`](KillSwitch::revive). It stays on until revived.
///
/// # Clone
///
/// Clones share one switch: flipping any clone flips them all. Give the same switch to
/// several breakers with [`Builder::kill_switch`](crate::Builder::kill_switch).
///
/// ```
/// use tower_circuit_breaker::{CircuitBreakerLayer, KillSwitch};
///
/// let stop = KillSwitch::new();
/// let chat = CircuitBreakerLayer::builder().name("chat").kill_switch(stop.clone()).build()?;
/// let embed = CircuitBreakerLayer::builder().name("embed").kill_switch(stop.clone()).build()?;
///
/// stop.kill();
/// assert!(chat.handle().snapshot().killed && embed.handle().snapshot().killed);
/// stop.revive();
/// assert!(!chat.handle().kill_switch().is_killed());
/// # Ok::<(), tower_circuit_breaker::error::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct KillSwitch {
    killed: Arc<Alone>,
}

/// The flag, alone on its cache lines. Every call of every breaker on this switch reads
/// it; were it allocated next to something calls write (the breaker's own reference
/// counts, made right after it), each of those writes would evict it from the other
/// cores' caches: measured at four times the cost of a contended closed call. Beside it,
/// read only when the switch flips, the channel that tells watchers.
#[repr(align(128))]
struct Alone {
    flag: AtomicBool,
    watchers: OnceLock<watch::Sender<bool>>,
}

impl Default for KillSwitch {
    fn default() -> Self {
        KillSwitch {
            killed: Arc::new(Alone {
                flag: AtomicBool::new(false),
                watchers: OnceLock::new(),
            }),
        }
    }
}

impl KillSwitch {
    /// A switch that is off.
    pub fn new() -> Self {
        KillSwitch::default()
    }

    /// Turns the switch on: from now on every call skips to the fallback.
    pub fn kill(&self) {
        if !self.killed.flag.swap(true, Ordering::SeqCst) {
            tracing::warn!(target: "tower_circuit_breaker", "kill switch on: calls skip to the fallback");
            self.tell();
        }
    }

    /// Turns the switch off: breakers decide again.
    pub fn revive(&self) {
        if self.killed.flag.swap(false, Ordering::SeqCst) {
            tracing::info!(target: "tower_circuit_breaker", "kill switch off: breakers decide again");
            self.tell();
        }
    }

    /// Whether the switch is on.
    #[inline]
    pub fn is_killed(&self) -> bool {
        self.killed.flag.load(Ordering::SeqCst)
    }

    /// Every flip from now on, as it happens: a receiver whose value is whether the switch
    /// is on (it starts with the switch as it is). For what must follow a person's
    /// decision elsewhere: a fleet of replicas, a dashboard. The switch never waits for a
    /// watcher; one that falls behind sees the latest value.
    ///
    /// ```
    /// use tower_circuit_breaker::KillSwitch;
    ///
    /// let stop = KillSwitch::new();
    /// let mut watching = stop.watch();
    /// assert!(!*watching.borrow());
    /// stop.kill();
    /// assert!(watching.has_changed().unwrap());
    /// assert!(*watching.borrow_and_update());
    /// ```
    pub fn watch(&self) -> watch::Receiver<bool> {
        let watchers = self
            .killed
            .watchers
            .get_or_init(|| watch::channel(self.is_killed()).0);
        // A flip while the channel was being made found no channel to tell.
        Self::tell_now(watchers, self.is_killed());
        watchers.subscribe()
    }

    /// Tells the watchers, if there are any, what the switch now is. Flips racing each
    /// other are told in some order, but what is told is read from the flag, so the last
    /// value a watcher sees is the switch's.
    fn tell(&self) {
        if let Some(watchers) = self.killed.watchers.get() {
            Self::tell_now(watchers, self.is_killed());
        }
    }

    fn tell_now(watchers: &watch::Sender<bool>, killed: bool) {
        watchers.send_if_modified(|told| std::mem::replace(told, killed) != killed);
    }
}

/// Two handles are equal when they are the same switch (clones of one), whatever it
/// says: two switches made apart are never equal. Hashed the same way, so switches can
/// key a map or a set.
///
/// ```
/// use tower_circuit_breaker::KillSwitch;
///
/// let switch = KillSwitch::new();
/// assert_eq!(switch, switch.clone());
/// assert_ne!(switch, KillSwitch::new());
/// ```
impl PartialEq for KillSwitch {
    fn eq(&self, other: &KillSwitch) -> bool {
        Arc::ptr_eq(&self.killed, &other.killed)
    }
}

impl Eq for KillSwitch {}

impl Hash for KillSwitch {
    fn hash<H: Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.killed).hash(state);
    }
}

/// Shows whether the switch is on.
impl fmt::Debug for KillSwitch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KillSwitch")
            .field("killed", &self.is_killed())
            .finish()
    }
}
