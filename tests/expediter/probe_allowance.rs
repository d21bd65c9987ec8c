//! The probe allowance: a tool that stays down does not spend the whole budget.

use super::*;

/// WebSearch (no alternative) and Bash, with the defaults: budget 5, threshold 3, a
/// probe on every 3rd call after opening, a probe allowance of 1.
fn search_and_bash(builder: ExpediterBuilder) -> (Expediter, Tool, Tool) {
    let expediter = builder
        .tool(websearch_spec())
        .tool(bash_spec())
        .build()
        .unwrap();
    let search = Tool::new(&expediter, "WebSearch");
    let bash = Tool::new(&expediter, "Bash");
    (expediter, search, bash)
}

/// Decides about `tool` until a decision is a probe (at most `within`), calling it
/// whenever told to; returns the decisions made.
async fn until_probe(expediter: &Expediter, tool: &mut Tool, within: usize) -> Vec<Action> {
    let mut actions = Vec::new();
    for _ in 0..within {
        let decision = tool.attempt(expediter).await;
        actions.push(decision.action.clone());
        if decision.action == Action::Probe {
            return actions;
        }
    }
    panic!("no probe within {within} decisions: {actions:?}");
}

fn probes_stopped(route: Route) -> Action {
    Action::Skip {
        reason: SkipReason::ProbesStopped,
        route,
    }
}

