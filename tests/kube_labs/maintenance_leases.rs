//! `hactl maintenance` on a control-plane host with a real control plane and real Nodes (the
//! binaries of `HACTL_KUBE_BIN_DIR`, or of the cache `scripts/kube-binaries.sh` builds; never
//! skipped as root), in one lab:
//!
//! - the drain of real pods: a PodDisruptionBudget that allows no disruption holds the drain
//!   until `--drain-timeout`, then `start` fails naming the pod and the budget, with the Node
//!   cordoned and nothing stopped; the lower-priority pod of the same run is evicted, the
//!   `system-cluster-critical` one (a later wave) is not; `complete` cancels and uncordons;
//! - on the host that holds both leader-election Leases, running a pod of a Deployment that
//!   tolerates the control-plane taint and prefers that host: the pod is evicted and its
//!   replacement runs on another host, the Leases move before the host's apiserver stops (hactl
//!   waits for the handover right after stopping its kube-scheduler and kube-controller-manager),
//!   each Lease changes hands exactly once, no request through the VIP fails during `start` or
//!   `complete`, and `complete` uncordons and brings everything back.

use crate::support::kube as kube_support;
use crate::support::lab as lab_support;

use std::time::Duration;

use kube_support::{report_failures, text, KubeLab};
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

/// Tolerations of the control-plane taints (1.20's `master` and the newer `control-plane`); not
/// `operator: Exists` on every key, which would tolerate the cordon's
/// `node.kubernetes.io/unschedulable` taint too and let the scheduler put a pod back.
const TOLERATIONS: &str = r#"[{"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
  {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]"#;

/// A bare pod bound to `host` running the local busybox image.
fn pinned_pod(ns: &str, name: &str, host: &str, image: &str, class: Option<&str>) -> String {
    let class = class
        .map(|c| format!(r#""priorityClassName": "{c}","#))
        .unwrap_or_default();
    format!(
        r#"{{"apiVersion": "v1", "kind": "Pod",
  "metadata": {{"name": "{name}", "namespace": "{ns}", "labels": {{"app": "{name}"}}}},
  "spec": {{"nodeName": "{host}", {class} "terminationGracePeriodSeconds": 2,
    "tolerations": {TOLERATIONS},
    "containers": [{{"name": "c", "image": "{image}", "command": ["sleep", "100000"]}}]}}}}"#
    )
}

/// A Deployment of 1 replica that tolerates the control-plane taint and prefers `host` (so it
/// may run elsewhere when `host` is cordoned).
fn preferring(name: &str, host: &str, image: &str) -> String {
    format!(
        r#"{{"apiVersion": "apps/v1", "kind": "Deployment",
  "metadata": {{"name": "{name}", "namespace": "drain-test"}},
  "spec": {{"replicas": 1, "selector": {{"matchLabels": {{"app": "{name}"}}}},
    "template": {{"metadata": {{"labels": {{"app": "{name}"}}}},
      "spec": {{"terminationGracePeriodSeconds": 2, "tolerations": {TOLERATIONS},
        "affinity": {{"nodeAffinity": {{"preferredDuringSchedulingIgnoredDuringExecution": [
          {{"weight": 100, "preference": {{"matchExpressions": [
            {{"key": "kubernetes.io/hostname", "operator": "In", "values": ["{host}"]}}]}}}}]}}}},
        "containers": [{{"name": "c", "image": "{image}", "command": ["sleep", "100000"]}}]}}}}}}}}"#
    )
}

/// `(name, node, phase, uid)` of each pod with label `app=APP` in `ns`.
fn pods_of(k: &KubeLab, ns: &str, app: &str) -> Vec<(String, String, String, String)> {
    let out = k.kubectl_ok(&["-n", ns, "get", "pods", "-l", &format!("app={app}"), "-o", "json"]);
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|p| {
            let s = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
            (
                s(&p["metadata"]["name"]),
                s(&p["spec"]["nodeName"]),
                s(&p["status"]["phase"]),
                s(&p["metadata"]["uid"]),
            )
        })
        .collect()
}

/// What the cluster says about the pods of `ns` and the kubelet of `host` (for a failure message).
fn diagnose(k: &KubeLab, ns: &str, host: &str) -> String {
    let events = text(&k.kubectl(&["-n", ns, "get", "events", "--sort-by=.lastTimestamp"]));
    let log = k
        .lab
        .exec(host, &["journalctl", "-u", "kubelet", "-n", "30", "--no-pager"]);
    format!(
        "events in {ns}:\n{events}\nkubelet on {host}:\n{}",
        String::from_utf8_lossy(&log.stdout)
    )
}

fn running_on(k: &KubeLab, ns: &str, app: &str, host: &str) -> bool {
    pods_of(k, ns, app)
        .iter()
        .any(|(_, node, phase, _)| node == host && phase == "Running")
}

