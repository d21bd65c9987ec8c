//! When a supervised server is started again: [`RestartPolicy`] (the backoff and the
//! crash-loop limit), and the record of one server's restarts it is applied to.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::error::McpConfigError;

/// How a supervised server that died (or could not start) is started again.
///
/// A restart waits `initial`, then twice as long after each failure in a row (a start
/// that failed, or a server that died before it had run for the crash-loop window),
/// never more than `max`. A server that ran for the whole window before it died starts
/// again from `initial`. More than `restarts` restarts within the window is a crash
/// loop: the server is not started again until someone asks for it
/// ([`McpServer::restart`](super::McpServer::restart)). A remote server that cannot be
/// reached (no connection: it is down, not crashing) is not counted
/// ([`StartError::Unreachable`](super::StartError::Unreachable)): it is tried again at the
/// backoff's pace, every `max` at the slowest, until it answers.
///
/// The wait is the server's breaker's: every restart is that breaker's probe, so it
/// happens only when the breaker lets one through, never in a tight loop. The limit holds
/// at any backoff accepted, a nanosecond's included (a wait over before the breaker can
/// be held open for it is a restart due at once, counted as any other).
///
/// ```
/// use std::time::Duration;
/// use tower_circuit_breaker::mcp::RestartPolicy;
///
/// // 0.2 s, 0.4 s, 0.8 s, 1 s, 1 s ...; a sixth restart within a minute gives up.
/// let policy = RestartPolicy::new()
///     .backoff(Duration::from_millis(200), Duration::from_secs(1))
///     .crash_loop(5, Duration::from_secs(60));
/// assert_eq!(policy.delay(3), Duration::from_millis(800));
/// assert_eq!(policy.delay(30), Duration::from_secs(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    initial: Duration,
    max: Duration,
    restarts: u32,
    within: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy::new()
    }
}

impl RestartPolicy {
    /// 0.5 s doubling up to 30 s; more than 5 restarts within 60 s is a crash loop.
    pub fn new() -> Self {
        RestartPolicy {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(30),
            restarts: 5,
            within: Duration::from_secs(60),
        }
    }

    /// The wait before the first restart in a row, doubling for each next one up to
    /// `max`.
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial = initial;
        self.max = max;
        self
    }

    /// At most `restarts` restarts within `within` (0: a server that dies is never
    /// restarted on its own); a server that ran for `within` before it died is not in a
    /// crash loop, and its backoff starts again from the first wait.
    pub fn crash_loop(mut self, restarts: u32, within: Duration) -> Self {
        self.restarts = restarts;
        self.within = within;
        self
    }

    /// The wait before the first restart in a row.
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The longest wait.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The most restarts within [`window`](Self::window).
    pub fn max_restarts(&self) -> u32 {
        self.restarts
    }

    /// The crash-loop window.
    pub fn window(&self) -> Duration {
        self.within
    }

    /// The wait before the `n`-th restart in a row (1: the first).
    pub fn delay(&self, n: u32) -> Duration {
        let doublings = n.saturating_sub(1).min(32);
        self.initial
            .checked_mul(1u32 << doublings.min(31))
            .map_or(self.max, |d| d.min(self.max))
    }

    pub(crate) fn validate(&self) -> Result<(), McpConfigError> {
        if self.initial.is_zero() || self.max < self.initial {
            return Err(McpConfigError::RestartBackoff {
                initial: self.initial,
                max: self.max,
            });
        }
        if self.within.is_zero() {
            return Err(McpConfigError::CrashLoopWindow);
        }
        Ok(())
    }
}

/// What to do after a server failed (died, or a start failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Start it again after this wait.
    RestartAfter(Duration),
    /// It is in a crash loop: this many restarts within the window already.
    GiveUp { restarts: u32 },
}

