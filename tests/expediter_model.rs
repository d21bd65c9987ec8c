//! A property test: one expediter over five tools, driven with random outcomes, error
//! signatures, caller mistakes, recoveries, cycles, pre-call results, the kill switch,
//! paused time and concurrent callers, checked after every operation against a small
//! reference model of the budget and cascade rules:
//!
//! - the budget used is always the failures recorded minus the duplicates of systemic
//!   events (each event counts once), and the report's lines, events and pause are the
//!   model's;
//! - every decision is the model's gate (pause, pre-call check, recovery backoff) or,
//!   past it, the breaker's own; a tool's service runs only after CALL or PROBE;
//! - every next-try statement in the report is the breaker's own (or the expediter's
//!   schedule where the model says one applies).
//!
//! The reference model, fed with what the tools' breakers did in the order they did it
//! (failures counted by the breaker, transitions from `subscribe`):
//!
//! ```text
//! failure(t, sig):
//!   if an event is active and it has t, or its signature is sig: it joins the event
//!   else: charged; if it uses up the budget, no event is active, and another tool
//!         not in recovery opened on sig: event(sig, those tools + t)
//! opened(t, from, streak):
//!   open[t] = (last sig of t, streak)
//!   if t has a recovery schedule: a failed probe doubles it (capped); done
//!   if an event is active: t joins it; done
//!   another tool not in recovery opened on the same sig: event(sig, those + t)
//!   else 3+ distinct tools opened within the window (steps or time): event(none, them)
//! event(sig, tools): takes in, per tool, its failures with sig this cycle (no sig: the
//!   failures that opened it); cached pre-call results are dropped
//! used = failures not in an event + events of this cycle
//! ```
//!
//! Concurrent callers are futures joined on one paused current-thread runtime, with a
//! yield between their decision and their call, so that decisions and calls of
//! different callers interleave; each logs what it saw with no await in between, so
//! the log is in the order the expediter saw it.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestCaseError;
use tokio::sync::broadcast;
use tower::util::BoxService;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_circuit_breaker::error::BoxError;
use tower_circuit_breaker::expediter::{
    Action, Alternative, Availability, Expediter, NextTry, PauseReason, SkipReason, StatusReport,
    ToolSpec,
};
use tower_circuit_breaker::snapshot::Snapshot;
use tower_circuit_breaker::{Answer, Builder, Cooldown, NextProbe, Reason, State, Transition};

const TOOLS: [&str; 5] = ["T0", "T1", "T2", "T3", "T4"];
/// Tools with a pre-call check.
const CHECKED: [usize; 2] = [3, 4];
const CALLER_ERROR: &str = "read notes.md: No such file or directory (os error 2)";

/// What a call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Out {
    Ok,
    /// Fails with message `k` (see [`message`]).
    Fail(u8),
    /// The caller's mistake: the tool is not at fault.
    Caller,
}

/// The message of failure `k` of tool `i`, and the signature the model gives it.
fn message(i: usize, k: u8) -> (String, Option<&'static str>) {
    match k % 4 {
        0 => (
            "tcp connect error: Connection refused (os error 111)".into(),
            Some("connection refused"),
        ),
        1 => (
            "open /workspace: permission denied".into(),
            Some("permission denied"),
        ),
        2 => (format!("{}: exploded", TOOLS[i]), None),
        _ => ("request timed out after 30s".into(), Some("timeout")),
    }
}

#[derive(Debug, Clone)]
enum Op {
    Call(usize, Out),
    /// Concurrent callers: tool, outcome, whether to yield between decision and call.
    Batch(Vec<(usize, Out, bool)>),
    Peek(usize),
    Confirm,
    NewCycle,
    Check(usize, Availability),
    Advance(u64),
    Kill(bool),
}

#[derive(Debug, Clone)]
struct Case {
    budget: u32,
    window_steps: u64,
    start: u64,
    cap: u64,
    ops: Vec<Op>,
}

fn out() -> impl Strategy<Value = Out> {
    prop_oneof![
        3 => Just(Out::Ok),
        6 => (0u8..4).prop_map(Out::Fail),
        1 => Just(Out::Caller),
    ]
}

