//! Shared by the test files: an agent's capability map of six tools (Grep, Bash, Read, Write, Edit,
//! WebSearch; Edit declared since Write names it), reproducible randomness, and yields.
#![allow(dead_code)] // each test file uses its own subset

pub(crate) mod counts;
pub(crate) mod reply;
pub(crate) mod tool;

use tower_circuit_breaker::expediter::{Alternative, ToolSpec};

pub(crate) fn grep_spec() -> ToolSpec {
    ToolSpec::new("Grep")
        .provides("content search across files")
        .alternative(Alternative::low(
            "Bash",
            "rg or grep command",
            "loses Grep's built-in output formatting",
        ))
        .alternative(Alternative::high(
            "Read",
            "read suspected files directly",
            "requires knowing which files to check; no broad search",
        ))
        .fallback("ask the user which files to examine")
}

pub(crate) fn bash_spec() -> ToolSpec {
    ToolSpec::new("Bash")
        .provides("command execution, build tools, git operations")
        .fallback("report commands that need to be run manually")
}

pub(crate) fn read_spec() -> ToolSpec {
    ToolSpec::new("Read")
        .provides("file content inspection")
        .alternative(Alternative::low(
            "Bash",
            "cat or head command",
            "loses line numbering and truncation safety",
        ))
        .fallback("ask the user to paste file contents")
}

pub(crate) fn write_spec() -> ToolSpec {
    ToolSpec::new("Write")
        .provides("file creation")
        .alternative(Alternative::low(
            "Edit",
            "create via full-file edit",
            "requires file to already exist for Edit",
        ))
        .alternative(Alternative::high(
            "Bash",
            "echo/cat heredoc",
            "loses Write's atomic file creation",
        ))
        .fallback("output file contents for the user to save manually")
}

pub(crate) fn edit_spec() -> ToolSpec {
    ToolSpec::new("Edit")
        .provides("file modification")
        .fallback("output the change for the user to apply manually")
}

pub(crate) fn websearch_spec() -> ToolSpec {
    ToolSpec::new("WebSearch")
        .provides("external information retrieval")
        .fallback("state what information is needed; ask user to provide it")
}

/// xorshift64*: reproducible randomness without a dependency.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Lets other tasks run `n` times.
pub(crate) async fn yields(n: u64) {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
}
