//! A rebuilt Kubernetes binary of the same version (the real 1.20.2 server binaries with bytes
//! appended, so they still run and report the same version but hash differently) rolls through
//! `hactl up`: the plan shows the roll first (every apiserver behind its drained HAProxy backend,
//! then controller-manager and scheduler with a Lease gate), the apiservers restart one host at a
//! time, then the controllers, then the kubelets and kube-proxies (rebuilt too) one node at a
//! time, and kubectl through the VIP answers throughout (0 failed requests).
//! Then a binary written after its unit started (a run that stopped between upload and restart)
//! is restarted by the next `up`, and nothing else is. Then a roll cut (Ctrl-C) after it took
//! an apiserver out of the load balancers: `status` reports the server left out, and the next
//! `up` returns it. Last, a kubelet roll whose first kubelet cannot report stops there.
//!
//! Needs root and the Kubernetes binaries (see `support/kube.rs`).

use crate::support::kube as kube_support;

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use kube_support::{report_failures, KubeLab};

const SERVERS: [&str; 3] = ["kube-apiserver", "kube-controller-manager", "kube-scheduler"];
/// The node binaries, rebuilt too: their restarts roll one node at a time, after the controllers.
const NODE: [&str; 2] = ["kubelet", "kube-proxy"];

/// A copy of the bundle in `dir` whose server binaries have `tag` appended (an ELF file runs
/// with trailing bytes: nothing maps them).
fn rebuilt(real: &Path, dir: &Path, tag: &str) {
    std::fs::create_dir_all(dir).unwrap();
    for entry in std::fs::read_dir(real).unwrap().flatten() {
        let name = entry.file_name();
        if entry.path().is_file() {
            std::fs::copy(entry.path(), dir.join(&name)).unwrap();
        }
    }
    for b in SERVERS.iter().chain(&NODE) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join(b))
            .unwrap();
        f.write_all(tag.as_bytes()).unwrap();
    }
}

fn sha256(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(std::fs::read(path).unwrap()))
}