fn availability() -> impl Strategy<Value = Availability> {
    prop_oneof![
        3 => Just(Availability::Available),
        1 => Just(Availability::Degraded),
        1 => Just(Availability::Unavailable),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0..5usize, out()).prop_map(|(t, o)| Op::Call(t, o)),
        3 => prop::collection::vec((0..5usize, out(), any::<bool>()), 2..6).prop_map(Op::Batch),
        2 => (0..5usize).prop_map(Op::Peek),
        2 => Just(Op::Confirm),
        1 => Just(Op::NewCycle),
        1 => (3..5usize, availability()).prop_map(|(t, a)| Op::Check(t, a)),
        1 => prop_oneof![Just(5u64), Just(40)].prop_map(Op::Advance),
        1 => any::<bool>().prop_map(Op::Kill),
    ]
}

fn cases() -> impl Strategy<Value = Case> {
    (
        3u32..12,
        1u64..5,
        1u64..5,
        1u64..5,
        prop::collection::vec(op(), 10..70),
    )
        .prop_map(|(budget, window_steps, start, times, ops)| Case {
            budget,
            window_steps,
            start,
            cap: start * times,
            ops,
        })
}

// ---------------------------------------------------------------------------------------
// The reference model
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct MEntry {
    tool: usize,
    sig: Option<&'static str>,
    event: Option<usize>,
}

#[derive(Debug, Clone)]
struct MEvent {
    sig: Option<&'static str>,
    tools: Vec<usize>,
    cycle: u32,
    resolved: bool,
}

#[derive(Debug, Clone, Copy)]
struct MOpen {
    sig: Option<&'static str>,
    streak: u32,
}

#[derive(Debug, Clone, Copy)]
struct MRecovery {
    from: u64,
    interval: u64,
    released: bool,
}

#[derive(Debug)]
struct Model {
    budget: u32,
    window: (u64, Duration),
    backoff: (u64, u64),
    step: u64,
    cycle: u32,
    entries: Vec<MEntry>,
    events: Vec<MEvent>,
    open: [Option<MOpen>; 5],
    recovery: [Option<MRecovery>; 5],
    openings: Vec<(usize, u64, Instant)>,
    last_sig: [Option<&'static str>; 5],
    cached: [Option<Availability>; 5],
}

/// What the gate of a decision lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    Pause(PauseReason),
    Skip(SkipReason),
    /// The breaker decides; `release`: a due recovery probe it has not been told of.
    Breaker {
        release: bool,
    },
}

impl Model {
    fn new(case: &Case) -> Self {
        Model {
            budget: case.budget,
            window: (case.window_steps, Duration::from_secs(30)),
            backoff: (case.start, case.cap),
            step: 0,
            cycle: 1,
            entries: Vec::new(),
            events: Vec::new(),
            open: [None; 5],
            recovery: [None; 5],
            openings: Vec::new(),
            last_sig: [None; 5],
            cached: [None; 5],
        }
    }

    fn active(&self) -> Option<usize> {
        self.events.iter().rposition(|e| !e.resolved)
    }

    fn used(&self) -> u32 {
        let ordinary = self.entries.iter().filter(|e| e.event.is_none()).count();
        let events = self.events.iter().filter(|e| e.cycle == self.cycle).count();
        (ordinary + events) as u32
    }

    fn pause(&self) -> Option<PauseReason> {
        if self.active().is_some() {
            Some(PauseReason::SystemicPause)
        } else if self.used() >= self.budget {
            Some(PauseReason::BudgetExhausted)
        } else {
            None
        }
    }

    fn open_on(&self, sig: &'static str, except: usize) -> Vec<usize> {
        (0..5)
            .filter(|&u| {
                u != except
                    && self.recovery[u].is_none()
                    && self.open[u].is_some_and(|o| o.sig == Some(sig))
            })
            .collect()
    }

