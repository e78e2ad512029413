//! C4 with load balancers (docs/recovery.md, "Acceptance tests"): on a lab of 3 control-plane hosts
//! and 2 load balancers (real etcd, HAProxy, keepalived), `hactl maintenance start cp1` puts
//! cp1's `etcd-client` server in MAINT on every HAProxy before etcd stops, clients through the
//! VIP keep writing the whole time, and `complete` brings the server back UP. Then C6 on the same
//! lab: a `start` that dies at stage Drain (`HACTL_CRASH_AFTER=stage-Drain`), then `complete`,
//! which cancels: nothing restarted because nothing was stopped, every member and backend
//! healthy, the lock released.
//! Needs root; without it the test prints `SKIPPED <name>: needs root`.

use crate::support::cli as cli_support;
use crate::support::lab as lab_support;
use crate::support::writer as writer_support;

use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use cli_support::hactl_env;
use lab_support::{eventually, TestLab};
use writer_support::VipWriter;

fn hactl(inv: &std::path::Path, args: &[&str]) -> Output {
    cli_support::hactl_in(inv, args)
}

/// The newest journal of a run whose name starts with `prefix`: (step, phase) in order.
fn journal(state: &std::path::Path, prefix: &str) -> Vec<(String, String)> {
    let mut runs: Vec<_> = std::fs::read_dir(state.join("runs"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .collect();
    runs.sort_by_key(|e| e.metadata().unwrap().modified().unwrap());
    let path = runs.last().expect("a run").path().join("journal.jsonl");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["step"].as_str().unwrap_or_default().to_string(),
                v["phase"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn pos(j: &[(String, String)], step: &str, phase: &str) -> usize {
    j.iter()
        .position(|(s, p)| s == step && p == phase)
        .unwrap_or_else(|| panic!("no {step} {phase} in {j:?}"))
}

/// `hactl-haproxy is etcd-client SERVER STATE` on `lb`.
fn server_is(lab: &TestLab, lb: &str, server: &str, state: &str) -> bool {
    lab.exec(
        lb,
        &[
            "/usr/local/sbin/hactl-haproxy",
            "is",
            "etcd-client",
            server,
            state,
        ],
    )
    .status
    .success()
}

#[test]
fn maintenance_drains_haproxy_before_etcd_stops_and_vip_clients_keep_writing() {
    let name = "maintenance_drains_haproxy_before_etcd_stops_and_vip_clients_keep_writing";
    let Some(lab) = TestLab::up(name, 3, 2, 0, "trixie") else {
        return;
    };
    let inv = lab.inventory().to_path_buf();
    let state = inv.parent().unwrap().join("state");
    let o = hactl(&inv, &["up", "--yes"]);
    assert!(o.status.success());
    for lb in ["lb1", "lb2"] {
        assert!(eventually(Duration::from_secs(30), || server_is(
            &lab, lb, "cp1", "UP"
        )));
    }

    // A writer through VIP:2379 from cp2 with hactl's client certificate.
    let lab = Arc::new(lab);
    let writer = VipWriter::start(lab.clone(), "cp2", "vip-writer");
    std::thread::sleep(Duration::from_secs(2));

    // Without --yes and without a terminal, start refuses before anything changes, naming the flag.
    let o = hactl(&inv, &["maintenance", "start", "cp1"]);
    assert_eq!(o.status.code(), Some(3), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--yes"));
    assert!(
        !state.join("maintenance/cp1.json").exists(),
        "a refused start recorded a stage"
    );

    // --- C4: start. The order is journaled; HAProxy shows MAINT before etcd stops.
    let o = hactl(&inv, &["maintenance", "start", "--yes", "cp1"]);
    assert!(o.status.success());
    let j = journal(&state, "maintenance-cp1");
    assert!(
        pos(&j, "lb-drain", "done") < pos(&j, "stop-etcd", "started"),
        "HAProxy drained after etcd stopped: {j:?}"
    );
    for lb in ["lb1", "lb2"] {
        assert!(server_is(&lab, lb, "cp1", "MAINT"), "cp1 not in MAINT on {lb}");
    }
    assert!(!lab
        .exec("cp1", &["systemctl", "is-active", "--quiet", "etcd"])
        .status
        .success());
    // etcd is fenced: a start (by hand, or at boot) fails its assertion.
    assert!(
        !lab.exec("cp1", &["systemctl", "start", "etcd"]).status.success(),
        "etcd started on cp1 during maintenance"
    );
    assert!(lab
        .exec(
            "cp1",
            &[
                "test",
                "-e",
                "/etc/systemd/system/etcd.service.d/hactl-fence.conf"
            ]
        )
        .status
        .success());
    std::thread::sleep(Duration::from_secs(3));

    // --- complete: etcd caught up, then the backend returns.
    let o = hactl(&inv, &["maintenance", "complete", "cp1"]);
    assert!(o.status.success());
    let j = journal(&state, "maintenance-cp1");
    assert!(
        pos(&j, "start-etcd", "done") < pos(&j, "lb-ready", "done"),
        "{j:?}"
    );
    for lb in ["lb1", "lb2"] {
        assert!(server_is(&lab, lb, "cp1", "UP"), "cp1 not UP on {lb}");
    }
    assert!(
        !lab.exec(
            "cp1",
            &[
                "test",
                "-e",
                "/etc/systemd/system/etcd.service.d/hactl-fence.conf"
            ]
        )
        .status
        .success(),
        "complete left the fence"
    );

    // --- C6: `complete` issued during Drain goes straight to Complete. The start dies right
    // after entering Drain, as a killed operator session would: the record says Drain and the
    // dead process's operation lock is left behind.
    let o = hactl_env(
        &inv,
        &["maintenance", "start", "--yes", "cp1"],
        &[("HACTL_CRASH_AFTER", "stage-Drain")],
    );
    assert_eq!(o.status.code(), Some(137), "C6: start did not stop at Drain");
    let record = |state: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(state.join("maintenance/cp1.json")).unwrap()).unwrap()
    };
    assert_eq!(record(&state)["stage"], "Drain");
    let lock = state.join("locks/cluster.lock");
    assert!(lock.exists(), "the crashed start left no lock to release");
    // In Drain cp1 holds the budget: the plan for another host is refused (plan takes no lock,
    // so the stale one stays for complete to take over and release).
    assert_eq!(
        hactl(&inv, &["maintenance", "plan", "cp2"]).status.code(),
        Some(2),
        "C6: cp2 would be let in while cp1 is in Drain"
    );
    let o = hactl(&inv, &["maintenance", "complete", "cp1"]);
    assert!(o.status.success(), "C6: complete during Drain failed");
    let j = journal(&state, "maintenance-cp1");
    assert!(pos(&j, "cancel", "done") < pos(&j, "uncordon", "skipped"));
    pos(&j, "stage-Complete", "done");
    for step in [
        "start-etcd",
        "start-kube-apiserver.service",
        "lb-ready",
        "vip-restore",
    ] {
        assert!(
            !j.iter().any(|(s, p)| s == step && p == "done"),
            "C6: complete restarted {step} although nothing was stopped: {j:?}"
        );
    }
    assert_eq!(record(&state)["stage"], "Complete");
    assert!(!lock.exists(), "C6: the operation lock was not released");
    // Nothing left stopped: every member healthy, every backend UP on every balancer.
    assert!(lab
        .exec(
            "cp2",
            &["/usr/local/sbin/hactl-etcdctl", "endpoint", "health", "--cluster"]
        )
        .status
        .success());
    for lb in ["lb1", "lb2"] {
        for cp in ["cp1", "cp2", "cp3"] {
            assert!(server_is(&lab, lb, cp, "UP"), "C6: {cp} not UP on {lb}");
        }
    }
    // The maintenance lock is free again: the budget lets a host in.
    let o = hactl(&inv, &["maintenance", "plan", "cp2"]);
    assert_eq!(o.status.code(), Some(0), "C6: cp1 still holds the budget");
    std::thread::sleep(Duration::from_secs(2));
    let (w, f) = writer.stop();
    eprintln!("writer through the VIP: {w} writes, {f} failed");
    assert!(w > 5, "the writer barely ran: {w}");
    assert_eq!(f, 0, "writes through the VIP failed during maintenance");
    if let Ok(lab) = Arc::try_unwrap(lab) {
        lab.down().unwrap();
    }
}
