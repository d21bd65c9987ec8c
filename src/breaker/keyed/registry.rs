//! The registry: each key's breaker, found, made and evicted.

use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::mem;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::breaker::builder::{self, Watcher};
use crate::breaker::clock::now;
use crate::breaker::kill::KillSwitch;
use crate::breaker::machine::Machine;
use crate::breaker::settings::Config;
use crate::breaker::shared::Shared;
use crate::breaker::state::State;

/// What every key's breaker is made from.
pub(super) struct Template<K> {
    /// The settings every key's breaker shares (each has a name and a jitter seed of its
    /// own): made once, for the registry.
    pub(super) config: Arc<Config>,
    pub(super) kill: KillSwitch,
    pub(super) observers: Vec<Watcher>,
    pub(super) namer: fn(&str, &K) -> Arc<str>,
}

impl<K> Template<K> {
    /// A closed breaker for `key`.
    pub(super) fn breaker(&self, key: &K) -> Shared {
        let name = (self.namer)(&self.config.name, key);
        if self.observers.is_empty() {
            return Shared::sharing(self.config.clone(), name, self.kill.clone());
        }
        let machine = Machine::sharing(self.config.clone(), name, now());
        builder::breaker(machine, self.kill.clone(), &self.observers, None)
    }
}

/// Keeps a value on cache lines of its own.
#[repr(align(128))]
pub(super) struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The breakers, one per key, in shards of their own lock.
pub(super) struct Registry<K> {
    /// The recency clock: it moves on when a breaker is made and when the registry
    /// looks for breakers to evict. Read by every call, written by neither.
    clock: Padded<AtomicU64>,
    shards: Box<[Padded<RwLock<Map<K>>>]>,
    hasher: RandomState,
    capacity: usize,
    /// How many candidates one eviction scan keeps.
    batch: usize,
    counters: Padded<Counters>,
    victims: Mutex<Victims<K>>,
    template: Template<K>,
}

#[derive(Default)]
pub(super) struct Counters {
    /// Breakers held, and room reserved for breakers being made.
    live: AtomicUsize,
    evictions: AtomicU64,
    over_capacity: AtomicU64,
    /// Over capacity with nothing to evict, as last found (for the log).
    over: AtomicBool,
}

/// A shard: each key's breaker and when it was last used.
pub(super) type Map<K> = HashMap<Stored<K>, Entry, BuildHasherDefault<Prehashed>>;

pub(super) struct Entry {
    shared: Arc<Shared>,
    /// The recency clock when the breaker was last used.
    used: AtomicU64,
}

impl Entry {
    // Inlined into the keyed call, which is made in the caller's crate: about a tenth of a
    // keyed call in the awaited `overhead` bench.
    #[inline]
    fn touch(&self, clock: &AtomicU64) {
        let now = clock.load(Ordering::Relaxed);
        // Written only when the clock has moved: a key called over and over does not
        // keep writing to a cache line every core reads.
        if self.used.load(Ordering::Relaxed) != now {
            self.used.store(now, Ordering::Relaxed);
        }
    }

    /// Within `reach`, with no call in flight and no handle held: the registry's
    /// reference is the only one. (Under the shard's write lock nobody can take another.)
    /// A half-open breaker with nothing in flight has no probe under way: it is waiting
    /// for one as an open breaker past its cooldown is, and goes as one.
    fn evictable(&self, reach: Reach) -> bool {
        Arc::strong_count(&self.shared) == 1
            && match self.shared.published_state() {
                State::Closed => true,
                // One held open by a permanent failure waits for a person: forgotten, its
                // key would be called again. It goes last, only so that keys that fail
                // so cannot grow the registry without bound either.
                State::Open | State::HalfOpen => match reach {
                    Reach::Closed => false,
                    Reach::Open => !self.shared.held_until_reset(),
                    Reach::Held => true,
                },
                State::ForcedOpen => false,
            }
    }
}

/// Which idle breakers an eviction may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reach {
    /// Closed ones: nothing is forgotten but their counts.
    Closed,
    /// Open ones too (opened by failures, or half-open with no probe under way; never one
    /// a person forced open or a permanent failure holds open until a reset): only past
    /// twice the capacity, so that keys that fail cannot grow the registry without bound.
    Open,
    /// Those a permanent failure holds open too (never one a person forced open): only
    /// past four times the capacity, so that keys that fail permanently (a quota error a
    /// server answers for any key) cannot grow it without bound.
    Held,
}

