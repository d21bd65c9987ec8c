//! MCP tool servers under the breaker and the expediter, against real servers from the
//! npm registry (see `servers.rs`), started over stdio.
#![cfg(unix)]

mod adversarial;
mod agent;
mod attacks;
mod calls;
mod common;
mod death;
mod lifecycle;
mod servers;
mod settings;
