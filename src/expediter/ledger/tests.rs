use std::sync::mpsc;
use std::time::Duration;

use crate::expediter::cascade::Trigger;
use crate::expediter::category::Categorizer;
use crate::expediter::decision::{PauseReason, SkipReason};
use crate::expediter::events::Change;
use crate::expediter::precheck::Availability;
use crate::expediter::recovery::RecoveryBackoff;
use crate::expediter::NextTry;
use crate::{Cause, Mode, State};

use super::*;

fn ledger(budget: u32) -> (Ledger, mpsc::Sender<ToolEvent>) {
    let (tx, rx) = mpsc::channel();
    let mut ledger = Ledger::new(
        rx,
        budget,
        CascadeWindow {
            steps: 3,
            time: Duration::from_secs(30),
        },
        RecoveryBackoff { start: 3, cap: 20 },
        true,
        1,
    );
    for tool in ["A", "B", "C"] {
        ledger.add_tool(tool.into());
    }
    (ledger, tx)
}

fn failure(tool: &str, message: &str) -> ToolEvent {
    ToolEvent::Failure {
        tool: tool.into(),
        message: message.into(),
        category: Categorizer::default().categorize(message),
    }
}

fn change(tool: &str, from: State, to: State, generation: u64, streak: u32) -> ToolEvent {
    ToolEvent::Transition {
        tool: tool.into(),
        change: Change {
            from,
            to,
            cause: match to {
                State::Closed => Cause::ProbeSucceeded,
                State::HalfOpen => Cause::CooldownElapsed,
                State::Open | State::ForcedOpen => Cause::Tripped,
            },
            at: tokio::time::Instant::now().into_std(),
            generation,
            mode: Mode::Enabled,
            consecutive_failures: streak,
        },
    }
}

fn view(state: State, generation: u64) -> ToolView {
    ToolView {
        state,
        held: false,
        killed: false,
        breaker: NextTry::Now,
        generation,
    }
}

#[tokio::test(start_paused = true)]
async fn a_stale_opening_after_the_close_leaves_the_tool_closed_and_causes_no_cascade() {
    let (mut ledger, tx) = ledger(10);
    for _ in 0..3 {
        tx.send(failure("A", "connection refused")).unwrap();
    }
    // A opened (generation 1), then closed after a probe (generations 2 and 3);
    // the opening's report arrives last.
    tx.send(change("A", State::Open, State::HalfOpen, 2, 3))
        .unwrap();
    tx.send(change("A", State::HalfOpen, State::Closed, 3, 0))
        .unwrap();
    tx.send(change("A", State::Closed, State::Open, 1, 3))
        .unwrap();
    ledger.drain();
    assert!(ledger.row("A").open.is_none(), "A is closed");
    assert!(!ledger.is_ahead_of("A", &view(State::Closed, 3)));
    assert!(ledger.is_ahead_of("A", &view(State::Open, 1)));
    // B's lone failures with the same message are B's own.
    for _ in 0..3 {
        tx.send(failure("B", "connection refused")).unwrap();
    }
    tx.send(change("B", State::Closed, State::Open, 1, 3))
        .unwrap();
    ledger.drain();
    assert!(ledger.active_systemic().is_none());
    assert_eq!(ledger.used(), 6);
}

#[tokio::test(start_paused = true)]
async fn the_failure_that_would_use_up_the_budget_with_an_open_tools_signature_is_systemic() {
    let (mut ledger, tx) = ledger(5);
    for _ in 0..3 {
        tx.send(failure("A", "connection refused")).unwrap();
    }
    tx.send(change("A", State::Closed, State::Open, 1, 3))
        .unwrap();
    tx.send(failure("B", "connection refused")).unwrap();
    ledger.drain();
    assert_eq!(
        ledger.used(),
        4,
        "every failure counts until the event is known"
    );
    assert!(ledger.pause().is_none());
    tx.send(failure("B", "connection refused")).unwrap();
    ledger.drain();
    let event = ledger.active_systemic().expect("one systemic event");
    assert_eq!(event.trigger, Trigger::Budget);
    assert_eq!(event.tools, vec![Arc::<str>::from("A"), "B".into()]);
    assert_eq!(ledger.used(), 1);
    assert_eq!(ledger.pause().unwrap().reason, PauseReason::SystemicPause);
}

#[tokio::test(start_paused = true)]
async fn a_recovery_probe_is_let_through_once_when_due() {
    let (mut ledger, tx) = ledger(50);
    for tool in ["A", "B"] {
        for _ in 0..3 {
            tx.send(failure(tool, "connection refused")).unwrap();
        }
        tx.send(change(tool, State::Closed, State::Open, 1, 3))
            .unwrap();
    }
    ledger.drain();
    assert!(ledger.active_systemic().is_some());
    ledger.confirm_recovery();
    let a: Arc<str> = "A".into();
    let gates: Vec<Gate> = (0..4)
        .map(|_| ledger.begin_decision(&a, Availability::Available).1)
        .collect();
    assert_eq!(
        gates,
        [
            Gate::Skip(SkipReason::RecoveryBackoff),
            Gate::Skip(SkipReason::RecoveryBackoff),
            Gate::Breaker { release: true },
            Gate::Breaker { release: false },
        ]
    );
}