fn ask_for_search() -> Route {
    manual("state what information is needed; ask user to provide it")
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_stays_down_is_held_open_after_its_failed_probe_and_the_rest_of_the_budget_stays_for_the_others(
) {
    let (expediter, mut search, mut bash) = search_and_bash(Expediter::builder());
    search
        .fail_times(&expediter, 3, "connect: Connection refused")
        .await;
    let before = until_probe(&expediter, &mut search, 3).await;
    assert_eq!(before.len(), 3, "the probe is the 3rd call after opening");
    // The failed probe is charged, as the method says.
    assert_eq!(expediter.report().budget.used, 4);
    for _ in 0..30 {
        assert_eq!(
            search.attempt(&expediter).await.action,
            probes_stopped(ask_for_search())
        );
    }
    assert_eq!(search.calls(), 4, "no call and no probe while held");
    // The healthy tool keeps working, with the last failure of the budget to spare.
    for _ in 0..10 {
        assert_eq!(bash.attempt(&expediter).await.action, Action::Call);
    }
    let report = expediter.report();
    assert_eq!((report.budget.used, report.budget.probe_allowance), (4, 1));
    let row = &report.tools[0];
    assert_eq!(
        (row.unusable, row.failed_probes, &row.next_try),
        (Some(Unusable::ProbesStopped), 1, &NextTry::WhenFreed)
    );
    let text = report.to_string();
    assert!(
        text.contains("  WebSearch: held open, no more probes: 1 failed probe used up its allowance (1); it is tried again in a new cycle, or once a person frees it\n"),
        "{text}"
    );
    assert!(
        report.next_steps.iter().any(|s| s.starts_with(
            "WebSearch stays down (1 failed probe; last failure: connect: Connection refused): it is held open with no more probes"
        )),
        "{:#?}",
        report.next_steps
    );
    let offer = expediter.offered_tools();
    assert_eq!(offer.offered, ["Bash".into()] as [Arc<str>; 1]);
    assert_eq!(
        offer.withheld[0].line,
        "WebSearch is not offered: it stays down (1 failed probe; last: connect: Connection refused); it is tried again in a new cycle, or once a person frees it; instead, state what information is needed; ask user to provide it"
    );
}

#[tokio::test(start_paused = true)]
async fn a_new_cycle_frees_a_held_tool_and_its_next_failed_probe_is_charged_and_holds_it_again() {
    let (expediter, mut search, _bash) = search_and_bash(Expediter::builder());
    search.fail_times(&expediter, 3, "HTTP 503").await;
    until_probe(&expediter, &mut search, 3).await;
    assert!(matches!(
        search.attempt(&expediter).await.action,
        Action::Skip {
            reason: SkipReason::ProbesStopped,
            ..
        }
    ));
    expediter.new_cycle();
    // Its breaker counted nothing while it was held: the probe is 3 calls away.
    let actions = until_probe(&expediter, &mut search, 3).await;
    assert_eq!(actions.len(), 3, "{actions:?}");
    assert_eq!(expediter.report().budget.used, 1);
    assert_eq!(
        search.attempt(&expediter).await.action,
        probes_stopped(ask_for_search())
    );
}

#[tokio::test(start_paused = true)]
async fn a_person_frees_a_held_tool_and_its_next_call_is_the_probe_that_closes_it() {
    let (expediter, mut search, _bash) = search_and_bash(Expediter::builder());
    search.fail_times(&expediter, 3, "HTTP 503").await;
    until_probe(&expediter, &mut search, 3).await;
    assert!(
        !expediter.resume_probes("Bash").unwrap(),
        "Bash is not held"
    );
    search.heal();
    assert!(expediter.resume_probes("WebSearch").unwrap());
    assert_eq!(search.attempt(&expediter).await.action, Action::Probe);
    assert_eq!(search.attempt(&expediter).await.action, Action::Call);
    assert_eq!(expediter.report().tools[0].failed_probes, 0);
    assert!(matches!(
        expediter.resume_probes("Nope"),
        Err(ExpediterError::UnknownTool(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn a_reset_of_a_held_tools_breaker_frees_it_with_its_whole_allowance() {
    let (expediter, mut search, _bash) = search_and_bash(Expediter::builder().failure_budget(20));
    search.fail_times(&expediter, 3, "HTTP 503").await;
    until_probe(&expediter, &mut search, 3).await;
    expediter.handle("WebSearch").unwrap().reset();
    // Calls go through at once; still down, it opens again and gets one more probe.
    search.fail_times(&expediter, 3, "HTTP 503").await;
    until_probe(&expediter, &mut search, 3).await;
    assert_eq!(expediter.report().budget.used, 8);
    assert_eq!(
        search.attempt(&expediter).await.action,
        probes_stopped(ask_for_search())
    );
}

#[tokio::test(start_paused = true)]
async fn a_probe_allowance_of_two_charges_two_failed_probes_before_the_tool_is_held() {
    let (expediter, mut search, _bash) =
        search_and_bash(Expediter::builder().failure_budget(10).probe_allowance(2));
    search.fail_times(&expediter, 3, "HTTP 503").await;
    until_probe(&expediter, &mut search, 3).await;
    assert_eq!(expediter.report().tools[0].unusable, Some(Unusable::Open));
    until_probe(&expediter, &mut search, 3).await;
    let report = expediter.report();
    assert_eq!((report.budget.used, report.tools[0].failed_probes), (5, 2));
    assert_eq!(report.tools[0].unusable, Some(Unusable::ProbesStopped));
}

#[tokio::test(start_paused = true)]
async fn a_probe_allowance_of_zero_holds_a_tool_as_soon_as_it_opens() {
    let (expediter, mut search, _bash) = search_and_bash(Expediter::builder().probe_allowance(0));
    search.fail_times(&expediter, 3, "HTTP 503").await;
    for _ in 0..10 {
        assert_eq!(
            search.attempt(&expediter).await.action,
            probes_stopped(ask_for_search())
        );
    }
    assert_eq!(expediter.report().budget.used, 3);
}

#[tokio::test(start_paused = true)]
async fn with_an_unlimited_probe_allowance_every_failed_probe_is_charged_until_every_tool_pauses() {
    let (expediter, mut search, mut bash) =
        search_and_bash(Expediter::builder().probe_allowance(u32::MAX));
    search.fail_times(&expediter, 3, "HTTP 503").await;
    until_probe(&expediter, &mut search, 3).await;
    until_probe(&expediter, &mut search, 3).await;
    assert_eq!(expediter.report().budget.used, 5);
    assert!(is_pause(
        &bash.attempt(&expediter).await,
        PauseReason::BudgetExhausted
    ));
}

#[tokio::test(start_paused = true)]
async fn a_reset_made_while_the_breaker_only_observes_or_is_disabled_frees_a_held_tool() {
    for mode in [Mode::ObserveOnly, Mode::Disabled] {
        let (expediter, mut search, _bash) =
            search_and_bash(Expediter::builder().failure_budget(20));
        search.fail_times(&expediter, 3, "HTTP 503").await;
        until_probe(&expediter, &mut search, 3).await;
        assert_eq!(
            search.attempt(&expediter).await.action,
            probes_stopped(ask_for_search())
        );
        let handle = expediter.handle("WebSearch").unwrap();
        handle.set_mode(mode);
        handle.reset();
        handle.set_mode(Mode::Enabled);
        assert_eq!(handle.state(), State::Closed);
        search.heal();
        assert_eq!(
            search.attempt(&expediter).await.action,
            Action::Call,
            "reset in {mode:?}"
        );
        let report = expediter.report();
        assert_eq!(report.tools[0].unusable, None, "{report}");
        assert_eq!(report.tools[0].failed_probes, 0, "{report}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_killed_tool_held_after_its_failed_probe_is_said_to_stay_held_after_the_revive() {
    let (expediter, mut search, _bash) = search_and_bash(Expediter::builder().failure_budget(20));
    search.fail_times(&expediter, 3, "HTTP 503").await;
    until_probe(&expediter, &mut search, 3).await;
    expediter.kill_switch().kill();
    let row = expediter.report().tools.remove(0);
    assert_eq!(row.unusable, Some(Unusable::Killed));
    assert_eq!(
        row.next_try.to_string(),
        "once an operator revives it, then in a new cycle, or once a person frees it"
    );
    expediter.kill_switch().revive();
    assert_eq!(
        search.attempt(&expediter).await.action,
        probes_stopped(ask_for_search())
    );
}
