//! Freshness labels.

use super::*;

#[test]
fn freshness_labels_follow_the_example_and_fresh_data_has_none() {
    let stale = Freshness::stale(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    assert_eq!(
        stale.label().as_deref(),
        Some("[STALE DATA — retrieved at 2023-11-14T22:13:20Z, may not reflect current state]")
    );
    let cached = Freshness::Cached {
        tool: "Grep".into(),
    }
    .label()
    .unwrap();
    assert!(
        cached.starts_with("[CACHED RESULT — Grep returned identical results to previous call;"),
        "{cached}"
    );
    assert!(cached.ends_with("may have changed since]"), "{cached}");
    assert_eq!(
        Freshness::Unverified {
            tool: "WebSearch".into(),
            date: "2026-11-01".into()
        }
        .label()
        .as_deref(),
        Some("[UNVERIFIED — WebSearch result from 2026-11-01; current status unknown]")
    );
    assert_eq!(
        Freshness::Unknown.label().as_deref(),
        Some("[FRESHNESS UNKNOWN — no baseline for comparison]")
    );
    assert_eq!(Freshness::Fresh.label(), None);
}

#[test]
fn labeled_values_carry_their_label_on_the_line_before() {
    let saved = Labelled::new(
        "port = 8080",
        Freshness::stale(SystemTime::UNIX_EPOCH + Duration::from_secs(86_400)),
    );
    assert_eq!(
        saved.to_string(),
        "[STALE DATA — retrieved at 1970-01-02T00:00:00Z, may not reflect current state]\nport = 8080"
    );
    assert_eq!(
        Labelled::new("port = 8080", Freshness::Fresh).to_string(),
        "port = 8080"
    );
    assert!(Labelled::new(1, Freshness::Unknown)
        .to_string()
        .starts_with("[FRESHNESS UNKNOWN"));
}

#[test]
fn freshness_tracker_marks_an_identical_repeated_output_as_cached() {
    let mut tracker = FreshnessTracker::default();
    let hits = vec!["config.rs:3".to_string(), "env.rs:12".to_string()];
    let first = tracker.observe("Grep", "API_KEY", &hits);
    assert_eq!(first.freshness, Freshness::Fresh);
    assert_eq!(first.freshness.label(), None);
    let again = tracker.observe("Grep", "API_KEY", &hits);
    assert_eq!(
        again.freshness,
        Freshness::Cached {
            tool: "Grep".into()
        }
    );
    assert_eq!(again.value, hits);
    // A changed output is fresh again, and becomes cached when repeated.
    let changed = vec!["config.rs:3".to_string()];
    assert_eq!(
        tracker.observe("Grep", "API_KEY", &changed).freshness,
        Freshness::Fresh
    );
    assert!(matches!(
        tracker.observe("Grep", "API_KEY", &changed).freshness,
        Freshness::Cached { .. }
    ));
    // Other calls and other tools are compared with their own previous output.
    assert_eq!(
        tracker.observe("Grep", "SECRET", &changed).freshness,
        Freshness::Fresh
    );
    assert_eq!(
        tracker.observe("Read", "API_KEY", &changed).freshness,
        Freshness::Fresh
    );
}
