//! [`Changed`]: the future that completes when a breaker, or its kill switch, changes.

use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::watch;

/// Completes once the breaker it was made from changes after it was made: a change of
/// state or mode, a hold set, lengthened or released, a probe allowed, the half-open's
/// last free probe slot taken or a slot freed when none was free, or a flip of its kill
/// switch. Made by
/// [`CircuitBreakerHandle::changed`](crate::CircuitBreakerHandle::changed).
///
/// It says that something changed, not what: look at the breaker again
/// ([`peek`](crate::CircuitBreakerHandle::peek),
/// [`snapshot`](crate::CircuitBreakerHandle::snapshot)). It may complete for a change
/// that makes no difference to the caller (a failure counted in closed); it never misses
/// one made after it was made, even before it is first polled. Time alone changes
/// nothing here: a cooldown that passes is no change (the next call finds it passed), so
/// wait for the time [`NextProbe`](crate::NextProbe) gives beside it.
///
/// It is `Send`, `Sync` and `'static`, and holds nothing of the breaker: if every service
/// and handle of the breaker is dropped, it completes.
///
/// ```
/// use tower_circuit_breaker::CircuitBreakerLayer;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let layer = CircuitBreakerLayer::builder().build()?;
/// let handle = layer.handle();
/// handle.force_open();
/// let changed = handle.changed();
/// let operator = handle.clone();
/// tokio::spawn(async move { operator.reset() });
/// changed.await;
/// assert!(handle.is_closed());
/// # Ok(()) }
/// ```
#[must_use = "a future does nothing unless polled"]
pub struct Changed {
    name: Arc<str>,
    waiting: Pin<Box<dyn Future<Output = ()> + Send + Sync>>,
}

impl Changed {
    /// Waits on `breaker` (its door, as published) and `kill` (its kill switch), both
    /// subscribed before this is made: what changed before is seen by the caller's look.
    pub(in crate::breaker) fn new(
        name: Arc<str>,
        mut breaker: watch::Receiver<()>,
        mut kill: watch::Receiver<bool>,
    ) -> Self {
        let waiting = Box::pin(async move {
            // A sender dropped (the breaker or its switch is gone) ends the wait too.
            let mut breaker = pin!(breaker.changed());
            let mut kill = pin!(kill.changed());
            poll_fn(|cx: &mut Context<'_>| {
                if breaker.as_mut().poll(cx).is_ready() || kill.as_mut().poll(cx).is_ready() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
        });
        Changed { name, waiting }
    }
}

impl Future for Changed {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.waiting.as_mut().poll(cx)
    }
}

/// Names the breaker it waits on.
impl fmt::Debug for Changed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Changed")
            .field("breaker", &self.name)
            .finish_non_exhaustive()
    }
}

/// A change (`W`: a [`Changed`], or a kill switch's flip) watched while a caller waits on
/// something else: a service's `poll_ready` waiting for the service it wraps to be ready,
/// whose caller a kill or an opening must wake to decide again, not leave waiting on a
/// service it no longer calls. Kept from one wait to the next; a change seen ends it.
pub(in crate::breaker) struct WakeOnChange<W>(Option<W>);

impl<W: Future<Output = ()> + Unpin> WakeOnChange<W> {
    pub(in crate::breaker) fn new() -> Self {
        WakeOnChange(None)
    }

    /// Wakes `cx` at the next change: watched from now (`watch`) unless a watch runs
    /// already, and at once if a change came since it began, or if `still_holds` says
    /// that what the caller looked at before a new watch began no longer holds (a change
    /// between the look and the watch).
    pub(in crate::breaker) fn wake_on_change(
        &mut self,
        cx: &mut Context<'_>,
        watch: impl FnOnce() -> W,
        still_holds: impl FnOnce() -> bool,
    ) {
        let fresh = self.0.is_none();
        let change = self.0.get_or_insert_with(watch);
        if Pin::new(change).poll(cx).is_ready() {
            self.0 = None;
            cx.waker().wake_by_ref();
        } else if fresh && !still_holds() {
            cx.waker().wake_by_ref();
        }
    }
}
