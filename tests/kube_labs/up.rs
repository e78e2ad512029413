//! `hactl up` with a `kubernetes` section brings up a real control plane (the binaries of
//! `HACTL_KUBE_BIN_DIR`, or of the cache `scripts/kube-binaries.sh` builds; never skipped as root):
//! three apiservers ready behind the VIP, kubectl through the VIP with the admin kubeconfig, both
//! Leases held, and a second `up` with nothing to do; then, on the same lab, the hardening checks
//! of `hardening.rs` and the switch to static pods and back of `mode_switch.rs`.
//!
//! The lab is Debian 12 (bookworm) and the inventory is the one `hactl init` writes
//! (`KubeLab::up_from_init`: its etcd 3.5.16 release served on loopback, the lab's Kubernetes
//! section in place of its own), so `init` + `up` with Kubernetes is proven on the release whose
//! package etcd (3.4) once broke it; every other Kubernetes lab test runs on Debian 13 (trixie).

use crate::support::kube as kube_support;

use std::time::Duration;

use kube_support::{text, KubeLab};

#[test]
fn kubernetes_control_plane_comes_up_with_real_binaries() {
    let name = "kubernetes_control_plane_comes_up_with_real_binaries";
    let Some(k) = KubeLab::up_from_init(name, "bookworm") else {
        return;
    };
    // What this test stands on: init's inventory, Debian 12 hosts, the etcd of init's release
    // (not bookworm's package, 3.4.23) under Kubernetes.
    assert_eq!(k.inv.file_name().unwrap(), "init.yaml");
    for h in k.control_planes() {
        let os = k
            .lab
            .exec_ok(&h, &["sh", "-c", ". /etc/os-release && echo $VERSION_CODENAME"]);
        assert_eq!(os.trim(), "bookworm", "{h}");
        assert_eq!(k.lab.main_exe(&h, "etcd"), "/usr/local/bin/etcd", "{h}");
        let etcd = k.lab.exec_ok(&h, &["/usr/local/bin/etcd", "--version"]);
        assert!(etcd.starts_with("etcd Version: 3.5.16"), "{h}: {etcd}");
    }
    // Every apiserver answered /readyz on its own address (KubeLab::up); now through the VIP.
    assert_eq!(k.kubectl_ok(&["get", "--raw", "/readyz"]).trim(), "ok");
    let namespaces = k.kubectl_ok(&["get", "namespaces", "-o", "name"]);
    for ns in ["namespace/default", "namespace/kube-system"] {
        assert!(
            namespaces.lines().any(|l| l == ns),
            "{ns} not listed:\n{namespaces}"
        );
    }
    k.kubectl_ok(&["create", "configmap", "up-check", "--from-literal=answer=42"]);
    k.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "up-secret",
        "--from-literal=token=s3cret",
    ]);
    assert_eq!(
        k.kubectl_ok(&["get", "configmap", "up-check", "-o", "jsonpath={.data.answer}"]),
        "42"
    );
    assert_eq!(
        k.kubectl_ok(&["get", "secret", "up-secret", "-o", "jsonpath={.data.token}"]),
        "czNjcmV0",
        "the Secret reads back (base64 of s3cret)"
    );
    // At rest the Secret is encrypted: etcd holds the aescbc envelope, not the value.
    let raw = k.lab.exec_ok(
        "cp1",
        &[
            "hactl-etcdctl",
            "get",
            "/registry/secrets/default/up-secret",
            "--print-value-only",
        ],
    );
    assert!(
        raw.contains("k8s:enc:"),
        "the Secret is not encrypted at rest: {raw:?}"
    );
    assert!(!raw.contains("s3cret"), "the Secret's value is in etcd in clear");

    let holders = k.wait_leases(Duration::from_secs(120), |h| h.starts_with("cp"));
    eprintln!("{name}: Lease holders {holders:?}");
    let again = k.hactl(&["up", "--yes"]);
    assert!(again.status.success(), "{}", text(&again));
    assert_eq!(String::from_utf8_lossy(&again.stdout).trim(), "no changes");

    // The upload of each binary left its digest record (the facts probe's shortcut): the
    // digest recorded for the apiserver is the file's own.
    let record = k.lab.exec_ok(
        "cp1",
        &[
            "sh",
            "-c",
            "cat /var/lib/hactl/digests/$(printf %s /usr/local/bin/kube-apiserver | sha256sum | cut -c1-40)",
        ],
    );
    let actual = k
        .lab
        .exec_ok("cp1", &["sha256sum", "/usr/local/bin/kube-apiserver"]);
    let recorded = record.split_whitespace().nth(1).unwrap_or("");
    assert_eq!(
        recorded,
        actual.split_whitespace().next().unwrap_or("-"),
        "cp1's record for kube-apiserver: {record:?}"
    );
    println!(
        "{name}: the bring-up's checks passed; first `hactl up` with Kubernetes took {:.1} s",
        k.up_seconds
    );

    // The hardening checks on the same lab (no bring-up of their own).
    crate::hardening::kube_units_run_sandboxed_tls_below_12_is_refused_and_the_kubelet_client_is_bound_by_rbac(&k);
    println!("{name}: passed");

    // The switch of the control plane's mode and back, on the same lab (mode_switch.rs).
    crate::mode_switch::the_control_plane_switches_to_static_pods_and_back_while_the_api_answers(&k);
}
