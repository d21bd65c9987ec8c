//! Recovery after a systemic event: once a person confirms the shared
//! cause is fixed, each tool still open is probed after 3 steps, then after 6, 12 ...
//! while its probes fail, capped at 20. The schedule replaces the breaker's own
//! cooldown, so the two never add up; steps are the expediter's decisions about any
//! tool.

/// The post-recovery probe backoff: the steps before the first probe, and the most
/// steps between two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecoveryBackoff {
    pub(crate) start: u64,
    pub(crate) cap: u64,
}

/// One tool's place in the backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecoverySchedule {
    /// The first step whose decision may let the probe go.
    from: u64,
    /// The steps from the last probe (or the confirmation) to the next.
    interval: u64,
    /// A decision has told the breaker to let its next call through as the probe.
    released: bool,
}

impl RecoverySchedule {
    /// The schedule of a tool still open when recovery is confirmed at `step`.
    pub(crate) fn start(step: u64, backoff: RecoveryBackoff) -> Self {
        RecoverySchedule {
            from: step.saturating_add(backoff.start),
            interval: backoff.start,
            released: false,
        }
    }

    /// The probe failed at `step`: the wait doubles, up to the cap.
    pub(crate) fn failed_probe(self, step: u64, backoff: RecoveryBackoff) -> Self {
        let interval = self.interval.saturating_mul(2).min(backoff.cap);
        RecoverySchedule {
            from: step.saturating_add(interval),
            interval,
            released: false,
        }
    }

    /// Whether the decision of `step` may let the probe go.
    pub(crate) fn due(&self, step: u64) -> bool {
        step >= self.from
    }

    /// Counting the next decision as 1, which decision from `step` on may let the
    /// probe go.
    pub(crate) fn decisions_left(&self, step: u64) -> u64 {
        self.from.saturating_sub(step)
    }

    pub(crate) fn released(&self) -> bool {
        self.released
    }

    pub(crate) fn release(&mut self) {
        self.released = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_to_its_cap_and_saturates() {
        let backoff = RecoveryBackoff { start: 3, cap: 20 };
        let mut r = RecoverySchedule::start(10, backoff);
        assert!(!r.due(12) && r.due(13));
        assert_eq!(r.decisions_left(10), 3);
        let mut gaps = Vec::new();
        for step in [13, 19, 31, 51] {
            r = r.failed_probe(step, backoff);
            gaps.push(r.decisions_left(step));
        }
        assert_eq!(gaps, [6, 12, 20, 20]);

        let huge = RecoveryBackoff {
            start: u64::MAX,
            cap: u64::MAX,
        };
        let r = RecoverySchedule::start(5, huge);
        assert!(!r.due(u64::MAX - 1) && r.due(u64::MAX));
        let r = r.failed_probe(u64::MAX, huge);
        assert_eq!(r.decisions_left(u64::MAX), 0);
    }
}
