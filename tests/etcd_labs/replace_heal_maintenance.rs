//! Acceptance tests of replace, heal and maintenance (docs/recovery.md, "Acceptance tests") on a
//! lab of real hosts: real systemd, sshd and etcd 3.5.16. One lab serves every scenario in turn
//! (each leaves the cluster at 3 healthy voters), to keep the run short on 2 cores.
//! They need root; without it they print `SKIPPED <name>: needs root`.

use crate::support::cli as cli_support;
use crate::support::lab as lab_support;
use crate::support::members;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cli_support::text;
use hactl::etcd::safety::{r_add, r_remove, Counts};
use lab_support::{eventually, TestLab};
use members::{ctl, done_ts, hactl, journal, member_id, members, move_roles, set_inventory};

/// Every member healthy, three voters, no learner (docs/recovery.md, "Acceptance tests" `assert_cluster`, without hashkv).
fn assert_cluster(lab: &TestLab, from: &str, names: &[&str]) {
    let ok = eventually(Duration::from_secs(60), || {
        ctl(lab, from, &["endpoint", "health", "--cluster"]).0
    });
    assert!(
        ok,
        "cluster not healthy: {}",
        ctl(lab, from, &["endpoint", "health", "--cluster"]).1
    );
    let list = members(lab, from);
    let mut seen: Vec<&str> = list.iter().filter_map(|l| l.split(", ").nth(2)).collect();
    seen.sort();
    let mut want = names.to_vec();
    want.sort();
    assert_eq!(seen, want, "{list:?}");
    assert!(
        list.iter().all(|l| l.ends_with(", false")),
        "a learner is left: {list:?}"
    );
    assert!(list.iter().all(|l| l.contains(", started, ")), "{list:?}");
    let (_, alarms) = ctl(lab, from, &["alarm", "list"]);
    assert!(alarms.trim().is_empty(), "alarms: {alarms}");
}

