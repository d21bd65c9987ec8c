//! The rule a breaker's counts keep in every snapshot: they add up.

use tower_circuit_breaker::snapshot::Counts;

/// The snapshot's totals add up as docs/guarantees.md says: `arrived = made + skipped +
/// abandoned`, `made = successes + failures + ignored + cancelled + late`.
#[track_caller]
pub(crate) fn assert_counts_add_up(counts: &Counts) {
    assert_eq!(
        counts.arrived,
        counts.made + counts.skipped() + counts.abandoned,
        "arrived != made + skipped + abandoned: {counts:?}"
    );
    assert_eq!(
        counts.made,
        counts.successes + counts.failures + counts.ignored + counts.cancelled + counts.late,
        "made != successes + failures + ignored + cancelled + late: {counts:?}"
    );
}
