//! The task that keeps one server running: it starts the server through its breaker,
//! watches the process, and when the server dies (or stops answering, or cannot start)
//! holds the breaker open for the restart backoff, so that the restart is the breaker's
//! probe. It gives up at the crash-loop limit.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::{broadcast, oneshot, watch};
use tokio::time::Instant;
use tower::{Service, ServiceExt};

use crate::error::Rejected;
use crate::fallback::NoFallback;
use crate::later::later;
use crate::{Advice, Cause, CircuitBreaker, NextProbe, State, Transition};

use super::classify::ServerStarts;
use super::connection::{self, Connection, Loss, Notice, Process, Started};
use super::error::StartError;
use super::exit::Exit;
use super::relist::Relist;
use super::restart::{Next, Restarts};
use super::shared::Shared;
use super::status::{Down, ServerState};

/// What an operator asks of a server.
#[derive(Debug)]
pub(crate) enum Command {
    /// Start afresh (stopping a running process first).
    Restart,
    /// Stop for good; the sender hears when it is done.
    Stop(oneshot::Sender<()>),
}

/// A request to start the server: the breaker decides whether it goes.
#[derive(Clone)]
pub(crate) struct StartRequest {
    shared: Arc<Shared>,
    generation: u64,
}

/// The service the server's breaker wraps for starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Starter;

impl Service<StartRequest> for Starter {
    type Response = Started;
    type Error = StartError;
    type Future = Pin<Box<dyn Future<Output = Result<Started, StartError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), StartError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: StartRequest) -> Self::Future {
        Box::pin(async move {
            let shared = request.shared;
            connection::start(&shared.settings, request.generation, shared.notices.clone()).await
        })
    }
}

/// Why a serving process (or session) ended, or what the supervisor was asked meanwhile.
enum Ended {
    Exited(Exit),
    /// Its connection ended (or, for a remote server, broke under a call, or the server
    /// forgot its session): why.
    Lost(Down),
    Unresponsive(String),
    Restart,
    Stop(oneshot::Sender<()>),
    Gone,
}

/// A server's connection ended: a process, most often because it is dying. If it exits
/// within `grace`, that is what happened; otherwise it lives on without a connection,
/// and is stopped. A remote server's session is over.
async fn output_ended(process: &mut Option<Process>, grace: Duration, why: Down) -> Ended {
    match process {
        Some(process) => match process.exits_within(grace).await {
            Some(exit) => Ended::Exited(exit),
            None => Ended::Lost(why),
        },
        None => Ended::Lost(why),
    }
}

/// Resolves at `at`; never, for `None`.
async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// How a stdio server's process ended, once it has; never, for a remote server.
async fn exited(process: &mut Option<Process>) -> Exit {
    match process {
        Some(process) => process.exited().await,
        None => std::future::pending().await,
    }
}

/// What waiting for the breaker's probe came to.
enum Wake {
    Go,
    /// A person reset the breaker: a fresh start, its restarts so far forgotten.
    Reset,
    Restart,
    Stop(oneshot::Sender<()>),
    Gone,
}

pub(crate) struct Supervisor {
    shared: Arc<Shared>,
    starts: CircuitBreaker<Starter, NoFallback, ServerStarts>,
    notices: UnboundedReceiver<Notice>,
    commands: UnboundedReceiver<Command>,
    transitions: broadcast::Receiver<Transition>,
    kill: watch::Receiver<bool>,
    restarts: Restarts,
    /// Processes that started and served.
    generation: u64,
    /// When a person's opening of the breaker for a time ends (its status then says the
    /// server serves again: the next call is the breaker's probe).
    forced_until: Option<Instant>,
    /// The restart backoff was over before the breaker could be held open for it (a wait
    /// of nanoseconds): the breaker is still closed, and a restart is due at once. Its
    /// closed breaker is then no person's reset. Cleared by any change of the breaker
    /// (after it, a closed breaker is a person's doing).
    wait_over: bool,
}

impl Supervisor {
    pub(crate) fn new(
        shared: Arc<Shared>,
        starts: CircuitBreaker<Starter, NoFallback, ServerStarts>,
        notices: UnboundedReceiver<Notice>,
        commands: UnboundedReceiver<Command>,
    ) -> Self {
        let transitions = shared.breaker.subscribe();
        let kill = shared.breaker.kill_switch().watch();
        let restarts = Restarts::new(shared.settings.restart);
        Supervisor {
            shared,
            starts,
            notices,
            commands,
            transitions,
            kill,
            restarts,
            generation: 0,
            forced_until: None,
            wait_over: false,
        }
    }

