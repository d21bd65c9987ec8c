//! The layer against a small reference model, with a person's acts interleaved with the
//! calls: kills and revivals, resets, forced opens, holds for a time, mode switches, and
//! calls held in flight across all of them (hung probes), dropped or abandoned. Then the
//! same acts from many tasks at once on a multi-thread runtime, checked against what
//! must hold whatever the interleaving.
//!
//! The reference model (consecutive failures, a cooldown of `cooldown` calls, one probe,
//! a half-open dwell limit of `dwell` seconds; every act happens one second after the
//! last):
//!
//! ```text
//! a call at time t:
//!   half-open past its dwell limit: open again (probes under way written off)
//!   killed: skipped (an open breaker still counts the call towards its cooldown)
//!   disabled: made, nothing recorded
//!   closed: made | open: the cooldown-th call since opening is the probe (half-open)
//!   half-open: the probe if its slot is free | forced open: the probe once the hold ends
//!   anything else is skipped, or in observe-only made as a shadow call
//! an outcome: counted only in the epoch (state and mode) the call was made in
//!   closed: a success clears the failures, the threshold-th failure opens
//!   probe: a success closes, a failure opens again
//! a person: reset closes, force open / hold open replaces any hold, a mode change starts
//!   a new epoch; each writes off the probes under way
//! a hint holds a closed or open breaker open until a time (never a person's hold or a
//!   half-open; only ever longer), the probe then waits for the time and for its own
//!   cooldown; releasing it puts its own wait back (none, if the hint opened it);
//!   allowing a probe lets the next call probe
//! a failure asking to wait w s (a 429's Retry-After), at time t:
//!   on time: counted, and opens at once; the probe waits for the cooldown and until
//!   t + min(w, cap); t + w is reported when it is later than that
//!   late: counted as late; a call or probe admitted since a person's latest act (a
//!   reset, a forced open or hold, a probe allowed, a mode change) lengthens an open
//!   breaker's wait (its own under a hint too) to t + min(w, cap) when that is later,
//!   and the time reported to t + w when that is later; never anything else
//! ```

mod common;

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use common::reply::Reply;
use common::Rng;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tokio::sync::oneshot;
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
use tower_circuit_breaker::snapshot::Counts;
use tower_circuit_breaker::{
    Answer, Builder, Cooldown, Failure, Mode, NextProbe, Outcome, Reason, Source, State,
};

// ---------------------------------------------------------------------------------------
// The acts
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Succeed,
    Fail,
    /// Polled once, then dropped.
    Drop,
    /// Reserved, then the service dropped without a call.
    Abandon,
    /// Called and kept in flight until a later `Release`.
    Hold,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    Call(Fate),
    /// The held call (by index, modulo their number) ends: `true` a success.
    Release(usize, bool),
    /// The held call ends with a 429 asking for this many seconds.
    ReleaseLimited(usize, u64),
    Kill,
    Revive,
    Reset,
    ForceOpen,
    /// Hold the breaker open for this many seconds.
    OpenFor(u64),
    SetMode(Mode),
    /// A hint from outside: hold open for this many seconds.
    Hint(u64),
    /// The hint withdrawn.
    ReleaseHint,
    AllowProbe,
}

fn act() -> impl Strategy<Value = Act> {
    let fate = prop_oneof![
        6 => Just(Fate::Succeed),
        5 => Just(Fate::Fail),
        1 => Just(Fate::Drop),
        1 => Just(Fate::Abandon),
        2 => Just(Fate::Hold),
    ];
    prop_oneof![
        20 => fate.prop_map(Act::Call),
        3 => (any::<usize>(), any::<bool>()).prop_map(|(i, ok)| Act::Release(i, ok)),
        2 => (any::<usize>(), 0u64..12).prop_map(|(i, wait)| Act::ReleaseLimited(i, wait)),
        1 => Just(Act::Kill),
        2 => Just(Act::Revive),
        1 => Just(Act::Reset),
        1 => Just(Act::ForceOpen),
        1 => (0u64..8).prop_map(Act::OpenFor),
        1 => prop_oneof![Just(Mode::Enabled), Just(Mode::ObserveOnly), Just(Mode::Disabled)]
            .prop_map(Act::SetMode),
        2 => (0u64..8).prop_map(Act::Hint),
        1 => Just(Act::ReleaseHint),
        1 => Just(Act::AllowProbe),
    ]
}

