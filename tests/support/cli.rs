//! Running the `hactl` binary from integration tests, shared by the test files.
//!
//! Use from a test file with `#[path = "support/cli.rs"] mod cli_support;`.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// Runs the `hactl` binary built for these tests.
pub fn hactl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hactl"))
        .args(args)
        .output()
        .expect("run hactl")
}

/// Exit code, stdout and stderr, for assertion messages.
pub fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `hactl up --yes`, which must succeed; returns its stdout.
pub fn up_ok(inventory: &Path) -> String {
    let out = hactl(&["up", "-i", inventory.to_str().unwrap(), "--yes"]);
    assert!(out.status.success(), "hactl up failed:\n{}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `hactl status -o json`: its exit code and document.
pub fn status_json(inventory: &Path) -> (i32, serde_json::Value) {
    let out = hactl(&["status", "-i", inventory.to_str().unwrap(), "-o", "json"]);
    let json =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("status JSON: {e}\n{}", text(&out)));
    (out.status.code().unwrap_or(-1), json)
}
