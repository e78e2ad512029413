//! `hactl remove` with a real control plane (the binaries of `HACTL_KUBE_BIN_DIR`, or of the cache
//! `scripts/kube-binaries.sh` builds; never skipped as root): five control-plane hosts (etcd and
//! the control plane; the inventory refuses an even etcd count, so 5 → 3 is the smallest removal
//! it accepts) and two load balancers. cp4 and cp5 leave the inventory (`roles: []`), `plan`
//! refuses and names `hactl remove`, and the two removals run while a writer creates ConfigMaps
//! through the VIP (each write goes through an apiserver to etcd; one answered with etcd's
//! leader-change error is sent once more, every other failure counts, and the acknowledged
//! writes read back). The first removal puts both hosts' apiservers in MAINT (cp5's still names
//! cp4's member). Afterwards the removed hosts' servers are gone from both HAProxy backends on every
//! load balancer, every remaining apiserver runs (and its unit names) an `--etcd-servers` without
//! them, the member list has three members, their apiserver, controller-manager, scheduler and
//! etcd are stopped and fenced, their data dirs renamed aside, their Nodes deleted with their
//! node components stopped and node data moved aside, and a second `up` has nothing to do.

use crate::support::kube as kube_support;
use crate::support::lab as lab_support;

use std::time::{Duration, Instant};

use kube_support::{report_failures, text, KubeLab};
use lab_support::eventually;

/// The member names of `hactl-etcdctl member list` on `from`, sorted.
fn member_names(k: &KubeLab, from: &str) -> Vec<String> {
    let out = k
        .lab
        .exec_ok(from, &["/usr/local/sbin/hactl-etcdctl", "member", "list"]);
    let mut v: Vec<String> = out
        .lines()
        .filter_map(|l| l.split(", ").nth(2).map(str::to_string))
        .collect();
    v.sort();
    v
}

const REMOVED: [&str; 2] = ["cp4", "cp5"];

