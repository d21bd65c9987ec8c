//! The circuit breaker: the layer, its builder, the service and its future, the handle
//! and the kill switch, the answers and errors a call gets, fallbacks, the settings, the
//! events and snapshots, the classification of outcomes, and the keyed registry.
//!
//! Everything a product of this crate (saved answers, http, the expediter, mcp, the
//! fleet, admin, metrics, replay) uses of the breaker is re-exported at the crate's root
//! or in one of its public modules; the breaker's internals (the state machine, the state
//! its clones share, the delivery of events, the clock) are private to this module.

mod answer;
mod builder;
mod changed;
pub mod classify;
mod clock;
pub mod error;
mod event;
pub mod fallback;
pub mod future;
mod handle;
pub mod keyed;
mod kill;
mod layer;
mod machine;
mod nanos;
mod outcome;
pub mod recover;
mod service;
mod settings;
mod settle;
mod shared;
pub mod snapshot;
mod state;
mod sync;

pub use self::answer::{Answer, Origin, Source, Verdict};
pub use self::builder::Builder;
pub use self::clock::{can_be_paused, now};
pub use self::event::Event;
pub use self::handle::CircuitBreakerHandle;
pub use self::kill::KillSwitch;
pub use self::layer::CircuitBreakerLayer;
pub use self::outcome::{Failure, Outcome};
pub use self::service::CircuitBreaker;
pub use self::settings::{Backoff, Config, Cooldown, Mode, RateWindow, TripPolicy};
pub use self::state::{Advice, Cause, NextProbe, Reason, Skip, State, Transition};
pub use self::sync::delivery::DeliveryGroup;