#[test]
fn a_rebuilt_kubernetes_binary_rolls_one_host_at_a_time_while_kubectl_answers_through_the_vip() {
    let name = "a_rebuilt_kubernetes_binary_rolls_one_host_at_a_time_while_kubectl_answers_through_the_vip";
    let Some(k) = KubeLab::up(name, 3, 2, 0) else {
        return;
    };
    let cps = k.control_planes();
    let work = tempfile::tempdir().unwrap();
    let bundle = work.path().join("rebuilt");
    rebuilt(&k.bin_dir, &bundle, "\nhactl rebuild test\n");
    assert_eq!(
        kube_support::version_of(&bundle),
        k.version,
        "the rebuilt binary still runs and reports its version"
    );
    let new_sha = sha256(&bundle.join("kube-apiserver"));
    assert_ne!(new_sha, sha256(&k.bin_dir.join("kube-apiserver")));
    let old_dir = k.bin_dir.display().to_string();
    k.set_inventory(|t| {
        assert!(t.contains(&old_dir), "{t}");
        t.replace(&old_dir, &bundle.display().to_string())
    });

    // The plan shows the roll before it runs.
    let plan = k.hactl_ok(&["plan"]);
    println!("{plan}");
    let apiservers = plan
        .find("== Restart changed apiservers (one host at a time)")
        .expect("the apiserver roll is planned");
    let controllers = plan
        .find("== Restart changed controller-managers and schedulers (one host at a time)")
        .expect("the controller roll is planned");
    assert!(apiservers < controllers, "apiservers roll first");
    for unit in SERVERS {
        assert_eq!(
            plan.matches(&format!("run systemctl restart {unit}.service"))
                .count(),
            cps.len(),
            "{unit} restarts on every control-plane host:\n{plan}"
        );
    }
    assert!(
        plan.contains("renewed within"),
        "the Lease gate is planned:\n{plan}"
    );
    let drains = plan[apiservers..controllers].matches("maint").count();
    assert!(drains >= cps.len(), "each apiserver is drained first:\n{plan}");
    let nodes = plan
        .find("== Start the node components (one host at a time)")
        .unwrap_or_else(|| panic!("the node components' roll is not planned one host at a time:\n{plan}"));
    assert!(controllers < nodes, "the node components roll last:\n{plan}");
    for unit in NODE {
        assert_eq!(
            plan[nodes..]
                .matches(&format!("run systemctl restart {unit}.service"))
                .count(),
            cps.len(),
            "{unit} restarts on every node:\n{plan}"
        );
    }

    let earlier: Vec<u64> = cps
        .iter()
        .map(|h| k.lab.active_since_us(h, "kube-apiserver.service"))
        .collect();
    let poller = k.poll_reads();
    assert!(
        poller.wait_answered(3, Duration::from_secs(30)),
        "kubectl through the VIP did not answer before the roll"
    );
    let t0 = Instant::now();
    let out = k.hactl(&["up", "--yes"]);
    let took = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(3));
    let attempts = poller.stop();
    assert!(
        out.status.success(),
        "the roll failed: {}",
        kube_support::text(&out)
    );
    let failed = report_failures(name, t0, &attempts);
    println!(
        "{name}: the roll of {} control-plane hosts took {took:.1} s",
        cps.len()
    );
    assert!(attempts.len() > 20, "the poller barely ran: {}", attempts.len());
    assert_eq!(failed, 0, "kubectl through the VIP failed during the roll");

    // Every host runs the new binary, restarted one at a time: apiservers first, each started
    // after the one before (which had to answer /readyz first), then the controllers.
    let mut api_starts = Vec::new();
    for (i, h) in cps.iter().enumerate() {
        let sha = k.lab.exec_ok(h, &["sha256sum", "/usr/local/bin/kube-apiserver"]);
        assert!(sha.starts_with(&new_sha), "{h}: {sha}");
        let exe = k.lab.exec_ok(
            h,
            &[
                "sh",
                "-c",
                "readlink /proc/$(systemctl show kube-apiserver -p MainPID --value)/exe",
            ],
        );
        assert!(!exe.contains("deleted"), "{h} still runs the old binary: {exe}");
        let s = k.lab.active_since_us(h, "kube-apiserver.service");
        assert!(s > earlier[i], "{h}'s apiserver did not restart");
        api_starts.push((s, h.clone()));
    }
    api_starts.sort();
    println!("{name}: apiserver restarts (µs after boot): {api_starts:?}");
    for pair in api_starts.windows(2) {
        assert!(
            pair[1].0 - pair[0].0 >= 2_000_000,
            "{} restarted less than 2 s after {}: not one at a time",
            pair[1].1,
            pair[0].1
        );
    }
    let last_api = api_starts.last().unwrap().0;
    for h in &cps {
        for unit in ["kube-controller-manager.service", "kube-scheduler.service"] {
            assert!(
                k.lab.active_since_us(h, unit) > last_api,
                "{h}: {unit} restarted before the last apiserver"
            );
        }
    }
    // Then the nodes, one after the other: a node's kubelet restarts only after the node before
    // it had its kubelet answer /healthz and its kube-proxy restarted.
    let mut last_node: Option<(String, u64)> = None;
    for h in &cps {
        let kubelet = k.lab.active_since_us(h, "kubelet.service");
        let proxy = k.lab.active_since_us(h, "kube-proxy.service");
        assert!(
            kubelet > last_api,
            "{h}: the kubelet restarted before the apiservers' roll ended"
        );
        assert!(proxy > kubelet, "{h}: kube-proxy restarted before the kubelet");
        if let Some((before, before_proxy)) = &last_node {
            assert!(
                kubelet > *before_proxy,
                "{h}'s kubelet restarted before {before}'s node components were done: not one node at a time"
            );
        }
        println!("{name}: {h}: kubelet restarted at {kubelet} µs, kube-proxy at {proxy} µs");
        last_node = Some((h.clone(), proxy));
    }
    let again = k.hactl_ok(&["plan"]);
    assert_eq!(again.trim(), "no changes");

    // A binary written after its unit started (the upload of a run that stopped before the
    // restart): the next plan restarts that unit on that host alone.
    k.lab.exec_ok(
        &cps[0],
        &["sh", "-c", "sleep 3; touch /usr/local/bin/kube-scheduler"],
    );
    let plan = k.hactl_ok(&["plan"]);
    assert_eq!(
        plan.matches("run systemctl restart").count(),
        1,
        "only the stale scheduler restarts:\n{plan}"
    );
    assert!(
        plan.contains("run systemctl restart kube-scheduler.service"),
        "{plan}"
    );
    k.hactl_ok(&["up", "--yes"]);
    assert_eq!(k.hactl_ok(&["plan"]).trim(), "no changes");

    a_roll_cut_after_its_drain_leaves_a_server_that_status_reports_and_up_returns(&k, &cps[1]);
    a_kubelet_that_cannot_report_stops_the_node_roll_on_its_first_node(&k, &cps[0], &cps[1]);
}