fn client_urls(lab: &TestLab, hosts: &[&str]) -> String {
    hosts
        .iter()
        .map(|h| format!("https://{}:2379", lab.ip(h)))
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn replace_heal_and_maintenance_keep_quorum_on_a_real_cluster() {
    let name = "replace_heal_and_maintenance_keep_quorum_on_a_real_cluster";
    // One load balancer, so B2 also proves that haproxy.cfg follows a replace onto a new host.
    let Some(mut lab) = TestLab::up(name, 3, 1, 1, "trixie") else {
        return;
    };
    let inv = lab.inventory().to_path_buf();
    let state = inv.parent().unwrap().join("state");
    // Heal acts at once in the test; the production default is 5 minutes.
    set_inventory(&inv, |t| {
        format!("{t}  heal:\n    unhealthyTimeout: 0s\n    retryPeriod: 1s\n")
    });
    let o = hactl(&inv, &["up", "--yes"]);
    assert!(o.status.success());
    assert_cluster(&lab, "cp1", &["cp1", "cp2", "cp3"]);

    // --- C9: hactl's rules against what etcd 3.5.16 itself accepts (N=3, cp3 stopped).
    lab.exec_ok("cp3", &["systemctl", "stop", "etcd"]);
    std::thread::sleep(Duration::from_secs(6)); // etcd's 5 s "connected fully since" window
    let three_one_down = Counts {
        healthy: 2,
        ..Counts::healthy(3)
    };
    let cp2 = member_id(&lab, "cp1", "cp2").unwrap();
    let cp3_old = member_id(&lab, "cp1", "cp3").unwrap();
    let (ok, out) = ctl(&lab, "cp1", &["member", "remove", &cp2]);
    assert!(
        !ok && out.contains("unhealthy cluster"),
        "etcd removed a live member: {out}"
    );
    assert!(!r_remove(&three_one_down, true).is_allowed());
    let spare_url = format!("https://{}:2380", lab.ip("spare1"));
    let (ok, out) = ctl(
        &lab,
        "cp1",
        &[
            "member",
            "add",
            "x",
            "--learner",
            &format!("--peer-urls={spare_url}"),
        ],
    );
    assert!(
        !ok && out.contains("unhealthy cluster"),
        "etcd added a learner with a voter down: {out}"
    );
    assert!(!r_add(&three_one_down).is_allowed());
    // B3/B10 on the hactl side: the dry run of a replace never adds before it removes.
    let o = hactl(&inv, &["replace", "cp3", "--reuse-host", "--dry-run"]);
    assert!(o.status.success());
    let t = text(&o);
    assert!(t.find("P3 remove").unwrap() < t.find("P5 add").unwrap(), "{t}");
    // Removing the dead member: allowed by both (this is also P3 done by hand).
    assert!(r_remove(&three_one_down, false).is_allowed());
    let (ok, out) = ctl(&lab, "cp1", &["member", "remove", &cp3_old]);
    assert!(ok, "etcd refused to remove the dead member: {out}");
    // A replace that finds the member already removed (KCP #4365) carries on from P4.
    let o = hactl(&inv, &["replace", "cp3", "--reuse-host", "--yes"]);
    assert_eq!(o.status.code(), Some(0));
    let j = journal(&state, "replace-");
    assert!(
        j.iter().any(|e| e["step"] == "P3" && e["phase"] == "skipped"),
        "{j:?}"
    );
    assert_cluster(&lab, "cp1", &["cp1", "cp2", "cp3"]);
    assert_ne!(member_id(&lab, "cp1", "cp3").unwrap(), cp3_old);

    // --- B3: 2 of 3 down → refused, no membership call.
    let before = members(&lab, "cp1");
    lab.exec_ok("cp2", &["systemctl", "stop", "etcd"]);
    lab.exec_ok("cp3", &["systemctl", "stop", "etcd"]);
    let o = hactl(&inv, &["replace", "cp3", "--reuse-host", "--yes"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("quorum lost") && text(&o).contains("hactl recover"));
    let o = hactl(&inv, &["heal", "--once"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    lab.exec_ok("cp2", &["systemctl", "start", "--no-block", "etcd"]);
    lab.exec_ok("cp3", &["systemctl", "start", "--no-block", "etcd"]);
    assert_cluster(&lab, "cp1", &["cp1", "cp2", "cp3"]);
    assert_eq!(
        members(&lab, "cp1"),
        before,
        "membership changed while quorum was lost"
    );

    // --- B8: a leaked learner blocks P0 until named with --cleanup-learner.
    // etcd accepts an add only once every voter has been connected for 5 s.
    let mut out = String::new();
    let added = eventually(Duration::from_secs(30), || {
        let (ok, o) = ctl(
            &lab,
            "cp1",
            &[
                "member",
                "add",
                "x",
                "--learner",
                &format!("--peer-urls={spare_url}"),
            ],
        );
        out = o;
        ok
    });
    assert!(added, "{out}");
    let (ok, out) = ctl(
        &lab,
        "cp1",
        &[
            "member",
            "add",
            "y",
            "--learner",
            "--peer-urls=https://10.255.0.9:2380",
        ],
    );
    assert!(!ok && out.contains("too many learner members"), "{out}");
    let leaked = members(&lab, "cp1")
        .into_iter()
        .find(|l| l.ends_with(", true"))
        .unwrap()
        .split(", ")
        .next()
        .unwrap()
        .to_string();
    let o = hactl(&inv, &["replace", "cp3", "--reuse-host", "--yes"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains(&format!("foreign learner {leaked}")),
        "{}",
        text(&o)
    );
    let cp3_before = member_id(&lab, "cp1", "cp3").unwrap();
    let o = hactl(
        &inv,
        &[
            "replace",
            "cp3",
            "--reuse-host",
            "--yes",
            "--cleanup-learner",
            &leaked,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_cluster(&lab, "cp1", &["cp1", "cp2", "cp3"]);
    assert_ne!(member_id(&lab, "cp1", "cp3").unwrap(), cp3_before);

    // --- B1 + B14: kill -9 and wipe cp3 under a writer; heal sees the identity error and
    // replaces straight away (no restart), the writer keeps going.
    let cp3_before = member_id(&lab, "cp1", "cp3").unwrap();
    let stop = AtomicBool::new(false);
    let endpoints = client_urls(&lab, &["cp1", "cp2"]);
    /// Stops the writer when the scope ends, also on a panic (the scope would wait forever).
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let results = std::thread::scope(|s| {
        let _stop_writer = StopOnDrop(&stop);
        let writer = s.spawn(|| {
            let mut results = Vec::new();
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let started = Instant::now();
                let key = format!("/bench/{i}");
                let o = lab.exec(
                    "cp1",
                    &[
                        "timeout",
                        "2",
                        "/usr/local/sbin/hactl-etcdctl",
                        &format!("--endpoints={endpoints}"),
                        "put",
                        &key,
                        "v",
                    ],
                );
                results.push((time::OffsetDateTime::now_utc(), o.status.success()));
                i += 1;
                std::thread::sleep(Duration::from_millis(50).saturating_sub(started.elapsed()));
            }
            results
        });
        std::thread::sleep(Duration::from_secs(2));
        lab.exec_ok(
            "cp3",
            &["sh", "-c", "pkill -9 -x etcd; rm -rf /var/lib/etcd/member"],
        );
        // etcd restarts (Restart=on-failure) on the wiped dir and fails with its old identity.
        let crashed = eventually(Duration::from_secs(30), || {
            let o = lab.exec("cp3", &["journalctl", "-u", "etcd", "-n", "200", "-o", "cat"]);
            hactl::etcd::errors::identity_error(&text(&o)).is_some()
        });
        assert!(crashed, "cp3 did not hit the identity error");
        let o = hactl(&inv, &["heal", "--once", "--dry-run"]);
        assert!(text(&o).contains("would replace cp3"), "{}", text(&o));
        assert!(text(&o).contains("data dir is unusable"), "{}", text(&o));
        let o = hactl(&inv, &["heal", "--once"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(
            !text(&o).contains("restart etcd on cp3"),
            "heal restarted a member with an identity error"
        );
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::SeqCst);
        writer.join().unwrap()
    });
    let j = journal(&state, "replace-");
    let order: Vec<String> = ["P3", "P5", "P6", "P7"]
        .iter()
        .map(|s| done_ts(&j, s).unwrap_or_else(|| panic!("{s} not done: {j:?}")))
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "journal order {order:?}");
    let p3 = time::OffsetDateTime::parse(&order[0], &time::format_description::well_known::Rfc3339).unwrap();
    let failed: usize = results.iter().filter(|(_, ok)| !ok).count();
    let failed_after_p3 = results.iter().filter(|(t, ok)| !ok && *t > p3).count();
    println!(
        "B1 writer: {} puts, {failed} failed in all, {failed_after_p3} failed after P3",
        results.len()
    );
    assert_eq!(
        failed_after_p3, 0,
        "writes failed after the old member was removed"
    );
    assert_cluster(&lab, "cp1", &["cp1", "cp2", "cp3"]);
    assert_ne!(member_id(&lab, "cp1", "cp3").unwrap(), cp3_before);
    let aside = lab.exec_ok(
        "cp3",
        &["sh", "-c", "ls -d /var/lib/etcd.hactl-removed-* | wc -l"],
    );
    assert!(
        aside.trim().parse::<u32>().unwrap() >= 1,
        "old data dirs are kept"
    );

    // --- C1, C2, C4: maintenance within the budget.
    let o = hactl(&inv, &["maintenance", "start", "--yes", "cp1"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let j = journal(&state, "maintenance-cp1");
    let stop_etcd = done_ts(&j, "stop-etcd").expect("etcd stopped");
    if let Some(ml) = done_ts(&j, "move-leader") {
        assert!(ml < stop_etcd, "leadership moved after etcd stopped");
    }
    let o = hactl(&inv, &["maintenance", "start", "--yes", "cp2"]);
    assert_eq!(o.status.code(), Some(2), "C1: a second host while B=0");
    assert!(
        text(&o).contains("R-maint") && text(&o).contains("B=0"),
        "{}",
        text(&o)
    );
    let o = hactl(&inv, &["heal", "--once"]);
    assert!(
        !text(&o).contains("replace cp1"),
        "heal touched a member in maintenance"
    );
    let o = hactl(&inv, &["maintenance", "complete", "cp1"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_cluster(&lab, "cp2", &["cp1", "cp2", "cp3"]);
    lab.exec_ok("cp3", &["systemctl", "stop", "etcd"]);
    let o = hactl(&inv, &["maintenance", "start", "--yes", "cp1"]);
    assert_eq!(o.status.code(), Some(2), "C2: maintenance with a member down");
    let o = hactl(&inv, &["maintenance", "plan", "cp1"]);
    assert!(
        text(&o).contains("blocker: member cp3 is unhealthy"),
        "{}",
        text(&o)
    );

    // --- B2: replace the dead cp3 onto the spare (a new IP); the operator moved the roles first.
    // HAProxy on the load balancer follows: spare1's server joins, cp3's leaves, by a reload.
    let haproxy_pid = lab
        .exec_ok(
            "lb1",
            &["systemctl", "show", "-p", "MainPID", "--value", "haproxy"],
        )
        .trim()
        .to_string();
    let reloads = |lab: &TestLab| {
        lab.exec_ok("lb1", &["journalctl", "-u", "haproxy", "--no-pager", "-o", "cat"])
            .matches("Reloading")
            .count()
    };
    let reloads_before = reloads(&lab);
    let cfg = lab.exec_ok("lb1", &["cat", "/etc/haproxy/haproxy.cfg"]);
    assert!(
        cfg.contains(&format!("server cp3 {}:2379", lab.ip("cp3"))),
        "{cfg}"
    );
    move_roles(&lab, &inv, "cp3", "spare1");
    let o = hactl(&inv, &["replace", "cp3", "--host", "spare1", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_cluster(&lab, "cp1", &["cp1", "cp2", "spare1"]);
    let list = members(&lab, "cp1").join("\n");
    assert!(
        list.contains(&spare_url) && !list.contains(&format!("https://{}:2380", lab.ip("cp3"))),
        "{list}"
    );
    let o = lab.exec("cp3", &["systemctl", "start", "etcd"]);
    assert!(!o.status.success(), "the fenced old member could start");
    // The old host keeps no member of its own: its data dir moved aside (never deleted), its
    // etcd unit disabled, and after a power cycle etcd does not run there.
    let aside = lab.exec_ok(
        "cp3",
        &[
            "sh",
            "-c",
            "ls -d /var/lib/etcd.hactl-replaced-* && ! [ -e /var/lib/etcd ] && echo moved",
        ],
    );
    assert!(
        aside.contains("moved"),
        "the old data dir was not moved aside: {aside}"
    );
    let o = lab.exec("cp3", &["systemctl", "is-enabled", "etcd"]);
    assert!(
        !o.status.success(),
        "etcd is still enabled on the replaced host: {}",
        text(&o)
    );
    lab.fault("cp3", hactl::lab::Fault::PowerCut);
    lab.fault("cp3", hactl::lab::Fault::Poweron);
    std::thread::sleep(Duration::from_secs(3));
    let o = lab.exec("cp3", &["sh", "-c", "systemctl is-active etcd; pgrep -x etcd"]);
    assert!(
        !o.status.success(),
        "etcd runs on the replaced host after a power cycle: {}",
        text(&o)
    );
    // A host without the etcd role whose etcd unit is enabled again: plan shows it, up disables it.
    lab.exec_ok("cp3", &["systemctl", "enable", "etcd"]);
    let o = hactl(&inv, &["plan"]);
    assert!(
        text(&o).contains("Disable etcd on hosts without the etcd role")
            && text(&o).contains("systemctl disable etcd.service"),
        "plan does not show the enabled etcd unit on cp3: {}",
        text(&o)
    );
    let o = hactl(&inv, &["up", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = lab.exec("cp3", &["systemctl", "is-enabled", "etcd"]);
    assert!(!o.status.success(), "up left etcd enabled on cp3: {}", text(&o));
    let cfg = lab.exec_ok("lb1", &["cat", "/etc/haproxy/haproxy.cfg"]);
    assert!(
        cfg.contains(&format!("server spare1 {}:2379", lab.ip("spare1"))) && !cfg.contains("server cp3 "),
        "haproxy.cfg does not follow the membership:\n{cfg}"
    );
    let o = lab.exec(
        "lb1",
        &[
            "/usr/local/sbin/hactl-haproxy",
            "is",
            "etcd-client",
            "spare1",
            "UP",
        ],
    );
    assert!(o.status.success(), "spare1 is not UP on lb1: {}", text(&o));
    let pid_after = lab
        .exec_ok(
            "lb1",
            &["systemctl", "show", "-p", "MainPID", "--value", "haproxy"],
        )
        .trim()
        .to_string();
    assert_eq!(pid_after, haproxy_pid, "HAProxy was restarted, not reloaded");
    assert!(reloads(&lab) > reloads_before, "HAProxy was not reloaded");
    let o = hactl(&inv, &["up", "--yes"]);
    assert!(
        text(&o).contains("no changes"),
        "inventory and cluster disagree after replace: {}",
        text(&o)
    );
}
