use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::time::Sleep;
use tower::Service;

use super::error::CooldownInCalls;
use crate::accessors::inner_service_accessors;
use crate::future::Changed;
use crate::{Advice, CircuitBreakerHandle, Cooldown, NextProbe, Reason};

/// A service that is not ready while its breaker would not make a call: open until its
/// probe is due, half-open with every probe slot taken, forced open, or killed. See the
/// [module docs](super) for the rules, and for use under `tower::balance`.
///
/// It wraps the breaker's service (a [`CircuitBreaker`](crate::CircuitBreaker), or any
/// service with the breaker inside it) and holds the breaker's handle. Its responses,
/// errors and futures are the wrapped service's: it adds no failure of its own.
///
/// ```
/// use std::time::Duration;
/// use futures::FutureExt;
/// use tower::{service_fn, Layer, ServiceExt};
/// use tower_circuit_breaker::readiness::Readiness;
/// use tower_circuit_breaker::{CircuitBreakerLayer, Cooldown};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let breaker = CircuitBreakerLayer::builder()
///     .cooldown(Cooldown::Time(Duration::from_secs(30)))
///     .build()?;
/// let handle = breaker.handle();
/// let service = breaker.layer(service_fn(|_: ()| async { Ok::<_, std::io::Error>("up") }));
/// let mut endpoint = Readiness::new(service, handle.clone())?;
///
/// handle.force_open();
/// assert!(endpoint.ready().now_or_never().is_none(), "forced open: not ready");
/// handle.reset();
/// assert!(endpoint.ready().now_or_never().is_some(), "closed: ready");
/// # Ok(()) }
/// ```
///
/// # Panics
///
/// `poll_ready` needs a tokio runtime with its time driver when it must wait for a time
/// (an open breaker's probe): as `tokio::time::sleep` does, it panics without one.
///
/// # Clone
///
/// A clone shares the breaker, and starts neither waiting nor holding the reservation
/// its original may hold: it must be polled ready itself.
pub struct Readiness<S> {
    inner: S,
    handle: CircuitBreakerHandle,
    /// The breaker's half-open dwell limit: how long a probe that never ends can keep it
    /// half-open, after which it must be looked at again.
    dwell: Option<Duration>,
    /// What the breaker held for the next call when the inner service was last polled
    /// (a breaker decides in `poll_ready`, ready or not), until `call`.
    reserved: Option<Reserved>,
    /// While the probe is reserved: the breaker's generation once it was. A change of
    /// state or mode since (a reset, the dwell limit, a person's force-open, a change of
    /// mode, which gives the slots up) has ended the half-open it was reserved in, and
    /// with it the reservation: a slot taken since is another caller's.
    probe_in: Option<u64>,
    /// Armed before each look at the breaker, while not ready.
    changed: Option<Changed>,
    /// While not ready: when to look again (the probe's instant, or a dwell limit).
    sleep: Option<Pin<Box<Sleep>>>,
}

/// The decision the inner breaker holds, as it was looked at just before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reserved {
    Call,
    /// The probe: it holds a probe slot, so the breaker says its slots are taken; that
    /// must not keep this service, the one holding it, waiting.
    Probe,
}

/// What an unready service waits for, as the breaker says now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Nothing: a call now would be made, as this (or a cooldown in calls needs calls).
    Nothing(Reserved),
    /// A change of the breaker or its kill switch (a person's act, a probe's end).
    Change,
    /// That, or this instant, on the breaker's clock.
    Until(Instant),
}

impl<S> Readiness<S> {
    /// Wraps `inner`, a service with the breaker of `handle` inside it.
    ///
    /// # Errors
    ///
    /// [`CooldownInCalls`] if the breaker's cooldown is counted in calls (see the
    /// [module docs](super#a-cooldown-in-calls-is-refused)).
    pub fn new(inner: S, handle: CircuitBreakerHandle) -> Result<Self, CooldownInCalls> {
        let dwell = checked(&handle)?;
        Ok(Readiness::checked(inner, handle, dwell))
    }

    /// For a breaker already checked, whose dwell limit is `dwell`.
    pub(super) fn checked(inner: S, handle: CircuitBreakerHandle, dwell: Option<Duration>) -> Self {
        Readiness {
            inner,
            handle,
            dwell,
            reserved: None,
            probe_in: None,
            changed: None,
            sleep: None,
        }
    }

    /// The breaker's handle.
    pub fn handle(&self) -> &CircuitBreakerHandle {
        &self.handle
    }

    inner_service_accessors!(S);

