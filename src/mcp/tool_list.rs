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
    /// A longer description (in characters) and the tool is refused.
    pub(crate) max_description: usize,
    /// A longer title (in characters) and the tool is refused.
    pub(crate) max_title: usize,
    /// A larger input schema, or output schema, (as JSON) and the tool is refused.
    pub(crate) max_schema_bytes: usize,
    /// Larger annotations, icons and `_meta`, together (as JSON), and the tool is
    /// refused.
    pub(crate) max_other_bytes: usize,
    /// A larger definition, all of it (as JSON, as the model is offered it), and the
    /// tool is refused: the bound on what one tool adds to the model's context.
    pub(crate) max_definition_bytes: usize,
}

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits {
            max_tools: 1024,
            max_pages: 64,
            max_description: 16 * 1024,
            max_title: 1024,
            max_schema_bytes: 256 * 1024,
            max_other_bytes: 16 * 1024,
            max_definition_bytes: 288 * 1024,
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
/// of 1 to 128 letters, digits, `_`, `-` or `.`, unique; an input schema, and an output
/// schema if it has one, of `"type": "object"`, each within 256 KiB; a description
/// within 16 Ki characters and a title within 1,024; its annotations, icons and `_meta`
/// within 16 KiB together; and the whole definition, as the model is offered it, within
/// 288 KiB. A tool that fails is refused (and said why); a list with too many tools or
/// pages is refused whole.
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
    for (which, schema) in [
        ("input schema", Some(&tool.input_schema)),
        ("output schema", tool.output_schema.as_ref()),
    ] {
        let Some(schema) = schema else { continue };
        match schema.get("type") {
            Some(serde_json::Value::String(t)) if t == "object" => {}
            Some(other) => return Some(format!("its {which}'s type is {other}, not \"object\"")),
            None => return Some(format!("its {which} has no type (it must be \"object\")")),
        }
        if let Some(properties) = schema.get("properties") {
            if !properties.is_object() {
                return Some(format!("its {which}'s properties are not an object"));
            }
        }
    }
    let chars = |text: Option<&str>| text.map_or(0, |t| t.chars().count());
    let other = (tool.annotations.as_ref().map_or(0, json_bytes))
        .saturating_add(tool.icons.as_ref().map_or(0, json_bytes))
        .saturating_add(tool.meta.as_ref().map_or(0, json_bytes));
    let sizes = [
        (
            "description is",
            "characters",
            chars(tool.description.as_deref()),
            limits.max_description,
        ),
        (
            "title is",
            "characters",
            chars(tool.title.as_deref()),
            limits.max_title,
        ),
        (
            "input schema is",
            "bytes",
            json_bytes(&*tool.input_schema),
            limits.max_schema_bytes,
        ),
        (
            "output schema is",
            "bytes",
            tool.output_schema.as_deref().map_or(0, json_bytes),
            limits.max_schema_bytes,
        ),
        (
            "annotations, icons and _meta come to",
            "bytes",
            other,
            limits.max_other_bytes,
        ),
        (
            "definition is",
            "bytes",
            json_bytes(tool),
            limits.max_definition_bytes,
        ),
    ];
    for (part, unit, size, limit) in sizes {
        if size > limit {
            return Some(format!("its {part} {size} {unit}, more than {limit}"));
        }
    }
    None
}

/// The size of `value` as JSON (as large as can be, if it cannot be written).
fn json_bytes<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX, |v| v.len())
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
    fn every_part_of_a_definition_is_held_to_a_size_and_an_output_schema_to_an_object() {
        let big = "b".repeat(40);
        let listed = vec![
            tool(json!({"name": "title", "title": big, "inputSchema": {"type": "object"}})),
            tool(json!({"name": "out", "inputSchema": {"type": "object"},
                "outputSchema": {"type": "object", "description": big}})),
            tool(
                json!({"name": "out_array", "inputSchema": {"type": "object"},
                "outputSchema": {"type": "array"}}),
            ),
            tool(json!({"name": "notes", "inputSchema": {"type": "object"},
                "annotations": {"title": big}})),
            tool(json!({"name": "meta", "inputSchema": {"type": "object"},
                "_meta": {"k": big}})),
            tool(
                json!({"name": "whole", "description": "d".repeat(100), "title": "t".repeat(10),
                "inputSchema": {"type": "object", "description": "s"}}),
            ),
            tool(
                json!({"name": "small", "title": "Small", "inputSchema": {"type": "object"},
                "outputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}),
            ),
        ];
        let limits = ToolLimits {
            max_title: 20,
            max_schema_bytes: 40,
            max_other_bytes: 30,
            max_definition_bytes: 140,
            ..ToolLimits::default()
        };
        let list = ToolList::check(listed, &limits);
        assert_eq!(list.names().collect::<Vec<_>>(), ["small"]);
        let why = |name: &str| {
            list.refusal(name)
                .map(|r| r.why.clone())
                .unwrap_or_default()
        };
        assert!(
            why("title").contains("its title is 40 characters, more than 20"),
            "{}",
            why("title")
        );
        assert!(why("out").contains("output schema"), "{}", why("out"));
        assert!(
            why("out_array").contains("output schema's type is \"array\""),
            "{}",
            why("out_array")
        );
        assert!(
            why("notes").contains("annotations, icons and _meta"),
            "{}",
            why("notes")
        );
        assert!(
            why("meta").contains("annotations, icons and _meta"),
            "{}",
            why("meta")
        );
        assert!(why("whole").contains("its definition"), "{}", why("whole"));
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