#[test]
fn remove_of_control_plane_hosts_takes_them_out_of_etcd_haproxy_and_the_apiservers_while_writes_go_through() {
    let name = "remove_of_control_plane_hosts_takes_them_out_of_etcd_haproxy_and_the_apiservers_while_writes_go_through";
    let Some(k) = KubeLab::up(name, 5, 2, 0) else {
        return;
    };
    let readyz = k.kubectl_ok(&["get", "--raw", "/readyz"]);
    assert_eq!(readyz.trim(), "ok", "/readyz through the VIP: {readyz}");
    assert_eq!(member_names(&k, "cp1"), ["cp1", "cp2", "cp3", "cp4", "cp5"]);
    let removed_ips: Vec<String> = REMOVED.iter().map(|h| k.lab.ip(h).to_string()).collect();
    for lb in ["lb1", "lb2"] {
        let stat = k.lab.exec_ok(lb, &["/usr/local/sbin/hactl-haproxy", "show stat"]);
        for backend in ["etcd-client", "kubernetes-api"] {
            for h in REMOVED {
                assert!(
                    stat.lines().any(|l| l.starts_with(&format!("{backend},{h},"))),
                    "{lb}: no {h} in {backend} before the removal:\n{stat}"
                );
            }
        }
    }

    // The operator takes cp4 and cp5 out of the inventory, keeping them reachable with
    // `roles: []`.
    for ip in &removed_ips {
        k.set_inventory(|t| {
            let out = t.replace(
                &format!(
                    "address: \"{ip}\"\n    prefixLength: 24\n    roles:\n    - etcd\n    - control-plane"
                ),
                &format!("address: \"{ip}\"\n    prefixLength: 24\n    roles: []"),
            );
            assert_ne!(out, t, "no roles of {ip} found in the inventory:\n{t}");
            out
        });
    }
    let o = k.hactl(&["plan"]);
    assert_eq!(o.status.code(), Some(2), "plan: {}", text(&o));
    assert!(text(&o).contains("hactl remove cp"), "plan: {}", text(&o));

    // Each write goes through an apiserver to etcd. A write the apiserver answers with etcd's
    // leader-change error (a proposal dropped while cp4 or cp5, if leader, hands leadership
    // over) is sent once more, as a client of etcd's would; every other failure counts, and so
    // does a second one. (10 s per request: see `KubeLab::poll_api_writes`.)
    let writer = k.poll_api_writes(
        |n, server| {
            vec![
                "-X".into(),
                "POST".into(),
                "-H".into(),
                "Content-Type: application/json".into(),
                "--data".into(),
                format!(
                    r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"remove-writer-{n}"}},"data":{{"n":"{n}"}}}}"#
                ),
                format!("{server}/api/v1/namespaces/default/configmaps"),
            ]
        },
        |o| o.status.success() && String::from_utf8_lossy(&o.stdout).ends_with("\nHTTP 201"),
    );
    std::thread::sleep(Duration::from_secs(2));
    let t0 = Instant::now();
    let mut took = Vec::new();
    for h in REMOVED {
        let t = Instant::now();
        let out = k.hactl(&["remove", h, "--yes"]);
        took.push(t.elapsed().as_secs_f64());
        if out.status.code() != Some(0) {
            writer.stop();
            panic!("remove {h} failed: {}", text(&out));
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    let writes = writer.stop();
    println!(
        "{name}: remove cp4 took {:.1} s, remove cp5 {:.1} s",
        took[0], took[1]
    );
    let failed = report_failures(&format!("{name}: ConfigMap writes"), t0, &writes);
    // A removal moves etcd's leadership at most once (when the leaving member leads), and the
    // writer has one write in flight: at most one write per removal meets a dropped proposal.
    let resent = writes.iter().filter(|w| w.resent.is_some()).count();
    assert!(
        resent <= REMOVED.len(),
        "{resent} writes were sent twice after etcd's leader change, more than one per removal"
    );

    // Every acknowledged write reads back: its ConfigMap is there, with its own number.
    let listed = k.kubectl_ok(&[
        "get",
        "configmaps",
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.name}={.data.n}{"\n"}{end}"#,
    ]);
    let stored: std::collections::BTreeSet<&str> = listed.lines().collect();
    let lost: Vec<usize> = (1..=writes.len())
        .filter(|n| writes[n - 1].ok)
        .filter(|n| !stored.contains(format!("remove-writer-{n}={n}").as_str()))
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged ConfigMap writes missing on read-back: {lost:?}"
    );

    // The first removal's RM2 put cp5's apiserver in MAINT too, before cp4's member left: cp5
    // leaves in the same edit and its apiserver still named cp4 in `--etcd-servers`, so a request
    // through the VIP in flight to it when cp4 left would fail. HAProxy's own log says so.
    for lb in ["lb1", "lb2"] {
        let log = k.lab.exec_ok(
            lb,
            &["journalctl", "-u", "haproxy.service", "--no-pager", "-o", "cat"],
        );
        for s in ["cp4", "cp5"] {
            assert!(
                log.contains(&format!(
                    "Server kubernetes-api/{s} is going DOWN for maintenance"
                )),
                "{lb}: HAProxy never put kubernetes-api/{s} in MAINT:\n{log}"
            );
        }
    }

    // etcd: two members fewer, seen from a remaining host.
    assert_eq!(member_names(&k, "cp1"), ["cp1", "cp2", "cp3"]);

    // HAProxy: the removed hosts are in neither backend on any load balancer; the others serve.
    for lb in ["lb1", "lb2"] {
        let stat = k.lab.exec_ok(lb, &["/usr/local/sbin/hactl-haproxy", "show stat"]);
        let cfg = k.lab.exec_ok(lb, &["cat", "/etc/haproxy/haproxy.cfg"]);
        for (h, ip) in REMOVED.iter().zip(&removed_ips) {
            assert!(!stat.contains(&format!(",{h},")), "{lb} still lists {h}:\n{stat}");
            assert!(
                !cfg.contains(&format!("{ip}:")),
                "{lb}: haproxy.cfg still names {ip}:\n{cfg}"
            );
        }
        for backend in ["etcd-client", "kubernetes-api"] {
            assert!(
                eventually(Duration::from_secs(30), || k
                    .lab
                    .exec(lb, &["/usr/local/sbin/hactl-haproxy", "is", backend, "cp3", "UP"])
                    .status
                    .success()),
                "{lb}: cp3 not UP in {backend}"
            );
        }
    }

    // The remaining apiservers: the running process and the unit name neither removed host.
    for h in ["cp1", "cp2", "cp3"] {
        let servers = k.running_etcd_servers(h);
        let unit = k.lab.exec_ok(h, &["systemctl", "cat", "kube-apiserver.service"]);
        assert!(
            unit.contains("--etcd-servers"),
            "{h}: no --etcd-servers in the unit:\n{unit}"
        );
        for ip in &removed_ips {
            assert!(
                !servers.contains(&format!("https://{ip}:")),
                "{h}: the running apiserver still names {ip}: {servers}"
            );
            assert!(
                !unit.contains(&format!("https://{ip}:")),
                "{h}: the unit still names {ip}:\n{unit}"
            );
        }
        assert!(
            servers.contains(&format!("https://{}:2379", k.lab.ip(h))),
            "{h}: {servers}"
        );
        assert!(k.readyz_on(h), "{h}: /readyz does not answer");
    }

    // The removed hosts: every unit stopped, fenced (a start is refused), the data dir renamed
    // aside.
    for h in REMOVED {
        for unit in [
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "etcd",
        ] {
            let o = k.lab.exec(h, &["systemctl", "is-active", unit]);
            assert!(!o.status.success(), "{unit} still runs on {h}");
            k.lab.exec_ok(
                h,
                &[
                    "test",
                    "-e",
                    &format!("/etc/systemd/system/{unit}.service.d/hactl-fence.conf"),
                ],
            );
            let o = k.lab.exec(h, &["systemctl", "start", unit]);
            assert!(!o.status.success(), "{unit} started on {h} despite the fence");
        }
        k.lab.exec_ok(h, &["test", "!", "-e", "/var/lib/etcd"]);
        let aside = k
            .lab
            .exec_ok(h, &["sh", "-c", "ls -d /var/lib/etcd.hactl-removed-*"]);
        k.lab
            .exec_ok(h, &["test", "-d", &format!("{}/member", aside.trim())]);
    }

    // Their Nodes: deleted, their node components stopped, their node data moved aside under
    // the run's suffix (RN1-RN5 after RM11), and the remaining nodes re-routed without them.
    let nodes = k.kubectl_ok(&["get", "nodes", "-o", "name"]);
    for h in REMOVED {
        assert!(
            !nodes.lines().any(|l| l == format!("node/{h}")),
            "Node {h} still registered:\n{nodes}"
        );
        for unit in ["kubelet", "kube-proxy", "containerd"] {
            let o = k.lab.exec(h, &["systemctl", "is-active", unit]);
            assert!(!o.status.success(), "{unit} still runs on {h}");
        }
        k.lab.exec_ok(h, &["test", "!", "-e", "/var/lib/kubelet"]);
        k.lab
            .exec_ok(h, &["sh", "-c", "ls -d /var/lib/kubelet.hactl-removed-remove-*"]);
    }
    for h in ["cp1", "cp2", "cp3"] {
        assert!(
            nodes.lines().any(|l| l == format!("node/{h}")),
            "Node {h} gone:\n{nodes}"
        );
        let routes = k.lab.exec_ok(h, &["ip", "route"]);
        for ip in &removed_ips {
            assert!(
                !routes.contains(&format!("via {ip} ")),
                "{h} still routes through {ip}:\n{routes}"
            );
        }
    }

    // The inventory and the cluster agree now: a second `up` has nothing to do.
    let o = k.hactl(&["up", "--yes"]);
    assert!(o.status.success(), "second up: {}", text(&o));
    assert!(text(&o).contains("no changes"), "second up: {}", text(&o));

    assert!(writes.len() > 20, "the writer barely ran: {}", writes.len());
    assert_eq!(
        failed, 0,
        "ConfigMap writes through the VIP failed during the removals (listed above)"
    );
}
