//! The handle on a keyed registry, for operators and dashboards.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use super::registry::Registry;
use crate::breaker::handle::CircuitBreakerHandle;
use crate::breaker::kill::KillSwitch;

/// A handle on a keyed registry, for operators and dashboards: each key's breaker, and
/// how full the registry is.
///
/// ```
/// use tower_circuit_breaker::{Builder, State};
/// use tower_circuit_breaker::keyed::KeyedCircuitBreakerLayer;
/// use tower::{service_fn, Layer, Service, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let layer = KeyedCircuitBreakerLayer::builder(Builder::new().name("model"), |m: &&'static str| *m)
///     .capacity(2)
///     .build()?;
/// let registry = layer.handle();
/// let mut models = layer.layer(service_fn(|m: &'static str| async move { Ok::<_, std::io::Error>(m) }));
/// for model in ["small", "large", "small", "vision"] {
///     models.ready().await?.call(model).await?;
/// }
/// // "large" was the least recently used: it made room for "vision".
/// let mut keys = registry.keys();
/// keys.sort();
/// assert_eq!(keys, ["small", "vision"]);
/// assert_eq!((registry.len(), registry.evictions()), (2, 1));
///
/// // A person opens one model's breaker; the registry will not evict it.
/// registry.get(&"vision").unwrap().force_open();
/// assert_eq!(registry.get(&"vision").unwrap().state(), State::ForcedOpen);
/// assert!(registry.get(&"large").is_none());
/// # Ok(()) }
/// ```
///
/// # Clone
///
/// Clones refer to the same registry.
pub struct KeyedCircuitBreakerHandle<K> {
    pub(super) registry: Arc<Registry<K>>,
}

impl<K> KeyedCircuitBreakerHandle<K> {
    /// The handle on `key`'s breaker, if the registry holds one. Looking does not count
    /// as a use; but while you hold the handle, the breaker is not evicted. (A
    /// [`subscribe`](CircuitBreakerHandle::subscribe) stream does not hold it: the stream
    /// ends if the breaker is evicted.)
    pub fn get(&self, key: &K) -> Option<CircuitBreakerHandle>
    where
        K: Hash + Eq,
    {
        self.registry.get(key).map(CircuitBreakerHandle::new)
    }

    /// The keys the registry holds a breaker for, in no particular order.
    pub fn keys(&self) -> Vec<K>
    where
        K: Clone,
    {
        self.registry.keys()
    }

    /// How many breakers the registry holds.
    pub fn len(&self) -> usize {
        self.registry.live()
    }

    /// Whether the registry holds no breaker.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most breakers the registry holds while it can evict idle closed ones.
    pub fn capacity(&self) -> usize {
        self.registry.capacity()
    }

    /// How many idle closed breakers were evicted to make room.
    pub fn evictions(&self) -> u64 {
        self.registry.evictions()
    }

    /// How many breakers were made while the registry was full and had no breaker it
    /// could evict. Non-zero means the registry went over its capacity (and may still
    /// be: compare [`len`](Self::len) with [`capacity`](Self::capacity)).
    pub fn over_capacity(&self) -> u64 {
        self.registry.over_capacity()
    }

    /// The kill switch every key's breaker obeys.
    pub fn kill_switch(&self) -> &KillSwitch {
        self.registry.kill_switch()
    }

    /// The template's name, which every key's breaker's name starts with.
    pub fn name(&self) -> &str {
        self.registry.name()
    }
}

impl<K> Clone for KeyedCircuitBreakerHandle<K> {
    fn clone(&self) -> Self {
        KeyedCircuitBreakerHandle {
            registry: self.registry.clone(),
        }
    }
}

impl<K> fmt::Debug for KeyedCircuitBreakerHandle<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCircuitBreakerHandle")
            .field("registry", &self.registry)
            .finish()
    }
}
