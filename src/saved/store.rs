//! [`SavedAnswers`]: the store of the last good answer to each request key.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

#[cfg(doc)]
use super::{SaveLayer, SavedFallback};

/// A bad setting for [`SavedAnswers::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SavedConfigError {
    /// The store must hold at least one answer.
    #[error("saved answers capacity must be at least 1, got 0")]
    ZeroCapacity,
    /// An age limit of zero would never serve anything.
    #[error("saved answers maximum age must be more than zero")]
    ZeroMaxAge,
}

/// The last good answer to each request key, bounded in number and in age.
///
/// Answers get in only through a [`SaveLayer`] (a real answer of the wrapped service)
/// and out through a [`SavedFallback`] (labelled stale) or [`get`](Self::get).
///
/// - **Capacity**: at most `capacity` answers; storing one for a new key when full
///   evicts the least recently stored. Storing an answer for a key already held
///   replaces it and makes it the most recently stored.
/// - **Age limit**: an answer older than `max_age` is never served. It is dropped when
///   it is next looked up, and expired answers are dropped from the oldest end whenever
///   an answer is stored or [`len`](Self::len) is read.
///
/// ```
/// use std::time::Duration;
/// use tower_circuit_breaker::saved::{SavedAnswers, SavedConfigError};
///
/// let saved = SavedAnswers::<String, String>::new(1_000, Duration::from_secs(3600))?;
/// assert!(saved.is_empty());
/// assert_eq!(
///     SavedAnswers::<String, String>::new(0, Duration::from_secs(1)).unwrap_err(),
///     SavedConfigError::ZeroCapacity
/// );
/// # Ok::<(), SavedConfigError>(())
/// ```
///
/// # Clone
///
/// Clones share one store: the same answers, limits and counters. Give one clone to the
/// [`SaveLayer`], one to the [`SavedFallback`], and keep one to watch it. Build another
/// store for another service.
pub struct SavedAnswers<K, R> {
    shared: Arc<Store<K, R>>,
}

struct Store<K, R> {
    capacity: usize,
    max_age: Duration,
    entries: Mutex<Entries<K, R>>,
    stored: AtomicU64,
    evicted: AtomicU64,
    expired: AtomicU64,
    served: AtomicU64,
    unavailable: AtomicU64,
}

/// The answers, and the order they were stored in: `order` maps a store sequence
/// number to its key, so its first entry is the least recently stored answer (and, the
/// clock being monotonic, the oldest). Every entry of `map` has its `seq` in `order`.
struct Entries<K, R> {
    map: HashMap<Arc<K>, Entry<R>>,
    order: BTreeMap<u64, Arc<K>>,
    next_seq: u64,
}

struct Entry<R> {
    value: R,
    stored_at: Instant,
    seq: u64,
}

impl<K, R> SavedAnswers<K, R> {
    /// A store of at most `capacity` answers, none served once older than `max_age`.
    ///
    /// # Errors
    ///
    /// [`SavedConfigError::ZeroCapacity`] for a capacity of 0,
    /// [`SavedConfigError::ZeroMaxAge`] for a zero age limit.
    pub fn new(capacity: usize, max_age: Duration) -> Result<Self, SavedConfigError> {
        if capacity == 0 {
            return Err(SavedConfigError::ZeroCapacity);
        }
        if max_age.is_zero() {
            return Err(SavedConfigError::ZeroMaxAge);
        }
        Ok(SavedAnswers {
            shared: Arc::new(Store {
                capacity,
                max_age,
                entries: Mutex::new(Entries {
                    map: HashMap::new(),
                    order: BTreeMap::new(),
                    next_seq: 0,
                }),
                stored: AtomicU64::new(0),
                evicted: AtomicU64::new(0),
                expired: AtomicU64::new(0),
                served: AtomicU64::new(0),
                unavailable: AtomicU64::new(0),
            }),
        })
    }

