//! The tools: each one's spec, breaker and layer, in the order they were added.

use std::collections::HashMap;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use crate::fallback::NoFallback;
use crate::DeliveryGroup;
use crate::{Builder, CircuitBreakerHandle, CircuitBreakerLayer, KillSwitch};

use super::blame::ToolClassifier;
use super::capability::ToolSpec;
use super::category::Categorizer;
use super::error::ExpediterError;
use super::events::{observer, ToolEvent};

/// The breaker layer for one tool's service (see
/// [`Expediter::layer`](super::Expediter::layer)): no fallback, and the tool's blame
/// rule as its classifier.
pub type ToolLayer = CircuitBreakerLayer<NoFallback, ToolClassifier>;

/// One tool: its spec, its breaker, and the layer that wraps its service.
pub(crate) struct Tool {
    pub(crate) spec: ToolSpec,
    pub(crate) handle: CircuitBreakerHandle,
    pub(crate) layer: ToolLayer,
}

impl Tool {
    /// Builds a tool's breaker: its own settings or the default, the shared kill
    /// switch, the observer that forwards what it does to the ledger, and the delivery
    /// group of all the tools' breakers.
    pub(crate) fn build(
        spec: ToolSpec,
        default: &Builder,
        kill: &KillSwitch,
        categorizer: &Categorizer,
        events: Sender<ToolEvent>,
        delivery: &Arc<DeliveryGroup>,
    ) -> Result<Tool, ExpediterError> {
        let name = spec.name.clone();
        let layer = spec
            .breaker
            .clone()
            .unwrap_or_else(|| default.clone())
            .name(name.clone())
            .kill_switch(kill.clone())
            .on_event(observer(name, categorizer.clone(), events))
            .delivery_group(delivery.clone())
            .build()
            .map_err(|source| ExpediterError::Breaker {
                tool: spec.name.to_string(),
                source,
            })?
            .with_classifier(ToolClassifier::new(spec.blame.clone()));
        Ok(Tool {
            handle: layer.handle(),
            layer,
            spec,
        })
    }
}

/// The tools in the order they were added. Shared as an `Arc` and replaced whole when
/// a tool is added, so that readers hold no lock while they use it.
#[derive(Default, Clone)]
pub(crate) struct Toolbox {
    tools: Vec<Arc<Tool>>,
    index: HashMap<Arc<str>, usize>,
}

impl Toolbox {
    /// This toolbox with `tool` added (a copy, for a toolbox that is shared).
    pub(crate) fn with(mut self, tool: Tool) -> Toolbox {
        self.index.insert(tool.spec.name.clone(), self.tools.len());
        self.tools.push(Arc::new(tool));
        self
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Arc<Tool>> {
        self.index.get(name).map(|&i| &self.tools[i])
    }

    pub(crate) fn tools(&self) -> &[Arc<Tool>] {
        &self.tools
    }

    pub(crate) fn specs(&self) -> impl Iterator<Item = &ToolSpec> + Clone {
        self.tools.iter().map(|t| &t.spec)
    }
}