#[derive(Clone)]
struct Case {
    threshold: u32,
    cooldown: u64,
    dwell: u64,
    /// The breaker's `max_retry_after`, in seconds.
    cap: u64,
    acts: Vec<Act>,
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "threshold {} cooldown {} calls dwell {} s retry-after cap {} s:",
            self.threshold, self.cooldown, self.dwell, self.cap
        )?;
        for (i, act) in self.acts.iter().enumerate() {
            writeln!(f, "  t={} {act:?}", i + 1)?;
        }
        Ok(())
    }
}

fn cases() -> impl Strategy<Value = Case> {
    (
        1u32..=4,
        1u64..=5,
        3u64..=20,
        1u64..=8,
        prop::collection::vec(act(), 1..80),
    )
        .prop_map(|(threshold, cooldown, dwell, cap, acts)| Case {
            threshold,
            cooldown,
            dwell,
            cap,
            acts,
        })
}

// ---------------------------------------------------------------------------------------
// The reference model
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Closed,
    /// Open: the probe goes once `since` (calls counted since it opened, when the wait
    /// counts `calls`) reaches the cooldown and the clock reaches `until`.
    Open {
        since: u64,
        calls: bool,
        until: Option<u64>,
        /// A hint holds it: its own wait underneath (whether it counts calls, and its
        /// time).
        hinted: Option<(bool, Option<u64>)>,
        /// The latest end of a wait a failure asked for (uncut by the cap).
        asked: Option<u64>,
    },
    HalfOpen {
        entered: u64,
        running: u32,
    },
    Forced {
        until: Option<u64>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Call,
    Probe,
    Shadow,
    Pass,
}

/// What the caller of one call sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Made {
        source: Source,
        state: State,
    },
    Skipped {
        reason: Reason,
        state: State,
        next_probe: NextProbe,
    },
    /// Still pending (dropped, or held).
    Pending,
    /// An act on the handle that says whether it applied.
    Applied(bool),
    /// Reserved and given up.
    Nothing,
}

#[derive(Debug, Clone)]
struct Model {
    threshold: u32,
    cooldown: u64,
    dwell: u64,
    cap: u64,
    phase: Phase,
    fails: u32,
    generation: u64,
    /// The first generation whose calls were admitted after a person's latest act.
    acted: u64,
    mode: Mode,
    killed: bool,
    /// Calls held in flight: (generation, kind).
    held: Vec<(u64, Kind)>,
    counts: Counts,
}

impl Model {
    fn new(case: &Case) -> Self {
        Model {
            threshold: case.threshold,
            cooldown: case.cooldown,
            dwell: case.dwell,
            cap: case.cap,
            phase: Phase::Closed,
            fails: 0,
            generation: 0,
            acted: 0,
            mode: Mode::Enabled,
            killed: false,
            held: Vec::new(),
            counts: Counts::default(),
        }
    }

    fn state(&self) -> State {
        match self.phase {
            Phase::Closed => State::Closed,
            Phase::Open { .. } => State::Open,
            Phase::HalfOpen { .. } => State::HalfOpen,
            Phase::Forced { .. } => State::ForcedOpen,
        }
    }

    fn probes_in_flight(&self) -> u32 {
        match self.phase {
            Phase::HalfOpen { running, .. } => running,
            _ => 0,
        }
    }

    /// A change of state: a new epoch, and the probes under way written off.
    fn enter(&mut self, phase: Phase) {
        self.phase = phase;
        self.generation += 1;
    }

    fn open(&mut self) {
        self.open_for(None);
    }

    /// Opens for the cooldown, and for `wait` = (t, w): a failure at `t` asked for `w`
    /// seconds.
    fn open_for(&mut self, wait: Option<(u64, u64)>) {
        self.enter(Phase::Open {
            since: 0,
            calls: true,
            until: wait.map(|(t, w)| t + w.min(self.cap)),
            hinted: None,
            asked: wait.map(|(t, w)| t + w),
        });
    }

    /// A person acted; `transitioned`: a new generation began.
    fn acted(&mut self, transitioned: bool) {
        self.acted = self.generation + u64::from(!transitioned);
    }

    /// What the breaker reports the service asked for, beyond its own wait.
    fn requested_until(&self) -> Option<u64> {
        match self.phase {
            Phase::Open {
                until,
                asked: Some(asked),
                ..
            } if until.is_none_or(|until| until < asked) => Some(asked),
            _ => None,
        }
    }

    /// A look at the clock: a half-open past its dwell limit opens again.
    fn tick(&mut self, t: u64) {
        if let Phase::HalfOpen { entered, .. } = self.phase {
            if t >= entered + self.dwell {
                self.open();
            }
        }
    }

