//! `kubernetes.mode: static-pod` with a real control plane (the binaries of `HACTL_KUBE_BIN_DIR`,
//! or of the cache `scripts/kube-binaries.sh` builds, packed into images by
//! `scripts/node-images.sh`; never skipped as root). One lab (3 control planes, 2 load
//! balancers), several named checks in order:
//! - `up`: `hactl up` brings the cluster up with kube-apiserver, kube-controller-manager and
//!   kube-scheduler as static pods: no systemd unit of theirs, one process of each per host (an
//!   upload's temporary file in the manifest directory once started a second apiserver), no
//!   temporary file left in the directory;
//! - `mirror pods`: each component's mirror pod shows in `kube-system` for each host;
//! - `second up`: a second `hactl up` prints `no changes`;
//! - `killed apiserver`: SIGKILL to an apiserver; the kubelet starts it again by itself (a new
//!   process, `/readyz` answers, the mirror pod counts the restart);
//! - `lease failover`: the host holding the controller-manager Lease powers off; both Leases are
//!   held by the other hosts within leaseDuration + renewDeadline; after power-on the host's
//!   kubelet starts its control plane again with no help from hactl, and `up` converges;
//! - `maintenance`: `maintenance start` of the controller-manager Lease holder moves its three
//!   manifests aside (no unit to stop), its kubelet stops the pods, the Leases move and the Node
//!   is cordoned; `up` meanwhile is refused (exit 2); `complete` moves them back, the
//!   components answer, the Node is uncordoned, `status` is healthy and `up` has nothing to do;
//! - `replace`: `hactl replace cp3 --host spare1`: P2 moves cp3's manifests aside (its kubelet
//!   stops the pods), P8 starts spare1's containerd, images and kubelet, then its manifests, P9
//!   rolls the new `--etcd-servers` into the other apiservers (their manifests); spare1's mirror
//!   pods show; Node cp3 is deleted and spare1 is a Node (P11);
//! - `recover`: etcd's data wiped on two of the three members; `hactl recover --from-member cp1`
//!   moves every host's manifests aside (R1.2) before it stops etcd, rebuilds the members from
//!   cp1's data, and puts the manifests back (R5.2): the control plane runs as static pods again,
//!   what cp1 held is served, `status` is healthy and `up` has nothing to do;
//! - `recover from a snapshot`: a snapshot saved with `hactl etcd snapshot save`, a ConfigMap
//!   written after it, etcd's data wiped on two members; `hactl recover --from-snapshot` runs the
//!   same manifest steps, the snapshot's ConfigMap is served and the later one is gone, `status`
//!   is healthy and `up` has nothing to do;
//! - `replace --reuse-host`: cp2's etcd data lost; `hactl replace cp2 --reuse-host` rebuilds its
//!   member (a new ID) on the same host and its control plane runs as static pods again, with
//!   its mirror pods, a healthy `status` and nothing left for `up`;
//! - `binary roll`: the control-plane images rebuilt under the same tag roll through `up`, one
//!   host at a time behind the drained backend, 0 failed reads through the VIP, each component
//!   running the rebuilt binary afterwards.

use crate::support::kube as kube_support;
use crate::support::lab as lab_support;

use std::time::{Duration, Instant};

use hactl::lab::Fault;
use kube_support::{bin_dir, text, version_of, KubeLab};
use lab_support::{eventually, TestLab};

pub(crate) const COMPONENTS: [&str; 3] = ["kube-apiserver", "kube-controller-manager", "kube-scheduler"];
/// leaseDuration + renewDeadline of kube-controller-manager and kube-scheduler (defaults).
const HANDOVER_BOUND: Duration = Duration::from_secs(15 + 10);

fn check(name: &str, what: &str, t0: Instant) {
    println!(
        "{name}: check `{what}` passed ({:.1} s into the test)",
        t0.elapsed().as_secs_f64()
    );
}