    pub(crate) async fn run(mut self) {
        self.sync_killed();
        self.sync_forced();
        // The first start, and one an operator asks for, are not restarts: they go as
        // calls of the (closed) breaker. Every other start is its probe.
        let mut fresh = true;
        loop {
            if !fresh {
                match self.await_probe().await {
                    Wake::Go => {}
                    Wake::Reset => fresh = true,
                    Wake::Restart => {
                        self.operator_restart();
                        fresh = true;
                    }
                    Wake::Stop(done) => return self.stopped(Some(done)),
                    Wake::Gone => return self.stopped(None),
                }
            }
            let restart = !fresh;
            fresh = false;
            let ended = match self.start(restart).await {
                Err(Wake::Stop(done)) => return self.stopped(Some(done)),
                // An operator's restart during a restart: the restart is dropped (its
                // process killed), and the operator's made as asked.
                Err(Wake::Restart) => {
                    self.operator_restart();
                    fresh = true;
                    continue;
                }
                Err(_) => return self.stopped(None),
                Ok(None) => continue,
                Ok(Some(started)) => self.serve(started).await,
            };
            match ended {
                (Ended::Restart, _) => {
                    self.operator_restart();
                    fresh = true;
                }
                (Ended::Stop(done), _) => return self.stopped(Some(done)),
                (Ended::Gone, _) => return self.stopped(None),
                (Ended::Exited(exit), ran_for) => self.down(Down::Exited(exit), Some(ran_for)),
                (Ended::Lost(why), ran_for) => self.down(why, Some(ran_for)),
                (Ended::Unresponsive(last_failure), ran_for) => {
                    self.down(Down::Unresponsive { last_failure }, Some(ran_for))
                }
            }
        }
    }

    /// One start through the breaker. `Ok(Some)`: it serves; `Ok(None)`: it failed or
    /// the breaker skipped it (the state says so); `Err`: a command came meanwhile (the
    /// start is dropped).
    async fn start(&mut self, restart: bool) -> Result<Option<Started>, Wake> {
        let before = self.shared.status().state;
        self.shared.update(|status, _| {
            status.state = if status.starts == 0 {
                ServerState::Starting
            } else {
                ServerState::Restarting
            };
            status.starts += 1;
            status.next_start = None;
            status.restart_wait = None;
        });
        self.wait_over = false;
        if restart {
            self.restarts.attempted(Instant::now());
        } else {
            self.restarts.uncounted();
        }
        let request = StartRequest {
            shared: self.shared.clone(),
            generation: self.generation + 1,
        };
        let attempt = self.starts.clone().oneshot(request);
        tokio::pin!(attempt);
        let result = loop {
            tokio::select! {
                result = &mut attempt => break result,
                // A person forcing the breaker open (or resetting it) meanwhile: shown.
                _ = self.transitions.recv() => self.sync_forced(),
                _ = self.kill.changed() => self.sync_killed(),
                command = self.commands.recv() => match command {
                    // Asked to restart during a fresh start (the first, or an operator's):
                    // this start is that restart, with the breaker reset and the restart
                    // record cleared as it asks.
                    Some(Command::Restart) if !restart => self.operator_restart(),
                    // During a restart (the breaker's probe, counted): not what was asked.
                    // It is dropped (its process killed) and the operator's made.
                    Some(Command::Restart) => return Err(Wake::Restart),
                    // Dropping the start kills the process it spawned.
                    Some(Command::Stop(done)) => return Err(Wake::Stop(done)),
                    None => return Err(Wake::Gone),
                },
            }
        };
        match result {
            Ok(answer) => Ok(Some(answer.into_inner())),
            Err(error) => match error.downcast::<StartError>() {
                Ok(error) => {
                    self.down(Down::StartFailed(*error), None);
                    Ok(None)
                }
                Err(error) => {
                    // Skipped between the look and the start (killed, forced open): the
                    // server is as it was, and the wait goes on.
                    debug_assert!(error.is::<Rejected>(), "{error}");
                    self.shared.update(|status, _| status.state = before);
                    Ok(None)
                }
            },
        }
    }

