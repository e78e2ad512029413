//! Failures of a real control plane (the binaries of `HACTL_KUBE_BIN_DIR`, or of the cache
//! `scripts/kube-binaries.sh` builds; never skipped as root), one after the other on one lab (a
//! lab each cost a whole bring-up; the second failure starts once the first has been measured):
//! - the load balancer holding the VIP loses power while kubectl polls through the VIP: the API
//!   answers again within 5 s; powered on, status is healthy again without hactl;
//! - then the host holding the controller-manager and scheduler Leases loses power: another
//!   control-plane host holds each within the Lease duration plus the renew deadline (15 s + 10 s,
//!   the components' defaults), `hactl status` names the new holders and says degraded, and after
//!   power-on and `hactl up` it is healthy again;
//! - while that host is still down, the survivors are put in MAINT by hand: the API still answers
//!   through the VIP from HAProxy's unchecked backup twins (fail open), and hactl's drain takes a
//!   twin out and back with its apiserver.

use crate::support::kube as kube_support;
use crate::support::lab as lab_support;

use std::time::{Duration, Instant};

use hactl::lab::Fault;
use kube_support::{report_failures, KubeLab};
use lab_support::eventually;

/// leaseDuration + renewDeadline of kube-controller-manager and kube-scheduler (defaults).
const HANDOVER_BOUND: Duration = Duration::from_secs(15 + 10);

