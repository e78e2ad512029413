//! `hactl maintenance start` on the control-plane host that holds both leader-election Leases,
//! with a real control plane (the binaries of `HACTL_KUBE_BIN_DIR`, or of the cache
//! `scripts/kube-binaries.sh` builds; never skipped as root): the Leases move to another host
//! before the host's apiserver stops (hactl waits for the handover right after stopping its
//! kube-scheduler and kube-controller-manager), each Lease changes hands exactly once, and
//! `complete` brings everything back. (The drain itself is proven in `kube_labs::units_and_drain`.)

use crate::support::kube as kube_support;
use crate::support::lab as lab_support;

use std::time::Duration;

use kube_support::{text, KubeLab};
use lab_support::eventually;

fn position(j: &[serde_json::Value], step: &str, phase: &str) -> Option<usize> {
    j.iter().position(|e| e["step"] == step && e["phase"] == phase)
}

fn transitions(k: &KubeLab, lease: &str) -> i64 {
    k.kubectl_ok(&[
        "-n",
        "kube-system",
        "get",
        "lease",
        lease,
        "-o",
        "jsonpath={.spec.leaseTransitions}",
    ])
    .trim()
    .parse()
    .unwrap_or(0)
}

#[test]
fn maintenance_on_the_lease_holder_hands_both_leases_over_first() {
    let name = "maintenance_on_the_lease_holder_hands_both_leases_over_first";
    let Some(k) = KubeLab::up(name, 3, 2, 0) else {
        return;
    };
    let before = k.wait_leases(Duration::from_secs(120), |h| h.starts_with("cp"));
    let holder = before["kube-system/kube-controller-manager"].clone();
    // Both Leases on one host: stop the other hosts' schedulers until `holder` leads them too.
    if before["kube-system/kube-scheduler"] != holder {
        let others: Vec<String> = k.control_planes().into_iter().filter(|h| *h != holder).collect();
        for h in &others {
            k.lab.exec_ok(h, &["systemctl", "stop", "kube-scheduler"]);
        }
        k.wait_leases(Duration::from_secs(60), |h| h == holder);
        for h in &others {
            k.lab.exec_ok(h, &["systemctl", "start", "kube-scheduler"]);
        }
    }
    let cm_before = transitions(&k, "kube-controller-manager");
    let sched_before = transitions(&k, "kube-scheduler");

    let out = k.hactl(&["maintenance", "start", "--yes", &holder]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let j = k.journal(&format!("maintenance-{holder}"));
    let handed = position(&j, "lease-handover", "done")
        .unwrap_or_else(|| panic!("no lease handover in the journal: {j:?}"));
    let cm_stopped = position(&j, "stop-kube-controller-manager.service", "done").unwrap();
    let sched_stopped = position(&j, "stop-kube-scheduler.service", "done").unwrap();
    let api_stop = position(&j, "stop-kube-apiserver.service", "started")
        .unwrap_or_else(|| panic!("the apiserver was not stopped: {j:?}"));
    assert!(
        sched_stopped < cm_stopped && cm_stopped < handed && handed < api_stop,
        "order: scheduler, controller-manager, Lease handover, apiserver: {j:?}"
    );
    let after = k
        .lease_holders_via_kubectl()
        .expect("the Leases are readable through the VIP");
    assert!(
        after.values().all(|h| !h.is_empty() && *h != holder),
        "the Leases are still on {holder}: {after:?}"
    );
    assert_eq!(transitions(&k, "kube-controller-manager"), cm_before + 1);
    assert_eq!(transitions(&k, "kube-scheduler"), sched_before + 1);
    println!("{name}: Leases moved {holder} → {after:?}");

    let out = k.hactl(&["maintenance", "complete", &holder]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let mut last = (0, serde_json::Value::Null);
    assert!(
        eventually(Duration::from_secs(120), || {
            last = k.status();
            last.0 == 0
        }),
        "not healthy after complete: {}",
        last.1
    );
}
