//! MCP tool servers under the breaker and the expediter, against real servers from the
//! npm registry (see `servers.rs`), started over stdio, and over Streamable HTTP on
//! loopback (`remote.rs`); misbehaving HTTP servers written here (`remote_hostile.rs`).
#![cfg(unix)]

mod adversarial;
mod agent;
mod attacks;
mod calls;
mod captured_logs;
mod common;
mod death;
mod http_server;
mod lifecycle;
mod proxy;
mod remote;
mod remote_hostile;
mod servers;
mod settings;
