//! The task that talks to Redis for one replica: it connects, subscribes, reads the kill
//! keys, then applies what arrives and publishes what its breakers do; when the link is
//! lost it works alone, keeps every command's local effect, and reconnects with backoff.
//!
//! Nothing here runs on a call's path: calls read the kill switch's flag and the
//! breaker's own state, and this task changes them from the side, through the switch
//! ([`KillSwitch::kill`](crate::KillSwitch::kill) and `revive`) and the breaker's handle
//! ([`hold_open_until`](crate::CircuitBreakerHandle::hold_open_until) and
//! [`release_hold`](crate::CircuitBreakerHandle::release_hold)).
//!
//! Order on (re)connection: subscribe first, then read the kill keys, then apply the
//! messages that arrived meanwhile, in order. A change is written to its key and
//! published in one transaction, so a change made before the read is in the key, and
//! one made after it is in a message applied after the key: the last change wins.
//!
//! A shared kill switch flipped on this replica, by any code, is told to this task (its
//! watch); the task writes and publishes the flip unless it made it itself on the
//! fleet's word ([`agreed`](super::agreed)). Alone, such a flip stays local, and the key
//! read on reconnection wins over it; up, a flip not yet shared wins over what is heard
//! meanwhile (it is newer, and is published next), and one whose write fails wins over
//! the key read on reconnection, and is shared then.
//!
//! Commands go before messages: a breaker's transition already passed to this task is
//! taken into account (an episode of holds ended by its own probe, say) before the next
//! hint is weighed.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use futures_util::StreamExt;
use redis::aio::{MultiplexedConnection, PubSubSink, PubSubStream};
use redis::{from_redis_value, AsyncConnectionConfig, Client, Msg, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time;

use super::agreed::{Agreed, Unshared};
use super::backoff::Backoff;
use super::clock;
use super::counts::add;
use super::error::FleetError;
use super::event::{FleetEvent, KillOrigin};
use super::hold::{Act, Kept};
use super::policy::HintPolicy;
use super::replica::Replica;
use super::sequence::{Order, Sequences};
use super::wire::{encode, HintMessage, HintState, KillMessage, Rejection, VERSION};
use crate::{Cause, CircuitBreakerHandle, KillSwitch, Mode, NextProbe, State, Transition};

/// Further off than any hold: a published time beyond it is taken as it.
const FAR: time::Duration = time::Duration::from_secs(10 * 365 * 24 * 3600);

/// What the replica's handles ask of the task.
#[derive(Debug)]
pub(crate) enum Command {
    /// A kill switch was shared: read its key.
    ReadKey(Arc<str>),
    /// A shared breaker made a transition.
    Transition {
        breaker: Arc<str>,
        transition: Transition,
    },
    /// A shared kill switch flipped: by this task on the fleet's word, or on the switch
    /// itself, to be shared.
    Flipped(Arc<str>),
    /// Kill or revive a switch for the whole fleet.
    Flip {
        name: Arc<str>,
        killed: bool,
        reply: oneshot::Sender<Result<(), FleetError>>,
    },
    /// Read every kill key now.
    Sync {
        reply: oneshot::Sender<Result<(), FleetError>>,
    },
}

/// The connections of one up link.
struct Session {
    conn: MultiplexedConnection,
    sink: PubSubSink,
    stream: PubSubStream,
}

impl Session {
    /// Whether both connections answer, and are allowed to.
    async fn check(&mut self, wait: time::Duration) -> Result<(), Failed> {
        within(wait, redis::cmd("PING").query_async::<()>(&mut self.conn)).await?;
        // Subscribed, PING answers ["pong", ""].
        within(wait, self.sink.ping::<Vec<String>>()).await?;
        Ok(())
    }
}

/// How a session or a wait ended.
enum End {
    /// Every handle is gone.
    Stopped,
    /// The link was lost, or never came up.
    Lost(Arc<str>),
}

/// A failure of Redis or of the wait for it, as the link reports it.
type Failed = Arc<str>;

async fn within<T, E: std::fmt::Display>(
    wait: time::Duration,
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, Failed> {
    match time::timeout(wait, work).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(error.to_string().into()),
        Err(_) => Err(format!("no answer from redis within {wait:?}").into()),
    }
}

pub(crate) struct Supervisor {
    replica: Arc<Replica>,
    commands: mpsc::UnboundedReceiver<Command>,
    client: Client,
    sequences: Sequences,
    /// What each shared kill switch was last agreed to be with the fleet.
    agreed: Agreed,
    /// The last sequence number published.
    seq: u64,
    /// Hints not yet published because the link was down: the latest per breaker.
    pending: BTreeMap<Arc<str>, HintMessage>,
    backoff: Backoff,
    /// Whether the link has been up before (a reconnection is counted).
    was_up: bool,
}

impl Supervisor {
    pub(crate) fn new(
        replica: Arc<Replica>,
        commands: mpsc::UnboundedReceiver<Command>,
    ) -> Result<Supervisor, FleetError> {
        let settings = &replica.settings;
        let client =
            Client::open(settings.connection.clone()).map_err(|error| FleetError::BadAddress {
                reason: error.to_string(),
            })?;
        Ok(Supervisor {
            sequences: Sequences::new(settings.max_peers),
            backoff: Backoff::new(
                settings.reconnect_first,
                settings.reconnect_longest,
                settings.seed,
            ),
            client,
            commands,
            replica,
            agreed: Agreed::default(),
            seq: 0,
            pending: BTreeMap::new(),
            was_up: false,
        })
    }

    pub(crate) async fn run(mut self) {
        loop {
            let end = match self.connect().await {
                Ok(mut session) => self.serve(&mut session).await,
                Err(error) => End::Lost(error),
            };
            match end {
                End::Stopped => return,
                End::Lost(error) => self.replica.link_down(&error),
            }
            let wait = self.backoff.next_wait();
            if let End::Stopped = self.alone(wait).await {
                return;
            }
        }
    }

    async fn connect(&mut self) -> Result<Session, Failed> {
        let settings = &self.replica.settings;
        let wait = settings.timeout;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(wait)
            .set_response_timeout(wait);
        let conn = within(
            wait * 2,
            self.client
                .get_multiplexed_async_connection_with_config(&config),
        )
        .await?;
        let (mut sink, stream) = within(wait, self.client.get_async_pubsub()).await?.split();
        within(wait, sink.subscribe(settings.keys.kill_channel())).await?;
        within(wait, sink.subscribe(settings.keys.hint_channel())).await?;
        let mut session = Session { conn, sink, stream };
        self.agreed.resubscribed();
        // A refused subscription (no AUTH, an ACL) is not reported by the subscribe
        // itself: a PING on each connection is.
        session.check(wait).await?;
        let names: Vec<Arc<str>> = self.replica.registry().switches.keys().cloned().collect();
        // The keys win over what this replica did while alone, but not over a flip made
        // while the link was up whose write failed: that one is shared now.
        let (owed, names): (Vec<_>, Vec<_>) =
            names.into_iter().partition(|name| self.agreed.owes(name));
        self.read_kill_keys(&mut session.conn, names, Unshared::Loses)
            .await?;
        self.read_kill_keys(&mut session.conn, owed.clone(), Unshared::Wins)
            .await?;
        for name in owed {
            self.share_flip(&mut session, name).await?;
        }
        for (_, hint) in std::mem::take(&mut self.pending) {
            let over = hint
                .until_ms
                .is_some_and(|ms| clock::until_wall_ms(ms).is_none());
            if hint.state == HintState::Open && over {
                continue;
            }
            self.publish(&mut session, hint).await?;
        }
        // Up once in step both ways: kill keys read, hints held back published.
        self.replica.link_up(self.was_up);
        self.was_up = true;
        self.backoff.reset();
        Ok(session)
    }

    /// Up: applies messages, carries out commands, re-reads the kill keys now and then.
    async fn serve(&mut self, session: &mut Session) -> End {
        let every = self.replica.settings.resync_every;
        let mut resync = time::interval_at(time::Instant::now() + every, every);
        resync.set_missed_tick_behavior(time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                command = self.commands.recv() => match command {
                    Some(command) => {
                        if let Err(error) = self.on_command(command, Some(session)).await {
                            return End::Lost(error);
                        }
                    }
                    None => return End::Stopped,
                },
                message = session.stream.next() => match message {
                    Some(message) => self.on_message(&message),
                    None => return End::Lost("the connection to redis closed".into()),
                },
                _ = resync.tick() => {
                    let names: Vec<Arc<str>> =
                        self.replica.registry().switches.keys().cloned().collect();
                    let wait = self.replica.settings.timeout;
                    let read = self
                        .read_kill_keys(&mut session.conn, names, Unshared::Wins)
                        .await;
                    if let Err(error) = read.and(session.check(wait).await) {
                        return End::Lost(error);
                    }
                }
            }
        }
    }

    /// Down: waits `wait` before the next attempt, carrying out commands locally.
    async fn alone(&mut self, wait: time::Duration) -> End {
        let sleep = time::sleep(wait);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => return End::Lost("retrying".into()),
                command = self.commands.recv() => match command {
                    Some(command) => {
                        let _ = self.on_command(command, None).await;
                    }
                    None => return End::Stopped,
                },
            }
        }
    }

    fn link_down_error(&self) -> FleetError {
        match self.replica.link() {
            super::LinkStatus::Down { since, error } => FleetError::LinkDown { since, error },
            super::LinkStatus::Up { since } => FleetError::LinkDown {
                since,
                error: "the link is being re-established".into(),
            },
        }
    }

    /// Carries out a command; with no session, its local part only. An error is the
    /// link's.
    async fn on_command(
        &mut self,
        command: Command,
        session: Option<&mut Session>,
    ) -> Result<(), Failed> {
        match command {
            Command::ReadKey(name) => match session {
                Some(session) => {
                    self.read_kill_keys(&mut session.conn, vec![name], Unshared::Wins)
                        .await
                }
                None => Ok(()),
            },
            Command::Transition {
                breaker,
                transition,
            } => {
                if let Some(shared) = self.replica.registry().breakers.get_mut(&breaker) {
                    shared.hold.on_transition(transition.cause);
                }
                let Some(hint) = self.hint_of(&transition) else {
                    return Ok(());
                };
                match session {
                    Some(session) => self.publish(session, hint).await,
                    None => {
                        self.pending.insert(breaker, hint);
                        Ok(())
                    }
                }
            }
            Command::Flipped(name) => match session {
                Some(session) => self.share_flip(session, name).await,
                // Alone, a flip stays on this replica: the key wins when the link is back.
                None => {
                    self.agreed.settled(&name);
                    Ok(())
                }
            },
            Command::Flip {
                name,
                killed,
                reply,
            } => {
                self.apply_kill(&name, killed, KillOrigin::Command, Unshared::Loses);
                // A person's command replaces a flip owed: it is reported to them instead.
                self.agreed.settled(&name);
                let Some(session) = session else {
                    let _ = reply.send(Err(self.link_down_error()));
                    return Ok(());
                };
                let result = self.write_kill(session, &name, killed).await;
                let _ = reply.send(result.clone().map_err(FleetError::Redis));
                result
            }
            Command::Sync { reply } => {
                let Some(session) = session else {
                    let _ = reply.send(Err(self.link_down_error()));
                    return Ok(());
                };
                let names: Vec<Arc<str>> =
                    self.replica.registry().switches.keys().cloned().collect();
                let mut result = Ok(());
                // A flip made in code before the sync, whose news is not here yet, is
                // shared first: the keys read then hold it. The first write that fails
                // ends the sync (the link is down: the others would wait their timeouts).
                for name in &names {
                    result = self.share_flip(session, name.clone()).await;
                    if result.is_err() {
                        break;
                    }
                }
                let result = match result {
                    Ok(()) => {
                        self.read_kill_keys(&mut session.conn, names, Unshared::Wins)
                            .await
                    }
                    Err(error) => Err(error),
                };
                let _ = reply.send(result.clone().map_err(FleetError::Redis));
                result
            }
        }
    }

    /// Shares a flip made on shared switch `name` itself, if it has one not shared yet.
    async fn share_flip(&mut self, session: &mut Session, name: Arc<str>) -> Result<(), Failed> {
        let Some((_, switch)) = self.switch(&name) else {
            return Ok(());
        };
        let killed = switch.is_killed();
        if !self.agreed.flipped(&name, killed) {
            self.agreed.settled(&name);
            return Ok(());
        }
        if let Err(error) = self.write_kill(session, &name, killed).await {
            // Made with the link up, the flip is not undone by the key when the link is
            // back: it is shared then.
            self.agreed.owe(&name, killed);
            return Err(error);
        }
        self.agreed.settled(&name);
        self.replica.emit(FleetEvent::KillSwitch {
            name,
            killed,
            origin: KillOrigin::Switch,
        });
        Ok(())
    }

    /// The hint a transition publishes: the breaker's own calls opened or closed it
    /// (enabled mode only). Holds are never published, neither a hint's
    /// ([`Cause::Hint`]) nor a person's force-open, so a hold never echoes around the
    /// fleet and a quorum counts only replicas that saw failures themselves.
    fn hint_of(&self, transition: &Transition) -> Option<HintMessage> {
        if transition.mode != Mode::Enabled || transition.cause == Cause::Hint {
            return None;
        }
        let state = match transition.to {
            State::Open => HintState::Open,
            State::Closed => HintState::Closed,
            State::HalfOpen | State::ForcedOpen => return None,
        };
        let until_ms = match (state, transition.next_probe) {
            (HintState::Open, NextProbe::After { at: Some(at), .. }) => Some(clock::to_wall_ms(at)),
            _ => None,
        };
        let settings = &self.replica.settings;
        Some(HintMessage {
            v: VERSION,
            replica: settings.replica.to_string(),
            run: settings.run.to_string(),
            seq: 0,
            name: transition.name.to_string(),
            state,
            cause: transition.cause.as_str().into(),
            at_ms: clock::to_wall_ms(transition.at),
            until_ms,
        })
    }

    async fn publish(
        &mut self,
        session: &mut Session,
        mut hint: HintMessage,
    ) -> Result<(), Failed> {
        self.seq += 1;
        hint.seq = self.seq;
        let settings = &self.replica.settings;
        let mut publish = redis::cmd("PUBLISH");
        publish.arg(settings.keys.hint_channel()).arg(encode(&hint));
        match within(
            settings.timeout,
            publish.query_async::<()>(&mut session.conn),
        )
        .await
        {
            Ok(()) => {
                add(&self.replica.counters.published, 1);
                Ok(())
            }
            Err(error) => {
                self.pending.insert(hint.name.as_str().into(), hint);
                Err(error)
            }
        }
    }

    /// Writes a kill switch's key and publishes the change, in one transaction.
    async fn write_kill(
        &mut self,
        session: &mut Session,
        name: &str,
        killed: bool,
    ) -> Result<(), Failed> {
        let settings = &self.replica.settings;
        let key = settings.keys.kill_key(name);
        let message = encode(&KillMessage::new(
            name,
            killed,
            &settings.replica,
            &settings.run,
        ));
        let mut pipe = redis::pipe();
        pipe.atomic();
        if killed {
            pipe.set(key, "1").ignore();
        } else {
            pipe.del(key).ignore();
        }
        pipe.publish(settings.keys.kill_channel(), message).ignore();
        within(settings.timeout, pipe.query_async::<()>(&mut session.conn)).await?;
        self.agreed.written(name);
        add(&self.replica.counters.kills_published, 1);
        Ok(())
    }

    /// Reads the keys of these kill switches and applies them: the key wins over what
    /// the replica holds, and over a flip made on a switch itself and not shared yet
    /// when `unshared` loses.
    async fn read_kill_keys(
        &mut self,
        conn: &mut MultiplexedConnection,
        names: Vec<Arc<str>>,
        unshared: Unshared,
    ) -> Result<(), Failed> {
        if names.is_empty() {
            return Ok(());
        }
        let settings = &self.replica.settings;
        let keys: Vec<String> = names.iter().map(|n| settings.keys.kill_key(n)).collect();
        // MGET reads a key of another type (a list, a hash) as absent: each key's type,
        // read in the same transaction, tells it from one that is not there.
        let mut read = redis::pipe();
        read.atomic().cmd("MGET").arg(&keys);
        for key in &keys {
            read.cmd("TYPE").arg(key);
        }
        let replies = within(settings.timeout, read.query_async::<Vec<Value>>(conn)).await?;
        let Some((values, types)) = replies.split_first() else {
            return Err("redis answered no kill keys".into());
        };
        let values: Vec<Option<Vec<u8>>> =
            from_redis_value(values).map_err(|error| Failed::from(error.to_string()))?;
        let types: Vec<String> = types
            .iter()
            .map(|kind| from_redis_value(kind).unwrap_or_default())
            .collect();
        for (((name, key), value), kind) in names.iter().zip(keys).zip(values).zip(types) {
            match (value.as_deref(), kind.as_str()) {
                (None, "none") | (Some(b"0"), _) => {
                    self.apply_kill(name, false, KillOrigin::Key, unshared)
                }
                (Some(b"1"), _) => self.apply_kill(name, true, KillOrigin::Key, unshared),
                _ => self.rejected(key.into(), Rejection::Malformed),
            }
        }
        Ok(())
    }

    fn rejected(&self, channel: Arc<str>, why: Rejection) {
        self.replica.counters.rejected(why);
        tracing::warn!(target: "tower_circuit_breaker::fleet", %channel, %why, "fleet message refused");
        self.replica.emit(FleetEvent::Rejected { channel, why });
    }

    /// A shared kill switch by its name, with the name as registered.
    fn switch(&self, name: &str) -> Option<(Arc<str>, KillSwitch)> {
        let registry = self.replica.registry();
        let (name, switch) = registry.switches.get_key_value(name)?;
        Some((name.clone(), switch.clone()))
    }

    /// Sets a shared kill switch on the fleet's word, if this replica shares one by that
    /// name. Its flip is agreed first, so it is not shared again.
    fn apply_kill(&mut self, name: &str, killed: bool, origin: KillOrigin, unshared: Unshared) {
        let Some((name, switch)) = self.switch(name) else {
            return;
        };
        if !self
            .agreed
            .told(&name, killed, switch.is_killed(), unshared)
        {
            return;
        }
        if killed {
            switch.kill();
        } else {
            switch.revive();
        }
        self.replica.emit(FleetEvent::KillSwitch {
            name,
            killed,
            origin,
        });
    }

    fn on_message(&mut self, message: &Msg) {
        let settings = &self.replica.settings;
        let limit = settings.max_message_bytes;
        let payload = message.get_payload_bytes();
        let channel = message.get_channel_name();
        if channel == settings.keys.kill_channel() {
            match KillMessage::decode(payload, limit) {
                Ok(kill) => {
                    add(&self.replica.counters.kill_messages, 1);
                    let own = match (&kill.replica, &kill.run) {
                        (Some(replica), Some(run)) => self.is_own(replica, run),
                        _ => false,
                    };
                    if self.agreed.heard(&kill.name, own) {
                        let origin = KillOrigin::Message;
                        self.apply_kill(&kill.name, kill.killed, origin, Unshared::Wins);
                    }
                }
                Err(why) => self.rejected(channel.into(), why),
            }
        } else if channel == settings.keys.hint_channel() {
            match HintMessage::decode(payload, limit) {
                Ok(hint) => self.on_hint(hint),
                Err(why) => self.rejected(channel.into(), why),
            }
        }
    }

    /// Whether a message of `replica`'s `run` is this replica's own, in this run.
    fn is_own(&self, replica: &str, run: &str) -> bool {
        let settings = &self.replica.settings;
        replica == &*settings.replica && run == &*settings.run
    }

    fn on_hint(&mut self, hint: HintMessage) {
        if self.is_own(&hint.replica, &hint.run) {
            return;
        }
        let settings = &self.replica.settings;
        let counters = &self.replica.counters;
        let now = clock::now();
        match self.sequences.check(
            &hint.replica,
            &hint.run,
            hint.seq,
            hint.at_ms,
            now,
            clock::wall_now_ms(),
        ) {
            Order::Stale => {
                add(&counters.stale, 1);
                return;
            }
            Order::Next { missed } => add(&counters.missed, missed),
        }
        add(&counters.hints, 1);
        let shared = self
            .replica
            .registry()
            .breakers
            .get_key_value(hint.name.as_str())
            .map(|(name, b)| (name.clone(), b.handle.clone(), b.policy));
        let Some((name, handle, policy)) = shared else {
            return;
        };
        if policy == HintPolicy::Ignore {
            return;
        }
        // Until when the peer says its breaker stays open, capped; over: it no longer
        // counts.
        let until = match hint.state {
            HintState::Open => match hint.until_ms {
                // Bounded only to keep the arithmetic sound; the hold caps it.
                Some(ms) => clock::until_wall_ms(ms).map(|wait| now + wait.min(FAR)),
                None => Some(now + settings.default_hold),
            },
            HintState::Closed => None,
        };
        let replica: Arc<str> = hint.replica.as_str().into();
        let act = {
            let mut registry = self.replica.registry();
            let Some(shared) = registry.breakers.get_mut(&name) else {
                return;
            };
            match until {
                Some(until) => shared
                    .reports
                    .open(&replica, until, now, settings.max_peers),
                None => shared.reports.closed(&replica),
            }
            match until {
                Some(_) => {
                    let wanted = shared.reports.wanted(policy, now);
                    shared.hold.decide(wanted, now, settings.max_hold)
                }
                None => {
                    let holding = shared.reports.holding(policy, now);
                    shared.hold.decide_closed(holding, now)
                }
            }
        };
        self.act(&name, &handle, act, replica, now);
    }

    /// Carries out a hold decision on the breaker (which may refuse it: see
    /// [`hold`](super::hold)), then records what it took. Never under the registry's
    /// lock: the breaker tells its observers of the hold on this task.
    fn act(
        &self,
        name: &Arc<str>,
        handle: &CircuitBreakerHandle,
        act: Act,
        replica: Arc<str>,
        now: std::time::Instant,
    ) {
        let counters = &self.replica.counters;
        let max_hold = self.replica.settings.max_hold;
        let event = match act {
            Act::Hold { until, capped } => {
                if !handle.hold_open_until(until) {
                    return;
                }
                add(&counters.holds, 1);
                if capped {
                    add(&counters.capped, 1);
                }
                if let Some(shared) = self.replica.registry().breakers.get_mut(name) {
                    shared.hold.held(until, now, max_hold);
                }
                FleetEvent::Held {
                    breaker: name.clone(),
                    until,
                    replica,
                    capped,
                }
            }
            Act::Release => {
                let released = handle.release_hold();
                if let Some(shared) = self.replica.registry().breakers.get_mut(name) {
                    shared.hold.released();
                }
                if !released {
                    return;
                }
                add(&counters.releases, 1);
                FleetEvent::Released {
                    breaker: name.clone(),
                }
            }
            Act::Keep(Kept::Capped) => {
                add(&counters.capped, 1);
                return;
            }
            Act::Keep(Kept::Nothing | Kept::Held | Kept::Closed) => return,
        };
        // Told once recorded: a listener that looks at the snapshot sees the hold.
        self.replica.emit(event);
    }
}