    /// Serves until the process ends or a command comes; returns why, and how long it
    /// served.
    async fn serve(&mut self, started: Started) -> (Ended, Duration) {
        let Started {
            mut process,
            mut session,
            tools,
        } = started;
        self.generation += 1;
        let generation = self.generation;
        let since = Instant::now();
        let pid = process.as_ref().and_then(Process::pid);
        let connection = Arc::new(Connection {
            generation,
            peer: session.peer().clone(),
            tools: tools.clone(),
        });
        let forced_open = self.forced_open();
        self.shared.update(|status, current| {
            status.state = ServerState::Running;
            status.forced_open = forced_open;
            status.pid = pid;
            status.generation = generation;
            status.tools = tools;
            *current = Some(connection);
        });
        let grace = self.shared.settings.stop_timeout;
        let mut relist = Relist::new(self.shared.clone(), generation);
        let ended = loop {
            tokio::select! {
                exit = exited(&mut process) => break Ended::Exited(exit),
                // Its output ended with no call under way: out of service at once.
                () = session.ended() => {
                    self.shared.connection_lost(generation, Loss::Connection);
                    break output_ended(&mut process, grace, Down::ConnectionLost).await;
                }
                notice = self.notices.recv() => match notice {
                    Some(Notice::ToolsChanged(g)) if g == generation => relist.changed(),
                    Some(Notice::Closed(g, why)) if g == generation => {
                        break output_ended(&mut process, grace, why.into()).await;
                    }
                    _ => {}
                },
                // Beside the rest: a read the server never answers holds up nothing.
                () = relist.finished() => relist.done(),
                () = until(self.forced_until) => self.sync_forced(),
                transition = self.transitions.recv() => {
                    // Forced open by a person, or reset: no call goes while it is, and
                    // its status says so (a transition missed, lagging, is read here too).
                    self.sync_forced();
                    if let Ok(t) = transition {
                        if t.to == State::Open && t.cause == Cause::Tripped {
                            let last = self.shared.breaker.snapshot().last_failure
                                .map_or_else(|| "failed calls".to_string(), |f| f.message.to_string());
                            break Ended::Unresponsive(last);
                        }
                    }
                }
                _ = self.kill.changed() => self.sync_killed(),
                command = self.commands.recv() => break match command {
                    Some(Command::Restart) => Ended::Restart,
                    Some(Command::Stop(done)) => Ended::Stop(done),
                    None => Ended::Gone,
                },
            }
        };
        // A read of its tool list under way ends with it.
        drop(relist);
        // Out of service from now: no call goes to this process any more, and while it
        // is being stopped its status says what comes next, never that it serves. (A
        // process that exited needs no stopping: `down` says so at once.)
        let next = match &ended {
            Ended::Exited(_) => None,
            Ended::Lost(why) => Some(ServerState::Down(why.clone())),
            Ended::Unresponsive(last_failure) => Some(ServerState::Down(Down::Unresponsive {
                last_failure: last_failure.clone(),
            })),
            Ended::Restart => Some(ServerState::Restarting),
            Ended::Stop(_) | Ended::Gone => Some(ServerState::Stopped),
        };
        if let Some(next) = next {
            self.shared.update(|status, current| {
                if current.as_ref().is_some_and(|c| c.generation == generation) {
                    *current = None;
                }
                status.pid = None;
                status.state = next;
            });
        }
        let ran_for = since.elapsed();
        let ended = match ended {
            Ended::Exited(exit) => {
                // It exited; what it launched (through `npx`, `sh -c`) may not have.
                connection::kill_group(pid);
                Ended::Exited(exit)
            }
            other => {
                // A process whose output ended has had its stop timeout already, waiting
                // for it to exit: it is killed at once.
                let grace = if matches!(other, Ended::Lost(_)) && process.is_some() {
                    Duration::ZERO
                } else {
                    grace
                };
                match connection::stop(process, session, grace).await {
                    Some(exit) => {
                        tracing::debug!(target: "tower_circuit_breaker::mcp", server = %self.shared.name(), "stopped: it {exit}");
                    }
                    None => {
                        tracing::debug!(target: "tower_circuit_breaker::mcp", server = %self.shared.name(), "its session is closed");
                    }
                }
                other
            }
        };
        (ended, ran_for)
    }

