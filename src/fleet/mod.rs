//! A fleet of replicas: kill switches and breaker transitions shared through Redis,
//! while every call is still decided locally, with no network I/O on its path.
//!
//! Each replica starts a [`Fleet`] and shares its kill switches (by name) and breakers
//! with it. A task beside the service then keeps them in step with the other replicas:
//!
//! - a **kill switch** shared as `NAME` is the Redis key `PREFIX:kill:NAME`; a change
//!   ([`Fleet::kill`], or the switch flipped in code with
//!   [`KillSwitch::kill`](crate::KillSwitch::kill)) is written there and published on
//!   `PREFIX:kills`, so every replica applies it at once and a replica that starts later
//!   reads the key and starts killed;
//! - a shared **breaker** publishes its own openings and closings on `PREFIX:hints`
//!   (name, new state, cause, until when, which replica, a sequence number); peers read
//!   them as hints under a [`HintPolicy`] chosen per breaker: ignore, follow (hold open
//!   until the published time), or quorum (hold open while N peers report open within a
//!   window). A hold is the breaker's own kind of opening (skipped calls say
//!   [`Reason::Open`](crate::Reason::Open) and when it ends), bounded by
//!   [`FleetBuilder::max_hold`], and the replica's own calls decide its state once the
//!   hold ends (see [`HintPolicy`]).
//!
//! ```
//! use tower_circuit_breaker::fleet::{Fleet, FleetError, HintPolicy};
//! use tower_circuit_breaker::{CircuitBreakerLayer, KillSwitch};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Nothing listens on port 1: the replica works alone, and says so.
//! let fleet = Fleet::builder().address("redis://127.0.0.1:1").replica("api-1").start()?;
//! let stop = KillSwitch::new();
//! fleet.share_kill_switch("openai", &stop)?;
//! let openai = CircuitBreakerLayer::builder().name("openai").kill_switch(stop.clone()).build()?;
//! fleet.share_breaker(&openai.handle(), HintPolicy::Follow)?;
//!
//! // An operator's kill reaches every replica through Redis. Without it, the kill holds
//! // here at once and is kept, to be written when the link is back.
//! let err = fleet.kill("openai").await.unwrap_err();
//! assert!(matches!(err, FleetError::LinkDown { .. }));
//! assert!(stop.is_killed() && !fleet.link().is_up());
//! assert!(fleet.snapshot().kill_switches[0].kept.is_some());
//! # Ok(()) }
//! ```
//!
//! # What is shared, and what never is
//!
//! Shared: the state of each shared kill switch, and the transitions of each shared
//! breaker that its own calls caused (opened, closed). Never shared: calls, their
//! outcomes and counts, a breaker's failure count, a hold (a hold on peers' hints,
//! whose transition's cause is [`Cause::Hint`](crate::Cause::Hint), or a person's
//! force-open: not republished, so holds never echo and a quorum counts only replicas
//! that saw failures themselves), a kill switch's flip made on the fleet's word (not
//! published again, so flips never echo either), and anything on a call's path. A call
//! reads the kill switch's flag and the breaker's state as it does without a fleet; the
//! task changes them from the side with [`KillSwitch::kill`](crate::KillSwitch::kill),
//! [`CircuitBreakerHandle::hold_open_until`](crate::CircuitBreakerHandle::hold_open_until)
//! and [`CircuitBreakerHandle::release_hold`](crate::CircuitBreakerHandle::release_hold),
//! and hears of flips made in code through
//! [`KillSwitch::watch`](crate::KillSwitch::watch).
//!
//! # The format, for operators
//!
//! With the default prefix `tcb`, from `redis-cli`:
//!
//! ```text
//! SET tcb:kill:openai 1
//! PUBLISH tcb:kills '{"v":1,"name":"openai","killed":true}'
//! SET tcb:kill:openai 0
//! PUBLISH tcb:kills '{"v":1,"name":"openai","killed":false}'
//! ```
//!
//! Every kill and revive is an **act** with a stamp, and each switch follows the latest
//! act it knows: the rule, in one place, is in [`act`]. A replica writes an act to the
//! key with a compare and set (one script, which also publishes the message), only over
//! an earlier act, so the key holds the latest act Redis took, for example
//! `{"v":1,"killed":true,"at_ms":1764580000000,"replica":"api-1","run":"5f0c1a2b3c4d5e6f"}`,
//! and a revive stays in the key as `"killed":false`. The key is read on every
//! (re)connection, every [`resync_every`](FleetBuilder::resync_every), when a switch is
//! shared and on [`Fleet::sync`]; the message makes replicas apply an act at once. A key
//! or a message is applied only if its act is later than the one the replica knows, and a
//! replica that knows a later act than the key holds (or the key holds none) writes it
//! back: an absent key undoes nothing. Values written by hand (`1`, `0`, and messages
//! without `"at_ms"`) carry no stamp and count as made when a replica first reads them:
//! revive by hand with `SET ... 0`, not `DEL` (a replica that knows the kill would write
//! it back). Hints are JSON too:
//!
//! ```text
//! {"v":1,"replica":"api-7","run":"5f0c1a2b3c4d5e6f","seq":42,"name":"openai",
//!  "state":"open","cause":"tripped","at_ms":1764580000000,"until_ms":1764580030000}
//! ```
//!
//! A message that is not JSON of this form, longer than
//! [`max_message_bytes`](FleetBuilder::max_message_bytes), or of another version `v`,
//! is ignored and counted ([`FleetCounts`]); so is a replayed or older hint (by its
//! replica's `run` and `seq`), or one of a replica's earlier run once a later run has
//! been heard. A published time further off than the longest hold is
//! cut to it.
//!
//! # When Redis is down
//!
//! Breakers and kill switches go on working locally: calls never wait on Redis.
//! [`Fleet::link`] and [`Fleet::snapshot`] say the link is down, since when and for how
//! long ([`LinkStatus::down_for`]); the task reconnects with backoff
//! ([`FleetBuilder::reconnect_backoff`]). A person's act made meanwhile
//! ([`Fleet::kill`], [`Fleet::revive`], or a shared switch flipped in code) is applied on
//! this replica at once and kept ([`SharedKillSwitch::kept`]); [`Fleet::kill`] says so
//! with [`FleetError::LinkDown`]. When the link is back, each key is read against the act
//! known here: a kept act later than the key's is written and published
//! ([`FleetEvent::Written`]), whether Redis came back empty or with an earlier act; a
//! later act in the key wins, and [`FleetEvent::Overridden`] says which act it replaced.
//! Every flip the fleet makes on a replica's switch is a [`FleetEvent::KillSwitch`].
//! Two operators acting on two replicas cut off from Redis converge on the later act,
//! whichever replica reconnects first. The breakers' latest transitions are published
//! when the link is back.
//!
//! # Sentinel, Cluster, and a fleet that outgrows one Redis
//!
//! The fleet connects to one address. The `redis` crate also speaks to Sentinel and to
//! Cluster, and this is what changes with them:
//!
//! - **Sentinel** (one master, replicas, automatic failover): not built in; point the
//!   address at whatever follows the master (a proxy, a DNS name your failover updates).
//!   Replication is asynchronous: a failover may lose the last acts written, and the new
//!   master may hold an earlier act or none. Nothing is undone by that: every replica
//!   that knows a later act writes it back on reconnection, by the order of [`act`].
//!   Messages published during the failover are lost; the keys carry the acts, read on
//!   reconnection and every `resync_every`.
//! - **Cluster**: not built in either. Kill keys read together (`MGET`) must hash to one
//!   slot: a prefix in braces (`{tcb}`) puts them all on one shard, which carries the
//!   fleet's whole load (a few keys, two connections per replica). The write is one
//!   script on one key, which Cluster runs; `PUBLISH` reaches every node's subscribers.
//! - **Outgrowing one Redis**: the cost is the fan-out, every message delivered to every
//!   replica (two connections each). Split fleets that need not share switches by
//!   prefix, onto separate servers; a switch must live in one Redis for its acts to be
//!   ordered by one compare and set.
//!
//! # The client
//!
//! The `redis` crate (1.8, tokio, multiplexed connections): the most used Rust client.
//! Its releases from 1.2.4 on need Rust 1.88, above this crate's 1.85, so the feature
//! needs 1.88 as `mcp` does; without it the crate builds on 1.85. Moving from 0.32 to 1.x
//! added six small crates to the feature's tree (arcstr, xxhash-rust, and async-lock with
//! event-listener, event-listener-strategy and parking) and dropped num-bigint and
//! num-integer. `fred` (10, MSRV 1.75) fits too, but added more crates than redis 0.32 did
//! (11 new to this crate's tree, against 4), and its automatic reconnection and
//! resubscription would hide what this layer must report and order. Its connection
//! manager is not used for the same reason:
//! the fleet supervises its own two connections (one for commands, one subscribed), so
//! it knows when the link is down, reads the kill keys in the right order on
//! reconnection, and backs off its own way.
//! TLS is the `fleet-tls` feature (rustls).