/// Breakers the last scan found evictable.
pub(super) struct Victims<K> {
    /// What the scan looked for.
    reach: Reach,
    /// The least recently used last.
    queue: Vec<Candidate<K>>,
    /// No scan before the clock reaches this: the last one found too few candidates,
    /// so the next waits until as many new keys have come as it lacked.
    next_scan: u64,
}

pub(super) struct Candidate<K> {
    used: u64,
    hash: u64,
    key: K,
}

// Ordered by last use alone, for the scan's heap of the oldest.
impl<K> PartialEq for Candidate<K> {
    fn eq(&self, other: &Self) -> bool {
        self.used == other.used
    }
}
impl<K> Eq for Candidate<K> {}
impl<K> PartialOrd for Candidate<K> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<K> Ord for Candidate<K> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.used.cmp(&other.used)
    }
}

pub(super) fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    // No code that can panic runs under these locks but the key's `Eq`; the maps stay
    // sound after such a panic, so a poisoned lock is used as it is.
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn lock<T>(lock: &Mutex<T>) -> MutexGuard<'_, T> {
    lock.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<K> Registry<K> {
    pub(super) fn new(template: Template<K>, capacity: usize) -> Self {
        let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
        let shards = (cores * 4).next_power_of_two().clamp(4, 64);
        Registry {
            clock: Padded(AtomicU64::new(0)),
            shards: (0..shards)
                .map(|_| Padded(RwLock::new(Map::default())))
                .collect(),
            hasher: RandomState::new(),
            capacity,
            batch: (capacity / 16).max(1),
            counters: Padded(Counters::default()),
            victims: Mutex::new(Victims {
                reach: Reach::Closed,
                queue: Vec::new(),
                next_scan: 0,
            }),
            template,
        }
    }

    /// The shard of a key's hash. The maps use the hash's low bits (the bucket) and top
    /// seven (the tag); the shard takes bits from the middle, so keys in one shard still
    /// spread over its buckets.
    fn shard(&self, hash: u64) -> &RwLock<Map<K>> {
        &self.shards[(hash >> 32) as usize & (self.shards.len() - 1)]
    }

    /// What `f` makes of `key`'s entry (its hash `hash`), if the registry holds one, under
    /// its shard's read lock: the one lookup of a key, for a call and for the handle.
    #[inline]
    fn find<R>(&self, hash: u64, key: &K, f: impl FnOnce(&Entry) -> R) -> Option<R>
    where
        K: Hash + Eq,
    {
        read(self.shard(hash))
            .get(&Probe { hash, key } as &dyn Lookup<K>)
            .map(f)
    }

    /// How many breakers it holds.
    pub(super) fn live(&self) -> usize {
        self.counters.live.load(Ordering::Acquire)
    }
}

/// A slot of the registry's count, taken for a breaker being made: given back when
/// dropped unfilled (another call made the key's breaker first, or the key's own `Eq`,
/// `Hash` or `Clone` panicked while the map held the lock), so that `len()` counts only
/// what the map holds.
pub(super) struct Room<'a> {
    live: &'a AtomicUsize,
    /// The count before this slot was taken.
    taken: usize,
    /// The breaker is in the map: the slot stays taken.
    filled: bool,
}

impl<'a> Room<'a> {
    fn take(live: &'a AtomicUsize) -> Self {
        let taken = live.fetch_add(1, Ordering::AcqRel);
        Room {
            live,
            taken,
            filled: false,
        }
    }

    /// The breaker is in the map: the slot is its.
    fn fill(mut self) {
        self.filled = true;
    }
}