    fn count_skip(&mut self, reason: Reason) {
        match reason {
            Reason::Open => self.counts.skipped_open += 1,
            Reason::HalfOpenFull => self.counts.skipped_half_open_full += 1,
            Reason::Killed => self.counts.skipped_killed += 1,
            _ => self.counts.skipped_forced_open += 1,
        }
    }

    /// Decides a call at time `t`: the kind of call made, or the skip.
    fn decide(&mut self, t: u64) -> Result<Kind, Seen> {
        self.tick(t);
        let disabled = self.mode == Mode::Disabled;
        if self.killed {
            if let (
                Phase::Open {
                    since, calls: true, ..
                },
                false,
            ) = (&mut self.phase, disabled)
            {
                *since += 1;
            }
            if !disabled {
                self.count_skip(Reason::Killed);
            }
            return Err(Seen::Skipped {
                reason: Reason::Killed,
                state: self.state(),
                next_probe: NextProbe::Manual,
            });
        }
        if disabled {
            return Ok(Kind::Pass);
        }
        let state = self.state();
        let skip = match &mut self.phase {
            Phase::Closed => return Ok(Kind::Call),
            Phase::Open {
                since,
                calls,
                until,
                ..
            } => {
                let mut calls_left = 0;
                if *calls {
                    *since += 1;
                    calls_left = self.cooldown.saturating_sub(*since);
                }
                let time_left = until.filter(|&until| t < until);
                if calls_left == 0 && time_left.is_none() {
                    self.enter(Phase::HalfOpen {
                        entered: t,
                        running: 1,
                    });
                    return Ok(Kind::Probe);
                }
                let next = NextProbe::After {
                    calls: calls_left.max(1),
                    at: time_left.map(at),
                };
                (Reason::Open, next)
            }
            Phase::HalfOpen { running, .. } if *running == 0 => {
                *running += 1;
                return Ok(Kind::Probe);
            }
            Phase::HalfOpen { .. } => (Reason::HalfOpenFull, NextProbe::InFlight),
            Phase::Forced { until: Some(until) } if t >= *until => {
                self.enter(Phase::HalfOpen {
                    entered: t,
                    running: 1,
                });
                return Ok(Kind::Probe);
            }
            Phase::Forced { until } => {
                let next = match until {
                    None => NextProbe::Manual,
                    Some(until) => NextProbe::After {
                        calls: 1,
                        at: Some(at(*until)),
                    },
                };
                (Reason::ForcedOpen, next)
            }
        };
        if self.mode == Mode::ObserveOnly {
            return Ok(Kind::Shadow);
        }
        self.count_skip(skip.0);
        Err(Seen::Skipped {
            reason: skip.0,
            state,
            next_probe: skip.1,
        })
    }

    /// The reason an observe-only call was shadowed, decided as in [`Model::decide`].
    fn shadowed_reason(state: State) -> Reason {
        match state {
            State::HalfOpen => Reason::HalfOpenFull,
            State::ForcedOpen => Reason::ForcedOpen,
            _ => Reason::Open,
        }
    }

    /// A probe's slot is free again (its call ended without counting).
    fn free(&mut self, generation: u64, kind: Kind) {
        if kind == Kind::Probe && generation == self.generation {
            if let Phase::HalfOpen { running, .. } = &mut self.phase {
                *running -= 1;
            }
        }
    }

    fn ended(&mut self, kind: Kind) {
        match kind {
            Kind::Probe => self.counts.probes += 1,
            Kind::Shadow => self.counts.would_have_skipped += 1,
            Kind::Call | Kind::Pass => {}
        }
    }

    /// A call made in `generation` as `kind` ends with `ok`.
    fn record(&mut self, generation: u64, kind: Kind, ok: bool) {
        self.record_at(generation, kind, ok, None);
    }

