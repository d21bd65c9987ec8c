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
//! Every kill or revive is an act with a stamp ([`act`](super::act)): the switch follows
//! the latest act known. One made on this replica (a person's command, or a flip of the
//! switch itself in code, told to this task by its watch) is applied at once and written
//! with a compare and set, now or, made while the link is down, when it is back; a key or
//! a message is applied only when its act is later than the one known, and a key holding
//! an earlier act, or none, gets the later act written back. A flip made in code is
//! noticed before anything else is weighed for its switch, so the order sees it.
//!
//! Commands go before messages: a breaker's transition already passed to this task is
//! taken into account (an episode of holds ended by its own probe, say) before the next
//! hint is weighed.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::Arc;

use futures_util::StreamExt;
use redis::aio::{MultiplexedConnection, PubSubSink, PubSubStream};
use redis::{from_redis_value_ref, AsyncConnectionConfig, Client, Msg, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time;

use super::act::{Believed, Heard, KillAct, Pending, Register, Stamper, Stored};
use super::clock;
use super::counts::add;
use super::error::FleetError;
use super::event::{FleetEvent, KillOrigin};
use super::hold::{Act, Kept};
use super::policy::HintPolicy;
use super::reconnect::ReconnectWait;
use super::replica::Replica;
use super::sequence::{Order, Sequences};
use super::wire::{encode, HintMessage, HintState, KillMessage, KillRecord, Rejection, VERSION};
use crate::{Cause, CircuitBreakerHandle, KillSwitch, Mode, NextProbe, State, Transition};

/// How many times an act is tried against a key that keeps changing under it.
const MAX_WRITES: usize = 8;

/// Writes an act to a kill key if the key holds what the replica believes it does, and
/// publishes its message, at once; either way, answers what the key held (`n`: none,
/// `s` and the string, `t` and another type: what [`Believed`] is matched against).
const WRITE_ACT: &str = r"
local kind = redis.call('TYPE', KEYS[1])['ok']
local held
if kind == 'none' then held = 'n'
elseif kind == 'string' then held = 's' .. redis.call('GET', KEYS[1])
else held = 't' .. kind end
if held ~= ARGV[1] then return {0, held} end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return {1, held}
";

/// Further off than any hold: a published time beyond it is taken as it.
const FAR: time::Duration = time::Duration::from_secs(10 * 365 * 24 * 3600);

/// Where a command's answer goes.
type Reply = oneshot::Sender<Result<(), FleetError>>;

/// What the replica's handles ask of the task.
#[derive(Debug)]
pub(crate) enum Command {
    /// A kill switch was shared, found killed or not: take it in, and read its key.
    ReadKey { name: Arc<str>, found: bool },
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
        reply: Reply,
    },
    /// Read every kill key now.
    Sync { reply: Reply },
    /// Answer once every command sent before is carried out, with the link up.
    Barrier { reply: Reply },
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

/// Both connections of a session, subscribed and answering. It needs nothing of the
/// task's own, which carries out commands while it waits.
async fn open(client: Client, replica: Arc<Replica>) -> Result<Session, Failed> {
    let settings = &replica.settings;
    let wait = settings.timeout;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(wait))
        .set_response_timeout(Some(wait));
    let conn = within(
        wait * 2,
        client.get_multiplexed_async_connection_with_config(&config),
    )
    .await?;
    let (mut sink, stream) = within(wait, client.get_async_pubsub()).await?.split();
    within(wait, sink.subscribe(settings.keys.kill_channel())).await?;
    within(wait, sink.subscribe(settings.keys.hint_channel())).await?;
    let mut session = Session { conn, sink, stream };
    // A refused subscription (no AUTH, an ACL) is not reported by the subscribe itself: a
    // PING on each connection is.
    session.check(wait).await?;
    Ok(session)
}