/// One server's restarts, as the policy sees them.
#[derive(Debug, Clone)]
pub(crate) struct Restarts {
    policy: RestartPolicy,
    /// When the restarts within the window were attempted.
    attempts: VecDeque<Instant>,
    /// Failures since the server last ran for a whole window.
    in_a_row: u32,
    /// Whether the last start was a restart, counted in `attempts` (not a first or an
    /// operator's start).
    last_counted: bool,
}

impl Restarts {
    pub(crate) fn new(policy: RestartPolicy) -> Self {
        Restarts {
            policy,
            attempts: VecDeque::new(),
            in_a_row: 0,
            last_counted: false,
        }
    }

    /// The server failed at `now` after running for `ran_for` (`None`: it did not
    /// start).
    pub(crate) fn failed(&mut self, now: Instant, ran_for: Option<Duration>) -> Next {
        if ran_for.is_some_and(|ran| ran >= self.policy.within) {
            self.in_a_row = 0;
        }
        self.in_a_row = self.in_a_row.saturating_add(1);
        self.forget_before(now);
        let restarts = u32::try_from(self.attempts.len()).unwrap_or(u32::MAX);
        if restarts >= self.policy.restarts {
            Next::GiveUp { restarts }
        } else {
            Next::RestartAfter(self.policy.delay(self.in_a_row))
        }
    }

    /// The restart attempted last found the server unreachable: it is down, not
    /// crashing. Not counted towards the crash loop; the backoff grows as for a failure.
    pub(crate) fn unreachable(&mut self) -> Next {
        // Only a counted restart is taken back: a first or an operator's start was not
        // counted, and the restart before it stays counted.
        if std::mem::take(&mut self.last_counted) {
            self.attempts.pop_back();
        }
        self.in_a_row = self.in_a_row.saturating_add(1);
        Next::RestartAfter(self.policy.delay(self.in_a_row))
    }

    /// A restart is attempted at `now`.
    pub(crate) fn attempted(&mut self, now: Instant) {
        self.forget_before(now);
        self.attempts.push_back(now);
        self.last_counted = true;
    }

    /// A start that is not a restart (the first, or an operator's) is made: not counted.
    pub(crate) fn uncounted(&mut self) {
        self.last_counted = false;
    }

    /// Forgets everything: a person asked for a fresh start.
    pub(crate) fn reset(&mut self) {
        self.attempts.clear();
        self.in_a_row = 0;
        self.last_counted = false;
    }