#[test]
fn kubernetes_answers_through_the_vip_and_its_leases_move_when_their_holders_lose_power() {
    let name = "kubernetes_failover";
    let Some(mut k) = KubeLab::up(name, 3, 2, 0) else {
        return;
    };
    // 1. The load balancer holding the VIP loses power.
    let mut holder = None;
    assert!(
        eventually(Duration::from_secs(30), || {
            holder = k.vip_holder();
            holder.is_some()
        }),
        "no load balancer holds the VIP"
    );
    let lb_holder = holder.unwrap();
    let poller = k.poll_reads();
    assert!(
        poller.wait_answered(2, Duration::from_secs(60)),
        "kubectl does not answer through the VIP"
    );
    let cut = Instant::now();
    k.lab.fault(&lb_holder, Fault::PowerCut);
    std::thread::sleep(Duration::from_secs(20));
    let attempts = poller.stop();
    report_failures(name, cut, &attempts);
    let before: Vec<_> = attempts.iter().filter(|a| a.end < cut).collect();
    assert!(
        !before.is_empty() && before.iter().all(|a| a.ok),
        "kubectl did not answer through the VIP before the cut"
    );
    // The outage: none when no request failed; else from the cut to the end of the first good
    // answer that started after the last failure.
    assert!(
        attempts.iter().any(|a| a.ok && a.start > cut),
        "kubectl never answered through the VIP after the cut"
    );
    let back = match attempts
        .iter()
        .filter(|a| !a.ok && a.end > cut)
        .map(|a| a.end)
        .max()
    {
        None => Duration::ZERO,
        Some(last_failure) => attempts
            .iter()
            .find(|a| a.ok && a.start >= last_failure)
            .map(|a| a.end.duration_since(cut))
            .expect("kubectl never answered again through the VIP after it failed"),
    };
    let new_holder = k.vip_holder();
    println!(
        "{name}: VIP moved {lb_holder} → {new_holder:?}; the API answered again {:.2} s after the power cut",
        back.as_secs_f64()
    );
    assert_ne!(new_holder.as_deref(), Some(lb_holder.as_str()));
    assert!(
        back <= Duration::from_secs(5),
        "the API answered through the VIP only {back:?} after the power cut"
    );

    // Powered on again, the load balancer's units start with it: status healthy (the Leases'
    // failure below then is the only one status can see).
    k.lab.fault(&lb_holder, Fault::Poweron);
    let mut last = (0, serde_json::Value::Null);
    let healthy = eventually(Duration::from_secs(180), || {
        last = k.status();
        last.0 == 0
    });
    assert!(
        healthy,
        "status is not healthy once {lb_holder} is back: {}",
        last.1
    );

    // 2. The host holding the Leases loses power.
    let before = k.wait_leases(Duration::from_secs(120), |h| h.starts_with("cp"));
    let victim = before["kube-system/kube-controller-manager"].clone();
    eprintln!("{name}: Lease holders before: {before:?}; power-cutting {victim}");
    let moved_off = |now: &std::collections::BTreeMap<String, String>| {
        before
            .iter()
            .filter(|(_, h)| **h == victim)
            .all(|(l, _)| now.get(l).is_some_and(|h| !h.is_empty() && *h != victim))
    };
    let cut = Instant::now();
    k.lab.fault(&victim, Fault::PowerCut);
    let mut last = None;
    let moved = eventually(HANDOVER_BOUND + Duration::from_secs(20), || {
        last = k.lease_holders_via_kubectl();
        last.as_ref().is_some_and(moved_off)
    });
    let took = cut.elapsed();
    assert!(moved, "the Leases did not leave {victim}: {last:?}");
    println!(
        "{name}: the Leases left {victim} {:.1} s after the power cut (bound {} s, seen by polling through the VIP): {last:?}",
        took.as_secs_f64(),
        HANDOVER_BOUND.as_secs()
    );
    // Polling adds at most one kubectl round trip (5 s timeout) to what it observes.
    assert!(
        took <= HANDOVER_BOUND + Duration::from_secs(5),
        "the handover took {took:?}, more than leaseDuration + renewDeadline"
    );

    // hactl status names the new holders and says degraded (a control-plane host is down).
    let (code, doc) = k.status();
    assert_eq!(code, 5, "status should say degraded: {doc}");
    let leases = doc["kubernetes"]["leases"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for l in &leases {
        let holder = l["holderHost"].as_str().unwrap_or("");
        assert!(
            !holder.is_empty() && holder != victim,
            "status names {holder:?} for {}: {doc}",
            l["name"]
        );
    }

    // 3. Fail open: with every checked apiserver out of `kubernetes-api` (the survivors put in
    // MAINT by hand on both load balancers, the victim still down), the API answers through the
    // VIP from the unchecked backup twins; the dead victim's twin is tried in turn, its failed
    // connection redispatched, and it stays as it was (no check marks it down).
    let cli = hactl::load_balancer::HAPROXY_CLI;
    let twin = |h: &str| format!("{h}{}", hactl::load_balancer::FAILOPEN_SUFFIX);
    let survivors: Vec<String> = k.control_planes().into_iter().filter(|h| *h != victim).collect();
    let set = |state: &str| {
        for lb in ["lb1", "lb2"] {
            for h in &survivors {
                let server = format!("kubernetes-api/{h}");
                k.lab
                    .exec_ok(lb, &[cli, "set", "server", &server, "state", state]);
            }
        }
    };
    set("maint");
    let served = (0..6)
        .map(|_| k.kubectl(&["get", "namespace", "kube-system"]))
        .filter(|o| o.status.success())
        .count();
    let stat = k.lab.exec_ok("lb1", &[cli, "show", "stat"]);
    set("ready");
    println!("{name}: fail open: {served} of 6 requests answered with every checked apiserver out");
    assert_eq!(
        served, 6,
        "requests failed with every checked apiserver out:\n{stat}"
    );
    let status_of = |server: &str| {
        stat.lines()
            .find(|l| l.starts_with(&format!("kubernetes-api,{server},")))
            .and_then(|l| l.split(',').nth(17))
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(status_of(&twin(&victim)), "no check", "{stat}");
    for h in &survivors {
        assert_eq!(status_of(h), "MAINT", "{stat}");
        assert_eq!(status_of(&twin(h)), "no check", "{stat}");
    }
    // hactl's drain takes a twin out with its apiserver, and puts it back with it.
    let (lb, h) = ("lb1", survivors[0].as_str());
    for (state, want) in [("maint", "MAINT"), ("ready", "no check")] {
        k.lab.exec_ok(lb, &[cli, "state", "kubernetes-api", h, state]);
        let stat = k.lab.exec_ok(lb, &[cli, "show", "stat"]);
        let line = stat
            .lines()
            .find(|l| l.starts_with(&format!("kubernetes-api,{},", twin(h))))
            .unwrap_or_default();
        assert_eq!(line.split(',').nth(17), Some(want), "{stat}");
    }

    k.lab.fault(&victim, Fault::Poweron);
    k.hactl_ok(&["up", "--yes"]);
    let mut last = (0, serde_json::Value::Null);
    let healthy = eventually(Duration::from_secs(120), || {
        last = k.status();
        last.0 == 0
    });
    assert!(healthy, "status is not healthy after power-on and up: {}", last.1);
}