/// A kubelet roll whose first node's kubelet restarts and answers its health endpoint but
/// cannot report to the apiservers (its client requests go to a proxy that refuses them, so the
/// host's own requests are untouched): `up` fails on that node, naming it and showing the
/// kubelet's journal, and `second`'s kubelet is not restarted. Once the cause is gone, `up`
/// finishes the roll. The Node wait is cut to 30 s by `HACTL_NODE_READY_TIMEOUT_SECS`.
fn a_kubelet_that_cannot_report_stops_the_node_roll_on_its_first_node(
    k: &KubeLab,
    first: &str,
    second: &str,
) {
    let name = "a_kubelet_that_cannot_report";
    let dropin = "/run/systemd/system/kubelet.service.d/50-hactl-test-no-api.conf";
    let proxy = "http://127.0.0.1:9";
    k.lab.exec_ok(
        first,
        &[
            "sh",
            "-c",
            &format!(
                "mkdir -p \"$(dirname {dropin})\" && printf '[Service]\\nEnvironment=HTTPS_PROXY={proxy} https_proxy={proxy}\\n' > {dropin} && systemctl daemon-reload"
            ),
        ],
    );
    // Both kubelets' binaries written after their units started: the next `up` restarts them,
    // one node at a time, `first` first.
    for h in [first, second] {
        k.lab
            .exec_ok(h, &["sh", "-c", "sleep 2; touch /usr/local/bin/kubelet"]);
    }
    let plan = k.hactl_ok(&["plan"]);
    let nodes = plan
        .find("== Start the node components (one host at a time)")
        .unwrap_or_else(|| panic!("no node roll planned:\n{plan}"));
    let restart = |h: &str| {
        plan[nodes..]
            .find(&format!("{h}: run systemctl restart kubelet.service"))
            .unwrap_or_else(|| panic!("{h}'s kubelet restart is not planned:\n{plan}"))
    };
    assert!(
        restart(first) < restart(second),
        "{first} does not roll first:\n{plan}"
    );
    assert!(
        plan[nodes..].contains(&format!("Node {first} is Ready again")),
        "the roll does not wait for {first}'s Node:\n{plan}"
    );

    let second_before = k.lab.active_since_us(second, "kubelet.service");
    let first_before = k.lab.active_since_us(first, "kubelet.service");
    let out = k.hactl_env(&["up", "--yes"], &[("HACTL_NODE_READY_TIMEOUT_SECS", "30")]);
    let said = kube_support::text(&out);
    assert!(
        !out.status.success(),
        "up succeeded with a kubelet that cannot report:\n{said}"
    );
    assert!(
        said.contains(&format!(
            "timed out after 30s waiting for: Node {first} is Ready again, reported by its restarted kubelet"
        )),
        "the failure does not name {first}'s Node wait:\n{said}"
    );
    assert!(
        said.contains("hactl-journal kubelet.service") && said.contains("proxyconnect"),
        "the failure does not show the kubelet's journal and its cause:\n{said}"
    );
    assert!(
        k.lab.active_since_us(first, "kubelet.service") > first_before,
        "{first}'s kubelet was not restarted"
    );
    assert_eq!(
        k.lab.active_since_us(second, "kubelet.service"),
        second_before,
        "{second}'s kubelet restarted after {first}'s failed: the roll did not stop"
    );
    println!("{name}: up stopped on {first}; {second}'s kubelet untouched");

    // The cause removed (and the kubelet's binary newer than its start again, as a fix that
    // reinstalls it would leave it): `up` restarts it, waits for its Node, and rolls on.
    k.lab.exec_ok(
        first,
        &[
            "sh",
            "-c",
            &format!("rm {dropin} && systemctl daemon-reload && sleep 2 && touch /usr/local/bin/kubelet"),
        ],
    );
    k.hactl_ok(&["up", "--yes"]);
    assert!(
        k.lab.active_since_us(second, "kubelet.service") > second_before,
        "{second}'s kubelet was not restarted once {first} was fixed"
    );
    assert_eq!(k.hactl_ok(&["plan"]).trim(), "no changes");
    println!("{name}: passed");
}

