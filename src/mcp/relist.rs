//! Reading a server's tool list again when it says the list changed: one read at a time,
//! beside everything else its supervisor watches (a stop, a death, a trip), never in
//! its way; changes that come meanwhile make one more read, and reads are spaced so that
//! a server announcing a change after every list cannot make its client spin.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::shared::Shared;

/// The least time between the starts of two reads of one connection's tool list.
const SPACING: Duration = Duration::from_millis(100);

/// The reads of one connection's tool list (one generation of the server).
pub(crate) struct Relist {
    shared: Arc<Shared>,
    generation: u64,
    /// The read under way (waiting for its turn, or asking the server).
    under_way: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// The list changed again after the read under way was asked.
    again: bool,
    /// When the last read started (or is to start).
    last: Option<Instant>,
}

impl Relist {
    pub(crate) fn new(shared: Arc<Shared>, generation: u64) -> Self {
        Relist {
            shared,
            generation,
            under_way: None,
            again: false,
            last: None,
        }
    }

    /// The server said its list changed: a read starts, or follows the one under way.
    pub(crate) fn changed(&mut self) {
        if self.under_way.is_some() {
            self.again = true;
        } else {
            self.start();
        }
    }

    /// Resolves when the read under way is done (never, with none): call
    /// [`Relist::done`] then. Cancel-safe: the read goes on at the next call.
    pub(crate) async fn finished(&mut self) {
        match &mut self.under_way {
            Some(read) => read.await,
            None => std::future::pending().await,
        }
    }

    /// The read under way is done: the next starts if the list changed meanwhile.
    pub(crate) fn done(&mut self) {
        self.under_way = None;
        if std::mem::take(&mut self.again) {
            self.start();
        }
    }

    fn start(&mut self) {
        let now = Instant::now();
        let at = self.last.map_or(now, |last| (last + SPACING).max(now));
        self.last = Some(at);
        let shared = self.shared.clone();
        let generation = self.generation;
        self.under_way = Some(Box::pin(async move {
            tokio::time::sleep_until(at).await;
            shared.refresh_tools(generation).await;
        }));
    }
}