/// The PIDs of processes running `binary` on `host` (by command line: a process name is cut
/// to 15 characters, `kube-controller`).
pub(crate) fn pids(k: &KubeLab, host: &str, binary: &str) -> Vec<String> {
    let pattern = format!("^(/usr/local/bin/)?{binary}( |$)");
    let out = k.lab.exec(host, &["pgrep", "-f", &pattern]);
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// Mirror pods in kube-system: (component label, node name) → restart count.
pub(crate) fn mirror_pods(k: &KubeLab) -> Vec<(String, String, i64)> {
    let out = k.kubectl(&["-n", "kube-system", "get", "pods", "-o", "json"]);
    if !out.status.success() {
        return vec![];
    }
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    doc["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|p| !p["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_null())
        .map(|p| {
            (
                p["metadata"]["labels"]["component"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                p["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
                p["status"]["containerStatuses"][0]["restartCount"]
                    .as_i64()
                    .unwrap_or(0),
            )
        })
        .collect()
}

/// The apiserver mirror pod on `node`: its manifest hash (`kubernetes.io/config.hash`), whether
/// its container is ready, and its restart count; None until the kubelet reported a container.
fn apiserver_pod(k: &KubeLab, node: &str) -> Option<(String, bool, i64)> {
    let out = k.kubectl(&[
        "-n",
        "kube-system",
        "get",
        "pod",
        &format!("kube-apiserver-{node}"),
        "-o",
        "json",
    ]);
    if !out.status.success() {
        return None;
    }
    let p: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let status = &p["status"]["containerStatuses"][0];
    Some((
        p["metadata"]["annotations"]["kubernetes.io/config.hash"]
            .as_str()?
            .to_string(),
        status["ready"].as_bool()?,
        status["restartCount"].as_i64()?,
    ))
}

#[test]
fn static_pod_control_plane_runs_under_the_kubelet() {
    let name = "static_pod_control_plane_runs_under_the_kubelet";
    let Some(bin_dir) = bin_dir(name) else {
        return;
    };
    let version = version_of(&bin_dir);
    let Some(lab) = TestLab::up(name, 3, 2, 1, "trixie") else {
        return;
    };
    let inv = lab.inventory().to_path_buf();
    hactl::lab::kubernetes::add_to_inventory(&inv, &version.to_string(), &bin_dir).unwrap();
    let state = inv.parent().unwrap().join("state");
    let mut k = KubeLab {
        lab,
        inv,
        state,
        bin_dir,
        version,
        up_seconds: 0.0,
        release_server: None,
    };
    k.set_inventory(|t| {
        let moved = t.replacen("  kubernetes:\n", "  kubernetes:\n    mode: static-pod\n", 1);
        assert_ne!(moved, t, "no kubernetes section:\n{t}");
        moved
    });
    let t0 = Instant::now();
    let cps = k.control_planes();

    // up
    let out = k.hactl(&["up", "--yes"]);
    assert!(out.status.success(), "hactl up failed: {}", text(&out));
    println!(
        "{name}: hactl up in static-pod mode took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    for host in &cps {
        assert!(
            eventually(Duration::from_secs(120), || k.readyz_on(host)),
            "{host}: /readyz did not answer"
        );
        for c in COMPONENTS {
            let unit = k
                .lab
                .exec(host, &["systemctl", "is-active", &format!("{c}.service")]);
            assert_ne!(
                String::from_utf8_lossy(&unit.stdout).trim(),
                "active",
                "{host}: {c} runs as a systemd unit in static-pod mode"
            );
            let manifest = format!("/etc/kubernetes/manifests/{c}.yaml");
            k.lab.exec_ok(host, &["test", "-f", &manifest]);
            let running = pids(&k, host, c);
            assert_eq!(running.len(), 1, "{host}: {c} processes: {running:?}");
        }
        let listing = k.lab.exec_ok(host, &["ls", "-A", "/etc/kubernetes/manifests"]);
        assert!(
            !listing.contains("hactl-tmp"),
            "{host}: a temporary file is left in the manifest directory: {listing}"
        );
    }
    check(name, "up", t0);

    // mirror pods
    let mut last = vec![];
    let all_mirrored = eventually(Duration::from_secs(180), || {
        last = mirror_pods(&k);
        cps.iter().all(|h| {
            COMPONENTS
                .iter()
                .all(|c| last.iter().any(|(comp, node, _)| comp == c && node == h))
        })
    });
    assert!(
        all_mirrored,
        "not every component's mirror pod is in kube-system: {last:?}"
    );
    println!("{name}: mirror pods: {last:?}");
    check(name, "mirror pods", t0);

    // second up
    let out = k.hactl(&["up", "--yes"]);
    assert!(out.status.success(), "second hactl up failed: {}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no changes"),
        "the second up changed something: {}",
        text(&out)
    );
    check(name, "second up", t0);

    // killed apiserver
    let victim = &cps[0];
    let before = pids(&k, victim, "kube-apiserver");
    assert_eq!(before.len(), 1, "{victim}: kube-apiserver processes: {before:?}");
    let restarts_before = last
        .iter()
        .find(|(c, n, _)| c == "kube-apiserver" && n == victim)
        .map(|(_, _, r)| *r)
        .unwrap_or(0);
    let killed = Instant::now();
    k.lab.exec_ok(victim, &["kill", "-9", &before[0]]);
    let mut now = vec![];
    let restarted = eventually(Duration::from_secs(300), || {
        now = pids(&k, victim, "kube-apiserver");
        now.len() == 1 && now != before && k.readyz_on(victim)
    });
    assert!(
        restarted,
        "{victim}: the kubelet did not start the apiserver again: {now:?}"
    );
    println!(
        "{name}: {victim}'s apiserver (pid {}) killed; pid {} answers /readyz {:.1} s later",
        before[0],
        now[0],
        killed.elapsed().as_secs_f64()
    );
    let counted = eventually(Duration::from_secs(120), || {
        mirror_pods(&k)
            .iter()
            .any(|(c, n, r)| c == "kube-apiserver" && n == victim && *r > restarts_before)
    });
    assert!(
        counted,
        "{victim}: the mirror pod does not count the apiserver's restart"
    );
    check(name, "killed apiserver", t0);

    // lease failover
    let before = k.wait_leases(Duration::from_secs(180), |h| h.starts_with("cp"));
    let holder = before["kube-system/kube-controller-manager"].clone();
    let stopped = Instant::now();
    k.lab.fault(&holder, Fault::Poweroff);
    let mut last = None;
    let moved = eventually(HANDOVER_BOUND + Duration::from_secs(60), || {
        last = k.lease_holders_via_kubectl();
        last.as_ref()
            .is_some_and(|l| l.len() == 2 && l.values().all(|h| !h.is_empty() && *h != holder))
    });
    assert!(moved, "the Leases did not leave {holder}: {last:?}");
    println!(
        "{name}: {holder} powered off; both Leases held elsewhere {:.1} s later: {last:?}",
        stopped.elapsed().as_secs_f64()
    );
    k.lab.fault(&holder, Fault::Poweron);
    assert!(
        eventually(Duration::from_secs(300), || k.readyz_on(&holder)),
        "{holder}: the kubelet did not start the apiserver after power-on"
    );
    k.hactl_ok(&["up", "--yes"]);
    if let Err(doc) = k.wait_healthy(Duration::from_secs(180)) {
        panic!("status is not healthy after power-on and up: {doc}");
    }
    check(name, "lease failover", t0);

    // maintenance of the Lease holder: its manifests move aside (no unit to stop), the kubelet
    // stops the pods, the Leases move, the API answers through the VIP; complete moves them back
    let before = k.wait_leases(Duration::from_secs(180), |h| h.starts_with("cp"));
    let target = before["kube-system/kube-controller-manager"].clone();
    let aside = "/etc/kubernetes/manifests.hactl/maintenance";
    let out = k.hactl(&["maintenance", "start", "--yes", &target]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "maintenance start failed: {}",
        text(&out)
    );
    for c in COMPONENTS {
        assert!(
            pids(&k, &target, c).is_empty(),
            "{target}: {c} still runs in maintenance"
        );
        let moved = k.lab.exec(&target, &["test", "-e", &format!("{aside}/{c}.yaml")]);
        assert!(moved.status.success(), "{target}: {aside}/{c}.yaml is missing");
    }
    let holders = k.lease_holders_via_kubectl().unwrap_or_default();
    assert!(
        holders.len() == 2 && holders.values().all(|h| !h.is_empty() && *h != target),
        "the Leases did not leave {target} in maintenance: {holders:?}"
    );
    let cordoned = k.kubectl_ok(&["get", "node", &target, "-o", "jsonpath={.spec.unschedulable}"]);
    assert_eq!(cordoned, "true", "{target} is not cordoned in maintenance");
    // `up` would write the manifests back on a host taken out of service: refused, named.
    let out = k.hactl(&["up", "--yes"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "up during maintenance: {}",
        text(&out)
    );
    assert!(
        text(&out).contains(&format!("run `hactl maintenance complete {target}` first")),
        "{}",
        text(&out)
    );
    let still = k.lab.exec(
        &target,
        &["test", "-e", "/etc/kubernetes/manifests/kube-apiserver.yaml"],
    );
    assert!(
        !still.status.success(),
        "{target}: the refused up wrote a manifest back"
    );
    let out = k.hactl(&["maintenance", "complete", &target]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "maintenance complete failed: {}",
        text(&out)
    );
    assert!(
        k.readyz_on(&target),
        "{target}: no /readyz right after maintenance complete"
    );
    for c in COMPONENTS {
        assert!(
            !pids(&k, &target, c).is_empty(),
            "{target}: {c} is not back after complete"
        );
        let back = k.lab.exec(
            &target,
            &["test", "-e", &format!("/etc/kubernetes/manifests/{c}.yaml")],
        );
        assert!(back.status.success(), "{target}: the {c} manifest is not back");
    }
    let cordoned = k.kubectl_ok(&["get", "node", &target, "-o", "jsonpath={.spec.unschedulable}"]);
    assert_ne!(cordoned, "true", "{target} is still cordoned after complete");
    if let Err(doc) = k.wait_healthy(Duration::from_secs(180)) {
        panic!("status is not healthy after maintenance: {doc}");
    }
    k.assert_up_no_changes("after maintenance");
    check(name, "maintenance", t0);

    // replace
    let hashes: Vec<String> = ["cp1", "cp2"]
        .iter()
        .map(|h| {
            let mut last = None;
            assert!(
                eventually(Duration::from_secs(60), || {
                    last = apiserver_pod(&k, h);
                    last.is_some()
                }),
                "{h}: no apiserver mirror pod"
            );
            last.unwrap().0
        })
        .collect();
    k.move_roles("cp3", "spare1");
    let started = Instant::now();
    let out = k.hactl(&["replace", "cp3", "--host", "spare1", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "replace failed: {}", text(&out));
    println!(
        "{name}: replace cp3 → spare1 took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        k.readyz_on("spare1"),
        "spare1's apiserver does not answer /readyz"
    );
    for c in COMPONENTS {
        let running = pids(&k, "spare1", c);
        assert_eq!(running.len(), 1, "spare1: {c} processes: {running:?}");
        assert_no_unit(&k, "spare1", c, "after replace");
        assert!(pids(&k, "cp3", c).is_empty(), "cp3 still runs {c}");
    }
    let listing = k.lab.exec_ok("cp3", &["ls", "-A", "/etc/kubernetes/manifests"]);
    assert!(!listing.contains("kube-"), "cp3 keeps manifests: {listing}");
    let (spare, old) = (k.lab.ip("spare1").to_string(), k.lab.ip("cp3").to_string());
    for h in ["cp1", "cp2"] {
        let pid = pids(&k, h, "kube-apiserver");
        assert_eq!(pid.len(), 1, "{h}: kube-apiserver processes: {pid:?}");
        let cmdline = k.lab.exec_ok(
            h,
            &["sh", "-c", &format!("tr '\\0' ' ' < /proc/{}/cmdline", pid[0])],
        );
        assert!(
            cmdline.contains(&format!("https://{spare}:2379"))
                && !cmdline.contains(&format!("https://{old}:")),
            "{h}: the apiserver runs without the new member list: {cmdline}"
        );
    }
    // The roll stopped each old apiserver pod before writing its new manifest: the new pod's
    // container started once (a new pod started beside the old one, which still holds port
    // 6443, would show restarts here).
    for (h, before) in ["cp1", "cp2"].iter().zip(&hashes) {
        let mut last = None;
        let replaced = eventually(Duration::from_secs(120), || {
            last = apiserver_pod(&k, h);
            last.as_ref()
                .is_some_and(|(hash, ready, _)| hash != before && *ready)
        });
        assert!(
            replaced,
            "{h}: no ready apiserver pod of the new manifest: {last:?}"
        );
        let restarts = last.unwrap().2;
        assert_eq!(
            restarts, 0,
            "{h}: the new apiserver pod's container restarted {restarts} time(s)"
        );
    }
    let mut last = vec![];
    let mirrored = eventually(Duration::from_secs(180), || {
        last = mirror_pods(&k);
        COMPONENTS
            .iter()
            .all(|c| last.iter().any(|(comp, node, _)| comp == c && node == "spare1"))
    });
    assert!(mirrored, "spare1's mirror pods are not in kube-system: {last:?}");
    // The old host's Node deleted (P8 node-delete), the new host a registered Node (P11).
    k.assert_node_gone("cp3", "after replace");
    let spare = k.kubectl(&["get", "node", "spare1"]);
    assert!(
        spare.status.success(),
        "no Node spare1 after replace: {}",
        text(&spare)
    );
    check(name, "replace", t0);

    // recover
    k.kubectl_ok(&[
        "create",
        "configmap",
        "before-recover",
        "--from-literal=when=before",
    ]);
    let cps = k.control_planes();
    assert_eq!(cps, ["cp1", "cp2", "spare1"], "the members after replace");
    // Lose 2 of 3: etcd killed and its data gone on cp2 and spare1; cp1 survives alone.
    k.lose_etcd_members(&["cp2", "spare1"], "cp1");
    let started = Instant::now();
    let out = k.hactl(&["recover", "--from-member", "cp1", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "recover failed: {}", text(&out));
    println!(
        "{name}: recover from cp1 after 2 of 3 members were wiped took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    recovered_as_static_pods(&k, &cps, "before-recover", "before", "recover --from-member");
    check(name, "recover", t0);

    // recover --from-snapshot: the same steps with the data from a snapshot taken here; what the
    // snapshot held is back and what was written after it is gone.
    k.kubectl_ok(&[
        "create",
        "configmap",
        "in-snapshot",
        "--from-literal=when=snapshot",
    ]);
    let tmp = tempfile::tempdir().unwrap();
    let snap = k
        .hactl_ok(&["etcd", "snapshot", "save", "--out", tmp.path().to_str().unwrap()])
        .trim()
        .to_string();
    k.kubectl_ok(&[
        "create",
        "configmap",
        "after-snapshot",
        "--from-literal=when=after",
    ]);
    k.lose_etcd_members(&["cp1", "spare1"], "cp2");
    let started = Instant::now();
    let out = k.hactl(&["recover", "--from-snapshot", &snap, "--yes"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "recover --from-snapshot failed: {}",
        text(&out)
    );
    println!(
        "{name}: recover from a snapshot after 2 of 3 members were wiped took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    recovered_as_static_pods(&k, &cps, "in-snapshot", "snapshot", "recover --from-snapshot");
    let gone = k.kubectl(&["get", "configmap", "after-snapshot"]);
    let said = String::from_utf8_lossy(&gone.stderr);
    assert!(
        !gone.status.success() && (said.contains("NotFound") || said.contains("not found")),
        "the ConfigMap written after the snapshot is still served: {}",
        text(&gone)
    );
    check(name, "recover from a snapshot", t0);

    reuse_host(&k, name, t0);
    image_roll(&k, name, t0);
}

/// After a recover in static-pod mode: R1.2 moved each host's manifests aside (its kubelet stopped
/// the pods) before any etcd stopped and R5.2 put them back; each component runs once per host,
/// as a static pod; the ConfigMap `configmap` (data `when`) is served through the VIP; `status` is
/// healthy and `up` has nothing to do. `what` names the recover in the messages.
fn recovered_as_static_pods(k: &KubeLab, cps: &[String], configmap: &str, when: &str, what: &str) {
    let j = k.journal("");
    let at = |step: &str, phase: &str| KubeLab::journal_position(&j, step, phase);
    let first_etcd_stop = cps
        .iter()
        .filter_map(|h| at(&format!("R1.3@{h}"), "started"))
        .min()
        .unwrap_or_else(|| panic!("no R1.3 in the journal: {j:?}"));
    for h in cps {
        let aside = at(&format!("R1.2@{h}:manifests"), "done")
            .unwrap_or_else(|| panic!("R1.2@{h}:manifests not done: {j:?}"));
        assert!(
            aside < first_etcd_stop,
            "R1.2@{h} came after etcd was stopped: {j:?}"
        );
        assert!(
            at(&format!("R5.2@{h}:manifests"), "done").is_some_and(|p| p > first_etcd_stop),
            "R5.2@{h}:manifests (the manifests back) not done: {j:?}"
        );
        assert!(
            eventually(Duration::from_secs(180), || k.readyz_on(h)),
            "{h}: /readyz does not answer after {what}"
        );
        for c in COMPONENTS {
            // The kubelet starts the pods of the manifests put back in its own time.
            assert_one_process_from_its_manifest(k, h, c, &format!("after {what}"));
        }
    }
    // What the survivor held is served through the VIP, the Leases are taken again, every
    // member is healthy, and `up` has nothing to do.
    k.wait_jsonpath(
        "configmap",
        configmap,
        "{.data.when}",
        when,
        Duration::from_secs(120),
        "the ConfigMap written before the loss",
    );
    if let Err(doc) = k.wait_healthy(Duration::from_secs(180)) {
        panic!("status is not healthy after {what}: {doc}");
    }
    let again = k.hactl(&["up", "--yes"]);
    assert!(again.status.success(), "{}", text(&again));
    assert_eq!(String::from_utf8_lossy(&again.stdout).trim(), "no changes");
}

/// On every host of `cps`: each control-plane component runs as one process, from its manifest
/// in /etc/kubernetes/manifests, and as no systemd unit (the kubelet may still be restarting a
/// pod: up to 120 s); `when` is for the messages.
pub(crate) fn assert_runs_as_static_pods(k: &KubeLab, cps: &[String], when: &str) {
    for h in cps {
        for c in COMPONENTS {
            assert_no_unit(k, h, c, when);
            assert_one_process_from_its_manifest(k, h, c, when);
        }
    }
}

/// `component`'s manifest is in /etc/kubernetes/manifests on `host` and one process of it runs
/// (waited for up to 120 s: the kubelet starts or restarts the pod in its own time).
fn assert_one_process_from_its_manifest(k: &KubeLab, host: &str, component: &str, when: &str) {
    k.lab.exec_ok(
        host,
        &[
            "test",
            "-f",
            &format!("/etc/kubernetes/manifests/{component}.yaml"),
        ],
    );
    let mut running = vec![];
    assert!(
        eventually(Duration::from_secs(120), || {
            running = pids(k, host, component);
            running.len() == 1
        }),
        "{host}: {component} processes {when}: {running:?}"
    );
}

/// `component` does not run as a systemd unit on `host` (static-pod mode); `when` is for the message.
fn assert_no_unit(k: &KubeLab, host: &str, component: &str, when: &str) {
    let unit = k
        .lab
        .exec(host, &["systemctl", "is-active", &format!("{component}.service")]);
    assert_ne!(
        String::from_utf8_lossy(&unit.stdout).trim(),
        "active",
        "{host}: {component} runs as a unit {when}"
    );
}

/// `replace --reuse-host`: cp2's etcd data lost (its member killed and the data dir gone);
/// `hactl replace cp2 --reuse-host` rebuilds the member on the same host with a new ID, and its
/// control plane runs again as static pods (one process of each component, no unit of theirs,
/// `/readyz` answering), its mirror pods show, every member is healthy and `up` has nothing to do.
fn reuse_host(k: &KubeLab, name: &str, t0: Instant) {
    let member_id = |host: &str| -> String {
        let (_, doc) = k.status();
        doc["members"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["name"] == host))
            .and_then(|m| m["id"].as_str())
            .unwrap_or("")
            .to_string()
    };
    let before = member_id("cp2");
    assert!(!before.is_empty(), "no member cp2 in status before the replace");
    k.lab
        .exec("cp2", &["systemctl", "kill", "-s", "KILL", "etcd.service"]);
    k.lab.exec("cp2", &["systemctl", "stop", "etcd.service"]);
    k.lab.exec_ok("cp2", &["rm", "-rf", "/var/lib/etcd"]);
    let started = Instant::now();
    let out = k.hactl(&["replace", "cp2", "--reuse-host", "--yes"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "replace --reuse-host failed: {}",
        text(&out)
    );
    println!(
        "{name}: replace cp2 --reuse-host took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        eventually(Duration::from_secs(180), || k.readyz_on("cp2")),
        "cp2's apiserver does not answer /readyz after replace --reuse-host"
    );
    for c in COMPONENTS {
        let mut running = vec![];
        assert!(
            eventually(Duration::from_secs(120), || {
                running = pids(k, "cp2", c);
                running.len() == 1
            }),
            "cp2: {c} processes after replace --reuse-host: {running:?}"
        );
        assert_no_unit(k, "cp2", c, "after replace --reuse-host");
    }
    let mut last = vec![];
    let mirrored = eventually(Duration::from_secs(180), || {
        last = mirror_pods(k);
        COMPONENTS
            .iter()
            .all(|c| last.iter().any(|(comp, node, _)| comp == c && node == "cp2"))
    });
    assert!(mirrored, "cp2's mirror pods are not in kube-system: {last:?}");
    if let Err(doc) = k.wait_healthy(Duration::from_secs(180)) {
        panic!("status is not healthy after replace --reuse-host: {doc}");
    }
    let after = member_id("cp2");
    assert!(
        !after.is_empty() && after != before,
        "cp2's member ID after replace --reuse-host: {after:?} (before: {before})"
    );
    k.assert_up_no_changes("after replace --reuse-host");
    check(name, "replace --reuse-host", t0);
}

/// `binary roll`: the control-plane images rebuilt under the same tag (the real binaries with
/// bytes appended, packed by `scripts/node-images.sh` into a directory of the test's own, which
/// the inventory then names). `up` imports them and rolls every component one host at a time,
/// each apiserver behind its drained backend, with reads through the VIP answered
/// throughout (0 failed); afterwards each component runs the rebuilt binary (its process's
/// executable hashes as the rebuilt file does) and a second `up` has nothing to do.
fn image_roll(k: &KubeLab, name: &str, t0: Instant) {
    use sha2::{Digest, Sha256};
    let work = tempfile::tempdir().unwrap();
    let bins = work.path().join("bin");
    std::fs::create_dir_all(&bins).unwrap();
    let mut sums = String::new();
    for entry in std::fs::read_dir(&k.bin_dir).unwrap().flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        if !entry.path().is_file() || file == "SHA256SUMS" {
            continue;
        }
        let mut bytes = std::fs::read(entry.path()).unwrap();
        if COMPONENTS.contains(&file.as_str()) {
            // An ELF file runs with trailing bytes: nothing maps them.
            bytes.extend_from_slice(b"hactl static-pod image roll");
        }
        std::fs::write(bins.join(&file), &bytes).unwrap();
        std::fs::set_permissions(bins.join(&file), entry.metadata().unwrap().permissions()).unwrap();
        sums.push_str(&format!("{}  {file}\n", hex::encode(Sha256::digest(&bytes))));
    }
    std::fs::write(bins.join("SHA256SUMS"), &sums).unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/node-images.sh");
    let packed = std::process::Command::new("bash")
        .arg(&script)
        .arg(format!("v{}", k.version))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HACTL_KUBE_BIN_DIR", &bins)
        .env("HACTL_IMAGE_CACHE", work.path().join("images"))
        .output()
        .unwrap();
    assert!(packed.status.success(), "node-images.sh: {}", text(&packed));
    let images = String::from_utf8_lossy(&packed.stdout)
        .lines()
        .last()
        .unwrap_or("")
        .trim()
        .to_string();
    k.set_inventory(|t| {
        let moved: String = t
            .lines()
            .map(|l| match l.strip_prefix("      dir: ") {
                Some(_) => format!("      dir: {images}\n"),
                None => format!("{l}\n"),
            })
            .collect();
        assert_ne!(moved, t, "no images dir in the inventory:\n{t}");
        moved
    });
    let cps = k.control_planes();
    let plan = k.hactl_ok(&["plan"]);
    crate::mode_switch::assert_one_host_at_a_time(&plan, &cps, "Restart changed apiservers");
    let poller = k.poll_reads();
    let started = Instant::now();
    let out = k.hactl(&["up", "--yes"]);
    let took = started.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(2));
    let attempts = poller.stop();
    assert!(out.status.success(), "the image roll failed: {}", text(&out));
    let failed = crate::support::kube::report_failures(&format!("{name}: image roll"), started, &attempts);
    println!("{name}: the rebuilt control-plane images rolled in {took:.1} s");
    assert_eq!(failed, 0, "a read through the VIP failed during the image roll");
    // Each rebuilt binary hashed once, for every host.
    let wants: Vec<String> = COMPONENTS
        .iter()
        .map(|c| hex::encode(Sha256::digest(std::fs::read(bins.join(c)).unwrap())))
        .collect();
    for h in &cps {
        for (c, want) in COMPONENTS.iter().zip(&wants) {
            let mut got = String::new();
            assert!(
                eventually(Duration::from_secs(60), || {
                    got = match pids(k, h, c).as_slice() {
                        [pid] => k.lab.exec_ok(h, &["sha256sum", &format!("/proc/{pid}/exe")]),
                        _ => String::new(),
                    };
                    got.starts_with(want.as_str())
                }),
                "{h}: {c} does not run the rebuilt binary ({want}): {got:?}"
            );
        }
    }
    k.assert_up_no_changes("after the image roll");
    check(name, "binary roll", t0);
}