    fn declare(&mut self, sig: Option<&'static str>, mut tools: Vec<usize>) {
        tools.sort();
        tools.dedup();
        self.events.push(MEvent {
            sig,
            tools: tools.clone(),
            cycle: self.cycle,
            resolved: false,
        });
        let id = self.events.len() - 1;
        for t in tools {
            self.absorb(id, t);
        }
        self.cached = [None; 5];
    }

    fn absorb(&mut self, id: usize, t: usize) {
        match self.events[id].sig {
            Some(sig) => {
                for e in &mut self.entries {
                    if e.tool == t && e.sig == Some(sig) && e.event.is_none() {
                        e.event = Some(id);
                    }
                }
            }
            None => {
                let mut left = self.open[t].map_or(0, |o| o.streak);
                for e in self.entries.iter_mut().rev() {
                    if left == 0 {
                        break;
                    }
                    if e.tool == t {
                        left -= 1;
                        if e.event.is_none() {
                            e.event = Some(id);
                        }
                    }
                }
            }
        }
    }

    fn join(&mut self, id: usize, t: usize) {
        if !self.events[id].tools.contains(&t) {
            self.events[id].tools.push(t);
            self.events[id].tools.sort();
        }
    }

    fn failure(&mut self, t: usize, sig: Option<&'static str>) {
        self.last_sig[t] = sig;
        if let Some(a) = self.active() {
            let event = &self.events[a];
            if event.tools.contains(&t) || (event.sig.is_some() && event.sig == sig) {
                self.entries.push(MEntry {
                    tool: t,
                    sig,
                    event: Some(a),
                });
                self.join(a, t);
                return;
            }
        }
        let before = self.used();
        self.entries.push(MEntry {
            tool: t,
            sig,
            event: None,
        });
        if self.active().is_none() && before < self.budget && self.used() >= self.budget {
            if let Some(sig) = sig {
                let mut others = self.open_on(sig, t);
                if !others.is_empty() {
                    others.push(t);
                    self.declare(Some(sig), others);
                }
            }
        }
    }

    fn transition(&mut self, t: usize, tr: &Transition) {
        match tr.to {
            State::Open => self.opened(t, tr.from, tr.consecutive_failures, tr.at),
            State::Closed => {
                self.open[t] = None;
                self.recovery[t] = None;
            }
            _ => {}
        }
    }

    fn opened(&mut self, t: usize, from: State, streak: u32, at: Instant) {
        let sig = self.last_sig[t];
        self.open[t] = Some(MOpen { sig, streak });
        if let Some(r) = self.recovery[t] {
            if from == State::HalfOpen {
                let interval = (r.interval * 2).min(self.backoff.1);
                self.recovery[t] = Some(MRecovery {
                    from: self.step + interval,
                    interval,
                    released: false,
                });
            }
            return;
        }
        if let Some(a) = self.active() {
            self.join(a, t);
            self.absorb(a, t);
            return;
        }
        let (steps, time) = self.window;
        let step = self.step;
        self.openings.retain(|&(_, s, when)| {
            step - s <= steps || at.saturating_duration_since(when) <= time
        });
        self.openings.push((t, step, at));
        let mut together: Vec<usize> = self.openings.iter().map(|o| o.0).collect();
        together.sort();
        together.dedup();
        if let Some(sig) = sig {
            let mut same = self.open_on(sig, t);
            if !same.is_empty() {
                same.push(t);
                self.declare(Some(sig), same);
                return;
            }
        }
        if together.len() >= 3 {
            self.declare(None, together);
        }
    }

    fn confirm(&mut self) {
        let Some(a) = self.active() else { return };
        self.events[a].resolved = true;
        self.openings.clear();
        for t in 0..5 {
            if self.open[t].is_some() && self.recovery[t].is_none() {
                self.recovery[t] = Some(MRecovery {
                    from: self.step + self.backoff.0,
                    interval: self.backoff.0,
                    released: false,
                });
            }
        }
        self.cached = [None; 5];
    }

    fn new_cycle(&mut self) {
        self.cycle += 1;
        self.entries.clear();
        self.cached = [None; 5];
    }

