//! Every etcd bench script (`bench/`) once, in its quick mode (docs/development/benchmarks.md):
//! they are code, and a bench nobody runs breaks unnoticed. Each checks the script runs through
//! on a lab and prints its figures; the figures of these runs are not reported anywhere.

use crate::support::bench::run_quick;

#[test]
fn up_bench_runs_on_three_members() {
    run_quick(
        "up_bench_runs_on_three_members",
        "up.sh",
        &["3"],
        "3 members: cold up",
        None,
    );
}

#[test]
fn vip_failover_bench_runs_one_cut() {
    run_quick(
        "vip_failover_bench_runs_one_cut",
        "vip_failover.sh",
        &["1"],
        "VIP failover after a power cut of the holder (1 runs",
        None,
    );
}

#[test]
fn etcd_upgrade_bench_runs() {
    run_quick(
        "etcd_upgrade_bench_runs",
        "etcd_upgrade.sh",
        &[],
        "3-member etcd upgrade 3.4.23 -> 3.5.16: hactl up",
        None,
    );
}

#[test]
fn rotate_ca_bench_runs() {
    run_quick(
        "rotate_ca_bench_runs",
        "rotate_ca.sh",
        &[],
        "etcd CA rotation, 3 members",
        None,
    );
}

#[test]
fn replace_bench_runs_on_8_mb() {
    run_quick(
        "replace_bench_runs_on_8_mb",
        "replace.sh",
        &["8"],
        "RESULT writes_during_maintenance",
        None,
    );
}

#[test]
fn recover_bench_runs_on_8_mb() {
    run_quick(
        "recover_bench_runs_on_8_mb",
        "recover.sh",
        &["8"],
        "RESULT recover_all",
        None,
    );
}
