//! The demo project the agent migrates: a few files under the system temp directory,
//! removed when the agent is done.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

const FILES: &[(&str, &str)] = &[
    (
        "agent.toml",
        "[api]\nendpoint = \"https://api.acme.example\"\nversion = \"v2\"\n",
    ),
    (
        "src/main.rs",
        "mod client;\nmod upload;\n\nfn main() {\n    let client = client::connect();\n    upload::send(&client, \"report.csv\");\n}\n",
    ),
    (
        "src/client.rs",
        "pub fn connect() -> acme_api::Client {\n    // deprecated: legacy_auth() is removed in acme-api 3.0\n    let token = acme_api::legacy_auth(\"demo\", \"secret\");\n    acme_api::Client::new(token)\n}\n\npub fn all_items(client: &acme_api::Client) -> Vec<acme_api::Item> {\n    // deprecated: old_paginate() is removed in acme-api 3.0\n    acme_api::old_paginate(client, \"items\")\n}\n",
    ),
    (
        "src/upload.rs",
        "pub fn send(client: &acme_api::Client, path: &str) {\n    // deprecated: v1_upload() is removed in acme-api 3.0\n    acme_api::v1_upload(client, path);\n}\n",
    ),
];

/// A small project under the system temp directory, unique to this process, removed
/// when dropped.
pub(crate) struct Workspace {
    root: PathBuf,
}

impl Workspace {
    pub(crate) fn create() -> io::Result<Workspace> {
        // Unique to this process and to this workspace of it (tests run two at once).
        static MADE: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "tower-circuit-breaker-agent-{}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        ));
        // Whatever an earlier process with the same id left behind goes first.
        let _ = std::fs::remove_dir_all(&root);
        let workspace = Workspace { root };
        for (name, text) in FILES {
            let path = workspace.root.join(name);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(path, text)?;
        }
        Ok(workspace)
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
