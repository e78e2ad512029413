//! The Kubernetes bench scripts (`bench/`) once each, in their quick mode
//! (docs/development/benchmarks.md): they are code, and a bench nobody runs breaks unnoticed.
//! Each checks the script runs through on a lab with the real binaries and prints its figures.

use crate::support::bench::run_quick;
use crate::support::kube::bin_dir;

#[test]
fn kubernetes_up_bench_runs() {
    let name = "kubernetes_up_bench_runs";
    let Some(dir) = bin_dir(name) else { return };
    run_quick(
        name,
        "kubernetes_up.sh",
        &["--quick"],
        "RESULT cold up with Kubernetes",
        Some(&dir),
    );
}

#[test]
fn api_availability_bench_runs_quick() {
    let name = "api_availability_bench_runs_quick";
    let Some(dir) = bin_dir(name) else { return };
    run_quick(
        name,
        "api_availability.sh",
        &["--quick"],
        "RESULT maintenance",
        Some(&dir),
    );
}