pub mod act;
mod clock;
mod config;
mod counts;
mod error;
mod event;
mod expediter;
mod hold;
mod keys;
mod link;
mod policy;
mod reconnect;
mod registry;
mod replica;
mod sequence;
mod snapshot;
mod supervisor;
mod wire;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::AbortHandle;

pub use self::act::KillAct;
pub use self::config::{FleetBuilder, Tls};
pub use self::counts::FleetCounts;
pub use self::error::FleetError;
pub use self::event::{FleetEvent, KillOrigin};
pub use self::link::LinkStatus;
pub use self::policy::HintPolicy;
pub use self::snapshot::{FleetSnapshot, SharedBreakerView, SharedKillSwitch};
pub use self::wire::Rejection;

use self::config::Settings;
use self::keys::check_name;
use self::registry::SharedBreaker;
use self::replica::Replica;
use self::supervisor::{Command, Supervisor};
use crate::{CircuitBreakerHandle, KillSwitch};

/// One replica's link to its fleet. See the [module docs](self).
///
/// # Clone
///
/// Clones share one link: one task, one pair of connections, one set of shared kill
/// switches and breakers. When the last clone is dropped the task stops; the kill
/// switches and breakers go on as they are, alone.
#[derive(Clone)]
pub struct Fleet {
    inner: Arc<Inner>,
}