    /// The gate of a decision about `t` at `step` that found `availability`.
    fn gate(&self, t: usize, availability: Availability, step: u64) -> Gate {
        if let Some(reason) = self.pause() {
            return Gate::Pause(reason);
        }
        if availability == Availability::Unavailable {
            return Gate::Skip(SkipReason::Unavailable);
        }
        match self.recovery[t] {
            Some(r) if step < r.from => Gate::Skip(SkipReason::RecoveryBackoff),
            Some(r) => Gate::Breaker {
                release: !r.released,
            },
            None => Gate::Breaker { release: false },
        }
    }

    /// A decision: the step, the pre-call check (`check`: what it would find now), the
    /// gate.
    fn decision(&mut self, t: usize, check: Option<Availability>) -> Gate {
        let availability = match (check, self.cached[t]) {
            (None, _) => Availability::Available,
            (Some(_), Some(cached)) => cached,
            (Some(found), None) => {
                self.cached[t] = Some(found);
                found
            }
        };
        self.step += 1;
        let gate = self.gate(t, availability, self.step);
        if let (Gate::Breaker { release: true }, Some(r)) = (gate, &mut self.recovery[t]) {
            r.released = true;
        }
        gate
    }

    /// When `t` is tried next, given its breaker's snapshot.
    fn next_try(&self, t: usize, snapshot: &Snapshot) -> NextTry {
        let own = if self.cached[t] == Some(Availability::Unavailable) {
            NextTry::WhenAvailable
        } else {
            match self.recovery[t] {
                Some(r) if self.step + 1 < r.from => NextTry::RecoveryBackoff {
                    decisions: r.from - self.step,
                },
                Some(r) if !r.released && !snapshot.killed && snapshot.state == State::Open => {
                    NextTry::Probe {
                        decisions: 1,
                        not_before: None,
                    }
                }
                _ => breakers_own(snapshot),
            }
        };
        match self.pause() {
            None => own,
            Some(reason) => {
                let then = if reason == PauseReason::SystemicPause
                    && self.recovery[t].is_none()
                    && self.open[t].is_some()
                {
                    NextTry::RecoveryBackoff {
                        decisions: self.backoff.0,
                    }
                } else {
                    own
                };
                NextTry::Paused {
                    reason,
                    then: Box::new(then),
                }
            }
        }
    }
}

/// The breaker's own answer to "when is it tried next", from its snapshot.
fn breakers_own(snapshot: &Snapshot) -> NextTry {
    if snapshot.killed {
        return NextTry::WhenRevived;
    }
    match snapshot.next_probe {
        NextProbe::NotNeeded => NextTry::Now,
        NextProbe::InFlight => NextTry::ProbeUnderWay,
        NextProbe::After { calls, at } => NextTry::Probe {
            decisions: calls,
            not_before: at
                .map(|at| at.saturating_duration_since(snapshot.taken_at))
                .filter(|d| !d.is_zero()),
        },
        NextProbe::Manual => NextTry::AfterReset,
    }
}

// ---------------------------------------------------------------------------------------
// The system under test, and its log
// ---------------------------------------------------------------------------------------

#[derive(Debug)]
enum Log {
    Decision {
        tool: usize,
        check: Option<Availability>,
        action: Action,
        killed: bool,
    },
    /// A call was made (after CALL or PROBE): whether its breaker counted a failure,
    /// with which signature.
    Failure {
        tool: usize,
        sig: Option<&'static str>,
    },
    Transition {
        tool: usize,
        transition: Transition,
    },
}

type Svc = BoxService<Out, Answer<String>, BoxError>;

struct World {
    expediter: Expediter,
    checks: Arc<Mutex<[Availability; 5]>>,
    /// Calls that reached each tool's service.
    reached: Arc<[AtomicUsize; 5]>,
    /// CALL or PROBE decisions of each tool.
    allowed: [AtomicUsize; 5],
    receivers: Mutex<Vec<broadcast::Receiver<Transition>>>,
    log: Mutex<Vec<Log>>,
}

