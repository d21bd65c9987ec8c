//! The health path: the breakers mapped to `200` or `503`, for a load balancer or a
//! readiness probe, by a [`HealthRule`].

use crate::snapshot::Snapshot;
use crate::State;

/// Which breakers make `GET /health` answer `503 Service Unavailable`: one is unhealthy
/// when its state is one of the rule's states, or (unless turned off) when its kill
/// switch is on. The path answers `503` when any breaker served is unhealthy, `200`
/// otherwise.
///
/// The default counts `open` and `forced_open` (not `half_open`: a probe is under way,
/// the breaker is recovering) and a kill switch that is on.
///
/// A readiness probe that fails takes the replica out of its load balancer. When every
/// replica calls the same provider, the provider's outage makes every replica unready
/// together, and the clients get nothing, not even the breaker's fallback answers: give
/// the health path the breakers whose failure means this replica should get no traffic,
/// or a rule that counts fewer states ([`HealthRule::none`] with the states you mean).
///
/// ```
/// use tower_circuit_breaker::admin::HealthRule;
/// use tower_circuit_breaker::State;
///
/// // Only a person's acts make the replica unready: forced open or killed.
/// let rule = HealthRule::none().state(State::ForcedOpen).killed(true);
/// assert!(rule.counts(State::ForcedOpen));
/// assert!(!rule.counts(State::Open));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthRule {
    /// Indexed by [`State`] in declaration order.
    states: [bool; 4],
    killed: bool,
}

impl Default for HealthRule {
    fn default() -> Self {
        HealthRule::none()
            .state(State::Open)
            .state(State::ForcedOpen)
            .killed(true)
    }
}

impl HealthRule {
    /// A rule under which no breaker is unhealthy: add states with
    /// [`state`](Self::state) and the kill switch with [`killed`](Self::killed).
    pub fn none() -> Self {
        HealthRule {
            states: [false; 4],
            killed: false,
        }
    }

    /// Counts a breaker in `state` as unhealthy.
    pub fn state(mut self, state: State) -> Self {
        self.states[index(state)] = true;
        self
    }

    /// Whether a breaker whose kill switch is on counts as unhealthy, whatever its
    /// state.
    pub fn killed(mut self, killed: bool) -> Self {
        self.killed = killed;
        self
    }

    /// Whether a breaker in `state` counts as unhealthy.
    pub fn counts(&self, state: State) -> bool {
        self.states[index(state)]
    }

    /// Whether a breaker whose kill switch is on counts as unhealthy.
    pub fn counts_killed(&self) -> bool {
        self.killed
    }

    /// Whether the breaker `snapshot` shows is unhealthy under this rule.
    pub(super) fn is_unhealthy(&self, snapshot: &Snapshot) -> bool {
        self.counts(snapshot.state) || (self.killed && snapshot.killed)
    }
}

fn index(state: State) -> usize {
    match state {
        State::Closed => 0,
        State::Open => 1,
        State::HalfOpen => 2,
        State::ForcedOpen => 3,
    }
}

/// The health path's answer: `{"healthy": false, "unhealthy": [{"name": "chat",
/// "state": "open", "killed": false}]}`. Names and states only: no failure message.
#[derive(serde::Serialize)]
pub(super) struct HealthView {
    pub(super) healthy: bool,
    pub(super) unhealthy: Vec<Unhealthy>,
}

/// One unhealthy breaker.
#[derive(serde::Serialize)]
pub(super) struct Unhealthy {
    name: String,
    state: State,
    killed: bool,
}

impl HealthView {
    pub(super) fn of(rule: &HealthRule, snapshots: impl IntoIterator<Item = Snapshot>) -> Self {
        let unhealthy: Vec<Unhealthy> = snapshots
            .into_iter()
            .filter(|snapshot| rule.is_unhealthy(snapshot))
            .map(|snapshot| Unhealthy {
                name: snapshot.name.to_string(),
                state: snapshot.state,
                killed: snapshot.killed,
            })
            .collect();
        HealthView {
            healthy: unhealthy.is_empty(),
            unhealthy,
        }
    }
}