    /// What to wait for before a call, as the breaker says now. Looking counts nothing.
    fn wait(&self) -> Wait {
        let skip = match self.handle.peek() {
            Advice::Call => return Wait::Nothing(Reserved::Call),
            Advice::Probe => return Wait::Nothing(Reserved::Probe),
            Advice::Skip(skip) => skip,
        };
        match (skip.reason(), skip.next_probe()) {
            (
                _,
                NextProbe::After {
                    calls: 1,
                    at: Some(at),
                },
            ) => Wait::Until(at),
            // Due now (a look raced the clock), or counted in calls, which only calls
            // move (refused when made; a breaker cannot change its cooldown since).
            (_, NextProbe::After { .. }) => Wait::Nothing(Reserved::Call),
            // The slot taken is this service's own probe.
            (Reason::HalfOpenFull, _) if self.reserved == Some(Reserved::Probe) => {
                Wait::Nothing(Reserved::Probe)
            }
            (Reason::HalfOpenFull, _) => match self.dwell {
                // The limit runs from when the breaker went half-open, before now: by
                // now + dwell it has surely passed, and a look then applies it.
                Some(dwell) => Wait::Until(crate::later::later(
                    tokio::time::Instant::now().into_std(),
                    dwell,
                )),
                None => Wait::Change,
            },
            // Killed, forced open until a reset, a permanent failure: only a person.
            _ => Wait::Change,
        }
    }

    /// Not ready until the breaker would make a call: arms the change watch before each
    /// look, so that no change between the look and the wait is missed.
    #[cold]
    fn poll_admitted(&mut self, cx: &mut Context<'_>) -> Poll<Reserved> {
        // Each turn follows a change or a timer that fired; a breaker that changes
        // without end is given back to the executor rather than looped on.
        for _ in 0..8 {
            self.forget_an_ended_probe();
            if self.changed.is_none() {
                self.changed = Some(self.handle.changed());
            }
            let until = match self.wait() {
                Wait::Nothing(reserved) => {
                    self.stop_waiting();
                    return Poll::Ready(reserved);
                }
                Wait::Change => None,
                Wait::Until(at) => Some(tokio::time::Instant::from_std(at)),
            };
            let changed = self.changed.as_mut().expect("armed above");
            if Pin::new(changed).poll(cx).is_ready() {
                self.changed = None;
                continue;
            }
            let Some(until) = until else {
                self.sleep = None;
                return Poll::Pending;
            };
            let sleep = match &mut self.sleep {
                // An earlier look still to come stands: a look too early only looks again.
                Some(sleep) if sleep.deadline() <= until => sleep,
                Some(sleep) => {
                    sleep.as_mut().reset(until);
                    sleep
                }
                sleep @ None => sleep.insert(Box::pin(tokio::time::sleep_until(until))),
            };
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.sleep = None;
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn stop_waiting(&mut self) {
        self.changed = None;
        self.sleep = None;
    }

    /// Forgets the probe reserved if the half-open it was reserved in has ended: the
    /// breaker's state or mode changed since.
    fn forget_an_ended_probe(&mut self) {
        let Some(generation) = self.probe_in else {
            return;
        };
        if self.handle.snapshot().generation != generation {
            self.probe_in = None;
            if self.reserved == Some(Reserved::Probe) {
                self.reserved = None;
            }
        }
    }

    /// Notes the breaker's generation once the breaker inside has reserved the probe
    /// (its own change into half-open, if it made one, made first); a reservation already
    /// noted stands as noted.
    fn note_probe(&mut self, reserved: Reserved) {
        self.probe_in = match reserved {
            Reserved::Probe => self
                .probe_in
                .or_else(|| Some(self.handle.snapshot().generation)),
            Reserved::Call => None,
        };
    }
}

/// The breaker's dwell limit, or the refusal of a cooldown in calls.
pub(super) fn checked(handle: &CircuitBreakerHandle) -> Result<Option<Duration>, CooldownInCalls> {
    let config = handle.config();
    match config.cooldown() {
        Cooldown::Calls(calls) => Err(CooldownInCalls::new(config.name().into(), calls)),
        Cooldown::Time(_) => Ok(config.max_half_open_dwell()),
    }
}

impl<S, Request> Service<Request> for Readiness<S>
where
    S: Service<Request>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Closed and not killed: nothing to wait for, known from two loads.
        let reserved = if self.handle.is_closed() && !self.handle.kill_switch().is_killed() {
            if self.changed.is_some() {
                self.stop_waiting();
            }
            Reserved::Call
        } else {
            match self.poll_admitted(cx) {
                Poll::Ready(reserved) => reserved,
                Poll::Pending => return Poll::Pending,
            }
        };
        // The breaker decides here, ready or not, and holds its decision until `call`.
        self.reserved = Some(reserved);
        let ready = self.inner.poll_ready(cx);
        self.note_probe(reserved);
        ready
    }

    fn call(&mut self, request: Request) -> Self::Future {
        self.reserved = None;
        self.probe_in = None;
        self.inner.call(request)
    }
}

impl<S: Clone> Clone for Readiness<S> {
    /// A clone shares the breaker, not this service's wait or reservation.
    fn clone(&self) -> Self {
        Readiness::checked(self.inner.clone(), self.handle.clone(), self.dwell)
    }
}

impl<S: fmt::Debug> fmt::Debug for Readiness<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Readiness")
            .field("inner", &self.inner)
            .field("breaker", &self.handle.name())
            .field("reserved", &self.reserved.is_some())
            .field("waiting", &self.changed.is_some())
            .finish()
    }
}
