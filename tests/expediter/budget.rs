//! The failure budget.
//! The report and clones.

use super::*;

#[tokio::test(start_paused = true)]
async fn budget_example_pauses_at_five_of_five_and_reports() -> TestResult {
    let expediter = example_expediter();
    let mut read = Tool::new(&expediter, "Read");
    let mut grep = Tool::new(&expediter, "Grep");
    let mut bash = Tool::new(&expediter, "Bash");
    let mut edit = Tool::new(&expediter, "Edit");
    let mut websearch = Tool::new(&expediter, "WebSearch");
    let tasks = example_subtasks();

    assert!(expediter
        .default_run()
        .start_subtask(tasks[0].clone())?
        .can_run());
    assert_eq!(read.attempt(&expediter).await.action, Action::Call);
    expediter
        .default_run()
        .complete_subtask("Read configuration files")?;
    assert!(expediter
        .default_run()
        .start_subtask(tasks[1].clone())?
        .can_run());
    assert_eq!(grep.attempt(&expediter).await.action, Action::Call);
    expediter
        .default_run()
        .complete_subtask("Search for deprecated patterns")?;

    // Sub-task 3: Bash fails three ways and opens.
    assert!(expediter
        .default_run()
        .start_subtask(tasks[2].clone())?
        .can_run());
    for message in [
        "permission denied",
        "command not found",
        "timeout after 120s",
    ] {
        bash.fail_times(&expediter, 1, message).await;
    }
    expediter
        .default_run()
        .fail_subtask("Run test suite", "Bash circuit OPEN")?;
    // Failure 4: WebSearch, connection refused.
    websearch
        .fail_times(&expediter, 1, "connection refused")
        .await;

    let report = expediter.report();
    assert_eq!((report.budget.used, report.budget.limit), (4, 5));
    assert!(!report.budget.exhausted());
    let lines: Vec<(&str, &str)> = report
        .budget
        .failures
        .iter()
        .map(|f| (&*f.tool, f.message.as_str()))
        .collect();
    assert_eq!(
        lines,
        [
            ("Bash", "permission denied"),
            ("Bash", "command not found"),
            ("Bash", "timeout after 120s"),
            ("WebSearch", "connection refused"),
        ]
    );
    assert!(report.to_string().contains("Failures: 4 / 5"));
    // One failure remains: the next call still proceeds.
    let decision = expediter.default_run().decide("WebSearch").await?;
    assert_eq!(decision.action, Action::Call);
    assert!(websearch.call().await.is_err());

    // 5 / 5: every decision is a pause, for every tool.
    let report = expediter.report();
    assert_eq!(report.budget.used, 5);
    assert!(report.budget.exhausted());
    for name in EXAMPLE_TOOLS {
        let decision = expediter.default_run().decide(name).await?;
        assert!(
            is_pause(&decision, PauseReason::BudgetExhausted),
            "{decision}"
        );
        let Action::Pause { detail, .. } = &decision.action else {
            unreachable!()
        };
        assert!(detail.contains("5 / 5"), "{detail}");
    }
    let before = [
        read.calls(),
        grep.calls(),
        bash.calls(),
        edit.calls(),
        websearch.calls(),
    ];
    assert!(
        matches!(edit.execute(&expediter).await, Attempt::Paused { decision: d, .. } if is_pause(&d, PauseReason::BudgetExhausted))
    );
    assert!(matches!(
        read.execute(&expediter).await,
        Attempt::Skipped { .. } | Attempt::Paused { .. }
    ));
    assert_eq!(
        before,
        [
            read.calls(),
            grep.calls(),
            bash.calls(),
            edit.calls(),
            websearch.calls()
        ],
        "nothing is called while paused"
    );

    // Sub-tasks 4 and 5 are not attempted.
    for task in &tasks[3..] {
        let plan = expediter.default_run().start_subtask(task.clone())?;
        assert_eq!(
            plan.status,
            WorkStatus::NotAttempted {
                why: "paused: the failure budget is used up".into()
            }
        );
    }

    let report = expediter.report();
    assert_eq!(report.headline, "FAILURE BUDGET EXHAUSTED — PAUSING");
    let done: Vec<&str> = report.completed.iter().map(|w| &*w.name).collect();
    assert_eq!(
        done,
        ["Read configuration files", "Search for deprecated patterns"]
    );
    let incomplete: Vec<(&str, &WorkStatus)> = report
        .incomplete
        .iter()
        .map(|w| (&*w.name, &w.status))
        .collect();
    assert_eq!(
        incomplete,
        [
            (
                "Run test suite",
                &WorkStatus::Failed {
                    why: "Bash circuit OPEN".into()
                }
            ),
            (
                "Update documentation",
                &WorkStatus::NotAttempted {
                    why: "paused: the failure budget is used up".into()
                }
            ),
            (
                "Deploy to staging",
                &WorkStatus::NotAttempted {
                    why: "paused: the failure budget is used up".into()
                }
            ),
        ]
    );
    let bash_row = report.tools.iter().find(|t| &*t.name == "Bash").unwrap();
    assert_eq!(
        (bash_row.state, bash_row.consecutive_failures),
        (State::Open, 3)
    );
    assert!(report
        .tools
        .iter()
        .filter(|t| ["Grep", "Read", "Edit"].contains(&&*t.name))
        .all(|t| t.state == State::Closed));
    assert!(!report.next_steps.is_empty());

    let text = report.to_string();
    assert!(
        text.starts_with("FAILURE BUDGET EXHAUSTED — PAUSING\n"),
        "{text}"
    );
    for needle in [
        "Completed work:",
        "Read configuration files (SUCCESS)",
        "Search for deprecated patterns (SUCCESS)",
        "Incomplete work:",
        "Run test suite (FAILED — Bash circuit OPEN)",
        "Update documentation (NOT ATTEMPTED — paused: the failure budget is used up)",
        "Deploy to staging (NOT ATTEMPTED — paused: the failure budget is used up)",
        "Tool health:",
        "Bash: OPEN (3 consecutive failures — timeout after 120s)",
        "Failures: 5 / 5",
        "Next steps:",
        "Investigate Bash",
        "Resume from \"Update documentation\"",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    let order = [
        "Completed work:",
        "Incomplete work:",
        "Tool health:",
        "Failures: 5 / 5",
        "Next steps:",
    ]
    .map(|s| text.find(s).unwrap());
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "sections out of order:\n{text}"
    );

    // A new cycle refills the budget; breakers keep their state.
    expediter.new_cycle();
    let report = expediter.report();
    assert_eq!((report.budget.used, report.budget.cycle), (0, 2));
    assert!(report.headline.starts_with("STATUS"), "{}", report.headline);
    assert_eq!(edit.attempt(&expediter).await.action, Action::Call);
    assert_eq!(expediter.handle("Bash")?.state(), State::Open);
    assert!(matches!(
        expediter.default_run().decide("Bash").await?.action,
        Action::Skip {
            reason: SkipReason::Breaker(Reason::Open),
            ..
        }
    ));
    assert_eq!(bash.calls(), 3);
    Ok(())
}