impl Drop for Room<'_> {
    fn drop(&mut self) {
        if !self.filled {
            self.live.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl<K: Hash + Eq + Clone> Registry<K> {
    /// `key`'s breaker, made if the registry has none. Out of line, and back in a
    /// register: the call's future is made where the call is, from values in registers.
    #[inline(never)]
    pub(super) fn breaker(&self, key: &K) -> Arc<Shared> {
        let hash = self.hasher.hash_one(key);
        let found = self.find(hash, key, |entry| {
            entry.touch(&self.clock);
            entry.shared.clone()
        });
        match found {
            Some(shared) => shared,
            None => self.insert(hash, key),
        }
    }

    #[cold]
    #[inline(never)]
    fn insert(&self, hash: u64, key: &K) -> Arc<Shared> {
        // The key's code (its name, its clone) runs first, outside the locks and before
        // the room is taken.
        let fresh = Arc::new(self.template.breaker(key));
        let stored = Stored {
            hash,
            key: key.clone(),
        };
        // Room next, so that the registry holds no more than its capacity while it has
        // something to evict.
        let room = Room::take(&self.counters.live);
        if room.taken >= self.capacity {
            self.make_room();
        }
        let mut map = write(self.shard(hash));
        if let Some(entry) = map.get(&Probe { hash, key } as &dyn Lookup<K>) {
            // Another call made this key's breaker meanwhile.
            entry.touch(&self.clock);
            let shared = entry.shared.clone();
            drop(map);
            return shared;
        }
        let used = self.clock.fetch_add(1, Ordering::Relaxed);
        map.insert(
            stored,
            Entry {
                shared: fresh.clone(),
                used: AtomicU64::new(used),
            },
        );
        room.fill();
        fresh
    }

    /// Evicts one breaker for the one being made, and one more if an earlier overflow
    /// left the registry over its capacity; then tells the observers of each eviction.
    fn make_room(&self) {
        let mut evicted: [Option<Arc<Shared>>; 2] = [None, None];
        self.evict_for_room(&mut evicted);
        // Told here, with no lock of the registry held (neither the victims' nor a
        // shard's): an observer may call the keyed service back, with a new key that
        // makes room again on this very thread, and a slow one holds up no other key.
        for shared in evicted.into_iter().flatten() {
            shared.evicted();
        }
    }

    /// The evictions of [`make_room`](Self::make_room), each breaker evicted put in
    /// `evicted` for its observers to be told.
    fn evict_for_room(&self, evicted: &mut [Option<Arc<Shared>>; 2]) {
        for (round, slot) in evicted.iter_mut().enumerate() {
            if self.live() <= self.capacity {
                break;
            }
            let live = self.live();
            let reach = if live > self.capacity.saturating_mul(4) {
                Reach::Held
            } else if live > self.capacity.saturating_mul(2) {
                Reach::Open
            } else {
                Reach::Closed
            };
            *slot = self.evict_one(reach);
            if slot.is_none() {
                if round == 0 {
                    self.counters.over_capacity.fetch_add(1, Ordering::Relaxed);
                    if !self.counters.over.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            target: "tower_circuit_breaker",
                            registry = %self.template.config.name,
                            capacity = self.capacity,
                            "keyed registry over capacity: no idle closed breaker to evict"
                        );
                    }
                }
                return;
            }
        }
        if self.live() <= self.capacity && self.counters.over.swap(false, Ordering::Relaxed) {
            tracing::info!(
                target: "tower_circuit_breaker",
                registry = %self.template.config.name,
                capacity = self.capacity,
                "keyed registry back within capacity"
            );
        }
    }

    /// Evicts the least recently used idle breaker within `reach` the registry knows
    /// of. Returns it, if there was one, for its observers to be told once the victims'
    /// lock is released.
    fn evict_one(&self, reach: Reach) -> Option<Arc<Shared>> {
        let mut victims = lock(&self.victims);
        if victims.reach != reach {
            // The last scan looked for other breakers: look again, at once.
            victims.reach = reach;
            victims.queue.clear();
            victims.next_scan = 0;
        }
        let mut scans = 0;
        loop {
            while let Some(candidate) = victims.queue.pop() {
                if let Some(evicted) = self.try_evict(&candidate, reach) {
                    return Some(evicted);
                }
            }
            if scans == 2 || self.clock.load(Ordering::Relaxed) < victims.next_scan {
                return None;
            }
            self.scan(&mut victims);
            scans += 1;
        }
    }

    /// Finds the `batch` least recently used idle breakers within the victims' reach.
    fn scan(&self, victims: &mut Victims<K>) {
        // Moves the clock on, so that a use after this scan is newer than every mark it
        // records.
        let clock = self.clock.fetch_add(1, Ordering::Relaxed) + 1;
        let mut oldest = BinaryHeap::from(mem::take(&mut victims.queue));
        for shard in self.shards.iter() {
            let map = read(shard);
            for (stored, entry) in map.iter() {
                if !entry.evictable(victims.reach) {
                    continue;
                }
                let used = entry.used.load(Ordering::Relaxed);
                if oldest.len() < self.batch {
                    oldest.push(Candidate {
                        used,
                        hash: stored.hash,
                        key: stored.key.clone(),
                    });
                } else if let Some(mut newest) = oldest.peek_mut() {
                    if used < newest.used {
                        *newest = Candidate {
                            used,
                            hash: stored.hash,
                            key: stored.key.clone(),
                        };
                    }
                }
            }
        }
        let found = oldest.len();
        let mut queue = oldest.into_sorted_vec();
        queue.reverse();
        victims.queue = queue;
        victims.next_scan = clock + (self.batch - found) as u64;
    }

    /// Evicts a candidate if it is still there, unused since the scan, and evictable.
    /// Returns its breaker, whose observers are not told yet: the caller holds the
    /// victims' lock.
    fn try_evict(&self, candidate: &Candidate<K>, reach: Reach) -> Option<Arc<Shared>> {
        let probe = Probe {
            hash: candidate.hash,
            key: &candidate.key,
        };
        let mut map = write(self.shard(candidate.hash));
        let still = map.get(&probe as &dyn Lookup<K>).is_some_and(|entry| {
            entry.used.load(Ordering::Relaxed) == candidate.used && entry.evictable(reach)
        });
        if !still {
            return None;
        }
        let evicted = map.remove(&probe as &dyn Lookup<K>);
        drop(map);
        self.counters.live.fetch_sub(1, Ordering::AcqRel);
        self.counters.evictions.fetch_add(1, Ordering::Relaxed);
        evicted.map(|entry| entry.shared)
    }
}

