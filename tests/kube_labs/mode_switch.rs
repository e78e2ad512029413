//! Switching an installed control plane's mode (`kubernetes.mode`) with `hactl up`, on the lab of
//! `up.rs` (3 control planes in systemd mode, 2 load balancers), while a read through the VIP
//! (the kube-system Namespace) is polled throughout (0 failed requests):
//! - to `static-pod`: the plan shows the switch one host at a time (each host's apiserver backend
//!   drained before and made ready after, before the next host's drain); afterwards no unit of
//!   the three runs or is enabled (their files stay), each manifest is written and runs one
//!   process, every mirror pod shows, and a second `up` has nothing to do;
//! - back to `systemd`, cut by Ctrl-C on the second host (its manifests aside, no unit started
//!   yet: it runs neither mode) and carried on by the next `up`: the manifests are moved aside
//!   (`/etc/kubernetes/manifests.hactl-previous`, not deleted), the units run and are enabled,
//!   one process each, and a second `up` has nothing to do.
//!
//! Needs root and the Kubernetes binaries (see `support/kube.rs`).

use crate::static_pods::{mirror_pods, pids, COMPONENTS};
use crate::support::kube::{report_failures, text, KubeLab};
use crate::support::lab::eventually;

use std::time::{Duration, Instant};

/// `kubernetes.mode` in the inventory: `Some(mode)` written, `None` taken out (systemd, the
/// default).
pub(crate) fn set_mode(k: &KubeLab, mode: Option<&str>) {
    k.set_inventory(|t| {
        let without: String = t
            .lines()
            .filter(|l| !l.starts_with("    mode: "))
            .map(|l| format!("{l}\n"))
            .collect();
        match mode {
            Some(m) => {
                let with = without.replacen("  kubernetes:\n", &format!("  kubernetes:\n    mode: {m}\n"), 1);
                assert_ne!(with, without, "no kubernetes section:\n{t}");
                with
            }
            None => without,
        }
    });
}

/// The plan's `title` phase goes one host at a time: each host's backend is made ready before
/// the next host's is drained (also the image roll of `static_pods.rs`).
pub(crate) fn assert_one_host_at_a_time(plan: &str, cps: &[String], title: &str) {
    assert!(plan.contains(title), "no {title:?} in the plan:\n{plan}");
    let at = |what: &str| {
        plan.find(what)
            .unwrap_or_else(|| panic!("no {what:?} in the plan:\n{plan}"))
    };
    for pair in cps.windows(2) {
        let ready = at(&format!("kubernetes-api {} ready", pair[0]));
        let next = at(&format!("kubernetes-api {} drain", pair[1]));
        assert!(
            ready < next,
            "{} drained before {} was ready again:\n{plan}",
            pair[1],
            pair[0]
        );
    }
}