impl World {
    fn new(case: &Case) -> World {
        let checks = Arc::new(Mutex::new([Availability::Available; 5]));
        let specs = (0..5).map(|i| {
            let mut spec = ToolSpec::new(TOOLS[i]).provides(TOOLS[i]);
            spec = match i {
                1 => spec.alternative(Alternative::low("T0", "instead", "a little")),
                2 => spec
                    .alternative(Alternative::high("T1", "instead", "a lot"))
                    .fallback("ask the user"),
                4 => spec.alternative(Alternative::low("T3", "instead", "a little")),
                _ => spec.fallback("ask the user"),
            };
            if CHECKED.contains(&i) {
                let checks = checks.clone();
                spec = spec.precheck(move || {
                    let found = checks.lock().unwrap()[i];
                    async move { found }
                });
            }
            spec
        });
        let expediter = Expediter::builder()
            .tools(specs)
            .failure_budget(case.budget)
            .cascade_window(case.window_steps, Duration::from_secs(30))
            .recovery_backoff(case.start, case.cap)
            .default_breaker(
                Builder::new()
                    .failure_threshold(3)
                    .cooldown(Cooldown::Calls(2))
                    .max_half_open_dwell(None),
            )
            .build()
            .expect("a valid map");
        let receivers = TOOLS
            .iter()
            .map(|t| expediter.handle(t).unwrap().subscribe())
            .collect();
        World {
            expediter,
            checks,
            reached: Arc::new(Default::default()),
            allowed: Default::default(),
            receivers: Mutex::new(receivers),
            log: Mutex::new(Vec::new()),
        }
    }

    fn service(&self, i: usize) -> Svc {
        let reached = self.reached.clone();
        BoxService::new(
            ServiceBuilder::new()
                .layer(self.expediter.layer(TOOLS[i]).unwrap())
                .service(service_fn(move |out: Out| {
                    reached[i].fetch_add(1, SeqCst);
                    async move {
                        match out {
                            Out::Ok => Ok("ok".to_string()),
                            Out::Fail(k) => Err(io::Error::other(message(i, k).0)),
                            Out::Caller => Err(io::Error::other(CALLER_ERROR)),
                        }
                    }
                })),
        )
    }

    /// Logs the transitions of tool `i` since the last look.
    fn log_transitions(&self, i: usize) {
        let mut receivers = self.receivers.lock().unwrap();
        let mut log = self.log.lock().unwrap();
        while let Ok(transition) = receivers[i].try_recv() {
            log.push(Log::Transition {
                tool: i,
                transition,
            });
        }
    }

    /// One caller: decide, maybe yield, call if allowed. Everything between two awaits
    /// is logged before the next await.
    async fn attempt(&self, i: usize, out: Out, yield_between: bool) {
        let check = CHECKED.contains(&i).then(|| self.checks.lock().unwrap()[i]);
        let decision = self.expediter.decide(TOOLS[i]).await.expect("a known tool");
        self.log.lock().unwrap().push(Log::Decision {
            tool: i,
            check,
            action: decision.action.clone(),
            killed: self.expediter.kill_switch().is_killed(),
        });
        self.log_transitions(i);
        if !decision.should_call() {
            return;
        }
        self.allowed[i].fetch_add(1, SeqCst);
        if yield_between {
            tokio::task::yield_now().await;
        }
        let handle = self.expediter.handle(TOOLS[i]).unwrap();
        let mut svc = self.service(i);
        let before = handle.snapshot().counts.failures;
        let _ = svc.ready().await.expect("always ready").call(out).await;
        if handle.snapshot().counts.failures > before {
            let Out::Fail(k) = out else {
                panic!("a failure counted for {out:?}");
            };
            self.log.lock().unwrap().push(Log::Failure {
                tool: i,
                sig: message(i, k).1,
            });
        }
        self.log_transitions(i);
    }
}

// ---------------------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------------------

