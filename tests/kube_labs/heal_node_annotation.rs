//! `hactl heal` writes its retry record onto a real Node object as the annotation
//! `hactl.io/remediation-for` (real control plane: the binaries of `HACTL_KUBE_BIN_DIR`, or of
//! the cache `scripts/kube-binaries.sh` builds; never skipped as root). The remediation is the one
//! heal records: cp3's etcd loses its data and fails with its old identity, so heal replaces it on
//! its own host (a plain restart, the first rung, is not a recorded remediation).
//!
//! The Node is the one cp3's own kubelet registered (every control-plane host runs one).

use crate::support::kube as kube_support;
use crate::support::lab as lab_support;

use std::time::Duration;

use kube_support::{text, KubeLab};
use lab_support::eventually;

#[test]
fn heal_annotates_the_node_of_the_member_it_repaired() {
    let name = "heal_annotates_the_node_of_the_member_it_repaired";
    let Some(k) = KubeLab::up(name, 3, 2, 0) else {
        return;
    };
    k.set_inventory(|t| format!("{t}  heal:\n    unhealthyTimeout: 2s\n"));
    assert!(
        eventually(Duration::from_secs(180), || k
            .kubectl(&["get", "node", "cp3"])
            .status
            .success()),
        "cp3's kubelet did not register its Node"
    );

    // cp3's etcd loses its data and crash-loops with its old identity: heal's record-keeping
    // remediation (a replace on its own host; a plain restart is not recorded as one).
    k.lab.exec_ok(
        "cp3",
        &["sh", "-c", "pkill -9 -x etcd; rm -rf /var/lib/etcd/member"],
    );
    let mut out = String::new();
    let repaired = eventually(Duration::from_secs(400), || {
        let o = k.hactl(&["heal", "--once"]);
        out = text(&o);
        out.contains("Node cp3: hactl.io/remediation-for=")
    });
    assert!(repaired, "heal did not write the annotation: {out}");
    let value = k.kubectl_ok(&[
        "get",
        "node",
        "cp3",
        "-o",
        "jsonpath={.metadata.annotations.hactl\\.io/remediation-for}",
    ]);
    let record: serde_json::Value = serde_json::from_str(&value).unwrap_or_else(|e| panic!("{e}: {value:?}"));
    assert!(record["retryCount"].is_u64(), "{record}");
    assert!(
        record["lastRemediation"]
            .as_str()
            .is_some_and(
                |t| time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).is_ok()
            ),
        "{record}"
    );
    println!("{name}: Node cp3 carries hactl.io/remediation-for={value}");
    let state = k.lab.exec("cp3", &["systemctl", "is-active", "etcd"]);
    assert_eq!(
        String::from_utf8_lossy(&state.stdout).trim(),
        "active",
        "heal restarted etcd on cp3"
    );
}