    /// Waits until the breaker lets the restart through as its probe, or a command
    /// comes.
    async fn await_probe(&mut self) -> Wake {
        loop {
            let wait = match self.shared.breaker.peek() {
                Advice::Probe => return Wake::Go,
                // Closed because the backoff ended before it could be held: the restart
                // goes now (counted), and nobody asked to forget the restarts.
                Advice::Call if self.wait_over => {
                    self.wait_over = false;
                    return Wake::Go;
                }
                // Closed with the server down: a person reset the breaker, which asks for
                // a start, and forgets the restarts so far.
                Advice::Call => {
                    self.restarts.reset();
                    return Wake::Reset;
                }
                Advice::Skip(skip) => match skip.next_probe() {
                    NextProbe::After { at: Some(at), .. } => Some(at),
                    _ => None,
                },
            };
            let forced_open = self.forced_open();
            self.shared.update(|status, _| {
                status.next_start = wait;
                status.forced_open = forced_open;
            });
            let sleep = async {
                match wait {
                    Some(at) => tokio::time::sleep_until(Instant::from_std(at)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = sleep => {}
                // The breaker changed: a closed breaker from now on is a person's reset.
                _ = self.transitions.recv() => self.wait_over = false,
                _ = self.kill.changed() => self.sync_killed(),
                command = self.commands.recv() => return match command {
                    Some(Command::Restart) => Wake::Restart,
                    Some(Command::Stop(done)) => Wake::Stop(done),
                    None => Wake::Gone,
                },
            }
        }
    }

    /// The server went down: hold its breaker open for the restart backoff, or give up.
    fn down(&mut self, why: Down, ran_for: Option<Duration>) {
        let now = Instant::now();
        tracing::info!(target: "tower_circuit_breaker::mcp", server = %self.shared.name(), "down: it {why}");
        let next = match &why {
            Down::StartFailed(StartError::Unreachable { .. }) => self.restarts.unreachable(),
            _ => self.restarts.failed(now, ran_for),
        };
        match next {
            Next::RestartAfter(wait) => {
                let until = later(now.into_std(), wait);
                let held = self.shared.breaker.hold_open_until(until);
                // Transitions so far (the hold's own among them) are the supervisor's
                // doing or older: only one after this is news to `await_probe`.
                self.drain_transitions();
                // Not held and closed: the wait ended before the hold was made (a hold
                // for a time already past is not made), and the restart is due now. Not
                // held and open (forced by a person, or open longer on its own): the
                // breaker says when.
                self.wait_over = !held && self.shared.breaker.is_closed();
                let forced_open = self.forced_open();
                self.shared.update(|status, connection| {
                    *connection = None;
                    status.forced_open = forced_open;
                    status.state = ServerState::Down(why);
                    status.pid = None;
                    status.restart_wait = Some(wait);
                    status.next_start = Some(until);
                });
            }
            Next::GiveUp { restarts } => {
                // As an operator would: only a reset (or `McpServer::restart`) ends it.
                self.shared.breaker.force_open();
                let within = self.shared.settings.restart.window();
                tracing::warn!(target: "tower_circuit_breaker::mcp", server = %self.shared.name(), restarts, "crash loop: not restarted again until an operator restarts it");
                self.shared.update(|status, connection| {
                    *connection = None;
                    status.state = ServerState::GaveUp {
                        last: why,
                        restarts,
                        within,
                    };
                    status.forced_open = true;
                    status.pid = None;
                    status.restart_wait = None;
                    status.next_start = None;
                });
            }
        }
    }

    /// Drops the transitions not yet read.
    fn drain_transitions(&mut self) {
        use broadcast::error::TryRecvError;
        while let Ok(_) | Err(TryRecvError::Lagged(_)) = self.transitions.try_recv() {}
    }

    /// An operator asked for a fresh start: the breaker is reset, the restarts so far
    /// forgotten.
    fn operator_restart(&mut self) {
        self.restarts.reset();
        self.shared.breaker.reset();
    }

    /// Stopped for good: by [`McpServer::stop`](super::McpServer::stop) (`done` hears of
    /// it), or because its last handle is gone.
    fn stopped(&mut self, done: Option<oneshot::Sender<()>>) {
        self.shared.update(|status, connection| {
            *connection = None;
            status.state = ServerState::Stopped;
            status.pid = None;
            status.next_start = None;
            status.restart_wait = None;
        });
        if let Some(done) = done {
            let _ = done.send(());
        }
    }

    /// Whether its breaker is forced open and skips calls now: by a person (or by
    /// `down`, giving up). One opened for a time is no longer, once its time is up: the
    /// next call is its probe. Notes when that time is, to look again then.
    fn forced_open(&mut self) -> bool {
        self.forced_until = None;
        if self.shared.breaker.state() != State::ForcedOpen {
            return false;
        }
        match self.shared.breaker.peek() {
            Advice::Skip(skip) => {
                if let NextProbe::After { at: Some(at), .. } = skip.next_probe() {
                    self.forced_until = Some(Instant::from_std(at));
                }
                true
            }
            Advice::Call | Advice::Probe => false,
        }
    }

    /// Its status says whether its breaker is forced open, as it is now.
    fn sync_forced(&mut self) {
        let forced_open = self.forced_open();
        self.shared
            .update(|status, _| status.forced_open = forced_open);
    }

    fn sync_killed(&mut self) {
        let killed = *self.kill.borrow_and_update();
        self.shared.update(|status, _| status.killed = killed);
    }
}