pub fn the_control_plane_switches_to_static_pods_and_back_while_the_api_answers(k: &KubeLab) {
    let name = "the_control_plane_switches_to_static_pods_and_back_while_the_api_answers";
    let cps = k.control_planes();
    let poller = k.poll_reads();
    assert!(
        poller.wait_answered(3, Duration::from_secs(30)),
        "the API did not answer through the VIP before the switch"
    );
    let t0 = Instant::now();

    // To static pods.
    set_mode(k, Some("static-pod"));
    let plan = k.hactl_ok(&["plan"]);
    assert_one_host_at_a_time(
        &plan,
        &cps,
        "Switch the control plane from systemd to static-pod, one host at a time",
    );
    let t = Instant::now();
    let out = k.hactl(&["up", "--yes"]);
    assert!(
        out.status.success(),
        "the switch to static pods failed: {}",
        text(&out)
    );
    println!(
        "{name}: systemd → static-pod took {:.1} s",
        t.elapsed().as_secs_f64()
    );
    for host in &cps {
        for c in COMPONENTS {
            let unit = format!("{c}.service");
            let active = k.lab.exec(host, &["systemctl", "is-active", &unit]);
            assert_ne!(
                String::from_utf8_lossy(&active.stdout).trim(),
                "active",
                "{host}: {unit} runs"
            );
            let enabled = k.lab.exec(host, &["systemctl", "is-enabled", &unit]);
            assert_eq!(
                String::from_utf8_lossy(&enabled.stdout).trim(),
                "disabled",
                "{host}: {unit}"
            );
            k.lab
                .exec_ok(host, &["test", "-f", &format!("/etc/systemd/system/{unit}")]);
            k.lab.exec_ok(
                host,
                &["test", "-f", &format!("/etc/kubernetes/manifests/{c}.yaml")],
            );
            let running = pids(k, host, c);
            assert_eq!(running.len(), 1, "{host}: {c} processes: {running:?}");
        }
    }
    let mut last = vec![];
    let all_mirrored = eventually(Duration::from_secs(180), || {
        last = mirror_pods(k);
        cps.iter().all(|h| {
            COMPONENTS
                .iter()
                .all(|c| last.iter().any(|(comp, node, _)| comp == c && node == h))
        })
    });
    assert!(
        all_mirrored,
        "not every component's mirror pod shows after the switch: {last:?}"
    );
    k.assert_up_no_changes("after the switch to static pods");

    // Back to systemd.
    set_mode(k, None);
    let plan = k.hactl_ok(&["plan"]);
    assert_one_host_at_a_time(
        &plan,
        &cps,
        "Switch the control plane from static-pod to systemd, one host at a time",
    );
    // Cut in the middle (Ctrl-C as the second host's first unit is enabled, its manifests moved
    // aside, nothing started yet): the host runs neither mode and its server is kept out of the
    // load balancers' rotation; the next `up` carries the switch on from what the hosts run.
    let t = Instant::now();
    let second = &cps[1];
    let (code, seen) =
        crate::support::cli::interrupted(&["up", "--yes", "-i", k.inv.to_str().unwrap()], |line| {
            line.contains(&format!("{second}: run systemctl enable kube-apiserver.service"))
        });
    assert_ne!(code, Some(0), "the cut switch exited 0:\n{seen}");
    for c in COMPONENTS {
        let running = pids(k, second, c);
        assert!(
            running.is_empty(),
            "{second}: {c} runs after the cut, before its unit was started: {running:?}"
        );
    }
    let plan = k.hactl_ok(&["plan"]);
    assert!(
        plan.contains("Switch the control plane from static-pod to systemd")
            && plan.contains(&format!("state kubernetes-api {second} ready")),
        "the plan after the cut does not carry the switch on: {plan}"
    );
    let out = k.hactl(&["up", "--yes"]);
    assert!(
        out.status.success(),
        "the switch back to systemd, carried on after the cut, failed: {}",
        text(&out)
    );
    println!(
        "{name}: static-pod → systemd took {:.1} s",
        t.elapsed().as_secs_f64()
    );
    for host in &cps {
        for c in COMPONENTS {
            let unit = format!("{c}.service");
            k.lab.exec_ok(host, &["systemctl", "is-active", &unit]);
            k.lab.exec_ok(host, &["systemctl", "is-enabled", &unit]);
            k.lab.exec_ok(
                host,
                &["test", "!", "-e", &format!("/etc/kubernetes/manifests/{c}.yaml")],
            );
            k.lab.exec_ok(
                host,
                &[
                    "test",
                    "-f",
                    &format!("/etc/kubernetes/manifests.hactl-previous/{c}.yaml"),
                ],
            );
            let running = pids(k, host, c);
            assert_eq!(running.len(), 1, "{host}: {c} processes: {running:?}");
        }
    }
    k.assert_up_no_changes("after the switch back to systemd");

    std::thread::sleep(Duration::from_secs(2));
    let attempts = poller.stop();
    let failed = report_failures(name, t0, &attempts);
    assert!(attempts.len() > 20, "the poller barely ran: {}", attempts.len());
    assert_eq!(failed, 0, "a read through the VIP failed during the switches");
    println!("{name}: passed");
}
