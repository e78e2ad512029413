//! `hactl heal` writes its retry record onto a real Node object as the annotation
//! `hactl.io/remediation-for` (real control plane: the binaries of `HACTL_KUBE_BIN_DIR`, or of
//! the cache `scripts/kube-binaries.sh` builds; never skipped as root). The remediation is the one
//! heal records: the host's etcd loses its data and fails with its old identity, so heal replaces
//! it on its own host (a plain restart, the first rung, is not a recorded remediation).
//!
//! The Node is the one the host's own kubelet registered (every control-plane host runs one). It
//! runs on the lab of `replace.rs`, after its replace (cp2: the member neither replaced nor new).

use crate::support::kube as kube_support;
use crate::support::lab as lab_support;

use std::time::Duration;

use kube_support::{text, KubeLab};
use lab_support::eventually;

/// Run by `replace`'s test on its lab once the replace is checked (one bring-up for both), on
/// `host`, a control plane with an etcd member.
pub fn heal_annotates_the_node_of_the_member_it_repaired(k: &KubeLab, host: &str) {
    let name = "heal_annotates_the_node_of_the_member_it_repaired";
    k.set_inventory(|t| format!("{t}  heal:\n    unhealthyTimeout: 2s\n"));
    assert!(
        eventually(Duration::from_secs(180), || k
            .kubectl(&["get", "node", host])
            .status
            .success()),
        "{host}'s kubelet did not register its Node"
    );

    // The host's etcd loses its data and crash-loops with its old identity: heal's
    // record-keeping remediation (a replace on its own host; a plain restart is not recorded as
    // one).
    k.lab.exec_ok(
        host,
        &["sh", "-c", "pkill -9 -x etcd; rm -rf /var/lib/etcd/member"],
    );
    let mut out = String::new();
    let repaired = eventually(Duration::from_secs(400), || {
        let o = k.hactl(&["heal", "--once"]);
        out = text(&o);
        out.contains(&format!("Node {host}: hactl.io/remediation-for="))
    });
    assert!(repaired, "heal did not write the annotation: {out}");
    let value = k.kubectl_ok(&[
        "get",
        "node",
        host,
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
    println!("{name}: Node {host} carries hactl.io/remediation-for={value}");
    let state = k.lab.exec(host, &["systemctl", "is-active", "etcd"]);
    assert_eq!(
        String::from_utf8_lossy(&state.stdout).trim(),
        "active",
        "heal restarted etcd on {host}"
    );
}