pub(crate) struct Supervisor {
    replica: Arc<Replica>,
    commands: mpsc::UnboundedReceiver<Command>,
    client: Client,
    sequences: Sequences,
    /// Each kill switch's acts, by name: those shared, and those acted on here.
    registers: BTreeMap<Arc<str>, Register>,
    /// Stamps this replica's acts.
    stamper: Stamper,
    /// The last sequence number published.
    seq: u64,
    /// Hints not yet published because the link was down: the latest per breaker.
    pending: BTreeMap<Arc<str>, HintMessage>,
    backoff: ReconnectWait,
    /// Whether the link has been up before (a reconnection is counted).
    was_up: bool,
    /// Syncs and barriers that came while a session was opening: they need the link.
    waiting: VecDeque<Command>,
    /// A person's acts made while a session was opening, applied here, with their
    /// replies: told when the attempt ends.
    parked: Vec<(Arc<str>, KillAct, Reply)>,
}

impl Supervisor {
    pub(crate) fn new(
        replica: Arc<Replica>,
        commands: mpsc::UnboundedReceiver<Command>,
    ) -> Result<Supervisor, FleetError> {
        let settings = &replica.settings;
        let client =
            Client::open(settings.connection.clone()).map_err(|error| FleetError::BadAddress {
                reason: settings.redact(&error.to_string()).to_string(),
            })?;
        Ok(Supervisor {
            sequences: Sequences::new(settings.max_peers),
            backoff: ReconnectWait::new(
                settings.reconnect_first,
                settings.reconnect_longest,
                settings.seed,
            ),
            client,
            commands,
            replica,
            registers: BTreeMap::new(),
            stamper: Stamper::default(),
            seq: 0,
            pending: BTreeMap::new(),
            was_up: false,
            waiting: VecDeque::new(),
            parked: Vec::new(),
        })
    }

    pub(crate) async fn run(mut self) {
        loop {
            let end = match self.connect().await {
                Ok(mut session) => self.serve(&mut session).await,
                Err(end) => end,
            };
            match end {
                End::Stopped => return,
                End::Lost(error) => self.replica.link_down(&error),
            }
            // What waited for the link is answered without it; an act made meanwhile is
            // kept.
            for (_, _, reply) in std::mem::take(&mut self.parked) {
                let _ = reply.send(Err(self.link_down_error()));
            }
            while let Some(command) = self.waiting.pop_front() {
                let _ = self.on_command(command, None).await;
            }
            let wait = self.backoff.next_wait();
            if let End::Stopped = self.alone(wait).await {
                return;
            }
        }
    }

    /// Opens a session and brings the link up in step. While the session opens (a
    /// Redis that takes TCP connections and answers nothing holds it for up to twice the
    /// timeout), commands are carried out locally, as when the link is down: a person's
    /// act is applied here at once, and answered when the attempt ends (written, or kept).
    /// A sync or a barrier waits for the attempt's end.
    async fn connect(&mut self) -> Result<Session, End> {
        let opening = open(self.client.clone(), self.replica.clone());
        tokio::pin!(opening);
        let mut session = loop {
            tokio::select! {
                biased;
                opened = &mut opening => break opened.map_err(End::Lost)?,
                command = self.commands.recv() => match command {
                    Some(command @ (Command::Sync { .. } | Command::Barrier { .. })) => {
                        self.waiting.push_back(command);
                    }
                    // Applied here at once; answered when the attempt ends, as written
                    // with the session or kept without it.
                    Some(Command::Flip { name, killed, reply }) => {
                        let act = self.flip_here(&name, killed, false);
                        self.parked.push((name, act, reply));
                    }
                    Some(command) => {
                        let _ = self.on_command(command, None).await;
                    }
                    None => return Err(End::Stopped),
                },
            }
        };
        // Each key against the act known here: the later wins, and acts kept while alone
        // are written now.
        let names = self.names();
        self.read_kill_keys(&mut session, names)
            .await
            .map_err(End::Lost)?;
        for (_, hint) in std::mem::take(&mut self.pending) {
            let over = hint
                .until_ms
                .is_some_and(|ms| clock::until_wall_ms(ms).is_none());
            if hint.state == HintState::Open && over {
                continue;
            }
            self.publish(&mut session, hint).await.map_err(End::Lost)?;
        }
        // Up once in step both ways: kill keys read, hints held back published.
        self.replica.link_up(self.was_up);
        self.was_up = true;
        self.backoff.reset();
        // The acts made while it opened are written (kept ones are, as the keys are read).
        for (name, act, reply) in std::mem::take(&mut self.parked) {
            let _ = reply.send(self.answer_to(&name, &act));
        }
        Ok(session)
    }