struct Inner {
    replica: Arc<Replica>,
    commands: mpsc::UnboundedSender<Command>,
    /// The runtime the link was started on: its tasks run there, whichever thread
    /// shares a breaker.
    runtime: tokio::runtime::Handle,
    /// The link's task and each shared breaker's listener.
    tasks: Mutex<Vec<AbortHandle>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let tasks = self.tasks.get_mut().unwrap_or_else(|p| p.into_inner());
        for task in tasks.drain(..) {
            task.abort();
        }
    }
}

impl Fleet {
    /// Settings for a replica's link, with defaults.
    pub fn builder() -> FleetBuilder {
        FleetBuilder::new()
    }

    fn start(settings: Settings) -> Result<Fleet, FleetError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| FleetError::NoRuntime)?;
        let replica = Arc::new(Replica::new(settings));
        let (commands, receiver) = mpsc::unbounded_channel();
        let supervisor = Supervisor::new(replica.clone(), receiver)?;
        let task = runtime.spawn(supervisor.run()).abort_handle();
        Ok(Fleet {
            inner: Arc::new(Inner {
                replica,
                commands,
                runtime,
                tasks: Mutex::new(vec![task]),
            }),
        })
    }

    /// This replica's name in the fleet.
    pub fn replica(&self) -> &str {
        &self.inner.replica.settings.replica
    }

    /// Shares a kill switch under `name`: its key is read as soon as the link is up
    /// (at once if it is), and every change published for that name flips it. A switch
    /// shared with several breakers stops them all.
    ///
    /// From now on the switch follows the latest act on it ([`act`]): flip it for the
    /// fleet with [`kill`](Fleet::kill) and [`revive`](Fleet::revive), in Redis, or on
    /// the switch itself ([`KillSwitch::kill`], [`KillSwitch::revive`], from any clone):
    /// such a flip is an act too, written to the key and published as `kill` would, a
    /// moment later, from the link's task (the switch itself changes at once). Made while
    /// the link is down, it is kept, and written when the link is back unless a later
    /// act was made meanwhile. A switch whose key holds no act keeps its state.
    ///
    /// The key is read by the link's task, after this returns: a replica that must not
    /// serve before it knows its kill switches shares them all, then awaits
    /// [`wait_for_link`](Fleet::wait_for_link) (or [`sync`](Fleet::sync)).
    ///
    /// # Errors
    ///
    /// A name that cannot be used in keys, or whose messages (with this replica's name)
    /// would be longer than [`FleetBuilder::max_message_bytes`], so that every replica,
    /// this one included, would refuse them; another switch already shared under it
    /// (sharing the same one again is fine), or this switch already shared under
    /// another name ([`FleetError::SharedAs`]).
    pub fn share_kill_switch(&self, name: &str, switch: &KillSwitch) -> Result<(), FleetError> {
        check_name("kill switch", name)?;
        let settings = &self.inner.replica.settings;
        // The longest of this replica's messages for the switch ("false" > "true", and
        // the longest stamp).
        let longest = KillAct::new(false, u64::MAX, &settings.replica, &settings.run);
        let own = wire::encode(&wire::KillMessage::new(name, &longest));
        if own.len() > settings.max_message_bytes {
            return Err(FleetError::BadName {
                what: "kill switch",
                name: name.into(),
                reason: "its messages would be longer than max_message_bytes",
            });
        }
        {
            let mut registry = self.inner.replica.registry();
            match registry.switches.get(name) {
                Some(shared) if shared == switch => return Ok(()),
                Some(_) => {
                    return Err(FleetError::NameTaken {
                        what: "kill switch",
                        name: name.into(),
                    })
                }
                None => {
                    let other = registry.switches.iter().find(|(_, s)| *s == switch);
                    if let Some((shared_as, _)) = other {
                        return Err(FleetError::SharedAs {
                            name: name.into(),
                            shared_as: shared_as.to_string(),
                        });
                    }
                    registry.switches.insert(name.into(), switch.clone());
                }
            }
        }
        let name: Arc<str> = name.into();
        // Watching before the key is read: no flip after it is missed.
        let flips = switch.watch();
        let found = switch.is_killed();
        let _ = self.inner.commands.send(Command::ReadKey {
            name: name.clone(),
            found,
        });
        let task = self
            .inner
            .runtime
            .spawn(watch_switch(name, flips, self.inner.commands.clone()));
        self.inner
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task.abort_handle());
        Ok(())
    }

    /// Shares a breaker, by its name: its own transitions are published as hints, and
    /// its peers' hints for the same name are read under `policy`. Sharing it again
    /// changes its policy.
    ///
    /// # Errors
    ///
    /// A bad policy ([`FleetError::BadSetting`]: a quorum of 0, or of more replicas
    /// than the fleet remembers, [`FleetBuilder::max_peers`]; an empty window), a
    /// breaker name that cannot be used in messages, or a different breaker already
    /// shared under that name.
    pub fn share_breaker(
        &self,
        handle: &CircuitBreakerHandle,
        policy: HintPolicy,
    ) -> Result<(), FleetError> {
        policy.check(self.inner.replica.settings.max_peers)?;
        let name: Arc<str> = handle.name().into();
        check_name("breaker", &name)?;
        let mut registry = self.inner.replica.registry();
        if let Some(shared) = registry.breakers.get_mut(&name) {
            if shared.handle != *handle {
                return Err(FleetError::NameTaken {
                    what: "breaker",
                    name: name.to_string(),
                });
            }
            shared.policy = policy;
            return Ok(());
        }
        // Listening before it is registered: no transition is missed.
        let transitions = handle.subscribe();
        registry.breakers.insert(
            name.clone(),
            SharedBreaker {
                handle: handle.clone(),
                policy,
                reports: Default::default(),
                hold: Default::default(),
            },
        );
        drop(registry);
        let task = self.inner.runtime.spawn(forward(
            name,
            transitions,
            self.inner.commands.clone(),
            self.inner.replica.clone(),
        ));
        self.inner
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task.abort_handle());
        Ok(())
    }

    /// Turns kill switch `name` on for the whole fleet: on this replica at once, then
    /// in its key and on the channel, in one script, as an act stamped now ([`act`]):
    /// the key is replaced only if it holds an earlier act. The name need not be shared
    /// here (an operator's tool).
    ///
    /// # Errors
    ///
    /// [`FleetError::LinkDown`] or [`FleetError::Redis`]: Redis could not be reached or
    /// did not answer; the kill is applied on this replica and kept, and written when the
    /// link is back ([`FleetEvent::Written`]), unless a later act was made meanwhile
    /// ([`FleetEvent::Overridden`]). [`FleetError::Superseded`]: the key already held a
    /// later act, which wins. A bad name.
    pub async fn kill(&self, name: &str) -> Result<(), FleetError> {
        self.flip(name, true).await
    }

    /// Turns kill switch `name` off for the whole fleet, as [`kill`](Fleet::kill)
    /// turns it on: the key holds the revive, stamped, so that no earlier kill kept by
    /// a replica cut off meanwhile undoes it.
    ///
    /// # Errors
    ///
    /// As [`kill`](Fleet::kill).
    pub async fn revive(&self, name: &str) -> Result<(), FleetError> {
        self.flip(name, false).await
    }

    async fn flip(&self, name: &str, killed: bool) -> Result<(), FleetError> {
        check_name("kill switch", name)?;
        let (reply, answer) = oneshot::channel();
        let command = Command::Flip {
            name: name.into(),
            killed,
            reply,
        };
        self.ask(command, answer).await
    }

    /// Reads every shared kill switch's key now, against the act known here (the later
    /// wins: [`act`]), writes the acts this replica still owes the fleet, and returns
    /// once done. A replica that must not serve before it knows its kill switches calls
    /// this (or [`wait_for_link`](Fleet::wait_for_link)) first.
    ///
    /// # Errors
    ///
    /// [`FleetError::LinkDown`], or [`FleetError::Redis`].
    pub async fn sync(&self) -> Result<(), FleetError> {
        let (reply, answer) = oneshot::channel();
        self.ask(Command::Sync { reply }, answer).await
    }

    async fn ask(
        &self,
        command: Command,
        answer: oneshot::Receiver<Result<(), FleetError>>,
    ) -> Result<(), FleetError> {
        let stopped = || FleetError::Redis("the fleet's task has stopped".into());
        self.inner.commands.send(command).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Waits until the link is up (connected, subscribed) and the keys of every kill
    /// switch shared before the call are read and applied (acts kept while the link was
    /// down written), at most `within`.
    ///
    /// # Errors
    ///
    /// [`FleetError::NotConnected`], with the last error, if that is not done in time.
    pub async fn wait_for_link(&self, within: Duration) -> Result<(), FleetError> {
        let deadline = tokio::time::Instant::now() + within;
        let mut link = self.inner.replica.watch_link();
        loop {
            let up = tokio::time::timeout_at(deadline, link.wait_for(LinkStatus::is_up)).await;
            if !matches!(up, Ok(Ok(_))) {
                break;
            }
            // The link's task reads the key of a switch as it is shared, or every key when
            // the link comes up: once it answers a command sent after them, with the link
            // up, they are read.
            let (reply, answer) = oneshot::channel();
            if self
                .inner
                .commands
                .send(Command::Barrier { reply })
                .is_err()
            {
                break;
            }
            match tokio::time::timeout_at(deadline, answer).await {
                Ok(Ok(Ok(()))) => return Ok(()),
                // The link went down first: wait for it again.
                Ok(Ok(Err(_))) => continue,
                Ok(Err(_)) | Err(_) => break,
            }
        }
        let error = match self.link() {
            LinkStatus::Down { error, .. } => error,
            LinkStatus::Up { .. } => "the kill keys were not read in time".into(),
        };
        Err(FleetError::NotConnected { error })
    }

    /// The link's status now.
    pub fn link(&self) -> LinkStatus {
        self.inner.replica.link()
    }

    /// The link's status, as it changes.
    pub fn watch_link(&self) -> watch::Receiver<LinkStatus> {
        self.inner.replica.watch_link()
    }

    /// What the link does from now on: kill switches flipped, holds applied and ended,
    /// messages refused, the link going up and down. A receiver more than 256 events
    /// behind loses the oldest.
    pub fn events(&self) -> broadcast::Receiver<FleetEvent> {
        self.inner.replica.events()
    }

    /// Running totals.
    pub fn counts(&self) -> FleetCounts {
        self.inner.replica.counters.read()
    }

    /// The link, what is shared, and the totals, now.
    pub fn snapshot(&self) -> FleetSnapshot {
        let replica = &self.inner.replica;
        let now = clock::now();
        let (switches, breakers) = {
            let registry = replica.registry();
            let switches: Vec<(Arc<str>, KillSwitch, Option<KillAct>)> = registry
                .switches
                .iter()
                .map(|(name, switch)| {
                    let kept = registry.kept.get(name).cloned();
                    (name.clone(), switch.clone(), kept)
                })
                .collect();
            let breakers = registry
                .breakers
                .iter()
                .map(|(name, shared)| SharedBreakerView {
                    name: name.clone(),
                    policy: shared.policy,
                    held_until: shared.hold.until(now),
                    peers_open: shared.reports.open_count(now),
                })
                .collect();
            (switches, breakers)
        };
        FleetSnapshot {
            replica: replica.settings.replica.clone(),
            link: replica.link(),
            kill_switches: switches
                .into_iter()
                .map(|(name, switch, kept)| SharedKillSwitch {
                    killed: switch.is_killed(),
                    name,
                    kept,
                })
                .collect(),
            breakers,
            counts: replica.counters.read(),
            taken_at: now,
        }
    }
}

/// Passes a shared breaker's transitions to the link's task, in order.
async fn forward(
    breaker: Arc<str>,
    mut transitions: broadcast::Receiver<crate::Transition>,
    commands: mpsc::UnboundedSender<Command>,
    replica: Arc<Replica>,
) {
    loop {
        match transitions.recv().await {
            Ok(transition) => {
                let command = Command::Transition {
                    breaker: breaker.clone(),
                    transition,
                };
                if commands.send(command).is_err() {
                    return;
                }
            }
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                counts::add(&replica.counters.lagged, missed);
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Tells the link's task of every flip of a shared kill switch; the task sorts those it
/// made itself from those to share.
async fn watch_switch(
    name: Arc<str>,
    mut flips: watch::Receiver<bool>,
    commands: mpsc::UnboundedSender<Command>,
) {
    while flips.changed().await.is_ok() {
        if commands.send(Command::Flipped(name.clone())).is_err() {
            return;
        }
    }
}

/// Shows the replica and the link.
impl fmt::Debug for Fleet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fleet")
            .field("replica", &self.replica())
            .field("link", &self.link())
            .finish_non_exhaustive()
    }
}