    /// A call made in `generation` as `kind` ends with `ok`; a failure may ask for a
    /// wait, `(t, w)`: `w` seconds from `t`.
    fn record_at(&mut self, generation: u64, kind: Kind, ok: bool, wait: Option<(u64, u64)>) {
        if kind == Kind::Pass {
            return;
        }
        self.ended(kind);
        if generation != self.generation {
            self.counts.late += 1;
            if let Some((t, w)) = wait.filter(|_| kind != Kind::Shadow && generation >= self.acted)
            {
                let (cut, whole) = (t + w.min(self.cap), t + w);
                if let Phase::Open {
                    until,
                    hinted,
                    asked,
                    ..
                } = &mut self.phase
                {
                    if *until < Some(cut) {
                        *until = Some(cut);
                    }
                    if let Some((_, own)) = hinted {
                        if *own < Some(cut) {
                            *own = Some(cut);
                        }
                    }
                    if *asked < Some(whole) {
                        *asked = Some(whole);
                    }
                }
            }
            return;
        }
        if ok {
            self.counts.successes += 1;
        } else {
            self.counts.failures += 1;
        }
        match kind {
            Kind::Shadow | Kind::Pass => {}
            Kind::Call => {
                if ok {
                    self.fails = 0;
                } else {
                    self.fails += 1;
                    if wait.is_some() || self.fails >= self.threshold {
                        self.open_for(wait);
                    }
                }
            }
            Kind::Probe => {
                self.free(generation, kind);
                if ok {
                    self.fails = 0;
                    self.enter(Phase::Closed);
                } else {
                    self.fails += 1;
                    self.open_for(wait);
                }
            }
        }
    }

    fn cancel(&mut self, generation: u64, kind: Kind) {
        if kind == Kind::Pass {
            return;
        }
        self.ended(kind);
        self.counts.cancelled += 1;
        self.free(generation, kind);
    }

    fn abandon(&mut self, generation: u64, kind: Kind) {
        if kind == Kind::Pass {
            return;
        }
        self.counts.abandoned += 1;
        self.free(generation, kind);
    }

    /// What the caller of a call made as `kind` sees.
    fn made(&self, kind: Kind, found: State) -> Seen {
        let source = match kind {
            Kind::Probe => Source::Probe,
            Kind::Shadow => Source::Shadowed(Self::shadowed_reason(found)),
            Kind::Call | Kind::Pass => Source::Service,
        };
        Seen::Made {
            source,
            state: found,
        }
    }

    fn act(&mut self, act: Act, t: u64) -> Option<Seen> {
        match act {
            Act::Call(fate) => {
                let found = self.state_at(t);
                let kind = match self.decide(t) {
                    Ok(kind) => kind,
                    // A skip is counted when decided; a reservation given up shows nothing.
                    Err(_) if fate == Fate::Abandon => return Some(Seen::Nothing),
                    Err(skip) => return Some(skip),
                };
                let found = if kind == Kind::Probe {
                    State::HalfOpen
                } else {
                    found
                };
                let generation = self.generation;
                Some(match fate {
                    Fate::Succeed | Fate::Fail => {
                        self.record(generation, kind, fate == Fate::Succeed);
                        self.made(kind, found)
                    }
                    Fate::Drop => {
                        self.cancel(generation, kind);
                        Seen::Pending
                    }
                    Fate::Abandon => {
                        self.abandon(generation, kind);
                        Seen::Nothing
                    }
                    Fate::Hold => {
                        self.held.push((generation, kind));
                        Seen::Pending
                    }
                })
            }
            Act::Release(i, ok) => {
                if !self.held.is_empty() {
                    let (generation, kind) = self.held.remove(i % self.held.len());
                    self.tick(t);
                    self.record(generation, kind, ok);
                }
                None
            }
            Act::ReleaseLimited(i, wait) => {
                if !self.held.is_empty() {
                    let (generation, kind) = self.held.remove(i % self.held.len());
                    self.tick(t);
                    self.record_at(generation, kind, false, Some((t, wait)));
                }
                None
            }
            Act::Kill => {
                self.killed = true;
                None
            }
            Act::Revive => {
                self.killed = false;
                None
            }
            Act::Reset => {
                self.fails = 0;
                let transitioned = self.phase != Phase::Closed;
                if transitioned {
                    self.enter(Phase::Closed);
                }
                self.acted(transitioned);
                None
            }
            Act::ForceOpen => {
                self.hold(t, None);
                None
            }
            Act::OpenFor(secs) => {
                self.hold(t, Some(t + secs));
                None
            }
            Act::SetMode(mode) => {
                if mode != self.mode {
                    self.mode = mode;
                    self.generation += 1;
                    self.acted(true);
                    if let Phase::HalfOpen { running, .. } = &mut self.phase {
                        *running = 0;
                    }
                }
                None
            }
            Act::Hint(secs) => Some(Seen::Applied(self.hint(t, t + secs))),
            Act::ReleaseHint => {
                self.tick(t);
                Some(Seen::Applied(match &mut self.phase {
                    Phase::Open {
                        calls,
                        until,
                        hinted: hinted @ Some(_),
                        ..
                    } => {
                        (*calls, *until) = hinted.take().expect("a hint holds it");
                        true
                    }
                    _ => false,
                }))
            }
            Act::AllowProbe => {
                self.tick(t);
                let applied = match &mut self.phase {
                    Phase::Open {
                        calls,
                        until,
                        hinted,
                        ..
                    } => {
                        (*calls, *until, *hinted) = (false, None, None);
                        true
                    }
                    _ => false,
                };
                if applied {
                    self.acted(false);
                }
                Some(Seen::Applied(applied))
            }
        }
    }

