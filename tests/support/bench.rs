//! The bench scripts (`bench/`) in their quick mode: each run once per CI, so none can rot
//! unnoticed. A bench prints figures and asserts nothing about time; here it must exit 0 and print
//! its result line. The figures of a quick run (a debug build of hactl, small data, one round,
//! lab tests running beside it) are not the ones docs/performance.md reports.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use super::lab::{have_root, in_memory};

/// Runs `bench/<script> <args>` from the repository with an explicit environment: `PATH`,
/// `HOME`, the Rust toolchain's variables and every `HACTL_*` variable of the test, then `HACTL`
/// (this build's binary), `BENCH_PROFILE=dev` (a bench that builds an example builds it like
/// the tests), `HACTL_LAB_IN_MEMORY` as the lab tests have it and, given one,
/// `HACTL_KUBE_BIN_DIR`. Asserts that it exits 0 and that its output holds `result` (the line
/// with its figures). Skips (printing why) without root.
pub fn run_quick(test: &str, script: &str, args: &[&str], result: &str, kube_bin_dir: Option<&Path>) {
    if !have_root(test) {
        return;
    }
    let repo = env!("CARGO_MANIFEST_DIR");
    let mut cmd = Command::new(Path::new(repo).join("bench").join(script));
    cmd.args(args).current_dir(repo).env_clear();
    for (k, v) in std::env::vars_os() {
        let name = k.to_string_lossy();
        let passed = [
            "PATH",
            "HOME",
            "CARGO_HOME",
            "RUSTUP_HOME",
            "RUSTUP_TOOLCHAIN",
            "CARGO_TARGET_DIR",
        ]
        .contains(&name.as_ref())
            || name.starts_with("HACTL_");
        if passed {
            cmd.env(&k, &v);
        }
    }
    cmd.env("HACTL", env!("CARGO_BIN_EXE_hactl"))
        .env("BENCH_PROFILE", "dev")
        .env("HACTL_LAB_IN_MEMORY", if in_memory() { "1" } else { "0" });
    if let Some(dir) = kube_bin_dir {
        cmd.env("HACTL_KUBE_BIN_DIR", dir);
    }
    let started = Instant::now();
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{test}: cannot run bench/{script}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!(
        "{test}: bench/{script} {} took {:.1} s\n{stdout}",
        args.join(" "),
        started.elapsed().as_secs_f64()
    );
    assert!(
        out.status.success(),
        "bench/{script} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains(result),
        "bench/{script} printed no `{result}` line:\n{stdout}\n{stderr}"
    );
}
