//! `hactl recover --from-snapshot` with a real control plane (the binaries of
//! `HACTL_KUBE_BIN_DIR`, or of the cache `scripts/kube-binaries.sh` builds; never skipped as
//! root): R1 stops the apiservers before etcd, R5 starts them again, the objects of the snapshot
//! come back through the VIP (the Secret decrypted with the cluster's encryption key) and the
//! later ones are gone, the Leases are taken again, and `up` has nothing to do. The state
//! directory is lost with the members and rebuilt from the snapshot's bundle first, so the
//! Secret read through the VIP proves the bundle holds what decrypts it. The lab has a worker:
//! R5.4 restarts its kubelet after the control planes' and it is a Ready Node again. Last,
//! `reset` stops and removes the control plane, etcd and the load balancers.

use crate::support::kube as kube_support;
use crate::support::lab as lab_support;

use std::path::PathBuf;
use std::time::Duration;

use kube_support::{text, KubeLab};
use lab_support::eventually;

#[test]
fn recover_from_snapshot_brings_back_kubernetes_objects_and_leases() {
    let name = "recover_from_snapshot_brings_back_kubernetes_objects_and_leases";
    // One worker: a node that is not an etcd host, whose kubelet R5.4 restarts too.
    let Some(k) = KubeLab::up_with(name, |o| {
        o.control_planes = 3;
        o.load_balancers = 2;
        o.workers = 1;
    }) else {
        return;
    };
    k.wait_leases(Duration::from_secs(120), |h| h.starts_with("cp"));
    k.kubectl_ok(&["create", "configmap", "before", "--from-literal=when=before"]);
    k.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "kept",
        "--from-literal=password=hunter2",
    ]);
    let tmp = tempfile::tempdir().unwrap();
    let snap = PathBuf::from(
        k.hactl_ok(&["etcd", "snapshot", "save", "--out", tmp.path().to_str().unwrap()])
            .trim(),
    );
    k.kubectl_ok(&["create", "configmap", "after", "--from-literal=when=after"]);

    // Lose 2 of 3: etcd killed and its data gone on cp2 and cp3.
    k.lose_etcd_members(&["cp2", "cp3"], "cp1");

    // The state directory is lost too (issue 13, point 2): it is rebuilt from the bundle written
    // beside the snapshot and the identity kept apart, and the recover runs from that.
    let bundle = snap.with_extension("bundle.age");
    assert!(bundle.is_file(), "no bundle beside {}", snap.display());
    let identity = tmp.path().join("identity.txt");
    std::fs::copy(k.state.join("backup-identity.txt"), &identity).unwrap();
    let config = hactl::kubernetes::files::ENCRYPTION_CONFIG;
    let sha = |h: &str| k.lab.exec_ok(h, &["sha256sum", config]);
    let config_before = sha("cp1");
    let lost = k.state.with_extension("lost");
    std::fs::rename(&k.state, &lost).unwrap();
    let restored = k.hactl_ok(&[
        "etcd",
        "snapshot",
        "restore-bundle",
        bundle.to_str().unwrap(),
        "--identity",
        identity.to_str().unwrap(),
    ]);
    assert!(restored.contains("encryption-key"), "{restored}");

    let invocation = || {
        k.lab.exec_ok(
            "w1",
            &[
                "systemctl",
                "show",
                "kubelet.service",
                "-p",
                "InvocationID",
                "--value",
            ],
        )
    };
    let worker_kubelet_before = invocation();
    let out = k.hactl(&["recover", "--from-snapshot", snap.to_str().unwrap(), "--yes"]);
    assert!(out.status.success(), "recover failed: {}", text(&out));
    // R5.4 restarted the worker's kubelet (its caches predate the restore).
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("w1: node, kubelet installed"),
        "{}",
        text(&out)
    );
    assert_ne!(
        invocation(),
        worker_kubelet_before,
        "the worker's kubelet was not restarted by the recover"
    );
    // As on new hosts, the control planes lose their encryption config: `up` writes it again
    // from the restored key (it re-issues the leaves the lost state held, from the same CAs, and
    // writes the admin kubeconfig), and it must be the same file.
    for h in k.control_planes() {
        k.lab.exec_ok(&h, &["rm", "-f", config]);
    }
    k.hactl_ok(&["up", "--yes"]);
    assert_eq!(
        sha("cp1"),
        config_before,
        "the encryption config differs after the restore"
    );

    // R1.2 (apiservers and controllers stopped) on every host before any R1.3 (etcd stopped);
    // R5.2 started every apiserver again.
    let j = k.journal(""); // recover run ids carry no prefix: the newest run
    let hosts = k.control_planes();
    let first_etcd_stop = hosts
        .iter()
        .filter_map(|h| KubeLab::journal_position(&j, &format!("R1.3@{h}"), "started"))
        .min()
        .unwrap_or_else(|| panic!("no R1.3 in the journal: {j:?}"));
    for h in &hosts {
        let stopped = KubeLab::journal_position(&j, &format!("R1.2@{h}"), "done")
            .unwrap_or_else(|| panic!("R1.2@{h} not done: {j:?}"));
        assert!(
            stopped < first_etcd_stop,
            "R1.2@{h} came after etcd was stopped: {j:?}"
        );
        assert!(
            KubeLab::journal_position(&j, &format!("R5.2@{h}"), "done").is_some_and(|p| p > first_etcd_stop),
            "R5.2@{h} (start kube-apiserver) not done: {j:?}"
        );
    }
    // The kubelets restart last: the worker's after every control plane's.
    let last_control_plane_kubelet = hosts
        .iter()
        .map(|h| {
            KubeLab::journal_position(&j, &format!("R5.4@{h}"), "done")
                .unwrap_or_else(|| panic!("R5.4@{h} (restart the kubelet) not done: {j:?}"))
        })
        .max()
        .unwrap();
    assert!(
        KubeLab::journal_position(&j, "R5.4@w1", "done").is_some_and(|p| p > last_control_plane_kubelet),
        "R5.4@w1 (the worker's kubelet) not done after the control planes': {j:?}"
    );

    // Through the VIP: what the snapshot held is back, the later object is gone.
    k.wait_jsonpath(
        "configmap",
        "before",
        "{.data.when}",
        "before",
        Duration::from_secs(120),
        "the ConfigMap from before the snapshot",
    );
    assert_eq!(
        k.kubectl_ok(&["get", "secret", "kept", "-o", "jsonpath={.data.password}"]),
        "aHVudGVyMg==",
        "the Secret reads back decrypted (base64 of hunter2)"
    );
    let gone = k.kubectl(&["get", "configmap", "after"]);
    assert!(
        !gone.status.success(),
        "the later ConfigMap survived: {}",
        text(&gone)
    );
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("NotFound")
            || String::from_utf8_lossy(&gone.stderr).contains("not found"),
        "{}",
        text(&gone)
    );

    // The Leases are taken again: held by control-plane hosts and freshly renewed.
    let mut doc = serde_json::Value::Null;
    let fresh = eventually(Duration::from_secs(120), || {
        doc = k.status().1;
        let leases = doc["kubernetes"]["leases"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        leases.len() == 2
            && leases.iter().all(|l| {
                l["holderHost"].as_str().is_some_and(|h| h.starts_with("cp"))
                    && l["problems"].as_array().is_some_and(|p| p.is_empty())
            })
    });
    assert!(fresh, "the Leases were not taken again: {doc}");
    // The worker is a Ready Node again.
    k.wait_jsonpath(
        "node",
        "w1",
        "{.status.conditions[?(@.type==\"Ready\")].status}",
        "True",
        Duration::from_secs(120),
        "Node w1 Ready after the recover",
    );
    k.assert_up_no_changes("after the recover");

    // `reset` on every role (issue 13, point 5): the control plane stops and its secrets go.
    k.hactl_ok(&["reset", "--yes"]);
    let exists = |h: &str, p: &str| k.lab.exec(h, &["test", "-e", p]).status.success();
    for h in k.control_planes() {
        for unit in [
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "etcd",
        ] {
            let active = k.lab.exec(&h, &["systemctl", "is-active", "--quiet", unit]);
            assert!(!active.status.success(), "{h}: {unit} runs after reset");
        }
        for gone in [
            hactl::kubernetes::files::CA_KEY,
            hactl::kubernetes::files::SA_KEY,
            hactl::kubernetes::files::ENCRYPTION_CONFIG,
            hactl::kubernetes::files::ETCD_CLIENT_KEY,
            "/etc/systemd/system/kube-apiserver.service",
            "/usr/local/bin/kube-apiserver",
        ] {
            assert!(!exists(&h, gone), "{h}: {gone} is still there after reset");
        }
    }
    for h in ["lb1", "lb2"] {
        assert!(
            !exists(h, "/etc/keepalived/keepalived.conf"),
            "{h}: keepalived.conf stays"
        );
        let active = k.lab.exec(h, &["systemctl", "is-active", "--quiet", "haproxy"]);
        assert!(!active.status.success(), "{h}: HAProxy runs after reset");
    }
}
