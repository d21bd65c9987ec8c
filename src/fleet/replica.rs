//! One replica's fleet state, shared by its [`Fleet`](super::Fleet) handles and the task
//! that talks to Redis: the settings, what is shared, the totals, the link's status and
//! the events.

use std::sync::{Mutex, MutexGuard};

use tokio::sync::{broadcast, watch};

use super::clock;
use super::config::Settings;
use super::counts::{add, Counters};
use super::event::FleetEvent;
use super::link::LinkStatus;
use super::registry::Registry;

#[derive(Debug)]
pub(crate) struct Replica {
    pub(crate) settings: Settings,
    pub(crate) counters: Counters,
    registry: Mutex<Registry>,
    status: watch::Sender<LinkStatus>,
    events: broadcast::Sender<FleetEvent>,
}

impl Replica {
    pub(crate) fn new(settings: Settings) -> Replica {
        let down = LinkStatus::Down {
            since: clock::now(),
            error: "not connected yet".into(),
        };
        Replica {
            settings,
            counters: Counters::default(),
            registry: Mutex::new(Registry::default()),
            status: watch::channel(down).0,
            events: broadcast::channel(256).0,
        }
    }

    pub(crate) fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn emit(&self, event: FleetEvent) {
        // Nobody listening is fine.
        let _ = self.events.send(event);
    }

    pub(crate) fn events(&self) -> broadcast::Receiver<FleetEvent> {
        self.events.subscribe()
    }

    pub(crate) fn link(&self) -> LinkStatus {
        self.status.borrow().clone()
    }

    pub(crate) fn watch_link(&self) -> watch::Receiver<LinkStatus> {
        self.status.subscribe()
    }

    /// The link came up; `again`: it had been up before.
    pub(crate) fn link_up(&self, again: bool) {
        let status = LinkStatus::Up {
            since: clock::now(),
        };
        self.status.send_replace(status.clone());
        if again {
            add(&self.counters.reconnects, 1);
        }
        tracing::info!(target: "tower_circuit_breaker::fleet", replica = %self.settings.replica, "fleet link up");
        self.emit(FleetEvent::Link(status));
    }

    /// The link is down, with this error. Since when stays the moment it was lost.
    pub(crate) fn link_down(&self, error: &str) {
        let redacted = self.settings.redact(error);
        let error = &*redacted;
        let mut lost = None;
        self.status.send_modify(|status| match status {
            LinkStatus::Up { .. } => {
                *status = LinkStatus::Down {
                    since: clock::now(),
                    error: error.into(),
                };
                lost = Some(status.clone());
            }
            LinkStatus::Down { error: last, .. } => *last = error.into(),
        });
        if let Some(status) = lost {
            tracing::warn!(target: "tower_circuit_breaker::fleet", replica = %self.settings.replica, %error, "fleet link down: working alone");
            self.emit(FleetEvent::Link(status));
        }
    }
}