    /// Up: applies messages, carries out commands, re-reads the kill keys now and then.
    async fn serve(&mut self, session: &mut Session) -> End {
        // What waited for the link first, in the order it came.
        while let Some(command) = self.waiting.pop_front() {
            if let Err(error) = self.on_command(command, Some(session)).await {
                return End::Lost(error);
            }
        }
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
                    let names = self.names();
                    let wait = self.replica.settings.timeout;
                    let read = self.read_kill_keys(session, names).await;
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

    /// The kill switches whose keys are read: those shared, and those with an act made
    /// here not written yet.
    fn names(&self) -> Vec<Arc<str>> {
        let mut names: Vec<Arc<str>> = self.replica.registry().switches.keys().cloned().collect();
        for (name, register) in &self.registers {
            if register.pending.is_some() && !names.contains(name) {
                names.push(name.clone());
            }
        }
        names
    }

    /// Carries out a command; with no session, its local part only. An error is the
    /// link's.
    async fn on_command(
        &mut self,
        command: Command,
        session: Option<&mut Session>,
    ) -> Result<(), Failed> {
        match command {
            Command::ReadKey { name, found } => {
                self.take_in(&name, found);
                match session {
                    Some(session) => self.read_kill_keys(session, vec![name]).await,
                    // Read with every other key when the link comes up.
                    None => Ok(()),
                }
            }
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
            Command::Flipped(name) => {
                self.notice(&name, session.is_some());
                // Noticed now, or already as a message for the switch came in.
                let pending = self
                    .registers
                    .get(&name)
                    .is_some_and(|r| r.pending.is_some());
                if !pending {
                    return Ok(());
                }
                match session {
                    Some(session) => self.settle(session, &name, None).await,
                    // Alone, the flip is kept: written when the link is back.
                    None => Ok(()),
                }
            }
            Command::Flip {
                name,
                killed,
                reply,
            } => {
                let Some(session) = session else {
                    self.flip_here(&name, killed, false);
                    let _ = reply.send(Err(self.link_down_error()));
                    return Ok(());
                };
                // The key first: the act is stamped after what it holds. A peer's act
                // this replica never heard of (it shares no switch by the name), stamped
                // by a clock a little ahead, would otherwise win over a person's act
                // made after it was written.
                if let Err(error) = self.read_kill_keys(session, vec![name.clone()]).await {
                    // The link failed: the act holds here, kept to be written.
                    self.flip_here(&name, killed, false);
                    let _ =
                        reply.send(Err(FleetError::Redis(self.replica.settings.redact(&error))));
                    return Err(error);
                }
                let act = self.flip_here(&name, killed, true);
                let result = self.settle(session, &name, None).await;
                let answer = match &result {
                    Err(error) => Err(FleetError::Redis(self.replica.settings.redact(error))),
                    Ok(()) => self.answer_to(&name, &act),
                };
                let _ = reply.send(answer);
                result
            }
            Command::Sync { reply } => {
                let Some(session) = session else {
                    let _ = reply.send(Err(self.link_down_error()));
                    return Ok(());
                };
                // Flips made in code before the sync are noticed first, key by key: the
                // keys hold them once it returns.
                let names = self.names();
                let result = self.read_kill_keys(session, names).await;
                let answer = result
                    .clone()
                    .map_err(|error| FleetError::Redis(self.replica.settings.redact(&error)));
                let _ = reply.send(answer);
                result
            }
            Command::Barrier { reply } => {
                let answer = match session {
                    Some(_) => Ok(()),
                    None => Err(self.link_down_error()),
                };
                let _ = reply.send(answer);
                Ok(())
            }
        }
    }

    /// A person's kill or revive of switch `name`, made here now: applied to the switch
    /// at once, and to be written (kept, if the link is not up). The act.
    fn flip_here(&mut self, name: &Arc<str>, killed: bool, link_up: bool) -> KillAct {
        // A flip made in code before this command is an act before it.
        self.notice(name, link_up);
        let act = self.act_here(killed);
        let pending = Pending {
            by_command: true,
            kept: !link_up,
        };
        self.registers
            .entry(name.clone())
            .or_default()
            .made(act.clone(), pending);
        self.mirror_kept(name);
        self.apply_switch(name, killed, KillOrigin::Command);
        act
    }

    /// What a person's `act` on switch `name`, written, is told: done, or superseded by a
    /// later act the key held.
    fn answer_to(&self, name: &Arc<str>, act: &KillAct) -> Result<(), FleetError> {
        match self.registers.get(name).and_then(|r| r.act.clone()) {
            Some(known) if known != *act => Err(FleetError::Superseded { by: known }),
            _ => Ok(()),
        }
    }

    /// A new act made on this replica now.
    fn act_here(&mut self, killed: bool) -> KillAct {
        let at_ms = self.stamper.next(clock::wall_now_ms());
        let settings = &self.replica.settings;
        KillAct::new(killed, at_ms, &settings.replica, &settings.run)
    }

    /// Looks at shared switch `name`: flipped in code since the fleet last left it, the
    /// flip is an act made here now, to be written (kept if the link is down). Whether it
    /// was.
    fn notice(&mut self, name: &Arc<str>, link_up: bool) -> bool {
        let Some((name, switch)) = self.switch(name) else {
            return false;
        };
        let current = switch.is_killed();
        let register = self.registers.entry(name.clone()).or_default();
        if !register.flipped_in_code(current) {
            return false;
        }
        let act = self.act_here(current);
        let pending = Pending {
            by_command: false,
            kept: !link_up,
        };
        if let Some(register) = self.registers.get_mut(&name) {
            register.made(act, pending);
        }
        self.mirror_kept(&name);
        true
    }

    /// Tells the snapshot which act of switch `name` is kept, not yet written.
    fn mirror_kept(&self, name: &Arc<str>) {
        let kept = self
            .registers
            .get(name)
            .filter(|r| r.pending.is_some_and(|p| p.kept))
            .and_then(|r| r.act.clone());
        let mut registry = self.replica.registry();
        match kept {
            Some(act) => {
                registry.kept.insert(name.clone(), act);
            }
            None => {
                registry.kept.remove(name);
            }
        }
    }

    /// The act made here on switch `name`, if one is still to be written, is kept: the
    /// link failed under its write.
    fn keep(&mut self, name: &Arc<str>) {
        if let Some(pending) = self
            .registers
            .get_mut(name)
            .and_then(|r| r.pending.as_mut())
        {
            pending.kept = true;
        }
        self.mirror_kept(name);
    }

    /// An act on switch `name` was heard of (origin: the key or a message): the later of
    /// it and the act known wins, and the switch follows it.
    fn hear(&mut self, name: &Arc<str>, theirs: KillAct, origin: KillOrigin) -> Heard {
        self.stamper.seen(theirs.at_ms);
        let heard = self
            .registers
            .entry(name.clone())
            .or_default()
            .hear(theirs.clone());
        // Recorded before it is told: a listener that looks at the snapshot sees it.
        self.mirror_kept(name);
        match &heard {
            Heard::Later { overridden } => {
                self.apply_switch(name, theirs.killed, origin);
                if let Some(act) = overridden {
                    tracing::warn!(target: "tower_circuit_breaker::fleet", kill_switch = %name, killed = act.killed, by_replica = %theirs.replica, "an act made here lost to a later one");
                    self.replica.emit(FleetEvent::Overridden {
                        name: name.clone(),
                        act: act.clone(),
                        by: theirs,
                    });
                }
            }
            Heard::Same {
                written: Some(pending),
            } => self.written(name, theirs, *pending),
            Heard::Same { written: None } | Heard::Earlier => {}
        }
        heard
    }

    /// An act made here on switch `name` is in Redis now: told.
    fn written(&self, name: &Arc<str>, act: KillAct, pending: Pending) {
        if pending.kept {
            tracing::info!(target: "tower_circuit_breaker::fleet", kill_switch = %name, killed = act.killed, "an act kept while the link was down is written");
            self.replica.emit(FleetEvent::Written {
                name: name.clone(),
                act,
            });
        } else if !pending.by_command {
            self.replica.emit(FleetEvent::KillSwitch {
                name: name.clone(),
                killed: act.killed,
                origin: KillOrigin::Switch,
            });
        }
    }

    /// Brings switch `name` and its key in step: `read` (what the key held, if just
    /// read) against the act known here, the later winning; the act known here is
    /// written when it is the later, or the key holds none. A write that finds the key
    /// changed weighs what it found, and tries again while its act is still the later.
    async fn settle(
        &mut self,
        session: &mut Session,
        name: &Arc<str>,
        mut read: Option<(Stored, Believed)>,
    ) -> Result<(), Failed> {
        self.notice(name, true);
        for _ in 0..MAX_WRITES {
            if let Some((stored, believed)) = read.take() {
                let register = self.registers.entry(name.clone()).or_default();
                register.key = believed;
                let pending = register.pending.is_some();
                let known = register.act.is_some();
                match stored {
                    Stored::Unreadable => {
                        let key = self.replica.settings.keys.kill_key(name);
                        self.rejected(key.into(), Rejection::Malformed);
                        // Only an act made here replaces what cannot be read.
                        if !pending {
                            return Ok(());
                        }
                    }
                    // No act in the key undoes none: the act known is written back.
                    Stored::Absent if !known => return Ok(()),
                    Stored::Absent => {}
                    // By hand: made when first read, so later than any act known here.
                    Stored::Bare(killed) => {
                        let theirs = self.act_here(killed);
                        self.hear(name, theirs, KillOrigin::Key);
                    }
                    Stored::Act(theirs) => match self.hear(name, theirs, KillOrigin::Key) {
                        Heard::Later { .. } | Heard::Same { .. } => return Ok(()),
                        Heard::Earlier => {}
                    },
                }
            }
            let Some(act) = self.registers.get(name).and_then(|r| r.act.clone()) else {
                return Ok(());
            };
            let believed = self
                .registers
                .get(name)
                .map(|r| r.key.clone())
                .unwrap_or_default();
            let found = match self.write_act(session, name, &act, &believed).await {
                Ok(found) => found,
                Err(error) => {
                    self.keep(name);
                    return Err(error);
                }
            };
            match found {
                None => {
                    let value = encode(&KillRecord::new(&act));
                    let register = self.registers.entry(name.clone()).or_default();
                    register.key = Believed::string(value.as_bytes());
                    let pending = register.pending.take();
                    add(&self.replica.counters.kills_published, 1);
                    self.mirror_kept(name);
                    if let Some(pending) = pending {
                        self.written(name, act, pending);
                    }
                    return Ok(());
                }
                Some(held) => read = Some((self.stored(&held), held)),
            }
        }
        self.keep(name);
        Err("the kill key kept changing under the write".into())
    }

    /// What a key holds, from its description by the write script or the read.
    fn stored(&self, held: &Believed) -> Stored {
        let settings = &self.replica.settings;
        match held.as_arg().split_first() {
            Some((b'n', _)) => Stored::Absent,
            Some((b's', value)) => {
                KillRecord::decode(value, settings.max_message_bytes, clock::wall_now_ms())
            }
            _ => Stored::Unreadable,
        }
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

    /// Writes `act` in switch `name`'s key and publishes it, in one script, if the key
    /// holds what `believed` says: `None` when written, else what the key holds.
    async fn write_act(
        &mut self,
        session: &mut Session,
        name: &str,
        act: &KillAct,
        believed: &Believed,
    ) -> Result<Option<Believed>, Failed> {
        let settings = &self.replica.settings;
        let mut script = redis::cmd("EVAL");
        script
            .arg(WRITE_ACT)
            .arg(1)
            .arg(settings.keys.kill_key(name))
            .arg(believed.as_arg())
            .arg(encode(&KillRecord::new(act)))
            .arg(settings.keys.kill_channel())
            .arg(encode(&KillMessage::new(name, act)));
        let (written, held): (i64, Vec<u8>) =
            within(settings.timeout, script.query_async(&mut session.conn)).await?;
        Ok((written != 1).then_some(Believed(Some(held))))
    }

    /// Reads the keys of these kill switches, and brings each switch and its key in
    /// step ([`settle`](Self::settle)).
    async fn read_kill_keys(
        &mut self,
        session: &mut Session,
        names: Vec<Arc<str>>,
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
        let replies = within(
            settings.timeout,
            read.query_async::<Vec<Value>>(&mut session.conn),
        )
        .await?;
        let Some((values, types)) = replies.split_first() else {
            return Err("redis answered no kill keys".into());
        };
        let values: Vec<Option<Vec<u8>>> =
            from_redis_value_ref(values).map_err(|error| Failed::from(error.to_string()))?;
        let types: Vec<String> = types
            .iter()
            .map(|kind| from_redis_value_ref(kind).unwrap_or_default())
            .collect();
        for ((name, value), kind) in names.iter().zip(values).zip(types) {
            let held = match (value, kind.as_str()) {
                (None, "none") => Believed::absent(),
                (Some(value), _) => Believed::string(&value),
                (None, kind) => Believed(Some(format!("t{kind}").into_bytes())),
            };
            let stored = self.stored(&held);
            self.settle(session, name, Some((stored, held))).await?;
        }
        Ok(())
    }

    fn rejected(&self, channel: Arc<str>, why: Rejection) {
        self.replica.counters.rejected(why);
        tracing::warn!(target: "tower_circuit_breaker::fleet", %channel, %why, "fleet message refused");
        self.replica.emit(FleetEvent::Rejected { channel, why });
    }

    /// A shared kill switch by its name, with the name as registered, once taken in.
    fn switch(&self, name: &str) -> Option<(Arc<str>, KillSwitch)> {
        if !self.registers.get(name).is_some_and(Register::has_switch) {
            return None;
        }
        self.shared_switch(name)
    }

    /// A kill switch shared under `name`, taken in or not.
    fn shared_switch(&self, name: &str) -> Option<(Arc<str>, KillSwitch)> {
        let registry = self.replica.registry();
        let (name, switch) = registry.switches.get_key_value(name)?;
        Some((name.clone(), switch.clone()))
    }

    /// Switch `name`, found `found` when it was shared, is taken in: it follows the act
    /// known for its name (a person's kill made through this replica before it was
    /// shared, say), unless it was flipped in code since it was shared: that flip is
    /// the later act.
    fn take_in(&mut self, name: &str, found: bool) {
        let Some((name, switch)) = self.shared_switch(name) else {
            return;
        };
        let register = self.registers.entry(name.clone()).or_default();
        let origin = match register.pending {
            Some(pending) if pending.by_command => KillOrigin::Command,
            _ => KillOrigin::Key,
        };
        if let Some(killed) = register.adopt(found, switch.is_killed()) {
            self.apply_switch(&name, killed, origin);
        }
    }

    /// Sets shared switch `name` as the fleet says, if this replica shares one by that
    /// name and it is not so already, and tells of the flip.
    fn apply_switch(&mut self, name: &Arc<str>, killed: bool, origin: KillOrigin) {
        let Some((name, switch)) = self.switch(name) else {
            return;
        };
        if let Some(register) = self.registers.get_mut(&name) {
            register.left(killed);
        }
        if switch.is_killed() == killed {
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
            let decoded = KillMessage::decode(payload, limit).and_then(|kill| {
                let act = kill.act(clock::wall_now_ms())?;
                Ok((kill, act))
            });
            match decoded {
                Ok((kill, act)) => {
                    add(&self.replica.counters.kill_messages, 1);
                    self.on_kill(&kill, act);
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

    /// A kill message believed: its act (`None`: published by hand without a stamp, so
    /// made when heard) against the act known, for a switch shared or acted on here.
    fn on_kill(&mut self, kill: &KillMessage, act: Option<KillAct>) {
        let name: Arc<str> = match self.switch(&kill.name) {
            Some((name, _)) => name,
            None => match self.registers.get_key_value(kill.name.as_str()) {
                Some((name, _)) => name.clone(),
                None => return,
            },
        };
        // A flip made in code, not yet told to this task, is an act before this one (it
        // is written at this switch's next settle).
        self.notice(&name, true);
        let (theirs, key) = match act {
            Some(act) => {
                let key = Believed::string(encode(&KillRecord::new(&act)).as_bytes());
                (act, key)
            }
            None => (self.act_here(kill.killed), Believed::default()),
        };
        if let Heard::Later { .. } = self.hear(&name, theirs, KillOrigin::Message) {
            if let Some(register) = self.registers.get_mut(&name) {
                register.key = key;
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