    /// A hint to hold the breaker open until `until`: whether it applied.
    fn hint(&mut self, t: u64, to: u64) -> bool {
        self.tick(t);
        match &mut self.phase {
            Phase::Closed if to <= t => false,
            Phase::Closed => {
                self.enter(Phase::Open {
                    since: 0,
                    calls: false,
                    until: Some(to),
                    hinted: Some((false, None)),
                    asked: None,
                });
                true
            }
            Phase::Open { until, .. } if until.is_some_and(|until| until >= to) => false,
            Phase::Open {
                calls,
                until,
                hinted,
                ..
            } => {
                hinted.get_or_insert((*calls, *until));
                *until = Some(to);
                true
            }
            Phase::HalfOpen { .. } | Phase::Forced { .. } => false,
        }
    }

    /// The running totals, with the sums a breaker reports.
    fn totals(&self) -> Counts {
        let mut c = self.counts;
        c.made = c.successes + c.failures + c.ignored + c.cancelled + c.late;
        c.arrived = c.made + c.skipped() + c.abandoned;
        c
    }

    /// The state a call at `t` finds, before it is decided (the dwell limit applied).
    fn state_at(&self, t: u64) -> State {
        let mut look = self.clone();
        look.tick(t);
        look.state()
    }

    fn hold(&mut self, t: u64, until: Option<u64>) {
        self.tick(t);
        match &mut self.phase {
            Phase::Forced { until: held } => {
                *held = until;
                self.acted(false);
            }
            _ => {
                self.enter(Phase::Forced { until });
                self.acted(true);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The layer
// ---------------------------------------------------------------------------------------

/// The test's clock origin: every act at `t` seconds happens at `at(t)`.
static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn at(t: u64) -> Instant {
    *ORIGIN.get().expect("set by the run") + Duration::from_secs(t)
}

/// How a call answers: at once, when the test says, or never.
enum Plan {
    Now(bool),
    Later(oneshot::Receiver<Reply>),
    Never,
}

struct Req {
    plan: Plan,
}

type CallFuture = Pin<Box<dyn Future<Output = Result<Answer<Reply>, BoxError>> + Send>>;

fn classify(result: &Result<Reply, Infallible>) -> Outcome {
    match result {
        Ok(Reply::Ok) => Outcome::Success,
        Ok(Reply::Limited(wait)) => Outcome::Failure(
            Failure::new("429 Too Many Requests").retry_after(Duration::from_secs(*wait)),
        ),
        Ok(_) => Outcome::failure_with("unavailable"),
        Err(never) => match *never {},
    }
}

fn seen(result: Result<Answer<Reply>, BoxError>) -> Seen {
    let answer = result.expect("classified replies and a fallback: always an answer");
    match answer.source() {
        Source::Fallback(reason) => Seen::Skipped {
            reason,
            state: answer.state(),
            next_probe: answer.next_probe(),
        },
        source => Seen::Made {
            source,
            state: answer.state(),
        },
    }
}

fn poll_once(future: &mut CallFuture) -> Poll<Result<Answer<Reply>, BoxError>> {
    let waker = futures::task::noop_waker();
    future.as_mut().poll(&mut Context::from_waker(&waker))
}

fn fail(message: impl fmt::Display) -> TestCaseError {
    TestCaseError::fail(message.to_string())
}

fn run(case: &Case) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(fail)?;
    runtime.block_on(async {
        ORIGIN.get_or_init(|| tokio::time::Instant::now().into_std());
        // Each run starts at its own origin on the paused clock.
        let origin = tokio::time::Instant::now().into_std();
        let shift = origin.saturating_duration_since(at(0));
        let layer = Builder::new()
            .name("model")
            .failure_threshold(case.threshold)
            .cooldown(Cooldown::Calls(case.cooldown))
            .max_half_open_dwell(Some(Duration::from_secs(case.dwell)))
            .max_retry_after(Duration::from_secs(case.cap))
            .build()
            .map_err(fail)?;
        let handle = layer.handle();
        let calls = Arc::new(AtomicU64::new(0));
        let inner = {
            let calls = calls.clone();
            service_fn(move |req: Req| {
                calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    let reply = match req.plan {
                        Plan::Now(true) => Reply::Ok,
                        Plan::Now(false) => Reply::Failed,
                        Plan::Later(answer) => answer.await.unwrap_or(Reply::Failed),
                        Plan::Never => std::future::pending().await,
                    };
                    Ok::<_, Infallible>(reply)
                }
            })
        };
        let mut svc = layer
            .with_classifier(classify)
            .with_fallback(service_fn(|_: Req| async {
                Ok::<_, Infallible>(Reply::Fallback)
            }))
            .layer(inner);
        let mut model = Model::new(case);
        let mut held: Vec<(oneshot::Sender<Reply>, CallFuture, bool)> = Vec::new();
        let mut made_passes = 0u64;
        for (i, &act) in case.acts.iter().enumerate() {
            let t = i as u64 + 1;
            tokio::time::advance(Duration::from_secs(1)).await;
            let before = calls.load(Ordering::SeqCst);
            let mut look = model.clone();
            let want = look.act(act, t);
            // The snapshot taken after each act looks at the clock too.
            look.tick(t);
            let passes = matches!(want, Some(Seen::Made { .. }) | Some(Seen::Pending))
                && model.mode == Mode::Disabled
                && !model.killed;
            let got = match act {
                Act::Call(fate) => Some(match fate {
                    Fate::Abandon => {
                        let mut spare = svc.clone();
                        spare.ready().await.map_err(fail)?;
                        drop(spare);
                        Seen::Nothing
                    }
                    Fate::Succeed | Fate::Fail => {
                        let req = Req {
                            plan: Plan::Now(fate == Fate::Succeed),
                        };
                        seen(svc.ready().await.map_err(fail)?.call(req).await)
                    }
                    Fate::Drop | Fate::Hold => {
                        let (tx, rx) = oneshot::channel();
                        let plan = if fate == Fate::Drop {
                            Plan::Never
                        } else {
                            Plan::Later(rx)
                        };
                        let mut future: CallFuture =
                            Box::pin(svc.ready().await.map_err(fail)?.call(Req { plan }));
                        match poll_once(&mut future) {
                            Poll::Ready(result) => seen(result),
                            Poll::Pending if fate == Fate::Hold => {
                                held.push((tx, future, passes));
                                Seen::Pending
                            }
                            Poll::Pending => Seen::Pending,
                        }
                    }
                }),
                Act::Release(i, _) | Act::ReleaseLimited(i, _) => {
                    if !held.is_empty() {
                        let (tx, mut future, _) = held.remove(i % held.len());
                        let _ = tx.send(match act {
                            Act::Release(_, true) => Reply::Ok,
                            Act::ReleaseLimited(_, wait) => Reply::Limited(wait),
                            _ => Reply::Failed,
                        });
                        loop {
                            tokio::task::yield_now().await;
                            if let Poll::Ready(result) = poll_once(&mut future) {
                                let _ = seen(result);
                                break;
                            }
                        }
                    }
                    None
                }
                Act::Kill => {
                    handle.kill_switch().kill();
                    None
                }
                Act::Revive => {
                    handle.kill_switch().revive();
                    None
                }
                Act::Reset => {
                    handle.reset();
                    None
                }
                Act::ForceOpen => {
                    handle.force_open();
                    None
                }
                Act::OpenFor(secs) => {
                    handle.open_for(Duration::from_secs(secs));
                    None
                }
                Act::SetMode(mode) => {
                    handle.set_mode(mode);
                    None
                }
                Act::Hint(secs) => {
                    let until = tokio::time::Instant::now().into_std() + Duration::from_secs(secs);
                    Some(Seen::Applied(handle.hold_open_until(until)))
                }
                Act::ReleaseHint => Some(Seen::Applied(handle.release_hold())),
                Act::AllowProbe => Some(Seen::Applied(handle.allow_probe())),
            };
            model = look;
            // A hold's end time is on this run's clock: shift the model's.
            let got = got.map(|seen| match seen {
                Seen::Skipped {
                    reason,
                    state,
                    next_probe:
                        NextProbe::After {
                            calls,
                            at: Some(at),
                        },
                } => Seen::Skipped {
                    reason,
                    state,
                    next_probe: NextProbe::After {
                        calls,
                        at: Some(at - shift),
                    },
                },
                other => other,
            });
            prop_assert_eq!(got, want, "t={} {:?}", t, act);
            let made_now = calls.load(Ordering::SeqCst) - before;
            let want_made = u64::from(
                matches!(want, Some(Seen::Made { .. }) | Some(Seen::Pending))
                    && matches!(act, Act::Call(_)),
            );
            prop_assert_eq!(
                made_now,
                want_made,
                "the wrapped service's calls at t={}",
                t
            );
            if passes {
                made_passes += made_now;
            }

            let snapshot = handle.snapshot();
            prop_assert_eq!(snapshot.state, model.state(), "state at t={}", t);
            prop_assert_eq!(
                snapshot.requested_until.map(|until| until - shift),
                model.requested_until().map(at),
                "the wait the service asked for, at t={}",
                t
            );
            prop_assert_eq!(snapshot.mode, model.mode);
            prop_assert_eq!(snapshot.killed, model.killed);
            prop_assert_eq!(
                snapshot.consecutive_failures,
                model.fails,
                "failures at t={}",
                t
            );
            prop_assert_eq!(
                snapshot.probes_in_flight,
                model.probes_in_flight(),
                "t={}",
                t
            );
            prop_assert_eq!(snapshot.counts, model.totals(), "counts at t={}", t);
        }
        // Every call made is counted, or was a disabled-mode pass, or is still held.
        let counts = handle.snapshot().counts;
        let held_counted = held.iter().filter(|(_, _, pass)| !pass).count() as u64;
        prop_assert_eq!(
            calls.load(Ordering::SeqCst),
            counts.made + made_passes + held_counted
        );
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_layer_matches_the_model_with_a_persons_acts_interleaved(case in cases()) {
        run(&case)?;
    }
}

// ---------------------------------------------------------------------------------------
// Many tasks at once
// ---------------------------------------------------------------------------------------

/// What the wrapped service saw, while the tasks ran.
#[derive(Default)]
struct Watch {
    calls: AtomicU64,
    /// Calls made while a quiet window was open: the kill switch on, or the breaker
    /// forced open, since before the call was decided.
    in_quiet_window: AtomicU64,
    quiet: AtomicBool,
}

/// Tasks call, hold calls, drop them, kill, revive, reset, force open, hold open, hold
/// open on a hint and release it, allow a probe and switch modes at once. A monitor
/// snapshots the breaker throughout. What must hold: never more probes in flight than the
/// limit; the counts add up at every snapshot;
/// while the kill switch is on (set, and every call decided before it ended), the
/// wrapped service is not called; once every call has ended, every call made is counted
/// (or passed through while disabled) and nothing is left in flight or stuck past the
/// dwell limit.
#[test]
fn many_tasks_with_a_persons_acts_keep_the_invariants() {
    for seed in 0..8 {
        many_tasks(seed);
    }
}

fn many_tasks(seed: u64) {
    const TASKS: u64 = 16;
    const PROBES: u32 = 2;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    runtime.block_on(async {
        let layer = Builder::new()
            .failure_threshold(2)
            .cooldown(Cooldown::Calls(3))
            .half_open_probes(PROBES)
            .build()
            .unwrap();
        let handle = layer.handle();
        let watch = Arc::new(Watch::default());
        let passes = Arc::new(AtomicU64::new(0));
        let inner = {
            let (watch, passes, handle) = (watch.clone(), passes.clone(), handle.clone());
            service_fn(move |ok: bool| {
                watch.calls.fetch_add(1, Ordering::SeqCst);
                if watch.quiet.load(Ordering::SeqCst) {
                    watch.in_quiet_window.fetch_add(1, Ordering::SeqCst);
                }
                if handle.mode() == Mode::Disabled {
                    passes.fetch_add(1, Ordering::SeqCst);
                }
                async move {
                    tokio::task::yield_now().await;
                    if ok {
                        Ok::<_, BoxError>(())
                    } else {
                        Err("down".into())
                    }
                }
            })
        };
        let svc = layer.with_fallback(service_fn(|_: bool| async { Ok::<_, BoxError>(()) }));
        let svc = svc.layer(inner);
        let done = Arc::new(AtomicBool::new(false));
        let monitor = {
            let (handle, done) = (handle.clone(), done.clone());
            tokio::spawn(async move {
                let mut snapshots = 0;
                while !done.load(Ordering::SeqCst) {
                    let s = handle.snapshot();
                    assert!(s.probes_in_flight <= PROBES, "{s:?}");
                    let c = s.counts;
                    assert_eq!(c.arrived, c.made + c.skipped() + c.abandoned, "{c:?}");
                    snapshots += 1;
                    tokio::task::yield_now().await;
                }
                snapshots
            })
        };
        // A change of mode waits for calls between their decision and their reaching the
        // service: the service tells a disabled-mode pass by the mode it finds, which must
        // be the mode the call was decided in. (Calls in flight past that point, and every
        // other act, race freely.)
        let deciding = Arc::new(tokio::sync::RwLock::new(()));
        let mut tasks = Vec::new();
        for task in 0..TASKS {
            let (mut svc, handle, deciding) = (svc.clone(), handle.clone(), deciding.clone());
            let mut rng = Rng::new(seed * 1_000 + task);
            tasks.push(tokio::spawn(async move {
                let mut held = Vec::new();
                for _ in 0..150 {
                    match rng.below(40) {
                        0 if task == 0 => handle.reset(),
                        1 if task == 0 => handle.force_open(),
                        2 if task == 0 => handle.open_for(Duration::from_millis(1)),
                        3 if task == 0 => {
                            let _changing = deciding.write().await;
                            handle.set_mode(match rng.below(3) {
                                0 => Mode::Enabled,
                                1 => Mode::ObserveOnly,
                                _ => Mode::Disabled,
                            })
                        }
                        4 if task == 0 => handle.kill_switch().kill(),
                        5..=6 if task == 0 => handle.kill_switch().revive(),
                        12 if task == 0 => {
                            let until = Instant::now() + Duration::from_millis(1);
                            handle.hold_open_until(until);
                        }
                        13 if task == 0 => {
                            handle.release_hold();
                        }
                        14 if task == 0 => {
                            handle.allow_probe();
                        }
                        7..=9 => {
                            // Held in flight for a while, then dropped or finished.
                            let future = {
                                let _deciding = deciding.read().await;
                                svc.ready().await.unwrap().call(rng.chance(50))
                            };
                            held.push(tokio::spawn(future));
                        }
                        10 if !held.is_empty() => {
                            let i = rng.below(held.len() as u64) as usize;
                            held.swap_remove(i).abort();
                        }
                        11 => {
                            let spare = svc.clone();
                            let mut spare = spare;
                            let _ = spare.ready().await;
                        }
                        _ => {
                            let future = {
                                let _deciding = deciding.read().await;
                                svc.ready().await.unwrap().call(rng.chance(60))
                            };
                            let _ = future.await;
                        }
                    }
                    common::yields(rng.below(3)).await;
                }
                for call in held {
                    let _ = call.await;
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        done.store(true, Ordering::SeqCst);
        assert!(monitor.await.unwrap() > 0);

        // A quiet window: killed, nothing reaches the service.
        handle.set_mode(Mode::Enabled);
        handle.kill_switch().kill();
        watch.quiet.store(true, Ordering::SeqCst);
        let mut calls = Vec::new();
        for _ in 0..TASKS {
            let mut svc = svc.clone();
            calls.push(tokio::spawn(async move {
                for _ in 0..20 {
                    let answer = svc.ready().await.unwrap().call(true).await.unwrap();
                    assert_eq!(answer.source(), Source::Fallback(Reason::Killed));
                }
            }));
        }
        for call in calls {
            call.await.unwrap();
        }
        assert_eq!(watch.in_quiet_window.load(Ordering::SeqCst), 0);
        watch.quiet.store(false, Ordering::SeqCst);
        handle.kill_switch().revive();

        // Everything has ended: every call made is counted or was a pass; nothing is
        // in flight; a reset and a success close it, no probe slot stuck.
        let s = handle.snapshot();
        assert_eq!(s.probes_in_flight, 0, "{s:?}");
        let c = s.counts;
        assert_eq!(c.arrived, c.made + c.skipped() + c.abandoned, "{c:?}");
        assert_eq!(
            c.made,
            c.successes + c.failures + c.ignored + c.cancelled + c.late,
            "{c:?}"
        );
        assert_eq!(
            watch.calls.load(Ordering::SeqCst),
            c.made + passes.load(Ordering::SeqCst),
            "{c:?}"
        );
        handle.reset();
        let mut svc = svc.clone();
        for _ in 0..4 {
            let _ = svc.ready().await.unwrap().call(true).await;
        }
        assert_eq!(handle.state(), State::Closed, "{:?}", handle.snapshot());
    });
}