    /// The most answers it holds.
    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }

    /// The age past which an answer is never served.
    pub fn max_age(&self) -> Duration {
        self.shared.max_age
    }

    /// Answers stored so far (a replaced answer counts each time).
    pub fn stored(&self) -> u64 {
        self.shared.stored.load(Ordering::Relaxed)
    }

    /// Answers evicted to make room (capacity), not counting expired ones.
    pub fn evicted(&self) -> u64 {
        self.shared.evicted.load(Ordering::Relaxed)
    }

    /// Answers dropped because they passed the age limit.
    pub fn expired(&self) -> u64 {
        self.shared.expired.load(Ordering::Relaxed)
    }

    /// Fallback answers served from the store (labelled stale).
    pub fn served(&self) -> u64 {
        self.shared.served.load(Ordering::Relaxed)
    }

    /// Fallback answers that had no saved answer to give, and said the service is
    /// unavailable.
    pub fn unavailable(&self) -> u64 {
        self.shared.unavailable.load(Ordering::Relaxed)
    }

    /// Counts a fallback answer served from the store.
    pub(super) fn count_served(&self) {
        self.shared.served.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a fallback answer that said the service is unavailable.
    pub(super) fn count_unavailable(&self) {
        self.shared.unavailable.fetch_add(1, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, Entries<K, R>> {
        // The lock is held only for map operations; a panic in a key's `Hash` or `Eq`,
        // or in a response's `Clone`, leaves the entries usable.
        self.shared
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K: Hash + Eq, R> SavedAnswers<K, R> {
    /// The answers held that may still be served (expired ones are dropped first).
    pub fn len(&self) -> usize {
        let now = Instant::now();
        let mut entries = self.lock();
        let expired = entries.prune(now, self.shared.max_age);
        let len = entries.map.len();
        drop(entries);
        self.count_expired(expired);
        len
    }

    /// Whether it holds no answer that may still be served.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether an answer is held for `key`, not past the age limit.
    pub fn contains(&self, key: &K) -> bool {
        self.age(key).is_some()
    }

    /// How old the answer held for `key` is, if there is one not past the age limit.
    pub fn age(&self, key: &K) -> Option<Duration> {
        self.lookup(key, |_| ()).map(|((), age)| age)
    }

    /// Forgets the answer held for `key` (an answer known to be wrong, or data that
    /// must no longer be replayed). Returns whether there was one.
    pub fn remove(&self, key: &K) -> bool {
        let mut entries = self.lock();
        let removed = entries.remove(key);
        drop(entries);
        removed.is_some()
    }

    /// Forgets every answer. The counters are kept.
    pub fn clear(&self) {
        let mut entries = self.lock();
        let map = std::mem::take(&mut entries.map);
        entries.order.clear();
        drop(entries);
        drop(map);
    }

    /// Stores `value` as the answer for `key`, evicting or expiring others as needed.
    pub(super) fn insert(&self, key: K, value: R) {
        let mut guard = self.lock();
        // Read under the lock, so that the order of storing is the order of the times.
        let now = Instant::now();
        let expired = guard.prune(now, self.shared.max_age);
        let entries = &mut *guard;
        let seq = entries.next_seq;
        entries.next_seq += 1;
        let mut evicted = 0;
        let replaced = if let Some(entry) = entries.map.get_mut(&key) {
            let old_seq = std::mem::replace(&mut entry.seq, seq);
            entry.stored_at = now;
            let old = std::mem::replace(&mut entry.value, value);
            let key = entries
                .order
                .remove(&old_seq)
                .unwrap_or_else(|| Arc::new(key));
            entries.order.insert(seq, key);
            Some(old)
        } else {
            while entries.map.len() >= self.shared.capacity {
                let Some((_, oldest)) = entries.order.pop_first() else {
                    break;
                };
                entries.map.remove(&oldest);
                evicted += 1;
            }
            let key = Arc::new(key);
            entries.order.insert(seq, key.clone());
            entries.map.insert(
                key,
                Entry {
                    value,
                    stored_at: now,
                    seq,
                },
            );
            None
        };
        drop(guard);
        // The replaced answer is dropped outside the lock.
        drop(replaced);
        self.shared.stored.fetch_add(1, Ordering::Relaxed);
        if evicted > 0 {
            self.shared.evicted.fetch_add(evicted, Ordering::Relaxed);
        }
        self.count_expired(expired);
    }

    /// `f` of the answer held for `key` and its age, if it is not past the age limit;
    /// an expired answer found is dropped.
    fn lookup<T>(&self, key: &K, f: impl FnOnce(&R) -> T) -> Option<(T, Duration)> {
        let now = Instant::now();
        let mut entries = self.lock();
        let entry = entries.map.get(key)?;
        let age = now.saturating_duration_since(entry.stored_at);
        if age <= self.shared.max_age {
            return Some((f(&entry.value), age));
        }
        let expired = entries.remove(key);
        drop(entries);
        drop(expired);
        self.count_expired(1);
        None
    }

    fn count_expired(&self, expired: u64) {
        if expired > 0 {
            self.shared.expired.fetch_add(expired, Ordering::Relaxed);
        }
    }
}

impl<K: Hash + Eq, R: Clone> SavedAnswers<K, R> {
    /// A copy of the answer held for `key`, **unlabeled**, with its age; `None` if there
    /// is none or it is past the age limit. For inspection: a caller shown this answer
    /// must be told how old it is (as [`SavedFallback`] does).
    pub fn get(&self, key: &K) -> Option<(R, Duration)> {
        self.lookup(key, R::clone)
    }

    /// What a fallback of your own serves for `key`: as [`get`](Self::get), and counted
    /// as [`SavedFallback`] counts, in [`served`](Self::served) when an answer is found
    /// (label it with its age before the caller sees it) and in
    /// [`unavailable`](Self::unavailable) when none is.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_circuit_breaker::saved::SavedAnswers;
    ///
    /// let saved = SavedAnswers::<String, String>::new(10, Duration::from_secs(60))?;
    /// // Nothing saved (a `SaveLayer` saves answers): counted as unavailable.
    /// assert!(saved.serve(&"q".to_string()).is_none());
    /// assert_eq!((saved.served(), saved.unavailable()), (0, 1));
    /// # Ok::<(), tower_circuit_breaker::saved::SavedConfigError>(())
    /// ```
    pub fn serve(&self, key: &K) -> Option<(R, Duration)> {
        let found = self.get(key);
        match found {
            Some(_) => self.count_served(),
            None => self.count_unavailable(),
        }
        found
    }
}

impl<K: Hash + Eq, R> Entries<K, R> {
    /// Drops the expired answers, oldest first. Returns how many.
    fn prune(&mut self, now: Instant, max_age: Duration) -> u64 {
        let mut expired = 0;
        while let Some((_, key)) = self.order.first_key_value() {
            if let Some(entry) = self.map.get(key) {
                if now.saturating_duration_since(entry.stored_at) <= max_age {
                    break;
                }
            }
            if let Some((_, key)) = self.order.pop_first() {
                if self.map.remove(&key).is_some() {
                    expired += 1;
                }
            }
        }
        expired
    }

    fn remove(&mut self, key: &K) -> Option<Entry<R>> {
        let entry = self.map.remove(key)?;
        self.order.remove(&entry.seq);
        Some(entry)
    }
}

impl<K, R> Clone for SavedAnswers<K, R> {
    fn clone(&self) -> Self {
        SavedAnswers {
            shared: self.shared.clone(),
        }
    }
}

impl<K, R> fmt::Debug for SavedAnswers<K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SavedAnswers")
            .field("capacity", &self.shared.capacity)
            .field("max_age", &self.shared.max_age)
            .field("stored", &self.stored())
            .field("served", &self.served())
            .field("unavailable", &self.unavailable())
            .finish_non_exhaustive()
    }
}

/// Two values are equal when they share one store (clones of one), whatever it holds:
/// stores made apart are never equal. Hashed the same way.
impl<K, R> PartialEq for SavedAnswers<K, R> {
    fn eq(&self, other: &SavedAnswers<K, R>) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl<K, R> Eq for SavedAnswers<K, R> {}

impl<K, R> Hash for SavedAnswers<K, R> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.shared).hash(state);
    }
}