impl<K> fmt::Debug for Registry<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("name", &self.template.config.name)
            .field("len", &self.live())
            .field("capacity", &self.capacity)
            .field("kill", &self.template.kill)
            .finish()
    }
}

/// A key with its hash, as the shard maps store it.
pub(super) struct Stored<K> {
    hash: u64,
    key: K,
}

/// A key and its hash, stored or borrowed: lets a map be searched with a borrowed key
/// and the hash computed once per call.
pub(super) trait Lookup<K> {
    fn hash_value(&self) -> u64;
    fn key(&self) -> &K;
}

/// A borrowed key with its hash.
pub(super) struct Probe<'a, K> {
    hash: u64,
    key: &'a K,
}

impl<K> Lookup<K> for Stored<K> {
    fn hash_value(&self) -> u64 {
        self.hash
    }
    fn key(&self) -> &K {
        &self.key
    }
}

impl<K> Lookup<K> for Probe<'_, K> {
    fn hash_value(&self) -> u64 {
        self.hash
    }
    fn key(&self) -> &K {
        self.key
    }
}

impl<'a, K: 'a> Borrow<dyn Lookup<K> + 'a> for Stored<K> {
    fn borrow(&self) -> &(dyn Lookup<K> + 'a) {
        self
    }
}

// `Stored` and `dyn Lookup` hash and compare alike, as `Borrow` requires.
impl<K> Hash for Stored<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl<K: Eq> PartialEq for Stored<K> {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.key == other.key
    }
}

impl<K: Eq> Eq for Stored<K> {}

impl<K> Hash for dyn Lookup<K> + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash_value());
    }
}

impl<K: Eq> PartialEq for dyn Lookup<K> + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.hash_value() == other.hash_value() && self.key() == other.key()
    }
}

impl<K: Eq> Eq for dyn Lookup<K> + '_ {}

/// The shard maps' hasher: it passes on the hash the registry computed.
#[derive(Default)]
pub(super) struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is called (by `Stored` and `dyn Lookup`); anything else is
        // folded in rather than lost.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}

/// What the registry's handle tells.
impl<K> Registry<K> {
    /// The breaker of `key`, if the registry holds one.
    pub(super) fn get(&self, key: &K) -> Option<Arc<Shared>>
    where
        K: Hash + Eq,
    {
        self.find(self.hasher.hash_one(key), key, |entry| entry.shared.clone())
    }

    /// The keys it holds a breaker for, in no particular order.
    pub(super) fn keys(&self) -> Vec<K>
    where
        K: Clone,
    {
        let mut keys = Vec::with_capacity(self.live());
        for shard in self.shards.iter() {
            keys.extend(read(shard).keys().map(|stored| stored.key.clone()));
        }
        keys
    }

    /// The most breakers it holds while it can evict idle closed ones.
    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many idle closed breakers were evicted to make room.
    pub(super) fn evictions(&self) -> u64 {
        self.counters.evictions.load(Ordering::Relaxed)
    }

    /// How many breakers were made while it was full and had none it could evict.
    pub(super) fn over_capacity(&self) -> u64 {
        self.counters.over_capacity.load(Ordering::Relaxed)
    }

    /// The kill switch every key's breaker obeys.
    pub(super) fn kill_switch(&self) -> &KillSwitch {
        &self.template.kill
    }

    /// The template's name.
    pub(super) fn name(&self) -> &str {
        &self.template.config.name
    }
}
