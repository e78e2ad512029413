//! `hactl replace --host NEW` with a real control plane (the binaries of `HACTL_KUBE_BIN_DIR`, or
//! of the cache `scripts/kube-binaries.sh` builds; never skipped as root): P8 starts the control
//! plane on the new host and its `/readyz` answers on its own address; P9 rolls the new
//! `--etcd-servers` into the other apiservers one host at a time; kubectl through the VIP keeps
//! answering throughout (a read of the kube-system Namespace every 200 ms, `KubeLab::poll_reads`:
//! the replace restarts etcd members under the apiservers; every failed read is reported). The
//! old host's node components stop and its Node is deleted (P8 node-stop, P8 node-delete); P11 runs `hactl up`'s plan, which
//! brings up the new host's node components, after which its Node is Ready, `status` is healthy
//! (no Node left NotReady behind) and a second `up` has nothing to do. Then, on the same lab,
//! `heal_node_annotation.rs` on cp2.

use crate::support::kube as kube_support;
use crate::support::lab as lab_support;

use std::time::{Duration, Instant};

use kube_support::{report_failures, text, KubeLab};

fn position(j: &[serde_json::Value], step: &str, phase: &str) -> Option<usize> {
    j.iter().position(|e| e["step"] == step && e["phase"] == phase)
}

#[test]
fn replace_to_a_new_host_moves_the_control_plane_while_kubectl_answers() {
    let name = "replace_to_a_new_host_moves_the_control_plane_while_kubectl_answers";
    let Some(k) = KubeLab::up(name, 3, 2, 1) else {
        return;
    };
    k.wait_leases(Duration::from_secs(120), |h| h.starts_with("cp"));
    k.move_roles("cp3", "spare1");
    let poller = k.poll_reads();
    std::thread::sleep(Duration::from_secs(2));
    let t0 = Instant::now();
    let out = k.hactl(&["replace", "cp3", "--host", "spare1", "--yes"]);
    let took = t0.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    let attempts = poller.stop();
    let failed = report_failures(name, t0, &attempts);
    assert_eq!(out.status.code(), Some(0), "replace failed: {}", text(&out));
    println!("{name}: replace took {:.1} s", took.as_secs_f64());

    // P8: the control plane runs on spare1 and its own /readyz answers.
    assert!(
        k.readyz_on("spare1"),
        "spare1's apiserver does not answer /readyz on its address"
    );
    for unit in ["kube-apiserver", "kube-controller-manager", "kube-scheduler"] {
        let state = k.lab.exec("spare1", &["systemctl", "is-active", unit]);
        assert_eq!(
            String::from_utf8_lossy(&state.stdout).trim(),
            "active",
            "{unit} on spare1"
        );
    }
    // P9: cp1 and cp2 run with the new member list, rolled one after the other.
    let spare = k.lab.ip("spare1").to_string();
    let old = k.lab.ip("cp3").to_string();
    for h in ["cp1", "cp2"] {
        let servers = k.running_etcd_servers(h);
        assert!(
            servers.contains(&format!("https://{spare}:2379"))
                && !servers.contains(&format!("https://{old}:")),
            "{h}: {servers}"
        );
    }
    let j = k.journal("replace-");
    let p8 = position(&j, "P8", "done").unwrap_or_else(|| panic!("P8 not done: {j:?}"));
    let cp1_done = position(&j, "P9 apiserver@cp1", "done").unwrap_or_else(|| panic!("P9 cp1: {j:?}"));
    let cp2_started = position(&j, "P9 apiserver@cp2", "started").unwrap_or_else(|| panic!("P9 cp2: {j:?}"));
    assert!(
        p8 < cp1_done && cp1_done < cp2_started,
        "P9 did not roll one host at a time: {j:?}"
    );

    assert_eq!(
        failed, 0,
        "kubectl through the VIP failed during the replace (listed above)"
    );

    // The old host's Node: its kubelet stopped, then the Node deleted, after P8.
    let stop = position(&j, "P8 node-stop", "done").unwrap_or_else(|| panic!("no node-stop: {j:?}"));
    let delete = position(&j, "P8 node-delete", "done").unwrap_or_else(|| panic!("no node-delete: {j:?}"));
    assert!(
        p8 < stop && stop < delete,
        "order: P8, node-stop, node-delete: {j:?}"
    );
    let kubelet = k.lab.exec("cp3", &["systemctl", "is-active", "kubelet"]);
    assert_ne!(
        String::from_utf8_lossy(&kubelet.stdout).trim(),
        "active",
        "the kubelet still runs on cp3"
    );
    k.assert_node_gone("cp3", "after replace");
    // P11, after P10: `hactl up`'s plan inside the replace brought spare1 up as a Node, so a
    // second `up` has nothing to do, and spare1's Node is Ready with status healthy.
    let p10 = position(&j, "P10", "done").unwrap_or_else(|| panic!("P10 not done: {j:?}"));
    let p11 = position(&j, "P11", "done").unwrap_or_else(|| panic!("P11 not done: {j:?}"));
    assert!(p10 < p11, "P11 before P10: {j:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("spare1 runs the node components (P11"),
        "the report does not say spare1 became a Node: {}",
        text(&out)
    );
    let registered = k.kubectl(&["get", "node", "spare1"]);
    assert!(
        registered.status.success(),
        "no Node spare1 after replace: {}",
        text(&registered)
    );
    k.assert_up_no_changes("after replace");
    let mut last = (0, serde_json::Value::Null);
    assert!(
        lab_support::eventually(Duration::from_secs(180), || {
            last = k.status();
            last.0 == 0
                && last.1["kubernetes"]["nodes"]
                    .as_array()
                    .is_some_and(|n| n.iter().any(|n| n["name"] == "spare1" && n["ready"] == "True"))
        }),
        "spare1's Node is not Ready or status is not healthy: {}",
        last.1
    );
    println!("{name}: passed");

    // heal's record on the Node of the member it repairs, on the same lab (no bring-up of its
    // own): cp2, neither replaced nor new.
    crate::heal_node_annotation::heal_annotates_the_node_of_the_member_it_repaired(&k, "cp2");
}