/// The report's tool table lines up on a terminal whatever script the tools' names are
/// written in: a CJK character or an emoji takes two columns, a combining accent none.
#[tokio::test(start_paused = true)]
async fn the_tool_health_table_lines_up_with_cjk_and_emoji_tool_names() -> TestResult {
    // Each name, the columns a terminal gives it, and a letter to stand for it.
    let names: [(&'static str, usize, char); 5] = [
        ("検索", 4, 'a'),
        ("ファイル読み取り", 16, 'b'),
        ("🔍web", 5, 'c'),
        ("👩\u{200d}💻coder", 7, 'd'),
        ("cafe\u{301}", 4, 'e'),
    ];
    let mut builder = Expediter::builder();
    for (name, ..) in names {
        builder = builder.tool(
            ToolSpec::new(name)
                .provides("a tool named in another script")
                .fallback("ask the user"),
        );
    }
    let expediter = builder.build()?;
    Tool::new(&expediter, "検索")
        .fail_times(&expediter, 3, "検索: timeout")
        .await;
    let mut web = Tool::new(&expediter, "🔍web");
    assert!(matches!(
        web.execute(&expediter).await,
        Attempt::Made { result: Ok(_), .. }
    ));

    let text = expediter.report().to_string();
    // The table with each name replaced by its letter, as many times as the columns it
    // takes: what is left is one column per character.
    let table: Vec<String> = text
        .lines()
        .skip_while(|line| *line != "Tool health:")
        .skip(1)
        .take_while(|line| line.starts_with(['+', '|']))
        .map(|line| {
            names
                .iter()
                .fold(line.to_string(), |line, (name, columns, letter)| {
                    line.replace(name, &letter.to_string().repeat(*columns))
                })
        })
        .collect();
    assert_eq!(table.len(), 4 + names.len(), "{text}");
    let borders = |line: &str| -> Vec<usize> {
        line.chars()
            .enumerate()
            .filter(|(_, c)| matches!(c, '+' | '|'))
            .map(|(column, _)| column)
            .collect()
    };
    let header = borders(&table[1]);
    for line in &table {
        assert_eq!(borders(line), header, "{line:?} in:\n{text}");
    }
    // The widest name, 16 columns, sets the first column: "| " + 16 + " ".
    assert_eq!(header[..2], [0, 19], "{text}");
    let row = |letter: char, columns: usize| {
        let cell = format!("| {} ", letter.to_string().repeat(columns));
        table.iter().find(|line| line.starts_with(&cell))
    };
    for (name, columns, letter) in names {
        assert!(
            row(letter, columns).is_some(),
            "no row for {name} in:\n{text}"
        );
    }
    assert!(row('a', 4).unwrap().contains("| OPEN "), "{text}");
    assert!(row('c', 5).unwrap().contains("| CLOSED "), "{text}");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn budget_is_shared_across_tools_and_configurable() -> TestResult {
    let expediter = example_map().failure_budget(2).build()?;
    let mut read = Tool::new(&expediter, "Read");
    let mut edit = Tool::new(&expediter, "Edit");
    read.fail_times(&expediter, 1, "read: unexpected end of input")
        .await;
    assert_eq!(expediter.report().budget.used, 1);
    edit.fail_times(&expediter, 1, "edit: merge conflict").await;
    assert!(is_pause(
        &expediter.default_run().decide("Grep").await?,
        PauseReason::BudgetExhausted
    ));
    assert_eq!(expediter.report().budget.limit, 2);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn clones_share_tools_budget_and_report() -> TestResult {
    let expediter = example_expediter();
    let clone = expediter.clone();
    let mut bash = Tool::new(&clone, "Bash");
    bash.fail_times(&clone, 2, "bash: exit status 2").await;
    assert_eq!(expediter.report().budget.used, 2);
    assert_eq!(expediter.handle("Bash")?, clone.handle("Bash")?);
    assert_eq!(expediter.kill_switch(), clone.kill_switch());
    Ok(())
}