fn replay(model: &mut Model, log: Vec<Log>) -> Result<(), TestCaseError> {
    for entry in log {
        match entry {
            Log::Decision {
                tool,
                check,
                action,
                killed,
            } => {
                let gate = model.decision(tool, check);
                let fits = match (gate, &action) {
                    (Gate::Pause(want), Action::Pause { reason, .. }) => *reason == want,
                    (Gate::Skip(want), Action::Skip { reason, .. }) => *reason == want,
                    (Gate::Breaker { .. }, Action::Skip { reason, .. }) if killed => {
                        *reason == SkipReason::Breaker(Reason::Killed)
                    }
                    (Gate::Breaker { .. }, Action::Call | Action::Probe) => !killed,
                    (Gate::Breaker { .. }, Action::Skip { reason, .. }) => {
                        matches!(reason, SkipReason::Breaker(_))
                    }
                    _ => false,
                };
                prop_assert!(
                    fits,
                    "step {}: {} got {action:?}, the model's gate is {gate:?}",
                    model.step,
                    TOOLS[tool]
                );
            }
            Log::Failure { tool, sig } => model.failure(tool, sig),
            Log::Transition { tool, transition } => model.transition(tool, &transition),
        }
    }
    Ok(())
}

fn compare(model: &Model, world: &World, report: &StatusReport) -> Result<(), TestCaseError> {
    let budget = &report.budget;
    prop_assert_eq!(budget.used, model.used(), "budget used\n{}", report);
    prop_assert_eq!(
        budget.used as usize,
        budget.ordinary() + budget.systemic_events as usize,
        "the report's own sum\n{}",
        report
    );
    prop_assert_eq!(budget.cycle, model.cycle);
    let lines: Vec<(&str, bool)> = budget
        .failures
        .iter()
        .map(|l| (&*l.tool, l.systemic))
        .collect();
    let want: Vec<(&str, bool)> = model
        .entries
        .iter()
        .map(|e| (TOOLS[e.tool], e.event.is_some()))
        .collect();
    prop_assert_eq!(lines, want, "budget lines\n{}", report);
    prop_assert_eq!(
        budget.systemic_events as usize,
        model
            .events
            .iter()
            .filter(|e| e.cycle == model.cycle)
            .count()
    );
    match (&report.systemic, model.events.last()) {
        (None, None) => {}
        (Some(got), Some(want)) => {
            let tools: Vec<&str> = want.tools.iter().map(|&t| TOOLS[t]).collect();
            let got_tools: Vec<&str> = got.tools.iter().map(|t| &**t).collect();
            prop_assert_eq!(got_tools, tools, "systemic tools\n{}", report);
            prop_assert_eq!(got.resolved, want.resolved);
            prop_assert_eq!(got.signature.as_deref(), want.sig);
        }
        (got, want) => prop_assert!(false, "systemic: report {got:?}, model {want:?}\n{report}"),
    }
    let paused = report.headline.contains("PAUSING");
    prop_assert_eq!(paused, model.pause().is_some(), "{}", report);
    for (t, row) in report.tools.iter().enumerate() {
        let snapshot = world.expediter.handle(TOOLS[t]).unwrap().snapshot();
        prop_assert_eq!(row.state, snapshot.state);
        prop_assert_eq!(row.consecutive_failures, snapshot.consecutive_failures);
        let want = model.next_try(t, &snapshot);
        prop_assert_eq!(&row.next_try, &want, "{} next try\n{}", TOOLS[t], report);
        // The same words wherever the report says when the tool is tried again.
        let said = format!("{} is tried again {}", TOOLS[t], row.next_try);
        for step in report.next_steps.iter() {
            if let Some(at) = step.find(&format!("{} is tried again", TOOLS[t])) {
                prop_assert!(step[at..].starts_with(&said), "{step}\nnot\n{said}");
            }
        }
        let reached = world.reached[t].load(SeqCst);
        prop_assert!(
            reached <= world.allowed[t].load(SeqCst),
            "{} ran {reached} times, allowed {}",
            TOOLS[t],
            world.allowed[t].load(SeqCst)
        );
        prop_assert_eq!(reached as u64, snapshot.counts.made);
    }
    Ok(())
}