fn node_json(k: &KubeLab, host: &str) -> serde_json::Value {
    serde_json::from_str(&k.kubectl_ok(&["get", "node", host, "-o", "json"])).unwrap()
}

fn cordoned(n: &serde_json::Value) -> bool {
    n["spec"]["unschedulable"] == true
}

#[test]
fn maintenance_drains_real_pods_and_hands_both_leases_over_first() {
    let name = "maintenance_drains_real_pods_and_hands_both_leases_over_first";
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
    let images = hactl::images::ImageSet::load(
        &hactl::lab::kubernetes::ensure_images(&k.version.to_string(), &k.bin_dir).unwrap(),
    )
    .unwrap();
    let busybox = images.get("hactl.local/busybox").unwrap().reference.clone();
    let cps = k.control_planes();
    let mut ready = Vec::new();
    assert!(
        eventually(Duration::from_secs(180), || {
            ready = cps
                .iter()
                .filter(|h| {
                    node_json(&k, h)["status"]["conditions"]
                        .as_array()
                        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
                })
                .cloned()
                .collect();
            ready.len() == cps.len()
        }),
        "not every control-plane Node is Ready: {ready:?} of {cps:?}"
    );
    k.kubectl_ok(&["create", "namespace", "drain-test"]);
    // The ServiceAccount admission plugin wants each namespace's `default` account and (in 1.20)
    // its token Secret, which the controller-manager adds a moment after the namespace.
    for ns in ["drain-test", "kube-system"] {
        assert!(
            eventually(Duration::from_secs(60), || {
                !k.kubectl(&[
                    "-n",
                    ns,
                    "get",
                    "serviceaccount",
                    "default",
                    "-o",
                    "jsonpath={.secrets[0].name}",
                ])
                .stdout
                .is_empty()
            }),
            "no default ServiceAccount with a token Secret in {ns}"
        );
    }

    // 1. A budget that allows no disruption holds the drain until --drain-timeout.
    let pdb_version = hactl::kubernetes::gates::pdb_api_version(k.version.minor);
    for manifest in [
        pinned_pod("drain-test", "plain", &holder, &busybox, None),
        pinned_pod("drain-test", "guarded", &holder, &busybox, None),
        pinned_pod(
            "kube-system",
            "hactl-drain-critical",
            &holder,
            &busybox,
            Some("system-cluster-critical"),
        ),
        format!(
            r#"{{"apiVersion": "{pdb_version}", "kind": "PodDisruptionBudget",
  "metadata": {{"name": "guard", "namespace": "drain-test"}},
  "spec": {{"minAvailable": 1, "selector": {{"matchLabels": {{"app": "guarded"}}}}}}}}"#
        ),
    ] {
        let out = k.kubectl_input(&["apply", "-f", "-"], Some(&manifest));
        assert!(out.status.success(), "{}", text(&out));
    }
    assert!(
        eventually(Duration::from_secs(180), || {
            running_on(&k, "drain-test", "plain", &holder)
                && running_on(&k, "drain-test", "guarded", &holder)
                && running_on(&k, "kube-system", "hactl-drain-critical", &holder)
        }),
        "the pinned pods do not run on {holder}: {:?} {:?}\n{}",
        pods_of(&k, "drain-test", "plain"),
        pods_of(&k, "drain-test", "guarded"),
        diagnose(&k, "drain-test", &holder)
    );
    assert!(
        eventually(Duration::from_secs(60), || {
            k.kubectl(&[
                "-n",
                "drain-test",
                "get",
                "pdb",
                "guard",
                "-o",
                "jsonpath={.status.expectedPods}/{.status.disruptionsAllowed}",
            ])
            .stdout
                == b"1/0"
        }),
        "the disruption controller did not compute the budget"
    );
    let out = k.hactl(&["maintenance", "plan", &holder]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("blocker: drain-test/guarded is covered by PodDisruptionBudget drain-test/guard"),
        "{}",
        text(&out)
    );
    let out = k.hactl(&["maintenance", "start", "--yes", &holder, "--drain-timeout", "15s"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        err.contains("refused by PodDisruptionBudget drain-test/guard"),
        "{err}"
    );
    assert!(
        err.contains(&format!("pod drain-test/guarded from {holder} was answered 429")),
        "{err}"
    );
    assert!(
        err.contains(&format!("`hactl maintenance complete {holder}`")),
        "{err}"
    );
    let n = node_json(&k, &holder);
    assert!(cordoned(&n), "not cordoned: {n}");
    assert_eq!(
        n["metadata"]["annotations"]["hactl.io/maintenance-stage"],
        "Drain"
    );
    // Lower priority first: the plain pod is gone, the critical one (a later wave) is not; nothing
    // was stopped. The eviction was accepted during the drain; the pod is gone once the kubelet
    // has stopped it (2 s of grace) and said so, which took over 30 s after the drain once, in a
    // CI run with the machine at a load of 20 (2026-11-26): hence 90 s, and what the cluster says
    // about the pod and the kubelet when it is still there.
    assert!(
        eventually(Duration::from_secs(90), || pods_of(&k, "drain-test", "plain")
            .is_empty()),
        "the plain pod was not evicted: {:?}\n{}",
        pods_of(&k, "drain-test", "plain"),
        diagnose(&k, "drain-test", &holder)
    );
    assert!(running_on(&k, "kube-system", "hactl-drain-critical", &holder));
    assert!(k.readyz_on(&holder), "{holder}'s apiserver was stopped");
    let out = k.hactl(&["maintenance", "complete", &holder]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let n = node_json(&k, &holder);
    assert!(!cordoned(&n), "not uncordoned: {n}");
    assert_eq!(
        n["metadata"]["annotations"]["hactl.io/maintenance-stage"],
        "Complete"
    );
    k.kubectl_ok(&[
        "-n",
        "kube-system",
        "delete",
        "pod",
        "hactl-drain-critical",
        "--wait=false",
    ]);
    k.kubectl_ok(&["-n", "drain-test", "delete", "pdb", "guard"]);
    k.kubectl_ok(&["-n", "drain-test", "delete", "pod", "guarded", "--wait=false"]);

    // 2. A pod of a Deployment on the Lease holder: evicted and run elsewhere, the Leases handed
    //    over, no request through the VIP failing.
    let out = k.kubectl_input(
        &["apply", "-f", "-"],
        Some(&preferring("moved", &holder, &busybox)),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        eventually(Duration::from_secs(180), || running_on(
            &k,
            "drain-test",
            "moved",
            &holder
        )),
        "the Deployment's pod does not run on {holder}: {:?}\n{}",
        pods_of(&k, "drain-test", "moved"),
        diagnose(&k, "drain-test", &holder)
    );
    let before_pod = pods_of(&k, "drain-test", "moved");
    let cm_before = transitions(&k, "kube-controller-manager");
    let sched_before = transitions(&k, "kube-scheduler");

    let poller = k.poll_reads();
    assert!(
        poller.wait_answered(3, Duration::from_secs(60)),
        "reads through the VIP are not answered"
    );
    let t0 = std::time::Instant::now();
    let out = k.hactl(&["maintenance", "start", "--yes", &holder]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let moved = pods_of(&k, "drain-test", "moved");
    assert!(
        moved.iter().all(|p| p.3 != before_pod[0].3 && p.1 != holder),
        "the pod was not evicted from {holder}: before {before_pod:?}, now {moved:?}"
    );
    let mut now = Vec::new();
    assert!(
        eventually(Duration::from_secs(180), || {
            now = pods_of(&k, "drain-test", "moved");
            now.iter()
                .any(|p| p.1 != holder && !p.1.is_empty() && p.2 == "Running")
        }),
        "the evicted pod was not rescheduled on another host: {now:?}\n{}",
        diagnose(&k, "drain-test", &holder)
    );
    println!("{name}: pod {before_pod:?} evicted from {holder}, now {now:?}");
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

    let t_complete = std::time::Instant::now();
    let out = k.hactl(&["maintenance", "complete", &holder]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let attempts = poller.stop();
    report_failures(name, t0, &attempts);
    // Taking the host out (cordon, drain, Lease handover, MAINT, stops) and bringing it back:
    // no request may fail. (`complete` once put the host back behind the VIP before its
    // apiserver answered `/readyz`; HAProxy sent it requests at once and cut them when its check
    // marked it down: one failed request per `complete`. It now waits for `/readyz` first.)
    let (during_start, during_complete): (Vec<_>, Vec<_>) =
        attempts.iter().partition(|a| a.start < t_complete);
    let failed_start = during_start.iter().filter(|a| !a.ok).count();
    assert_eq!(
        failed_start, 0,
        "requests through the VIP failed while maintenance start took {holder} out"
    );
    let failed_complete = during_complete.iter().filter(|a| !a.ok).count();
    println!(
        "{name}: maintenance complete: {} requests, {failed_complete} failed",
        during_complete.len()
    );
    assert_eq!(
        failed_complete, 0,
        "requests through the VIP failed while maintenance complete brought {holder} back"
    );
    assert!(!cordoned(&node_json(&k, &holder)), "{holder} was not uncordoned");
    if let Err(doc) = k.wait_healthy(Duration::from_secs(120)) {
        panic!("not healthy after complete: {doc}");
    }
}
