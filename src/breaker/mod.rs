//! The circuit breaker: the layer, its builder, the service and its future, the handle
//! and the kill switch, the answers and errors a call gets, fallbacks, the settings, the
//! events and snapshots, the classification of outcomes, and the keyed registry.
//!
//! Everything a product of this crate (saved answers, http, the expediter, mcp, the
//! fleet, admin, metrics, replay) uses of the breaker is re-exported at the crate's root
//! or in one of its public modules; the breaker's internals (the state machine, the state
//! its clones share, the delivery of events, the clock) are private to this module.

pub(crate) mod answer;
pub(crate) mod builder;
pub(crate) mod changed;
pub mod classify;
pub(crate) mod clock;
pub mod error;
pub(crate) mod event;
pub mod fallback;
pub mod future;
pub(crate) mod handle;
pub mod keyed;
pub(crate) mod kill;
pub(crate) mod layer;
pub(crate) mod machine;
pub(crate) mod outcome;
pub mod recover;
pub(crate) mod service;
pub(crate) mod settings;
pub(crate) mod settle;
pub(crate) mod shared;
pub mod snapshot;
pub(crate) mod sync;