/// Runs `case`, checking the expediter against the model after every operation and
/// handing each report to `seen`.
fn run_case(case: &Case, mut seen: impl FnMut(&World, &StatusReport)) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        let world = World::new(case);
        let mut model = Model::new(case);
        for op in &case.ops {
            match op {
                Op::Call(t, out) => world.attempt(*t, *out, false).await,
                Op::Batch(calls) => {
                    join_all(
                        calls
                            .iter()
                            .map(|&(t, out, yielding)| world.attempt(t, out, yielding)),
                    )
                    .await;
                }
                Op::Peek(t) => {
                    let action = world.expediter.peek(TOOLS[*t]).expect("a known tool");
                    let availability = model.cached[*t].unwrap_or(Availability::Available);
                    let gate = model.gate(*t, availability, model.step + 1);
                    let fits = match (gate, &action) {
                        (Gate::Pause(want), Action::Pause { reason, .. }) => *reason == want,
                        (Gate::Skip(want), Action::Skip { reason, .. }) => *reason == want,
                        (Gate::Breaker { .. }, _) => !matches!(action, Action::Pause { .. }),
                        _ => false,
                    };
                    prop_assert!(fits, "peek {}: {action:?}, gate {gate:?}", TOOLS[*t]);
                }
                Op::Confirm => {
                    world.expediter.confirm_recovery();
                    model.confirm();
                }
                Op::NewCycle => {
                    world.expediter.new_cycle();
                    model.new_cycle();
                }
                Op::Check(t, found) => world.checks.lock().unwrap()[*t] = *found,
                Op::Advance(secs) => tokio::time::advance(Duration::from_secs(*secs)).await,
                Op::Kill(on) => {
                    if *on {
                        world.expediter.kill_switch().kill();
                    } else {
                        world.expediter.kill_switch().revive();
                    }
                }
            }
            let log = std::mem::take(&mut *world.log.lock().unwrap());
            let debug = std::env::var_os("TCB_MODEL_DEBUG").is_some();
            if debug {
                eprintln!("== {op:?}");
                for entry in &log {
                    eprintln!("   {entry:?}");
                }
            }
            replay(&mut model, log)?;
            let report = world.expediter.report();
            if let Err(e) = compare(&model, &world, &report) {
                if debug {
                    eprintln!("{model:?}");
                }
                return Err(e);
            }
            seen(&world, &report);
        }
        Ok(())
    })
}

proptest! {
    // More cases outside CI: `TCB_MODEL_CASES=5000 cargo test --release --test expediter_model`.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("TCB_MODEL_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(192),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_expediter_keeps_the_reference_models_budget_cascades_and_next_tries(case in cases()) {
        run_case(&case, |_, _| {})?;
    }
}

#[test]
fn the_model_is_driven_into_every_kind_of_event() {
    // The strategy reaches the rules the property checks: systemic events of each
    // trigger, pauses of both kinds, recovery backoffs and caller errors.
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    for _ in 0..64 {
        let case = cases().new_tree(&mut runner).unwrap().current();
        run_case(&case, |world, report| {
            let mut saw = |kind| *seen.entry(kind).or_default() += 1;
            match &report.systemic {
                Some(s) if s.signature.is_some() => saw("signature"),
                Some(_) => saw("together"),
                None => {}
            }
            if report.headline.starts_with("FAILURE BUDGET") {
                saw("budget pause");
            }
            if report
                .tools
                .iter()
                .any(|t| matches!(t.next_try, NextTry::RecoveryBackoff { .. }))
            {
                saw("recovery backoff");
            }
            let ignored = TOOLS
                .iter()
                .any(|t| world.expediter.handle(t).unwrap().snapshot().counts.ignored > 0);
            if ignored {
                saw("caller errors");
            }
        })
        .expect("the model holds");
    }
    for kind in [
        "signature",
        "together",
        "budget pause",
        "recovery backoff",
        "caller errors",
    ] {
        assert!(
            seen.get(kind).copied().unwrap_or(0) > 0,
            "never reached: {kind} ({seen:?})"
        );
    }
}
