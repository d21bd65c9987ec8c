//! A server's tool list, checked before it is believed: [`ToolList`] keeps the tools
//! that passed, in the server's order, and says why each other one was refused.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use rmcp::model::Tool;

/// What a server's tool list may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ToolLimits {
    /// More tools than this and the whole list is refused.
    pub(crate) max_tools: usize,
    /// More pages than this and the whole list is refused.
    pub(crate) max_pages: usize,
    /// A longer description and the tool is refused.
    pub(crate) max_description: usize,
    /// A larger input schema (as JSON) and the tool is refused.
    pub(crate) max_schema_bytes: usize,
}

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits {
            max_tools: 1024,
            max_pages: 64,
            max_description: 16 * 1024,
            max_schema_bytes: 256 * 1024,
        }
    }
}

/// The longest tool name the MCP specification allows.
const MAX_NAME: usize = 128;

/// A tool the server listed but that was not believed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedTool {
    /// The name as the server sent it (cut short if very long).
    pub name: String,
    /// Why it was refused.
    pub why: String,
}

impl fmt::Display for RefusedTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`: {}", self.name, self.why)
    }
}

/// A server's tools as read when it last started (or changed its list), checked: names
/// of 1 to 128 letters, digits, `_`, `-` or `.`, unique; an input schema that is a JSON
/// object of `"type": "object"`, within a size; a description within a length. A tool
/// that fails is refused (and said why); a list with too many tools or pages is refused
/// whole.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolList {
    tools: Arc<[Tool]>,
    refused: Arc<[RefusedTool]>,
}

impl ToolList {
    /// The tools that passed, in the server's order.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// The tool named `name`, if it passed.
    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The names of the tools that passed.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().map(|t| &*t.name)
    }

    /// The tools refused, with why.
    pub fn refused(&self) -> &[RefusedTool] {
        &self.refused
    }

    /// The refusal of `name`, if it was refused.
    pub fn refusal(&self, name: &str) -> Option<&RefusedTool> {
        self.refused.iter().find(|r| r.name == name)
    }

    /// Checks every tool of a list.
    pub(crate) fn check(listed: Vec<Tool>, limits: &ToolLimits) -> ToolList {
        let mut seen = HashSet::new();
        let mut tools = Vec::new();
        let mut refused = Vec::new();
        for tool in listed {
            match refusal(&tool, limits, &seen) {
                Some(why) => refused.push(RefusedTool {
                    name: shown_name(&tool.name),
                    why,
                }),
                None => {
                    seen.insert(tool.name.to_string());
                    tools.push(tool);
                }
            }
        }
        ToolList {
            tools: tools.into(),
            refused: refused.into(),
        }
    }
}

/// Why a listed tool is not believed, if it is not.
fn refusal(tool: &Tool, limits: &ToolLimits, seen: &HashSet<String>) -> Option<String> {
    let name = &*tool.name;
    if name.is_empty() {
        return Some("its name is empty".into());
    }
    if name.chars().count() > MAX_NAME {
        return Some(format!("its name is longer than {MAX_NAME} characters"));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Some(format!(
            "its name has {bad:?}; tool names are letters, digits, `_`, `-` and `.`"
        ));
    }
    if seen.contains(name) {
        return Some("the server lists it twice; the first is kept".into());
    }
    match tool.input_schema.get("type") {
        Some(serde_json::Value::String(t)) if t == "object" => {}
        Some(other) => {
            return Some(format!(
                "its input schema's type is {other}, not \"object\""
            ))
        }
        None => return Some("its input schema has no type (it must be \"object\")".into()),
    }
    if let Some(properties) = tool.input_schema.get("properties") {
        if !properties.is_object() {
            return Some("its input schema's properties are not an object".into());
        }
    }
    let schema_bytes = serde_json::to_vec(&*tool.input_schema).map_or(usize::MAX, |v| v.len());
    if schema_bytes > limits.max_schema_bytes {
        return Some(format!(
            "its input schema is {schema_bytes} bytes, more than {}",
            limits.max_schema_bytes
        ));
    }
    if let Some(description) = &tool.description {
        let chars = description.chars().count();
        if chars > limits.max_description {
            return Some(format!(
                "its description is {chars} characters, more than {}",
                limits.max_description
            ));
        }
    }
    None
}

/// A name fit to print: control characters escaped, at most 80 characters.
fn shown_name(name: &str) -> String {
    let escaped: String = name.escape_debug().collect();
    match escaped.char_indices().nth(80) {
        Some((end, _)) => format!("{}…", &escaped[..end]),
        None => escaped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(value: serde_json::Value) -> Tool {
        serde_json::from_value(value).expect("a tool")
    }

    #[test]
    fn good_tools_pass_in_order_and_bad_ones_are_refused_with_why() {
        let listed = vec![
            tool(json!({"name": "read_file", "inputSchema": {"type": "object"}})),
            tool(json!({"name": "bad name", "inputSchema": {"type": "object"}})),
            tool(json!({"name": "", "inputSchema": {"type": "object"}})),
            tool(json!({"name": "arr", "inputSchema": {"type": "array"}})),
            tool(json!({"name": "untyped", "inputSchema": {}})),
            tool(json!({"name": "props", "inputSchema": {"type": "object", "properties": 3}})),
            tool(json!({"name": "read_file", "inputSchema": {"type": "object"}})),
            tool(
                json!({"name": "a.b-c_9", "description": "ok", "inputSchema": {"type": "object"}}),
            ),
            tool(json!({"name": "x".repeat(129), "inputSchema": {"type": "object"}})),
            tool(
                json!({"name": "wordy", "description": "w".repeat(20), "inputSchema": {"type": "object"}}),
            ),
        ];
        let limits = ToolLimits {
            max_description: 10,
            ..ToolLimits::default()
        };
        let list = ToolList::check(listed, &limits);
        assert_eq!(list.names().collect::<Vec<_>>(), ["read_file", "a.b-c_9"]);
        let refused: Vec<&str> = list.refused().iter().map(|r| r.why.as_str()).collect();
        assert_eq!(refused.len(), 8, "{refused:?}");
        assert!(refused[0].contains("' '"), "{}", refused[0]);
        assert_eq!(refused[1], "its name is empty");
        assert!(refused[2].contains("\"array\""));
        assert!(refused[3].contains("no type"));
        assert!(refused[4].contains("properties"));
        assert!(refused[5].contains("twice"));
        assert!(refused[6].contains("longer than 128"));
        assert!(refused[7].contains("20 characters"));
        assert!(list.refused()[6].name.ends_with('…'));
        assert!(list.get("read_file").is_some());
        assert_eq!(
            list.refusal("wordy").map(|r| r.name.as_str()),
            Some("wordy")
        );
    }

    #[test]
    fn a_name_with_control_characters_is_shown_escaped() {
        let list = ToolList::check(
            vec![tool(
                json!({"name": "evil\u{1b}[2J", "inputSchema": {"type": "object"}}),
            )],
            &ToolLimits::default(),
        );
        assert_eq!(list.refused()[0].name, "evil\\u{1b}[2J");
    }
}
