//! The capability map: what each tool provides, what can stand in for it, and what to
//! ask of the user when nothing can.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use crate::Builder;

use super::blame::{Blame, BlameRule};
use super::error::ExpediterError;
use super::precheck::PreCheck;

/// How much an alternative loses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Degradation {
    /// A similar capability: tried first.
    Low,
    /// A large loss of capability: the result says what is missing.
    High,
}

impl Degradation {
    /// `low` or `high`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Degradation::Low => "low",
            Degradation::High => "high",
        }
    }
}

/// `low` or `high`.
impl fmt::Display for Degradation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Another tool that partly covers a tool's capability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alternative {
    pub(crate) tool: Arc<str>,
    pub(crate) method: Arc<str>,
    pub(crate) degradation: Arc<str>,
    pub(crate) level: Degradation,
}

impl Alternative {
    /// A low-degradation alternative: `tool`, used by `method`, losing `degradation`.
    pub fn low(tool: &str, method: &str, degradation: &str) -> Self {
        Alternative::new(tool, method, degradation, Degradation::Low)
    }

    /// A high-degradation alternative.
    pub fn high(tool: &str, method: &str, degradation: &str) -> Self {
        Alternative::new(tool, method, degradation, Degradation::High)
    }

    fn new(tool: &str, method: &str, degradation: &str, level: Degradation) -> Self {
        Alternative {
            tool: tool.into(),
            method: method.into(),
            degradation: degradation.into(),
            level,
        }
    }

    /// The tool.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// How it is used instead.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// What is lost.
    pub fn degradation(&self) -> &str {
        &self.degradation
    }

    /// How much is lost.
    pub fn level(&self) -> Degradation {
        self.level
    }
}

/// One tool's entry in the capability map.
///
/// ```
/// use tower_circuit_breaker::expediter::{Alternative, ToolSpec};
///
/// let grep = ToolSpec::new("Grep")
///     .provides("content search across files")
///     .alternative(Alternative::low("Bash", "rg or grep command", "loses Grep's built-in output formatting"))
///     .alternative(Alternative::high("Read", "read suspected files directly", "requires knowing which files to check; no broad search"))
///     .fallback("ask the user which files to examine");
/// assert_eq!(grep.name(), "Grep");
/// ```
#[derive(Clone)]
pub struct ToolSpec {
    pub(crate) name: Arc<str>,
    pub(crate) provides: Arc<str>,
    pub(crate) alternatives: Vec<Alternative>,
    pub(crate) fallback: Option<Arc<str>>,
    pub(crate) breaker: Option<Builder>,
    pub(crate) precheck: Option<Arc<dyn PreCheck>>,
    pub(crate) blame: Option<BlameRule>,
}

impl ToolSpec {
    /// A tool named `name` (the name the agent and the model use).
    pub fn new(name: &str) -> Self {
        ToolSpec {
            name: name.into(),
            provides: "".into(),
            alternatives: Vec::new(),
            fallback: None,
            breaker: None,
            precheck: None,
            blame: None,
        }
    }

    /// What it provides, in one line.
    pub fn provides(mut self, capability: &str) -> Self {
        self.provides = capability.into();
        self
    }

    /// Adds an alternative. Low-degradation ones are tried before high ones, each in the
    /// order given.
    pub fn alternative(mut self, alternative: Alternative) -> Self {
        self.alternatives.push(alternative);
        self
    }

    /// The manual fallback: what to ask of the user when no tool can stand in.
    pub fn fallback(mut self, ask: &str) -> Self {
        self.fallback = Some(ask.into());
        self
    }

    /// The breaker settings for this tool (its name and kill switch are set by the
    /// expediter). By default 3 consecutive failures, a probe every 3rd
    /// attempt after opening.
    pub fn breaker(mut self, builder: Builder) -> Self {
        self.breaker = Some(builder);
        self
    }

    /// A pre-call check run before the breaker is consulted.
    pub fn precheck(mut self, check: impl PreCheck + 'static) -> Self {
        self.precheck = Some(Arc::new(check));
        self
    }

    /// Whose fault each of the tool's errors is (by default [`Blame::of`]): an error
    /// the rule calls the caller's is not counted against the tool's breaker or the
    /// failure budget. The rule sees the error's text.
    ///
    /// ```
    /// use tower_circuit_breaker::expediter::{Blame, ToolSpec};
    ///
    /// // Every error of this tool is its own, even "not found".
    /// let search = ToolSpec::new("web_search")
    ///     .fallback("ask the user")
    ///     .blame(|_: &str| Blame::Tool);
    /// # let _ = search;
    /// ```
    pub fn blame(mut self, rule: impl Fn(&str) -> Blame + Send + Sync + 'static) -> Self {
        self.blame = Some(Arc::new(rule));
        self
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it provides.
    pub fn capability(&self) -> &str {
        &self.provides
    }

    /// Its alternatives, in routing order.
    pub fn alternatives(&self) -> &[Alternative] {
        &self.alternatives
    }

    /// Its manual fallback.
    pub fn manual_fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// Alternatives in routing order: low degradation first, then high, each in the
    /// order declared.
    pub(crate) fn routing_order(&self) -> impl Iterator<Item = &Alternative> {
        let low = self
            .alternatives
            .iter()
            .filter(|a| a.level == Degradation::Low);
        low.chain(
            self.alternatives
                .iter()
                .filter(|a| a.level == Degradation::High),
        )
    }
}

impl fmt::Debug for ToolSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSpec")
            .field("name", &self.name)
            .field("provides", &self.provides)
            .field("alternatives", &self.alternatives)
            .field("fallback", &self.fallback)
            .field("precheck", &self.precheck.is_some())
            .field(
                "blame",
                &if self.blame.is_some() {
                    "custom"
                } else {
                    "Blame::of"
                },
            )
            .finish()
    }
}

/// Checks a whole map: unique names, known alternatives other than the tool itself, and
/// every tool with an alternative or a fallback.
///
/// Alternatives may form cycles (two search APIs backing each other up): routing sends
/// work only to an alternative that can be used now, so a route never comes back to
/// the tool it left while that tool is down (see `routing::search`).
pub(crate) fn validate<'a>(
    tools: impl IntoIterator<Item = &'a ToolSpec> + Clone,
) -> Result<(), ExpediterError> {
    let mut names = HashSet::new();
    for tool in tools.clone() {
        if tool.name.is_empty() {
            return Err(ExpediterError::EmptyToolName);
        }
        if !names.insert(tool.name.clone()) {
            return Err(ExpediterError::DuplicateTool(tool.name.to_string()));
        }
    }
    for tool in tools {
        if tool.alternatives.is_empty() && tool.fallback.is_none() {
            return Err(ExpediterError::NoAlternativeOrFallback(
                tool.name.to_string(),
            ));
        }
        for alt in &tool.alternatives {
            if alt.tool == tool.name {
                return Err(ExpediterError::SelfAlternative(tool.name.to_string()));
            }
            if !names.contains(&alt.tool) {
                return Err(ExpediterError::UnknownAlternative {
                    tool: tool.name.to_string(),
                    alternative: alt.tool.to_string(),
                });
            }
        }
    }
    Ok(())
}
