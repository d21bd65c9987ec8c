//! What a model is offered: the MCP tool definitions of the tools that work, named as
//! the model calls them, and one honest line for each tool held back ([`McpOffer`]).

use std::fmt;
use std::sync::Arc;

use rmcp::model::Tool;

use crate::expediter::WithheldTool;

/// The tools to give the model now ([`McpTools::offered`](super::McpTools::offered)).
#[derive(Debug, Clone, PartialEq)]
pub struct McpOffer {
    /// The MCP tools offered: each one's definition as its server lists it (description,
    /// input schema...), named as the model calls it (`server__tool`).
    pub tools: Vec<Tool>,
    /// Other tools of the expediter offered (the agent's own, not MCP tools).
    pub other: Vec<Arc<str>>,
    /// Every tool held back, MCP or not, with the line that says why and when it is
    /// tried again.
    pub withheld: Vec<WithheldTool>,
}

impl McpOffer {
    /// The names of every tool offered, MCP tools first.
    pub fn names(&self) -> Vec<&str> {
        self.tools
            .iter()
            .map(|t| &*t.name)
            .chain(self.other.iter().map(|n| &**n))
            .collect()
    }

    /// Whether `name` is offered.
    pub fn offers(&self, name: &str) -> bool {
        self.names().contains(&name)
    }
}

/// `tools offered: a, b` and a line for each tool held back.
impl fmt::Display for McpOffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = self.names();
        if names.is_empty() {
            f.write_str("tools offered: (none)")?;
        } else {
            write!(f, "tools offered: {}", names.join(", "))?;
        }
        for withheld in &self.withheld {
            write!(f, "\n{}", withheld.line)?;
        }
        Ok(())
    }
}