    fn forget_before(&mut self, now: Instant) {
        while let Some(&first) = self.attempts.front() {
            if now.saturating_duration_since(first) >= self.policy.within {
                self.attempts.pop_front();
            } else {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RestartPolicy {
        RestartPolicy::new()
            .backoff(Duration::from_millis(100), Duration::from_millis(500))
            .crash_loop(3, Duration::from_secs(10))
    }

    #[test]
    fn the_backoff_doubles_to_its_cap_and_never_overflows() {
        let p = policy();
        let waits: Vec<u128> = (1..=5).map(|n| p.delay(n).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 500, 500]);
        assert_eq!(p.delay(0), Duration::from_millis(100));
        assert_eq!(p.delay(u32::MAX), Duration::from_millis(500));
        let huge = RestartPolicy::new().backoff(Duration::MAX, Duration::MAX);
        assert_eq!(huge.delay(40), Duration::MAX);
    }

    #[test]
    fn a_server_failing_on_every_start_gives_up_after_the_limit() {
        let mut r = Restarts::new(policy());
        let t = Instant::now();
        // The first start fails; three restarts are allowed, with growing waits.
        let mut waits = Vec::new();
        let mut now = t;
        loop {
            match r.failed(now, None) {
                Next::RestartAfter(wait) => {
                    waits.push(wait.as_millis());
                    now += wait;
                    r.attempted(now);
                }
                Next::GiveUp { restarts } => {
                    assert_eq!(restarts, 3);
                    break;
                }
            }
        }
        assert_eq!(waits, [100, 200, 400]);
    }

    #[test]
    fn restarts_outside_the_window_are_forgotten_and_a_long_run_resets_the_backoff() {
        let mut r = Restarts::new(policy());
        let t = Instant::now();
        for i in 0..3 {
            assert!(matches!(r.failed(t, None), Next::RestartAfter(_)), "{i}");
            r.attempted(t);
        }
        assert_eq!(r.failed(t, None), Next::GiveUp { restarts: 3 });
        // Eleven seconds later the three restarts are out of the window, and a server
        // that ran for the whole window waits the first backoff again.
        let later = t + Duration::from_secs(11);
        assert_eq!(
            r.failed(later, Some(Duration::from_secs(10))),
            Next::RestartAfter(Duration::from_millis(100))
        );
        r.reset();
        assert_eq!(
            r.failed(later, None),
            Next::RestartAfter(Duration::from_millis(100))
        );
    }

    #[test]
    fn a_server_that_cannot_be_reached_backs_off_and_is_never_given_up() {
        let mut r = Restarts::new(policy().crash_loop(3, Duration::from_secs(10)));
        let t = Instant::now();
        let mut waits = Vec::new();
        for _ in 0..20 {
            r.attempted(t);
            match r.unreachable() {
                Next::RestartAfter(wait) => waits.push(wait.as_millis()),
                Next::GiveUp { .. } => panic!("an outage is not a crash loop"),
            }
        }
        assert_eq!(waits[..4], [100, 200, 400, 500]);
        assert!(waits[4..].iter().all(|&w| w == 500));
        // Its failed starts were not counted: a crash once it is reached is the first.
        assert!(matches!(r.failed(t, None), Next::RestartAfter(_)));
    }

    #[test]
    fn an_uncounted_start_found_unreachable_takes_back_no_restart() {
        let mut r = Restarts::new(policy().crash_loop(2, Duration::from_secs(10)));
        let t = Instant::now();
        assert!(matches!(r.failed(t, None), Next::RestartAfter(_)));
        r.attempted(t);
        assert!(matches!(r.failed(t, None), Next::RestartAfter(_)));
        r.attempted(t);
        // A fresh start (not a restart) that finds the server unreachable: the two
        // restarts before it stay counted, and the next crash is past the limit.
        r.uncounted();
        assert!(matches!(r.unreachable(), Next::RestartAfter(_)));
        assert_eq!(r.failed(t, None), Next::GiveUp { restarts: 2 });
        // A counted restart found unreachable is taken back, once.
        let mut r = Restarts::new(policy().crash_loop(2, Duration::from_secs(10)));
        r.attempted(t);
        r.attempted(t);
        assert!(matches!(r.unreachable(), Next::RestartAfter(_)));
        assert!(matches!(r.unreachable(), Next::RestartAfter(_)));
        assert_eq!(
            r.failed(t, None),
            Next::RestartAfter(Duration::from_millis(400))
        );
    }

    #[test]
    fn no_restarts_allowed_gives_up_at_the_first_failure() {
        let mut r = Restarts::new(policy().crash_loop(0, Duration::from_secs(1)));
        assert_eq!(r.failed(Instant::now(), None), Next::GiveUp { restarts: 0 });
    }

    #[test]
    fn bad_policies_are_refused() {
        let zero = RestartPolicy::new().backoff(Duration::ZERO, Duration::from_secs(1));
        assert!(matches!(
            zero.validate(),
            Err(McpConfigError::RestartBackoff { .. })
        ));
        let inverted = RestartPolicy::new().backoff(Duration::from_secs(2), Duration::from_secs(1));
        assert!(inverted.validate().is_err());
        let no_window = RestartPolicy::new().crash_loop(3, Duration::ZERO);
        assert_eq!(no_window.validate(), Err(McpConfigError::CrashLoopWindow));
        assert_eq!(RestartPolicy::new().validate(), Ok(()));
    }
}