/// `hactl up --yes`, sent SIGINT (Ctrl-C) once it logs `when`: it stops before its next step.
/// Returns its exit code and what it wrote on stderr.
fn interrupted_up(k: &KubeLab, when: &str) -> (Option<i32>, String) {
    let inv = k.inv.to_str().unwrap();
    crate::support::cli::interrupted(&["up", "--yes", "-i", inv], |line| line.contains(when))
}

/// A roll cut after it took `host`'s apiserver out of the load balancers (Ctrl-C during its
/// restart): the server stays in maintenance on both, noted as `up`'s; `status` reports it
/// (exit 5) and says to run `up`; the next `up` waits for the apiserver and returns it, leaving
/// no note; then nothing is left to do.
fn a_roll_cut_after_its_drain_leaves_a_server_that_status_reports_and_up_returns(k: &KubeLab, host: &str) {
    let name = "a_roll_cut_after_its_drain";
    let lbs = ["lb1", "lb2"];
    // The apiserver's binary written after its unit started: the next `up` restarts it alone,
    // behind its drained server.
    k.lab.exec_ok(
        host,
        &["sh", "-c", "sleep 3; touch /usr/local/bin/kube-apiserver"],
    );
    let restart = format!("{host}: run systemctl restart kube-apiserver.service");
    let (code, seen) = interrupted_up(k, &restart);
    assert_ne!(code, Some(0), "the cut `up` exited 0:\n{seen}");
    // `host`'s server in kubernetes-api has `status` on load balancer `lb` (else the lab fails).
    let server_is = |lb: &str, status: &str| {
        k.lab.exec_ok(
            lb,
            &[
                "/usr/local/sbin/hactl-haproxy",
                "is",
                "kubernetes-api",
                host,
                status,
            ],
        )
    };
    for lb in lbs {
        server_is(lb, "MAINT");
        k.lab.exec_ok(
            lb,
            &[
                "test",
                "-s",
                &format!("/var/lib/hactl/held-by-up/kubernetes-api,{host}"),
            ],
        );
    }
    let status = k.hactl(&["status"]);
    let out = kube_support::text(&status);
    assert_eq!(status.status.code(), Some(5), "status of a cut roll: {out}");
    assert!(
        out.contains(&format!(
            "keeps kubernetes-api/{host} out of the rotation (MAINT)"
        )) && out.contains("run `hactl up`"),
        "{out}"
    );
    let plan = k.hactl_ok(&["plan"]);
    println!("{name}: plan after the cut:\n{plan}");
    assert!(
        plan.contains("== Return servers a cut run left out of the load balancers")
            && plan.contains(&format!("state kubernetes-api {host} ready")),
        "{plan}"
    );
    k.hactl_ok(&["up", "--yes"]);
    for lb in lbs {
        server_is(lb, "UP");
        let notes = k
            .lab
            .exec_ok(lb, &["sh", "-c", "ls -A /var/lib/hactl/held-by-up"]);
        assert_eq!(notes.trim(), "", "{lb} kept a note");
    }
    let status = k.hactl(&["status"]);
    assert!(status.status.success(), "{}", kube_support::text(&status));
    assert_eq!(k.hactl_ok(&["plan"]).trim(), "no changes");
    println!("{name}: passed");
}
