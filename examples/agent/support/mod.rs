//! What the agent needs that is not the agent: its tools, the loopback servers two of
//! them talk to, and the workspace it works in.

pub(crate) mod http;
pub(crate) mod tools;
pub(crate) mod workspace;

pub(crate) use self::http::{docs_site, reserve_port, search_api, Server};
pub(crate) use self::tools::Toolbox;
pub(crate) use self::workspace::Workspace;
